"""FLOPs of a workload and the peaks it is compared with: how close to the machine a step runs.

* :func:`count_flops`: floating-point operations of one call (forward, backward included when
  it runs inside), counted by PyTorch's ``FlopCounterMode`` (matmuls and convolutions;
  elementwise work is not counted, so the fraction of peak is the share of the machine's
  GEMM throughput the counted work achieves).
* :func:`model_flops_per_sample`: forward + backward (or forward) FLOPs of a model per sample, counted on
  ``meta`` tensors, so nothing runs, no random number is drawn and no gradient is touched.
* :func:`gemm_peak` and :func:`copy_bandwidth`: the throughput of a large matrix product
  and of a large copy on this device and precision, measured now, the references that
  utilisation figures are fractions of.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mtan_s1s2.utils.timing import time_calls

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of one call of ``fn`` (what ``FlopCounterMode`` counts: matmuls, convolutions)."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def model_flops_per_sample(net: nn.Module, inputs: Mapping[str, Any], backward: bool = True) -> float:
    """Forward + backward (or forward only) FLOPs per sample of ``net`` on a batch shaped like ``inputs``.

    The model and the batch are copied to the ``meta`` device: only shapes are propagated,
    so the count costs no compute and changes no state (weights, gradients, random streams).

    Args:
        net: A module mapping ``inputs`` to an output tensor whose first axis is the batch.
        inputs: A batch (nested dicts of tensors), e.g. ``{modality: {"x", "doy", "mask"}}``.
        backward: Count the backward of a scalar loss on the output too (training); False
            counts the forward pass only (prediction).

    Returns:
        FLOPs per sample.
    """

    def to_meta(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return torch.empty_like(value, device="meta")
        if isinstance(value, Mapping):
            return {k: to_meta(v) for k, v in value.items()}
        return value

    meta_net = copy.deepcopy(net).to("meta")
    meta_inputs = to_meta(inputs)

    def step() -> None:
        out = meta_net(meta_inputs)
        if backward:
            out.float().sum().backward()

    flops = count_flops(step)
    batch = next(v for v in _tensors(meta_inputs)).shape[0]
    return flops / max(int(batch), 1)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def gemm_peak(device: torch.device | str = "cpu", precision: str = "fp32", size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of a ``size x size`` matrix product (the best of ``repeats``) on ``device``.

    Args:
        device: Where to measure.
        precision: ``fp32``, ``bf16`` or ``fp16`` (the operands' dtype).
        size: Matrix side.
        repeats: Timed products; the fastest counts.

    Raises:
        ValueError: On an unknown precision.
    """
    if precision not in _DTYPES:
        raise ValueError(f"precision must be one of {list(_DTYPES)}, got {precision!r}.")
    device = torch.device(device)
    a = torch.randn(size, size, device=device).to(_DTYPES[precision])
    b = torch.randn(size, size, device=device).to(_DTYPES[precision])
    seconds = min(time_calls(lambda: torch.mm(a, b), device, repeats, warmup=1))
    return 2.0 * size**3 / seconds / 1e9


def copy_bandwidth(device: torch.device | str = "cpu", n_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """GB/s moved by a large tensor copy (bytes read + written, the best of ``repeats``)."""
    device = torch.device(device)
    src = torch.empty(n_bytes // 4, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = min(time_calls(lambda: dst.copy_(src), device, repeats, warmup=1))
    return 2.0 * n_bytes / seconds / 1e9


__all__ = ["copy_bandwidth", "count_flops", "gemm_peak", "model_flops_per_sample"]
