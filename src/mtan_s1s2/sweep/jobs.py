"""Read the jobs of a Hydra sweep directory: overrides, status, epoch timings, best metrics.

A sweep directory (``logs/<task>/multiruns/<date>_<time>_<host>-<pid>/``) holds
``multirun.yaml`` and one directory per job (``0/``, ``1/``, ...) with ``.hydra/`` (the
job's overrides), ``summary.json`` (a :class:`~mtan_s1s2.run_record.RunRecord`) and
``metrics.csv`` (CSV logger). Anything may be missing: a job that is still running,
was killed, or failed before training has less, and is read as far as it goes.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from mtan_s1s2.run_record import SUMMARY_FILE, EpochTiming, RunRecord, finite_or_none
from mtan_s1s2.utils.configs import typed_overrides

JobStatus = Literal["completed", "failed", "interrupted", "incomplete"]

SEED_KEY = "seed"
"""The override that makes repeats of one combination (aggregated into one row)."""

FOLD_KEY = "data.split.fold"
"""The cross-validation fold of every data source (``-m data.split.fold=1,2,3,4,5``): also pooled into one row."""

POOLED_KEYS: tuple[str, ...] = (SEED_KEY, FOLD_KEY)
"""Overrides whose jobs are repeats of one combination: their metrics are pooled (mean ± std)."""

TEST_METRICS: tuple[str, ...] = ("OA", "F1", "mIoU", "kappa")
"""Test metrics read from ``summary.json`` (``test/OA``, ...)."""

PARCEL_METRICS: tuple[str, ...] = ("OA", "F1", "kappa")
"""Parcel-level test metrics read from ``summary.json`` (``test_parcel/OA``, ...) of runs with
``data.split.parcels`` (pixel probabilities averaged per parcel)."""

VAL_METRICS: tuple[str, ...] = ("OA", "F1", "mIoU")
"""Validation metrics reported at the epoch with the best ``val/OA``."""


@dataclass
class JobRecord:
    """What one job of a sweep left on disk.

    Attributes:
        path: The job's output directory.
        num: Hydra job number (``hydra.job.num``), None if unknown.
        overrides: The job's command-line overrides, ``key -> value`` (``+``/``~`` dropped).
        status: ``completed``, ``failed``, ``interrupted`` (Ctrl-C) or ``incomplete`` (no
            ``summary.json``: still running, killed before writing it, or no
            ``run_summary`` callback).
        error: ``"Type: message"`` of a failed job.
        backend: MLP backend that trained (``linear``, ``conv``, ...).
        seed: The run's seed (as text).
        epochs: Per-epoch training times.
        peak_memory_mb: Peak memory of the run in MiB (CUDA allocator on GPU, process peak
            RSS on CPU).
        best_val: ``OA``, ``F1``, ``mIoU`` at the epoch with the best ``val/OA``.
        test: ``OA``, ``F1``, ``mIoU``, ``kappa`` of the test split (the checkpoint tested),
            empty when the job did not test.
        test_parcel: ``OA``, ``F1``, ``kappa`` over the test parcels (``test_parcel/*``),
            empty when the run had no parcels.
        hardware: One-line hardware and torch stamp.
        fraction_of_peak: Counted FLOPs x samples/s over the GEMM peak of the run's device
            and precision (``summary.json`` ``utilisation``), or None.
        device_type: ``cuda``, ``cpu``, ... (from the hardware record).
    """

    path: Path
    num: int | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    status: JobStatus = "incomplete"
    error: str | None = None
    backend: str | None = None
    seed: str | None = None
    epochs: list[EpochTiming] = field(default_factory=list)
    peak_memory_mb: float | None = None
    best_val: dict[str, float] = field(default_factory=dict)
    test: dict[str, float] = field(default_factory=dict)
    test_parcel: dict[str, float] = field(default_factory=dict)
    hardware: str | None = None
    fraction_of_peak: float | None = None
    device_type: str | None = None

    def label(self, keys: Sequence[str] | None = None) -> str:
        """``job 3 (mlp=conv seed=2)``.

        Args:
            keys: Overrides to show (default: all); the seed is always shown.
        """
        shown = [k for k in (self.overrides if keys is None else keys) if k in self.overrides and k not in POOLED_KEYS]
        shown += [FOLD_KEY] if FOLD_KEY in self.overrides else []
        parts = [f"{k}={self.overrides[k]}" for k in shown] + ([f"{SEED_KEY}={self.seed}"] if self.seed else [])
        name = f"job {self.num}" if self.num is not None else self.path.name
        return f"{name} ({' '.join(parts)})" if parts else name


def parse_override(text: str) -> tuple[str, str]:
    """``"+model.optimizer.lr=1e-3"`` -> ``("model.optimizer.lr", "1e-3")``.

    Args:
        text: One Hydra command-line override.

    Returns:
        ``(key, value)`` with ``+``, ``++``, ``~`` prefixes dropped (value ``""`` for a
        deletion without value).
    """
    key, _, value = text.partition("=")
    return key.strip().lstrip("+~"), value.strip()


def hardware_stamp(record: RunRecord) -> str | None:
    """One line: GPU (with CUDA) or CPU model and threads, plus the torch version."""
    hw = record.hardware
    if not hw:
        return None
    if hw.get("gpu"):
        device = f"{hw['gpu']} (CUDA {hw.get('cuda')})"
    else:
        device = f"{hw.get('cpu', 'CPU')} ({hw.get('torch_threads', '?')} threads)"
    torch_version = record.versions.get("torch")
    return f"{device}, torch {torch_version}" if torch_version else device


def _read_metrics_csv(path: Path) -> tuple[list[EpochTiming], dict[str, float]]:
    """Epoch times and the validation metrics of the best ``val/OA`` epoch from ``metrics.csv``."""
    if not path.exists():
        return [], {}
    epochs: list[EpochTiming] = []
    best: dict[str, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            epoch = finite_or_none(row.get("epoch"))
            train_s = finite_or_none(row.get("time/train_epoch_s"))
            if train_s is not None:
                warm = finite_or_none(row.get("time/warmup"))
                rate = finite_or_none(row.get("time/train_samples_per_s"))
                epochs.append(EpochTiming(int(epoch or 0), train_s, train_samples_per_s=rate, warmup=bool(warm)))
            oa = finite_or_none(row.get("val/OA"))
            if oa is not None and oa > best.get("OA", -math.inf):
                best = {name: v for name in VAL_METRICS if (v := finite_or_none(row.get(f"val/{name}"))) is not None}
    return epochs, best


def _load_yaml(path: Path) -> Any:
    try:
        return OmegaConf.load(path)
    except Exception:  # a half-written file of a killed job
        return None


def read_job(path: str | Path) -> JobRecord:
    """Read one job directory.

    Per-epoch times come from ``summary.json`` (``epochs``), else from ``metrics.csv``
    (``time/train_epoch_s``, ``time/warmup``). Best validation metrics come from
    ``metrics.csv`` (the epoch with the highest ``val/OA``), else from the last values in
    ``summary.json``.

    Args:
        path: The job's output directory.

    Returns:
        The job's record; unreadable files leave fields empty rather than raise.
    """
    path = Path(path)
    record = JobRecord(path=path)
    overrides = _load_yaml(path / ".hydra" / "overrides.yaml")
    if overrides is not None:
        record.overrides = dict(parse_override(o) for o in typed_overrides(overrides))
    hydra_cfg = _load_yaml(path / ".hydra" / "hydra.yaml")
    num = OmegaConf.select(hydra_cfg, "hydra.job.num", default=None) if isinstance(hydra_cfg, DictConfig) else None
    if num is None and path.name.isdigit():
        num = int(path.name)
    record.num = int(num) if num is not None else None

    summary: RunRecord | None = None
    summary_path = path / SUMMARY_FILE
    if summary_path.exists():
        try:
            summary = RunRecord.read(summary_path)
        except (OSError, ValueError) as err:
            record.error = f"{SUMMARY_FILE} unreadable: {err}"
    if summary is not None:
        record.status = summary.status if summary.status in ("completed", "failed", "interrupted") else "failed"  # type: ignore[assignment]
        record.error = summary.error
        record.backend = summary.backend
        record.peak_memory_mb = finite_or_none(summary.peak_memory_mb)
        record.hardware = hardware_stamp(summary)
        record.fraction_of_peak = finite_or_none((summary.utilisation or {}).get("fraction_of_peak"))
        record.device_type = str(summary.hardware.get("device", "")).split(":")[0] or None
    else:
        record.error = record.error or (
            f"no {SUMMARY_FILE}: the job is still running, was stopped before writing it "
            "(killed, out of host memory, time limit), or ran without the run_summary callback"
        )
    seed = record.overrides.get(SEED_KEY, summary.seed if summary else None)
    record.seed = None if seed is None else str(seed)

    csv_epochs, best = _read_metrics_csv(path / "metrics.csv")
    record.epochs = (summary.timing.epochs if summary else []) or csv_epochs
    if not best and summary is not None:
        best = {
            name: v for name in VAL_METRICS if (v := finite_or_none(summary.metrics.get(f"val/{name}"))) is not None
        }
    record.best_val = best
    if summary is not None:
        record.test = {
            name: v for name in TEST_METRICS if (v := finite_or_none(summary.metrics.get(f"test/{name}"))) is not None
        }
        record.test_parcel = {
            name: v
            for name in PARCEL_METRICS
            if (v := finite_or_none(summary.metrics.get(f"test_parcel/{name}"))) is not None
        }
    return record


def repeat_key(record: JobRecord) -> tuple[str, str]:
    """``(seed, fold)`` of a job: jobs of two rows with the same key are paired."""
    return (record.seed or "", fold_of(record))


def fold_of(record: JobRecord) -> str:
    """The job's cross-validation fold (its ``data.split.fold`` override), or ``""``."""
    return record.overrides.get(FOLD_KEY, "")


def find_job_dirs(sweep_dir: str | Path) -> list[Path]:
    """Job directories under a sweep directory.

    Those with ``.hydra/overrides.yaml`` or ``summary.json``; hidden folders such as
    ``.submitit`` are skipped.
    """
    root = Path(sweep_dir)
    found = {p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}
    found |= {p.parent for p in root.rglob(SUMMARY_FILE)}
    found.discard(root)
    visible = [p for p in found if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(visible, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def read_sweep(sweep_dir: str | Path) -> list[JobRecord]:
    """Read every job of a sweep, ordered by Hydra job number."""
    records = [read_job(p) for p in find_job_dirs(sweep_dir)]
    return sorted(records, key=lambda r: (r.num is None, r.num if r.num is not None else 0, str(r.path)))


__all__ = [
    "FOLD_KEY",
    "PARCEL_METRICS",
    "POOLED_KEYS",
    "SEED_KEY",
    "TEST_METRICS",
    "VAL_METRICS",
    "JobRecord",
    "JobStatus",
    "find_job_dirs",
    "fold_of",
    "hardware_stamp",
    "parse_override",
    "read_job",
    "read_sweep",
    "repeat_key",
]
