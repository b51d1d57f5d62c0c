"""The sweep summary's rows: one per combination of swept values, read from what the jobs left.

Rows: one per combination of swept values other than the seed and the cross-validation fold
(``data.split.fold``; completed jobs of that combination pooled), plus one per failed, interrupted
or incomplete job, with its error. So ``-m model=mtan,random_forest,tempcnn
data.split.fold=1,2,3,4,5 seed=1,2,3`` gives one row per model, its test metrics as mean ± std
over the 15 folds and seeds, side by side.
Written as ``summary.csv``, ``summary.md`` and printed by :mod:`mtan_s1s2.sweep.render`
(called by :mod:`mtan_s1s2.sweep.summarize`). It reads only what the
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

After each row whose runs wrote ``test_probabilities.npz``, an ``ensemble`` row (``kind``
``ensemble``): per fold, the mean of the probabilities of the runs that differ only by seed;
its test metrics as mean ± std over folds and the paired Δ against the mean member
(``delta_test_*_vs_members``; :mod:`mtan_s1s2.sweep.ensembles`). ``ensemble_members`` is
the number of runs averaged per fold.

When ``model`` is swept, a last ``ensemble`` row per combination of the other values joins
the models (``model`` reads ``mtan_real+tempcnn``): per fold, the mean of the probabilities of
every run of every network (the feature baselines, which save no checkpoint, are left out),
each run with equal weight (so each model with equal weight when they ran the same seeds):
what ``eval.py`` / ``predict.py`` give with those run folders as ``ckpt_path`` when the runs
kept as many checkpoints (``model.checkpoint_ensemble``; they weigh each checkpoint). It needs every
run of those models to have written its file; otherwise the row is left out with a warning
naming the runs without one.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, probability_files
from mtan_s1s2.models.layers.mlp import REFERENCE_BACKEND
from mtan_s1s2.run_record import speedups, steady_epochs
from mtan_s1s2.sweep.ensembles import ENSEMBLE_KIND, fold_ensembles, summarize_folds
from mtan_s1s2.sweep.jobs import (
    PARCEL_METRICS,
    POOLED_KEYS,
    TEST_METRICS,
    JobRecord,
    fold_of,
    parse_override,
    read_sweep,
    repeat_key,
)
from mtan_s1s2.utils.configs import typed_overrides

log = logging.getLogger(__name__)

BACKEND_KEY = "mlp"
"""The config group that selects the backend; ignored when matching a row to its reference."""

MODEL_KEY = "model"
"""The config group that selects the classifier (``mtan``, ``tempcnn``, ``random_forest``)."""

REFERENCE_MODEL = "random_forest"
"""The model every other row's test OA is compared with (paired by seed and fold)."""

MIN_TIMED_EPOCHS = 3
"""Timed (non-warm-up) epochs every job needs for its speed-up to count as reliable."""

