"""Per-pixel layer normalisation over the feature axis, in either layout of :class:`Format`."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format


class FeatureNorm(nn.Module):
    """``LayerNorm`` over the features of each pixel (Ba, Kiros and Hinton, 2016).

    The block owns its layout: features lie on axis 1 (``CHANNELS_FIRST``: ``(B, C, H, W)``)
    or last (``CHANNELS_LAST``: ``(B, H, W, C)``); the output has the input's layout.

    Args:
        num_features: ``C``.
        fmt: Layout of the input.
        eps: Added to the variance.
    """

    def __init__(self, num_features: int, fmt: Format = Format.CHANNELS_FIRST, eps: float = 1e-5) -> None:
        super().__init__()
        self.fmt = Format(fmt)
        self.norm = nn.LayerNorm(num_features, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x`` over its feature axis."""
        if self.fmt == Format.CHANNELS_LAST:
            return self.norm(x)  # type: ignore[no-any-return]
        moved = x.movedim(1, -1)
        out = F.layer_norm(moved, self.norm.normalized_shape, self.norm.weight, self.norm.bias, self.norm.eps)
        return out.movedim(-1, 1)


__all__ = ["FeatureNorm"]
