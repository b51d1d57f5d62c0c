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

The features of all modalities are concatenated, in the datamodule's modality order. With
``spatial_context=k`` (``flat`` layout, rasters) each pixel also gets the mean of those
features over the ``k x k`` pixels around it that hold data (:func:`neighbourhood_means`):
the spatial context that ``model.net.spatial_context`` gives the mTAN.

Two layouts (``layout``):

* ``flat`` (RandomForest, LightGBM): per modality, date-major (``G x C``: every channel of
  the first date, then of the next), modalities one after the other; invalid observations
  stay NaN for the trees.
* ``series`` (MiniRocket, MultiRocket-Hydra): every modality on one shared date grid
  (``date_grid(shared=True)``), laid out channel-major, so each row reshapes to a
  multivariate series ``(C_all, G)`` (:func:`as_series`). Invalid observations are filled
  by the linear interpolation in time of the pixel's valid ones at the grid dates (also in
  ``raw`` mode, where the grid is the samples' own dates), and a pixel without any valid
  observation of a modality gets 0 there (the training mean once normalised).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from mtan_s1s2.data.batch import Batch
from mtan_s1s2.data.date_grid import interpolate_to_grid, regular_dates
from mtan_s1s2.models.layers.spatial import check_neighbourhood_side

FeatureMode = Literal["auto", "raw", "interpolated"]
Layout = Literal["flat", "series"]


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
    batches: Iterable[Batch],
    modalities: Sequence[str],
    mode: FeatureMode = "auto",
    step_days: float = 10.0,
    shared: bool = False,
) -> DateGrid:
    """The date grid of the training batches (see the module docstring).

    Args:
        batches: Training batches (:mod:`mtan_s1s2.data.batch`); re-iterable (a list or a
            ``DataLoader``), read up to twice.
        modalities: Modalities to use.
        mode: ``raw`` (requires common dates), ``interpolated``, or ``auto`` (raw when the
            dates are common to all samples).
        step_days: Grid step of ``interpolated``, days.
        shared: One grid for every modality (the ``series`` layout): the common dates when
            every modality has the same ones, else one regular grid over the dates of all
            modalities.

    Raises:
        ValueError: If ``mode`` is ``raw`` but the samples have different dates (or, with
            ``shared``, the modalities have different dates), or ``step_days`` is not
            positive.
    """
    if step_days <= 0:
        raise ValueError(f"baseline step_days must be > 0, got {step_days}.")
    common = _common_dates(batches, modalities) if mode in ("auto", "raw") else None
    if common is not None and shared and len(modalities) > 1:
        first = common[modalities[0]]
        if not all(common[m].shape == first.shape and np.allclose(common[m], first) for m in modalities):
            common = None
    if mode == "raw" and common is None:
        raise ValueError(
            "baseline features=raw needs the same dates in every sample"
            + (" and every modality (one series of all channels)" if shared and len(modalities) > 1 else "")
            + "; use model.features=interpolated."
        )
    if common is not None:
        return DateGrid(common, raw=True)
    grid = {m: _date_span(batches, m) for m in modalities}
    if shared:
        lo, hi = min(g[0] for g in grid.values()), max(g[1] for g in grid.values())
        grid = {m: (lo, hi) for m in modalities}
    return DateGrid({m: regular_dates(lo, hi, step_days).numpy() for m, (lo, hi) in grid.items()}, raw=False)


def _date_span(batches: Iterable[Batch], m: str) -> tuple[float, float]:
    """First and last date with a valid observation of modality ``m`` in the batches."""
    lo, hi = np.inf, -np.inf
    for batch in batches:
        valid = batch[m]["mask"].flatten(2).any(dim=2).numpy()  # (B, T): T = 0 where a scene lacks the modality
        doy = batch[m]["doy"].numpy()[valid]
        if doy.size:
            lo, hi = min(lo, float(doy.min())), max(hi, float(doy.max()))
    if not np.isfinite(lo):
        raise ValueError(f"Modality {m!r} has no valid observation in the training batches.")
    return lo, hi


