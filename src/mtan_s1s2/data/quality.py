"""Validity masks from a quality band or mask raster: which values are valid, which are not.

A quality band (Sentinel-2 L2A ``SCL``, a per-date cloud mask of MAJA, Fmask, iota2 or
Orfeo ToolBox) holds codes per pixel and date. A :class:`QualityRule` lists the codes that
mean *valid* and those that mean *invalid*; any other value stops the run with the count of
pixels per unexpected value, because a mask read with the wrong convention (0/255 instead of
0/1, a bit mask read as classes) would silently keep clouds or drop clear pixels.

Sentinel-2 scene classification (Sen2Cor ``SCL``): 0 no data, 1 saturated or defective,
2 dark area pixels, 3 cloud shadows, 4 vegetation, 5 not vegetated, 6 water,
7 unclassified, 8 cloud medium probability, 9 cloud high probability, 10 thin cirrus,
11 snow or ice. By default (:data:`SCL_RULE`) 0, 1, 3, 8, 9, 10, 11 are invalid and
2, 4, 5, 6, 7 valid (config ``data.modalities.s2.quality``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SCL_INVALID: tuple[int, ...] = (0, 1, 3, 8, 9, 10, 11)
"""SCL classes masked by default: no data, saturated, cloud shadow, clouds, cirrus, snow."""
SCL_VALID: tuple[int, ...] = (2, 4, 5, 6, 7)
"""SCL classes kept by default: dark area, vegetation, not vegetated, water, unclassified."""


@dataclass(frozen=True)
class QualityRule:
    """Valid and invalid values of a quality band.

    Args:
        valid: Values meaning a valid observation.
        invalid: Values meaning an invalid one (cloud, shadow, no data, ...).
        name: The band, named in messages (``SCL``, ``mask``).

    Raises:
        ValueError: If a value is listed as both, or neither list has a value.
    """

    valid: tuple[int, ...]
    invalid: tuple[int, ...]
    name: str = "quality band"

    def __post_init__(self) -> None:
        both = sorted(set(self.valid) & set(self.invalid))
        if both:
            raise ValueError(f"{self.name}: value(s) {both} are listed as both valid and invalid.")
        if not self.valid and not self.invalid:
            raise ValueError(f"{self.name}: list its valid and invalid values.")

    @classmethod
    def from_config(
        cls, cfg: Mapping[str, Any] | None, default: QualityRule | None = None, name: str = "quality band"
    ) -> QualityRule:
        """``{valid: [...], invalid: [...]}`` (missing keys from ``default``).

        Raises:
            ValueError: On unknown keys or bad values.
        """
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - {"valid", "invalid", "variable", "file", "files", "stack"})
        if unknown:
            raise ValueError(f"{name}: unknown key(s) {unknown}; use valid and invalid (lists of values).")
        base = default or cls((), (1,), name)

        def ints(v: Any) -> tuple[int, ...]:
            return tuple(int(x) for x in ([v] if isinstance(v, (int, float)) else list(v)))

        valid = ints(cfg["valid"]) if cfg.get("valid") is not None else None
        invalid = ints(cfg["invalid"]) if cfg.get("invalid") is not None else None
        # A list given alone moves its values out of the other (default) list.
        if valid is None:
            valid = tuple(v for v in base.valid if v not in (invalid or ()))
        if invalid is None:
            invalid = tuple(v for v in base.invalid if v not in valid)
        return cls(valid, invalid, name)

    def invalid_mask(self, codes: np.ndarray, where: str) -> np.ndarray:
        """True where ``codes`` are invalid; NaN (a float band's fill) counts as invalid.

        Args:
            codes: Quality values, any shape.
            where: The file (and variable), named in the error.

        Raises:
            ValueError: On values in neither list, counted per value, with the fix.
        """
        arr = np.asarray(codes)
        nan = np.isnan(arr) if arr.dtype.kind == "f" else None
        known = np.asarray([*self.valid, *self.invalid])
        ok = np.isin(arr, known)
        if nan is not None:
            ok |= nan
        if not ok.all():
            values, counts = np.unique(arr[~ok], return_counts=True)
            listed = ", ".join(f"{v:g}: {n} px" for v, n in zip(values.tolist()[:8], counts.tolist()[:8], strict=True))
            raise ValueError(
                f"{where}: the {self.name} holds value(s) that are neither valid {list(self.valid)} nor invalid "
                f"{list(self.invalid)}: {listed}. Check the mask's convention, or list them in the modality's "
                "quality.valid / quality.invalid."
            )
        out = np.isin(arr, np.asarray(self.invalid)) if self.invalid else np.zeros(arr.shape, bool)
        return out | nan if nan is not None else out


SCL_RULE = QualityRule(SCL_VALID, SCL_INVALID, "SCL")
MASK_RULE = QualityRule((0,), (1,), "mask")
"""Default of a per-date mask raster: 0 valid, 1 invalid (iota2 / Orfeo ToolBox convention)."""


__all__ = ["MASK_RULE", "SCL_INVALID", "SCL_RULE", "SCL_VALID", "QualityRule"]
