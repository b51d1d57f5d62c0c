"""data=geotiff: date-major stacks and per-date files read with rasterio; masks; clear errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from affine import Affine

from fixtures.scene_files import write_tif
from mtan_s1s2.data.geotiff import GeoTiffDataModule
from mtan_s1s2.data.geotiff.scenes import open_scene

T, C, H, W = 3, 2, 6, 5
UL = Affine(10, 0, 500000, 0, -10, 5600000)
DATES = ["2020-03-01T10:30:00", "2020-03-11T10:31:00", "2020-03-21T10:29:00"]


def values(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(100, 3000, size=(T, C, H, W)).astype(np.uint16)


def stack_scene(folder: Path, transform=UL, crs=32631, mask: np.ndarray | None = None) -> np.ndarray:
    folder.mkdir(parents=True, exist_ok=True)
    v = values()
    write_tif(folder / "S2_stack.tif", v.reshape(T * C, H, W), transform, crs)
    (folder / "S2_dates.txt").write_text("\n".join(d.replace("-", "").replace(":", "") for d in DATES) + "\n")
    if mask is not None:
        write_tif(folder / "S2_masks.tif", mask, transform, crs)
    return v


STACK = {"s2": {"stack": "S2_stack.tif", "dates": "S2_dates.txt", "bands": ["B04", "B08"]}}
RAD = {"s2": {"scale": 1e-4}}


def test_date_major_stack_with_masks(tmp_path: Path) -> None:
    mask = np.zeros((T, H, W), np.uint8)
    mask[1, :2] = 1
    v = stack_scene(tmp_path / "a", mask=mask)
    scene = open_scene(
        tmp_path / "a", ["s2"], {"s2": {**STACK["s2"], "mask": "S2_masks.tif"}}, "2020-03-01", radiometry=RAD
    )
    d = scene.read()["s2"]
    np.testing.assert_allclose(d["x"], v * 1e-4, rtol=1e-6)  # band t*C + c is band c of date t
    assert d["mask"][1, :2].sum() == 0 and d["mask"].sum() == T * H * W - 2 * W
    np.testing.assert_allclose(d["doy"], [10.5 / 24, 10 + 10.5166 / 24, 20 + 10.4833 / 24], atol=1e-3)
    assert scene.grid.transform == UL and scene.grid.crs.to_epsg() == 32631


def test_band_count_that_does_not_match_the_dates_says_both(tmp_path: Path) -> None:
    stack_scene(tmp_path / "a")
    (tmp_path / "a" / "S2_dates.txt").write_text("20200301\n20200311\n")
    with pytest.raises(ValueError, match=r"has 6 bands, but .*S2_dates\.txt lists 2 dates and .* 2 bands .*2 x 2 = 4"):
        open_scene(tmp_path / "a", ["s2"], STACK, "2020-03-01")


def test_per_date_files_dates_from_names_and_their_masks(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    v = values()
    stamps = ["20200311T103100", "20200301T103000", "20200321T102900"]  # written out of order
    order = [1, 0, 2]
    for k, stamp in zip(order, stamps, strict=True):
        write_tif(folder / f"S2_{stamp}.tif", v[k], UL)
        write_tif(folder / f"S2_mask_{stamp}.tif", np.zeros((H, W), np.uint8), UL)
    spec = {"s2": {"files": "S2_*.tif", "mask": "S2_mask_*.tif", "bands": ["B04", "B08"]}}
    scene = open_scene(folder, ["s2"], spec, "2020-03-01", radiometry=RAD)
    d = scene.read()["s2"]
    np.testing.assert_allclose(d["x"], v * 1e-4, rtol=1e-6)  # sorted by the dates in the names
    assert d["mask"].all()
    (folder / f"S2_mask_{stamps[2]}.tif").unlink()
    with pytest.raises(ValueError, match=r"no mask file for date\(s\) \['2020-03-21T10:29:00'\]"):
        open_scene(folder, ["s2"], spec, "2020-03-01")
    write_tif(folder / f"S2_mask_{stamps[2]}.tif", np.full((H, W), 255, np.uint8), UL)
    scene = open_scene(folder, ["s2"], spec, "2020-03-01")
    with pytest.raises(ValueError, match=r"S2_mask_20200321T102900\.tif: the s2 mask holds value\(s\) .*255: 30 px"):
        scene.check_quality()
    write_tif(folder / f"S2_{stamps[2]}.tif", v[2][:, :, :4], UL)
    with pytest.raises(ValueError, match=r"every file of a modality must be on one grid.*6 x 5 px.*6 x 4 px"):
        open_scene(folder, ["s2"], spec, "2020-03-01")


def test_stack_without_georeferencing_works_with_a_warning(tmp_path: Path) -> None:
    stack_scene(tmp_path / "a", transform=None, crs=None)
    write_tif(tmp_path / "a" / "label.tif", np.full((H, W), 1200, np.int32), None, None)
    with pytest.warns(UserWarning, match=r"not georeferenced \(no CRS, identity transform\)"):
        dm = GeoTiffDataModule(
            str(tmp_path), modalities=["s2"], sources=STACK, radiometry=RAD,
            labels={"file": "label.tif", "classes": {"maize": [1200], "wheat": [1110]}}, reference_date="2020-03-01",
            split={"block_size": 2, "n_folds": 3},
        )  # fmt: skip
    grid = dm.scenes[0].grid
    assert grid.crs is None and grid.transform == Affine.identity() and not grid.georeferenced
    assert dm.split is not None and all("scene a px block 2" in r["group"] for r in dm.split.group_rows)


def test_label_raster_elsewhere_and_a_scene_without_valid_pixel(tmp_path: Path) -> None:
    stack_scene(tmp_path / "a")
    write_tif(tmp_path / "a" / "label.tif", np.ones((H, W), np.int32), Affine(10, 0, 600000, 0, -10, 5600000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"do not overlap.*label\.tif: EPSG:32631.*S2_stack\.tif: EPSG:32631"):
            open_scene(tmp_path / "a", ["s2"], STACK, "2020-03-01", label={"file": "label.tif"})
    stack_scene(tmp_path / "b", mask=np.ones((T, H, W), np.uint8))
    with pytest.raises(ValueError, match=r"Scene b has no valid observation in any modality \(s2: 90 observations"):
        GeoTiffDataModule(str(tmp_path), scenes=["b"], modalities=["s2"], reference_date="2020-03-01",
                          sources={"s2": {**STACK["s2"], "mask": "S2_masks.tif"}}, norm_stats=None)  # fmt: skip
    with pytest.raises(ValueError, match=r"needs either stack .* or files"):
        open_scene(tmp_path / "a", ["s2"], {"s2": {"bands": ["B04"]}}, "2020-03-01")


def test_the_geotiff_nodata_tag_is_no_data_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    v = values().astype(np.int16)
    v[:, :, 2:4, 1:3] = -999  # 4 pixels x 3 dates
    write_tif(folder / "S2_stack.tif", v.reshape(T * C, H, W), UL, 32631, nodata=-999)
    (folder / "S2_dates.txt").write_text("20200301\n20200311\n20200321\n")
    scene = open_scene(folder, ["s2"], STACK, "2020-03-01", radiometry=RAD)
    assert scene.series["s2"].radiometry.nodata == (-999.0,)
    d = scene.read()["s2"]
    assert not d["mask"][:, 2:4, 1:3].any() and int((~d["mask"]).sum()) == 12
    with caplog.at_level("INFO"):
        scene.report.log("Scene a")
    assert "s2: 90 observations, 12 invalid (13.3 %): nodata 12" in caplog.text
    # data.radiometry adds to the file's own fill values.
    scene = open_scene(folder, ["s2"], STACK, "2020-03-01", radiometry={"s2": {"scale": 1e-4, "nodata": [1500]}})
    assert scene.series["s2"].radiometry.nodata == (1500.0, -999.0)
    # Per-date files: each file's tag.
    (tmp_path / "b").mkdir()
    for t, day in enumerate(("20200301", "20200311", "20200321")):
        write_tif(tmp_path / "b" / f"S2_{day}.tif", v[t], UL, 32631, nodata=-999)
    files = {"s2": {"files": "S2_*.tif", "bands": ["B04", "B08"]}}
    d = open_scene(tmp_path / "b", ["s2"], files, "2020-03-01", radiometry=RAD).read()["s2"]
    assert not d["mask"][:, 2:4, 1:3].any() and int((~d["mask"]).sum()) == 12


def test_a_source_key_that_does_nothing_is_refused(tmp_path: Path) -> None:
    stack_scene(tmp_path / "a")
    with pytest.raises(ValueError, match=r"data\.sources\.s2 has unknown key\(s\) \['nodata'\]; valid keys are "
                                         r"\['stack', .*data\.radiometry\.s2\.nodata"):  # fmt: skip
        open_scene(tmp_path / "a", ["s2"], {"s2": {**STACK["s2"], "nodata": -999}}, "2020-03-01")


def test_a_label_nodata_that_is_also_a_class_code_is_refused(tmp_path: Path) -> None:
    stack_scene(tmp_path / "a")
    codes = np.full((H, W), 1, np.uint8)
    codes[:3] = 2
    codes[:, 0] = 255
    write_tif(tmp_path / "a" / "label.tif", codes, UL, 32631, nodata=255)
    kwargs = dict(
        root=str(tmp_path), modalities=["s2"], sources=STACK, radiometry=RAD,
        reference_date="2020-03-01", split={"block_size": 2, "n_folds": 3},
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"label\.tif declare no-data 255, but data\.labels\.classes maps code 255 to "
                                         r"class 'water'.*-unsetnodata.*ignore_codes"):  # fmt: skip
        GeoTiffDataModule(
            **kwargs, labels={"file": "label.tif", "classes": {"maize": [1], "wheat": [2], "water": [255]}}
        )
    # 255 as no label: its pixels are ignored, the other codes are classes.
    dm = GeoTiffDataModule(**kwargs, labels={"file": "label.tif", "classes": {"maize": [1], "wheat": [2]}})
    assert dm.class_names == ("unlabelled", "maize", "wheat") and dm.mapping is not None
    assert 255 in dm.mapping.ignore_codes
