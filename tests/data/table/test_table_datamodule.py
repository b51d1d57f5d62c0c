"""data=table: wide and long pixel tables, dates, radiometry, labels, honest splits, bad input."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mtan_s1s2.data.table.datamodule import TableDataModule

S2 = {"bands": ["B04", "B08"], "pattern": "S2-{band}-ts{t}"}
S1 = {"bands": ["VV", "VH"], "pattern": "SAR-{band}-ts{t}-*"}
LABELS = {"column": "code", "classes": {"wheat": [11], "maize": [12]}, "ignore_codes": [0]}
SPLIT = {"by": "groups", "group_column": "field", "n_folds": 4, "fold": 1}
RADIOMETRY = {
    "s2": {"scale": 1.0e-4, "nodata": [65535]},
    "s1": {"units": "amplitude", "offset": -83.0, "nodata": [65535], "nodata_rule": "any"},
}


def wide_frame(n: int = 40, t: int = 4, seed: int = 0) -> pd.DataFrame:
    """``n`` pixels in ``n // 2`` fields (2 pixels each), S2 as DN, S1 as WorldCereal's uint16."""
    rng = np.random.default_rng(seed)
    data: dict[str, object] = {
        "pixel": [f"p{i}" for i in range(n)],
        "field": [f"f{i // 2}" for i in range(n)],
        "code": [11 if (i // 2) % 2 else 12 for i in range(n)],
    }
    for k in range(t):
        for band in ("B04", "B08"):
            data[f"S2-{band}-ts{k}"] = rng.integers(100, 5000, n).astype(np.uint16)
        for band in ("VV", "VH"):
            data[f"SAR-{band}-ts{k}-20m"] = rng.integers(1000, 4000, n).astype(np.uint16)
    return pd.DataFrame(data)


def make_wide(tmp_path: Path, split: dict | None = None, labels: dict | None = None, **kw) -> TableDataModule:
    """The wide test table; ``split`` / ``labels`` entries replace those of :data:`SPLIT` / :data:`LABELS`."""
    args = dict(
        path=str(tmp_path / "wide.csv"), columns={"s2": S2, "s1": S1}, format="wide", id_column="pixel",
        date_start="2021-01-15", date_step="1M", labels={**LABELS, **(labels or {})}, split={**SPLIT, **(split or {})},
        radiometry=RADIOMETRY, batch_size=8,
    )  # fmt: skip
    args.update(kw)
    return TableDataModule(**args)


def test_wide_csv_pixels_dates_radiometry_and_grouped_folds(tmp_path: Path) -> None:
    frame = wide_frame()
    frame.loc[3, "S2-B08-ts2"] = 65535  # one S2 observation without data
    frame.to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path)
    assert dm.modalities == ["s2", "s1"] and dm.in_channels == {"s2": 2, "s1": 2}
    assert dm.class_names == ("unlabelled", "wheat", "maize") and dm.seq_len == {"s2": 4, "s1": 4}
    assert dm.doy_range == (0.0, 90.0)  # 15 Jan, 15 Feb, 15 Mar, 15 Apr; day 0 = the first date
    raw = dm.raw_dataset("train")
    sample = raw[0]
    i = sample["patch_id"]
    assert sample["s2"]["x"].shape == (4, 2, 1, 1) and sample["label"].shape == (1, 1)
    assert sample["s2"]["doy"].tolist() == [0.0, 31.0, 59.0, 90.0]
    np.testing.assert_allclose(sample["s2"]["x"][0, 0, 0, 0], frame.loc[i, "S2-B04-ts0"] * 1e-4, rtol=1e-6)
    vv = float(frame.loc[i, "SAR-VV-ts1-20m"])
    np.testing.assert_allclose(sample["s1"]["x"][1, 0, 0, 0], 20 * np.log10(vv) - 83, rtol=1e-5)
    masked = next(s for s in (dm.raw_dataset(x) for x in ("train", "val", "test")) for s in s if s["patch_id"] == 3)
    assert masked["s2"]["mask"][:, 0, 0].tolist() == [True, True, False, True]
    assert masked["s1"]["mask"].all()
    # Whole fields per split, every pixel in one split, the split written to split.csv.
    assert dm.write_split(tmp_path) == tmp_path / "split.csv"
    rows = list(csv.DictReader(open(tmp_path / "split.csv")))
    assert len(rows) == 40 and {r["split"] for r in rows} == {"train", "val", "test"}
    by_field: dict[str, set[str]] = {}
    for r in rows:
        by_field.setdefault(r["group"], set()).add(r["split"])
    assert all(len(s) == 1 for s in by_field.values())
    assert sum(dm.split_sizes().values()) == 40 and dm.split_sizes()["test"] == 10  # 4 folds of 5 fields
    other = make_wide(tmp_path, split={"fold": 2})
    assert set(np.flatnonzero(other.split == "test")) == set(np.flatnonzero(dm.split == "val"))  # next fold


def test_batches_and_normalisation(tmp_path: Path) -> None:
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path, norm_stats="auto")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["s2"]["x"].shape == (8, 4, 2, 1, 1) and batch["label"].shape == (8, 1, 1)
    stats = dm.norm_stats
    assert stats is not None and stats["s2"].mean.shape == (2,)
    x = batch["s2"]["x"][batch["s2"]["mask"][:, :, None].expand_as(batch["s2"]["x"])]
    assert abs(float(x.mean())) < 0.6  # normalised


