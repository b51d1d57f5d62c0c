"""Acquisition dates of a pixel table: from a column, a list in the config, or a start and step.

* Long tables (one row per pixel and date) read each row's date from ``data.date_column``.
* Wide tables (one column per date index ``t``) get their dates from, in this order:
  ``data.dates`` (one date per ``t``), ``data.date_column`` (each row's first date, e.g.
  WorldCereal's ``start_date``) plus ``data.date_step``, or ``data.date_start`` plus
  ``data.date_step``. Date ``t`` is ``start + t * step``; ``step`` is ``"1M"`` (calendar
  months), ``"10D"`` (days), ``"2W"`` or a number of days.

Dates are ``datetime64[s]`` with their time of day, parsed and checked by the rule of every
reader (:mod:`mtan_s1s2.data.dates`: strictly increasing, same-day acquisitions told apart
by their times); the datamodule turns them into ``doy``, days since its reference date.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mtan_s1s2.data.dates import add_steps, as_datetimes, check_increasing, parse_step


def wide_dates(
    t: Sequence[int],
    n_rows: int,
    dates: Sequence[Any] | None = None,
    date_start: Any = None,
    date_step: Any = None,
    row_starts: Any = None,
    where: str = "table",
) -> np.ndarray:
    """The ``(N, T) datetime64[s]`` dates of a wide table whose date columns have indices ``t``.

    Args:
        t: Date indices of the columns (``{t}`` in the pattern), sorted.
        n_rows: Rows (pixels) ``N``.
        dates: ``data.dates``, one per index, increasing.
        date_start: ``data.date_start``.
        date_step: ``data.date_step``.
        row_starts: Each row's first date (the ``data.date_column`` values).
        where: The table, named in error messages.

    Raises:
        ValueError: If no way to date the columns is given, ``dates`` has a different
            length than the date columns, repeats a date or is not in increasing order
            (naming the column indices and the dates), or a start is given without a step.
    """
    n_t = len(t)
    if dates is not None:
        if isinstance(dates, str) or len(dates) != n_t:
            got = 1 if isinstance(dates, str) else len(dates)
            raise ValueError(
                f"{where}: data.dates has {got} date(s) but the table has {n_t} date columns per band "
                f"(t = {list(t)[:3]}...{list(t)[-1:]}); give one date per column index."
            )
        days = as_datetimes(list(dates), "data.dates")
        check_increasing(days, f"{where}: data.dates", name=lambda i: f"t={t[i]} (data.dates[{i}])")
        same: np.ndarray = np.broadcast_to(days, (n_rows, n_t)).copy()
        return same
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
        starts = as_datetimes(row_starts, f"{where}: data.date_column")
    else:
        starts = np.full(n_rows, as_datetimes([date_start], "data.date_start")[0])
    return add_steps(starts, t, step)


__all__ = ["wide_dates"]
