"""Acquisition dates of real rasters: parsing, dates files, dates in file names, ``doy``.

Dates are kept as ``datetime64[s]`` with their time of day (a datacube's time coordinate,
``20180924T105416`` in a file name). The model reads ``doy``: days since a reference date
as a float, the time of day as the fraction (10:48 -> +0.45), never wrapping at a year's
end (:mod:`mtan_s1s2.data.batch`).

The reference date (``data.reference_date``) is a date (``2018-08-01``) or
``attr:<name>``: the scene's attribute of that name (a WorldCereal cube's ``start_date``),
so scenes of different years are aligned on their own season start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DATE_IN_NAME = r"(?P<date>\d{4}-?\d{2}-?\d{2})(?:[T_-]?(?P<time>\d{2}:?\d{2}:?\d{2}))?"
"""Default pattern of a date (and optional time) in a file name: ``20180924``,
``2018-09-24``, ``20180924T105416``, ``SENTINEL2A_20180924-105416-123_L2A``."""

_ISO = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})(?:[T _-]?(\d{2}):?(\d{2}):?(\d{2})(?:\.\d+)?)?Z?$")


def parse_datetime(value: Any) -> np.datetime64:
    """A ``datetime64[s]`` from a date text, a ``datetime`` or a ``datetime64``.

    Texts: ``YYYYMMDD`` or ``YYYY-MM-DD``, optionally with a time (``T105416``,
    ``T10:54:16``).

    Raises:
        ValueError: If ``value`` is none of these.
    """
    if isinstance(value, np.datetime64):
        value = str(value.astype("datetime64[s]"))
    elif hasattr(value, "isoformat") and not isinstance(value, str):
        value = value.isoformat()[:19]
    text = str(value).strip()
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer()):
        text = str(int(value))
    m = _ISO.match(text)
    if m:
        y, mo, d, hh, mm, ss = m.groups()
        try:
            return np.datetime64(f"{y}-{mo}-{d}T{hh or '00'}:{mm or '00'}:{ss or '00'}", "s")
        except ValueError:
            pass
    raise ValueError(f"{value!r} is not a date; use YYYYMMDD or YYYY-MM-DD, optionally with a time (20180924T105416).")


def read_dates_file(path: str | Path) -> np.ndarray:
    """Dates listed in a text file: one per line (blank lines and ``#`` comments skipped).

    Each line is a date as :func:`parse_datetime` reads it; a CSV line's first field is
    used (``20180924,S2A`` works).

    Returns:
        ``(T,) datetime64[s]``.

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
        field = re.split(r"[,;\s]", text, maxsplit=1)[0]
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


def check_increasing(dates: np.ndarray, where: str) -> None:
    """Raise if ``dates`` are not strictly increasing (a duplicated or unsorted date).

    Raises:
        ValueError: Naming ``where`` and the first offending pair.
    """
    d = np.asarray(dates, "datetime64[s]")
    bad = np.flatnonzero(np.diff(d) <= np.timedelta64(0, "s"))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{where}: acquisition dates must be strictly increasing, but date {i + 1} is {d[i]} and date {i + 2} "
            f"is {d[i + 1]}; remove the duplicate or sort the dates."
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
    """``(T,) float32`` days from ``reference`` to each date, time of day as the fraction."""
    d = np.asarray(dates, "datetime64[s]")
    seconds = (d - np.asarray(reference, "datetime64[s]")).astype(np.float64)
    out: np.ndarray = (seconds / 86400.0).astype(np.float32)
    return out


__all__ = [
    "DATE_IN_NAME",
    "check_increasing",
    "date_from_name",
    "days_since",
    "parse_datetime",
    "read_dates_file",
    "resolve_reference_date",
]
