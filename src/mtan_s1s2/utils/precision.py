"""Numerical precision: autocast contexts, float32 matmul precision, native bf16 and ``precision: auto``."""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Literal

import torch

Precision = Literal["32-true", "bf16-mixed", "16-mixed", "auto"]
PRECISIONS: tuple[str, ...] = ("32-true", "bf16-mixed", "16-mixed", "auto")
"""The precision vocabulary of every entry point (``trainer.precision`` of train.py and eval.py,
``precision`` of predict.py, ``bench.precisions`` / ``bench.scaling.precision`` /
``bench.epochs.precision``): Lightning's names, plus ``auto``."""

SHORT_NAMES: dict[str, str] = {"32-true": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}
"""The short name of each resolved precision: the autocast dtype of prediction and of the
benchmark's kernels, the GEMM peak of :func:`~mtan_s1s2.utils.flops.gemm_peak`, the
``precision`` of ``summary.json`` ``utilisation`` and of bench rows. The one place that maps
one vocabulary to the other."""

AutocastPrecision = Literal["fp32", "bf16", "fp16"]
AUTOCAST_PRECISIONS: tuple[str, ...] = tuple(SHORT_NAMES.values())
"""Precisions of the prediction and benchmark code: full fp32, or autocast to bf16/fp16
(the short names of :data:`PRECISIONS`)."""

AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
"""Autocast dtype of each reduced precision of :data:`AUTOCAST_PRECISIONS`."""


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of ``precision`` on ``device`` (``fp32``: no autocast).

    Args:
        precision: ``fp32``, ``bf16`` or ``fp16`` (:data:`AUTOCAST_PRECISIONS`).
        device: Where the work runs (its type selects CPU or CUDA autocast).

    Raises:
        ValueError: On another precision name.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in AUTOCAST_DTYPES:
        raise ValueError(f"precision must be one of {list(AUTOCAST_PRECISIONS)}, got {precision!r}.")
    return torch.autocast(device_type=torch.device(device).type, dtype=AUTOCAST_DTYPES[precision])


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


CPU_BF16_FLAGS: tuple[str, ...] = ("avx512_bf16", "amx_bf16")
"""``/proc/cpuinfo`` flags of CPUs that compute bf16 matrix products natively."""

CPUINFO_ENV = "MTAN_S1S2_CPUINFO"
"""Environment variable naming the file read instead of ``/proc/cpuinfo`` (e.g. to run the tests
as on a CPU with or without native bf16: ``MTAN_S1S2_CPUINFO=tests/fixtures/cpuinfo_bf16 pytest``)."""


