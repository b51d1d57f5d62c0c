"""task=pretrain on scenes: every pixel of the split's groups, never one of a val/test block; train_fraction."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.scene_files import MINI, MINI_SCENES
from fixtures.scene_files import MINI_LABELS as LABELS
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.group_splits import SPLIT_NAMES
from mtan_s1s2.data.scene.groups import SplitConfig, train_groups_kept

SOURCES = {
    "s2": {"files": ["S2_L2A_20m_*.nc"], "bands": ["B05", "B8A", "B11"], "quality": {"variable": "SCL"}},
    "s1_asc": {"files": ["S1_GRD-ASCENDING_*.nc"], "bands": ["VV", "VH"]},
}


def datamodule(**split) -> DatacubeDataModule:
    return DatacubeDataModule(
        root=str(MINI), scenes=MINI_SCENES, modalities=["s2", "s1_asc"], sources=SOURCES, labels=LABELS,
        reference_date="attr:start_date", grid={"resolution": 10}, batch_size=2, norm_stats=None,
        split={"by": "blocks", "block_size": 4, "n_folds": 3, "fold": 1, "buffer": 1, **split},
    )  # fmt: skip


def served(d: DatacubeDataModule, split: str) -> list[np.ndarray]:
    """Per scene, the pixels holding a valid observation in some unlabelled sample of ``split``."""
    out = [np.zeros(sc.grid.shape, bool) for sc in d.scenes]
    ds = d.build_unlabelled_dataset(split)
    for i in range(len(ds)):  # type: ignore[arg-type]
        sample, (k, w) = ds[i], ds.items[i]  # type: ignore[attr-defined]
        assert (sample["label"] == d.ignore_index).all()
        h, wd = int(w.height), int(w.width)
        valid = np.zeros((ds.size, ds.size), bool)  # type: ignore[attr-defined]
        for m in d.modalities:
            valid |= sample[m]["mask"].numpy().any(0)
        assert not valid[h:].any() and not valid[:, wd:].any()  # padding
        out[k][w.row_off : w.row_off + h, w.col_off : w.col_off + wd] |= valid[:h, :wd]
    return out


def test_unlabelled_training_pixels_never_come_from_val_or_test_blocks() -> None:
    d = datamodule()
    assert d.split is not None
    train_pixels = served(d, "train")
    n_served, n_labelled_served = 0, 0
    for k, (px, area) in enumerate(zip(train_pixels, d.split.areas, strict=True)):
        rows, cols = np.nonzero(px)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            assert area[r, c] == SPLIT_NAMES.index("train")
            near = area[max(r - 1, 0) : r + 2, max(c - 1, 0) : c + 2]
            assert not np.isin(near, [1, 2]).any(), f"scene {k} px ({r}, {c}) is within the buffer of a val/test block"
        n_served += int(px.sum())
        n_labelled_served += int((px & (d.split.labels[k] != d.ignore_index)).sum())
    n_train_labelled = sum(
        int(((sp == 0) & (lab != d.ignore_index)).sum()) for sp, lab in zip(d.split.splits, d.split.labels, strict=True)
    )
    assert n_served > n_labelled_served > 0  # unlabelled pixels too
    assert n_labelled_served == n_train_labelled  # every labelled training pixel with an observation
    for split in ("val",):
        code = SPLIT_NAMES.index(split)
        for px, area in zip(served(d, split), d.split.areas, strict=True):
            assert px.any() and (area[px] == code).all()


def test_serve_unlabelled_switches_the_loaders_and_keeps_normalisation() -> None:
    d = datamodule()
    labelled = d.dataset("train")
    d.serve_unlabelled()
    unlabelled = d.dataset("train")
    assert len(unlabelled) >= len(labelled)  # type: ignore[arg-type]
    batch = next(iter(d.train_dataloader()))
    assert (batch["label"] == d.ignore_index).all()
    d.serve_unlabelled(False)
    assert len(d.dataset("train")) == len(labelled)  # type: ignore[arg-type]


def test_train_fraction_keeps_whole_training_groups_and_leaves_val_test_alone() -> None:
    full, part = datamodule(), datamodule(train_fraction=0.3, train_fraction_seed=1)
    assert full.split is not None and part.split is not None

    def labelled(d: DatacubeDataModule, code: int) -> int:
        assert d.split is not None
        return sum(
            int(((sp == code) & (lab != d.ignore_index)).sum())
            for sp, lab in zip(d.split.splits, d.split.labels, strict=True)
        )

    n_full, n_part = labelled(full, 0), labelled(part, 0)
    assert 0.3 * n_full <= n_part < 0.7 * n_full
    assert labelled(part, 1) == labelled(full, 1) and labelled(part, 2) == labelled(full, 2)
    kept = [r for r in part.split.group_rows if r["split"] == "train" and r["labels_used"]]
    for name in part.class_names[1:]:
        assert sum(r[f"n_{name}"] for r in kept) > 0, name  # every class keeps labels
    # a kept group keeps all its labels, a dropped one none
    for r in part.split.group_rows:
        if r["split"] == "train" and not r["labels_used"]:
            assert r["group"] not in {g["group"] for g in kept}
    # the pretraining area does not depend on the labels used
    for a, b in zip(full.split.areas, part.split.areas, strict=True):
        assert np.array_equal(a, b)
    assert len(part.windows["train"]) < len(full.windows["train"])


def test_train_groups_kept_reaches_the_fraction_with_every_class() -> None:
    rows = [
        {"split": "train", "group": f"g{i}", "n_labelled": 10, "n_a": 10 if i < 9 else 0, "n_b": 10 if i == 9 else 0}
        for i in range(10)
    ] + [{"split": "val", "group": "v", "n_labelled": 5, "n_a": 5, "n_b": 0}]
    kept = train_groups_kept(rows, 0.2, 0, ["a", "b"])
    assert "g9" in kept and len(kept) == 2 and "v" not in kept
    assert train_groups_kept(rows, 1.0, 0, ["a", "b"]) == {f"g{i}" for i in range(10)}
    with pytest.raises(ValueError, match=r"data.split.train_fraction must be in \(0, 1\]"):
        SplitConfig(train_fraction=0.0)
