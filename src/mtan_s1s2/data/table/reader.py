"""Read pixel tables (CSV or Parquet, wide or long) into per-pixel series in physical units.

:func:`read_pixel_table` reads one file (or one file per split), resolves the band columns
(:mod:`~mtan_s1s2.data.table.columns`) and dates (:mod:`~mtan_s1s2.data.table.dates`),
converts stored values with each modality's :class:`~mtan_s1s2.data.radiometry.Radiometry`
(scale, offset, units, no-data) and returns a :class:`PixelTable`: per pixel and modality
a ``(T, C)`` series, its validity and dates, plus the pixel's raw label, group and fixed
split. Everything that can be wrong in the table is checked here, before any training,
with messages that name the file, the columns and the counts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mtan_s1s2.data.dates import as_datetimes, check_increasing
from mtan_s1s2.data.radiometry import MaskReport, Radiometry
from mtan_s1s2.data.table.columns import BandColumns, headerless_hint, long_columns, wide_columns
from mtan_s1s2.data.table.dates import wide_dates
from mtan_s1s2.utils.text import plain

log = logging.getLogger(__name__)

TableFormat = Literal["wide", "long"]
Header = Literal["first_row", "none"]
HEADERS: tuple[str, ...] = ("first_row", "none")
PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


@dataclass
class PixelTable:
    """Pixels of a table, in physical units.

    Attributes:
        ids: ``(N,)`` pixel ids (the id column, or ``file:row``).
        x: Modality -> per pixel a ``(T_i, C) float32`` series (values of invalid
            observations are not trusted).
        valid: Modality -> per pixel ``(T_i,) bool``, True = valid observation.
        dates: Modality -> per pixel ``(T_i,) datetime64[s]``, strictly increasing (times of day
            kept).
        labels: ``(N,)`` raw labels (codes or names; NaN = none).
        groups: ``(N,)`` group of each pixel (parcel, polygon, spatial block).
        split: ``(N,)`` fixed split (``train``/``val``/``test``) from a column or the file
            of the pixel, or None.
        parcels: ``(N,)`` parcel id of each pixel (``data.split.parcels.column``; several
            columns joined by ``/``), or None.
        columns: Modality -> the columns read (wide: ``[t][band]``; long: ``[band]``).
        report: Observations read and invalid, per modality and reason.
    """

    ids: np.ndarray
    x: dict[str, list[np.ndarray]]
    valid: dict[str, list[np.ndarray]]
    dates: dict[str, list[np.ndarray]]
    labels: np.ndarray
    groups: np.ndarray
    split: np.ndarray | None = None
    parcels: np.ndarray | None = None
    columns: dict[str, Any] = field(default_factory=dict)
    report: MaskReport = field(default_factory=MaskReport)

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, keep: np.ndarray) -> PixelTable:
        """The pixels where ``keep`` (bool ``(N,)``) is True."""
        idx = np.flatnonzero(keep)
        pick = [int(i) for i in idx]
        return PixelTable(
            ids=self.ids[idx],
            x={m: [v[i] for i in pick] for m, v in self.x.items()},
            valid={m: [v[i] for i in pick] for m, v in self.valid.items()},
            dates={m: [v[i] for i in pick] for m, v in self.dates.items()},
            labels=self.labels[idx],
            groups=self.groups[idx],
            split=None if self.split is None else self.split[idx],
            parcels=None if self.parcels is None else self.parcels[idx],
            columns=self.columns,
            report=self.report,
        )


@dataclass(frozen=True)
class TableLayout:
    """How to read a table (the ``data.*`` keys of ``data=table``).

    Attributes:
        format: ``wide`` (one row per pixel) or ``long`` (one row per pixel and date).
        columns: Modality -> its bands and column pattern.
        label_column: Column of the raw labels.
        id_column: Pixel id column (needed by a long table; optional in a wide one).
        date_column: Long: each row's date. Wide: each row's first date (with ``date_step``).
        dates: Wide: one date per column index ``t``.
        date_start: Wide: the date of ``t = 0``.
        date_step: Wide: the step between column indices (``1M``, ``10D``, days).
        group_column: Group of each pixel (parcel, polygon id), or several columns whose
            combination is the group (``[tile, parcel_id]``: parcel ids numbered per tile),
            or None.
        group_blocks: ``{x: column, y: column, size: side}``: groups are squares of the
            coordinate columns (spatial blocks), or None.
        split_column: Column with a fixed ``train``/``val``/``test`` split, or None.
        parcel_columns: The parcel-id column(s) (``data.split.parcels.column``), or empty.
        radiometry: Modality -> stored values to physical units.
        header: ``first_row`` (the first row names the columns) or ``none`` (a CSV without
            a header row: columns are named by their position, ``"0"``, ``"1"``, ...; the
            column keys above are positions and band columns are given by
            ``positions``).
    """

    format: TableFormat
    columns: Mapping[str, BandColumns]
    label_column: str
    id_column: str | None = None
    date_column: str | None = None
    dates: Sequence[Any] | None = None
    date_start: Any = None
    date_step: Any = None
    group_column: str | Sequence[str] | None = None
    group_blocks: Mapping[str, Any] | None = None
    split_column: str | None = None
    parcel_columns: tuple[str, ...] = ()
    radiometry: Mapping[str, Radiometry] = field(default_factory=dict)
    header: Header = "first_row"

    def meta_columns(self) -> list[str]:
        """The non-band columns this layout reads."""
        names = [self.label_column, self.id_column, self.date_column, *group_columns(self.group_column)]
        names.append(self.split_column)
        names += list(self.parcel_columns)
        if self.group_blocks:
            names += [str(self.group_blocks.get("x")), str(self.group_blocks.get("y"))]
        return [str(n) for n in dict.fromkeys(names) if n is not None and n != ""]


def group_columns(spec: Any) -> list[str]:
    """``data.split.group_column`` as a list of column names (one name, or several: a group per combination).

    Positions of a headerless CSV (``0``) become names as the reader gives them (``"0"``).
    """
    if spec is None:
        return []
    if isinstance(spec, (str, int)):
        return [str(spec)]
    return [str(c) for c in spec]


def table_columns(path: Path, header: Header = "first_row") -> list[str]:
    """Column names of a CSV or Parquet file, without reading its rows.

    With ``header="none"`` (a CSV without a header row) the names are the positions as
    text, ``"0"``, ``"1"``, ...

    Raises:
        ValueError: If ``header="none"`` for a Parquet file (whose columns always have names).
    """
    if path.suffix.lower() in PARQUET_SUFFIXES:
        if header == "none":
            raise ValueError(
                f"{path}: data.header=none is for CSV files without a header row; a Parquet file names its columns "
                "(set data.header=first_row)."
            )
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    import pandas as pd

    if header == "none":
        return [str(i) for i in range(len(pd.read_csv(path, header=None, nrows=1).columns))]
    return [str(c) for c in pd.read_csv(path, nrows=0).columns]


def plain_dtypes(frame: Any) -> Any:
    """A frame with pandas' nullable columns as NumPy ones, missing values as NaN or None.

    Parquet files written from pandas keep its nullable dtypes (``Float64``, ``Int64``,
    ``boolean``, ``string``) whose missing value ``<NA>`` NumPy cannot compare. Numeric
    columns become ``float64`` with NaN where a value is missing (an invalid observation,
    as in the CSV of the same table), or ``int64`` when none is; text becomes ``object``
    with None.
    """
    import pandas as pd

    out = {}
    for name in frame.columns:
        col = frame[name]
        if not isinstance(col.dtype, pd.api.extensions.ExtensionDtype) or isinstance(col.dtype, pd.CategoricalDtype):
            continue
        missing = bool(col.isna().any())
        if pd.api.types.is_bool_dtype(col.dtype) and not missing:
            out[name] = col.to_numpy(dtype=bool)
        elif pd.api.types.is_integer_dtype(col.dtype) and not missing:
            out[name] = col.to_numpy(dtype=np.int64)
        elif pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
            out[name] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        elif pd.api.types.is_string_dtype(col.dtype):
            out[name] = col.astype(object).where(col.notna(), None).to_numpy()
    if not out:
        return frame
    frame = frame.copy()
    for name, values in out.items():
        frame[name] = pd.Series(values, index=frame.index, dtype=values.dtype)
    return frame


def read_frame(path: Path, columns: Sequence[str], header: Header = "first_row") -> Any:
    """The ``columns`` of a CSV or Parquet file as a pandas ``DataFrame`` of NumPy dtypes (:func:`plain_dtypes`).

    With ``header="none"``, ``columns`` are positions as text (:func:`table_columns`).
    """
    import pandas as pd

    if path.suffix.lower() in PARQUET_SUFFIXES:
        return plain_dtypes(pd.read_parquet(path, columns=list(columns)))
    if header == "none":
        frame = pd.read_csv(path, header=None, usecols=[int(c) for c in columns])
        return frame.rename(columns=str)
    return pd.read_csv(path, usecols=list(columns))


def check_file(path: str | Path, key: str = "data.path") -> Path:
    """The absolute path of an existing table file.

    Raises:
        FileNotFoundError: Naming the absolute path and the config key.
        ValueError: If the file is neither CSV nor Parquet.
    """
    p = Path(str(path)).expanduser().resolve()
    if not p.is_file():
        raise FileNotFoundError(
            f"Pixel table not found: {str(p)!r} ({key}={str(path)!r}); set {key} to a CSV or Parquet file."
        )
    suffixes = "".join(p.suffixes).lower()
    if p.suffix.lower() not in PARQUET_SUFFIXES and not any(s in suffixes for s in (".csv", ".tsv", ".txt")):
        raise ValueError(f"{p}: unknown table format {p.suffix!r}; use CSV (.csv, .csv.gz) or Parquet (.parquet).")
    return p


def _require(columns: Sequence[str], names: Sequence[str], where: str, header: Header = "first_row") -> None:
    missing = [n for n in names if n not in columns]
    if missing:
        if header == "none":
            raise ValueError(
                f"{where}: column position(s) {missing} not found; the file has {len(columns)} columns "
                f"(positions 0..{len(columns) - 1}, data.header=none)."
            )
        raise ValueError(
            f"{where}: column(s) {missing} not found; the table has {len(columns)} columns, e.g. {list(columns)[:8]}."
            + headerless_hint(columns)
        )


def _empty_bands(stored: np.ndarray, radiometry: Radiometry, names: Sequence[str], modality: str, where: str) -> None:
    """Raise when a band holds no data in every row (it would invalidate every observation)."""
    fill = ~np.isfinite(stored) if stored.dtype.kind == "f" else np.zeros(stored.shape, bool)
    nodata = radiometry.nodata_for(stored.dtype)
    if nodata:
        fill |= np.isin(stored, np.asarray(nodata))
    empty = [names[c] for c in range(stored.shape[1]) if fill[:, c].all()]
    if empty:
        raise ValueError(
            f"{where}: {modality} column(s) {empty[:6]} hold no data (NaN or a fill value "
            f"{list(nodata)}) in every row, so every {modality} observation would be invalid. Drop the "
            f"band(s) from data.columns.{modality}.bands."
        )


def _convert(
    stored: np.ndarray, dates: np.ndarray, radiometry: Radiometry, modality: str, report: MaskReport, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(R, C)`` stored observations -> ``(R, C) float32`` physical values and ``(R,)`` validity."""
    x, valid, reasons = radiometry.apply(stored[:, :, None, None], dates=dates)
    report.add(modality, stored.shape[0], reasons)
    warning = radiometry.plausibility(x, valid, modality)
    if warning:
        log.warning("%s (%s)", warning, where)
    return x[:, :, 0, 0], valid[:, 0, 0]


