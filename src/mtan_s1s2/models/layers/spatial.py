"""Spatial context for per-pixel features: the mean of each pixel's neighbourhood, pixels without data left out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format


def check_neighbourhood_side(k: int, key: str) -> int:
    """``k`` when it is 1 (per pixel) or an odd neighbourhood side >= 3 px.

    Args:
        k: The neighbourhood side.
        key: The config key named in the error (``model.net.spatial_context``, ``model.spatial_context``).

    Raises:
        ValueError: Otherwise, naming ``key``.
    """
    if int(k) != 1 and (int(k) < 3 or int(k) % 2 == 0):
        raise ValueError(f"{key} must be 1 (per pixel) or an odd neighbourhood side >= 3 px, got {k}.")
    return int(k)


class NeighbourhoodMean(nn.Module):
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

    def __init__(self, kernel_size: int, fmt: Format = Format.CHANNELS_FIRST) -> None:
        super().__init__()
        if check_neighbourhood_side(kernel_size, "model.net.spatial_context") == 1:  # 1: the network builds no layer
            raise ValueError(
                "model.net.spatial_context must be 1 (per pixel) or an odd neighbourhood side >= 3 px, got 1 for a "
                "NeighbourhoodMean layer (with 1 the network builds none)."
            )
        self.kernel_size = int(kernel_size)
        self.fmt = Format(fmt)

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

    def extra_repr(self) -> str:
        """The neighbourhood side and layout, in the module's printout."""
        return f"kernel_size={self.kernel_size}, fmt={self.fmt.value}"


__all__ = ["NeighbourhoodMean", "check_neighbourhood_side"]
