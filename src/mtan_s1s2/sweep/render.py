"""The sweep summary rendered: ``summary.csv``, ``jobs.csv``, ``summary.md`` and the console table.

The rows come from :mod:`mtan_s1s2.sweep.aggregate`; this module only formats them (CSV with
six significant digits, seconds and MiB; Markdown and the rich console table with three
significant digits and ``mean ± std``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from mtan_s1s2.models.layers.mlp import REFERENCE_BACKEND
from mtan_s1s2.sweep.aggregate import (
    BACKEND_KEY,
    MIN_TIMED_EPOCHS,
    MODEL_KEY,
    REFERENCE_MODEL,
    STAT_COLUMNS,
    SweepRow,
    SweepSummary,
)
from mtan_s1s2.sweep.ensembles import ENSEMBLE_KIND
from mtan_s1s2.sweep.jobs import PARCEL_METRICS, TEST_METRICS, fold_of

CSV_FILE, MD_FILE, PLOT_FILE = "summary.csv", "summary.md", "epoch_times.png"
JOBS_FILE = "jobs.csv"
"""One line per job (its swept values, seed, fold, status, best val and test metrics)."""

UNRELIABLE_NOTE = (
    f"(unreliable): a job of this row or of its `linear` reference timed fewer than {MIN_TIMED_EPOCHS} "
    "non-warm-up epochs, so the ratio rests on one or two noisy epochs (or on warm-up epochs only); "
    f"train at least {MIN_TIMED_EPOCHS} epochs after the warm-up (e.g. trainer.max_epochs=4)."
)


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
        writer = csv.DictWriter(f, fieldnames=[*summary.keys, *STAT_COLUMNS])
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
        *(f"best_val_{m}" for m in ("OA", "F1", "mIoU")), *(f"test_{m}" for m in TEST_METRICS),
        *(f"test_parcel_{m}" for m in PARCEL_METRICS), "path",
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
            row.update({f"test_parcel_{m}": _csv_value(r.test_parcel.get(m)) for m in PARCEL_METRICS})
            writer.writerow(row)
    return path


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _kind(row: SweepRow) -> str:
    """``runs`` or ``ensemble of N`` (N runs averaged per fold)."""
    return f"ensemble of {row.ensemble_members}" if row.kind == ENSEMBLE_KIND else "runs"


def _member_delta(row: SweepRow) -> str:
    """``+0.012 ± 0.008, +0.020 ± 0.015 (5 folds)``: an ensemble row's paired Δ of OA and F1 with its mean member."""
    parts = []
    folds = 0
    for m in ("OA", "F1"):
        if (d := row.delta_vs_members.get(m)) is not None:
            mean, std, folds = d
            parts.append(f"{mean:+.3f}" + ("" if std is None else f" ± {std:.3f}"))
    return f"{', '.join(parts)} ({folds} fold{'s' if folds != 1 else ''})" if parts else "–"


