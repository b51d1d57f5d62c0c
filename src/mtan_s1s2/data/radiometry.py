"""From stored values to physical units: scale, offsets, units, no-data, and why observations are masked.

Every real-data reader (PASTIS-R, datacubes, GeoTIFF stacks, pixel tables) turns the values
it reads into the units the model is trained on (S2 surface reflectance, S1 backscatter in
dB) with one :class:`Radiometry` per modality, configured under ``data.radiometry``::

    physical = convert(units, (stored + dn_offset[date]) * scale) + offset

* ``scale`` multiplies the stored value (S2 L2A digital numbers: ``1e-4``, the inverse of
  the quantification value 10000).
* ``dn_offset`` is added to the stored value *before* the scale, per date: the S2 L2A
  ``BOA_ADD_OFFSET``. Products of processing baseline 04.00 and later (acquired from
  25 January 2022) store ``DN = 10000 * reflectance + 1000``, so their offset is -1000
  (``dn_offset: s2_baseline_04`` applies -1000 from that date and 0 before it; a number
  applies to every date; ``{YYYY-MM-DD: value}`` applies each value from its date on).
  Mixing both baselines without it shifts reflectance by 0.1.
* ``units`` names what the scaled values are: ``reflectance`` and ``db`` are kept,
  ``linear`` (backscatter power) becomes ``10 log10(x)`` dB and ``amplitude`` becomes
  ``20 log10(x)`` dB; non-positive linear or amplitude values are invalid.
* ``offset`` is added last, in the output units (CF ``add_offset`` for values that need no
  conversion; e.g. ``-83`` for WorldCereal's ``dB = 20 log10(DN) - 83`` S1 encoding).
* ``nodata`` lists stored values that mean "no data": an observation is invalid where
  ``nodata_rule`` bands equal one of them (``any`` band for S2; ``all`` bands for S1). NaN
  and inf are always invalid. No-data comes from the file (a datacube's ``_FillValue``, a
  GeoTIFF's nodata tag), a mask, or this setting; never from a value that is valid for the
  variable.
* ``dn_zero_nodata``: a stored 0 is no data *when the values are digital numbers*, i.e.
  stored as integers or scaled (``scale`` other than 1): S2 L2A writes DN 0 where it has no
  data. Float indices (NDVI, where 0 is bare soil or water) and backscatter in dB (0 dB is a
  real value) stored as floats keep their zeros. On by default for S2 and S1; an explicit
  ``nodata`` turns it off unless it is set too.
* ``valid_range`` (optional) is the range ``[min, max]`` of plausible *stored* values; an
  observation with a value outside it (by ``nodata_rule``) is invalid (``out_of_range``),
  e.g. S2 DN above 20000 (reflectance 2) in corrupted extractions.

:func:`default_radiometry` gives safe defaults per modality (S2: DN 0 is no data; S1: an
all-zero DN observation is no data; in both, only for digital numbers). :class:`MaskReport`
counts the invalid observations by reason, so readers can say in the log how many observations were masked and why, and
:meth:`Radiometry.plausibility` warns when values do not look like the declared units
(reflectance stored as DN without ``scale``, linear power declared as dB, and so on).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from mtan_s1s2.data.dates import as_datetimes, parse_datetime

log = logging.getLogger(__name__)

Units = Literal["reflectance", "db", "linear", "amplitude"]
UNITS: tuple[str, ...] = ("reflectance", "db", "linear", "amplitude")
RADIOMETRY_KEYS: tuple[str, ...] = (
    "units", "scale", "offset", "dn_offset", "nodata", "nodata_rule", "valid_range", "dn_zero_nodata",
)  # fmt: skip
"""The keys of ``data.radiometry.<modality>`` (the fields of :class:`Radiometry`)."""

S2_BASELINE_04_DATE = np.datetime64("2022-01-25T00:00:00", "s")
"""First acquisitions processed with S2 baseline 04.00 (``BOA_ADD_OFFSET = -1000``)."""

S2_BASELINE_04 = "s2_baseline_04"
"""``dn_offset`` value applying -1000 from :data:`S2_BASELINE_04_DATE` on and 0 before."""

REASONS: tuple[str, ...] = ("non_finite", "nodata", "out_of_range", "non_positive", "quality", "padding")
"""Why an observation is invalid: NaN/inf, a no-data fill, a stored value outside
``valid_range``, a non-positive linear value, a quality band (clouds, shadows, ...), or a
date the sample does not have."""


@dataclass
class MaskReport:
    """Observations (pixel-dates) per modality: how many were read, and why some are invalid.

    An observation invalid for several reasons is counted under the first of :data:`REASONS`.

    Attributes:
        total: Observations read per modality.
        invalid: Per modality, reason -> invalid observations.
    """

    total: dict[str, int] = field(default_factory=dict)
    invalid: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, modality: str, n_total: int, reasons: Mapping[str, int]) -> None:
        """Count ``n_total`` observations of ``modality``, of which ``reasons`` are invalid."""
        self.total[modality] = self.total.get(modality, 0) + int(n_total)
        counts = self.invalid.setdefault(modality, {})
        for reason, n in reasons.items():
            if n:
                counts[reason] = counts.get(reason, 0) + int(n)

    def merge(self, other: MaskReport) -> None:
        """Add another report's counts to this one."""
        for m, n in other.total.items():
            self.add(m, n, other.invalid.get(m, {}))

    def lines(self) -> list[str]:
        """One line per modality, e.g. ``s2: 10000 observations, 3412 invalid (34.1 %): quality 3001, nodata 411``."""
        out = []
        for m, total in self.total.items():
            reasons = self.invalid.get(m, {})
            n_bad = sum(reasons.values())
            detail = ", ".join(f"{r} {reasons[r]}" for r in REASONS if reasons.get(r))
            share = 100.0 * n_bad / total if total else 0.0
            out.append(
                f"{m}: {total} observations, {n_bad} invalid ({share:.1f} %)" + (f": {detail}" if detail else "")
            )
        return out

    def log(self, what: str) -> None:
        """Log :meth:`lines` at INFO level, headed by ``what``."""
        for line in self.lines():
            log.info("%s, %s", what, line)


