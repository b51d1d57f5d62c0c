"""Hardware, software-version and memory stamps recorded with every timing."""

from __future__ import annotations

import os
import platform
import resource
import sys
from importlib import metadata
from typing import Any

import torch

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
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device: torch.device | str | None = None) -> dict[str, Any]:
    """Host, CPU, thread count and (on CUDA) GPU name of the machine a run used."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    out: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if device.type == "cuda" and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(device)
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version()
    return out


def peak_memory_mb(device: torch.device | str | None = None) -> float:
    """Peak memory in MiB: CUDA ``max_memory_allocated`` on GPU, else the process peak RSS."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued CUDA kernels so that a host clock reading is honest."""
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)
