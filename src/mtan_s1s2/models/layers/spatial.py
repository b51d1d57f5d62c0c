"""Spatial context for per-pixel features: each pixel's neighbourhood pooled, pixels without data left out."""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format


def check_neighbourhood_side(k: object, key: str) -> int:
    """``k`` as an ``int`` when it is 1 (per pixel) or an odd neighbourhood side >= 3 px.

    Args:
        k: The neighbourhood side (any integer type).
        key: The config key named in the error (``model.net.spatial_context``, ``model.spatial_context``).

    Raises:
        ValueError: Otherwise (``auto`` included: ``train.py`` resolves it from the data), naming ``key``.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(
            f"{key} must be a neighbourhood side in pixels (1 = per pixel), got {k!r}. train.py resolves auto from "
            "the data; set a number when building the model yourself."
        )
    side = int(k)
    if side != 1 and (side < 3 or side % 2 == 0):
        raise ValueError(f"{key} must be 1 (per pixel) or an odd neighbourhood side >= 3 px, got {k}.")
    return side


class NeighbourhoodPool(nn.Module):
    """Base of the layers that pool each pixel's features over the ``k x k`` pixels around it holding data.

    ``forward(x, valid)`` takes ``x`` ``(B, C, H, W)`` float (``(B, H, W, C)`` channels-last)
    and ``valid`` ``(B, H, W)`` bool (True where the pixel holds data; None = every pixel),
    and returns ``x``'s shape and layout.

    Args:
        kernel_size: Neighbourhood side ``k``, pixels (odd, >= 3).
        fmt: Layout of the input (and output): ``(B, C, H, W)`` channels-first or
            ``(B, H, W, C)`` channels-last; the backend switch sets it.

    Raises:
        ValueError: If ``kernel_size`` is even or below 3 (with 1 the network builds no layer).
    """

    def __init__(self, kernel_size: int, fmt: Format = Format.CHANNELS_FIRST) -> None:
        super().__init__()
        side = check_neighbourhood_side(kernel_size, "model.net.spatial_context")
        if side == 1:
            raise ValueError(
                f"model.net.spatial_context must be an odd neighbourhood side >= 3 px for a {type(self).__name__} "
                "layer, got 1 (with 1 the network builds none)."
            )
        self.kernel_size = side
        self.fmt = Format(fmt)

    def extra_repr(self) -> str:
        """The neighbourhood side and layout, in the module's printout."""
        return f"kernel_size={self.kernel_size}, fmt={self.fmt.value}"


