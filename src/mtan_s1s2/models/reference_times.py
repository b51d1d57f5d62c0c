"""The reference times of the multi-time attention against the data's dates (``docs/model.md``).

The mTAN attends every series onto ``Q`` reference times spread evenly over
``model.net.ref_range`` (in ``tau = doy / model.net.time_scale``). A date far from every
reference time is hardly attended: with the default ``ref_range: [0, 1]`` (one year) on a
2.5-year datacube, nothing after day 365 reaches the classifier as it should, and such
runs predict the majority class. This module

* turns the data's ``doy`` range into ``ref_range`` (:func:`auto_ref_range`,
  ``model.net.ref_range=auto``);
* picks their number from the dates: at least 16, one per date of a regular series and one
  per month of the span (:func:`auto_num_ref_times`, ``model.net.num_ref_times=auto``);
* says when the data's dates fall outside the reference span (:func:`dates_outside_reference`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DEFAULT_NUM_REF_TIMES = 16
"""The fewest reference times ``model.net.num_ref_times=auto`` picks (the class default)."""
MAX_AUTO_REF_TIMES = 64
"""The most reference times ``model.net.num_ref_times=auto`` picks (a daily series is not given 365)."""
REF_SPACING_DAYS = 30.0
"""Days of the dates' span per reference time that ``model.net.num_ref_times=auto`` keeps at least (rounded)."""


def auto_ref_range(doy_range: Sequence[float], time_scale: float, num_ref_times: int | None = None) -> list[float]:
    """``ref_range`` (in ``tau``) from the data's first and last dates (``ref_range: auto``).

    The model places its ``Q`` reference times at the centres of ``Q`` equal steps of
    ``ref_range``, so with the dates' span itself (``model.net.ref_range=auto``) the first and
    last reference times sit half a step inside the first and last dates. With
    ``num_ref_times`` the span is widened by half a step ``(last - first) / (Q - 1)`` on each
    side, so the reference times are ``first, first + step, ..., last`` (on the dates of a
    regular series with ``Q`` dates). That placement was level with the dates' span on
    validation folds of three real tables (``docs/results.md``, "Reference times on the first
    and last dates"), so ``ref_range: auto`` keeps the span; ``scripts/ablate_pixels.py`` uses
    the widened one for its ``_aligned`` variants.

    Args:
        doy_range: ``(first, last)`` ``doy`` of the data, days.
        time_scale: Days per unit of ``tau`` (``model.net.time_scale``).
        num_ref_times: ``Q`` to widen the span for; None (or 1) spans ``[first, last]`` itself.

    Returns:
        ``[start, end]`` in ``tau``, at least one day long.
    """
    lo, hi = (float(v) for v in doy_range)
    hi = max(hi, lo + 1.0)
    if num_ref_times is not None and int(num_ref_times) > 1:
        half = 0.5 * (hi - lo) / (int(num_ref_times) - 1)
        lo, hi = lo - half, hi + half
    return [lo / time_scale, hi / time_scale]


def auto_num_ref_times(seq_len: Mapping[str, int] | None, doy_range: Sequence[float] | None = None) -> int:
    """``num_ref_times`` following the data's dates (``model.net.num_ref_times=auto``).

    The largest of three counts, at most :data:`MAX_AUTO_REF_TIMES`:

    * :data:`DEFAULT_NUM_REF_TIMES` (16, what the recipe was chosen with on one-year tables and
      the 16-month WorldCereal datacube);
    * the dates per pixel of a regular series (``seq_len``): resampling a dense series onto
      fewer reference times than it has dates smooths it away;
    * the dates' span (``doy_range``) over :data:`REF_SPACING_DAYS`, rounded: about one per
      month, so a multi-year series keeps the monthly resolution the recipe was validated at
      instead of spreading 16 reference times over 2-3 years.

    A 12-date table thus keeps 16 (one per date, 12, lost 0.4 validation OA points to 16 in
    the harness), a 23-date table gets 23, the 16-month WorldCereal datacube 16, a two-year
    series 24 and a 2.5-year one 30 (``docs/results.md``, "Reference times that follow the
    dates").

    Args:
        seq_len: Modality -> dates per pixel when every pixel has the same dates
            (``datamodule.seq_len`` of pixel tables), else None (scenes, datacubes,
            irregular tables).
        doy_range: ``(first, last)`` ``doy`` of the data, days (``datamodule.doy_range``), or
            None.

    Returns:
        ``Q``, from :data:`DEFAULT_NUM_REF_TIMES` to :data:`MAX_AUTO_REF_TIMES`.
    """
    counts = [DEFAULT_NUM_REF_TIMES]
    if seq_len:
        counts.append(max(int(n) for n in seq_len.values()))
    if doy_range is not None:
        lo, hi = (float(v) for v in doy_range)
        counts.append(round((hi - lo) / REF_SPACING_DAYS))
    return min(max(counts), MAX_AUTO_REF_TIMES)


def dates_outside_reference(
    doy_range: Sequence[float], ref_range: Sequence[float], time_scale: float, num_ref_times: int
) -> str | None:
    """A warning when the data's dates reach beyond the model's reference times, else None.

    The reference times sit at the centres of ``num_ref_times`` equal steps of
    ``ref_range``; dates up to one step (``(end - start) * time_scale / num_ref_times``
    days) beyond either end still have a reference time nearby and are accepted.

    Args:
        doy_range: ``(first, last)`` ``doy`` of the data, days.
        ref_range: ``(start, end)`` of the reference times, in ``tau``.
        time_scale: Days per unit of ``tau``.
        num_ref_times: ``Q``.

    Returns:
        One line naming the data's span and the reference span in days and the fix
        (``model.net.ref_range=auto``), or None when the reference times cover the dates.
    """
    lo, hi = (float(v) for v in doy_range)
    start, end = (float(v) * time_scale for v in ref_range)
    step = abs(end - start) / max(int(num_ref_times), 1)
    if lo >= start - step and hi <= end + step:
        return None
    outside = []
    if lo < start - step:
        outside.append(f"before doy {start:g}")
    if hi > end + step:
        outside.append(f"after doy {end:g}")
    shown = ", ".join(f"{float(v):g}" for v in ref_range)
    return (
        f"The data's dates span doy {lo:.0f}..{hi:.0f} ({hi - lo:.0f} days) but the model's reference times cover "
        f"doy {start:g}..{end:g} ({end - start:.0f} days: model.net.ref_range=[{shown}] x "
        f"model.net.time_scale={time_scale:g}): dates {' and '.join(outside)} have no reference time near them, and "
        "such a model often predicts the majority class. Set model.net.ref_range=auto (reference times over the "
        f"data's dates) or model.net.ref_range=[{lo / time_scale:.3g},{hi / time_scale:.3g}]."
    )


__all__ = [
    "DEFAULT_NUM_REF_TIMES",
    "MAX_AUTO_REF_TIMES",
    "REF_SPACING_DAYS",
    "auto_num_ref_times",
    "auto_ref_range",
    "dates_outside_reference",
]
