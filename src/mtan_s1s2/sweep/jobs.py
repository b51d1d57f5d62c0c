"""Read the jobs of a Hydra sweep directory: overrides, status, epoch timings, best metrics.

A sweep directory (``logs/<task>/multiruns/<date>_<time>_<host>-<pid>/``) holds
``multirun.yaml`` and one directory per job (``0/``, ``1/``, ...) with ``.hydra/`` (the
job's overrides), ``summary.json`` (:class:`~mtan_s1s2.callbacks.run_summary.RunSummary`)
and ``metrics.csv`` (CSV logger). Anything may be missing: a job that is still running,
was killed, or failed before training has less, and is read as far as it goes.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

JobStatus = Literal["completed", "failed", "interrupted", "incomplete"]

SEED_KEY = "seed"
"""The override that makes repeats of one combination (aggregated into one row)."""

VAL_METRICS: tuple[str, ...] = ("OA", "F1", "mIoU")
"""Validation metrics reported at the epoch with the best ``val/OA``."""


@dataclass
class EpochTime:
    """Training time of one epoch (:class:`~mtan_s1s2.callbacks.timing.EpochTimer`).

    Attributes:
        epoch: 0-based epoch index.
        train_s: Seconds of the training part of the epoch (validation excluded).
        samples_per_s: Training patches per second, if recorded.
        warmup: True for warm-up epochs (one-off costs, left out of the statistics).
    """

    epoch: int
    train_s: float
    samples_per_s: float | None
    warmup: bool


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
        hardware: One-line hardware and torch stamp.
        device_type: ``cuda``, ``cpu``, ... (from the hardware record).
    """

    path: Path
    num: int | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    status: JobStatus = "incomplete"
    error: str | None = None
    backend: str | None = None
    seed: str | None = None
    epochs: list[EpochTime] = field(default_factory=list)
    peak_memory_mb: float | None = None
    best_val: dict[str, float] = field(default_factory=dict)
    hardware: str | None = None
    device_type: str | None = None

    def label(self, keys: Sequence[str] | None = None) -> str:
        """``job 3 (mlp=conv seed=2)``.

        Args:
            keys: Overrides to show (default: all); the seed is always shown.
        """
        shown = [k for k in (self.overrides if keys is None else keys) if k in self.overrides and k != SEED_KEY]
        parts = [f"{k}={self.overrides[k]}" for k in shown] + ([f"{SEED_KEY}={self.seed}"] if self.seed else [])
        name = f"job {self.num}" if self.num is not None else self.path.name
        return f"{name} ({' '.join(parts)})" if parts else name


def _float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


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


def hardware_stamp(summary: dict[str, Any]) -> str | None:
    """One line: GPU (with CUDA) or CPU model and threads, plus the torch version."""
    hw = summary.get("hardware") or {}
    if not hw:
        return None
    if hw.get("gpu"):
        device = f"{hw['gpu']} (CUDA {hw.get('cuda')})"
    else:
        device = f"{hw.get('cpu', 'CPU')} ({hw.get('torch_threads', '?')} threads)"
    torch_version = (summary.get("versions") or {}).get("torch")
    return f"{device}, torch {torch_version}" if torch_version else device


def _epochs_from_summary(summary: dict[str, Any]) -> list[EpochTime]:
    out = []
    for e in summary.get("epochs") or []:
        train_s = _float(e.get("train_epoch_s"))
        if train_s is not None:
            epoch = int(e.get("epoch", len(out)))
            out.append(EpochTime(epoch, train_s, _float(e.get("train_samples_per_s")), bool(e.get("warmup"))))
    return out


def _read_metrics_csv(path: Path) -> tuple[list[EpochTime], dict[str, float]]:
    """Epoch times and the validation metrics of the best ``val/OA`` epoch from ``metrics.csv``."""
    if not path.exists():
        return [], {}
    epochs: list[EpochTime] = []
    best: dict[str, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            epoch = _float(row.get("epoch"))
            train_s = _float(row.get("time/train_epoch_s"))
            if train_s is not None:
                warm = _float(row.get("time/warmup"))
                epochs.append(
                    EpochTime(int(epoch or 0), train_s, _float(row.get("time/train_samples_per_s")), bool(warm))
                )
            oa = _float(row.get("val/OA"))
            if oa is not None and oa > best.get("OA", -math.inf):
                best = {name: v for name in VAL_METRICS if (v := _float(row.get(f"val/{name}"))) is not None}
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
        record.overrides = dict(parse_override(str(o)) for o in overrides)
    hydra_cfg = _load_yaml(path / ".hydra" / "hydra.yaml")
    num = OmegaConf.select(hydra_cfg, "hydra.job.num", default=None) if isinstance(hydra_cfg, DictConfig) else None
    if num is None and path.name.isdigit():
        num = int(path.name)
    record.num = int(num) if num is not None else None

    summary: dict[str, Any] = {}
    summary_path = path / "summary.json"
    if summary_path.exists():
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError) as err:
            record.error = f"summary.json unreadable: {err}"
    if summary:
        status = summary.get("status", "completed")
        record.status = status if status in ("completed", "failed", "interrupted") else "failed"
        record.error = summary.get("error")
    else:
        record.error = record.error or (
            "no summary.json: the job is still running, was stopped before writing it "
            "(killed, out of host memory, time limit), or ran without the run_summary callback"
        )
    record.backend = summary.get("backend")
    seed = record.overrides.get(SEED_KEY, summary.get("seed"))
    record.seed = None if seed is None else str(seed)
    record.peak_memory_mb = _float(summary.get("peak_memory_mb"))
    record.hardware = hardware_stamp(summary)
    record.device_type = str((summary.get("hardware") or {}).get("device", "")).split(":")[0] or None

    csv_epochs, best = _read_metrics_csv(path / "metrics.csv")
    record.epochs = _epochs_from_summary(summary) or csv_epochs
    if not best:
        metrics = summary.get("metrics") or {}
        best = {name: v for name in VAL_METRICS if (v := _float(metrics.get(f"val/{name}"))) is not None}
    record.best_val = best
    return record


def find_job_dirs(sweep_dir: str | Path) -> list[Path]:
    """Job directories under a sweep directory: those with ``.hydra/overrides.yaml`` or
    ``summary.json`` (hidden folders such as ``.submitit`` skipped)."""
    root = Path(sweep_dir)
    found = {p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}
    found |= {p.parent for p in root.rglob("summary.json")}
    found.discard(root)
    visible = [p for p in found if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(visible, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def read_sweep(sweep_dir: str | Path) -> list[JobRecord]:
    """Read every job of a sweep, ordered by Hydra job number."""
    records = [read_job(p) for p in find_job_dirs(sweep_dir)]
    return sorted(records, key=lambda r: (r.num is None, r.num if r.num is not None else 0, str(r.path)))


__all__ = [
    "SEED_KEY",
    "VAL_METRICS",
    "EpochTime",
    "JobRecord",
    "JobStatus",
    "find_job_dirs",
    "hardware_stamp",
    "parse_override",
    "read_job",
    "read_sweep",
]
