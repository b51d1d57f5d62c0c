"""The run record (summary.json): one schema, tolerant reading, steady-epoch statistics, speed-ups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtan_s1s2.run_record import EpochTiming, RunRecord, TimingSummary, speedups, steady_epochs


def _epochs(times: list[float], warmup: int = 1) -> list[EpochTiming]:
    return [EpochTiming(i, t, None, 8, 8 / t, warmup=i < warmup) for i, t in enumerate(times)]


def test_steady_epochs_leave_out_warmup_unless_only_warmup_exists() -> None:
    steady, only = steady_epochs(_epochs([9.0, 2.0, 4.0]))
    assert [e.train_epoch_s for e in steady] == [2.0, 4.0] and not only
    steady, only = steady_epochs(_epochs([9.0], warmup=1))
    assert [e.train_epoch_s for e in steady] == [9.0] and only
    assert steady_epochs([]) == ([], False)


def test_timing_summary_statistics() -> None:
    s = TimingSummary.of(_epochs([9.0, 2.0, 4.0]), warmup_epochs=1)
    assert (s.n_epochs, s.n_timed_epochs, s.warmup_only) == (3, 2, False)
    assert s.median_train_epoch_s == 3.0 and s.mean_train_epoch_s == 3.0
    assert s.std_train_epoch_s == pytest.approx(2**0.5) and s.median_train_samples_per_s == pytest.approx(3.0)
    one = TimingSummary.of(_epochs([9.0, 2.0]), warmup_epochs=1)
    assert one.std_train_epoch_s == 0.0 and one.median_val_epoch_s is None


def test_speedups_for_times_and_rates() -> None:
    times = {"linear": 10.0, "conv": 5.0, "x": None}
    assert speedups(times, "linear", "time") == {"linear": 1.0, "conv": 2.0, "x": None}
    assert speedups({"linear": 2.0, "conv": 3.0}, "linear", "rate") == {"linear": 1.0, "conv": 1.5}
    assert speedups({"conv": 3.0}, "linear", "rate") == {"conv": None}  # no reference


def test_record_round_trips_flat_json_and_keeps_unknown_keys(tmp_path: Path) -> None:
    record = RunRecord(
        backend="channels_last", timing=TimingSummary.of(_epochs([9.0, 2.0]), 1), seed=3, task_name="train",
        metrics={"test/OA": 0.9}, extra={"custom": [1, 2]},
    )  # fmt: skip
    path = record.write(tmp_path / "summary.json")
    data = json.loads(path.read_text())
    assert data["backend"] == "channels_last" and data["median_train_epoch_s"] == 2.0 and data["custom"] == [1, 2]
    assert data["epochs"][0] == {
        "epoch": 0, "train_epoch_s": 9.0, "val_epoch_s": None, "train_samples": 8, "train_samples_per_s": 8 / 9.0,
        "warmup": True, "resumed": False,
    }  # fmt: skip
    back = RunRecord.read(path)
    assert back.timing.epochs == record.timing.epochs and back.seed == 3 and back.extra == {"custom": [1, 2]}
    assert back.to_dict() == data


def test_partial_records_of_failed_runs_read_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"status": "failed", "error": "ValueError: x", "best": None, "epochs": [{"epoch": 0}]}))
    record = RunRecord.read(path)
    assert record.status == "failed" and record.error == "ValueError: x"
    assert record.best == {} and record.timing.epochs == []  # an epoch without a train time is dropped
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        RunRecord.read(path)