def test_long_parquet_irregular_dates(tmp_path: Path) -> None:
    rows = []
    for p in range(12):
        n_dates = 3 + p % 3  # 3, 4 or 5 dates per pixel, given out of order
        for k in reversed(range(n_dates)):
            rows.append({
                "id": f"px{p}", "date": f"2020-{k + 3:02d}-{1 + p:02d}", "label": "grass" if p % 2 else "crop",
                "block": p // 2, "S2-L2A-B04": 500 + k, "S2-L2A-B08": 3000 + k,
            })  # fmt: skip
    pd.DataFrame(rows).to_parquet(tmp_path / "long.parquet")
    dm = TableDataModule(
        path=str(tmp_path / "long.parquet"), columns={"s2": {"bands": ["B04", "B08"], "pattern": "S2-L2A-{band}"}},
        format="long", id_column="id", date_column="date", split={"group_column": "block", "n_folds": 3},
        radiometry={"s2": {"scale": 1e-4}}, reference_date="2020-01-01", norm_stats=None,
    )  # fmt: skip
    assert dm.class_names == ("unlabelled", "crop", "grass")  # labels.classes=null: one class per value
    assert dm.seq_len is None  # dates per pixel differ
    samples = [s for split in ("train", "val", "test") for s in dm.raw_dataset(split)]
    first = next(s for s in samples if s["patch_id"] == 0)
    doy = first["s2"]["doy"].tolist()
    assert doy == sorted(doy) and len(doy) == 3 and doy[0] == 60.0  # 2020-03-01, sorted by date
    np.testing.assert_allclose(first["s2"]["x"][:, 0, 0, 0].numpy(), [0.05, 0.0501, 0.0502], rtol=1e-5)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))  # padded to the longest series of the batch
    assert batch["s2"]["x"].shape[1] == max(int(m.sum()) for m in batch["s2"]["mask"].reshape(len(batch["label"]), -1))


def test_fixed_split_by_column_and_by_files(tmp_path: Path) -> None:
    frame = wide_frame()
    frame["part"] = ["cal" if i < 24 else "val" if i < 32 else "test" for i in range(40)]
    frame.to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path, split={"by": "column", "column": "part", "names": {"cal": "train"}})
    assert dm.split_sizes() == {"train": 24, "val": 8, "test": 8} and dm.fold is None
    assert {dm.split[i] for i in range(24)} == {"train"} and set(dm.split[32:]) == {"test"}
    paths = {}
    for s, part in (("train", frame[:24]), ("val", frame[24:32]), ("test", frame[32:])):
        part.to_parquet(tmp_path / f"{s}.parquet")
        paths[s] = str(tmp_path / f"{s}.parquet")
    by_files = make_wide(tmp_path, path=paths, split={"by": "files"})
    assert by_files.split_sizes() == {"train": 24, "val": 8, "test": 8} and by_files.fold is None