def _group_values(frame: Any, layout: TableLayout, ids: np.ndarray, where: str) -> np.ndarray:
    if layout.group_column:
        cols = group_columns(layout.group_column)
        missing = int(frame[cols].isna().any(axis=1).sum())
        if missing:
            raise ValueError(
                f"{where}: {missing} row(s) have no group in data.split.group_column={layout.group_column!r}."
            )
        if len(cols) == 1:
            return np.asarray(frame[cols[0]].to_numpy())
        # Several columns: one group per combination (tile A parcel 17 and tile B parcel 17 are two groups).
        parts = [frame[c].astype(str).to_numpy(dtype=object) for c in cols]
        return np.asarray(["/".join(p) for p in zip(*parts, strict=True)], dtype=object)
    if layout.group_blocks:
        blocks = dict(layout.group_blocks)
        try:
            size = float(blocks["size"])
            xs, ys = frame[str(blocks["x"])].to_numpy(float), frame[str(blocks["y"])].to_numpy(float)
        except KeyError as err:
            raise ValueError(
                f"data.split.blocks must be {{x: column, y: column, size: block side in their units}}; missing {err}."
            ) from None
        if not size > 0:
            raise ValueError(f"data.split.blocks.size must be > 0, got {size}.")
        bx, by = np.floor(xs / size).astype(np.int64), np.floor(ys / size).astype(np.int64)
        return np.asarray([f"{a}_{b}" for a, b in zip(bx.tolist(), by.tolist(), strict=True)])
    return ids


