"""Write prediction maps tile by tile, then as Cloud-Optimised GeoTIFFs.

GDAL's ``COG`` driver writes a whole file at once (it is a create-copy driver), so a scene
of any size is first written window by window into a tiled, compressed GeoTIFF (memory
bounded: one tile at a time) and then copied to a COG (``rasterio.shutil.copy``, which
reads the source block by block and builds the overviews). Outputs, all with the CRS and
transform of the input grid (none for a non-georeferenced input: identity transform):

* ``class_map.tif``: ``uint8`` class index (index = ``class_names``), no-data
  :data:`NODATA` where no modality has a valid observation, a colour table, the class
  names as band tags (``CLASS_<i>``) and as GDAL categories (``.aux.xml``), a QGIS style
  (``.qml``); overviews by nearest neighbour;
* ``probabilities.tif`` (optional): one ``uint8`` band per predicted class, the softmax
  probability in percent (0-100), band descriptions = class names, no-data 255;
* ``confidence.tif`` (optional): the maximum probability, percent, no-data 255.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import rasterio.shutil
from rasterio.errors import NotGeoreferencedWarning
from rasterio.windows import Window

from mtan_s1s2.data.scene.grid import Grid
from mtan_s1s2.export.legend import write_aux_xml, write_legend_csv, write_qml
from mtan_s1s2.export.palette import colormap

log = logging.getLogger(__name__)

NODATA = 255
"""No-data value of every map (no valid observation in any modality)."""
CLASS_MAP, PROBABILITIES, CONFIDENCE = "class_map.tif", "probabilities.tif", "confidence.tif"
BLOCK = 256
"""Internal tile size of the GeoTIFFs and COGs (pixels)."""


def _profile(grid: Grid, count: int) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "dtype": "uint8",
        "count": count,
        "height": grid.height,
        "width": grid.width,
        "nodata": NODATA,
        "tiled": True,
        "blockxsize": BLOCK,
        "blockysize": BLOCK,
        "compress": "deflate",
        "transform": grid.transform,
    }
    if grid.crs is not None:
        profile["crs"] = grid.crs
    return profile


def to_percent(p: np.ndarray) -> np.ndarray:
    """Probabilities in ``[0, 1]`` as ``uint8`` percent (rounded)."""
    return np.clip(np.rint(np.asarray(p, np.float64) * 100.0), 0, 100).astype(np.uint8)


class MapWriter:
    """Writes the maps of one scene window by window; :meth:`close` makes them COGs.

    Args:
        out_dir: Folder of the outputs (created).
        grid: The scene grid (CRS, transform, shape of every map).
        class_names: Class names, index = class.
        ignore_index: The unlabelled class, never predicted (no probability band).
        probabilities: Also write ``probabilities.tif``.
        confidence: Also write ``confidence.tif``.
        class_map: File name of the class map (``parcel_class_map.tif`` for the parcel map).
        nodata_means: What the no-data value means (the class map's ``NODATA_MEANS`` tag).

    Raises:
        ValueError: If there are more than 255 classes (the maps are ``uint8``).
    """

    def __init__(
        self,
        out_dir: str | Path,
        grid: Grid,
        class_names: Sequence[str],
        ignore_index: int | None = 0,
        probabilities: bool = False,
        confidence: bool = False,
        class_map: str = CLASS_MAP,
        nodata_means: str = "no valid observation",
    ) -> None:
        if len(class_names) > NODATA:
            raise ValueError(f"{len(class_names)} classes do not fit a uint8 map with no-data {NODATA}.")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.grid = grid
        self.class_names = list(class_names)
        self.ignore_index = ignore_index
        self.class_map = str(class_map)
        self.nodata_means = str(nodata_means)
        self.predicted = [i for i in range(len(class_names)) if i != ignore_index]
        self.counts = np.zeros(len(class_names), np.int64)
        self.n_nodata = 0
        self._dst: dict[str, Any] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            self._dst[self.class_map] = rasterio.open(self._tmp(self.class_map), "w", **_profile(grid, 1))
            # The colour table sets the TIFF PhotometricInterpretation tag, which libtiff lets
            # GDAL write only before the first pixel (later, it prints "Cannot modify tag").
            self._dst[self.class_map].write_colormap(1, colormap(self.class_names, ignore_index, NODATA))
            if probabilities:
                self._dst[PROBABILITIES] = rasterio.open(
                    self._tmp(PROBABILITIES), "w", **_profile(grid, len(self.predicted))
                )
            if confidence:
                self._dst[CONFIDENCE] = rasterio.open(self._tmp(CONFIDENCE), "w", **_profile(grid, 1))

    def _tmp(self, name: str) -> Path:
        return self.out_dir / f".{name}.partial.tif"

    def write(self, window: Window, classes: np.ndarray, proba: np.ndarray | None = None) -> None:
        """Write one window.

        Args:
            window: Window of the scene grid.
            classes: ``(h, w) uint8`` class indices, :data:`NODATA` where nothing is valid.
            proba: ``(K, h, w)`` float probabilities over all classes (needed for the
                probability and confidence maps); ignored where ``classes`` is no-data.
        """
        nodata = classes == NODATA
        self.n_nodata += int(nodata.sum())
        self.counts += np.bincount(classes[~nodata].ravel(), minlength=len(self.class_names))[: len(self.class_names)]
        self._dst[self.class_map].write(classes[None].astype(np.uint8), window=window)
        if proba is None:
            return
        if PROBABILITIES in self._dst:
            pct = to_percent(proba[self.predicted])
            pct[:, nodata] = NODATA
            self._dst[PROBABILITIES].write(pct, window=window)
        if CONFIDENCE in self._dst:
            conf = to_percent(proba[self.predicted].max(axis=0))
            conf[nodata] = NODATA
            self._dst[CONFIDENCE].write(conf[None], window=window)

    def close(self) -> dict[str, str]:
        """Finish the maps: colour table and names, COG conversion, legend files.

        Returns:
            Name -> path of every file written.
        """
        dst = self._dst[self.class_map]
        dst.update_tags(1, **{f"CLASS_{i}": n for i, n in enumerate(self.class_names)}, NODATA_MEANS=self.nodata_means)
        dst.set_band_description(1, "class")
        if PROBABILITIES in self._dst:
            for b, i in enumerate(self.predicted, start=1):
                self._dst[PROBABILITIES].set_band_description(b, self.class_names[i])
            self._dst[PROBABILITIES].update_tags(UNITS="percent")
        if CONFIDENCE in self._dst:
            self._dst[CONFIDENCE].set_band_description(1, "max probability")
            self._dst[CONFIDENCE].update_tags(UNITS="percent")
        out: dict[str, str] = {}
        for name, d in self._dst.items():
            d.close()
            final = self.out_dir / name
            resampling = "NEAREST" if name == self.class_map else "AVERAGE"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                rasterio.shutil.copy(
                    self._tmp(name), final, driver="COG", compress="DEFLATE", blocksize=BLOCK,
                    overview_resampling=resampling,
                )  # fmt: skip
            rasterio.shutil.delete(self._tmp(name))
            out[name.removesuffix(".tif")] = str(final)
        self._dst = {}
        cmap = self.out_dir / self.class_map
        write_aux_xml(cmap, self.class_names, NODATA)
        out["qml"] = str(write_qml(cmap, self.class_names, self.ignore_index))
        out["legend"] = str(write_legend_csv(self.out_dir / "legend.csv", self.class_names, self.ignore_index, NODATA))
        return out

    def abort(self) -> None:
        """Close and delete the partial files (after an error)."""
        for name, d in self._dst.items():
            d.close()
            self._tmp(name).unlink(missing_ok=True)
        self._dst = {}


def write_map(
    path: str | Path, classes: np.ndarray, grid: Grid, class_names: Sequence[str], ignore_index: int | None = 0
) -> Path:
    """Write a whole small class map (a PASTIS patch) as a COG with its colour table and names.

    Args:
        path: Output ``.tif``.
        classes: ``(H, W)`` class indices (``NODATA`` = no data).
        grid: Where the map lies.
        class_names: Class names, index = class.
        ignore_index: The unlabelled class.

    Returns:
        ``path``.
    """
    path = Path(path)
    writer = MapWriter(path.parent / f".{path.stem}", grid, class_names, ignore_index)
    writer.write(grid.full_window(), classes.astype(np.uint8))
    files = writer.close()
    Path(files["class_map"]).replace(path)
    aux = Path(files["class_map"] + ".aux.xml")
    aux.replace(path.with_name(path.name + ".aux.xml"))
    Path(files["qml"]).replace(path.with_suffix(".qml"))
    Path(files["legend"]).unlink()
    writer.out_dir.rmdir()
    return path


__all__ = ["CLASS_MAP", "CONFIDENCE", "NODATA", "PROBABILITIES", "MapWriter", "to_percent", "write_map"]