@pytest.mark.parametrize(
    "split,path,message",
    [
        ({"by": "column"}, None, r"data.split.by=column needs data.split.column"),
        ({"column": "part"}, None, r"data.split.column / data.split.names are read by data.split.by=column only"),
        ({"by": "files"}, None, r"data.split.by=files needs data.path=\{train: file, val: file, test: file\}"),
        ({}, {"train": "a.csv", "val": "b.csv", "test": "c.csv"}, r"one file per split .* set data.split.by=files"),
        ({"by": "pixels"}, None, r"data.split.by must be one of \['groups', 'column', 'files'\], got 'pixels'"),
        (
            {"blocks": {"x": "lon", "y": "lat", "size": 1}},
            None,
            r"data.split.group_column or data.split.blocks, not both",
        ),
        (
            {"group_colum": "field"},
            None,
            r"data.split has no key 'group_colum' \(did you mean data.split.group_column\?\)",
        ),
    ],
)
def test_split_settings_that_do_not_go_together(tmp_path: Path, split: dict, path: dict | None, message: str) -> None:
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=message):
        make_wide(tmp_path, split=split, **({"path": path} if path else {}))


def test_labels_column_and_ignore_codes_without_classes(tmp_path: Path) -> None:
    frame = wide_frame()
    frame.loc[:3, "code"] = 0  # four pixels without a class
    frame.to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path, labels={"classes": None, "ignore_codes": [0]})
    assert dm.class_names == ("unlabelled", "11", "12") and sum(dm.split_sizes().values()) == 36
    with pytest.raises(ValueError, match=r"data.labels has no key 'colum' \(did you mean data.labels.column\?\)"):
        make_wide(tmp_path, labels={"colum": "code"})


# --- bad input: clear errors and warnings before training -------------------------------


def test_missing_band_columns_are_named(tmp_path: Path) -> None:
    wide_frame().drop(columns=["S2-B08-ts0", "S2-B08-ts1", "S2-B08-ts2", "S2-B08-ts3"]).to_csv(
        tmp_path / "wide.csv", index=False
    )
    with pytest.raises(ValueError, match=r"S2-\{band\}-ts\{t\}.*band\(s\) \['B08'\] \(1 of 2 bands\)"):
        make_wide(tmp_path)
    wide_frame().drop(columns=["S2-B08-ts3"]).to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"band 'B08' has 3 date columns but 'B04' has 4: no column for t=\[3\]"):
        make_wide(tmp_path)


def test_date_count_must_match_the_columns(tmp_path: Path) -> None:
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"data.dates has 3 date\(s\) but the table has 4 date columns per band"):
        make_wide(tmp_path, dates=["2021-01-01", "2021-02-01", "2021-03-01"], date_start=None)
    with pytest.raises(ValueError, match=r"a wide table needs its dates"):
        make_wide(tmp_path, date_start=None, date_step=None)


def test_unmapped_label_codes_are_counted(tmp_path: Path) -> None:
    frame = wide_frame()
    frame.loc[:2, "code"] = 99
    frame.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"1 label code\(s\) are not mapped to a class: 99: 3 px"):
        make_wide(tmp_path)
    dm = make_wide(tmp_path, labels={**LABELS, "unknown": "ignore"})
    assert sum(dm.split_sizes().values()) == 37  # the 3 unmapped pixels left out


