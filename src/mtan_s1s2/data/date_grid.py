"""Linear interpolation of masked, irregular SITS onto a regular date grid.

Models and features that read a series by date index (TempCNN, the RandomForest's and
MiniRocket's features) need the same dates in every pixel. Irregular S2 acquisitions with
clouds (SCL-masked) and S1 orbits that differ between scenes do not give that; the usual
fix is temporal gap filling: each pixel's valid observations linearly interpolated at
regular dates (Inglada et al., "Operational High Resolution Land Cover Map Production at
the Country Scale Using Satellite Image Time Series", Remote Sensing 9(1), 95, 2017;
Pelletier et al., 2019, trained TempCNN on such series).

:func:`window_mean_images_to_grid` instead averages the valid observations within half a
step of each grid date (a box-filter composite, as monthly or 10-day composites of S1
backscatter are made against speckle), and interpolates only where that window is empty.

Dates are ``doy`` (days since the data's reference date), as in :mod:`mtan_s1s2.data.batch`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def regular_dates(first: float, last: float, step_days: float) -> Tensor:
    """``(G,) float64`` dates every ``step_days`` from ``first`` to ``last`` (inclusive within half a step).

    Raises:
        ValueError: If ``step_days`` is not positive or ``last < first``.
    """
    if not step_days > 0:
        raise ValueError(f"step_days must be > 0 (days between grid dates), got {step_days}.")
    if not last >= first:
        raise ValueError(f"The date grid's last doy ({last}) is before its first ({first}).")
    count = math.ceil((last + step_days / 2 - first) / step_days)  # np.arange(first, last + step / 2, step)
    return first + step_days * torch.arange(count, dtype=torch.float64)


def interpolate_to_grid(x: Tensor, doy: Tensor, mask: Tensor, grid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per pixel, linear interpolation of the valid observations at the grid dates.

    At each grid date the value lies on the line between the pixel's last valid observation
    on or before it and its first valid observation on or after it; before the first and
    after the last valid observation it is held constant (the nearest one). Values under a
    False mask are never read (they may be NaN).

    Args:
        x: ``(B, T, C, P)`` values (float), ``P`` pixels per sample.
        doy: ``(B, T)`` dates of each sample, days; padded dates may repeat.
        mask: ``(B, T, P)`` bool, True where the observation is valid.
        grid: ``(G,)`` grid dates, days.

    Returns:
        ``values (B, G, C, P)`` in ``x``'s dtype (0 where the pixel has no valid
        observation), ``has_data (B, G, P)`` bool (the pixel has at least one valid
        observation) and ``gap_days (B, G, P)`` in ``doy``'s dtype: days from each grid
        date to the pixel's nearest valid observation (``inf`` without any).

    Raises:
        ValueError: If the shapes disagree.
    """
    B, T, C, P = x.shape
    if doy.shape != (B, T) or mask.shape != (B, T, P) or grid.ndim != 1:
        raise ValueError(
            f"interpolate_to_grid needs x (B, T, C, P), doy (B, T), mask (B, T, P) and grid (G,); got "
            f"{tuple(x.shape)}, {tuple(doy.shape)}, {tuple(mask.shape)}, {tuple(grid.shape)}."
        )
    G = grid.shape[0]
    if T == 0:  # no date at all (a scene without an optional modality): no pixel has data
        gap = torch.full((B, G, P), math.inf, dtype=doy.dtype, device=doy.device)
        return x.new_zeros((B, G, C, P)), torch.zeros((B, G, P), dtype=torch.bool, device=x.device), gap
    doy, order = torch.sort(doy, dim=1, stable=True)
    x = x.gather(1, order[:, :, None, None].expand(B, T, C, P))
    mask = mask.gather(1, order[:, :, None].expand(B, T, P))
    steps = torch.arange(T, device=x.device).view(1, T, 1)
    last_valid = torch.where(mask, steps, -1).cummax(dim=1).values  # (B, T, P): last valid index <= t
    next_valid = torch.where(mask, steps, T).flip(1).cummin(dim=1).values.flip(1)  # first valid index >= t
    dates = grid.to(device=doy.device, dtype=doy.dtype)
    before = torch.searchsorted(doy.contiguous(), dates.expand(B, G).contiguous(), right=True) - 1  # (B, G)
    at_or_after = torch.searchsorted(doy.contiguous(), dates.expand(B, G).contiguous(), right=False)  # (B, G)
    i0 = last_valid.gather(1, before.clamp(min=0)[:, :, None].expand(B, G, P))
    i0 = torch.where(before[:, :, None] >= 0, i0, -1)
    i1 = next_valid.gather(1, at_or_after.clamp(max=T - 1)[:, :, None].expand(B, G, P))
    i1 = torch.where(at_or_after[:, :, None] < T, i1, T)
    has0, has1 = i0 >= 0, i1 < T
    i0c, i1c = i0.clamp(0, T - 1), i1.clamp(0, T - 1)
    days = doy[:, :, None].expand(B, T, P)
    d0, d1 = days.gather(1, i0c), days.gather(1, i1c)  # (B, G, P)
    v0 = x.gather(1, i0c[:, :, None].expand(B, G, C, P))
    v1 = x.gather(1, i1c[:, :, None].expand(B, G, C, P))
    g = dates.view(1, G, 1)
    span = torch.where(d1 > d0, d1 - d0, torch.ones_like(d0))
    w = ((g - d0) / span).clamp(0.0, 1.0)
    both = (has0 & has1)[:, :, None]
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    v0 = torch.where(has0[:, :, None], v0, zero)
    v1 = torch.where(has1[:, :, None], v1, zero)
    line = v0 + w[:, :, None].to(x.dtype) * (v1 - v0)
    values = torch.where(both, line, torch.where(has0[:, :, None], v0, v1))
    inf = torch.full((), math.inf, dtype=doy.dtype, device=doy.device)
    gap = torch.minimum(torch.where(has0, g - d0, inf), torch.where(has1, d1 - g, inf))
    return values, has0 | has1, gap


