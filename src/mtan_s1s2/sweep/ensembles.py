"""The sweep summary's ``ensemble`` rows: the runs of a fold that differ only by seed, averaged.

For every completed row of the summary (one combination of swept values; seeds and folds
pooled), the runs of each fold (``data.split.fold``) are the members of that fold's
ensemble: their ``test_probabilities.npz`` files
(:mod:`mtan_s1s2.ensemble.probabilities`) are averaged pixel by pixel and the mean scored
with the training metrics. The ``ensemble`` row placed after it reports, over the folds:

* ``test_*_mean`` / ``test_*_std``: the ensemble's OA, macro-F1, mIoU and kappa, mean and
  sample standard deviation over folds;
* ``delta_test_*_vs_members`` / ``..._std``: the paired difference, fold by fold, between
  the ensemble and the mean of its members (each member scored from its own file), mean
  and standard deviation over folds (> 0: the ensemble is better than its average member).

A fold needs two or more runs with the file (runs written before it existed have none);
a fold whose runs did not test the same pixels is left out, its reason in the row's ``error``.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence

from mtan_s1s2.ensemble.probabilities import PixelProbabilities, mean_probabilities, read_probabilities
from mtan_s1s2.sweep.jobs import TEST_METRICS, JobRecord, fold_of

log = logging.getLogger(__name__)

ENSEMBLE_KIND = "ensemble"
"""``SweepRow.kind`` of an ensemble row (the others are ``runs``)."""


def fold_ensembles(
    records: Sequence[JobRecord],
) -> tuple[dict[str, tuple[dict[str, float], dict[str, float], int]], list[str]]:
    """The ensemble of each fold of a row's runs.

    Args:
        records: The completed runs of one row.

    Returns:
        ``({fold: (ensemble metrics, mean member metrics, members)}, problems)``; folds
        with fewer than two runs with probabilities are absent, folds whose files do not
        align are named in ``problems``.
    """
    by_fold: dict[str, list[tuple[JobRecord, PixelProbabilities]]] = {}
    problems: list[str] = []
    for job in records:
        try:
            pixels = read_probabilities(job.path)
        except (OSError, ValueError) as err:
            problems.append(f"{job.path}: {err}")
            continue
        if pixels is not None:
            by_fold.setdefault(fold_of(job), []).append((job, pixels))
    out: dict[str, tuple[dict[str, float], dict[str, float], int]] = {}
    for fold, members in by_fold.items():
        if len(members) < 2:
            continue
        try:
            ensemble = mean_probabilities([p for _, p in members])
        except ValueError as err:
            problems.append(f"fold {fold or '(none)'}: {err}")
            continue
        scores = [p.metrics() for _, p in members]
        mean_member = {m: statistics.fmean(s[m] for s in scores) for m in TEST_METRICS if all(m in s for s in scores)}
        out[fold] = (ensemble.metrics(), mean_member, len(members))
    return out, problems


def summarize_folds(
    folds: dict[str, tuple[dict[str, float], dict[str, float], int]],
) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float | None, int]]]:
    """``(test mean, test std, {metric: (mean Δ, std Δ, folds)})`` over the folds of :func:`fold_ensembles`."""
    mean: dict[str, float] = {}
    std: dict[str, float] = {}
    delta: dict[str, tuple[float, float | None, int]] = {}
    for m in TEST_METRICS:
        values = [ens[m] for ens, _, _ in folds.values() if m in ens]
        if values:
            mean[m] = statistics.fmean(values)
            if len(values) > 1:
                std[m] = statistics.stdev(values)
        diffs = [ens[m] - members[m] for ens, members, _ in folds.values() if m in ens and m in members]
        if diffs:
            delta[m] = (statistics.fmean(diffs), statistics.stdev(diffs) if len(diffs) > 1 else None, len(diffs))
    return mean, std, delta


__all__ = ["ENSEMBLE_KIND", "fold_ensembles", "summarize_folds"]
