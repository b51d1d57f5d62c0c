"""Float32 matmul/convolution precision, set alike for matmuls and cuDNN."""

from __future__ import annotations

from typing import Literal

import torch

MatmulPrecision = Literal["highest", "high", "medium"]
MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high", "medium")


def set_matmul_precision(precision: MatmulPrecision) -> None:
    """Apply one float32 precision to matmuls *and* cuDNN convolutions.

    By default PyTorch lets cuDNN convolutions use TF32 while matmuls stay in full fp32,
    so ``nn.Conv2d`` and ``nn.Linear`` are not compared like for like on GPUs. ``highest``
    keeps both in full fp32; ``high`` and ``medium`` allow TF32 (``medium`` also bf16
    matmuls) for both.

    Args:
        precision: ``"highest"``, ``"high"`` or ``"medium"`` (config key ``matmul_precision``).

    Raises:
        ValueError: On any other value.
    """
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(
            f"matmul_precision must be one of {list(MATMUL_PRECISIONS)}, got {precision!r} "
            "(e.g. `python train.py matmul_precision=high`)."
        )
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = precision != "highest"
