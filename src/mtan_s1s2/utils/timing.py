"""Honest wall-clock timing of work on a device: synchronise, warm up, repeat, take the median.

CUDA runs kernels asynchronously, so a host clock read right after a call measures only
the launch. Every timer of the package reads the clock through :func:`clock`, which waits
for the device first:

* :func:`timed_call`: seconds of one call of a function.
* :func:`time_calls`: untimed warm-up calls (kernel selection, allocator growth, lazy
  compilation), then the seconds of each of ``repeats`` calls.
* :func:`median_seconds`: the median of :func:`time_calls`, robust to a slow outlier.
* :class:`Stopwatch`: a span that starts in one hook and stops in another (an epoch, a
  training step of Lightning).

The benchmarks (:mod:`mtan_s1s2.bench.timing`) time many short calls with
:class:`torch.utils.benchmark.Timer` after the same warm-up (:func:`warm_up`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def synchronize(device: torch.device | str | None) -> None:
    """Wait for the kernels queued on a CUDA ``device`` (nothing to wait for on CPU or None)."""
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)


def clock(device: torch.device | str | None = None) -> float:
    """``time.perf_counter()`` in seconds, read after the work queued on ``device`` has finished."""
    synchronize(device)
    return time.perf_counter()


def timed_call(fn: Callable[[], Any], device: torch.device | str | None = None) -> float:
    """Seconds of one call of ``fn``, from a synchronised start to a synchronised end.

    Args:
        fn: The work; all of it (including kernel launches) must happen inside the call.
        device: The device ``fn`` runs on (CUDA is synchronised before and after).
    """
    start = clock(device)
    fn()
    return clock(device) - start


def warm_up(fn: Callable[[], Any], device: torch.device | str | None = None, calls: int = 1) -> None:
    """Call ``fn`` ``calls`` times untimed, then wait for the device.

    Raises:
        ValueError: If ``calls`` is negative.
    """
    if calls < 0:
        raise ValueError(f"warm-up calls must be >= 0, got {calls}.")
    for _ in range(calls):
        fn()
    synchronize(device)


def time_calls(
    fn: Callable[[], Any], device: torch.device | str | None = None, repeats: int = 3, warmup: int = 1
) -> list[float]:
    """Seconds of each of ``repeats`` synchronised calls of ``fn``, after ``warmup`` untimed ones.

    Args:
        fn: The work (see :func:`timed_call`).
        device: The device ``fn`` runs on.
        repeats: Timed calls.
        warmup: Untimed calls first.

    Returns:
        ``repeats`` durations in seconds, in call order.

    Raises:
        ValueError: If ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}.")
    warm_up(fn, device, warmup)
    return [timed_call(fn, device) for _ in range(repeats)]


def median_seconds(
    fn: Callable[[], Any], device: torch.device | str | None = None, repeats: int = 3, warmup: int = 1
) -> float:
    """Median seconds per call of ``fn`` over :func:`time_calls` (same arguments)."""
    return statistics.median(time_calls(fn, device, repeats, warmup))


class Stopwatch:
    """A synchronised span whose start and end are in different places (Lightning hooks).

    Example:
        ``watch.start(device)`` in ``on_train_batch_start``, ``watch.elapsed(device)`` in
        ``on_train_batch_end``.
    """

    def __init__(self) -> None:
        self._start: float | None = None

    @property
    def running(self) -> bool:
        """Whether :meth:`start` was called (and not :meth:`reset` since)."""
        return self._start is not None

    def start(self, device: torch.device | str | None = None) -> None:
        """Start (or restart) the span once ``device`` has finished its queued work."""
        self._start = clock(device)

    def elapsed(self, device: torch.device | str | None = None) -> float:
        """Seconds since :meth:`start`, once ``device`` has finished its queued work.

        Raises:
            RuntimeError: If the stopwatch was never started.
        """
        if self._start is None:
            raise RuntimeError("Stopwatch.elapsed() before Stopwatch.start().")
        return clock(device) - self._start

    def reset(self) -> None:
        """Forget the start."""
        self._start = None


__all__ = ["Stopwatch", "clock", "median_seconds", "synchronize", "time_calls", "timed_call", "warm_up"]
