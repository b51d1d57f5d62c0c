"""Hardware, software-version and memory stamps recorded with every timing."""

from __future__ import annotations

import os
import platform
import resource
import sys
from importlib import metadata
from typing import Any

import torch

from mtan_s1s2.utils.allocator import allocator_name
from mtan_s1s2.utils.precision import cpu_flags, cpuinfo_path

CPU_FLAGS_RECORDED: tuple[str, ...] = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
"""The ``/proc/cpuinfo`` flags that decide fp32 and bf16 speed, recorded with every run and benchmark row."""

_PACKAGES = ("mtan-s1s2", "torch", "lightning", "torchmetrics", "hydra-core", "einops", "numpy")


def versions() -> dict[str, str]:
    """Python and package versions (``"not installed"`` for missing ones)."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _cpu_model() -> str:
    try:
        with open(cpuinfo_path()) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device: torch.device | str | None = None) -> dict[str, Any]:
    """Host, CPU, thread count, C memory allocator and (on CUDA) GPU of the machine a run used.

    The allocator is :func:`~mtan_s1s2.utils.allocator.allocator_name`'s label.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    out: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_flags": [flag for flag in CPU_FLAGS_RECORDED if flag in cpu_flags()],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "allocator": allocator_name(),
    }
    if device.type == "cuda" and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(device)
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    return out


def _read_flag(path: str) -> Any:
    obj: Any = torch.backends
    try:
        for part in path.split("."):
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError):  # missing, or legacy/new TF32 APIs mixed
        return None
    return obj if isinstance(obj, (bool, str, int, float)) or obj is None else str(obj)


_FP32_PRECISION_FLAGS: dict[str, str] = {
    "fp32_precision_global": "fp32_precision",
    "fp32_precision_cuda_matmul": "cuda.matmul.fp32_precision",
    "fp32_precision_cudnn": "cudnn.fp32_precision",
    "fp32_precision_cudnn_conv": "cudnn.conv.fp32_precision",
    "fp32_precision_mkldnn_matmul": "mkldnn.matmul.fp32_precision",
}


def precision_settings() -> dict[str, Any]:
    """Float32 matmul/convolution precision flags in force (what TF32 may be used for).

    ``float32_matmul_precision`` is :func:`torch.get_float32_matmul_precision`;
    ``cuda_matmul_allow_tf32``/``cudnn_allow_tf32`` are the legacy flags (cuDNN allows
    TF32 convolutions by default while matmuls stay fp32); ``cudnn_benchmark`` is cuDNN's
    algorithm autotuning; ``fp32_precision_*`` are the
    per-backend settings of the newer ``torch.backends.*.fp32_precision`` API where this
    torch has it (``"ieee"``, ``"tf32"``, ``"bf16"`` or ``"none"`` = inherit). Flags this
    torch lacks, or refuses to read, are None.
    """
    out: dict[str, Any] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": _read_flag("cuda.matmul.allow_tf32"),
        "cudnn_allow_tf32": _read_flag("cudnn.allow_tf32"),
        "cudnn_benchmark": _read_flag("cudnn.benchmark"),
    }
    for key, path in _FP32_PRECISION_FLAGS.items():
        out[key] = _read_flag(path)
    return out


def peak_memory_mb(device: torch.device | str | None = None) -> float:
    """Peak memory in MiB: CUDA ``max_memory_allocated`` on GPU, else the process peak RSS."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux
