"""The one timer of the package: synchronised, warmed up, repeated, median."""

from __future__ import annotations

import time

import pytest
import torch

from mtan_s1s2.utils.timing import Stopwatch, median_seconds, time_calls, timed_call, warm_up


class _Sleeper:
    """Sleeps for the next duration of a list at each call, recording the calls."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.calls = 0

    def __call__(self) -> None:
        time.sleep(self.durations[self.calls])
        self.calls += 1


def test_timed_call_measures_the_call():
    seconds = timed_call(lambda: time.sleep(0.05), torch.device("cpu"))
    assert 0.05 <= seconds < 0.5


def test_time_calls_skips_the_warmup_and_keeps_call_order():
    fn = _Sleeper([0.2, 0.01, 0.06, 0.03])  # the first (warm-up) call is the slow one
    times = time_calls(fn, "cpu", repeats=3, warmup=1)
    assert fn.calls == 4 and len(times) == 3
    assert times[0] >= 0.01 and times[1] >= 0.06 and times[2] >= 0.03
    assert all(t < 0.2 for t in times)  # the warm-up was not timed
    assert times[1] > times[2] > times[0]


def test_median_seconds_is_the_median_of_real_runs():
    fn = _Sleeper([0.0, 0.01, 0.12, 0.04])  # median of the three timed calls: the 0.04 s one
    median = median_seconds(fn, None, repeats=3, warmup=1)
    assert 0.04 <= median < 0.12


def test_bad_counts_raise():
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        time_calls(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warm-up calls must be >= 0, got -1"):
        warm_up(lambda: None, calls=-1)


def test_stopwatch_spans_two_places():
    watch = Stopwatch()
    assert not watch.running
    with pytest.raises(RuntimeError, match=r"before Stopwatch\.start"):
        watch.elapsed()
    watch.start("cpu")
    time.sleep(0.03)
    assert watch.running and 0.03 <= watch.elapsed("cpu") < 0.5
    watch.reset()
    assert not watch.running
