"""Honest train/val/test splits of geodata: by group (parcel, polygon, survey) or spatial block.

Neighbouring pixels of one field are nearly copies, so pixels are never split at random:
every pixel of a group goes to the same split (Roberts et al., 2017, "Cross-validation
strategies for data with temporal, spatial, hierarchical, or phylogenetic structure").

* **Grouped k-fold** (:func:`group_folds`): the groups (parcel or polygon ids from a column
  or raster, or the spatial blocks of :func:`spatial_blocks`) are dealt into ``n_folds``
  folds with scikit-learn's ``StratifiedGroupKFold`` (class proportions kept as far as the
  groups allow). Fold ``fold`` (1-based, config ``data.split.fold``) is the test split, the next
  one (cyclically) validation, the rest training: with 5 folds, 3/1/1 like the PASTIS
  protocol, and ``-m data.split.fold=1,2,3,4,5`` is a cross-validation.
* **Fixed split**: a column (or raster) already says ``train``/``val``/``test``
  (:func:`splits_from_values`).

:func:`split_of_groups` returns the split of every group; :func:`write_split` writes it to
the run directory (``split.csv``) so the exact split of a run can be reproduced and audited.
"""

from __future__ import annotations

import csv
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.utils.text import plain

log = logging.getLogger(__name__)

SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test")
SPLIT_FILE = "split.csv"
"""Name of the split record written to the run directory."""