def _read_wide(frame: Any, layout: TableLayout, resolved: Mapping[str, Any], where: str, out: PixelTable) -> None:
    n = len(frame)
    for m, (t, names) in resolved.items():
        flat = [c for row in names for c in row]
        stored = frame[flat].to_numpy().reshape(n * len(t), len(names[0]))  # (N*T, C), row-major (pixel, date)
        row_starts = frame[layout.date_column].to_numpy() if layout.date_column else None
        dates = wide_dates(t, n, layout.dates, layout.date_start, layout.date_step, row_starts, where=where)  # (N, T)
        radiometry = layout.radiometry[m]
        _empty_bands(stored, radiometry, layout.columns[m].bands, m, where)
        x, valid = _convert(stored, dates.reshape(-1), radiometry, m, out.report, where)
        x = x.reshape(n, len(t), -1)
        valid = valid.reshape(n, len(t))
        out.x[m] = list(x)
        out.valid[m] = list(valid)
        out.dates[m] = list(dates)
        out.columns[m] = names


def _read_long(frame: Any, layout: TableLayout, resolved: Mapping[str, Any], where: str, out: PixelTable) -> None:
    import pandas as pd

    assert layout.id_column and layout.date_column  # checked by read_pixel_table
    column = f"{where}: data.date_column={layout.date_column!r}"
    dates = as_datetimes(frame[layout.date_column].to_numpy(), column)
    ids = frame[layout.id_column].to_numpy()
    codes, uniques = pd.factorize(pd.Series(ids), sort=False)
    order = np.lexsort((dates, codes))
    codes, dates_sorted = codes[order], dates[order]
    check_increasing(
        dates_sorted,
        f"{column} (one row per pixel and date)",
        segments=codes,
        name=lambda i: f"row {int(order[i]) + 1} ({layout.id_column}={plain(uniques[codes[i]])!r})",
    )
    bounds = np.flatnonzero(np.diff(codes)) + 1
    for m, names in resolved.items():
        stored = frame[names].to_numpy()[order]
        radiometry = layout.radiometry[m]
        _empty_bands(stored, radiometry, layout.columns[m].bands, m, where)
        x, valid = _convert(stored, dates_sorted, radiometry, m, out.report, where)
        out.x[m] = np.split(x, bounds)
        out.valid[m] = np.split(valid, bounds)
        out.dates[m] = np.split(dates_sorted, bounds)
        out.columns[m] = names