def table_rows(summary: SweepSummary) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of the human-readable table (Markdown and console).

    Columns for folds, test metrics, parcel-level test metrics and the comparison with the
    reference model appear only when some row has them.
    """
    rows = summary.rows
    multi_hw = len({r.hardware for r in rows if r.hardware}) > 1
    has_folds = any(r.folds for r in rows)
    has_test = any(r.test_mean for r in rows)
    has_parcels = any(r.test_parcel_mean for r in rows)
    has_delta = any(r.delta_vs_ref for r in rows)
    has_peak = any(r.fraction_of_peak for r in rows)
    has_ensemble = any(r.kind == ENSEMBLE_KIND for r in rows)
    header = [
        *summary.keys,
        *(["rows"] if has_ensemble else []),
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
        *(["test OA", "test F1", "test mIoU", "test kappa"] if has_test else []),
        *([f"parcel test {m}" for m in PARCEL_METRICS] if has_parcels else []),
        *([f"Δ test OA vs {REFERENCE_MODEL}"] if has_delta else []),
        *(["Δ ensemble vs mean member (OA, F1)"] if has_ensemble else []),
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
                *([_kind(r)] if has_ensemble else []),
                r.backend or "?",
                r.status,
                f"{len(seeds)} ({' '.join(seeds)})",
                *([" ".join(r.folds) or "–", str(len(r.records) or len(r.jobs))] if has_folds else []),
                _fmt(r.median_train_epoch_s) + (" (warm-up only)" if r.warmup_only else ""),
                mean_std,
                _fmt(r.train_samples_per_s),
                *([_percent(r.fraction_of_peak)] if has_peak else []),
                _fmt(r.peak_memory_mb, 4),
                _pm(r.best_val.get("OA"), r.best_val_std.get("OA")),
                _fmt(r.best_val.get("F1")),
                _fmt(r.best_val.get("mIoU")),
                *([_pm(r.test_mean.get(m), r.test_std.get(m)) for m in TEST_METRICS] if has_test else []),
                *(
                    [_pm(r.test_parcel_mean.get(m), r.test_parcel_std.get(m)) for m in PARCEL_METRICS]
                    if has_parcels
                    else []
                ),
                *([delta] if has_delta else []),
                *([_member_delta(r)] if has_ensemble else []),
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
            "Test metrics: mean ± sample std over the row's runs (seeds and `data.split.fold` folds pooled), each "
            "of the checkpoint the run tested. "
            + (
                f"Δ test OA: mean ± std of the paired differences (same seed and fold) with the "
                f"`{MODEL_KEY}={REFERENCE_MODEL}` row of the same other values."
                if any(r.delta_vs_ref for r in summary.rows)
                else ""
            )
        )
    if any(r.kind == ENSEMBLE_KIND for r in summary.rows):
        lines.append(
            "Ensemble rows: for each fold, the mean of the test probabilities (`test_probabilities.npz`) of the "
            "row's runs that differ only by seed, scored as one model; test metrics: mean ± std over folds; "
            "Δ: paired by fold, the ensemble minus the mean of its members' metrics (each scored from its own file)."
            + (
                " A row whose model reads `a+b`: the runs of those models together (every run of every network of "
                "the fold, each with equal weight; the feature baselines are not joined)."
                if any(r.kind == ENSEMBLE_KIND and "+" in r.params.get(MODEL_KEY, "") for r in summary.rows)
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
    """Print the table with rich (to ``file``, default stdout).

    In a terminal the table fits the terminal's width. Elsewhere (a SLURM log, ``nohup``,
    a pipe) there is no width to fit, so every column gets the width of its longest cell
    and no cell is wrapped.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    header, cells = table_rows(summary)
    table = Table(title=Text(f"Sweep {summary.sweep_dir}: {_counts(summary)}"), title_justify="left")
    for name in header:
        table.add_column(Text(name), overflow="fold")
    for row, cells_ in zip(summary.rows, cells, strict=True):  # Text: values are data, never rich markup
        table.add_row(*map(Text, cells_), style=None if row.status == "completed" else "red")
    console = Console(file=file)
    if not console.is_terminal:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
        console = Console(file=file, width=max(80, sum(widths) + 3 * len(widths) + 1))  # cell padding and borders
    console.print(table)
    if any(r.speedup_reliable is False for r in summary.rows):
        console.print(Text(f"Speed-up {UNRELIABLE_NOTE}", style="yellow"))
    for r in summary.unfinished:
        console.print(Text(f"{r.label(summary.keys)}: {r.status}: {r.error}", style="red"))


__all__ = [
    "CSV_FILE",
    "JOBS_FILE",
    "MD_FILE",
    "PLOT_FILE",
    "UNRELIABLE_NOTE",
    "print_table",
    "short_value",
    "table_rows",
    "to_markdown",
    "write_csv",
    "write_jobs_csv",
]
