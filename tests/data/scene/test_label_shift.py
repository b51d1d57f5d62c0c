"""data.grid.label_shift: label and parcel rasters moved whole pixels against the imagery."""

from __future__ import annotations

import numpy as np
import pytest
from rasterio.windows import Window

from fixtures.scene_files import LABELS, SOURCES, make_scene
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.scene.datamodule import grid_settings


def datamodule(root, shift=None, parcels=None) -> DatacubeDataModule:
    grid = {"resolution": 10} if shift is None else {"resolution": 10, "label_shift": shift}
    split = {"by": "blocks", "block_size": 4, "n_folds": 3, "fold": 1, "buffer": 0}
    if parcels is not None:
        split["parcels"] = parcels
    return DatacubeDataModule(
        root=str(root), modalities=["s2", "s1_asc"], sources=SOURCES, labels=LABELS, reference_date="2020-02-01",
        split=split, grid=grid,
    )  # fmt: skip


def test_the_labels_move_rows_south_and_columns_east(tmp_path) -> None:
    make_scene(tmp_path / "a", H=8, W=8, codes=(1200, 1110, 9120))  # every pixel labelled
    as_read = datamodule(tmp_path).scenes[0]
    moved = datamodule(tmp_path, [1, -2]).scenes[0]
    assert moved.label_shift == (1, -2)
    before, after = as_read.read_label(), moved.read_label()
    assert after.dtype == before.dtype == np.uint16
    # imagery pixel (y, x) takes the label of (y - 1, x + 2)
    np.testing.assert_array_equal(after[1:, :-2], before[:-1, 2:])
    # the first row and the last two columns would read outside the raster: its no-data value (0, ignored)
    assert (after[0] == 0).all() and (after[:, -2:] == 0).all()
    # a window reads the same pixels as the whole scene
    np.testing.assert_array_equal(moved.read_label(Window(3, 2, 4, 5)), after[2:7, 3:7])
    # the imagery does not move
    np.testing.assert_array_equal(moved.read()["s2"]["x"], as_read.read()["s2"]["x"])
    # the classes the model learns move with the codes; unlabelled pixels are ignore_index
    labels = datamodule(tmp_path, [1, -2]).split.labels[0]
    assert (labels[0] == 0).all() and (labels[1:, :-2] > 0).all()


def test_parcel_ids_move_with_the_labels(tmp_path) -> None:
    make_scene(tmp_path / "a", H=8, W=8, codes=(1200, 1110, 9120))
    parcels = {"file": "label.nc", "variable": "CT"}  # any id raster: here the codes themselves
    moved = datamodule(tmp_path, [-2, 1], parcels=parcels).scenes[0]
    np.testing.assert_array_equal(moved.read_parcels(), moved.read_label())
    as_read = datamodule(tmp_path, parcels=parcels).scenes[0]
    np.testing.assert_array_equal(moved.read_parcels()[:-2, 1:], as_read.read_parcels()[2:, :-1])


@pytest.mark.parametrize("bad", ["1,0", [1], [1, 0, 0], [1.5, 0], [True, 0], 2])
def test_a_label_shift_that_is_not_two_whole_numbers_names_the_key(bad) -> None:
    with pytest.raises(ValueError, match=r"data\.grid\.label_shift must be \[rows, cols\].*got"):
        grid_settings({"label_shift": bad})
    assert grid_settings({"label_shift": [-1, 3]}) == (None, False, (-1, 3))
    assert grid_settings({}) == (None, False, (0, 0))
