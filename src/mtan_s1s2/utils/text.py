"""Values as users typed them, for error and log messages.

NumPy 2 prints its scalars with their type (``np.int64(5)``, ``np.str_('A')``) inside
lists, tuples and ``repr``; a message should show ``5`` and ``'A'``, the values of the
user's file or config.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def plain(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds (``np.int64(5)`` -> ``5``); other values unchanged."""
    return value.item() if isinstance(value, np.generic) else value


def plain_list(values: Iterable[Any]) -> list[Any]:
    """:func:`plain` of every value (``[np.int64(1), np.str_('a')]`` -> ``[1, 'a']``)."""
    return [plain(v) for v in values]


__all__ = ["plain", "plain_list"]
