"""The sweep table: one row per combination of swept values, read from what the jobs left.

Rows: one per combination of swept values other than the seed and the cross-validation fold
(``data.fold``; completed jobs of that combination pooled), plus one per failed, interrupted
or incomplete job, with its error. So ``-m model=mtan,random_forest,tempcnn
data.fold=1,2,3,4,5 seed=1,2,3`` gives one row per model, its test metrics as mean ± std
over the 15 folds and seeds, side by side.
Written as ``summary.csv`` (:func:`write_csv`), ``summary.md`` (:func:`to_markdown`) and
printed (:func:`print_table`) by :mod:`mtan_s1s2.sweep.summarize`. It reads only what the
jobs left on disk, so it also summarises a sweep that was interrupted, or one whose jobs ran
on a cluster.

Columns: ``median_train_epoch_s``, ``mean_train_epoch_s``, ``std_train_epoch_s`` pool the
non-warm-up epochs of every seed (``time/train_epoch_s``: training part of the epoch,
validation excluded); ``train_samples_per_s`` is their median throughput;
``peak_memory_mb`` the largest over seeds; ``best_val_*`` the mean over seeds (and folds)
of each run's validation OA / macro-F1 / mIoU at its best-``val/OA`` epoch
(``best_val_OA_std``: their standard deviation); ``test_*_mean`` / ``test_*_std`` the mean
and sample standard deviation over seeds and folds of the test OA, macro-F1, mIoU and kappa
of each run (the checkpoint it tested); ``delta_test_OA_vs_ref`` / ``..._std`` the mean and
standard deviation of the paired differences (same seed and fold) of test OA with the
reference row that differs only in ``model`` (``model=random_forest`` when swept);
``speedup_vs_linear`` = median epoch time of the ``linear`` row with the same other values
/ this row's (> 1: faster than ``mlp=linear``).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from mtan_s1s2.models.layers.mlp import REFERENCE_BACKEND
from mtan_s1s2.run_record import speedups, steady_epochs
from mtan_s1s2.sweep.jobs import (
    POOLED_KEYS,
    TEST_METRICS,
    JobRecord,
    fold_of,
    parse_override,
    read_sweep,
    repeat_key,
)

BACKEND_KEY = "mlp"
"""The config group that selects the backend; ignored when matching a row to its reference."""

MODEL_KEY = "model"
"""The config group that selects the classifier (``mtan``, ``tempcnn``, ``random_forest``)."""

REFERENCE_MODEL = "random_forest"
"""The model every other row's test OA is compared with (paired by seed and fold)."""

CSV_FILE, MD_FILE, PLOT_FILE = "summary.csv", "summary.md", "epoch_times.png"
JOBS_FILE = "jobs.csv"
"""One line per job (its swept values, seed, fold, status, best val and test metrics)."""

MIN_TIMED_EPOCHS = 3
"""Timed (non-warm-up) epochs every job needs for its speed-up to count as reliable."""

UNRELIABLE_NOTE = (
    f"(unreliable): a job of this row or of its `linear` reference timed fewer than {MIN_TIMED_EPOCHS} "
    "non-warm-up epochs, so the ratio rests on one or two noisy epochs (or on warm-up epochs only); "
    f"train at least {MIN_TIMED_EPOCHS} epochs after the warm-up (e.g. trainer.max_epochs=4)."
)

_STAT_COLUMNS: tuple[str, ...] = (
    "backend",
    "status",
    "n_seeds",
    "seeds",
    "jobs",
    "n_timed_epochs",
    "median_train_epoch_s",
    "mean_train_epoch_s",
    "std_train_epoch_s",
    "train_samples_per_s",
    "fraction_of_peak",
    "peak_memory_mb",
    "best_val_OA",
    "best_val_F1",
    "best_val_mIoU",
    "best_val_OA_std",
    "folds",
    *(f"test_{m}_{s}" for m in TEST_METRICS for s in ("mean", "std")),
    "delta_test_OA_vs_ref",
    "delta_test_OA_vs_ref_std",
    "reference",
    "speedup_vs_linear",
    "speedup_reliable",
    "min_timed_epochs_per_job",
    "hardware",
    "error",
)