def test_group_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    with caplog.at_level(logging.WARNING):
        make_wide(tmp_path, split={"group_column": "pixel"})
    assert "hold one pixel each (40 groups for 40 pixels)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        make_wide(tmp_path, split={"group_column": None})
    assert "every pixel is its own group" in caplog.text
    frame = wide_frame()
    frame["field"] = ["a"] * 30 + ["b"] * 5 + ["c"] * 5  # 3 groups for 3 folds: one group per split
    frame.to_csv(tmp_path / "wide.csv", index=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        make_wide(tmp_path, split={"n_folds": 3})
    assert "split is a single group" in caplog.text
    with pytest.raises(ValueError, match=r"only 3 groups for data.split.n_folds=4"):
        make_wide(tmp_path)


def test_other_bad_tables(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"Pixel table not found: '/.*missing.csv' \(data.path="):
        make_wide(tmp_path, path=str(tmp_path / "missing.csv"))
    frame = wide_frame()
    frame[[f"S2-B08-ts{k}" for k in range(4)]] = 65535
    frame.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"s2 column\(s\) \['B08'\] hold no data .* in every row"):
        make_wide(tmp_path)
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"column\(s\) \['nope'\] not found"):
        make_wide(tmp_path, labels={"column": "nope"})
    long = pd.DataFrame({"id": ["a", "a"], "date": ["2020-01-01"] * 2, "label": [1, 1], "S2-L2A-B04": [1, 2]})
    long.to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(ValueError, match=r"date 2020-01-01 repeats at row 1 \(id='a'\) and row 2 \(id='a'\)"):
        TableDataModule(
            path=str(tmp_path / "long.csv"), columns={"s2": {"bands": ["B04"], "pattern": "S2-L2A-{band}"}},
            format="long", id_column="id", date_column="date",
        )  # fmt: skip


def test_parquet_nullable_dtypes_read_like_the_csv(tmp_path: Path) -> None:
    """Float64/Int64 columns with <NA> (pandas' nullable dtypes kept by Parquet) read as the CSV of the same table."""
    frame = wide_frame()
    frame.loc[2, "S2-B04-ts1"] = None
    frame.loc[5, "SAR-VV-ts0-20m"] = None
    nullable = frame.astype(
        {c: "Float64" for c in frame.columns if c.startswith(("S2-", "SAR-"))} | {"code": "Int64", "pixel": "string"}
    )
    nullable.to_parquet(tmp_path / "wide.parquet")
    nullable.to_csv(tmp_path / "wide.csv", index=False)
    parquet = make_wide(tmp_path, path=str(tmp_path / "wide.parquet"), norm_stats=None)
    csv_dm = make_wide(tmp_path, norm_stats=None)
    assert parquet.table.ids.tolist() == csv_dm.table.ids.tolist()
    assert parquet.labels.tolist() == csv_dm.labels.tolist()
    for m in ("s2", "s1"):
        pairs = zip(parquet.table.x[m], csv_dm.table.x[m], parquet.table.valid[m], csv_dm.table.valid[m], strict=True)
        for a, b, va, vb in pairs:
            np.testing.assert_array_equal(va, vb)
            np.testing.assert_allclose(a[va], b[vb], rtol=1e-6)
    i2 = parquet.table.ids.tolist().index("p2")
    assert parquet.table.valid["s2"][i2].tolist() == [True, False, True, True]  # <NA> -> an invalid observation
    assert sum(int((~v).sum()) for v in parquet.table.valid["s2"]) == 1


