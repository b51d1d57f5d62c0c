"""Where a raster classifier's test errors lie: at class edges or in parcel interiors.

A labelled test pixel is at a **class edge** when one of its 8 neighbours, in the same tested
sample, is a labelled test pixel of another class; the others are **interior** pixels. Edge
pixels are where mixed pixels (20 m bands read on a 10 m grid, parcel borders) and label
offsets show, so their errors are mostly errors of the reference, which no model learns
away; interior errors are the model's. Neighbours outside the test pixels (other splits,
unlabelled or ignored pixels) are not seen, so the edge count is a lower bound. Pixel
tables (every pixel at row 0, col 0 of its own sample) have no edges.

Each run folder's ``test_probabilities.npz`` is read: what its test scored (the mean of its
best epochs with ``model.checkpoint_ensemble``)::

    python scripts/edge_errors.py logs/real/multiruns/<sweep>              # every run under it, and their mean
    python scripts/edge_errors.py --paired <sweep_a> <sweep_b>             # A - B, paired by seed and fold

Runs pair by ``seed`` and ``data.split.fold`` of their ``config.yaml``. Errors are
percentages of the labelled test pixels of each part; a paired Δ is mean ± standard error
over the pairs (pairs higher / lower).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from checkpoint_rules import run_key

from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, RANK_PATTERN, read_probabilities

PARTS = ("all", "edge", "interior")


def class_edges(patch_id: np.ndarray, row: np.ndarray, col: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Which pixels have an 8-neighbour of another class among the given pixels.

    Args:
        patch_id: ``(N,)`` int sample of each pixel.
        row: ``(N,)`` int row inside the sample.
        col: ``(N,)`` int column inside the sample.
        label: ``(N,)`` int class of each pixel (labelled pixels only).

    Returns:
        ``(N,)`` bool, True at class edges.

    Raises:
        ValueError: If the arrays differ in length.
    """
    n = len(label)
    if not len(patch_id) == len(row) == len(col) == n:
        raise ValueError(
            f"patch_id, row, col and label must have one entry per pixel, got lengths "
            f"{len(patch_id)}, {len(row)}, {len(col)}, {n}."
        )
    where = {key: i for i, key in enumerate(zip(patch_id.tolist(), row.tolist(), col.tolist(), strict=True))}
    edge = np.zeros(n, dtype=bool)
    for i, (p, r, c) in enumerate(zip(patch_id.tolist(), row.tolist(), col.tolist(), strict=True)):
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                j = where.get((p, r + dr, c + dc))
                if j is not None and label[j] != label[i]:
                    edge[i] = True
    return edge


def run_errors(run: Path) -> dict[str, float]:
    """Test error (%) of one run over all, edge and interior pixels, and the edge share (%).

    Raises:
        ValueError: If ``run`` holds no ``test_probabilities.npz``.
    """
    probs = read_probabilities(run)
    if probs is None:
        raise ValueError(
            f"{run} has no {PROBABILITIES_FILE}: point at a run folder that tested (train.py with test=true)"
        )
    labelled = probs.label != probs.ignore_index
    wrong = (probs.predicted() != probs.label)[labelled]
    edge = class_edges(probs.patch_id[labelled], probs.row[labelled], probs.col[labelled], probs.label[labelled])
    out = {"pixels": float(labelled.sum()), "edge_share": 100.0 * float(edge.mean()) if len(edge) else float("nan")}
    for part, keep in (("all", np.ones_like(edge)), ("edge", edge), ("interior", ~edge)):
        out[part] = 100.0 * float(wrong[keep].mean()) if keep.any() else float("nan")
    return out


def runs_of(sweep: Path) -> list[Path]:
    """The run folders under ``sweep`` (or ``sweep`` itself) that hold test probabilities, sorted.

    A run tested on several processes (DDP) holds one ``test_probabilities_rank<k>.npz`` per
    rank instead of one file; :func:`read_probabilities` joins them.
    """
    return sorted({f.parent for pattern in (PROBABILITIES_FILE, RANK_PATTERN) for f in sweep.rglob(pattern)})


def _paired(a: np.ndarray, b: np.ndarray) -> str:
    d = a - b
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return "–"
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+.2f} ± {se:.2f} ({int((d > 0).sum())}/{int((d < 0).sum())})"


def sweep_table(sweep: Path) -> str:
    """A Markdown table: every run's errors and their mean."""
    runs = runs_of(sweep)
    if not runs:
        raise ValueError(f"{sweep} holds no run folder with {PROBABILITIES_FILE}")
    rows = [(run, run_errors(run)) for run in runs]
    lines = [
        f"{sweep}: {len(rows)} runs", "",
        "| run | test pixels | at class edges | error, all | at edges | in interiors |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for run, e in rows:
        lines.append(
            f"| {run.relative_to(sweep) if run != sweep else run.name} | {int(e['pixels'])} | {e['edge_share']:.1f} % "
            f"| {e['all']:.2f} % | {e['edge']:.2f} % | {e['interior']:.2f} % |"
        )
    mean = {k: float(np.nanmean([e[k] for _, e in rows])) for k in ("edge_share", *PARTS)}
    lines.append(
        f"| mean | | {mean['edge_share']:.1f} % | {mean['all']:.2f} % | {mean['edge']:.2f} % "
        f"| {mean['interior']:.2f} % |"
    )
    return "\n".join(lines)


def paired_table(sweep_a: Path, sweep_b: Path) -> str:
    """A Markdown table: mean errors of A and B over their common (seed, fold) pairs, and A - B.

    Raises:
        ValueError: If the two sweeps share no (seed, fold) pair.
    """
    a = {run_key(r): run_errors(r) for r in runs_of(sweep_a)}
    b = {run_key(r): run_errors(r) for r in runs_of(sweep_b)}
    keys = sorted(set(a) & set(b))
    if not keys:
        raise ValueError(f"{sweep_a} and {sweep_b} share no (seed, data.split.fold) pair of runs")
    lines = [
        f"A = {sweep_a}, B = {sweep_b}: {len(keys)} pairs", "",
        "| test error | A | B | A - B, paired |", "|---|---|---|---|",
    ]  # fmt: skip
    for part in PARTS:
        va = np.array([a[k][part] for k in keys])
        vb = np.array([b[k][part] for k in keys])
        lines.append(f"| {part} | {np.nanmean(va):.2f} % | {np.nanmean(vb):.2f} % | {_paired(va, vb)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "sweeps", nargs="+", type=Path, help=f"sweep (or run) folders of runs with {PROBABILITIES_FILE}"
    )
    parser.add_argument("--paired", action="store_true", help="A - B over the two sweeps, paired by seed and fold")
    args = parser.parse_args(argv)
    if args.paired:
        if len(args.sweeps) != 2:
            parser.error(f"--paired takes two sweeps (A and B), got {len(args.sweeps)}")
        print(paired_table(args.sweeps[0], args.sweeps[1]))
        return
    for sweep in args.sweeps:
        print(f"\n{sweep_table(sweep)}")


if __name__ == "__main__":
    main()