@dataclass
class SweepRow:
    """One row of the summary: a combination of swept values, or one unfinished job.

    Attributes:
        params: Swept keys other than the seed, ``key -> value``.
        backend: Backend(s) that trained (``"/"``-joined if they differ).
        status: ``completed``, or the status of the single job of a non-completed row.
        jobs: Hydra job numbers in the row.
        seeds: Seeds in the row.
        n_timed_epochs: Non-warm-up epochs pooled (all epochs if every one was warm-up).
        warmup_only: True when only warm-up epochs existed and were used.
        median_train_epoch_s: Median training time per epoch in seconds.
        mean_train_epoch_s: Mean training time per epoch in seconds.
        std_train_epoch_s: Sample standard deviation in seconds (None below 2 epochs).
        train_samples_per_s: Median training patches per second.
        fraction_of_peak: Median over the runs of their counted FLOPs x samples/s over the
            GEMM peak of their device and precision (``summary.json`` ``utilisation``).
        peak_memory_mb: Largest peak memory of the row's runs in MiB.
        best_val: Mean over seeds of ``OA``, ``F1``, ``mIoU`` at each run's best epoch.
        best_val_std: Standard deviation of those (None below 2 runs).
        folds: Cross-validation folds in the row (``data.fold`` of its jobs).
        test_mean: Mean over the runs of each test metric (``OA``, ``F1``, ``mIoU``, ``kappa``).
        test_std: Their sample standard deviation (absent below 2 runs).
        delta_vs_ref: ``(mean, std, pairs)`` of the paired test-OA differences with the
            reference row, or None.
        reference: Label of the reference row (``model=random_forest``).
        speedup_vs_linear: Reference (``linear``) median epoch time / this row's.
        speedup_reliable: False when a job of this row or of its reference row has fewer
            than :data:`MIN_TIMED_EPOCHS` timed epochs; None without a speed-up and for the
            reference row itself.
        min_timed_epochs_per_job: Fewest timed (non-warm-up) epochs of a job of the row
            (0 for a job with warm-up epochs only).
        hardware: Hardware stamp(s), ``"; "``-joined if they differ.
        device_types: Device types of the runs (``cpu``, ``cuda``).
        error: Error of a failed job.
        records: The jobs of the row.
    """

    params: dict[str, str]
    backend: str | None
    status: str
    jobs: list[int | None] = field(default_factory=list)
    seeds: list[str] = field(default_factory=list)
    n_timed_epochs: int = 0
    warmup_only: bool = False
    median_train_epoch_s: float | None = None
    mean_train_epoch_s: float | None = None
    std_train_epoch_s: float | None = None
    train_samples_per_s: float | None = None
    fraction_of_peak: float | None = None
    peak_memory_mb: float | None = None
    best_val: dict[str, float] = field(default_factory=dict)
    best_val_std: dict[str, float] = field(default_factory=dict)
    folds: list[str] = field(default_factory=list)
    test_mean: dict[str, float] = field(default_factory=dict)
    test_std: dict[str, float] = field(default_factory=dict)
    delta_vs_ref: tuple[float, float | None, int] | None = None
    reference: str | None = None
    speedup_vs_linear: float | None = None
    speedup_reliable: bool | None = None
    min_timed_epochs_per_job: int = 0
    hardware: str | None = None
    device_types: set[str] = field(default_factory=set)
    error: str | None = None
    records: list[JobRecord] = field(default_factory=list, repr=False)

    def as_dict(self, keys: Sequence[str]) -> dict[str, Any]:
        """Flat CSV record: the swept ``keys`` first, then :data:`_STAT_COLUMNS`."""
        out: dict[str, Any] = {k: self.params.get(k, "") for k in keys}
        out.update(
            backend=self.backend or "",
            status=self.status,
            n_seeds=len(self.seeds),
            seeds=" ".join(self.seeds),
            jobs=" ".join("?" if j is None else str(j) for j in self.jobs),
            n_timed_epochs=self.n_timed_epochs,
            median_train_epoch_s=self.median_train_epoch_s,
            mean_train_epoch_s=self.mean_train_epoch_s,
            std_train_epoch_s=self.std_train_epoch_s,
            train_samples_per_s=self.train_samples_per_s,
            fraction_of_peak=self.fraction_of_peak,
            peak_memory_mb=self.peak_memory_mb,
            best_val_OA=self.best_val.get("OA"),
            best_val_F1=self.best_val.get("F1"),
            best_val_mIoU=self.best_val.get("mIoU"),
            best_val_OA_std=self.best_val_std.get("OA"),
            folds=" ".join(self.folds),
            **{f"test_{m}_mean": self.test_mean.get(m) for m in TEST_METRICS},
            **{f"test_{m}_std": self.test_std.get(m) for m in TEST_METRICS},
            delta_test_OA_vs_ref=None if self.delta_vs_ref is None else self.delta_vs_ref[0],
            delta_test_OA_vs_ref_std=None if self.delta_vs_ref is None else self.delta_vs_ref[1],
            reference=self.reference or "",
            speedup_vs_linear=self.speedup_vs_linear,
            speedup_reliable="" if self.speedup_reliable is None else self.speedup_reliable,
            min_timed_epochs_per_job=self.min_timed_epochs_per_job,
            hardware=self.hardware or "",
            error=self.error or "",
        )
        return out


