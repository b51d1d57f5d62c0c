"""``mlp=auto``: time every MLP backend on the real batch and keep the fastest.

The winner depends on the machine (GPU vs CPU, precision, thread count, allocator) and on
the shapes, so it is measured where training runs: forward + backward of the whole model
(the MLP workloads in their real context, including the layout conversions that decide
between channels-first and channels-last) on the real first batch, device and autocast
precision, after a warm-up, with CUDA synchronised, as the median of a few repeats.
Decisions are cached per device (on CPU: model, thread count and C allocator), precision,
shapes and widths in a JSON file, so a repeated run does not pay again.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mtan_s1s2.data.batch import modalities_of
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.utils.hardware import hardware
from mtan_s1s2.utils.io import write_json_atomic
from mtan_s1s2.utils.timing import timed_call

log = logging.getLogger(__name__)


def _batch_signature(inputs: Mapping[str, Any]) -> dict[str, list[int]]:
    return {m: list(v["x"].shape) for m, v in inputs.items()}


CACHE_REVISION = 2
"""Bumped whenever a backend's or the model's implementation changes what is fastest, so
that decisions cached by an older version are timed again."""


def cache_key(net: nn.Module, inputs: Mapping[str, Any], device: torch.device, precision: str) -> str:
    """Key of a decision in the cache.

    It holds the device (GPU name, or CPU model, threads and C allocator, which decides
    between backends on CPU), the precision, the matmul precision, input shapes, the
    model's widths and :data:`CACHE_REVISION`.
    """
    hw = hardware(device)
    payload = {
        "revision": CACHE_REVISION,
        "device": hw.get("gpu") or f"{hw['cpu']}|threads={hw['torch_threads']}|allocator={hw['allocator']}",
        "precision": str(precision),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "shapes": _batch_signature(inputs),
        "params": {n: list(p.shape) for n, p in net.named_parameters() if not n.endswith("bias")},
        "torch": torch.__version__,
    }
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _time_step(
    candidate: nn.Module,
    inputs: Mapping[str, Any],
    device: torch.device,
    ctx: Callable[[], contextlib.AbstractContextManager[Any]],
) -> float:
    """Milliseconds of one synchronised forward+backward of ``candidate`` on ``inputs``."""

    def step() -> None:
        with ctx():
            out = candidate(inputs)
        out.float().square().mean().backward()

    elapsed_ms = timed_call(step, device) * 1e3
    candidate.zero_grad(set_to_none=True)
    return elapsed_ms


def time_backend_samples(
    net: MTANClassifier,
    inputs: Mapping[str, Any],
    device: torch.device,
    backends: Sequence[str] | None = None,
    repeats: int = 3,
    warmup: int = 1,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    prune_ratio: float | None = 1.25,
) -> dict[str, list[float]]:
    """Forward+backward times (ms) of a copy of ``net`` per backend, slow backends pruned.

    Two rounds keep the cost low where one backend is clearly slower (on CPU a step takes
    seconds): every backend first runs its ``warmup`` steps and one timed step; only the
    backends whose first time is within ``prune_ratio`` of the fastest first time then run
    the remaining ``repeats - 1`` timed steps.

    Args:
        net: An :class:`~mtan_s1s2.models.mtan.MTANClassifier` (left untouched).
        inputs: The model inputs of a real batch, already on ``device``.
        device: Where to time.
        backends: Backends to time (default: all concrete ones).
        repeats: Timed steps per backend that is not pruned.
        warmup: Untimed steps first (kernel selection, allocator growth).
        autocast: Factory of the precision context training uses (e.g. Lightning's
            ``trainer.precision_plugin.forward_context``).
        prune_ratio: A backend whose first timed step is slower than this factor times the
            fastest first step gets no further repeats; None (or ``inf``) times every
            backend ``repeats`` times.

    Returns:
        Backend name -> its timed steps in milliseconds (one for a pruned backend).

    Raises:
        ValueError: If ``repeats < 1``, ``warmup < 0`` or ``prune_ratio < 1``.
    """
    ctx = autocast or contextlib.nullcontext
    inputs = {m: inputs[m] for m in modalities_of(inputs)}
    return time_backends_pruned(
        net,
        lambda candidate: _time_step(candidate, inputs, device, ctx),
        device=device,
        train=True,
        backends=backends,
        repeats=repeats,
        warmup=warmup,
        prune_ratio=prune_ratio,
    )


def time_backends_pruned(
    net: nn.Module,
    time_one: Callable[[Any], float],
    *,
    device: torch.device,
    train: bool,
    backends: Sequence[str] | None,
    repeats: int,
    warmup: int,
    prune_ratio: float | None,
) -> dict[str, list[float]]:
    """Times (ms) of ``time_one`` on a copy of ``net`` per backend, slow backends pruned.

    Every backend's copy (in train or eval mode) runs ``warmup`` untimed calls and one timed
    call; only the backends whose first time is within ``prune_ratio`` of the fastest first
    time then run ``repeats - 1`` more. Shared by training (forward+backward steps) and
    prediction (forward passes).

    Args:
        net: A network with ``set_backend`` (left untouched).
        time_one: One timed call on a candidate network, returning milliseconds.
        device: Where the copies go.
        train: Copies in train mode (else eval mode).
        backends: Backends to time (default: every one of ``MLP_BACKENDS``).
        repeats: Timed calls of a backend that is not pruned (>= 1).
        warmup: Untimed calls first (>= 0).
        prune_ratio: See above; None times every backend ``repeats`` times.

    Returns:
        Backend name -> its timed calls in milliseconds (one for a pruned backend).

    Raises:
        ValueError: If ``repeats < 1``, ``warmup < 0`` or ``prune_ratio < 1``, before any timing.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}.")
    if prune_ratio is not None and not prune_ratio >= 1:
        raise ValueError(f"prune_ratio must be >= 1 (or None to time every backend fully), got {prune_ratio}.")
    candidates: dict[str, nn.Module] = {}
    samples: dict[str, list[float]] = {}
    for backend in backends or list(MLP_BACKENDS):
        candidate = copy.deepcopy(net).to(device).train(train)
        candidate.set_backend(backend)  # type: ignore[operator]
        for _ in range(warmup):
            time_one(candidate)
        samples[backend] = [time_one(candidate)]
        candidates[backend] = candidate
    fastest_first = min(s[0] for s in samples.values())
    for backend, candidate in candidates.items():
        if prune_ratio is None or samples[backend][0] <= prune_ratio * fastest_first:
            samples[backend] += [time_one(candidate) for _ in range(repeats - 1)]
    return samples


