"""data=datacube: real WorldCereal cubes (cropped copies) and small written ones, read with xarray."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from rasterio.windows import Window

from fixtures.scene_files import LABELS, MINI, MINI_SCENES, SOURCES, make_scene, times, write_cube
from fixtures.scene_files import MINI_LABELS as WC_LABELS
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.datacube.scenes import open_scene

S2_10 = ["B02", "B03", "B04", "B08"]
S2_20 = ["B05", "B06", "B07", "B8A", "B11", "B12"]
WC_SOURCES = {
    "s2": {"files": ["S2_L2A_10m_*.nc", "S2_L2A_20m_*.nc"], "bands": S2_10 + S2_20, "quality": {"variable": "SCL"}},
    "s1_asc": {"files": ["S1_GRD-ASCENDING_*.nc"], "bands": ["VV", "VH"]},
}


def wc_datamodule(**kwargs) -> DatacubeDataModule:
    args = dict(
        root=str(MINI), scenes=MINI_SCENES, modalities=["s2", "s1_asc"], sources=WC_SOURCES,
        labels=WC_LABELS, reference_date="attr:start_date",
        split={"by": "blocks", "block_size": 8, "n_folds": 3, "fold": 1}, grid={"resolution": 10}, batch_size=2,
    )  # fmt: skip
    args.update(kwargs)
    return DatacubeDataModule(**args)


def test_real_worldcereal_cube_units_grid_dates_and_masks() -> None:
    folder = MINI / MINI_SCENES[0]
    scene = open_scene(
        folder, ["s2", "s1_asc"], WC_SOURCES, "attr:start_date", label={"file": "OUTPUT*.nc", "variable": "CT"}
    )
    assert scene.grid.shape == (24, 24) and scene.grid.res == (10, 10) and scene.grid.crs.to_epsg() == 32631
    assert scene.series["s2"].radiometry.scale == pytest.approx(1e-4)  # from the CF scale_factor
    data = scene.read()
    s2, s1 = data["s2"], data["s1_asc"]
    assert s2["x"].shape == (16, 10, 24, 24) and s1["x"].shape == (20, 2, 24, 24)
    valid = np.moveaxis(s2["x"], 1, -1)[s2["mask"]]
    assert 0.0 < np.median(valid) < 0.5  # reflectance, not DN
    assert -25 < np.median(np.moveaxis(s1["x"], 1, -1)[s1["mask"]]) < 0  # dB
    # doy: days since the patch's start_date (2018-08-01), the overpass time as the fraction.
    raw = xr.open_dataset(next(folder.glob("S2_L2A_20m_*.nc")), mask_and_scale=False)
    t0 = raw.timestamp.values[0].astype("datetime64[s]")
    assert s2["doy"][0] == pytest.approx((t0 - np.datetime64("2018-08-01T00:00:00")).astype(float) / 86400, abs=1e-4)
    assert 0.4 < s2["doy"][0] % 1 < 0.5  # ~10:50 UTC
    # A 20 m band is read on the 10 m grid: each 20 m pixel fills 2 x 2 pixels; SCL masks follow it.
    b05 = s2["x"][:, 4]
    np.testing.assert_array_equal(b05[:, ::2, ::2], b05[:, 1::2, 1::2])
    scl = raw.SCL.values
    cloudy = np.isin(scl, [0, 1, 3, 8, 9, 10, 11])
    np.testing.assert_array_equal(~s2["mask"][:, ::2, ::2], cloudy)
    assert scene.report.invalid["s2"]["quality"] == int(cloudy.sum()) * 4


def test_datamodule_splits_blocks_and_writes_the_split(tmp_path: Path) -> None:
    dm = wc_datamodule()
    assert dm.in_channels == {"s2": 10, "s1_asc": 2} and dm.class_names[1:] == ("maize", "grassland", "winter_cereals")
    seen = {}
    for split in ("train", "val", "test"):
        ds = dm.raw_dataset(split)
        for i in range(len(ds)):
            s = ds[i]
            assert s["s2"]["x"].shape == (16, 10, 8, 8) and s["label"].shape == (8, 8)
            scene, w = ds.items[i]
            for r, c in zip(*np.nonzero(s["label"].numpy()), strict=True):
                key = (scene, w.row_off + r, w.col_off + c)
                assert key not in seen, "a labelled pixel serves two splits"
                seen[key] = split
    path = dm.write_split(tmp_path)
    rows = list(csv.DictReader(open(path)))
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    assert sum(int(r["n_labelled"]) for r in rows) == len(seen)
    groups = [r["group"] for r in rows]
    assert len(groups) == len(set(groups)) and all(g.startswith("EPSG:32631 10m block 8") for g in groups)


def test_unknown_label_codes_are_counted_with_how_to_map_them() -> None:
    labels = {**WC_LABELS, "classes": {"maize": [1200], "grassland": [9120]}, "ignore_codes": [0]}
    with pytest.raises(ValueError, match=r"4 label code\(s\) are not mapped.*1110: 249 px.*data\.labels\.ignore_codes"):
        wc_datamodule(labels=labels)


def test_grids_that_do_not_overlap_name_both(tmp_path: Path) -> None:
    make_scene(tmp_path / "a", s1_offset=(50_000.0, 0.0))
    with pytest.raises(
        ValueError,
        match=r"do not overlap.*label\.nc: EPSG:32631, 8 x 8 px of 10 m.*S1_20m\.nc: EPSG:32631, 4 x 4 px of 20 m",
    ):
        DatacubeDataModule(str(tmp_path), sources=SOURCES, labels=LABELS, reference_date="2020-01-01")


def test_missing_band_and_bands_with_different_dates(tmp_path: Path) -> None:
    folder = make_scene(tmp_path / "a")
    bad = {**SOURCES, "s2": {**SOURCES["s2"], "bands": ["B02", "B05"]}}
    with pytest.raises(ValueError, match=r"band 'B05' is in none of .*their variables: \['B02', 'B08', 'B11', 'SCL'"):
        open_scene(folder, ["s2"], bad, "2020-01-01")
    write_cube(folder / "S2_20m.nc", {"B11": np.ones((4, 4, 4), np.uint16), "SCL": np.full((4, 4, 4), 4, np.uint8)},
               times(4), res=20.0)  # fmt: skip
    with pytest.raises(ValueError, match=r"band B11 has 4 dates but B02 has 5 .*only in B02"):
        open_scene(folder, ["s2"], SOURCES, "2020-01-01")


def test_bad_quality_values_and_scene_without_valid_pixel_fail_before_any_work(tmp_path: Path) -> None:
    folder = make_scene(tmp_path / "a")
    t = times(5)
    write_cube(folder / "S2_20m.nc", {"B11": np.ones((5, 4, 4), np.uint16), "SCL": np.full((5, 4, 4), 42, np.uint8)},
               t, res=20.0)  # fmt: skip
    with pytest.raises(ValueError, match=r"SCL quality band holds value\(s\) that are neither valid .*42: 320 px"):
        DatacubeDataModule(str(tmp_path), modalities=["s2"], sources=SOURCES, labels=LABELS,
                           reference_date="2020-01-01")  # fmt: skip
    write_cube(folder / "S2_20m.nc", {"B11": np.ones((5, 4, 4), np.uint16), "SCL": np.full((5, 4, 4), 9, np.uint8)},
               t, res=20.0)  # fmt: skip
    with pytest.raises(ValueError, match=r"Scene a has no valid observation in any modality .*quality 320"):
        DatacubeDataModule(str(tmp_path), modalities=["s2"], sources=SOURCES, labels=LABELS,
                           reference_date="2020-01-01")  # fmt: skip


def test_prediction_only_without_labels_and_a_20m_grid(tmp_path: Path) -> None:
    make_scene(tmp_path / "a")
    dm = DatacubeDataModule(str(tmp_path), sources=SOURCES, labels=None, reference_date="2020-01-01",
                            grid={"resolution": 20}, norm_stats=None)  # fmt: skip
    assert dm.scenes[0].grid.shape == (4, 4) and dm.split is None
    assert dm.scenes[0].read(Window(0, 0, 4, 4))["s2"]["x"].shape == (5, 3, 4, 4)
    with pytest.raises(ValueError, match=r"needs labels, but data\.labels\.file is null"):
        dm.dataset("train")


def test_files_of_one_band_are_concatenated_in_time(tmp_path: Path) -> None:
    folder = make_scene(tmp_path / "a", t1=4)
    whole = open_scene(folder, ["s1_asc"], SOURCES, "2020-01-01").read()["s1_asc"]
    import xarray as xr

    ds = xr.open_dataset(folder / "S1_20m.nc", mask_and_scale=False).load()
    ds.close()
    (folder / "S1_20m.nc").unlink()
    for name, part in (("S1_2020b.nc", ds.isel(t=slice(2, 4))), ("S1_2020a.nc", ds.isel(t=slice(0, 2)))):
        part.to_netcdf(folder / name)
    split = {**SOURCES, "s1_asc": {"files": ["S1_2020*.nc"], "bands": ["VV", "VH"]}}
    parts = open_scene(folder, ["s1_asc"], split, "2020-01-01").read()["s1_asc"]
    np.testing.assert_array_equal(parts["x"], whole["x"])
    np.testing.assert_array_equal(parts["doy"], whole["doy"])


def test_float_bands_with_nan_fills_share_one_encoding(tmp_path: Path) -> None:
    """xarray writes _FillValue NaN for float variables; two such bands have the same encoding (NaN != NaN aside)."""
    rng = np.random.default_rng(0)
    values = {b: rng.uniform(0.01, 0.5, (3, 4, 4)).astype(np.float32) for b in ("B04", "B08")}
    values["B08"][1, 0, 0] = np.nan
    write_cube(tmp_path / "s" / "S2.nc", values, times(3), scale=None, fill=None)  # float: xarray's NaN fill
    scene = open_scene(tmp_path / "s", ["s2"], {"s2": {"files": ["S2.nc"], "bands": ["B04", "B08"]}}, "2020-01-01")
    data = scene.read(Window(0, 0, 4, 4))["s2"]
    np.testing.assert_allclose(data["x"][0, 1], values["B08"][0], rtol=1e-6)
    assert not data["mask"][1, 0, 0] and data["mask"].sum() == 3 * 16 - 1


def test_worldcereal_tza_preset_reads_two_years_of_s1_and_three_crop_types(tmp_path: Path) -> None:
    import hydra

    from conftest import compose_train
    from fixtures.scene_files import MINI_TZA

    cfg = compose_train(["data=worldcereal_tza", f"data.root={MINI}", "data.split.n_folds=3"], output_dir=tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    assert dm.in_channels == {"s1_asc": 2} and dm.class_names[1:] == ("maize", "sorghum", "vegetables")
    scene = open_scene(MINI / MINI_TZA, ["s1_asc"], dict(cfg.data.sources), "attr:start_date",
                       label={"file": cfg.data.labels.file, "variable": "CT"})  # fmt: skip
    assert scene.grid.shape == (24, 24) and scene.grid.crs.to_epsg() == 32737
    data = scene.read()
    x, doy = data["s1_asc"]["x"], data["s1_asc"]["doy"]
    assert x.shape == (20, 2, 24, 24) and -25 < float(np.median(x)) < 0  # dB
    # days since the patch's start_date (2019-09-23): the first acquisition is 2019-10-12T15:55
    assert doy[0] == pytest.approx(19 + (15 * 60 + 55) / 1440, abs=1e-2)
    label = scene.read_label()
    assert label is not None
    codes, counts = np.unique(label[np.isfinite(label)], return_counts=True)
    found = dict(zip(codes.tolist(), counts.tolist(), strict=True))
    assert found == {0: 94, 1200: 129, 1400: 102, 2000: 217, 9998: 34}  # 0: the fill value; 9998: no crop type
    dm.setup("fit")  # 9998 is in ignore_codes: no "unknown code" error
    assert set(np.unique(dm.raw_dataset("train")[0]["label"].numpy())) <= {0, 1, 2, 3}