@dataclass
class SweepSummary:
    """A summarised sweep.

    Attributes:
        sweep_dir: The sweep root.
        keys: Swept keys other than the seed (the row keys), in command-line order.
        rows: The rows, in job order.
        records: Every job read.
        command: The command line that started the sweep, if known.
        planned_jobs: Number of jobs the sweep planned (basic sweeper only), else None.
    """

    sweep_dir: Path
    keys: list[str]
    rows: list[SweepRow]
    records: list[JobRecord]
    command: str | None = None
    planned_jobs: int | None = None

    @property
    def failed(self) -> list[JobRecord]:
        """Jobs that raised: ``failed`` (error, NaN loss, out of memory) or ``interrupted``."""
        return [r for r in self.records if r.status in ("failed", "interrupted")]

    @property
    def unfinished(self) -> list[JobRecord]:
        """Jobs without a completed ``summary.json``.

        The failed ones, and ``incomplete`` ones (still running, killed, or run without the
        ``run_summary`` callback).
        """
        return [r for r in self.records if r.status != "completed"]


# --------------------------------------------------------------------------- sweep config


def _load_multirun_cfg(sweep_dir: Path) -> DictConfig | None:
    path = sweep_dir / "multirun.yaml"
    if not path.exists():
        return None
    try:
        cfg = OmegaConf.load(path)
    except Exception:
        return None
    return cfg if isinstance(cfg, DictConfig) else None


def _swept_in_config(cfg: DictConfig | None) -> tuple[list[str], int | None]:
    """Keys with sweep syntax in the sweep's overrides or ``hydra.sweeper.params``.

    Also the number of planned jobs (basic sweeper, when it can be parsed).
    """
    if cfg is None:
        return [], None
    task = [str(o) for o in OmegaConf.select(cfg, "hydra.overrides.task", default=[]) or []]
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None)
    params_dict = cast("dict[Any, Any]", OmegaConf.to_container(params) or {}) if params else {}
    params_list = [f"{k}={v}" for k, v in params_dict.items()]
    keys = [parse_override(o)[0] for o in params_list]
    planned = None
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(params_list + task)
        keys += [o.key_or_group for o in parsed if o.is_sweep_override()]
        sweeper = str(OmegaConf.select(cfg, "hydra.runtime.choices", default={}).get("hydra/sweeper", "basic"))
        if sweeper == "basic":
            planned = sum(len(batch) for batch in BasicSweeper.split_arguments(parsed, None))
    except Exception:  # glob() over config groups needs the config loader; plugins' syntax
        keys += [parse_override(o)[0] for o in task if "," in o.partition("=")[2]]
    return [k.lstrip("+~") for k in dict.fromkeys(keys)], planned


def _command(cfg: DictConfig | None) -> str | None:
    if cfg is None:
        return None
    task = [str(o) for o in OmegaConf.select(cfg, "hydra.overrides.task", default=[]) or []]
    hydra_overrides = [
        str(o)
        for o in OmegaConf.select(cfg, "hydra.overrides.hydra", default=[]) or []
        if not str(o).startswith(("hydra.mode=", "hydra.sweep.dir="))
    ]
    return " ".join(["python train.py -m", *task, *hydra_overrides])