def _parcel_values(frame: Any, columns: Sequence[str], where: str) -> np.ndarray | None:
    """The parcel id of every row (several columns: their values joined by ``/``), or None without columns.

    Raises:
        ValueError: If a row has no parcel id.
    """
    if not columns:
        return None
    cols = list(columns)
    missing = int(frame[cols].isna().any(axis=1).sum())
    if missing:
        key = cols if len(cols) > 1 else cols[0]
        raise ValueError(
            f"{where}: {missing} row(s) have no parcel id in data.split.parcels.column={key!r}; give every pixel its "
            "parcel, or drop data.split.parcels."
        )
    if len(cols) == 1:
        return np.asarray(frame[cols[0]].to_numpy())
    parts = [frame[c].astype(str).to_numpy(dtype=object) for c in cols]
    return np.asarray(["/".join(p) for p in zip(*parts, strict=True)], dtype=object)


def _per_pixel(frame: Any, layout: TableLayout, column: str, where: str) -> np.ndarray:
    """One value per pixel of a long table (first row of each pixel, in pixel order); raise if it varies."""
    import pandas as pd

    assert layout.id_column
    grouped = frame.groupby(layout.id_column, sort=False)[column]
    varying = grouped.nunique(dropna=False)
    bad = varying[varying > 1]
    if len(bad):
        raise ValueError(
            f"{where}: {len(bad)} pixel(s) have several values of {column!r} over their dates (e.g. "
            f"{layout.id_column}={plain(bad.index[0])!r}); it must be constant per pixel."
        )
    ids = pd.factorize(frame[layout.id_column], sort=False)[1]
    return np.asarray(grouped.first().reindex(ids).to_numpy())