def test_groups_keyed_by_tile_and_parcel(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Parcel 17 of tile A and parcel 17 of tile B are two fields; a class of one parcel is warned in any fold."""
    rows = [
        {"tile": "A" if p < 6 else "B", "parcel_id": 17 if p in (0, 6) else p, "label": 3 if p == 9 else 1 + p % 2,
         **{f"B04-ts{t}": 1000 + 100 * p + t for t in range(3)}}
        for p in range(10) for _ in range(4)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    args = dict(path=str(tmp_path / "t.csv"), columns={"s2": {"bands": ["B04"], "pattern": "{band}-ts{t}"}},
                date_start="2021-04-01", date_step="10D", norm_stats=None)  # fmt: skip
    merged = TableDataModule(**args, split={"group_column": "parcel_id", "n_folds": 5})
    assert len(set(merged.table.groups.tolist())) == 9
    for fold in range(1, 6):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            dm = TableDataModule(**args, split={"group_column": ["tile", "parcel_id"], "n_folds": 5, "fold": fold})
        assert len(set(dm.table.groups.tolist())) == 10 and "A/17" in set(dm.table.groups.tolist())
        split_of_3 = dm.split[dm.labels == dm.class_names.index("3")][0]
        assert f"Class(es) ['3'] are each held by a single group (3: group 'B/9' in {split_of_3})" in caplog.text
    assert dm.group_name == "tile+parcel_id"


@pytest.mark.parametrize("order", ["date_major", "band_major"])
def test_headerless_csv_by_column_positions(tmp_path: Path, order: str) -> None:
    """A CSV without a header row (label, field, then the values): header=none and column positions."""
    rng = np.random.default_rng(0)
    values = rng.integers(100, 5000, (24, 3, 2))  # (pixel, date, band)
    flat = values.reshape(24, 6) if order == "date_major" else values.transpose(0, 2, 1).reshape(24, 6)
    frame = pd.DataFrame([[11 + i % 2, f"f{i // 2}", *flat[i].tolist()] for i in range(24)])
    frame.to_csv(tmp_path / "ucr.csv", header=False, index=False)
    columns = {"s2": {"bands": ["B04", "B08"], "positions": {"start": 2, "order": order}}}
    args = dict(path=str(tmp_path / "ucr.csv"), columns=columns, date_start="2021-01-01", date_step="10D",
                split={"n_folds": 3}, norm_stats=None, radiometry={"s2": {"scale": 1e-4}})  # fmt: skip
    with pytest.raises(ValueError, match=r"column\(s\) \['label'\] not found.*look like values.*data.header=none"):
        TableDataModule(**{**args, "columns": {"s2": S2}})
    dm = TableDataModule(**{**args, "split": {"n_folds": 3, "group_column": 1}}, header="none", labels={"column": 0})
    assert dm.class_names == ("unlabelled", "11", "12") and dm.seq_len == {"s2": 3}
    assert len(set(dm.table.groups.tolist())) == 12  # fields from column 1
    i = dm.table.ids.tolist().index("ucr.csv:5")
    np.testing.assert_allclose(dm.table.x["s2"][i], values[5] * 1e-4, rtol=1e-6)  # (T, C) in date, band order
    shifted = {"s2": {"bands": ["B04", "B08"], "positions": {"start": 3, "order": order}}}
    with pytest.raises(ValueError, match=r"spans columns 3..7 \(5 columns\), not a whole number of dates of 2 band"):
        TableDataModule(**{**args, "columns": shifted}, header="none", labels={"column": 0})
    with pytest.raises(ValueError, match=r"column position\(s\) \['9'\] not found; the file has 8 columns"):
        TableDataModule(**args, header="none", labels={"column": 9})


def test_headerless_long_csv_and_parquet(tmp_path: Path) -> None:
    rows = [
        [f"px{p}", f"2020-0{k + 3}-01", "crop" if p % 2 else "grass", 500 + k, 3000 + k]
        for p in range(9)
        for k in range(3)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "long.csv", header=False, index=False)
    dm = TableDataModule(
        path=str(tmp_path / "long.csv"), columns={"s2": {"bands": ["B04", "B08"], "positions": [3, 4]}}, format="long",
        header="none", id_column=0, date_column=1, labels={"column": 2}, split={"n_folds": 3}, norm_stats=None,
        radiometry={"s2": {"scale": 1e-4}},
    )  # fmt: skip
    assert dm.table.ids.tolist()[:2] == ["px0", "px1"] and dm.seq_len == {"s2": 3}
    np.testing.assert_allclose(dm.table.x["s2"][0][:, 1], [0.3, 0.3001, 0.3002], rtol=1e-6)
    pd.DataFrame({"label": [1, 2], "B04-ts0": [1, 2]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"data.header=none is for CSV files"):
        TableDataModule(
            path=str(tmp_path / "t.parquet"), header="none", date_start="2021-01-01", date_step="10D",
            columns={"s2": {"bands": ["B04"], "positions": {"start": 1, "order": "date_major"}}},
        )  # fmt: skip


def test_fixed_split_without_validation_holds_out_training_groups(tmp_path: Path) -> None:
    frame = wide_frame(n=80)
    paths = {}
    for s, part in (("train", frame[:60]), ("test", frame[60:])):
        part.to_csv(tmp_path / f"{s}.csv", index=False)
        paths[s] = str(tmp_path / f"{s}.csv")
    files = {"by": "files", "group_column": "field"}
    with pytest.raises(
        ValueError, match=r"no validation pixels \(data.path has no val file\).*data.split.val_fraction"
    ):
        make_wide(tmp_path, path=paths, split=files)
    dm = make_wide(tmp_path, path=paths, split={**files, "val_fraction": 0.2})
    sizes = dm.split_sizes()
    assert sizes["test"] == 20 and sizes["train"] + sizes["val"] == 60 and sizes["val"] == 12  # 6 of 30 fields
    split_of = {}
    for g, sp in zip(dm.table.groups.tolist(), dm.split.tolist(), strict=True):
        split_of.setdefault(g, set()).add(sp)
    assert all(len(v) == 1 for v in split_of.values())  # whole fields move to validation
    val_classes = np.bincount(dm.labels[dm.split == "val"], minlength=3)[1:]
    assert val_classes.min() >= 4  # stratified: both classes held out (3 fields of each)
    again = make_wide(tmp_path, path=paths, split={**files, "val_fraction": 0.2})
    assert (again.split == dm.split).all()  # seeded (data.split.seed)
    frame["part"] = ["train"] * 60 + ["test"] * 20
    frame.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(ValueError, match=r"no validation pixels \(the split column has no val rows\)"):
        make_wide(tmp_path, split={"by": "column", "column": "part"})
    assert make_wide(tmp_path, split={"by": "column", "column": "part", "val_fraction": 0.2}).split_sizes()["val"] == 12
    with pytest.raises(
        ValueError, match=r"data.split.val_fraction=0.2 holds validation pixels out of a fixed training"
    ):
        make_wide(tmp_path, split={"val_fraction": 0.2})
    with pytest.raises(ValueError, match=r"data.split.val_fraction must be in \(0, 0.5\]"):
        make_wide(tmp_path, split={"by": "column", "column": "part", "val_fraction": 0.8})


def test_messages_show_plain_numbers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Integer ids and groups read by pandas are NumPy scalars: messages show 5, never np.int64(5)."""
    args = dict(columns={"s2": {"bands": ["B04"], "pattern": "{band}-ts{t}"}}, date_start="2021-01-01",
                date_step="10D", split={"n_folds": 3}, norm_stats=None)  # fmt: skip
    pd.DataFrame({"pid": [5, 5, 6, 7], "label": [1, 2, 1, 2], "B04-ts0": [1, 2, 3, 4]}).to_csv(tmp_path / "w.csv")
    with pytest.raises(ValueError, match=r"\(e\.g\. 5\); a wide table has one row per pixel") as err:
        TableDataModule(path=str(tmp_path / "w.csv"), id_column="pid", **args)
    assert "np." not in str(err.value)
    long = pd.DataFrame({"id": [3, 3, 4], "date": ["2020-01-01", "2020-01-02", "2020-01-01"], "label": [1, 2, 1]})
    long.assign(B04=[1, 2, 3]).to_csv(tmp_path / "l.csv", index=False)
    with pytest.raises(ValueError, match=r"several values of 'label' over their dates \(e\.g\. id=3\)"):
        long_args = {**args, "columns": {"s2": {"bands": ["B04"], "pattern": "{band}"}}}
        TableDataModule(path=str(tmp_path / "l.csv"), **long_args, format="long", id_column="id", date_column="date")
    frame = pd.DataFrame({"field": [1, 1, 2, 2, 3, 3], "label": [1, 2, 1, 2, 1, 2], "B04-ts0": range(6)})
    frame.to_csv(tmp_path / "g.csv", index=False)
    with caplog.at_level(logging.WARNING):
        TableDataModule(path=str(tmp_path / "g.csv"), **{**args, "split": {"n_folds": 3, "group_column": "field"}})
    assert "split is a single group (1)" in caplog.text and "np." not in caplog.text


def test_pretraining_reads_the_unlabelled_pixels_of_the_split_area(tmp_path: Path) -> None:
    """task=pretrain serves a split's labelled pixels and the unlabelled pixels of its groups.

    An unlabelled pixel of a validation or test field never reaches training; one in a field
    without any labelled pixel is in no validation or test area and pretrains.
    """
    frame = wide_frame()
    frame.loc[[0, 10, 20], "code"] = 0  # ignored code, in fields f0, f5, f10 (which keep a labelled pixel)
    extra = wide_frame(4, seed=1).assign(pixel=[f"u{i}" for i in range(4)], field=["g0", "g0", "g1", "g1"], code=99)
    pd.concat([frame, extra]).to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path, labels={**LABELS, "unknown": "ignore"})
    assert sum(dm.split_sizes().values()) == 37  # 7 unlabelled pixels left out of every split
    field_split = {f: s for f, s in zip(dm.table.groups.tolist(), dm.split.tolist(), strict=True)}
    want = {"train": [], "val": [], "test": []}
    for pixel, field in (("p0", "f0"), ("p10", "f5"), ("p20", "f10")):
        want[field_split[field]].append(pixel)
    want["train"] += ["u0", "u1", "u2", "u3"]  # fields g0, g1 hold no labelled pixel
    for split, unlabelled in want.items():
        served = dm.build_unlabelled_dataset(split)
        labelled = int((dm.split == split).sum())
        assert len(served) == labelled + len(unlabelled)
        extra_ids = sorted(dm.unlabelled_table.ids[served[i]["patch_id"]] for i in range(labelled, len(served)))
        assert extra_ids == sorted(unlabelled), split
        assert all(int(served[i]["label"]) == dm.ignore_index for i in range(labelled, len(served)))
        assert all("parcel" not in served[i] for i in range(len(served)))
    dm.serve_unlabelled()
    batch = next(iter(dm.train_dataloader()))
    assert all(torch.isfinite(batch[m]["x"]).all() for m in ("s2", "s1"))
    assert len(dm.dataset("train")) == int((dm.split == "train").sum()) + len(want["train"])