def _interpolate(doy: np.ndarray, x: np.ndarray, valid: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per pixel, linear interpolation of valid observations onto ``grid``.

    The gap filling of :func:`~mtan_s1s2.data.date_grid.interpolate_to_grid`.

    Args:
        doy: ``(T,)`` dates.
        x: ``(T, C, P)`` values.
        valid: ``(T, P)``.
        grid: ``(G,)``.

    Returns:
        ``(P, G, C) float32``; NaN for pixels without any valid observation.
    """
    values, has_data, _ = interpolate_to_grid(
        torch.from_numpy(np.ascontiguousarray(x, np.float32))[None],
        torch.from_numpy(np.asarray(doy, np.float64))[None],
        torch.from_numpy(np.asarray(valid, bool))[None],
        torch.from_numpy(np.asarray(grid, np.float64)),
    )
    out = values[0].permute(2, 0, 1).numpy()  # (P, G, C)
    filled: np.ndarray = np.where(has_data[0].T.numpy()[:, :, None], out, np.nan).astype(np.float32)
    return filled


def _modality_features(
    m: str, dates: np.ndarray, x: np.ndarray, mask: np.ndarray, doy: np.ndarray, raw: bool, layout: Layout
) -> np.ndarray:
    """``(P, G x C)`` features of the pixels of one sample and modality (see the module docstring).

    Args:
        m: Modality (for error messages).
        dates: ``(G,)`` grid dates.
        x: ``(T, C, P)`` values.
        mask: ``(T, P)`` valid observations.
        doy: ``(T,)`` the sample's dates.
        raw: The grid is the samples' own dates.
        layout: ``flat`` (date-major, NaN = invalid) or ``series`` (channel-major, filled).

    Raises:
        ValueError: In ``raw`` mode, if the sample's dates are not the grid's.
    """
    if raw:
        n = len(dates)
        if len(doy) < n or not np.allclose(doy[:n], dates):
            raise ValueError(
                f"The baseline was fitted on the {m} values at the training samples' own {n} dates (model.features "
                f"raw or auto), but these data have other {m} dates ({len(doy)}, first {doy[:3].tolist()}); predict "
                "data with the training dates, or fit with model.features=interpolated."
            )
        if layout == "flat":
            values = np.where(mask[:n, None, :], x[:n], np.nan)  # (G, C, P)
            return np.transpose(values, (2, 0, 1)).reshape(values.shape[2], -1).astype(np.float32)
        series = _interpolate(doy[:n], x[:n], mask[:n], dates)  # (P, G, C): gaps filled in time
    else:
        series = _interpolate(doy, x, mask, dates)
        if layout == "flat":
            flat: np.ndarray = series.reshape(series.shape[0], -1)
            return flat
    filled: np.ndarray = np.nan_to_num(np.transpose(series, (0, 2, 1)), nan=0.0).reshape(series.shape[0], -1)
    return filled


def check_spatial_context(k: int) -> int:
    """``k`` when it is 1 (per pixel) or an odd neighbourhood side >= 3 px (a baseline's ``model.spatial_context``).

    Raises:
        ValueError: Otherwise, naming ``model.spatial_context``.
    """
    return check_neighbourhood_side(k, "model.spatial_context")


def neighbourhood_means(values: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Per pixel and feature, the mean over the ``k x k`` pixels around it that hold data.

    The raster counterpart of :class:`~mtan_s1s2.models.layers.spatial.NeighbourhoodMean`
    for feature baselines: pixels without data and pixels outside the window are left out,
    and so is a NaN feature (a missing observation) of a pixel with data; where no
    neighbour has the feature, the pixel keeps its own value (NaN stays NaN).

    Args:
        values: ``(H, W, F)`` float features (NaN = missing).
        valid: ``(H, W)`` bool, True where the pixel holds data.
        k: Neighbourhood side, pixels (odd, >= 3).

    Returns:
        ``(H, W, F)`` float32.

    Raises:
        ValueError: If ``k`` is even or below 3.
    """
    if check_spatial_context(k) == 1:
        raise ValueError("neighbourhood_means needs a neighbourhood side k >= 3 px, got 1.")
    H, W, _ = values.shape
    pad = k // 2
    masked = np.where(valid[..., None], values, np.nan)
    padded = np.pad(masked, ((pad, pad), (pad, pad), (0, 0)), constant_values=np.nan)
    total = np.zeros(values.shape, np.float64)
    count = np.zeros(values.shape, np.int64)
    for dy in range(k):
        for dx in range(k):
            window = padded[dy : dy + H, dx : dx + W]
            seen = ~np.isnan(window)
            total += np.where(seen, window, 0.0)
            count += seen
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), values)
    return mean.astype(np.float32)