def read_cache(path: str | Path | None) -> dict[str, Any]:
    """The decision cache (:func:`cache_key` -> entry); empty when ``path`` is None, missing or unreadable.

    An unreadable file is ignored with a warning (the next write replaces it).
    """
    if path is None:
        return {}
    path = Path(path).expanduser()
    if not path.exists():
        return {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        log.warning("Ignoring unreadable auto-backend cache %s", path)
        return {}
    return cache if isinstance(cache, dict) else {}


def update_cache(path: str | Path, key: str, entry: Mapping[str, Any]) -> None:
    """Write ``entry`` under ``key`` into the decision cache at ``path``, atomically, keeping the other keys.

    A file that cannot be written is left as it is, with a warning (the next run measures again).
    """
    path = Path(path).expanduser()
    cache = read_cache(path)
    cache[key] = dict(entry)
    try:
        write_json_atomic(path, cache)
    except OSError as err:
        log.warning("Could not write the auto-backend cache %s (%s); the next run times again.", path, err)


def eager_step_ms(
    net: nn.Module,
    inputs: Mapping[str, Any],
    device: torch.device,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    warmup: int = 1,
) -> float:
    """Milliseconds of one eager forward+backward of a copy of ``net`` (any backend) on ``inputs``, after a warm-up.

    Args:
        net: The network (left untouched).
        inputs: The model inputs of a real batch, on ``device``.
        device: Where to time.
        autocast: Precision context of training.
        warmup: Untimed steps first.
    """
    ctx = autocast or contextlib.nullcontext
    candidate = copy.deepcopy(net).to(device).train()
    inputs = {m: inputs[m] for m in modalities_of(inputs)}
    for _ in range(warmup):
        _time_step(candidate, inputs, device, ctx)
    return _time_step(candidate, inputs, device, ctx)


def select_backend(
    net: MTANClassifier,
    inputs: Mapping[str, Any],
    device: torch.device,
    precision: str = "32-true",
    repeats: int = 3,
    cache_file: str | Path | None = None,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    prune_ratio: float | None = 1.25,
) -> dict[str, Any]:
    """Pick the fastest backend for ``net`` on ``inputs``, switch ``net`` to it, and report.

    Args:
        net: An :class:`~mtan_s1s2.models.mtan.MTANClassifier`; switched to the choice.
        inputs: The model inputs of a real batch, already on ``device``.
        device: Where to time.
        precision: Training precision (``trainer.precision``), part of the cache key.
        repeats: Timed steps per backend (see :func:`time_backend_samples`).
        autocast: Precision context of training (see :func:`time_backend_samples`).
        prune_ratio: Pruning of slow backends (see :func:`time_backend_samples`).
        cache_file: JSON file of decisions keyed by :func:`cache_key` (None: no cache).
            An unreadable file is ignored with a warning and rewritten.

    Returns:
        ``{"choice": name, "timings_ms": {backend: median ms}, "samples_ms": {backend:
        [ms, ...]}, "cached": bool, "cost_s": s, "key": cache key}``; a pruned backend has
        one sample.
    """
    inputs = {m: inputs[m] for m in modalities_of(inputs)}
    key = cache_key(net, inputs, device, precision)
    path = Path(cache_file).expanduser() if cache_file else None
    entry = read_cache(path).get(key, {})
    if entry.get("choice") in MLP_BACKENDS:
        result = {**entry, "cached": True, "cost_s": 0.0, "key": key}
    else:
        start = time.perf_counter()
        samples = time_backend_samples(net, inputs, device, repeats=repeats, autocast=autocast, prune_ratio=prune_ratio)
        timings = {b: statistics.median(s) for b, s in samples.items()}
        choice = min(timings, key=timings.__getitem__)
        result = {
            "choice": choice,
            "timings_ms": timings,
            "samples_ms": samples,
            "cached": False,
            "cost_s": time.perf_counter() - start,
            "key": key,
        }
        if path is not None:  # an entry also holds measured compilations: keep them
            update_cache(path, key, {**entry, "choice": choice, "timings_ms": timings, "samples_ms": samples})
    net.set_backend(result["choice"])
    timing_text = ", ".join(f"{b}={ms:.1f} ms" for b, ms in result["timings_ms"].items())
    log.debug(
        "mlp=auto chose %r (forward+backward per step: %s; %s)",
        result["choice"],
        timing_text,
        "cached decision" if result["cached"] else f"measured in {result['cost_s']:.1f} s",
    )
    return result


__all__ = [
    "CACHE_REVISION",
    "cache_key",
    "eager_step_ms",
    "read_cache",
    "select_backend",
    "time_backend_samples",
    "update_cache",
]
