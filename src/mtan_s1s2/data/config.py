"""The two sections every data source shares: ``data.split`` and ``data.labels``.

Every datamodule takes its split settings in one mapping, ``data.split``, and its label
settings in one, ``data.labels``, whatever the source; each source adds its own keys
inside them (``docs/configuration.md`` lists them all):

* ``data.split``: ``by`` (how samples are grouped into splits), ``n_folds``, ``fold``
  (the test fold of a cross-validation, ``python train.py -m data.split.fold=1,2,3,4,5``)
  and ``seed`` (of the fold assignment), plus e.g. ``block_size`` (scenes),
  ``group_column`` (tables) or ``folds`` (PASTIS).
* ``data.labels``: ``classes`` (source codes per class), ``names`` (class names of
  labels that are already class indices), ``ignore_codes`` and ``unknown``, plus where the
  labels are read (``file`` + ``variable``/``band`` for scenes, ``column`` for tables).

:func:`section` reads one of them and stops on a key the source does not know, naming the
closest valid one.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

SPLIT_KEYS: tuple[str, ...] = ("by", "n_folds", "fold", "seed")
"""Keys of ``data.split`` shared by every source with folds."""

LABEL_KEYS: tuple[str, ...] = ("classes", "names", "ignore_codes", "unknown")
"""Keys of ``data.labels`` shared by every source (each reads those that apply to it)."""


def section(cfg: Mapping[str, Any] | None, allowed: Sequence[str], key: str) -> dict[str, Any]:
    """``cfg`` (a ``data.split`` or ``data.labels`` mapping) as a dict, its keys checked.

    Args:
        cfg: The mapping from the config (None = empty).
        allowed: The keys this source reads.
        key: Its config key, named in the message (``data.split``).

    Returns:
        A plain dict of ``cfg``.

    Raises:
        ValueError: If ``cfg`` is not a mapping, or on a key not in ``allowed``; the
            message names the key, the closest valid one and every valid key.
    """
    if cfg is None:
        return {}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"{key} must be a mapping of {list(allowed)}, got {cfg!r}.")
    out = {str(k): v for k, v in cfg.items()}
    for name in out:
        if name not in allowed:
            close = difflib.get_close_matches(name, list(allowed), n=1)
            hint = f" (did you mean {key}.{close[0]}?)" if close else ""
            raise ValueError(f"{key} has no key {name!r}{hint}; its keys are: {', '.join(allowed)}.")
    return out


__all__ = ["LABEL_KEYS", "SPLIT_KEYS", "section"]
