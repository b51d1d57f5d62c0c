"""Acquisition dates: texts, dates files, dates in file names, doy with the time of day."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from affine import Affine

from fixtures.scene_files import write_cube, write_tif
from mtan_s1s2.data.datacube.scenes import open_scene as open_cube_scene
from mtan_s1s2.data.dates import (
    add_steps,
    as_datetimes,
    check_increasing,
    date_from_name,
    days_since,
    parse_datetime,
    parse_step,
    read_dates_file,
    resolve_reference_date,
)
from mtan_s1s2.data.geotiff.scenes import open_scene as open_geotiff_scene
from mtan_s1s2.data.table.datamodule import TableDataModule


def test_date_texts_and_names_keep_the_time_of_day() -> None:
    assert parse_datetime("20180924") == np.datetime64("2018-09-24T00:00:00")
    assert parse_datetime("2018-09-24T10:54:16") == np.datetime64("2018-09-24T10:54:16")
    assert parse_datetime(20180924) == np.datetime64("2018-09-24")
    assert date_from_name("S2_20180924T105416.tif") == np.datetime64("2018-09-24T10:54:16")
    assert date_from_name("SENTINEL2A_20180924-105416-123_L2A_T31TCJ.tif") == np.datetime64("2018-09-24T10:54:16")
    assert date_from_name("VV_2018-09-24.tif") == np.datetime64("2018-09-24")
    with pytest.raises(ValueError, match=r"No date found in the file name 'S2_final\.tif'.*date_pattern"):
        date_from_name("S2_final.tif")


def test_dates_file(tmp_path: Path) -> None:
    path = tmp_path / "dates.txt"
    path.write_text("# S2 dates\n20180924\n\n2018-10-04T10:50:00, S2B\n")
    np.testing.assert_array_equal(read_dates_file(path), np.array(["2018-09-24", "2018-10-04T10:50"], "datetime64[s]"))
    path.write_text("20180924\nlast week\n")
    with pytest.raises(ValueError, match=r"dates\.txt, line 2: 'last' is not a date"):
        read_dates_file(path)
    with pytest.raises(ValueError, match="Dates file not found"):
        read_dates_file(tmp_path / "missing.txt")


def test_doy_reference_and_order() -> None:
    ref = resolve_reference_date("attr:start_date", {"start_date": "2018-08-01"})
    doy = days_since(np.array(["2018-08-01T12:00", "2019-08-02T06:00"], "datetime64[s]"), ref)
    np.testing.assert_allclose(doy, [0.5, 366.25])
    with pytest.raises(ValueError, match=r"no attribute 'season'.*\['start_date'\]"):
        resolve_reference_date("attr:season", {"start_date": "2018-08-01"})
    with pytest.raises(ValueError, match=r"data\.reference_date is not set"):
        resolve_reference_date(None)
    with pytest.raises(ValueError, match=r"S2: the acquisition date 2018-09-24 repeats at date 2 and date 3"):
        check_increasing(np.array(["2018-09-20", "2018-09-24", "2018-09-24"], "datetime64[s]"), "S2")


def test_times_of_day_in_every_form() -> None:
    for text in ("2021-05-02 01:30:00", "2021-05-02T01:30", "20210502T013000", "2021-05-02 01:30", "2021-05-02T01:30Z"):
        assert parse_datetime(text) == np.datetime64("2021-05-02T01:30:00"), text
    assert parse_datetime(pd.Timestamp("2021-05-02 01:30")) == np.datetime64("2021-05-02T01:30:00")
    np.testing.assert_array_equal(
        as_datetimes(["2021-05-02", "2021-05-02T18:00"]), np.array(["2021-05-02", "2021-05-02T18:00"], "datetime64[s]")
    )
    with pytest.raises(ValueError, match=r"data.dates, position 1: 'May 3' is not a date"):
        as_datetimes(["2021-05-02", "May 3"], "data.dates")
    with pytest.raises(ValueError, match=r"data.dates: 1 missing date\(s\) \(first at position 0\)"):
        as_datetimes([None, "2021-05-02"], "data.dates")


def test_one_order_rule_names_positions_and_values() -> None:
    dates = np.array(["2021-05-03", "2021-05-01", "2021-05-03"], "datetime64[s]")
    with pytest.raises(ValueError, match=r"date 2021-05-03 repeats at date 1 and date 3.*carry their times of day"):
        check_increasing(dates, "S2")
    with pytest.raises(ValueError, match=r"date 2 \(2021-05-01\) comes after date 1 \(2021-05-03\); sort the dates"):
        check_increasing(dates[:2], "S2")
    same_time = np.array(["2021-05-03T06:00", "2021-05-03T06:00"], "datetime64[s]")
    with pytest.raises(ValueError, match=r"2021-05-03T06:00:00 repeats") as err:
        check_increasing(same_time, "S2")
    assert "times of day" not in str(err.value)  # they have times: a true duplicate
    check_increasing(np.array(["2021-05-03T06:00", "2021-05-03T18:00"], "datetime64[s]"), "S2")  # same day, 2 times
    # Several series one after the other (a long table): each checked on its own.
    check_increasing(np.array(["2021-05-03", "2021-05-04", "2021-05-03"], "datetime64[s]"), "t", segments=[0, 0, 1])
    with pytest.raises(ValueError, match=r"repeats at row 2 and row 3"):
        dates = np.array(["2021-05-03", "2021-05-04", "2021-05-04"], "datetime64[s]")
        check_increasing(dates, "t", segments=[0, 1, 1], name=lambda i: f"row {i + 1}")


def test_steps_keep_the_time_of_day() -> None:
    start = np.array(["2021-01-31T06:00"], "datetime64[s]")
    np.testing.assert_array_equal(
        add_steps(start, [0, 1, 2], parse_step("1M"))[0],
        np.array(["2021-01-31T06:00", "2021-02-28T06:00", "2021-03-31T06:00"], "datetime64[s]"),
    )
    half_days = add_steps(start, [0, 1], parse_step(0.5))[0]  # fractional days are hours, never rounded to a day
    np.testing.assert_array_equal(half_days, np.array(["2021-01-31T06:00", "2021-01-31T18:00"], "datetime64[s]"))


UL = Affine(10, 0, 500000, 0, -10, 5600000)
SAME_DAY = ["2021-05-02T01:30:00", "2021-05-02T18:00:00", "2021-05-12T01:30:00"]
DOY = [121.0625, 121.75, 131.0625]  # days since 2021-01-01, the time of day as the fraction


def test_one_doy_for_tables_dates_files_and_datacubes(tmp_path: Path) -> None:
    """The same three acquisitions (two of them on one day) give the same doy in every reader."""
    rng = np.random.default_rng(0)
    # A GeoTIFF stack with a dates file that writes the times after a space.
    (tmp_path / "tif").mkdir()
    write_tif(tmp_path / "tif" / "S2.tif", rng.integers(100, 3000, (3, 4, 4)).astype(np.uint16), UL)
    (tmp_path / "tif" / "dates.txt").write_text("".join(d.replace("T", " ") + "\n" for d in SAME_DAY))
    tif = open_geotiff_scene(
        tmp_path / "tif", ["s2"], {"s2": {"stack": "S2.tif", "dates": "dates.txt", "bands": ["B04"]}}, "2021-01-01"
    )
    np.testing.assert_allclose(tif.read()["s2"]["doy"], DOY, rtol=1e-6)
    # A datacube whose time axis holds the same stamps.
    write_cube(tmp_path / "cube" / "S2.nc", {"B04": rng.integers(100, 3000, (3, 4, 4)).astype(np.int16)},
               np.array(SAME_DAY, "datetime64[s]"))  # fmt: skip
    cube = open_cube_scene(tmp_path / "cube", ["s2"], {"s2": {"files": ["S2.nc"], "bands": ["B04"]}}, "2021-01-01")
    np.testing.assert_allclose(cube.read()["s2"]["doy"], DOY, rtol=1e-6)
    # A wide table dated by data.dates.
    frame = pd.DataFrame({"pid": range(9), "label": [1 + i % 2 for i in range(9)],
                          **{f"B04-ts{t}": 1000 + t for t in range(3)}})  # fmt: skip
    frame.to_csv(tmp_path / "wide.csv", index=False)
    dm = TableDataModule(
        path=str(tmp_path / "wide.csv"), columns={"s2": {"bands": ["B04"], "pattern": "{band}-ts{t}"}},
        id_column="pid", split={"n_folds": 3}, dates=SAME_DAY, reference_date="2021-01-01", norm_stats=None,
    )  # fmt: skip
    np.testing.assert_allclose(dm.raw_dataset("train")[0]["s2"]["doy"].numpy(), DOY, rtol=1e-6)
    assert dm.doy_range == pytest.approx((DOY[0], DOY[-1]))


def test_dates_file_same_day_needs_times(tmp_path: Path) -> None:
    write_tif(tmp_path / "S2.tif", np.ones((2, 4, 4), np.uint16), UL)
    (tmp_path / "dates.txt").write_text("2021-05-02\n2021-05-02\n")
    sources = {"s2": {"stack": "S2.tif", "dates": "dates.txt", "bands": ["B04"]}}
    with pytest.raises(ValueError, match=r"dates\.txt\).*2021-05-02 repeats at date 1 and date 2.*times of day"):
        open_geotiff_scene(tmp_path, ["s2"], sources, "2021-01-01")
    (tmp_path / "dates.txt").write_text("2021-05-02 06:00\n2021-05-02 18:00\n")
    scene = open_geotiff_scene(tmp_path, ["s2"], sources, "2021-01-01")
    np.testing.assert_allclose(scene.read()["s2"]["doy"], [121.25, 121.75])


def test_wide_table_dates_must_increase(tmp_path: Path) -> None:
    frame = pd.DataFrame({"pid": range(9), "label": [1 + i % 2 for i in range(9)],
                          **{f"{b}-ts{t}": 1000 + t for t in range(3) for b in ("B04", "B08")}})  # fmt: skip
    frame.to_csv(tmp_path / "wide.csv", index=False)
    args = dict(path=str(tmp_path / "wide.csv"), columns={"s2": {"bands": ["B04", "B08"], "pattern": "{band}-ts{t}"}},
                id_column="pid", split={"n_folds": 3})  # fmt: skip
    with pytest.raises(ValueError, match=r"data.dates: the acquisition date 2021-05-03 repeats at t=0 .* and t=2"):
        TableDataModule(**args, dates=["2021-05-03", "2021-05-01", "2021-05-03"])
    with pytest.raises(ValueError, match=r"t=1 \(data.dates\[1\]\) \(2021-05-01\) comes after t=0"):
        TableDataModule(**args, dates=["2021-05-03", "2021-05-01", "2021-05-04"])
