"""Which columns of a pixel table hold which band of which modality, at which date.

A *wide* table has one row per pixel (or parcel) and one column per band and date; a
pattern with ``{band}`` and ``{t}`` names them (``*`` matches anything, e.g. a resolution
suffix)::

    columns:
      s2: {bands: [B02, B03, ...], pattern: "OPTICAL-{band}-ts{t}-*"}   # OPTICAL-B02-ts0-10m
      s1: {bands: [VV, VH], pattern: "SAR-{band}-ts{t}-*"}

A *long* table has one row per pixel and date; the pattern has ``{band}`` only
(``S2-L2A-{band}``). :func:`wide_columns` and :func:`long_columns` resolve the patterns
against the table's columns and say which columns are missing, ambiguous or incomplete.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mtan_s1s2.data.batch import MODALITY_CHANNELS


@dataclass(frozen=True)
class BandColumns:
    """The columns of one modality (config ``data.columns.<modality>``).

    Attributes:
        modality: Modality name (``s2``, ``s1``, ``s1_asc``, ``s1_desc``).
        bands: Band names, in channel order.
        pattern: Column name with ``{band}`` (and ``{t}`` in a wide table); ``*`` matches
            any text.
    """

    modality: str
    bands: tuple[str, ...]
    pattern: str

    @classmethod
    def from_config(cls, modality: str, cfg: Mapping[str, Any], key: str = "data.columns") -> BandColumns:
        """Build from ``{bands: [...], pattern: "..."}``.

        Raises:
            ValueError: On a missing key, no band, or a pattern without ``{band}``.
        """
        where = f"{key}.{modality}"
        if modality not in MODALITY_CHANNELS:
            raise ValueError(f"{where}: unknown modality {modality!r}; valid modalities are {list(MODALITY_CHANNELS)}.")
        if not isinstance(cfg, Mapping) or "bands" not in cfg or "pattern" not in cfg:
            raise ValueError(
                f"{where} must be {{bands: [names], pattern: 'column name with {{band}} and {{t}}'}}, got {cfg!r}."
            )
        bands = cfg["bands"]
        if isinstance(bands, str) or not list(bands):
            raise ValueError(f"{where}.bands must be a non-empty list of band names, got {bands!r}.")
        pattern = str(cfg["pattern"])
        if "{band}" not in pattern:
            raise ValueError(f"{where}.pattern={pattern!r} must contain {{band}}.")
        return cls(modality, tuple(str(b) for b in bands), pattern)

    def regex(self, band: str, wide: bool) -> re.Pattern[str]:
        """The pattern of ``band`` as a regular expression (``{t}`` captures the date index).

        Raises:
            ValueError: If ``wide`` and the pattern has no ``{t}``, or a long pattern has one.
        """
        if wide and "{t}" not in self.pattern:
            raise ValueError(
                f"data.columns.{self.modality}.pattern={self.pattern!r} needs {{t}} (the date index) in a wide "
                "table, e.g. '{band}-ts{t}'; for one row per pixel and date use data.format=long."
            )
        if not wide and "{t}" in self.pattern:
            raise ValueError(
                f"data.columns.{self.modality}.pattern={self.pattern!r} has {{t}}, but a long table has one "
                "column per band (dates are rows); drop {t} or use data.format=wide."
            )
        parts = re.split(r"(\{band\}|\{t\}|\*)", self.pattern)
        out = []
        for part in parts:
            if part == "{band}":
                out.append(re.escape(band))
            elif part == "{t}":
                out.append(r"(?P<t>\d+)")
            elif part == "*":
                out.append(".*?")
            else:
                out.append(re.escape(part))
        return re.compile("".join(out) + r"\Z")


def _similar(columns: Sequence[str], pattern: str, n: int = 6) -> list[str]:
    """Columns that share the pattern's literal start, to show in an error message."""
    prefix = re.split(r"\{band\}|\{t\}|\*", pattern)[0]
    alike = [c for c in columns if prefix and c.startswith(prefix)]
    return (alike or list(columns))[:n]


def wide_columns(columns: Sequence[str], spec: BandColumns, where: str) -> tuple[list[int], list[list[str]]]:
    """Resolve a wide table's columns of one modality.

    Args:
        columns: The table's column names.
        spec: The modality's bands and pattern.
        where: The table (path) named in error messages.

    Returns:
        ``(t, names)``: the date indices found (sorted) and ``names[i][c]``, the column of
        date ``t[i]`` and band ``c``.

    Raises:
        ValueError: If a band has no column, two columns match one band and date, or the
            bands do not all have the same dates (naming the missing columns).
    """
    found: dict[str, dict[int, str]] = {}
    missing, ambiguous = [], []
    for band in spec.bands:
        rx = spec.regex(band, wide=True)
        by_t: dict[int, str] = {}
        for col in columns:
            m = rx.match(col)
            if m:
                t = int(m.group("t"))
                if t in by_t:
                    ambiguous.append((band, t, by_t[t], col))
                by_t[t] = col
        if not by_t:
            missing.append(band)
        found[band] = by_t
    if missing:
        raise ValueError(
            f"{where}: no column matches data.columns.{spec.modality}.pattern={spec.pattern!r} for band(s) "
            f"{missing} ({len(missing)} of {len(spec.bands)} bands). Columns that look alike: "
            f"{_similar(columns, spec.pattern)}. Fix data.columns.{spec.modality}.bands or the pattern."
        )
    if ambiguous:
        band, t, a, b = ambiguous[0]
        raise ValueError(
            f"{where}: columns {a!r} and {b!r} both match band {band!r} at t={t} "
            f"(data.columns.{spec.modality}.pattern={spec.pattern!r}); make the pattern more specific."
        )
    ref_band = max(spec.bands, key=lambda b: len(found[b]))
    t_all = sorted(found[ref_band])
    for band in spec.bands:
        lacking = sorted(set(t_all) - set(found[band]))
        if lacking:
            example = spec.pattern.replace("{band}", band).replace("{t}", str(lacking[0]))
            raise ValueError(
                f"{where}: {spec.modality} band {band!r} has {len(found[band])} date columns but {ref_band!r} has "
                f"{len(t_all)}: no column for t={lacking[:10]} (e.g. {example!r}). Every band needs a column "
                f"at every date; drop the band from data.columns.{spec.modality}.bands or fill the columns."
            )
    return t_all, [[found[b][t] for b in spec.bands] for t in t_all]


def long_columns(columns: Sequence[str], spec: BandColumns, where: str) -> list[str]:
    """Resolve a long table's column of every band of one modality.

    Returns:
        The column of each band, in band order.

    Raises:
        ValueError: If a band has no column, or several.
    """
    out, missing = [], []
    for band in spec.bands:
        rx = spec.regex(band, wide=False)
        matches = [c for c in columns if rx.match(c)]
        if len(matches) > 1:
            raise ValueError(
                f"{where}: columns {matches[:4]} all match band {band!r} (data.columns.{spec.modality}.pattern="
                f"{spec.pattern!r}); make the pattern more specific."
            )
        if not matches:
            missing.append(band)
        else:
            out.append(matches[0])
    if missing:
        raise ValueError(
            f"{where}: no column matches data.columns.{spec.modality}.pattern={spec.pattern!r} for band(s) "
            f"{missing} ({len(missing)} of {len(spec.bands)} bands). Columns that look alike: "
            f"{_similar(columns, spec.pattern)}. Fix data.columns.{spec.modality}.bands or the pattern."
        )
    return out


__all__ = ["BandColumns", "long_columns", "wide_columns"]
