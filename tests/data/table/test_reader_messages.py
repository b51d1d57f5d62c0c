"""Table errors quote pixel ids as the file holds them: ``id=5``, never ``id=np.int64(5)``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mtan_s1s2.data.table.datamodule import TableDataModule

S2 = {"bands": ["B04"], "pattern": "S2-L2A-{band}"}


def test_table_errors_quote_integer_pixel_ids_as_numbers(tmp_path: Path) -> None:
    long = pd.DataFrame({"id": [5, 5, 6], "date": ["2020-01-01", "2020-01-01", "2020-01-01"], "label": [1, 1, 2],
                         "S2-L2A-B04": [0.1, 0.2, 0.3]})  # fmt: skip
    long.to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(ValueError, match=r"repeats at row 1 \(id=5\) and row 2 \(id=5\)") as err:
        TableDataModule(path=str(tmp_path / "long.csv"), columns={"s2": S2}, format="long", id_column="id",
                        date_column="date")  # fmt: skip
    assert "np." not in str(err.value)
    varying = pd.DataFrame({"id": [5, 5], "date": ["2020-01-01", "2020-02-01"], "label": [1, 2],
                            "S2-L2A-B04": [0.1, 0.2]})  # fmt: skip
    varying.to_csv(tmp_path / "varying.csv", index=False)
    with pytest.raises(ValueError, match=r"several values of 'label' over their dates \(e.g. id=5\)") as err:
        TableDataModule(path=str(tmp_path / "varying.csv"), columns={"s2": S2}, format="long", id_column="id",
                        date_column="date")  # fmt: skip
    assert "np." not in str(err.value)
    wide = pd.DataFrame({"pixel": [7, 7, 8], "label": [1, 1, 2], "B04-ts0": [0.1, 0.2, 0.3]})
    wide.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"repeat a pixel id of data.id_column='pixel' \(e.g. 7\)") as err:
        TableDataModule(path=str(tmp_path / "wide.csv"), columns={"s2": {"bands": ["B04"], "pattern": "{band}-ts{t}"}},
                        id_column="pixel", date_start="2020-01-01", date_step="10D")  # fmt: skip
    assert "np." not in str(err.value)