STAT_COLUMNS: tuple[str, ...] = (
    "kind",
    "ensemble_members",
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
    *(f"test_parcel_{m}_{s}" for m in PARCEL_METRICS for s in ("mean", "std")),
    "delta_test_OA_vs_ref",
    "delta_test_OA_vs_ref_std",
    "reference",
    *(f"delta_test_{m}_vs_members{s}" for m in TEST_METRICS for s in ("", "_std")),
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
        folds: Cross-validation folds in the row (``data.split.fold`` of its jobs).
        test_mean: Mean over the runs of each test metric (``OA``, ``F1``, ``mIoU``, ``kappa``).
        test_std: Their sample standard deviation (absent below 2 runs).
        test_parcel_mean: Mean over the runs of each parcel-level test metric (``OA``, ``F1``,
            ``kappa`` of ``test_parcel/*``; empty without parcels; not for ensemble rows).
        test_parcel_std: Their sample standard deviation (absent below 2 runs).
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
        error: Error of a failed job (of an ensemble row: the folds left out, and why).
        records: The jobs of the row (none for an ensemble row: its jobs are in ``jobs``).
        kind: ``runs`` (mean ± std over the runs) or ``ensemble`` (the seeds of each fold
            averaged; mean ± std over folds).
        ensemble_members: An ensemble row's runs per fold (``"3"``, ``"2-3"``), else None.
        delta_vs_members: An ensemble row's paired Δ with the mean member per test metric,
            ``(mean, std, folds)``.
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
    test_parcel_mean: dict[str, float] = field(default_factory=dict)
    test_parcel_std: dict[str, float] = field(default_factory=dict)
    delta_vs_ref: tuple[float, float | None, int] | None = None
    reference: str | None = None
    speedup_vs_linear: float | None = None
    speedup_reliable: bool | None = None
    min_timed_epochs_per_job: int = 0
    hardware: str | None = None
    device_types: set[str] = field(default_factory=set)
    error: str | None = None
    records: list[JobRecord] = field(default_factory=list, repr=False)
    kind: str = "runs"
    ensemble_members: str | None = None
    delta_vs_members: dict[str, tuple[float, float | None, int]] = field(default_factory=dict)

    def as_dict(self, keys: Sequence[str]) -> dict[str, Any]:
        """Flat CSV record: the swept ``keys`` first, then :data:`STAT_COLUMNS`."""
        out: dict[str, Any] = {k: self.params.get(k, "") for k in keys}
        out.update(
            kind=self.kind,
            ensemble_members=self.ensemble_members or "",
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
            **{f"test_parcel_{m}_mean": self.test_parcel_mean.get(m) for m in PARCEL_METRICS},
            **{f"test_parcel_{m}_std": self.test_parcel_std.get(m) for m in PARCEL_METRICS},
            delta_test_OA_vs_ref=None if self.delta_vs_ref is None else self.delta_vs_ref[0],
            delta_test_OA_vs_ref_std=None if self.delta_vs_ref is None else self.delta_vs_ref[1],
            reference=self.reference or "",
            speedup_vs_linear=self.speedup_vs_linear,
            speedup_reliable="" if self.speedup_reliable is None else self.speedup_reliable,
            min_timed_epochs_per_job=self.min_timed_epochs_per_job,
            hardware=self.hardware or "",
            error=self.error or "",
        )
        for m in TEST_METRICS:
            delta = self.delta_vs_members.get(m)
            out[f"delta_test_{m}_vs_members"] = None if delta is None else delta[0]
            out[f"delta_test_{m}_vs_members_std"] = None if delta is None else delta[1]
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


def _overrides(cfg: DictConfig, kind: str) -> list[str]:
    """The command-line overrides of ``hydra.overrides.<kind>`` (``task`` or ``hydra``), as typed."""
    return typed_overrides(OmegaConf.select(cfg, f"hydra.overrides.{kind}", default=None))


def _swept_in_config(cfg: DictConfig | None) -> tuple[list[str], int | None]:
    """Keys with sweep syntax in the sweep's overrides or ``hydra.sweeper.params``.

    Also the number of planned jobs (basic sweeper, when it can be parsed).
    """
    if cfg is None:
        return [], None
    task = _overrides(cfg, "task")
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
    task = _overrides(cfg, "task")
    hydra_overrides = [o for o in _overrides(cfg, "hydra") if not o.startswith(("hydra.mode=", "hydra.sweep.dir="))]
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
    for metrics, means, stds, names in (
        ([j.test for j in jobs], row.test_mean, row.test_std, TEST_METRICS),
        ([j.test_parcel for j in jobs], row.test_parcel_mean, row.test_parcel_std, PARCEL_METRICS),
    ):
        for name in names:
            values = [m[name] for m in metrics if name in m]
            if values:
                means[name] = statistics.fmean(values)
                if len(values) > 1:
                    stds[name] = statistics.stdev(values)
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


def _rows_by_other_values(rows: Sequence[SweepRow], ignored: Sequence[str]) -> list[list[SweepRow]]:
    """``rows`` grouped by their swept values other than the ``ignored`` keys, groups and rows in order."""
    groups: dict[tuple[tuple[str, str], ...], list[SweepRow]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted((k, v) for k, v in row.params.items() if k not in ignored)), []).append(row)
    return list(groups.values())


def _add_speedups(rows: Sequence[SweepRow]) -> None:
    completed = [r for r in rows if r.status == "completed" and r.median_train_epoch_s]
    if len({r.backend for r in completed}) < 2:
        return
    for group in _rows_by_other_values(completed, [BACKEND_KEY]):  # rows that differ only in the backend
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
    for group in _rows_by_other_values(completed, [MODEL_KEY, BACKEND_KEY]):
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


def ensemble_row(row: SweepRow) -> SweepRow | None:
    """The ``ensemble`` row of a completed row (see the module docstring), or None without two runs per fold."""
    folds, problems = fold_ensembles(row.records)
    if not folds:
        if problems:
            log.warning("No ensemble row for %s: %s", row.params, "; ".join(problems))
        return None
    out = SweepRow(params=dict(row.params), backend=row.backend, status="completed", kind=ENSEMBLE_KIND)
    out.jobs, out.seeds = list(row.jobs), list(dict.fromkeys(row.seeds))
    out.folds = [f for f in row.folds if f in folds] or list(folds)
    sizes = sorted({n for _, _, n in folds.values()})
    out.ensemble_members = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    out.test_mean, out.test_std, out.delta_vs_members = summarize_folds(folds)
    out.hardware, out.device_types = row.hardware, set(row.device_types)
    out.error = "; ".join(problems) or None
    return out


def models_ensemble_rows(rows: Sequence[SweepRow]) -> list[SweepRow]:
    """The ``ensemble`` rows of the swept models together (see the module docstring).

    Args:
        rows: The summary's rows.

    Returns:
        One row per combination of the values other than ``model`` that two or more completed
        networks share (runs with ``checkpoints/``, which ``eval.py`` and ``predict.py`` can
        average; the feature baselines are left out), ``model`` = their names ``+``-joined in
        row order.
    """
    networks = [
        r
        for r in rows
        if r.status == "completed"
        and r.kind != ENSEMBLE_KIND
        and MODEL_KEY in r.params
        and all((j.path / "checkpoints").is_dir() for j in r.records)  # runs eval.py can average
    ]
    out: list[SweepRow] = []
    for group in _rows_by_other_values(networks, [MODEL_KEY]):
        if len(group) < 2:
            continue
        models = "+".join(r.params[MODEL_KEY] for r in group)
        missing = [str(j.path) for r in group for j in r.records if not probability_files(j.path)]
        if missing:
            log.warning("No ensemble row for model=%s: runs without %s: %s", models, PROBABILITIES_FILE, missing)
            continue
        backend = "+".join(r.backend or "?" for r in group)
        joined = SweepRow(params={**group[0].params, MODEL_KEY: models}, backend=backend, status="completed")
        joined.records = [j for r in group for j in r.records]
        joined.jobs = [j for r in group for j in r.jobs]
        joined.seeds = [s for r in group for s in r.seeds]
        joined.folds = list(dict.fromkeys(f for r in group for f in r.folds))
        joined.hardware = "; ".join(dict.fromkeys(r.hardware for r in group if r.hardware)) or None
        joined.device_types = {d for r in group for d in r.device_types}
        if (ens := ensemble_row(joined)) is not None:
            out.append(ens)
    return out


def build_rows(records: Sequence[JobRecord], keys: Sequence[str]) -> list[SweepRow]:
    """Pool completed jobs per combination of ``keys``; one row per unfinished job.

    Args:
        records: The sweep's jobs.
        keys: Swept keys other than the seed.

    Returns:
        Rows in order of their first job, with speed-ups filled in, each completed row
        followed by its ``ensemble`` row where its runs wrote test probabilities, then the
        ensembles of the swept models (:func:`models_ensemble_rows`).
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
    with_ensembles: list[SweepRow] = []
    for row in ordered:
        with_ensembles.append(row)
        if row.status == "completed" and (ens := ensemble_row(row)) is not None:
            with_ensembles.append(ens)
    return with_ensembles + models_ensemble_rows(ordered)


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


__all__ = [
    "BACKEND_KEY",
    "MIN_TIMED_EPOCHS",
    "MODEL_KEY",
    "REFERENCE_MODEL",
    "STAT_COLUMNS",
    "SweepRow",
    "SweepSummary",
    "build_rows",
    "ensemble_row",
    "models_ensemble_rows",
    "summarize_sweep",
    "swept_keys",
]