def swept_keys(records: Sequence[JobRecord], cfg: DictConfig | None = None) -> list[str]:
    """Keys swept in this sweep, other than the seed.

    A key is swept if it has sweep syntax on the command line or in
    ``hydra.sweeper.params`` (``mlp=linear,conv``), or if its value differs between jobs
    (sweepers such as Optuna choose values per job).

    Args:
        records: The sweep's jobs.
        cfg: The sweep's ``multirun.yaml``.

    Returns:
        The keys, command-line order first.
    """
    configured, _ = _swept_in_config(cfg)
    all_keys = list(dict.fromkeys(k for r in records for k in r.overrides))
    varying = [k for k in all_keys if len({r.overrides.get(k) for r in records}) > 1]
    return [k for k in dict.fromkeys(configured + varying) if k not in POOLED_KEYS]


# ------------------------------------------------------------------------------- rows


def _join(values: Sequence[str | None], sep: str) -> str | None:
    unique = list(dict.fromkeys(v for v in values if v))
    return sep.join(unique) if unique else None


def _completed_row(params: dict[str, str], jobs: Sequence[JobRecord]) -> SweepRow:
    row = SweepRow(params=params, backend=_join([j.backend for j in jobs], "/"), status="completed")
    row.records = list(jobs)
    row.jobs = [j.num for j in jobs]
    row.seeds = [j.seed or "?" for j in jobs]
    timed = []
    per_job = []
    for job in jobs:
        steady, warmup_only = steady_epochs(job.epochs)
        row.warmup_only |= warmup_only
        timed += steady
        per_job.append(0 if warmup_only else len(steady))
    row.min_timed_epochs_per_job = min(per_job) if per_job else 0
    times = [e.train_epoch_s for e in timed]
    rates = [e.train_samples_per_s for e in timed if e.train_samples_per_s is not None]
    row.n_timed_epochs = len(times)
    if times:
        row.median_train_epoch_s = statistics.median(times)
        row.mean_train_epoch_s = statistics.fmean(times)
        row.std_train_epoch_s = statistics.stdev(times) if len(times) > 1 else None
    row.train_samples_per_s = statistics.median(rates) if rates else None
    fractions = [j.fraction_of_peak for j in jobs if j.fraction_of_peak is not None]
    row.fraction_of_peak = statistics.median(fractions) if fractions else None
    peaks = [j.peak_memory_mb for j in jobs if j.peak_memory_mb is not None]
    row.peak_memory_mb = max(peaks) if peaks else None
    for name in ("OA", "F1", "mIoU"):
        values = [j.best_val[name] for j in jobs if name in j.best_val]
        if values:
            row.best_val[name] = statistics.fmean(values)
            if len(values) > 1:
                row.best_val_std[name] = statistics.stdev(values)
    row.folds = list(dict.fromkeys(f for j in jobs if (f := fold_of(j))))
    for name in TEST_METRICS:
        values = [j.test[name] for j in jobs if name in j.test]
        if values:
            row.test_mean[name] = statistics.fmean(values)
            if len(values) > 1:
                row.test_std[name] = statistics.stdev(values)
    row.hardware = _join([j.hardware for j in jobs], "; ")
    row.device_types = {j.device_type for j in jobs if j.device_type}
    return row


def _unfinished_row(params: dict[str, str], job: JobRecord) -> SweepRow:
    row = _completed_row(params, [job])  # keep whatever it timed before failing
    row.status = job.status
    row.error = job.error
    row.speedup_vs_linear = None
    row.speedup_reliable = None
    return row


def _add_speedups(rows: Sequence[SweepRow]) -> None:
    completed = [r for r in rows if r.status == "completed" and r.median_train_epoch_s]
    if len({r.backend for r in completed}) < 2:
        return
    groups: dict[tuple[tuple[str, str], ...], list[SweepRow]] = {}
    for row in completed:  # rows that differ only in the backend are compared
        groups.setdefault(tuple(sorted((k, v) for k, v in row.params.items() if k != BACKEND_KEY)), []).append(row)
    for group in groups.values():
        ref = next((i for i, r in enumerate(group) if r.backend == REFERENCE_BACKEND), None)
        if ref is None:
            continue
        ratios = speedups({str(i): r.median_train_epoch_s for i, r in enumerate(group)}, str(ref), "time")
        ref_epochs = group[ref].min_timed_epochs_per_job
        for i, row in enumerate(group):
            row.speedup_vs_linear = ratios[str(i)]
            if row.speedup_vs_linear is not None and i != ref:  # the reference's 1.00x holds by definition
                row.speedup_reliable = min(row.min_timed_epochs_per_job, ref_epochs) >= MIN_TIMED_EPOCHS