def interpolate_images_to_grid(
    x: Tensor, doy: Tensor, mask: Tensor, grid: Tensor, step_days: float
) -> tuple[Tensor, Tensor]:
    """One modality's image series interpolated at the grid dates (:func:`interpolate_to_grid` per pixel).

    Args:
        x: ``(B, T, C, H, W)`` values (float); values under a False mask are never read.
        doy: ``(B, T)`` dates, days.
        mask: ``(B, T, H, W)`` bool, True where the observation is valid.
        grid: ``(G,)`` grid dates, days.
        step_days: Days between grid dates: a grid date counts as observed when a valid
            observation lies within half of it.

    Returns:
        ``values (B, G, C, H, W)`` in ``x``'s dtype (0 for a pixel without a valid
        observation) and ``observed (B, G, H, W)`` bool.

    Raises:
        ValueError: If the shapes disagree.
    """
    if x.ndim != 5 or mask.shape != (x.shape[0], x.shape[1], *x.shape[3:]):
        raise ValueError(
            f"interpolate_images_to_grid needs x (B, T, C, H, W) and mask (B, T, H, W); got "
            f"{tuple(x.shape)} and {tuple(mask.shape)}."
        )
    B, T, C, H, W = x.shape
    values, _, gap = interpolate_to_grid(x.reshape(B, T, C, H * W), doy, mask.reshape(B, T, H * W), grid)
    G = grid.shape[0]
    return values.reshape(B, G, C, H, W), (gap <= step_days / 2).reshape(B, G, H, W)


def window_mean_images_to_grid(
    x: Tensor, doy: Tensor, mask: Tensor, grid: Tensor, step_days: float
) -> tuple[Tensor, Tensor]:
    """One modality's image series composited at the grid dates: the mean of each window's valid observations.

    The window of grid date ``g`` holds the dates ``g - step_days / 2 <= doy < g + step_days / 2``,
    so consecutive windows of a regular grid tile the time axis and every observation in
    the grid's span counts once. A pixel with no valid observation in a window takes
    :func:`interpolate_images_to_grid`'s value there (the line between its nearest valid
    observations). Against :func:`interpolate_images_to_grid`, which reads at most the two
    observations around each grid date, no observation between grid dates is left out: with
    S1's 6-12-day revisit onto monthly grid dates, the mean of 3-5 acquisitions instead of
    a point on the line through two (speckle averages out). Values under a False mask and
    the dates of padding (valid at no pixel) are never read.

    Args:
        x: ``(B, T, C, H, W)`` values (float); values under a False mask are never read.
        doy: ``(B, T)`` dates, days.
        mask: ``(B, T, H, W)`` bool, True where the observation is valid.
        grid: ``(G,)`` grid dates, days.
        step_days: Days between grid dates (> 0): the window width.

    Returns:
        ``values (B, G, C, H, W)`` in ``x``'s dtype (0 for a pixel without a valid
        observation) and ``observed (B, G, H, W)`` bool: a valid observation lies in the
        window.

    Raises:
        ValueError: If the shapes disagree or ``step_days`` is not positive.
    """
    if not step_days > 0:
        raise ValueError(f"step_days must be > 0 (days between grid dates), got {step_days}.")
    line, _ = interpolate_images_to_grid(x, doy, mask, grid, step_days)
    dates = grid.to(device=doy.device, dtype=doy.dtype)
    offset = doy[:, None, :] - dates[None, :, None]  # (B, G, T)
    inside = (offset >= -step_days / 2) & (offset < step_days / 2)
    weights = (inside[:, :, :, None, None] & mask[:, None]).to(x.dtype)  # (B, G, T, H, W)
    count = weights.sum(dim=2)  # (B, G, H, W)
    clean = torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
    total = torch.einsum("bgthw,btchw->bgchw", weights, clean)
    observed = count > 0
    mean = total / count.clamp(min=1.0)[:, :, None]
    return torch.where(observed[:, :, None], mean, line), observed