@dataclass(frozen=True)
class Radiometry:
    """Scale, offsets, units and no-data of one modality's stored values.

    Args:
        units: ``reflectance`` | ``db`` (kept), ``linear`` | ``amplitude`` (to dB).
        scale: Multiplies the stored value (after ``dn_offset``).
        offset: Added to the converted value, in output units.
        dn_offset: Added to the stored value before ``scale``: a number, ``"s2_baseline_04"``
            or ``{date: value}`` (each value applies from its date until the next one).
        nodata: Stored values meaning no data.
        nodata_rule: ``any`` band or ``all`` bands equal to a ``nodata`` value (or outside
            ``valid_range``) make the observation invalid.
        valid_range: ``(min, max)`` of plausible stored values, or None (no check).
        dn_zero_nodata: A stored 0 is no data too, where the values are digital numbers
            (an integer dtype, or ``scale`` other than 1); float values at scale 1 (NDVI,
            dB) keep their zeros.

    Raises:
        ValueError: On an unknown unit or rule, a non-positive or non-finite scale, or a
            malformed ``dn_offset``; the message names the key and the choices.
    """

    units: str = "reflectance"
    scale: float = 1.0
    offset: float = 0.0
    dn_offset: float | str | Mapping[str, float] = 0.0
    nodata: tuple[float, ...] = ()
    nodata_rule: str = "any"
    valid_range: tuple[float, float] | None = None
    dn_zero_nodata: bool = False

    def __post_init__(self) -> None:
        if self.units not in UNITS:
            raise ValueError(f"radiometry units must be one of {list(UNITS)}, got {self.units!r}.")
        if self.nodata_rule not in ("any", "all"):
            raise ValueError(f"radiometry nodata_rule must be 'any' or 'all', got {self.nodata_rule!r}.")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"radiometry scale must be a positive number, got {self.scale!r}.")
        if isinstance(self.dn_offset, str) and self.dn_offset != S2_BASELINE_04:
            raise ValueError(
                f"radiometry dn_offset must be a number, {S2_BASELINE_04!r} or {{YYYY-MM-DD: value}}, "
                f"got {self.dn_offset!r}."
            )
        if isinstance(self.dn_offset, Mapping):
            for key in self.dn_offset:
                try:
                    parse_datetime(key)
                except ValueError:
                    raise ValueError(f"radiometry dn_offset key {key!r} is not a date (YYYY-MM-DD).") from None
        object.__setattr__(self, "nodata", tuple(float(v) for v in self.nodata))
        if self.valid_range is not None:
            bounds = tuple(float(v) for v in self.valid_range)
            if len(bounds) != 2 or not bounds[0] < bounds[1]:
                raise ValueError(f"radiometry valid_range must be [min, max] with min < max, got {self.valid_range!r}.")
            object.__setattr__(self, "valid_range", bounds)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | Radiometry | None, base: Radiometry | None = None) -> Radiometry:
        """A :class:`Radiometry` from a config mapping, keys not given taken from ``base``.

        Raises:
            ValueError: On an unknown key (the message lists the valid ones) or bad values.
        """
        if isinstance(cfg, Radiometry):
            return cfg
        base = base or cls()
        values = {k: getattr(base, k) for k in RADIOMETRY_KEYS}
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - set(values))
        if unknown:
            raise ValueError(f"Unknown radiometry key(s) {unknown}; valid keys are {sorted(values)}.")
        if "nodata" in cfg and "dn_zero_nodata" not in cfg:
            values["dn_zero_nodata"] = False  # explicit no-data values replace the default DN 0 rule
        values.update(cfg)
        nodata = values["nodata"]
        if nodata is None:
            values["nodata"] = ()
        elif isinstance(nodata, (int, float)):
            values["nodata"] = (float(nodata),)
        else:
            values["nodata"] = tuple(float(v) for v in nodata)
        if isinstance(values["dn_offset"], Mapping):
            values["dn_offset"] = {str(k): float(v) for k, v in values["dn_offset"].items()}
        values["scale"] = float(values["scale"])
        values["offset"] = float(values["offset"])
        values["dn_zero_nodata"] = bool(values["dn_zero_nodata"])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """Plain containers (lists, floats, strings), as in ``data.radiometry`` and checkpoints."""
        dn_offset = self.dn_offset
        return {
            "units": self.units,
            "scale": float(self.scale),
            "offset": float(self.offset),
            "dn_offset": dict(dn_offset) if isinstance(dn_offset, Mapping) else dn_offset,
            "nodata": [float(v) for v in self.nodata],
            "nodata_rule": self.nodata_rule,
            "valid_range": None if self.valid_range is None else [float(v) for v in self.valid_range],
            "dn_zero_nodata": bool(self.dn_zero_nodata),
        }

    def nodata_for(self, dtype: np.dtype[Any]) -> tuple[float, ...]:
        """The stored values that are no data in values of ``dtype`` (``nodata``, plus 0 for digital numbers)."""
        digital = np.dtype(dtype).kind in "iub" or self.scale != 1.0
        if self.dn_zero_nodata and digital and 0.0 not in self.nodata:
            return (*self.nodata, 0.0)
        return self.nodata

    def dn_offsets(self, dates: Sequence[Any] | np.ndarray | None, n_dates: int) -> np.ndarray:
        """``(T,) float64`` offsets added to the stored values of each date.

        Args:
            dates: Acquisition dates (``datetime64``, ``date`` or ISO strings); needed only
                for a date-dependent ``dn_offset``.
            n_dates: ``T``.

        Raises:
            ValueError: If ``dn_offset`` depends on the date and no dates are given.
        """
        if isinstance(self.dn_offset, (int, float)):
            return np.full(n_dates, float(self.dn_offset))
        if dates is None:
            raise ValueError(f"radiometry dn_offset={self.dn_offset!r} depends on the date, but no dates were given.")
        days = as_datetimes(dates, "radiometry dates").ravel()
        if self.dn_offset == S2_BASELINE_04:
            return np.where(days >= S2_BASELINE_04_DATE, -1000.0, 0.0)
        steps = sorted((parse_datetime(k), float(v)) for k, v in cast(Mapping[str, float], self.dn_offset).items())
        out = np.zeros(len(days))
        for start, value in steps:  # each value applies from its date until the next one
            out[days >= start] = value
        return out

    def apply(
        self,
        stored: np.ndarray,
        dates: Sequence[Any] | np.ndarray | None = None,
        dn_offset: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """Convert stored values to physical units and find the invalid observations.

        Args:
            stored: ``(T, C, H, W)`` stored values, any numeric dtype.
            dates: ``T`` acquisition dates (for a date-dependent ``dn_offset``).
            dn_offset: ``(T,)`` offsets read from the product metadata, replacing the
                configured ``dn_offset``.

        Returns:
            ``(x, valid, reasons)``: ``x (T, C, H, W) float32`` in physical units (values
            of invalid observations are left as computed, NaN possible), ``valid (T, H, W)
            bool`` and the count of invalid observations per reason of :data:`REASONS`.
        """
        raw = np.asarray(stored)
        n_t = raw.shape[0]
        finite = np.isfinite(raw).all(axis=1) if raw.dtype.kind == "f" else np.ones((n_t, *raw.shape[2:]), bool)
        nodata = self.nodata_for(raw.dtype)
        if nodata:
            is_fill = np.isin(raw, np.asarray(nodata, dtype=raw.dtype if raw.dtype.kind == "f" else None))
            fill = is_fill.any(axis=1) if self.nodata_rule == "any" else is_fill.all(axis=1)
        else:
            fill = np.zeros_like(finite)
        out_of_range = np.zeros_like(finite)
        if self.valid_range is not None:
            lo, hi = self.valid_range
            with np.errstate(invalid="ignore"):
                outside = (raw < lo) | (raw > hi)
            out_of_range = outside.any(axis=1) if self.nodata_rule == "any" else outside.all(axis=1)
        offsets = dn_offset if dn_offset is not None else self.dn_offsets(dates, n_t)
        value = raw.astype(np.float64)
        if np.any(offsets):
            value = value + np.asarray(offsets, np.float64)[:, None, None, None]
        if self.scale != 1.0:
            value = value * self.scale
        non_positive = np.zeros_like(finite)
        if self.units in ("linear", "amplitude"):
            positive = value > 0
            non_positive = ~positive.all(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                value = (10.0 if self.units == "linear" else 20.0) * np.log10(np.where(positive, value, np.nan))
        if self.offset:
            value = value + self.offset
        valid = finite & ~fill & ~out_of_range & ~non_positive
        reasons = {
            "non_finite": int((~finite).sum()),
            "nodata": int((finite & fill).sum()),
            "out_of_range": int((finite & ~fill & out_of_range).sum()),
            "non_positive": int((finite & ~fill & ~out_of_range & non_positive).sum()),
        }
        return value.astype(np.float32), valid, reasons

    def plausibility(self, x: np.ndarray, valid: np.ndarray, modality: str) -> str | None:
        """A warning when valid values do not look like the declared units, else None.

        Args:
            x: ``(T, C, H, W)`` physical values (output of :meth:`apply`).
            valid: ``(T, H, W)`` valid observations.
            modality: Named in the message.
        """
        values = np.moveaxis(x, 1, -1)[valid]  # (N, C)
        if values.size == 0:
            return None
        median = float(np.median(values))
        if self.units == "reflectance" and median > 1.5:
            return (
                f"{modality}: the median reflectance is {median:.4g}, which looks like digital numbers; "
                "set data.radiometry." + modality + ".scale (S2 L2A: 1.0e-4)."
            )
        if self.units == "db" and median > 0 and float(np.percentile(values, 5)) >= 0:
            return (
                f"{modality}: backscatter declared in dB is non-negative (median {median:.4g}), which looks like "
                "linear power; set data.radiometry." + modality + ".units=linear."
            )
        if self.units in ("linear", "amplitude") and median < -30:
            return f"{modality}: backscatter converted from {self.units} has median {median:.4g} dB; check the units."
        return None


S2_DEFAULT = Radiometry(units="reflectance", nodata_rule="any", dn_zero_nodata=True)
S1_DEFAULT = Radiometry(units="db", nodata_rule="all", dn_zero_nodata=True)


def default_radiometry(modality: str) -> Radiometry:
    """Safe defaults of a modality.

    S2: reflectance, DN 0 is no data (any band). S1: dB, an all-zero DN observation is no
    data. Both only where the values are digital numbers (``dn_zero_nodata``): a 0 of a
    float NDVI or dB value is valid. Other modalities: kept as stored, no fill value.
    """
    if modality.startswith("s2"):
        return S2_DEFAULT
    if modality.startswith("s1"):
        return S1_DEFAULT
    return Radiometry()


def file_radiometry(
    modality: str, declared: Mapping[str, Any], cfg: Mapping[str, Any] | None, key: str = "data.radiometry"
) -> Radiometry:
    """A modality's radiometry: its defaults, then what its files declare, then ``data.radiometry``.

    The no-data values a file declares (a datacube's ``_FillValue``, a GeoTIFF's nodata tag)
    are always kept: ``data.radiometry.<modality>.nodata`` adds values to them.

    Args:
        modality: ``s2``, ``s1_asc``, ...
        declared: ``{scale, offset, nodata}`` read from the files (keys only when present).
        cfg: ``data.radiometry.<modality>`` (may be None).
        key: Config key named in errors.

    Raises:
        ValueError: On an unknown key or a bad value (naming ``key``).
    """
    try:
        base = Radiometry.from_config(declared, base=default_radiometry(modality))
        rad = Radiometry.from_config(cfg, base=base)
    except ValueError as err:
        raise ValueError(f"{key}.{modality}: {err}") from None
    extra = tuple(float(v) for v in declared.get("nodata") or () if float(v) not in rad.nodata)
    return dataclasses.replace(rad, nodata=rad.nodata + extra) if extra else rad


def radiometry_per_modality(
    cfg: Mapping[str, Any] | None, modalities: Sequence[str], key: str = "data.radiometry"
) -> dict[str, Radiometry]:
    """One :class:`Radiometry` per modality: the defaults, updated by ``cfg[modality]``.

    Entries of modalities that are not read are ignored (a config may describe more
    modalities than ``data.modalities`` selects).

    Raises:
        ValueError: On a name that is no known modality, or bad values.
    """
    from mtan_s1s2.data.batch import MODALITY_CHANNELS

    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(modalities) - set(MODALITY_CHANNELS))
    if unknown:
        raise ValueError(f"{key} has unknown modality(ies) {unknown}; known modalities are {list(MODALITY_CHANNELS)}.")
    out = {}
    for m in modalities:
        try:
            out[m] = Radiometry.from_config(cfg.get(m), base=default_radiometry(m))
        except ValueError as err:
            raise ValueError(f"{key}.{m}: {err}") from None
    return out


__all__ = [
    "RADIOMETRY_KEYS",
    "REASONS",
    "S2_BASELINE_04",
    "S2_BASELINE_04_DATE",
    "UNITS",
    "MaskReport",
    "Radiometry",
    "default_radiometry",
    "file_radiometry",
    "radiometry_per_modality",
]
