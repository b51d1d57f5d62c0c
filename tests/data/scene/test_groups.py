"""Scenes -> training samples: every group in one split, by blocks, parcels or whole scenes."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from affine import Affine

from fixtures.scene_files import write_tif
from mtan_s1s2.data.geotiff import GeoTiffDataModule
from mtan_s1s2.data.scene.groups import DEFAULT_BUFFER, SplitConfig

H, W, T = 12, 12, 2
UL = Affine(10, 0, 500000, 0, -10, 5600000)


def scene(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    write_tif(folder / "S2_stack.tif", rng.integers(100, 3000, (T, H, W)).astype(np.uint16), UL)
    (folder / "dates.txt").write_text("20200301\n20200401\n")
    parcels = (np.arange(H)[:, None] // 3) * 10 + np.arange(W)[None, :] // 4 + 1  # 4 x 3 parcels
    parcels[0, 0] = 0  # no parcel
    write_tif(folder / "parcels.tif", parcels.astype(np.int32), UL)
    write_tif(folder / "label.tif", (1 + parcels % 2).astype(np.int32), UL)


def dm(root: Path, **split) -> GeoTiffDataModule:
    return GeoTiffDataModule(
        str(root), modalities=["s2"], reference_date="2020-03-01",
        sources={"s2": {"stack": "S2_stack.tif", "dates": "dates.txt", "bands": ["B04"]}},
        labels={"file": "label.tif", "classes": {"a": [1], "b": [2]}}, split={"n_folds": 3, **split}, norm_stats=None,
    )  # fmt: skip


@pytest.mark.parametrize("by", ["parcels", "scenes", "blocks"])
def test_each_group_in_one_split_and_labels_only_of_their_split(tmp_path: Path, by: str) -> None:
    for i in range(3):
        scene(tmp_path / f"s{i}", i)
    split = {"by": by, "block_size": 4, "window": 5}
    if by == "parcels":
        split["parcels"] = {"file": "parcels.tif"}
    d = dm(tmp_path, **split)
    rows = d.split.group_rows
    assert len({r["group"] for r in rows}) == len({(r["group"], r["split"]) for r in rows})  # one split per group
    labelled = {"train": 0, "val": 0, "test": 0}
    for s in labelled:
        ds = d.raw_dataset(s)
        for i in range(len(ds)):
            sample, (k, w) = ds[i], ds.items[i]
            lab = sample["label"].numpy()[: w.height, : w.width]
            codes = d.split.splits[k][w.row_off : w.row_off + w.height, w.col_off : w.col_off + w.width]
            assert ((lab == 0) | (codes == ("train", "val", "test").index(s))).all()
            assert (sample["label"].numpy()[w.height :] == 0).all()  # padding is unlabelled
            labelled[s] += int((lab != 0).sum())
    assert all(labelled.values())
    expected = 3 * (H * W - (1 if by == "parcels" else 0)) - sum(d.split.buffer_dropped.values())
    assert sum(labelled.values()) == expected  # every labelled pixel served once (parcel 0: none; buffer)
    assert sum(r["n_buffer"] for r in rows) == sum(d.split.buffer_dropped.values())
    assert (d.split.buffer_dropped["test"] == 0) and (by == "scenes") == (sum(d.split.buffer_dropped.values()) == 0)
    if by == "scenes":
        assert sorted(r["group"] for r in rows) == ["scene s0", "scene s1", "scene s2"]


def test_split_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"data\.split\.by must be one of \['blocks', 'parcels', 'scenes'\]"):
        SplitConfig(by="random")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['blok_size'\]"):
        SplitConfig.from_config({"blok_size": 3})
    with pytest.raises(ValueError, match=r"data\.split\.buffer must be a number of pixels >= 0.*got -1"):
        SplitConfig(buffer=-1)
    assert SplitConfig().buffer == DEFAULT_BUFFER == 1


def labelled_pairs_across_splits(d: GeoTiffDataModule, distance: int) -> int:
    """Pairs of labelled pixels of different splits at most ``distance`` px apart (Chebyshev), over all scenes."""
    assert d.split is not None
    n = 0
    for sp, lab in zip(d.split.splits, d.split.labels, strict=True):
        rows, cols = np.nonzero((lab != 0) & (sp >= 0))
        near = np.maximum(abs(rows[:, None] - rows[None, :]), abs(cols[:, None] - cols[None, :])) <= distance
        n += int((near & (sp[rows, cols][:, None] != sp[rows, cols][None, :])).sum()) // 2
    return n


@pytest.mark.parametrize(("buffer", "block"), [(0, 3), (1, 3), (2, 6)])
def test_buffer_between_blocks_of_different_splits(tmp_path: Path, buffer: int, block: int) -> None:
    for i in range(2):
        scene(tmp_path / f"s{i}", i)
    d = dm(tmp_path, by="blocks", block_size=block, buffer=buffer)
    assert d.split is not None
    if buffer == 0:
        assert labelled_pairs_across_splits(d, 1) > 0 and sum(d.split.buffer_dropped.values()) == 0  # blocks touch
        return
    assert labelled_pairs_across_splits(d, buffer) == 0  # no two splits closer than buffer + 1 px
    dropped = d.split.buffer_dropped
    assert dropped["test"] == 0 and dropped["train"] > 0
    assert sum(r["n_buffer"] for r in d.split.group_rows) == sum(dropped.values())
    served = sum(
        int((lab != 0).sum())
        for s in ("train", "val", "test")
        for lab in (x["label"].numpy() for x in d.raw_dataset(s))
    )
    assert served == 2 * H * W - sum(dropped.values())  # left out of every split
    rows = list(csv.DictReader(open(d.write_split(tmp_path / "run"))))
    assert sum(int(r["n_buffer"]) for r in rows) == sum(dropped.values())


def test_parcel_ids_are_groups_of_their_scene(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Parcel 11 of scene s0 and parcel 11 of scene s1 are two fields: two groups."""
    for i in range(3):
        scene(tmp_path / f"s{i}", i)
    d = dm(tmp_path, by="parcels", parcels={"file": "parcels.tif"}, buffer=0)
    assert d.split is not None
    groups = {r["group"] for r in d.split.group_rows}
    assert len(groups) == 3 * 12 and {"scene s0 parcel 11", "scene s1 parcel 11", "scene s2 parcel 11"} <= groups
