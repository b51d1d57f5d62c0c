"""Sweep summary: which backend trains faster here, and at what accuracy.

``python -m mtan_s1s2.sweep.summarize SWEEP_DIR`` (run automatically at the end of every
multirun by :class:`~mtan_s1s2.sweep.callback.SweepSummaryCallback`) writes, at the sweep
root:

* ``summary.csv``: one row per combination of swept values other than the seed
  (completed jobs of that combination pooled), plus one row per failed, interrupted or
  incomplete job, with its error (:mod:`mtan_s1s2.sweep.aggregate`);
* ``summary.md``: the same table for humans, the command, hardware and the failures;
* ``jobs.csv``: one line per job (seed, fold, best val and test metrics);
* ``epoch_times.png``: training time of every epoch, by backend
  (:mod:`mtan_s1s2.sweep.plot`);

and prints the table.

Columns: ``median_train_epoch_s``, ``mean_train_epoch_s``, ``std_train_epoch_s`` pool the
non-warm-up epochs of every seed (``time/train_epoch_s``: training part of the epoch,
validation excluded); ``train_samples_per_s`` is their median throughput;
``peak_memory_mb`` the largest over seeds; ``best_val_*`` the mean over seeds of each run's
validation OA / macro-F1 / mIoU at its best-``val/OA`` epoch; ``speedup_vs_linear`` =
median epoch time of the ``linear`` row with the same other values / this row's (> 1:
faster than ``mlp=linear``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mtan_s1s2.sweep.aggregate import SweepSummary, summarize_sweep
from mtan_s1s2.sweep.plot import plot_epoch_times
from mtan_s1s2.sweep.render import (
    CSV_FILE,
    JOBS_FILE,
    MD_FILE,
    PLOT_FILE,
    print_table,
    to_markdown,
    write_csv,
    write_jobs_csv,
)


def write_summary(sweep_dir: str | Path, plot: bool = True, console: bool = True) -> SweepSummary:
    """Summarise a sweep: write ``summary.csv``, ``summary.md``, ``epoch_times.png``, print.

    Args:
        sweep_dir: The sweep root.
        plot: Also write ``epoch_times.png``.
        console: Print the table.

    Returns:
        The summary (``.failed`` lists the jobs that raised, ``.unfinished`` also those
        without a summary).

    Raises:
        FileNotFoundError: ``sweep_dir`` does not exist, or holds no job directory.
    """
    summary = summarize_sweep(sweep_dir)
    write_csv(summary, summary.sweep_dir / CSV_FILE)
    write_jobs_csv(summary, summary.sweep_dir / JOBS_FILE)
    (summary.sweep_dir / MD_FILE).write_text(to_markdown(summary))
    if plot:
        plot_epoch_times(summary, summary.sweep_dir / PLOT_FILE)
    if console:
        print_table(summary)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mtan_s1s2.sweep.summarize SWEEP_DIR [--no-plot] [--quiet]``.

    Returns:
        0 when the summary was written (whatever the jobs' status), 2 when ``SWEEP_DIR``
        holds no sweep.
    """
    parser = argparse.ArgumentParser(
        prog="python -m mtan_s1s2.sweep.summarize",
        description="(Re)build summary.csv, summary.md and epoch_times.png of a Hydra sweep directory.",
    )
    parser.add_argument("sweep_dir", type=Path, help="sweep root, e.g. logs/train/multiruns/<date>_<time>_<host>-<pid>")
    parser.add_argument("--no-plot", action="store_true", help="skip epoch_times.png")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    args = parser.parse_args(argv)
    try:
        summary = write_summary(args.sweep_dir, plot=not args.no_plot, console=not args.quiet)
    except FileNotFoundError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    print(f"Wrote {summary.sweep_dir / CSV_FILE}, {JOBS_FILE}, {MD_FILE}" + ("" if args.no_plot else f", {PLOT_FILE}"))
    return 0


__all__ = ["main", "write_summary"]


if __name__ == "__main__":
    sys.exit(main())
