"""Acquisition dates of every reader: parsing, the order rule, ``doy``, dates files and names.

One home for dates, used by pixel tables (wide and long), GeoTIFF dates files and file
names, PASTIS metadata and datacube time axes:

* :func:`parse_datetime` / :func:`as_datetimes`: a date with an optional time of day
  (``2018-09-24``, ``20180924T105416``, ``2018-09-24 10:54``) -> ``datetime64[s]``;
* :func:`check_increasing`: the dates of a series are strictly increasing; a repeated or
  out-of-order date is refused with its positions and values. Two acquisitions of one day
  are two dates when they carry their times of day;
* :func:`days_since`: ``doy``, days since a reference date as a float, the time of day as
  the fraction (06:00 -> +0.25), never wrapping at a year's end
  (:mod:`mtan_s1s2.data.batch`);
* :func:`parse_step` / :func:`add_steps`: regular dates ``start + t * step`` (``10D``,
  ``1M``), e.g. the columns of a wide table.

The reference date (``data.reference_date``) is a date (``2018-08-01``) or
``attr:<name>``: the scene's attribute of that name (a WorldCereal cube's ``start_date``),
so scenes of different years are aligned on their own season start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DATE_IN_NAME = r"(?P<date>\d{4}-?\d{2}-?\d{2})(?:[T_-]?(?P<time>\d{2}:?\d{2}:?\d{2}))?"
"""Default pattern of a date (and optional time) in a file name: ``20180924``,
``2018-09-24``, ``20180924T105416``, ``SENTINEL2A_20180924-105416-123_L2A``."""

_ISO = re.compile(
    r"^(\d{4})-?(\d{2})-?(\d{2})(?:[T _-]?(\d{2}):?(\d{2})(?::?(\d{2})(?:\.\d+)?)?)?\s*(?:Z|[+-]00:?00|UTC)?$"
)
_DATE_AT_START = re.compile(r"^\s*\d{4}-?\d{2}-?\d{2}(?:[T _-]?\d{2}:?\d{2}(?::?\d{2}(?:\.\d+)?)?)?(?:Z|UTC)?")
_NO_TIME = np.timedelta64(0, "s")


def parse_datetime(value: Any) -> np.datetime64:
    """A ``datetime64[s]`` from a date text, a ``date``/``datetime``, a pandas timestamp or a ``datetime64``.

    Texts: ``YYYYMMDD`` or ``YYYY-MM-DD``, optionally with a time of day after ``T``, a space,
    ``_`` or ``-``: ``20180924T105416``, ``2018-09-24 10:54:16``, ``2018-09-24T10:54``
    (seconds optional, fractions of a second dropped, a trailing ``Z``/``UTC`` accepted).
    Integers ``20180924`` are read as ``YYYYMMDD``. A date without a time is at 00:00:00.

    Raises:
        ValueError: If ``value`` is none of these (naming the value and the accepted forms).
    """
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise ValueError("a missing date (NaT); every acquisition needs its date.")
        cast: np.datetime64 = value.astype("datetime64[s]")
        return cast
    if hasattr(value, "isoformat") and not isinstance(value, str):
        value = value.isoformat()[:19]
    if isinstance(value, (int, np.integer)) or (isinstance(value, (float, np.floating)) and float(value).is_integer()):
        text = str(int(value))
    else:
        text = str(value).strip()
    m = _ISO.match(text)
    if m:
        y, mo, d, hh, mm, ss = m.groups()
        try:
            return np.datetime64(f"{y}-{mo}-{d}T{hh or '00'}:{mm or '00'}:{ss or '00'}", "s")
        except ValueError:
            pass
    raise ValueError(
        f"{value!r} is not a date; use YYYYMMDD or YYYY-MM-DD, optionally with a time of day "
        "(20180924T105416, 2018-09-24 10:54:16, 2018-09-24T10:54)."
    )


def as_datetimes(values: Any, where: str = "dates") -> np.ndarray:
    """Many dates (texts, ``datetime64``, ``date`` objects, pandas timestamps) as ``datetime64[s]``.

    Each value is read as :func:`parse_datetime` reads it; a ``datetime64`` array is only cast.

    Args:
        values: An array-like of dates, any shape.
        where: What the dates are (a file, a column, a config key), named in errors.

    Returns:
        ``datetime64[s]`` array of the shape of ``values``, times of day kept.

    Raises:
        ValueError: If a value is missing or not a date, naming ``where``, its position
            (flat, 0-based) and the value.
    """
    arr = np.asarray(values)
    if arr.dtype.kind == "M":
        out = arr.astype("datetime64[s]")
        missing = np.isnat(out)
    else:
        import pandas as pd

        flat = arr.astype(object).ravel()
        codes, uniques = pd.factorize(pd.Series(flat, dtype=object), use_na_sentinel=True)  # each text parsed once
        parsed = np.empty(len(uniques), "datetime64[s]")
        for k, value in enumerate(uniques.tolist()):
            try:
                parsed[k] = parse_datetime(value)
            except ValueError as err:
                i = int(np.flatnonzero(codes == k)[0])
                raise ValueError(f"{where}, position {i}: {err}") from None
        missing = codes < 0
        out = np.full(flat.shape, np.datetime64("NaT"), "datetime64[s]")
        out[~missing] = parsed[codes[~missing]]
        out, missing = out.reshape(arr.shape), missing.reshape(arr.shape)
    if missing.any():
        first = int(np.flatnonzero(missing.ravel())[0])
        raise ValueError(
            f"{where}: {int(missing.sum())} missing date(s) (first at position {first}); every acquisition needs "
            "its date."
        )
    return out


def read_dates_file(path: str | Path) -> np.ndarray:
    """Dates listed in a text file: one per line (blank lines and ``#`` comments skipped).

    Each line starts with a date as :func:`parse_datetime` reads it, optionally with its
    time of day (``2018-09-24 10:54:16``, ``20180924T105416``); what follows a comma,
    semicolon or space after it is ignored (``20180924,S2A`` works). Acquisitions of the
    same day are told apart by their times of day.

    Returns:
        ``(T,) datetime64[s]``, in file order (:func:`check_increasing` checks the order).

    Raises:
        ValueError: If the file is missing, empty, or a line is not a date (naming the
            file and the line number).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Dates file not found: {path.resolve()}; it lists one acquisition date per line.")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        m = _DATE_AT_START.match(text)
        field = m.group(0) if m and re.match(r"[,;\s]|$", text[m.end() :]) else re.split(r"[,;\s]", text, maxsplit=1)[0]
        try:
            out.append(parse_datetime(field))
        except ValueError as err:
            raise ValueError(f"{path.resolve()}, line {n}: {err}") from None
    if not out:
        raise ValueError(f"Dates file {path.resolve()} lists no date.")
    return np.asarray(out, dtype="datetime64[s]")


def date_from_name(name: str, pattern: str | None = None) -> np.datetime64:
    """The acquisition date in a file name.

    Args:
        name: The file name.
        pattern: A regex with a ``date`` group and an optional ``time`` group (default
            :data:`DATE_IN_NAME`).

    Raises:
        ValueError: If the name holds no date matching ``pattern``.
    """
    regex = re.compile(pattern or DATE_IN_NAME)
    for m in regex.finditer(name):
        groups = m.groupdict()
        date = groups.get("date") or m.group(0)
        time = groups.get("time")
        try:
            return parse_datetime(date + ("T" + time if time else ""))
        except ValueError:
            continue
    raise ValueError(
        f"No date found in the file name {name!r} with the pattern {regex.pattern!r}; name the files with "
        "their date (S2_20180924.tif) or set the modality's date_pattern (a regex with a (?P<date>...) group)."
    )


def show(date: np.datetime64) -> str:
    """A date as text: ``2021-05-03`` at midnight, ``2021-05-03T06:00:00`` with a time of day."""
    d = np.asarray(date).astype("datetime64[s]")[()]
    return str(d.astype("datetime64[D]")) if d - d.astype("datetime64[D]") == _NO_TIME else str(d)


def _same_day_hint(date: np.datetime64) -> str:
    """A hint for a repeated date without a time of day (two acquisitions of one day?)."""
    if date - date.astype("datetime64[D]") == _NO_TIME:
        day = str(date.astype("datetime64[D]"))
        return (
            f" Two acquisitions of one day are accepted when they carry their times of day (e.g. {day}T06:00:00 and "
            f"{day}T18:00:00, or '{day} 06:00')."
        )
    return ""


def check_increasing(
    dates: np.ndarray,
    where: str,
    segments: np.ndarray | None = None,
    name: Callable[[int], str] | None = None,
) -> None:
    """Raise if a series of acquisition dates repeats a date or is not sorted.

    The one rule for every reader (tables, dates files, file names, PASTIS metadata,
    datacube time axes): the dates of a series are strictly increasing. Dates are compared
    with their times of day, so two acquisitions of one day with distinct times are two
    dates.

    Args:
        dates: ``(T,)`` dates (``datetime64`` or anything :func:`as_datetimes` reads).
        where: The series (file, band, column), named in the error.
        segments: Optional ``(T,)`` series ids: several series one after the other
            (the pixels of a long table); each is checked on its own.
        name: Name of position ``i`` in the error (default ``date {i + 1}``).

    Raises:
        ValueError: Naming ``where``, the positions and values of the first repeated
            date (all its positions) or else of the first pair out of order, and the fix.
    """
    d = as_datetimes(dates, where).ravel()
    seg = np.zeros(d.shape, np.int64) if segments is None else np.asarray(segments).ravel()
    label = name or (lambda i: f"date {i + 1}")
    if d.size < 2:
        return
    order = np.lexsort((d, seg))
    same = (d[order][1:] == d[order][:-1]) & (seg[order][1:] == seg[order][:-1])
    if same.any():
        k = int(np.flatnonzero(same)[0])
        value, series = d[order][k], seg[order][k]
        at = np.flatnonzero((d == value) & (seg == series))
        raise ValueError(
            f"{where}: the acquisition date {show(value)} repeats at {' and '.join(label(int(i)) for i in at[:4])}"
            f"{' ...' if at.size > 4 else ''}; each date of a series appears once. Remove the duplicate."
            + _same_day_hint(value)
        )
    back = np.flatnonzero((np.diff(d) < np.timedelta64(0, "s")) & (seg[1:] == seg[:-1]))
    if back.size:
        i = int(back[0])
        raise ValueError(
            f"{where}: acquisition dates must be increasing, but {label(i + 1)} ({show(d[i + 1])}) comes after "
            f"{label(i)} ({show(d[i])}); sort the dates (and their data) in time order."
        )


def resolve_reference_date(spec: Any, attrs: Mapping[str, Any] | None = None, where: str = "") -> np.datetime64:
    """Day 0 of ``doy`` for a scene: a date, or ``attr:<name>`` (a scene attribute).

    Raises:
        ValueError: If ``spec`` is unset, names a missing attribute, or is not a date.
    """
    if spec is None or str(spec) in ("", "???"):
        raise ValueError(
            "data.reference_date is not set: give day 0 of the day-of-year axis (e.g. '2018-08-01', the start of the "
            "season) or attr:<name> for a scene attribute (e.g. attr:start_date)."
        )
    text = str(spec)
    if text.startswith("attr:"):
        key = text[5:]
        attrs = dict(attrs or {})
        if key not in attrs:
            raise ValueError(
                f"data.reference_date={text!r}, but {where or 'the scene'} has no attribute {key!r} (it has "
                f"{sorted(attrs)}); give a date instead (e.g. data.reference_date='2018-08-01')."
            )
        value: Any = attrs[key]
    else:
        value = spec
    try:
        return parse_datetime(str(parse_datetime(value))[:10])
    except ValueError as err:
        raise ValueError(f"data.reference_date={text!r}: {err}") from None


def days_since(dates: Sequence[Any] | np.ndarray, reference: np.datetime64) -> np.ndarray:
    """``doy``: days from ``reference`` to each date, the time of day as the fraction.

    The one ``doy`` of every reader: 06:00 on the day after ``reference`` is ``1.25``;
    dates before ``reference`` are negative; nothing wraps at a year's end.

    Args:
        dates: Dates of any shape (``datetime64`` or anything :func:`as_datetimes` reads).
        reference: Day 0.

    Returns:
        ``float32`` days, the shape of ``dates``.
    """
    d = as_datetimes(dates, "dates")
    seconds = (d - np.asarray(reference, "datetime64[s]")).astype(np.float64)
    out: np.ndarray = (seconds / 86400.0).astype(np.float32)
    return out


_STEP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([DWM]?)\s*$", re.IGNORECASE)


def parse_step(step: Any, key: str = "data.date_step") -> tuple[float, str]:
    """A step between dates: ``"1M"`` -> ``(1, "M")``, ``"10D"`` or ``10`` -> ``(10, "D")``, ``"2W"`` -> ``(14, "D")``.

    Days may be fractional (``0.5`` = 12 hours); months are whole calendar months.

    Raises:
        ValueError: On anything else, or a non-positive step (naming ``key``).
    """
    match = _STEP.match(str(step))
    if not match:
        raise ValueError(f"{key} must be like '1M' (months), '10D' (days), '2W' or a number of days, got {step!r}.")
    value, unit = float(match.group(1)), (match.group(2) or "D").upper()
    if value <= 0:
        raise ValueError(f"{key} must be positive, got {step!r}.")
    if unit == "W":
        return value * 7, "D"
    if unit == "M" and not value.is_integer():
        raise ValueError(f"{key} in months must be a whole number, got {step!r}.")
    return value, unit


def add_steps(start: np.ndarray, t: Sequence[int], step: tuple[float, str]) -> np.ndarray:
    """``start + t * step`` for every start and index: ``(N,)`` starts -> ``(N, T) datetime64[s]``.

    The time of day of ``start`` is kept. Calendar months keep the day of the month of
    ``start`` (clipped to the month's end: Jan 31 + 1M = Feb 28).
    """
    start = as_datetimes(start, "start dates").ravel()
    ts = np.asarray(t, dtype=np.int64)
    value, unit = step
    if unit == "D":
        offsets = np.round(ts * value * 86400.0).astype("timedelta64[s]")
        regular: np.ndarray = start[:, None] + offsets[None, :]
        return regular
    day0 = start.astype("datetime64[D]")
    time_of_day = (start - day0)[:, None]
    months = day0.astype("datetime64[M]")[:, None] + (ts * int(value)).astype("timedelta64[M]")[None, :]
    day = (day0 - day0.astype("datetime64[M]").astype("datetime64[D]")).astype(np.int64)[:, None]
    month_len = ((months + 1).astype("datetime64[D]") - months.astype("datetime64[D]")).astype(np.int64)
    days = months.astype("datetime64[D]") + np.minimum(day, month_len - 1).astype("timedelta64[D]")
    out: np.ndarray = days.astype("datetime64[s]") + time_of_day
    return out


__all__ = [
    "DATE_IN_NAME",
    "add_steps",
    "as_datetimes",
    "check_increasing",
    "date_from_name",
    "days_since",
    "parse_datetime",
    "parse_step",
    "read_dates_file",
    "resolve_reference_date",
    "show",
]
