"""Acquisition dates of a pixel table: from a column, a list in the config, or a start and step.

* Long tables (one row per pixel and date) read each row's date from ``data.date_column``.
* Wide tables (one column per date index ``t``) get their dates from, in this order:
  ``data.dates`` (one date per ``t``), ``data.date_column`` (each row's first date, e.g.
  WorldCereal's ``start_date``) plus ``data.date_step``, or ``data.date_start`` plus
  ``data.date_step``. Date ``t`` is ``start + t * step``; ``step`` is ``"1M"`` (calendar
  months), ``"10D"`` (days), ``"2W"`` (weeks) or a number of days.

Dates are ``datetime64[D]``; the datamodule turns them into ``doy``, days since its
reference date.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

_STEP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([DWM]?)\s*$", re.IGNORECASE)


def parse_step(step: Any) -> tuple[float, str]:
    """``"1M"`` -> ``(1, "M")``, ``"10D"`` or ``10`` -> ``(10, "D")``, ``"2W"`` -> ``(14, "D")``.

    Raises:
        ValueError: On anything else, or a non-positive step.
    """
    match = _STEP.match(str(step))
    if not match:
        raise ValueError(
            f"data.date_step must be like '1M' (months), '10D' (days), '2W' or a number of days, got {step!r}."
        )
    value, unit = float(match.group(1)), (match.group(2) or "D").upper()
    if value <= 0:
        raise ValueError(f"data.date_step must be positive, got {step!r}.")
    if unit == "W":
        return value * 7, "D"
    if unit == "M" and not value.is_integer():
        raise ValueError(f"data.date_step in months must be a whole number, got {step!r}.")
    return value, unit


def to_days(values: Any, what: str) -> np.ndarray:
    """Dates (strings, ``datetime64``, pandas timestamps) as ``datetime64[D]``.

    Raises:
        ValueError: If a value is not a date; the message names ``what``.
    """
    import pandas as pd

    try:
        out = pd.to_datetime(pd.Series(np.asarray(values, dtype=object).ravel()), errors="raise")
    except (ValueError, TypeError) as err:
        raise ValueError(f"{what}: not a date ({err}); use YYYY-MM-DD.") from None
    if out.isna().any():
        raise ValueError(f"{what}: {int(out.isna().sum())} missing date(s).")
    return cast(np.ndarray, out.to_numpy().astype("datetime64[D]").reshape(np.shape(values)))


def add_steps(start: np.ndarray, t: Sequence[int], step: tuple[float, str]) -> np.ndarray:
    """``start + t * step`` for every start and index: ``(N,)`` starts -> ``(N, T)`` dates.

    Calendar months keep the day of the month of ``start`` (clipped to the month's end).
    """
    start = np.asarray(start, dtype="datetime64[D]")
    ts = np.asarray(t, dtype=np.int64)
    value, unit = step
    if unit == "D":
        offsets = np.round(ts * value).astype("timedelta64[D]")
        return cast(np.ndarray, start[:, None] + offsets[None, :])
    months = start.astype("datetime64[M]")[:, None] + (ts * int(value)).astype("timedelta64[M]")[None, :]
    day = (start - start.astype("datetime64[M]").astype("datetime64[D]")).astype(np.int64)[:, None]
    month_len = ((months + 1).astype("datetime64[D]") - months.astype("datetime64[D]")).astype(np.int64)
    return cast(np.ndarray, months.astype("datetime64[D]") + np.minimum(day, month_len - 1).astype("timedelta64[D]"))


def wide_dates(
    t: Sequence[int],
    n_rows: int,
    dates: Sequence[Any] | None = None,
    date_start: Any = None,
    date_step: Any = None,
    row_starts: Any = None,
    where: str = "table",
) -> np.ndarray:
    """The ``(N, T)`` dates of a wide table whose date columns have indices ``t``.

    Args:
        t: Date indices of the columns (``{t}`` in the pattern), sorted.
        n_rows: Rows (pixels) ``N``.
        dates: ``data.dates``, one per index.
        date_start: ``data.date_start``.
        date_step: ``data.date_step``.
        row_starts: Each row's first date (the ``data.date_column`` values).
        where: The table, named in error messages.

    Raises:
        ValueError: If no way to date the columns is given, ``dates`` has a different
            length than the date columns, or a start is given without a step.
    """
    n_t = len(t)
    if dates is not None:
        if isinstance(dates, str) or len(dates) != n_t:
            got = 1 if isinstance(dates, str) else len(dates)
            raise ValueError(
                f"{where}: data.dates has {got} date(s) but the table has {n_t} date columns per band "
                f"(t = {list(t)[:3]}...{list(t)[-1:]}); give one date per column index."
            )
        days = to_days(list(dates), "data.dates")
        return cast(np.ndarray, np.broadcast_to(days, (n_rows, n_t)).copy())
    if row_starts is None and date_start is None:
        raise ValueError(
            f"{where}: a wide table needs its dates: data.dates (one per column index t), data.date_start and "
            "data.date_step (e.g. 2016-12-01 and 1M), or data.date_column (each row's first date) and data.date_step."
        )
    if date_step is None:
        raise ValueError(
            f"{where}: data.date_step is needed with a start date (e.g. '1M' for monthly composites, '10D')."
        )
    step = parse_step(date_step)
    if row_starts is not None:
        starts = to_days(row_starts, "data.date_column")
    else:
        starts = np.full(n_rows, to_days([date_start], "data.date_start")[0])
    return add_steps(starts, t, step)


__all__ = ["add_steps", "parse_step", "to_days", "wide_dates"]
