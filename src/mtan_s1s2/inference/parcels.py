"""Parcel-level maps of a scene: pixel probabilities averaged per parcel, then painted back.

When a scene has parcel ids (``data.split.parcels``: a parcel raster or the connected
regions of the label raster), :func:`~mtan_s1s2.inference.scene.predict_scene` adds to the
pixel maps:

* ``parcel_class_map.tif``: a COG on the same grid, with the same CRS, colour table and
  class names as ``class_map.tif``, where every pixel of a parcel has the parcel's class
  (the argmax of the mean probabilities of its pixels that have a valid observation, the
  rule of :mod:`mtan_s1s2.parcel_metrics`); no-data :data:`~mtan_s1s2.export.cog.NODATA`
  outside parcels and in parcels without any valid observation;
* ``parcels.csv``: one row per parcel: ``parcel`` (its id in the parcel raster, or the
  region number), ``predicted`` / ``predicted_name``, ``confidence`` (mean probability of
  that class), ``n_pixels`` (pixels averaged) and ``proba_<class>`` (mean probability of
  each class).

Memory stays bounded by the tile: :class:`ParcelSums` keeps per parcel the sum of its
probabilities and its pixel count, tile by tile; the map is painted in a second pass over
the tiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from rasterio.windows import Window

from mtan_s1s2.data.parcels import no_parcel
from mtan_s1s2.data.scene.scene import Scene
from mtan_s1s2.export.cog import NODATA, MapWriter
from mtan_s1s2.parcel_metrics import ParcelResult

PARCEL_CLASS_MAP = "parcel_class_map.tif"
PARCELS_CSV = "parcels.csv"


class ParcelSums:
    """Per parcel, the sum of its pixels' class probabilities and their count, added tile by tile.

    Args:
        num_classes: ``K``.
        fill: The parcel raster's no-data value (no parcel), or None.
    """

    def __init__(self, num_classes: int, fill: float | None = None) -> None:
        self.num_classes = int(num_classes)
        self.fill = fill
        self._ids: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._sums: list[np.ndarray] = []

    def add(self, parcels: np.ndarray, proba: np.ndarray, valid: np.ndarray) -> None:
        """Add one tile.

        Args:
            parcels: ``(h, w)`` parcel ids (0, NaN or ``fill``: no parcel).
            proba: ``(K, h, w)`` class probabilities.
            valid: ``(h, w)`` bool, pixels with a valid observation (others are left out).
        """
        keep = valid & ~no_parcel(parcels, self.fill)
        if not keep.any():
            return
        ids, inverse = np.unique(parcels[keep], return_inverse=True)
        inverse = inverse.reshape(-1)
        p = proba[:, keep].astype(np.float64)  # (K, n)
        self._ids.append(ids)
        self._counts.append(np.bincount(inverse, minlength=len(ids)))
        self._sums.append(np.stack([np.bincount(inverse, weights=p[k], minlength=len(ids)) for k in range(len(p))], 1))

    def result(self) -> ParcelResult:
        """The parcels seen so far (ids ascending), without reference classes."""
        K = self.num_classes
        if not self._ids:
            empty = np.zeros(0)
            return ParcelResult(empty, np.zeros(0, np.int64), np.zeros((0, K)), np.zeros(0, np.int64), empty,
                                np.zeros(0, np.int64), empty)  # fmt: skip
        ids, inverse = np.unique(np.concatenate(self._ids), return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse, weights=np.concatenate(self._counts), minlength=len(ids)).astype(np.int64)
        sums = np.concatenate(self._sums)
        total = np.stack([np.bincount(inverse, weights=sums[:, k], minlength=len(ids)) for k in range(K)], 1)
        mean = total / np.maximum(counts, 1)[:, None]
        predicted = mean.argmax(axis=1).astype(np.int64)
        P = len(ids)
        return ParcelResult(
            ids, counts, mean, predicted, mean[np.arange(P), predicted], np.full(P, -1, np.int64), np.full(P, np.nan)
        )


def parcel_classes(parcels: np.ndarray, result: ParcelResult) -> np.ndarray:
    """``(h, w) uint8``: the class of each pixel's parcel; :data:`NODATA` where there is none."""
    out = np.full(parcels.shape, NODATA, np.uint8)
    if len(result) == 0:
        return out
    pos = np.clip(np.searchsorted(result.parcel, parcels), 0, len(result) - 1)
    found = result.parcel[pos] == parcels
    out[found] = result.predicted[pos[found]].astype(np.uint8)
    return out


def write_parcel_outputs(
    scene: Scene,
    result: ParcelResult,
    out_dir: Path,
    class_names: Sequence[str],
    ignore_index: int | None,
    windows: Sequence[Window],
) -> dict[str, str]:
    """Write ``parcel_class_map.tif`` (painted tile by tile) and ``parcels.csv`` (see the module docstring).

    Returns:
        Name -> path of the files (``parcel_class_map``, ``parcels``).
    """
    writer = MapWriter(
        out_dir, scene.grid, class_names, ignore_index, class_map=PARCEL_CLASS_MAP,
        nodata_means="no parcel, or no valid observation in the parcel",
    )  # fmt: skip
    try:
        for w in windows:
            ids = scene.read_parcels(w)
            assert ids is not None  # the caller checked scene.parcels
            writer.write(w, parcel_classes(ids, result))
    except BaseException:
        writer.abort()
        raise
    files = writer.close()
    names = np.asarray(class_names, dtype=object)
    frame = pd.DataFrame({
        "parcel": result.parcel,
        "predicted": result.predicted,
        "predicted_name": names[result.predicted] if len(result) else np.zeros(0, object),
        "confidence": result.confidence.astype(np.float32),
        "n_pixels": result.n_pixels,
    })  # fmt: skip
    for k, name in enumerate(class_names):
        if k != ignore_index:
            frame[f"proba_{name}"] = result.proba[:, k].astype(np.float32)
    path = out_dir / PARCELS_CSV
    frame.to_csv(path, index=False)
    return {"parcel_class_map": files["parcel_class_map"], "parcels": str(path)}


__all__ = ["PARCELS_CSV", "PARCEL_CLASS_MAP", "ParcelSums", "parcel_classes", "write_parcel_outputs"]
