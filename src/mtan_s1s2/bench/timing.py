"""Timing primitives: precision contexts and honest timers.

Every measurement is: ``warmup`` untimed calls, accelerator synchronisation, then
:class:`torch.utils.benchmark.Timer` (which synchronises CUDA around every timed block and
runs with the process's thread count, not its default of one thread), summarised by the
median and inter-quartile range of the per-call times.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch.utils import benchmark

from mtan_s1s2.utils.precision import AUTOCAST_PRECISIONS
from mtan_s1s2.utils.timing import timed_call, warm_up

log = logging.getLogger(__name__)


TimerMethod = Literal["adaptive", "blocked", "once"]
TIMER_METHODS: tuple[str, ...] = ("adaptive", "blocked", "once")


def resolve_device(device: str | None) -> torch.device:
    """``"auto"``/None -> ``cuda`` when available, else ``cpu``; anything else as given.

    Raises:
        ValueError: If CUDA is requested but not available.
    """
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"bench.device={device!r} but CUDA is not available here; use bench.device=cpu or auto.")
    return dev


def check_precisions(precisions: list[str], device: torch.device) -> list[str]:
    """Validate precision names for ``device``; ``fp16`` is dropped (with a warning) on CPU.

    Raises:
        ValueError: On an unknown precision name.
    """
    bad = [p for p in precisions if p not in AUTOCAST_PRECISIONS]
    if bad:
        raise ValueError(f"Unknown bench precision(s) {bad}; choose among {list(AUTOCAST_PRECISIONS)}.")
    if device.type != "cuda" and "fp16" in precisions:
        warnings.warn("fp16 autocast is benchmarked on CUDA only; skipping it on CPU.", stacklevel=2)
        precisions = [p for p in precisions if p != "fp16"]
    return list(dict.fromkeys(precisions))


@dataclass(frozen=True)
class TimerConfig:
    """How to time one workload.

    Attributes:
        method: ``"adaptive"`` (:meth:`Timer.adaptive_autorange`: at least 4 blocks, until
            ``min_run_time`` and IQR/median < ``threshold`` or ``max_run_time``),
            ``"blocked"`` (:meth:`Timer.blocked_autorange` with ``min_run_time``) or
            ``"once"`` (one synchronised call: smoke tests only).
        warmup: Untimed calls before timing.
        min_run_time: Seconds of timed calls at least.
        max_run_time: Seconds after which ``adaptive`` stops regardless of spread.
        threshold: ``adaptive`` stops once IQR/median is below this.
    """

    method: TimerMethod = "adaptive"
    warmup: int = 3
    min_run_time: float = 1.0
    max_run_time: float = 10.0
    threshold: float = 0.05

    def __post_init__(self) -> None:
        if self.method not in TIMER_METHODS:
            raise ValueError(f"bench.timer.method must be one of {list(TIMER_METHODS)}, got {self.method!r}.")
        if self.warmup < 0 or self.min_run_time < 0 or self.max_run_time < 0:
            raise ValueError(
                f"bench.timer warmup/min_run_time/max_run_time must be >= 0, got "
                f"{self.warmup}/{self.min_run_time}/{self.max_run_time}."
            )


@dataclass(frozen=True)
class TimingStats:
    """Per-call time statistics of one workload, in milliseconds.

    Attributes:
        median_ms: Median per-call time over the timed blocks.
        iqr_ms: Inter-quartile range (p75 - p25) of the per-call block times.
        p25_ms: 25th percentile.
        p75_ms: 75th percentile.
        mean_ms: Mean.
        n_blocks: Timed blocks (each one timer reading).
        calls_per_block: Calls per block (the timer overhead is amortised over these).
    """

    median_ms: float
    iqr_ms: float
    p25_ms: float
    p75_ms: float
    mean_ms: float
    n_blocks: int
    calls_per_block: int

    @property
    def spread(self) -> float:
        """IQR / median (relative spread; 0.05 = 5 %)."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        """The statistics and the relative spread as a flat dict (one CSV row)."""
        return {**asdict(self), "spread": self.spread}


def time_callable(fn: Callable[[], Any], device: torch.device, cfg: TimerConfig) -> TimingStats:
    """Time ``fn()`` after ``cfg.warmup`` untimed calls.

    Args:
        fn: The workload; it must do all its work (including CUDA launches) per call.
        device: Device to synchronise (CUDA) before and during timing.
        cfg: Timer settings.

    Returns:
        Per-call statistics in milliseconds.
    """
    warm_up(fn, device, cfg.warmup)
    if cfg.method == "once":
        ms = timed_call(fn, device) * 1e3
        return TimingStats(ms, 0.0, ms, ms, ms, 1, 1)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    if cfg.method == "blocked":
        m = timer.blocked_autorange(min_run_time=cfg.min_run_time)
    else:
        m = timer.adaptive_autorange(
            threshold=cfg.threshold, min_run_time=cfg.min_run_time, max_run_time=max(cfg.max_run_time, cfg.min_run_time)
        )
    times = torch.tensor(m.times, dtype=torch.float64) * 1e3  # per-call ms of each block
    p25, p50, p75 = (float(q) for q in times.quantile(torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)))
    return TimingStats(
        median_ms=p50,
        iqr_ms=p75 - p25,
        p25_ms=p25,
        p75_ms=p75,
        mean_ms=float(times.mean()),
        n_blocks=len(times),
        calls_per_block=int(m.number_per_run),
    )


__all__ = [
    "TIMER_METHODS",
    "TimerConfig",
    "TimingStats",
    "check_precisions",
    "resolve_device",
    "time_callable",
]