def _check_layout(layout: TableLayout, modalities: Sequence[str]) -> None:
    """Refuse modalities without columns, an unknown format or header, a long table without id and date columns."""
    missing = [m for m in modalities if m not in layout.columns]
    if missing:
        raise ValueError(
            f"data.modalities names {missing} but data.columns describes only {list(layout.columns)}; "
            "add their bands and column pattern to data.columns."
        )
    if layout.format not in ("wide", "long"):
        raise ValueError(f"data.format must be 'wide' or 'long', got {layout.format!r}.")
    if layout.header not in HEADERS:
        raise ValueError(
            f"data.header must be one of {list(HEADERS)} (none: a CSV without a header row, columns by position), "
            f"got {layout.header!r}."
        )
    if layout.format == "long" and not (layout.id_column and layout.date_column):
        raise ValueError(
            "A long table (data.format=long) needs data.id_column (the pixel id) and data.date_column (the date "
            "of each row)."
        )


def _wide_ids(frame: Any, layout: TableLayout, path: Path, where: str) -> np.ndarray:
    """Pixel ids of a wide table: ``data.id_column`` (unique per row), else ``<file name>:<row>``."""
    import pandas as pd

    if not layout.id_column:
        return np.asarray([f"{path.name}:{i}" for i in range(len(frame))])
    ids = frame[layout.id_column].to_numpy()
    dup = pd.Series(ids).duplicated().to_numpy()
    if dup.any():
        example = plain(ids[int(np.flatnonzero(dup)[0])])
        raise ValueError(
            f"{where}: {int(dup.sum())} row(s) repeat a pixel id of data.id_column={layout.id_column!r} "
            f"(e.g. {example!r}); a wide table has one row per pixel."
        )
    return np.asarray(ids)