def sample_features(
    modalities: Mapping[str, Mapping[str, Any]],
    b: int,
    grid: DateGrid,
    layout: Layout = "flat",
    spatial_context: int = 1,
) -> np.ndarray:
    """``(H x W, F) float32`` features of every pixel of sample ``b`` of a batch, in row, column order.

    Args:
        modalities: ``{modality: {"x": (B, T, C, H, W), "doy": (B, T), "mask": (B, T, H, W)}}``
            tensors or arrays (a batch of :mod:`mtan_s1s2.data.batch`, with or without labels).
        b: Sample index.
        grid: From :func:`date_grid` (its modalities are read).
        layout: ``flat`` or ``series`` (see the module docstring).
        spatial_context: Neighbourhood side ``k``: each pixel's features are followed by
            their :func:`neighbourhood_means` (twice the features, ``flat`` layout only);
            1 = per pixel.

    Raises:
        ValueError: If a modality of the grid is missing, or (``raw`` grid) the dates are
            not the training dates, or ``spatial_context`` is set with the ``series`` layout.
    """
    if spatial_context != 1 and layout != "flat":
        raise ValueError(f"model.spatial_context needs the flat feature layout, not {layout!r}.")
    parts = []
    for m, dates in grid.doy.items():
        if m not in modalities:
            raise ValueError(f"The baseline was fitted on modalities {list(grid.doy)}; these data have no {m!r}.")
        x = np.asarray(modalities[m]["x"][b], np.float32)  # (T, C, H, W)
        mask = np.asarray(modalities[m]["mask"][b], bool)
        doy = np.asarray(modalities[m]["doy"][b], np.float64)
        T, C, H, W = x.shape  # T = 0 where the scene lacks an optional modality
        parts.append(
            _modality_features(
                m, np.asarray(dates), x.reshape(T, C, H * W), mask.reshape(T, H * W), doy, grid.raw, layout
            )
        )
    if layout == "flat":
        flat: np.ndarray = np.concatenate(parts, axis=1)
        if spatial_context == 1:
            return flat
        valid = np.any([np.asarray(modalities[m]["mask"][b], bool).any(axis=0) for m in grid.doy], axis=0)  # (H, W)
        H, W = valid.shape
        means = neighbourhood_means(flat.reshape(H, W, -1), valid, int(spatial_context)).reshape(H * W, -1)
        with_means: np.ndarray = np.concatenate([flat, means], axis=1)
        return with_means
    n_dates = len(next(iter(grid.doy.values())))
    pixels = parts[0].shape[0]
    series: np.ndarray = np.concatenate([p.reshape(pixels, -1, n_dates) for p in parts], axis=1)
    return series.reshape(pixels, -1)


def pixel_features(
    batch: Batch,
    grid: DateGrid,
    ignore_index: int | None = 0,
    labelled_only: bool = True,
    layout: Layout = "flat",
    spatial_context: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of the pixels of a batch.

    Args:
        batch: A batch of :mod:`mtan_s1s2.data.batch`.
        grid: From :func:`date_grid`.
        ignore_index: Label of unlabelled pixels.
        labelled_only: Keep only labelled pixels (training, metrics); False keeps all.
        layout: ``flat`` or ``series`` (see the module docstring).
        spatial_context: As :func:`sample_features`.

    Returns:
        ``(features (N, F) float32, labels (N,) int64)``, pixels in sample, row, column order.

    Raises:
        ValueError: As :func:`sample_features`.
    """
    labels = batch["label"].numpy()  # (B, H, W)
    feats: list[np.ndarray] = []
    keep_all: list[np.ndarray] = []
    modalities = {m: {k: batch[m][k].numpy() for k in ("x", "doy", "mask")} for m in grid.doy if m in batch}
    for b in range(labels.shape[0]):
        values = sample_features(modalities, b, grid, layout, spatial_context)
        flat = labels[b].ravel()
        if labelled_only and ignore_index is not None:
            keep = flat != ignore_index
            values, flat = values[keep], flat[keep]
        feats.append(values)
        keep_all.append(flat)
    return np.concatenate(feats), np.concatenate(keep_all).astype(np.int64)


def as_series(features: np.ndarray, grid: DateGrid) -> np.ndarray:
    """``(N, C_all, G) float32`` multivariate series of ``series``-layout features (for aeon).

    Raises:
        ValueError: If the grid's modalities do not share one date grid, or the feature
            count is not a multiple of its date count.
    """
    lengths = {len(d) for d in grid.doy.values()}
    if len(lengths) != 1:
        raise ValueError(f"A series needs one date grid for every modality; got {sorted(lengths)} dates.")
    (n_dates,) = lengths
    if features.ndim != 2 or features.shape[1] % n_dates:
        raise ValueError(f"Features of shape {features.shape} are not (N, channels x {n_dates} dates).")
    return np.ascontiguousarray(features.reshape(features.shape[0], -1, n_dates), dtype=np.float32)


__all__ = ["DateGrid", "FeatureMode", "Layout", "as_series", "date_grid", "pixel_features", "sample_features"]
