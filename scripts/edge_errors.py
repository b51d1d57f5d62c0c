"""Where a raster classifier's errors lie: at class edges or in parcel interiors.

A labelled pixel is at a **class edge** when one of its 8 neighbours, in the same sample, is a
labelled pixel of the same split (test or validation) of another class; the others are **interior** pixels. Edge
pixels are where mixed pixels (20 m bands read on a 10 m grid, parcel borders) and label
offsets show, so their errors are mostly errors of the reference, which no model learns
away; interior errors are the model's. Neighbours outside the split's pixels (other splits,
unlabelled or ignored pixels) are not seen, so the edge count is a lower bound. Pixel
tables (every pixel at row 0, col 0 of its own sample) have no edges.

By default each run folder's ``test_probabilities.npz`` is read: what its test scored (the
mean of its best epochs with ``model.checkpoint_ensemble``)::

    python scripts/edge_errors.py logs/real/multiruns/<sweep>              # every run under it, and their mean
    python scripts/edge_errors.py --paired <sweep_a> <sweep_b>             # A - B, paired by seed and fold

``--split val`` reads the validation pixels instead, from the per-epoch probabilities of runs
trained with ``checkpoint_rules.EpochProbabilities`` (``<run>/epoch_probs``): the mean of the
epochs that ``--rule`` (default ``top10_oa``, the ``model.checkpoint_ensemble=10`` choice)
picks on all validation pixels, scored on the same pixels, so its level is optimistic, as
the ``val`` column of ``checkpoint_rules.py``. ``--rule`` with ``--split test`` reads test
pixels from the same files (the rule still chooses on validation pixels)::

    python scripts/edge_errors.py --split val --paired <sweep_a> <sweep_b>

Runs pair by ``seed`` and ``data.split.fold`` of their ``config.yaml``. Errors are
percentages of the labelled test pixels of each part; a paired Δ is mean ± standard error
over the pairs (pairs higher / lower).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from checkpoint_rules import EPOCH_DIR, RULES, chosen_epochs, epoch_files, load_split, pixel_order, run_key
from checkpoint_rules import runs_of as epoch_runs_of

from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, RANK_PATTERN, read_probabilities

PARTS = ("all", "edge", "interior")
SPLITS = ("test", "val")


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


def part_errors(
    patch_id: np.ndarray, row: np.ndarray, col: np.ndarray, label: np.ndarray, predicted: np.ndarray
) -> dict[str, float]:
    """Error (%) over all, edge and interior pixels, the edge share (%) and the pixel count.

    Args:
        patch_id: ``(N,)`` int sample of each labelled pixel.
        row: ``(N,)`` int row inside the sample.
        col: ``(N,)`` int column inside the sample.
        label: ``(N,)`` int reference class.
        predicted: ``(N,)`` int predicted class.
    """
    wrong = predicted != label
    edge = class_edges(patch_id, row, col, label)
    out = {"pixels": float(len(label)), "edge_share": 100.0 * float(edge.mean()) if len(edge) else float("nan")}
    for part, keep in (("all", np.ones_like(edge)), ("edge", edge), ("interior", ~edge)):
        out[part] = 100.0 * float(wrong[keep].mean()) if keep.any() else float("nan")
    return out


def run_errors(run: Path, split: str = "test", rule: str | None = None) -> dict[str, float]:
    """Error (%) of one run over all, edge and interior pixels of ``split``, and the edge share (%).

    Args:
        run: A run folder.
        split: ``"test"`` or ``"val"``.
        rule: None reads ``test_probabilities.npz`` (test pixels only); a ``checkpoint_rules``
            rule (``top10_oa``, ``best_oa``, ...) reads ``<run>/epoch_probs`` and averages the
            epochs it chooses on all validation pixels. ``split="val"`` needs a rule.

    Raises:
        ValueError: If ``split`` or ``rule`` is unknown, ``split="val"`` comes without a rule,
            or the run lacks the files it needs.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if rule is None:
        if split != "test":
            raise ValueError(
                "validation errors are read from the run's epoch_probs: give a rule, say rule='top10_oa' "
                "(--rule top10_oa)"
            )
        probs = read_probabilities(run)
        if probs is None:
            raise ValueError(
                f"{run} has no {PROBABILITIES_FILE}: point at a run folder that tested (train.py with test=true)"
            )
        labelled = probs.label != probs.ignore_index
        return part_errors(
            probs.patch_id[labelled], probs.row[labelled], probs.col[labelled], probs.label[labelled],
            probs.predicted()[labelled],
        )  # fmt: skip
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    files = epoch_files(run)
    Pv, yv, _ = load_split(files, "val")
    epochs = chosen_epochs(rule, Pv, yv, np.arange(len(yv)))
    P, y = (Pv, yv) if split == "val" else load_split(files, "test")[:2]
    first = np.load(files[0])
    order = pixel_order(first, split)
    return part_errors(
        first[f"{split}_patch_id"][order], first[f"{split}_row"][order], first[f"{split}_col"][order], y,
        P[epochs].mean(0).argmax(-1),
    )  # fmt: skip