def _add_reference_deltas(rows: Sequence[SweepRow]) -> None:
    """Paired test-OA differences with the ``model=random_forest`` row of the same other values."""
    completed = [r for r in rows if r.status == "completed" and MODEL_KEY in r.params]
    groups: dict[tuple[tuple[str, str], ...], list[SweepRow]] = {}
    for row in completed:
        other = tuple(sorted((k, v) for k, v in row.params.items() if k not in (MODEL_KEY, BACKEND_KEY)))
        groups.setdefault(other, []).append(row)
    for group in groups.values():
        ref = next((r for r in group if r.params.get(MODEL_KEY) == REFERENCE_MODEL), None)
        if ref is None:
            continue
        ref_oa = {repeat_key(j): j.test["OA"] for j in ref.records if "OA" in j.test}
        for row in group:
            if row is ref:
                continue
            diffs = [j.test["OA"] - ref_oa[k] for j in row.records if "OA" in j.test and (k := repeat_key(j)) in ref_oa]
            if diffs:
                std = statistics.stdev(diffs) if len(diffs) > 1 else None
                row.delta_vs_ref = (statistics.fmean(diffs), std, len(diffs))
                row.reference = f"{MODEL_KEY}={REFERENCE_MODEL}"


def build_rows(records: Sequence[JobRecord], keys: Sequence[str]) -> list[SweepRow]:
    """Pool completed jobs per combination of ``keys``; one row per unfinished job.

    Args:
        records: The sweep's jobs.
        keys: Swept keys other than the seed.

    Returns:
        Rows in order of their first job, with speed-ups filled in.
    """
    groups: dict[tuple[str, ...], list[JobRecord]] = {}
    rows: list[tuple[int, SweepRow]] = []
    order: dict[tuple[str, ...], int] = {}
    for i, record in enumerate(records):
        params = {k: record.overrides.get(k, "") for k in keys}
        combo = tuple(params.values())
        if record.status == "completed":
            groups.setdefault(combo, []).append(record)
            order.setdefault(combo, i)
        else:
            rows.append((i, _unfinished_row(params, record)))
    for combo, jobs in groups.items():
        rows.append((order[combo], _completed_row(dict(zip(keys, combo, strict=True)), jobs)))
    ordered = [row for _, row in sorted(rows, key=lambda item: item[0])]
    _add_speedups(ordered)
    _add_reference_deltas(ordered)
    return ordered


def summarize_sweep(sweep_dir: str | Path) -> SweepSummary:
    """Read a sweep directory and build its rows (writes nothing).

    Args:
        sweep_dir: The sweep root (with ``multirun.yaml`` and one directory per job).

    Returns:
        The summary.

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist, or holds no job directory.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(
            f"Sweep directory not found: {str(sweep_dir)!r}. Pass the folder that holds multirun.yaml."
        )
    records = read_sweep(sweep_dir)
    if not records:
        raise FileNotFoundError(
            f"No job directories (with .hydra/overrides.yaml or summary.json) under {str(sweep_dir)!r}. "
            "Pass a sweep directory such as logs/train/multiruns/<date>_<time>_<host>-<pid>."
        )
    cfg = _load_multirun_cfg(sweep_dir)
    keys = swept_keys(records, cfg)
    _, planned = _swept_in_config(cfg)
    return SweepSummary(sweep_dir, keys, build_rows(records, keys), records, _command(cfg), planned)


# ------------------------------------------------------------------------------ output


def _fmt(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits, trailing zeros kept (``31.0``, ``0.371``, ``1767``)."""
    if value is None:
        return "–"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return f"{value:#.{digits}g}".rstrip(".")


def short_value(text: str, digits: int = 4) -> str:
    """A swept value for display.

    Floats get ``digits`` significant digits (Optuna's ``0.005647617424572882`` ->
    ``0.005648``), anything else is unchanged.
    """
    try:
        number = float(text)
    except ValueError:
        return text
    if text.lstrip("+-").isdigit() or number != number:  # ints, nan
        return text
    return f"{number:.{digits}g}"


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else value


def write_csv(summary: SweepSummary, path: str | Path) -> Path:
    """Write ``summary.csv`` (machine-readable, one line per row, seconds and MiB)."""
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*summary.keys, *_STAT_COLUMNS])
        writer.writeheader()
        for row in summary.rows:
            writer.writerow({k: _csv_value(v) for k, v in row.as_dict(summary.keys).items()})
    return path


