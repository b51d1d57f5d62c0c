"""COG maps reopened with rasterio: CRS, transform, dtype, nodata, values, colour table, names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.enums
from affine import Affine
from rasterio.crs import CRS
from rasterio.windows import Window

from mtan_s1s2.data.scene.grid import Grid, tiles
from mtan_s1s2.export.cog import NODATA, MapWriter, to_percent, write_map
from mtan_s1s2.export.quicklook import write_quicklook

NAMES = ["unlabelled", "maize", "wheat", "grass"]


def test_class_map_probabilities_and_confidence_are_cogs(tmp_path: Path) -> None:
    grid = Grid(Affine(10, 0, 501360, 0, -10, 5629680), 37, 29, CRS.from_epsg(32631))
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(4), size=(37, 29)).transpose(2, 0, 1).astype(np.float32)
    proba[0] = 0
    proba /= proba.sum(0)
    classes = proba.argmax(0).astype(np.uint8)
    classes[:3, :4] = NODATA
    writer = MapWriter(tmp_path, grid, NAMES, 0, probabilities=True, confidence=True)
    for w in tiles(grid, 16):
        sl = (slice(w.row_off, w.row_off + w.height), slice(w.col_off, w.col_off + w.width))
        writer.write(w, classes[sl], proba[(slice(None), *sl)])
    files = writer.close()
    with rasterio.open(files["class_map"]) as src:
        assert src.driver == "GTiff" and src.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
        assert src.crs.to_epsg() == 32631 and src.transform == grid.transform and src.shape == (37, 29)
        assert src.dtypes == ("uint8",) and src.nodata == NODATA
        np.testing.assert_array_equal(src.read(1), classes)
        cmap = src.colormap(1)
        assert cmap[NODATA][3] == 0 and len({cmap[i] for i in (1, 2, 3)}) == 3
        assert src.tags(1)["CLASS_2"] == "wheat"
    with rasterio.open(files["probabilities"]) as src:
        assert src.count == 3 and src.descriptions == ("maize", "wheat", "grass") and src.nodata == NODATA
        p = src.read()
        np.testing.assert_array_equal(p[:, 5:, :], to_percent(proba[1:, 5:, :]))
        assert (p[:, :3, :4] == NODATA).all()
    with rasterio.open(files["confidence"]) as src:
        np.testing.assert_array_equal(src.read(1)[5:], to_percent(proba[1:].max(0))[5:])
    aux = Path(files["class_map"] + ".aux.xml").read_text()
    assert "<Category>maize</Category>" in aux and "<Category>nodata</Category>" in aux
    assert 'label="grass"' in Path(files["qml"]).read_text()
    assert Path(files["legend"]).read_text().splitlines()[1].startswith("1,maize,#")
    png = write_quicklook(files["class_map"], tmp_path / "q.png", NAMES, 0, title="scene")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_map_without_georeferencing_has_no_crs_and_identity_transform(tmp_path: Path) -> None:
    grid = Grid(Affine.identity(), 8, 8)
    path = write_map(tmp_path / "m.tif", np.ones((8, 8), np.uint8), grid, NAMES)
    with rasterio.open(path) as src:
        assert src.crs is None and src.transform == Affine.identity() and (src.read(1) == 1).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.qml", "m.tif", "m.tif.aux.xml"]
    assert Window(0, 0, 8, 8) == grid.full_window()


def test_map_write_prints_nothing_and_keeps_its_colour_table(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # GDAL reports through its own error handler (C stderr), hence capfd rather than capsys.
    grid = Grid(Affine(10, 0, 501360, 0, -10, 5629680), 20, 24, CRS.from_epsg(32631))
    classes = np.tile(np.arange(4, dtype=np.uint8), (20, 6))
    path = write_map(tmp_path / "map.tif", classes, grid, NAMES, 0)
    writer = MapWriter(tmp_path / "scene", grid, NAMES, 0, probabilities=True, confidence=True)
    for w in tiles(grid, 8):
        writer.write(w, classes[w.row_off : w.row_off + w.height, w.col_off : w.col_off + w.width])
    files = writer.close()
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == "", captured.err
    for tif in (path, Path(files["class_map"])):
        with rasterio.open(tif) as src:
            assert src.colorinterp == (rasterio.enums.ColorInterp.palette,)
            assert src.colormap(1)[NODATA][3] == 0
            np.testing.assert_array_equal(src.read(1), classes)
