"""Stored values to physical units: scales, S2 baseline offsets, S1 linear/dB/amplitude, no-data reasons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from mtan_s1s2.data.radiometry import MaskReport, Radiometry, default_radiometry, radiometry_per_modality


def test_s2_digital_numbers_with_the_baseline_04_offset() -> None:
    # The same reflectance 0.1234 stored before and after 25 January 2022 (DN + 1000 from then on).
    stored = np.array([1234, 2234, 0], np.uint16).reshape(3, 1, 1, 1)
    r = Radiometry.from_config({"scale": 1e-4, "dn_offset": "s2_baseline_04"}, base=default_radiometry("s2"))
    x, valid, reasons = r.apply(stored, dates=np.array(["2021-12-30", "2022-01-25", "2022-02-04"], "datetime64[D]"))
    np.testing.assert_allclose(x[:2, 0, 0, 0], [0.1234, 0.1234], rtol=1e-6)
    assert valid[:, 0, 0].tolist() == [True, True, False] and reasons["nodata"] == 1  # DN 0 is no data
    per_date = r.dn_offsets(["2022-01-24", "2022-01-25"], 2)
    assert per_date.tolist() == [0.0, -1000.0]
    stepped = Radiometry(dn_offset={"2020-01-01": -500, "2021-01-01": -1000})
    steps = stepped.dn_offsets(["2019-06-01", "2020-06-01", "2021-06-01"], 3)
    assert steps.tolist() == [0.0, -500.0, -1000.0]


def test_s1_linear_power_and_amplitude_become_db_and_non_positive_is_invalid() -> None:
    stored = np.array([[0.1, 0.01], [0.0, 0.5], [-0.2, 1.0]], np.float32).reshape(3, 2, 1, 1)
    x, valid, reasons = Radiometry(units="linear").apply(stored)
    np.testing.assert_allclose(x[0, :, 0, 0], [-10.0, -20.0], atol=1e-5)
    assert valid[:, 0, 0].tolist() == [True, False, False] and reasons["non_positive"] == 2
    # WorldCereal's scaled uint16: dB = 20 log10(DN) - 83.
    x, valid, _ = Radiometry(units="amplitude", offset=-83.0).apply(np.array([10000], np.uint16).reshape(1, 1, 1, 1))
    assert x[0, 0, 0, 0] == pytest.approx(-3.0) and valid.all()


def test_nodata_rules_and_non_finite() -> None:
    dn = np.array([[0, 120], [0, 0], [30, 90]], np.int16).reshape(3, 2, 1, 1)
    _, valid, reasons = default_radiometry("s1_asc").apply(dn)  # S1 DN: all channels 0 is a fill
    assert valid[:, 0, 0].tolist() == [True, False, True]
    assert reasons == {"non_finite": 0, "nodata": 1, "non_positive": 0, "out_of_range": 0}
    _, valid, _ = default_radiometry("s2").apply(dn)  # S2 DN: any band at the fill
    assert valid[:, 0, 0].tolist() == [False, False, True]
    stored = np.array([[0.0, -12.0], [0.0, 0.0], [np.nan, -9.0]], np.float32).reshape(3, 2, 1, 1)
    _, valid, reasons = default_radiometry("s1_asc").apply(stored)  # 0 dB stored as a float is a real value
    assert valid[:, 0, 0].tolist() == [True, True, False]
    assert reasons == {"non_finite": 1, "nodata": 0, "non_positive": 0, "out_of_range": 0}
    _, valid, _ = Radiometry.from_config({"scale": 1e-4}, base=default_radiometry("s2")).apply(stored)
    assert valid[:, 0, 0].tolist() == [False, False, False]  # scaled DN stored as floats: 0 is still a fill
    _, valid, reasons = Radiometry.from_config({"nodata": [0]}, base=default_radiometry("s1_asc")).apply(stored)
    assert valid[:, 0, 0].tolist() == [True, False, False] and reasons["nodata"] == 1  # explicit: any dtype
    report = MaskReport()
    report.add("s1_asc", 3, {"non_finite": 1, "nodata": 1, "non_positive": 0, "out_of_range": 0})
    report.add("s1_asc", 3, {"quality": 1})
    assert report.lines() == ["s1_asc: 6 observations, 3 invalid (50.0 %): non_finite 1, nodata 1, quality 1"]


def test_plausibility_warnings() -> None:
    valid = np.ones((2, 1, 1), bool)
    dn = np.full((2, 3, 1, 1), 1500.0, np.float32)
    assert "scale" in Radiometry().plausibility(dn, valid, "s2")
    linear = np.full((2, 2, 1, 1), 0.05, np.float32)
    assert "units=linear" in Radiometry(units="db").plausibility(linear, valid, "s1_asc")
    assert Radiometry(units="db").plausibility(-linear * 200, valid, "s1_asc") is None


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"s2": {"units": "kelvin"}}, "units"),
        ({"s2": {"scale": 0}}, "scale"),
        ({"s2": {"dn_offset": "baseline"}}, "dn_offset"),
        ({"s2": {"gain": 2}}, r"Unknown radiometry key\(s\) \['gain'\]"),
        ({"s3": {}}, "unknown modality"),
    ],
)
def test_bad_settings_raise_clear_errors(cfg: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        radiometry_per_modality(cfg, ["s2", "s1_asc"])


def test_an_exact_zero_of_a_float_ndvi_cube_is_valid(tmp_path: Path) -> None:
    """A real NetCDF cube: NDVI zeros (bare soil, water) are data; DN zeros of a uint16 S2 band are not."""
    from mtan_s1s2.data.datacube.scenes import open_scene

    scene_dir = tmp_path / "site"
    scene_dir.mkdir()
    rng = np.random.default_rng(0)
    ndvi = rng.uniform(-0.2, 0.9, (3, 4, 5)).astype(np.float32)
    ndvi[:, 1, :] = 0.0  # 15 exact zeros
    ndvi[0, 0, 0] = np.nan  # the cube's own no data (xarray writes _FillValue NaN for floats)
    dn = np.full((3, 4, 5), 1200, np.uint16)
    dn[:, 2, 3] = 0
    coords = {
        "t": np.asarray(["2021-04-01", "2021-05-01", "2021-06-01"], "datetime64[ns]"),
        "y": 5000035.0 - 10 * np.arange(4),
        "x": 500005.0 + 10 * np.arange(5),
    }
    xr.Dataset({"NDVI": (("t", "y", "x"), ndvi)}, coords=coords).to_netcdf(scene_dir / "NDVI.nc")
    xr.Dataset({"B04": (("t", "y", "x"), dn)}, coords=coords).to_netcdf(scene_dir / "S2.nc")
    sources = {"s2": {"files": ["NDVI.nc"], "bands": ["NDVI"]}, "s1_asc": {"files": ["S2.nc"], "bands": ["B04"]}}
    scene = open_scene(scene_dir, ["s2"], sources, "2021-01-01")
    out = scene.read()["s2"]
    assert out["mask"][:, 1, :].all() and np.all(out["x"][:, 0, 1, :] == 0.0)
    assert int((~out["mask"]).sum()) == 1 and not out["mask"][0, 0, 0]
    assert scene.report.invalid["s2"] == {"non_finite": 1}
    dn_scene = open_scene(scene_dir, ["s2"], {"s2": {"files": ["S2.nc"], "bands": ["B04"]}}, "2021-01-01")
    mask = dn_scene.read()["s2"]["mask"]
    assert not mask[:, 2, 3].any() and int((~mask).sum()) == 3