def _read_file(path: Path, split: str | None, layout: TableLayout, modalities: Sequence[str]) -> PixelTable:
    """One file of the table (``split``: the split every pixel of it belongs to, or None)."""
    import pandas as pd

    where = str(path)
    columns = table_columns(path, layout.header)
    _require(columns, layout.meta_columns(), where, layout.header)
    resolved: dict[str, Any] = {}
    for m in modalities:
        spec = layout.columns[m]
        resolved[m] = (
            wide_columns(columns, spec, where) if layout.format == "wide" else long_columns(columns, spec, where)
        )
    bands = [c for m in modalities for c in np.ravel(resolved[m][1] if layout.format == "wide" else resolved[m])]
    frame = read_frame(path, list(dict.fromkeys([*layout.meta_columns(), *bands])), layout.header)
    if len(frame) == 0:
        raise ValueError(f"{where}: the table has no rows.")
    part = PixelTable(ids=np.zeros(0), x={}, valid={}, dates={}, labels=np.zeros(0), groups=np.zeros(0))
    if layout.format == "wide":
        ids = _wide_ids(frame, layout, path, where)
        _read_wide(frame, layout, resolved, where, part)
        part.labels = frame[layout.label_column].to_numpy()
        part.groups = _group_values(frame, layout, ids, where)
        part.split = None if not layout.split_column else frame[layout.split_column].to_numpy()
        part.parcels = _parcel_values(frame, layout.parcel_columns, where)
    else:
        ids = np.asarray(pd.factorize(frame[layout.id_column], sort=False)[1])
        _read_long(frame, layout, resolved, where, part)
        pixel_frame = frame.drop_duplicates(subset=[layout.id_column], keep="first")  # first-appearance order
        part.labels = _per_pixel(frame, layout, layout.label_column, where)
        for column in group_columns(layout.group_column):
            _per_pixel(frame, layout, column, where)
        part.groups = _group_values(pixel_frame, layout, ids, where)
        part.split = None if not layout.split_column else _per_pixel(frame, layout, layout.split_column, where)
        for column in layout.parcel_columns:
            _per_pixel(frame, layout, column, where)
        part.parcels = _parcel_values(pixel_frame, layout.parcel_columns, where)
    part.ids = ids
    if split is not None:
        part.split = np.full(len(ids), split)
    return part


def read_pixel_table(
    paths: str | Path | Mapping[str, str | Path], layout: TableLayout, modalities: Sequence[str]
) -> PixelTable:
    """Read a table (or one table per split) into a :class:`PixelTable`.

    Args:
        paths: A CSV/Parquet file, or ``{train: file, val: file, test: file}`` (a fixed
            split by file).
        layout: How to read it.
        modalities: Modalities to read (each needs ``layout.columns[m]``).

    Raises:
        FileNotFoundError: If a file does not exist (absolute path named).
        ValueError: On missing columns, dates that do not match the columns, repeated
            pixel-dates, labels or groups that vary within a pixel, or bands without data.
    """
    files: dict[str | None, Path]
    if isinstance(paths, Mapping):
        files = {str(s): check_file(p, f"data.path.{s}") for s, p in paths.items()}
    else:
        files = {None: check_file(paths)}
    _check_layout(layout, modalities)
    parts = [_read_file(path, split, layout, modalities) for split, path in files.items()]
    table = parts[0] if len(parts) == 1 else _concat(parts)
    for line in table.report.lines():
        log.info("Pixel table %s: %s", ", ".join(str(p) for p in files.values()), line)
    return table


def _concat(parts: Sequence[PixelTable]) -> PixelTable:
    out = PixelTable(
        ids=np.concatenate([p.ids.astype(object) for p in parts]),
        x={m: [v for p in parts for v in p.x[m]] for m in parts[0].x},
        valid={m: [v for p in parts for v in p.valid[m]] for m in parts[0].valid},
        dates={m: [v for p in parts for v in p.dates[m]] for m in parts[0].dates},
        labels=np.concatenate([p.labels.astype(object) for p in parts]),
        groups=np.concatenate([p.groups.astype(object) for p in parts]),
        split=np.concatenate([p.split for p in parts if p.split is not None]),
        parcels=None if parts[0].parcels is None else np.concatenate([p.parcels.astype(object) for p in parts]),  # type: ignore[union-attr]
        columns=parts[0].columns,
    )
    for p in parts:
        out.report.merge(p.report)
    return out


__all__ = [
    "HEADERS",
    "Header",
    "PixelTable",
    "TableFormat",
    "TableLayout",
    "check_file",
    "group_columns",
    "plain_dtypes",
    "read_frame",
    "read_pixel_table",
    "table_columns",
]