def spatial_blocks(height: int, width: int, block_size: int, origin: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Block ids of a ``height x width`` grid cut into ``block_size`` pixel squares.

    Args:
        height: Rows of the grid.
        width: Columns.
        block_size: Side of a block, pixels (> 0).
        origin: ``(row, col)`` of the grid's first pixel in a larger block lattice, so that
            scenes that tile a larger area share one lattice.

    Returns:
        ``(height, width) int64`` block ids, unique per block of the lattice.

    Raises:
        ValueError: If ``block_size`` is not positive.
    """
    if int(block_size) < 1:
        raise ValueError(f"data.split.block_size must be a positive number of pixels, got {block_size}.")
    rows = (np.arange(height) + origin[0]) // block_size
    cols = (np.arange(width) + origin[1]) // block_size
    return rows[:, None].astype(np.int64) * 1_000_003 + cols[None, :]


def group_folds(
    groups: np.ndarray, labels: np.ndarray, n_folds: int, seed: int = 0, ignore_index: int | None = 0
) -> dict[Any, int]:
    """Deal groups into ``n_folds`` folds, stratified by class (``StratifiedGroupKFold``).

    Args:
        groups: ``(N,)`` group id of every labelled sample (pixel).
        labels: ``(N,)`` class of every sample.
        n_folds: Number of folds (>= 3: train, val and test each need one).
        seed: Shuffling seed of the fold assignment.
        ignore_index: Label of unlabelled samples; they do not take part in the
            stratification, their groups still get a fold.

    Returns:
        Group id -> fold number in ``1..n_folds``.

    Raises:
        ValueError: If ``n_folds < 3`` or there are fewer groups than folds; the message
            names the counts and the fix.
    """
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    groups = np.asarray(groups).ravel()
    labels = np.asarray(labels).ravel()
    if int(n_folds) < 3:
        raise ValueError(f"data.split.n_folds must be >= 3 (train, val and test each need a fold), got {n_folds}.")
    unique = np.unique(groups)
    if unique.size < n_folds:
        raise ValueError(
            f"There are only {unique.size} groups for data.split.n_folds={n_folds} folds: every fold needs at least "
            "one group. Lower data.split.n_folds, or group by a finer column (parcel or field id) or smaller spatial "
            "blocks."
        )
    keep = labels != ignore_index if ignore_index is not None else np.ones(labels.shape, bool)
    folds: dict[Any, int] = {}
    if keep.any() and np.unique(groups[keep]).size >= n_folds:
        g_keep, y_keep = groups[keep], labels[keep]
        splitter: Any = StratifiedGroupKFold(n_splits=int(n_folds), shuffle=True, random_state=int(seed))
        if np.bincount(np.unique(y_keep, return_inverse=True)[1]).max() < n_folds:
            log.warning("No class has %d labelled samples: the %d folds are not stratified by class.", n_folds, n_folds)
            splitter = GroupKFold(n_splits=int(n_folds), shuffle=True, random_state=int(seed))
        with warnings.catch_warnings():
            # "The least populated class in y has only n members": classes of few groups are warned about
            # by split_of_groups, with their names and groups.
            warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
            for k, (_, test_idx) in enumerate(splitter.split(np.zeros(g_keep.size), y_keep, g_keep)):
                for g in np.unique(g_keep[test_idx]).tolist():
                    folds[g] = k + 1
    # Groups without a labelled sample: dealt round robin in a seeded order.
    rest = [g for g in unique.tolist() if g not in folds]
    order = np.random.default_rng(seed).permutation(len(rest))
    for i, j in enumerate(order.tolist()):
        folds[rest[j]] = i % int(n_folds) + 1
    return folds


def fold_splits(n_folds: int, fold: int) -> dict[int, str]:
    """Split of every fold: ``fold`` is test, the next one (cyclically) val, the others train.

    Raises:
        ValueError: If ``fold`` is not in ``1..n_folds``.
    """
    if not 1 <= int(fold) <= int(n_folds):
        raise ValueError(f"data.split.fold must be in 1..{n_folds} (data.split.n_folds), got {fold}.")
    val = int(fold) % int(n_folds) + 1
    return {k: "test" if k == fold else "val" if k == val else "train" for k in range(1, int(n_folds) + 1)}


def lone_group_classes(groups: np.ndarray, labels: np.ndarray, ignore_index: int | None = 0) -> dict[int, list[Any]]:
    """Classes held by a single group: class -> ``[group]`` (sorted by class).

    Such a class lands in one split whatever the fold: in training it is never tested, in
    test it was never trained, and no stratification can change that.
    """
    groups = np.asarray(groups).ravel()
    labels = np.asarray(labels).ravel()
    keep = labels != ignore_index if ignore_index is not None else np.ones(labels.shape, bool)
    out: dict[int, list[Any]] = {}
    for c in np.unique(labels[keep]).tolist():
        held = np.unique(groups[keep & (labels == c)])
        if held.size == 1:
            out[int(c)] = [plain(held[0])]
    return out


def split_of_groups(
    groups: np.ndarray,
    labels: np.ndarray,
    n_folds: int,
    fold: int,
    seed: int = 0,
    ignore_index: int | None = 0,
    class_names: Sequence[str] | None = None,
    group_name: Callable[[Any], str] | None = None,
) -> dict[Any, str]:
    """``train``/``val``/``test`` of every group (see the module docstring).

    Warns when a split holds a single group (its metrics then measure one field or site),
    and, whatever the fold, when a class is held by a single group (it is then in one split
    only; the warning names the class, the group and that split).

    Args:
        groups: ``(N,)`` group id of every sample.
        labels: ``(N,)`` class of every sample.
        n_folds: Number of folds.
        fold: Test fold (1-based).
        seed: Seed of the fold assignment.
        ignore_index: Label of unlabelled samples.
        class_names: Name of every class index, for the warnings (default: the index).
        group_name: Name of a group id, for the warnings (default: the id).

    Raises:
        ValueError: As :func:`group_folds` and :func:`fold_splits`.
    """
    folds = group_folds(groups, labels, n_folds, seed, ignore_index)
    by_fold = fold_splits(n_folds, fold)
    out = {g: by_fold[k] for g, k in folds.items()}
    for split in SPLIT_NAMES:
        members = [g for g, s in out.items() if s == split]
        if len(members) == 1:
            log.warning(
                "The %s split is a single group (%s): its metrics measure one group only; use more groups or folds.",
                split,
                (group_name or repr)(plain(members[0])),
            )
    lone = lone_group_classes(groups, labels, ignore_index)
    if lone:
        name = (lambda c: str(class_names[c])) if class_names is not None else str
        show = group_name or repr
        where = {name(c): f"group {show(g[0])} in {out[g[0]]}" for c, g in lone.items()}
        log.warning(
            "Class(es) %s are each held by a single group (%s): whatever the fold, such a class lands in one split "
            "only, so it is never tested when it is trained on and never trained on when it is tested. Add groups "
            "of these classes, merge them into another class, or leave them out (data.labels.ignore_codes).",
            list(where),
            "; ".join(f"{c}: {w}" for c, w in where.items()),
        )
    return out


def split_name_mapping(names: Mapping[str, str] | None = None) -> dict[str, str]:
    """Value -> split name of a fixed split: ``train``/``val``/``test`` as themselves, then ``names``.

    Args:
        names: Optional value -> split name (e.g. ``{"calibration": "train"}``).
    """
    return {**{s: s for s in SPLIT_NAMES}, **dict(names or {})}


def splits_from_values(
    values: np.ndarray,
    names: Mapping[str, str] | None = None,
    where: str = "",
    required: Sequence[str] = SPLIT_NAMES,
) -> np.ndarray:
    """A fixed split given by values (``train``/``val``/``test``, or mapped by ``names``).

    Args:
        values: Split of every sample.
        names: Optional value -> split name (e.g. ``{"calibration": "train"}``).
        where: Named in error messages (file, column).
        required: Splits that must hold a sample (``("train", "test")`` when validation
            is held out of training afterwards, :func:`hold_out_validation`).

    Returns:
        ``(N,)`` array of split names.

    Raises:
        ValueError: On a value that is not a split name, or a required split without any
            sample.
    """
    mapping = split_name_mapping(names)
    raw = np.asarray(values).astype(str).ravel()
    bad = sorted(set(raw.tolist()) - set(mapping))
    if bad:
        raise ValueError(
            f"{where}: split value(s) {bad[:5]} are not train/val/test; map them with data.split.names "
            "(e.g. {calibration: train})."
        )
    out = np.asarray([mapping[v] for v in raw.tolist()])
    missing = [s for s in required if not (out == s).any()]
    if missing:
        raise ValueError(f"{where}: no sample is in split(s) {missing}; every split needs at least one.")
    return out


def hold_out_validation(
    groups: np.ndarray,
    labels: np.ndarray,
    fraction: float,
    seed: int = 0,
    ignore_index: int | None = 0,
) -> np.ndarray:
    """Hold out about ``fraction`` of the groups of a training set for validation, stratified by class.

    Whole groups move (``StratifiedGroupKFold`` with ``round(1 / fraction)`` folds, the
    first fold is validation), so no field is in both; class proportions are kept as far
    as the groups allow (plain ``GroupKFold`` when no class has enough samples).

    Args:
        groups: ``(N,)`` group of every training sample.
        labels: ``(N,)`` class of every training sample.
        fraction: Share of the groups to hold out, in ``(0, 0.5]``.
        seed: Shuffling seed.
        ignore_index: Label of unlabelled samples (not stratified on).

    Returns:
        ``(N,) bool``: True = the sample moves to validation.

    Raises:
        ValueError: If ``fraction`` is not in ``(0, 0.5]`` or there are too few groups
            (the message names the counts and the fix).
    """
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    if not 0 < float(fraction) <= 0.5:
        raise ValueError(
            f"data.split.val_fraction must be in (0, 0.5] (the share of the training groups held out for validation, "
            f"e.g. 0.1), got {fraction}."
        )
    groups, labels = np.asarray(groups).ravel(), np.asarray(labels).ravel()
    n_splits = max(2, round(1 / float(fraction)))
    n_groups = np.unique(groups).size
    if n_groups < n_splits:
        raise ValueError(
            f"data.split.val_fraction={fraction} needs at least {n_splits} groups in the training file, which has "
            f"{n_groups}; give a validation file (data.path.val) or group by a finer column."
        )
    y = np.where(labels == ignore_index, -1, labels) if ignore_index is not None else labels
    splitter: Any = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=int(seed))
    if np.bincount(np.unique(y, return_inverse=True)[1]).max() < n_splits:
        splitter = GroupKFold(n_splits=n_splits, shuffle=True, random_state=int(seed))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        _, val_idx = next(iter(splitter.split(np.zeros(groups.size), y, groups)))
    out = np.zeros(groups.size, bool)
    out[val_idx] = True
    return out


def write_split(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write the split of a run as CSV (one row per group or sample; columns of ``rows``).

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


__all__ = [
    "SPLIT_FILE",
    "SPLIT_NAMES",
    "fold_splits",
    "group_folds",
    "hold_out_validation",
    "lone_group_classes",
    "spatial_blocks",
    "split_name_mapping",
    "split_of_groups",
    "splits_from_values",
    "write_split",
]
