"""Acquisition dates: texts, dates files, dates in file names, doy with the time of day."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtan_s1s2.data.dates import (
    check_increasing,
    date_from_name,
    days_since,
    parse_datetime,
    read_dates_file,
    resolve_reference_date,
)


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
    with pytest.raises(ValueError, match=r"date 2 is 2018-09-24T00:00:00 and date 3 is 2018-09-24T00:00:00"):
        check_increasing(np.array(["2018-09-20", "2018-09-24", "2018-09-24"], "datetime64[s]"), "S2")