def runs_of(sweep: Path, epochs: bool = False) -> list[Path]:
    """The run folders under ``sweep`` (or ``sweep`` itself) that hold test probabilities, sorted.

    A run tested on several processes (DDP) holds one ``test_probabilities_rank<k>.npz`` per
    rank instead of one file; :func:`read_probabilities` joins them. With ``epochs``: the run
    folders that hold ``epoch_probs`` instead.
    """
    if epochs:
        return epoch_runs_of(sweep)
    return sorted({f.parent for pattern in (PROBABILITIES_FILE, RANK_PATTERN) for f in sweep.rglob(pattern)})


def _paired(a: np.ndarray, b: np.ndarray) -> str:
    d = a - b
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return "–"
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+.2f} ± {se:.2f} ({int((d > 0).sum())}/{int((d < 0).sum())})"


def _source(rule: str | None) -> str:
    return PROBABILITIES_FILE if rule is None else f"{EPOCH_DIR} ({rule}, chosen on validation pixels)"


def _found_runs(sweep: Path, rule: str | None) -> list[Path]:
    """:func:`runs_of` for the files ``rule`` reads; ValueError if there is none."""
    runs = runs_of(sweep, epochs=rule is not None)
    if not runs:
        raise ValueError(f"{sweep} holds no run folder with {_source(rule)}")
    return runs


def sweep_table(sweep: Path, split: str = "test", rule: str | None = None) -> str:
    """A Markdown table: every run's errors on ``split`` and their mean (``rule`` as :func:`run_errors`).

    Raises:
        ValueError: If no run under ``sweep`` holds the files ``rule`` reads.
    """
    rows = [(run, run_errors(run, split, rule)) for run in _found_runs(sweep, rule)]
    lines = [
        f"{sweep}: {len(rows)} runs, {split} pixels from {_source(rule)}", "",
        f"| run | {split} pixels | at class edges | error, all | at edges | in interiors |",
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


def paired_table(sweep_a: Path, sweep_b: Path, split: str = "test", rule: str | None = None) -> str:
    """A Markdown table: mean errors of A and B over their common (seed, fold) pairs, and A - B.

    Raises:
        ValueError: If a sweep holds no run with the files ``rule`` reads, or the two share no
            (seed, fold) pair.
    """
    runs_a, runs_b = _found_runs(sweep_a, rule), _found_runs(sweep_b, rule)
    a = {run_key(r): run_errors(r, split, rule) for r in runs_a}
    b = {run_key(r): run_errors(r, split, rule) for r in runs_b}
    keys = sorted(set(a) & set(b))
    if not keys:
        raise ValueError(f"{sweep_a} and {sweep_b} share no (seed, data.split.fold) pair of runs")
    lines = [
        f"A = {sweep_a}, B = {sweep_b}: {len(keys)} pairs, {split} pixels from {_source(rule)}", "",
        f"| {split} error | A | B | A - B, paired |", "|---|---|---|---|",
    ]  # fmt: skip
    for part in PARTS:
        va = np.array([a[k][part] for k in keys])
        vb = np.array([b[k][part] for k in keys])
        lines.append(f"| {part} | {np.nanmean(va):.2f} % | {np.nanmean(vb):.2f} % | {_paired(va, vb)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "sweeps", nargs="+", type=Path,
        help=f"sweep (or run) folders of runs with {PROBABILITIES_FILE} (with --rule or --split val: {EPOCH_DIR})",
    )  # fmt: skip
    parser.add_argument("--paired", action="store_true", help="A - B over the two sweeps, paired by seed and fold")
    parser.add_argument("--split", choices=SPLITS, default="test", help="the pixels to score (default: test)")
    parser.add_argument(
        "--rule", choices=RULES, default=None,
        help=f"read {EPOCH_DIR} and average the epochs this rule chooses on validation pixels "
        f"(default: {PROBABILITIES_FILE} for test, top10_oa for val)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rule = args.rule if args.rule is not None or args.split == "test" else "top10_oa"
    if args.paired:
        if len(args.sweeps) != 2:
            parser.error(f"--paired takes two sweeps (A and B), got {len(args.sweeps)}")
        print(paired_table(args.sweeps[0], args.sweeps[1], args.split, rule))
        return
    for sweep in args.sweeps:
        print(f"\n{sweep_table(sweep, args.split, rule)}")


if __name__ == "__main__":
    main()
