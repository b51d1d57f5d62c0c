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

Instead of a pattern, ``positions`` gives the columns by their position in the file
(0-based), for files without a header row (``data.header: none``, e.g. a label then the
values, as in the UCR/UEA time-series archives)::

    columns:
      s2: {bands: [B04, B08], positions: {start: 1, order: date_major}}  # wide: 1 = B04 t0, 2 = B08 t0, 3 = B04 t1 ...
      s2: {bands: [B04, B08], positions: [3, 4]}                          # long: one position per band

A wide table's ``order`` is ``date_major`` (the bands of date 0, then of date 1, ...) or
``band_major`` (every date of band 0, then of band 1, ...); its date columns run from
``start`` to ``stop`` (default: the last column).
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
            any text. None when ``positions`` is given.
        positions: Columns by position instead: wide ``{start, stop, order}``, long one
            position per band (see the module docstring).
    """

    modality: str
    bands: tuple[str, ...]
    pattern: str | None = None
    positions: Any = None

    @classmethod
    def from_config(cls, modality: str, cfg: Mapping[str, Any], key: str = "data.columns") -> BandColumns:
        """Build from ``{bands: [...], pattern: "..."}``.

        Raises:
            ValueError: On a missing key, no band, or a pattern without ``{band}``.
        """
        where = f"{key}.{modality}"
        if modality not in MODALITY_CHANNELS:
            raise ValueError(f"{where}: unknown modality {modality!r}; valid modalities are {list(MODALITY_CHANNELS)}.")
        if not isinstance(cfg, Mapping) or "bands" not in cfg or ("pattern" in cfg) == ("positions" in cfg):
            raise ValueError(
                f"{where} must be {{bands: [names], pattern: 'column name with {{band}} and {{t}}'}} or, by column "
                f"position, {{bands: [names], positions: {{start: 1, order: date_major}}}} (a list of one position "
                f"per band in a long table), got {cfg!r}."
            )
        unknown = sorted(set(cfg) - {"bands", "pattern", "positions"})
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {unknown}; valid keys are bands, pattern, positions.")
        bands = cfg["bands"]
        if isinstance(bands, str) or not list(bands):
            raise ValueError(f"{where}.bands must be a non-empty list of band names, got {bands!r}.")
        names = tuple(str(b) for b in bands)
        if "positions" in cfg:
            return cls(modality, names, None, _check_positions(cfg["positions"], len(names), where))
        pattern = str(cfg["pattern"])
        if "{band}" not in pattern:
            raise ValueError(f"{where}.pattern={pattern!r} must contain {{band}}.")
        return cls(modality, names, pattern)

    def regex(self, band: str, wide: bool) -> re.Pattern[str]:
        """The pattern of ``band`` as a regular expression (``{t}`` captures the date index).

        Raises:
            ValueError: If ``wide`` and the pattern has no ``{t}``, or a long pattern has one.
        """
        assert self.pattern is not None  # columns by position are resolved without a pattern
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


ORDERS: tuple[str, ...] = ("date_major", "band_major")


def _check_positions(positions: Any, n_bands: int, where: str) -> Any:
    """``positions`` as ``{start, stop, order}`` (wide) or a tuple of one position per band (long)."""
    if isinstance(positions, Mapping):
        unknown = sorted(set(positions) - {"start", "stop", "order"})
        if unknown:
            raise ValueError(f"{where}.positions has unknown key(s) {unknown}; valid keys are start, stop, order.")
        out = {"start": positions.get("start", 0), "stop": positions.get("stop"), "order": positions.get("order")}
        if out["order"] not in ORDERS:
            raise ValueError(
                f"{where}.positions.order must be one of {list(ORDERS)} (date_major: the bands of date 0, then of "
                f"date 1, ...; band_major: every date of band 0, then of band 1, ...), got {out['order']!r}."
            )
        if not isinstance(out["start"], int) or out["start"] < 0:
            raise ValueError(f"{where}.positions.start must be a column position >= 0, got {out['start']!r}.")
        if out["stop"] is not None and (not isinstance(out["stop"], int) or out["stop"] <= out["start"]):
            raise ValueError(f"{where}.positions.stop must be a column position > start, or null, got {out['stop']!r}.")
        return out
    if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence) or len(positions) != n_bands:
        raise ValueError(
            f"{where}.positions must be {{start, stop, order}} (a wide table) or one column position per band "
            f"({n_bands}, a long table), got {positions!r}."
        )
    if not all(isinstance(v, int) and v >= 0 for v in positions):
        raise ValueError(f"{where}.positions must be column positions >= 0, got {list(positions)!r}.")
    return tuple(int(v) for v in positions)


def _by_position(columns: Sequence[str], spec: BandColumns, wide: bool, where: str) -> Any:
    """Resolve columns given by position (wide: ``(t, names)``; long: the column of each band)."""
    pos = spec.positions
    key = f"data.columns.{spec.modality}.positions"
    n, C = len(columns), len(spec.bands)
    if wide != isinstance(pos, Mapping):
        raise ValueError(
            f"{where}: {key}={pos!r} is for a {'long' if wide else 'wide'} table; a {'wide' if wide else 'long'} "
            f"table gives {'{start, stop, order}' if wide else 'one column position per band'}."
        )
    if not wide:
        bad = [p for p in pos if p >= n]
        if bad:
            raise ValueError(f"{where}: {key} names position(s) {bad}, but the table has {n} columns (0..{n - 1}).")
        return [columns[p] for p in pos]
    start, stop = pos["start"], n if pos["stop"] is None else pos["stop"]
    if stop > n:
        raise ValueError(f"{where}: {key}.stop={stop}, but the table has {n} columns (0..{n - 1}).")
    width = stop - start
    if width < C or width % C:
        raise ValueError(
            f"{where}: {key} spans columns {start}..{stop - 1} ({width} columns), not a whole number of dates of "
            f"{C} band(s) {list(spec.bands)}; fix start/stop or the band list."
        )
    T = width // C
    if pos["order"] == "date_major":
        return list(range(T)), [[columns[start + t * C + c] for c in range(C)] for t in range(T)]
    return list(range(T)), [[columns[start + c * T + t] for c in range(C)] for t in range(T)]


def looks_headerless(columns: Sequence[str]) -> bool:
    """True when most column names are numbers: the first row of a file without a header row."""
    numeric = 0
    for c in columns:
        try:
            float(re.sub(r"\.\d+$", "", str(c)) if str(c).count(".") > 1 else str(c))  # pandas dedups "0.1" as "0.1.1"
            numeric += 1
        except ValueError:
            pass
    return len(columns) > 0 and numeric * 2 > len(columns)


HEADERLESS_HINT = (
    " The column names look like values ({examples}): if the file has no header row, set data.header=none and give "
    "the columns by position (0-based), e.g. data.labels.column=0 and data.columns.<modality>.positions="
    "{{start: 1, order: date_major}}."
)


def headerless_hint(columns: Sequence[str]) -> str:
    """:data:`HEADERLESS_HINT` when :func:`looks_headerless`, else an empty string."""
    return HEADERLESS_HINT.format(examples=list(columns)[:4]) if looks_headerless(columns) else ""


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
    if spec.positions is not None:
        return _by_position(columns, spec, True, where)  # type: ignore[no-any-return]
    assert spec.pattern is not None
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
            + headerless_hint(columns)
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
    if spec.positions is not None:
        return _by_position(columns, spec, False, where)  # type: ignore[no-any-return]
    assert spec.pattern is not None
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
            + headerless_hint(columns)
        )
    return out


__all__ = ["ORDERS", "BandColumns", "headerless_hint", "long_columns", "looks_headerless", "wide_columns"]