def cpuinfo_path() -> str:
    """``$MTAN_S1S2_CPUINFO`` if set, else ``/proc/cpuinfo``."""
    return os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo"


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (default :func:`cpuinfo_path`; empty if unreadable)."""
    try:
        with open(cpuinfo or cpuinfo_path()) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_bf16(accelerator: str, cpuinfo: str | None = None) -> tuple[bool, str]:
    """Whether bf16 matrix products run natively on the device training will use, and why.

    Args:
        accelerator: ``cpu``, ``gpu``/``cuda`` or ``auto`` (CUDA when available).
        cpuinfo: Where CPU flags are read (Linux; default :func:`cpuinfo_path`).

    Returns:
        ``(supported, reason)``; on CPUs without AVX512-BF16 or AMX, bf16 is emulated and
        slower than fp32.
    """
    use_cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if use_cuda and torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return True, f"{torch.cuda.get_device_name()} supports bf16"
        return False, f"{torch.cuda.get_device_name()} has no native bf16"
    found = sorted(cpu_flags(cpuinfo) & set(CPU_BF16_FLAGS))
    if found:
        return True, f"the CPU has {', '.join(found)}"
    return False, f"the CPU has none of {', '.join(CPU_BF16_FLAGS)} (bf16 would be emulated, slower than fp32)"


BF16_PRECISIONS: tuple[str, ...] = ("bf16-mixed", "bf16-true", "bf16")
"""``trainer.precision`` values that compute in bf16."""


_LIGHTNING_ALIASES: dict[str, str] = {
    "32": "32-true", "bf16-true": "bf16-mixed", "bf16": "bf16-mixed", "16-true": "16-mixed", "16": "16-mixed",
}  # fmt: skip


def check_precision(value: str, key: str = "trainer.precision") -> str:
    """``value`` if it is one of :data:`PRECISIONS`, else a one-line error naming the right value.

    Args:
        value: A precision from the config.
        key: Its config key, named in the message (``precision``, ``bench.precisions``).

    Raises:
        ValueError: On a short name of an older config (``fp32`` -> ``32-true``) or any
            other value; the message names the key, the value and the valid values.
    """
    if value in PRECISIONS:
        return value
    old = {short: name for name, short in SHORT_NAMES.items()}
    if value in old:
        raise ValueError(f"{key}={value} is now {key}={old[value]} (precisions: {', '.join(PRECISIONS)}).")
    raise ValueError(f"{key}={value!r} is not a precision; use one of {', '.join(PRECISIONS)}.")


def short_precision(precision: str) -> str:
    """The short name (:data:`SHORT_NAMES`) of a resolved precision: ``bf16-mixed`` -> ``bf16``.

    Lightning's other spellings of a trainer's precision (``32``, ``bf16-true``,
    ``16-true``) map to the short name of their dtype.

    Raises:
        ValueError: On ``auto`` (resolve it first with :func:`resolve_precision`) or an
            unknown precision.
    """
    name = _LIGHTNING_ALIASES.get(str(precision), str(precision))
    if name not in SHORT_NAMES:
        raise ValueError(
            f"precision {precision!r} has no short name: resolve auto first; the precisions are "
            f"{', '.join(SHORT_NAMES)}."
        )
    return SHORT_NAMES[name]


def resolve_precision(requested: str, accelerator: str, cpuinfo: str | None = None) -> tuple[str, str]:
    """A precision of :data:`PRECISIONS`, with ``auto`` resolved for this machine.

    ``auto`` is ``bf16-mixed`` where bf16 matrix products are native (CUDA GPUs with bf16,
    CPUs with AVX512-BF16 or AMX) and ``32-true`` elsewhere; the multi-time attention keeps
    its statistics in fp32 either way. Any other value is returned as given; an explicit
    bf16 precision on a device without native bf16 is kept but warned about (one line:
    emulated bf16 trains 3-5x slower than ``32-true`` on such a CPU).

    Args:
        requested: ``trainer.precision`` (``auto``, ``32-true``, ``bf16-mixed``, ...).
        accelerator: ``trainer.accelerator`` (``cpu``, ``gpu``, ``cuda``, ``auto``; a
            ``torch.device`` type works).
        cpuinfo: Where CPU flags are read (default :func:`cpuinfo_path`).

    Returns:
        ``(precision, reason)``.
    """
    if requested != "auto":
        if requested in BF16_PRECISIONS:
            supported, reason = native_bf16(accelerator, cpuinfo)
            if not supported:
                warnings.warn(
                    f"trainer.precision={requested}, but {reason.split(' (')[0]}: bf16 is emulated here, expect "
                    "training 3-5x slower than 32-true; set trainer.precision=auto (or 32-true).",
                    stacklevel=2,
                )
                return requested, f"set in the config; {reason}"
        return requested, "set in the config"
    supported, reason = native_bf16(accelerator, cpuinfo)
    return ("bf16-mixed" if supported else "32-true"), f"auto: {reason}"


__all__ = [
    "AUTOCAST_DTYPES",
    "AUTOCAST_PRECISIONS",
    "BF16_PRECISIONS",
    "CPUINFO_ENV",
    "CPU_BF16_FLAGS",
    "MATMUL_PRECISIONS",
    "PRECISIONS",
    "SHORT_NAMES",
    "AutocastPrecision",
    "Precision",
    "autocast",
    "check_precision",
    "cpu_flags",
    "cpuinfo_path",
    "native_bf16",
    "resolve_precision",
    "set_matmul_precision",
    "short_precision",
]
