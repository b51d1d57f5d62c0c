"""The tensor layout an MLP backend wants between the blocks of the model.

Named once here and passed around as :class:`Format`, after timm's ``layers/format.py``.
"""

from __future__ import annotations

from enum import Enum


class Format(str, Enum):
    """Where the channel (feature) axis of the model's per-pixel features lies.

    * ``CHANNELS_FIRST``: ``(B, T, C, H, W)`` series, ``(B, Q, d, H, W)`` after the
      attention, ``(B, K, H, W)`` logits (``linear`` and ``conv`` backends).
    * ``CHANNELS_LAST``: ``(B, T, H, W, C)`` series, ``(B, H, W, Q, d)`` after the
      attention (a pixel's reference times contiguous), ``(B, H, W, K)`` logits
      (``channels_last`` backend); the model converts once at its input and output.
    """

    CHANNELS_FIRST = "channels_first"
    CHANNELS_LAST = "channels_last"


__all__ = ["Format"]