class NeighbourhoodMean(NeighbourhoodPool):
    """The mean of each pixel's features over the ``k x k`` pixels around it that hold data.

    Pixels without data (no valid observation in any modality, the padding of border
    windows) and pixels outside the window never enter a mean; a pixel whose neighbourhood
    holds no data keeps its own features. No parameters: the classifier gives its head these
    means beside each pixel's own features (``model.net.spatial_context``), and the head
    learns how much of each to use. Crop parcels and land-cover patches span many pixels, so
    the neighbourhood mean is a less noisy view of the same class away from their borders,
    and the difference between the two marks the borders.

    Args:
        kernel_size: Neighbourhood side ``k``, pixels (odd, >= 3).
        fmt: Layout of the input (and output): ``(B, C, H, W)`` channels-first or
            ``(B, H, W, C)`` channels-last.

    Raises:
        ValueError: If ``kernel_size`` is even or below 3.
    """

    def forward(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """The neighbourhood means of ``x``.

        Args:
            x: ``(B, C, H, W)`` float (``(B, H, W, C)`` channels-last).
            valid: ``(B, H, W)`` bool, True where the pixel holds data; None = every pixel.

        Returns:
            ``x``'s shape and layout.
        """
        cf = x.movedim(-1, 1) if self.fmt == Format.CHANNELS_LAST else x
        B, _, H, W = cf.shape
        w = torch.ones((B, 1, H, W), dtype=cf.dtype, device=cf.device) if valid is None else valid[:, None].to(cf.dtype)
        k, pad = self.kernel_size, self.kernel_size // 2
        # both divided by k*k; zero padding: outside the window counts as no data
        total = F.avg_pool2d(cf * w, k, stride=1, padding=pad, count_include_pad=True)
        count = F.avg_pool2d(w, k, stride=1, padding=pad, count_include_pad=True)
        mean = torch.where(count > 0, total / count.clamp_min(torch.finfo(cf.dtype).tiny), cf)
        return mean.movedim(1, -1) if self.fmt == Format.CHANNELS_LAST else mean


SPATIAL_POOLS = ("mean", "attention", "similarity")
"""How ``model.net.spatial_pool`` pools a pixel's neighbourhood."""


class NeighbourhoodSoftmax(NeighbourhoodPool):
    """Base of the pools whose weights are a softmax of scores over the ``k x k`` pixels holding data.

    The score of neighbour ``j`` for pixel ``i`` is ``scale * <q_i, key_j> + b[offset(i, j)]``:
    :meth:`queries_and_keys` gives ``q`` and ``key`` (each ``(B, H, W, D)``) and
    :meth:`score_scale` the scale, and ``b`` is a learned bias per offset in the window
    (zero at start). The values are the features themselves, so the output has the input's
    channels. Pixels without data and outside the window get no weight; a pixel whose
    neighbourhood holds no data keeps its own features, and its scores stay finite (no NaN
    in forward or backward).

    Args:
        kernel_size: Neighbourhood side ``k``, pixels (odd, >= 3).
        fmt: Layout of the input (and output): ``(B, C, H, W)`` channels-first or
            ``(B, H, W, C)`` channels-last.

    Raises:
        ValueError: If ``kernel_size`` is even or below 3.
    """

    def __init__(self, kernel_size: int, fmt: Format = Format.CHANNELS_FIRST) -> None:
        super().__init__(kernel_size, fmt)
        self.offset_bias = nn.Parameter(torch.zeros(self.kernel_size**2))

    def queries_and_keys(self, xl: Tensor) -> tuple[Tensor, Tensor]:
        """The query and key of every pixel, each ``(B, H, W, D)``, from channels-last features ``xl``."""
        raise NotImplementedError

    def score_scale(self) -> Tensor | float:
        """The factor on the dot products of queries and keys."""
        raise NotImplementedError

    def forward(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """The softmax-weighted neighbourhood means of ``x`` (shapes as :class:`NeighbourhoodPool` gives)."""
        xl = x.movedim(1, -1) if self.fmt == Format.CHANNELS_FIRST else x  # (B, H, W, C), a view
        B, H, W, _ = xl.shape
        ok = torch.ones((B, H, W), dtype=torch.bool, device=x.device) if valid is None else valid
        k, r = self.kernel_size, self.kernel_size // 2
        q, key = self.queries_and_keys(xl)
        keys = F.pad(key, (0, 0, r, r, r, r))
        values = F.pad(xl, (0, 0, r, r, r, r))
        held = F.pad(ok, (r, r, r, r), value=False)  # outside the window: no data
        offsets = [(dy, dx) for dy in range(k) for dx in range(k)]
        scale = self.score_scale()
        scores = torch.stack(
            [(q * keys[:, dy : dy + H, dx : dx + W]).sum(-1) * scale for dy, dx in offsets], dim=-1
        ) + self.offset_bias.to(q.dtype)
        present = torch.stack([held[:, dy : dy + H, dx : dx + W] for dy, dx in offsets], dim=-1)  # (B, H, W, k*k)
        anywhere = present.any(dim=-1, keepdim=True)
        # where no neighbour holds data every score stays finite (no NaN, forward or backward), and the
        # pixel keeps its own features below
        scores = scores.masked_fill(~present & anywhere, float("-inf"))
        weights = (torch.softmax(scores, dim=-1) * present.to(scores.dtype)).to(xl.dtype)  # autocast: fp32 softmax
        pooled = torch.zeros_like(xl)
        for i, (dy, dx) in enumerate(offsets):
            pooled = pooled + weights[..., i, None] * values[:, dy : dy + H, dx : dx + W]
        out = torch.where(anywhere, pooled, xl)
        return out.movedim(-1, 1) if self.fmt == Format.CHANNELS_FIRST else out


class NeighbourhoodAttention(NeighbourhoodSoftmax):
    """A learned weighted mean of each pixel's features over the ``k x k`` pixels around it that hold data.

    The weights are a softmax, over the neighbours holding data, of a scaled dot product
    between a query of the pixel's features and a key of each neighbour's, plus a learned
    bias per offset in the window (the local self-attention of Ramachandran et al.,
    "Stand-Alone Self-Attention in Vision Models", NeurIPS 2019, restricted to the pixels
    holding data). Beside a plain mean (:class:`NeighbourhoodMean`), which blurs a parcel's
    pixels with those of the next parcel at its border, the network can learn to weigh the
    neighbours whose features resemble the pixel's own. Pixels without data and outside the
    window get no weight; a pixel whose neighbourhood holds no data keeps its own features.
    The values are the features themselves, so the output has the input's channels.

    Args:
        channels: Feature channels ``C``.
        kernel_size: Neighbourhood side ``k``, pixels (odd, >= 3).
        fmt: Layout of the input (and output): ``(B, C, H, W)`` channels-first or
            ``(B, H, W, C)`` channels-last.
        key_dim: Width of the query and key projections.

    Raises:
        ValueError: If ``kernel_size`` is even or below 3, or ``key_dim`` is not positive.
    """

    def __init__(self, channels: int, kernel_size: int, fmt: Format = Format.CHANNELS_FIRST, key_dim: int = 16) -> None:
        super().__init__(kernel_size, fmt)
        if int(key_dim) < 1:
            raise ValueError(f"NeighbourhoodAttention's key_dim must be a positive width, got {key_dim}.")
        self.query = nn.Linear(int(channels), int(key_dim))
        self.key = nn.Linear(int(channels), int(key_dim))
        self.scale = 1.0 / math.sqrt(int(key_dim))

    def queries_and_keys(self, xl: Tensor) -> tuple[Tensor, Tensor]:
        """Learned projections of the features, ``(B, H, W, key_dim)`` each."""
        return self.query(xl), self.key(xl)

    def score_scale(self) -> float:
        """``1 / sqrt(key_dim)``."""
        return self.scale

    def extra_repr(self) -> str:
        """The neighbourhood side, layout and key width, in the module's printout."""
        return f"{super().extra_repr()}, key_dim={self.query.out_features}"


class NeighbourhoodSimilarity(NeighbourhoodSoftmax):
    """Each pixel's features averaged over the neighbours holding data, weighed by how alike they are.

    The weight of neighbour ``j`` for pixel ``i`` is a softmax, over the ``k x k`` pixels
    holding data, of ``t * cos(f_i, f_j) + b[offset]``: the cosine similarity of the two
    pixels' features times one learned temperature ``t``, plus a learned bias per offset in
    the window. This is a bilateral filter (Tomasi & Manduchi, "Bilateral Filtering for Gray
    and Color Images", ICCV 1998) on the network's own features, with the range and spatial
    weights learned: at ``t = 0`` and zero biases (the start) it is the plain mean
    (:class:`NeighbourhoodMean`), and as ``t`` grows a pixel at a parcel's border reads its
    own parcel more than the next one. Unlike :class:`NeighbourhoodAttention` it learns
    ``k * k + 1`` numbers, not two projections of the features, so it has little to fit
    on a few hundred labelled pixels. Pixels without data and outside the window get no
    weight; a pixel whose neighbourhood holds no data keeps its own features. A pixel
    whose features are all zero is similar to none (cosine 0).

    Args:
        kernel_size: Neighbourhood side ``k``, pixels (odd, >= 3).
        fmt: Layout of the input (and output): ``(B, C, H, W)`` channels-first or
            ``(B, H, W, C)`` channels-last.

    Raises:
        ValueError: If ``kernel_size`` is even or below 3.
    """

    def __init__(self, kernel_size: int, fmt: Format = Format.CHANNELS_FIRST) -> None:
        super().__init__(kernel_size, fmt)
        self.temperature = nn.Parameter(torch.zeros(()))

    def queries_and_keys(self, xl: Tensor) -> tuple[Tensor, Tensor]:
        """The features scaled to unit length (both the query and the key)."""
        unit = F.normalize(xl, dim=-1)
        return unit, unit

    def score_scale(self) -> Tensor:
        """The learned temperature ``t``."""
        return self.temperature


__all__ = [
    "SPATIAL_POOLS",
    "NeighbourhoodAttention",
    "NeighbourhoodMean",
    "NeighbourhoodPool",
    "NeighbourhoodSimilarity",
    "NeighbourhoodSoftmax",
    "check_neighbourhood_side",
]
