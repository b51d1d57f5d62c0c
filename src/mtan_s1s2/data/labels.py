"""Source label codes (LPIS crop codes, land-cover codes, class names) to class indices.

Real reference data come with their own nomenclature: WorldCereal ``CT`` crop-type codes
(1110, 1200, ...), ``LC`` land-cover codes (11 cropland, 13 grassland, ...), ``ewoc_code``
in the pixel tables, or class names. A :class:`LabelMapping` (config ``data.labels``) groups
source codes into the classes to learn::

    labels:
      classes:              # class name -> source codes; class indices 1, 2, ... in this order
        cereals: [1110, 1510]
        maize: [1200]
        grassland: [9120]
      ignore_codes: [0, 99]  # codes that are not a class (no label, unknown): ignore_index
      unknown: error         # codes in neither list: error (default) or ignore

Class index 0 is ``unlabelled`` (the ``ignore_index``): ignored codes, NaN (no label) and,
with ``unknown: ignore``, unmapped codes get it, and the loss and every metric leave it out.
With ``unknown: error`` an unmapped code stops the run before any training, with the count
of pixels per code and how to map them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

log = logging.getLogger(__name__)

Code = int | float | str
UNLABELLED = "unlabelled"
"""Name of class 0, the ``ignore_index``."""


def normalize_code(value: Any) -> Code:
    """A code as a dict key: integral numbers as ``int`` (``1200.0`` -> ``1200``), text as ``str``."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return int(value) if float(value).is_integer() else float(value)
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and np.isnan(value))


@dataclass(frozen=True)
class LabelMapping:
    """Source codes -> class indices (0 = ``unlabelled`` = ``ignore_index``).

    Args:
        class_names: Names of the classes, index = label; ``class_names[0]`` is
            ``unlabelled``.
        codes: Source code -> class index (>= 1).
        ignore_codes: Source codes mapped to 0.
        unknown: ``error`` (raise on codes in neither ``codes`` nor ``ignore_codes``) or
            ``ignore`` (map them to 0 and log their counts).

    Raises:
        ValueError: On a code listed twice, a class without codes, fewer than two classes or
            an unknown ``unknown`` policy.
    """

    class_names: tuple[str, ...]
    codes: Mapping[Code, int]
    ignore_codes: frozenset[Code] = frozenset()
    unknown: Literal["error", "ignore"] = "error"

    ignore_index: int = 0

    @classmethod
    def from_config(
        cls,
        classes: Mapping[str, Sequence[Any] | Any],
        ignore_codes: Sequence[Any] = (),
        unknown: str = "error",
        key: str = "data.labels",
    ) -> LabelMapping:
        """Build from ``{class name: [codes]}`` (a single code may be given without a list).

        Raises:
            ValueError: As the class; messages name ``key``.
        """
        if unknown not in ("error", "ignore"):
            raise ValueError(f"{key}.unknown must be 'error' or 'ignore', got {unknown!r}.")
        if not isinstance(classes, Mapping) or not classes:
            raise ValueError(
                f"{key}.classes must map class names to source codes, e.g. {{maize: [1200], wheat: [1110]}}; "
                f"got {classes!r}."
            )
        names = [UNLABELLED]
        codes: dict[Code, int] = {}
        for name, values in classes.items():
            if str(name) == UNLABELLED:
                raise ValueError(f"{key}.classes: {UNLABELLED!r} is class 0; list its codes in {key}.ignore_codes.")
            listed = [values] if isinstance(values, (str, int, float)) else list(values)
            if not listed:
                raise ValueError(f"{key}.classes.{name} has no source code.")
            names.append(str(name))
            for v in listed:
                code = normalize_code(v)
                if code in codes:
                    raise ValueError(f"{key}: code {code!r} is listed for both {names[codes[code]]!r} and {name!r}.")
                codes[code] = len(names) - 1
        if len(names) < 3:
            raise ValueError(f"{key}.classes needs at least two classes, got {list(classes)}.")
        ignored = frozenset(normalize_code(v) for v in ignore_codes)
        both = sorted(str(c) for c in ignored & set(codes))
        if both:
            raise ValueError(f"{key}: code(s) {both} are both a class and in ignore_codes.")
        return cls(tuple(names), codes, ignored, unknown)  # type: ignore[arg-type]

    @property
    def num_classes(self) -> int:
        """``K``, including class 0."""
        return len(self.class_names)

    def count_codes(self, raw: np.ndarray) -> dict[Code, int]:
        """Pixels per source code (NaN and None left out)."""
        values, counts = np.unique(np.asarray(raw).ravel(), return_counts=True)
        out: dict[Code, int] = {}
        for v, n in zip(values.tolist(), counts.tolist(), strict=True):
            if not _is_missing(v):
                code = normalize_code(v)
                out[code] = out.get(code, 0) + int(n)
        return out

    def unknown_codes(self, raw: np.ndarray) -> dict[Code, int]:
        """Codes of ``raw`` in neither ``codes`` nor ``ignore_codes``, with their pixel counts."""
        return {c: n for c, n in self.count_codes(raw).items() if c not in self.codes and c not in self.ignore_codes}

    def check(self, raw: np.ndarray, where: str) -> None:
        """Raise (``unknown: error``) or log (``ignore``) the unmapped codes of ``raw``.

        Args:
            raw: Source labels.
            where: Where they were read (file, column), named in the message.

        Raises:
            ValueError: ``unknown: error`` and some codes are unmapped; the message counts
                the pixels per code and says how to map them.
        """
        unknown = self.unknown_codes(raw)
        if not unknown:
            return
        listed = ", ".join(f"{c!r}: {n} px" for c, n in sorted(unknown.items(), key=lambda kv: -kv[1]))
        if self.unknown == "ignore":
            log.info("%s: label codes not in data.labels.classes are ignored: %s", where, listed)
            return
        raise ValueError(
            f"{where}: {len(unknown)} label code(s) are not mapped to a class: {listed}. Add each to a class "
            "(data.labels.classes.<name>=[...]) or to data.labels.ignore_codes, or set data.labels.unknown=ignore "
            "to leave every unmapped code out."
        )

    def map(self, raw: np.ndarray) -> np.ndarray:
        """Class indices of source labels, ``int64`` of ``raw``'s shape.

        Ignored, missing and (with ``unknown: ignore``) unmapped codes get 0. Call
        :meth:`check` first to enforce ``unknown: error``.
        """
        arr = np.asarray(raw)
        values, inverse = np.unique(arr.ravel(), return_inverse=True)
        table = np.zeros(len(values), np.int64)
        for i, v in enumerate(values.tolist()):
            if not _is_missing(v):
                table[i] = self.codes.get(normalize_code(v), self.ignore_index)
        return table[inverse].reshape(arr.shape)

    def as_dict(self) -> dict[str, Any]:
        """The mapping as plain data (for ``split``/run records): class names and their codes."""
        by_class: dict[str, list[Code]] = {n: [] for n in self.class_names[1:]}
        for code, idx in self.codes.items():
            by_class[self.class_names[idx]].append(code)
        return {"classes": by_class, "ignore_codes": sorted(self.ignore_codes, key=str), "unknown": self.unknown}


__all__ = ["UNLABELLED", "Code", "LabelMapping", "normalize_code"]