def test_pretraining_without_unlabelled_pixels_serves_the_split_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wide_frame().to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path)
    assert dm.unlabelled_table is None
    with caplog.at_level(logging.WARNING):
        assert len(dm.build_unlabelled_dataset("train")) == dm.split_sizes()["train"]
    n = dm.split_sizes()["train"]
    assert f"no unlabelled pixel in the training split, so the encoder pretrains on the {n} pixels" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        dm.build_unlabelled_dataset("val")  # validation: no warning
    assert "no unlabelled pixel" not in caplog.text


def test_pretraining_unlabelled_pixels_of_a_fixed_split(tmp_path: Path) -> None:
    """By a split column: a field's split first, then the pixel's own value; other values are never served."""
    frame = wide_frame()
    frame["part"] = ["cal" if i < 24 else "val" if i < 32 else "test" for i in range(40)]
    frame.loc[[1, 33], "code"] = 0  # unlabelled pixels of field f0 (train) and f16 (test)
    extra = wide_frame(3, seed=2).assign(pixel=["u0", "u1", "u2"], field=["g0", "g1", "f0"], code=0)
    extra["part"] = ["test", "bare soil", "test"]  # u2 is in training field f0: trains despite its value
    pd.concat([frame, extra]).to_csv(tmp_path / "wide.csv", index=False)
    dm = make_wide(tmp_path, split={"by": "column", "column": "part", "names": {"cal": "train"}})
    served = {
        s: sorted(dm.unlabelled_table.ids[int(d[i]["patch_id"])] for i in range(dm.split_sizes()[s], len(d)))
        for s in ("train", "val", "test")
        for d in [dm.build_unlabelled_dataset(s)]
    }
    assert served == {"train": ["p1", "u2"], "val": [], "test": ["p33", "u0"]}  # u1 ("bare soil"): none
