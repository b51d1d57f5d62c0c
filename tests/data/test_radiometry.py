"""Stored values to physical units: scales, S2 baseline offsets, S1 linear/dB/amplitude, no-data reasons."""

from __future__ import annotations

import numpy as np
import pytest

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
    stored = np.array([[0.0, -12.0], [0.0, 0.0], [np.nan, -9.0]], np.float32).reshape(3, 2, 1, 1)
    _, valid, reasons = default_radiometry("s1_asc").apply(stored)  # S1: all channels 0 is a fill
    assert valid[:, 0, 0].tolist() == [True, False, False]
    assert reasons == {"non_finite": 1, "nodata": 1, "non_positive": 0, "out_of_range": 0}
    _, valid, _ = default_radiometry("s2").apply(stored)  # S2: any band at the fill
    assert valid[:, 0, 0].tolist() == [False, False, False]
    report = MaskReport()
    report.add("s1_asc", 3, reasons)
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
