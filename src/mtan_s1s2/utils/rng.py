"""Random-number-generator states in plain containers, for checkpoints that resume exactly.

A run resumed from a checkpoint must draw the same dropout masks as the run that was not
interrupted, so the checkpoint keeps the states of the global generators (torch, CUDA,
NumPy, Python). They are stored as tensors, lists and tuples only, so that the checkpoint
loads with PyTorch's safe ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng_states() -> dict[str, Any]:
    """The states of the global generators.

    Returns:
        ``{"torch": ByteTensor, "cuda": [ByteTensor, ...] (one per device, empty without
        CUDA), "numpy": [name, [624 ints], pos, has_gauss, cached_gaussian], "python":
        (version, (625 ints), gauss_next)}``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "python": random.getstate(),
    }


def restore_rng_states(states: dict[str, Any]) -> None:
    """Set the global generators to ``states`` (from :func:`capture_rng_states`).

    Missing entries are left alone; CUDA states are restored only when as many devices
    are present.
    """
    if "torch" in states:
        torch.set_rng_state(states["torch"].cpu())
    cuda = states.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    if "numpy" in states:
        name, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "python" in states:
        version, internal, gauss_next = states["python"]
        random.setstate((version, tuple(internal), gauss_next))


__all__ = ["capture_rng_states", "restore_rng_states"]
