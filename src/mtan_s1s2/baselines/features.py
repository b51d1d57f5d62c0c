"""Fixed-length per-pixel features of irregular, masked SITS, for classifiers such as RandomForest.

Each modality's series of a labelled pixel becomes ``G x C`` values: the pixel's valid
observations read at ``G`` dates (a *date grid*) for every channel ``C``:

* ``raw``: when every sample shares the same dates (pixel tables, one scene), the grid is
  those dates and each feature is the stored observation itself, NaN where it is invalid
  (scikit-learn's RandomForest handles missing values).
* ``interpolated``: otherwise, a regular grid every ``step_days`` over the dates of the
  training data, each value linearly interpolated between the pixel's valid observations
  around it (held constant before the first and after the last one); NaN for a pixel
  without any valid observation.

The features of all modalities are concatenated, in the datamodule's modality order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mtan_s1s2.data.batch import Batch

FeatureMode = Literal["auto", "raw", "interpolated"]


@dataclass(frozen=True)
class DateGrid:
    """The dates features are read at, per modality (``doy``, days since the reference date).

    Attributes:
        doy: Modality -> ``(G,) float64`` grid dates.
        raw: True when the grid is the samples' own common dates (no interpolation).
    """

    doy: Mapping[str, np.ndarray]
    raw: bool


def _common_dates(batches: Iterable[Batch], modalities: Sequence[str]) -> dict[str, np.ndarray] | None:
    common: dict[str, np.ndarray] = {}
    for batch in batches:
        for m in modalities:
            for doy in batch[m]["doy"].numpy():  # padded dates repeat the last one: never common
                dates = np.asarray(doy, np.float64)
                if m not in common:
                    common[m] = dates
                elif common[m].shape != dates.shape or not np.allclose(common[m], dates):
                    return None
    return common


def date_grid(
    batches: Iterable[Batch], modalities: Sequence[str], mode: FeatureMode = "auto", step_days: float = 10.0
) -> DateGrid:
    """The date grid of the training batches (see the module docstring).

    Args:
        batches: Training batches (:mod:`mtan_s1s2.data.batch`); re-iterable (a list or a
            ``DataLoader``), read up to twice.
        modalities: Modalities to use.
        mode: ``raw`` (requires common dates), ``interpolated``, or ``auto`` (raw when the
            dates are common to all samples).
        step_days: Grid step of ``interpolated``, days.

    Raises:
        ValueError: If ``mode`` is ``raw`` but the samples have different dates, or
            ``step_days`` is not positive.
    """
    if step_days <= 0:
        raise ValueError(f"baseline step_days must be > 0, got {step_days}.")
    common = _common_dates(batches, modalities) if mode in ("auto", "raw") else None
    if mode == "raw" and common is None:
        raise ValueError("baseline features=raw needs the same dates in every sample; use features=interpolated.")
    if common is not None:
        return DateGrid(common, raw=True)
    grid: dict[str, np.ndarray] = {}
    for m in modalities:
        lo, hi = np.inf, -np.inf
        for batch in batches:
            valid = batch[m]["mask"].numpy().reshape(*batch[m]["mask"].shape[:2], -1).any(axis=2)
            doy = batch[m]["doy"].numpy()[valid]
            if doy.size:
                lo, hi = min(lo, float(doy.min())), max(hi, float(doy.max()))
        if not np.isfinite(lo):
            raise ValueError(f"Modality {m!r} has no valid observation in the training batches.")
        grid[m] = np.arange(lo, hi + step_days / 2, step_days)
    return DateGrid(grid, raw=False)


def _interpolate(doy: np.ndarray, x: np.ndarray, valid: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per pixel, linear interpolation of valid observations onto ``grid``.

    Args:
        doy: ``(T,)`` dates.
        x: ``(T, C, P)`` values.
        valid: ``(T, P)``.
        grid: ``(G,)``.

    Returns:
        ``(P, G, C) float32``; NaN for pixels without any valid observation.
    """
    T, C, P = x.shape
    order = np.argsort(doy, kind="stable")
    doy, x, valid = doy[order], x[order], valid[order]
    t = np.arange(T)[:, None]
    prev = np.maximum.accumulate(np.where(valid, t, -1), axis=0)  # (T, P) last valid index <= t
    nxt = np.minimum.accumulate(np.where(valid, t, T)[::-1], axis=0)[::-1]  # first valid index >= t
    pos = np.searchsorted(doy, grid, side="right") - 1  # (G,) last date <= grid point
    out = np.full((P, len(grid), C), np.nan, np.float32)
    cols = np.arange(P)
    for g, (gd, p) in enumerate(zip(grid, pos, strict=True)):
        i0 = prev[p] if p >= 0 else np.full(P, -1)
        i1 = nxt[p + 1] if p + 1 < T else np.full(P, T)
        has0, has1 = i0 >= 0, i1 < T
        i0c, i1c = np.clip(i0, 0, T - 1), np.clip(i1, 0, T - 1)
        d0, d1 = doy[i0c], doy[i1c]
        v0 = x[i0c, :, cols]  # (P, C)
        v1 = x[i1c, :, cols]
        span = np.where(d1 > d0, d1 - d0, 1.0)
        w = np.clip((gd - d0) / span, 0.0, 1.0)[:, None]
        both = (has0 & has1)[:, None]
        value = np.where(both, v0 + w * (v1 - v0), np.where(has0[:, None], v0, v1))
        out[:, g] = np.where((has0 | has1)[:, None], value, np.nan)
    return out


def pixel_features(
    batch: Batch, grid: DateGrid, ignore_index: int | None = 0, labelled_only: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of the pixels of a batch.

    Args:
        batch: A batch of :mod:`mtan_s1s2.data.batch`.
        grid: From :func:`date_grid`.
        ignore_index: Label of unlabelled pixels.
        labelled_only: Keep only labelled pixels (training, metrics); False keeps all.

    Returns:
        ``(features (N, F) float32, labels (N,) int64)``, pixels in sample, row, column order.
    """
    labels = batch["label"].numpy()  # (B, H, W)
    B = labels.shape[0]
    feats: list[np.ndarray] = []
    keep_all: list[np.ndarray] = []
    for b in range(B):
        keep = (labels[b] != ignore_index).ravel() if labelled_only and ignore_index is not None else None
        parts = []
        for m, dates in grid.doy.items():
            x = batch[m]["x"][b].numpy()  # (T, C, H, W)
            mask = batch[m]["mask"][b].numpy()
            doy = batch[m]["doy"][b].numpy().astype(np.float64)
            T, C = x.shape[:2]
            xp = x.reshape(T, C, -1)
            vp = mask.reshape(T, -1)
            if keep is not None:
                xp, vp = xp[:, :, keep], vp[:, keep]
            if grid.raw:
                n = len(dates)
                values = np.where(vp[:n, None, :], xp[:n], np.nan)  # (G, C, P)
                parts.append(np.transpose(values, (2, 0, 1)).reshape(values.shape[2], -1).astype(np.float32))
            else:
                parts.append(_interpolate(doy, xp, vp, dates).reshape(xp.shape[2], -1))
        feats.append(np.concatenate(parts, axis=1))
        keep_all.append(labels[b].ravel() if keep is None else labels[b].ravel()[keep])
    return np.concatenate(feats), np.concatenate(keep_all).astype(np.int64)


__all__ = ["DateGrid", "FeatureMode", "date_grid", "pixel_features"]
