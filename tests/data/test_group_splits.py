"""Honest splits: whole groups per split, stratified folds, spatial blocks, fixed splits."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mtan_s1s2.data.group_splits import (
    fold_splits,
    group_folds,
    lone_group_classes,
    spatial_blocks,
    split_of_groups,
    splits_from_values,
    write_split,
)


def test_every_group_in_one_fold_and_folds_balanced() -> None:
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 25)  # 40 fields of 25 pixels
    labels = np.repeat(rng.integers(1, 4, 40), 25)
    folds = group_folds(groups, labels, n_folds=5, seed=1)
    assert set(folds) == set(range(40)) and set(folds.values()) == {1, 2, 3, 4, 5}
    sizes = np.bincount(list(folds.values()))[1:]
    assert sizes.min() >= 6  # 40 groups dealt into 5 folds
    assert group_folds(groups, labels, 5, seed=1) == folds  # deterministic by seed
    assert group_folds(groups, labels, 5, seed=2) != folds


def test_fold_numbers_give_test_val_and_train() -> None:
    assert fold_splits(5, 1) == {1: "test", 2: "val", 3: "train", 4: "train", 5: "train"}
    assert fold_splits(5, 5)[1] == "val"
    with pytest.raises(ValueError, match=r"data.split.fold must be in 1..5"):
        fold_splits(5, 6)


def test_too_few_groups_and_single_group_splits(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"only 3 groups for data.split.n_folds=5"):
        group_folds(np.array([1, 2, 3]), np.array([1, 1, 2]), 5)
    with caplog.at_level(logging.WARNING):
        splits = split_of_groups(np.array([1, 2, 3]), np.array([1, 1, 2]), 3, fold=1)
    assert sorted(splits.values()) == ["test", "train", "val"]
    assert "single group" in caplog.text


@pytest.mark.parametrize("fold", [1, 2, 3, 4, 5])
def test_a_class_of_one_group_is_warned_in_every_fold(fold: int, caplog: pytest.LogCaptureFixture) -> None:
    """Class 3 lives in group 9 only: whatever split it lands in, the warning names it, its group and that split."""
    groups = np.repeat(np.arange(10), 4)
    labels = np.repeat([1, 2, 1, 2, 1, 2, 1, 2, 1, 3], 4)
    with caplog.at_level(logging.WARNING):
        splits = split_of_groups(groups, labels, 5, fold=fold, class_names=["none", "wheat", "maize", "rye"])
    assert lone_group_classes(groups, labels) == {3: [9]}
    assert f"Class(es) ['rye'] are each held by a single group (rye: group 9 in {splits[9]})" in caplog.text
    assert "least populated class" not in caplog.text


def test_spatial_blocks_and_fixed_splits(tmp_path) -> None:
    blocks = spatial_blocks(4, 6, 2)
    assert len(np.unique(blocks)) == 6 and blocks[0, 0] == blocks[1, 1] != blocks[0, 2]
    shifted = spatial_blocks(2, 2, 2, origin=(2, 2))
    assert shifted[0, 0] == blocks[2, 2]  # one lattice across scenes
    out = splits_from_values(np.array(["cal", "val", "test", "cal"]), {"cal": "train"})
    assert out.tolist() == ["train", "val", "test", "train"]
    with pytest.raises(ValueError, match=r"\['x'\] are not train/val/test"):
        splits_from_values(np.array(["train", "x"]))
    path = write_split(tmp_path / "split.csv", [{"group": 1, "split": "train"}, {"group": 2, "split": "test"}])
    assert path.read_text().splitlines() == ["group,split", "1,train", "2,test"]