def _pm(mean: float | None, std: float | None) -> str:
    """``0.712 ± 0.034`` (``0.712`` without a spread, ``–`` without a value)."""
    if mean is None:
        return "–"
    return _fmt(mean) if std is None else f"{_fmt(mean)} ± {_fmt(std, 2)}"


def write_jobs_csv(summary: SweepSummary, path: str | Path) -> Path:
    """Write ``jobs.csv``: one line per job, for per-fold and per-seed figures and audits."""
    path = Path(path)
    columns = [
        "job", *summary.keys, "seed", "fold", "status", "backend",
        *(f"best_val_{m}" for m in ("OA", "F1", "mIoU")), *(f"test_{m}" for m in TEST_METRICS), "path",
    ]  # fmt: skip
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in summary.records:
            row: dict[str, Any] = {"job": "" if r.num is None else r.num, "seed": r.seed or "", "status": r.status}
            row.update({k: r.overrides.get(k, "") for k in summary.keys})
            row.update(fold=fold_of(r), backend=r.backend or "", path=str(r.path))
            row.update({f"best_val_{m}": _csv_value(r.best_val.get(m)) for m in ("OA", "F1", "mIoU")})
            row.update({f"test_{m}": _csv_value(r.test.get(m)) for m in TEST_METRICS})
            writer.writerow(row)
    return path


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def table_rows(summary: SweepSummary) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of the human-readable table (Markdown and console).

    Columns for folds, test metrics and the comparison with the reference model appear
    only when some row has them.
    """
    rows = summary.rows
    multi_hw = len({r.hardware for r in rows if r.hardware}) > 1
    has_folds = any(r.folds for r in rows)
    has_test = any(r.test_mean for r in rows)
    has_delta = any(r.delta_vs_ref for r in rows)
    has_peak = any(r.fraction_of_peak for r in rows)
    header = [
        *summary.keys,
        "backend",
        "status",
        "seeds",
        *(["folds", "runs"] if has_folds else []),
        "train epoch median (s)",
        "mean ± std (s)",
        "samples/s",
        *(["of GEMM peak"] if has_peak else []),
        "peak mem (MiB)",
        "best val OA",
        "best val F1",
        "best val mIoU",
        *(["test OA", "test F1", "test mIoU"] if has_test else []),
        *([f"Δ test OA vs {REFERENCE_MODEL}"] if has_delta else []),
        f"speed-up vs {REFERENCE_BACKEND}",
    ] + (["hardware"] if multi_hw else [])
    cells = []
    for r in rows:
        mean_std = (
            "–" if r.mean_train_epoch_s is None else f"{_fmt(r.mean_train_epoch_s)} ± {_fmt(r.std_train_epoch_s)}"
        )
        speedup = "–" if r.speedup_vs_linear is None else f"{r.speedup_vs_linear:.2f}x"
        if r.speedup_reliable is False:
            speedup += " (unreliable)"
        seeds = list(dict.fromkeys(r.seeds))
        delta = "–"
        if r.delta_vs_ref is not None:
            mean, std, n = r.delta_vs_ref
            delta = f"{mean:+.3f}" + ("" if std is None else f" ± {std:.3f}") + f" ({n} pairs)"
        cells.append(
            [
                *(short_value(r.params.get(k, "")) for k in summary.keys),
                r.backend or "?",
                r.status,
                f"{len(seeds)} ({' '.join(seeds)})",
                *([" ".join(r.folds) or "–", str(len(r.records))] if has_folds else []),
                _fmt(r.median_train_epoch_s) + (" (warm-up only)" if r.warmup_only else ""),
                mean_std,
                _fmt(r.train_samples_per_s),
                *([_percent(r.fraction_of_peak)] if has_peak else []),
                _fmt(r.peak_memory_mb, 4),
                _pm(r.best_val.get("OA"), r.best_val_std.get("OA")),
                _fmt(r.best_val.get("F1")),
                _fmt(r.best_val.get("mIoU")),
                *([_pm(r.test_mean.get(m), r.test_std.get(m)) for m in ("OA", "F1", "mIoU")] if has_test else []),
                *([delta] if has_delta else []),
                speedup,
            ]
            + ([r.hardware or "?"] if multi_hw else [])
        )
    return header, cells


def _counts(summary: SweepSummary) -> str:
    statuses = [r.status for r in summary.records]
    parts = [f"{statuses.count(s)} {s}" for s in ("completed", "failed", "interrupted", "incomplete") if s in statuses]
    text = f"{len(statuses)} jobs ({', '.join(parts)})"
    if summary.planned_jobs is not None and summary.planned_jobs > len(statuses):
        text += f"; {summary.planned_jobs - len(statuses)} of {summary.planned_jobs} planned jobs never started"
    return text


def to_markdown(summary: SweepSummary) -> str:
    """``summary.md``: command, hardware, the table, notes and the failed jobs."""
    header, cells = table_rows(summary)
    hardware = list(dict.fromkeys(r.hardware for r in summary.rows if r.hardware))
    lines = [f"# Sweep summary: `{summary.sweep_dir.name}`", ""]
    if summary.command:
        lines += [f"Command: `{summary.command}`", ""]
    lines += [f"Jobs: {_counts(summary)}.", ""]
    if len(hardware) == 1:
        lines += [f"Hardware: {hardware[0]}.", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    lines += [
        "",
        "Train-epoch times pool the non-warm-up epochs of every seed (training part of the epoch, "
        f"validation excluded). Speed-up = median epoch time of `{BACKEND_KEY}={REFERENCE_BACKEND}` "
        "/ this row's (> 1: faster). Best val metrics: mean (± std) over seeds and folds, each at the run's "
        "best-val/OA epoch.",
    ]
    if any(r.speedup_reliable is False for r in summary.rows):
        lines.append(f"Speed-up {UNRELIABLE_NOTE}")
    if any(r.test_mean for r in summary.rows):
        lines.append(
            "Test metrics: mean ± sample std over the row's runs (seeds and `data.fold` folds pooled), each "
            "of the checkpoint the run tested. "
            + (
                f"Δ test OA: mean ± std of the paired differences (same seed and fold) with the "
                f"`{MODEL_KEY}={REFERENCE_MODEL}` row of the same other values."
                if any(r.delta_vs_ref for r in summary.rows)
                else ""
            )
        )
    if any(r.fraction_of_peak for r in summary.rows):
        lines.append(
            "Of GEMM peak: the model's counted forward+backward FLOPs per sample x samples/s, over a large "
            "matrix product timed on the same device and precision at the end of each run (median over runs)."
        )
    if any("cpu" in r.device_types for r in summary.rows):
        lines.append(
            "Peak memory on CPU is the process's peak RSS; jobs run one after another in one process "
            "(basic and joblib launchers) carry earlier jobs' peaks over."
        )
    if summary.unfinished:
        lines += ["", "## Jobs that did not complete", ""]
        lines += [
            f"- {r.label(summary.keys)}: **{r.status}**: {r.error or 'no error recorded'} (`{r.path}`)"
            for r in summary.unfinished
        ]
    return "\n".join(lines) + "\n"


def print_table(summary: SweepSummary, file: Any = None) -> None:
    """Print the table with rich (to ``file``, default stdout)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    header, cells = table_rows(summary)
    table = Table(title=Text(f"Sweep {summary.sweep_dir}: {_counts(summary)}"), title_justify="left")
    for name in header:
        table.add_column(Text(name), overflow="fold")
    for row, cells_ in zip(summary.rows, cells, strict=True):  # Text: values are data, never rich markup
        table.add_row(*map(Text, cells_), style=None if row.status == "completed" else "red")
    console = Console(file=file, width=max(160, Console(file=file).width))
    console.print(table)
    if any(r.speedup_reliable is False for r in summary.rows):
        console.print(Text(f"Speed-up {UNRELIABLE_NOTE}", style="yellow"))
    for r in summary.unfinished:
        console.print(Text(f"{r.label(summary.keys)}: {r.status}: {r.error}", style="red"))


__all__ = [
    "BACKEND_KEY",
    "CSV_FILE",
    "JOBS_FILE",
    "MD_FILE",
    "MIN_TIMED_EPOCHS",
    "MODEL_KEY",
    "PLOT_FILE",
    "REFERENCE_MODEL",
    "UNRELIABLE_NOTE",
    "SweepRow",
    "SweepSummary",
    "build_rows",
    "print_table",
    "short_value",
    "summarize_sweep",
    "swept_keys",
    "table_rows",
    "to_markdown",
    "write_csv",
    "write_jobs_csv",
]
