"""Assemble a :class:`~mtan_s1s2.data.scene.scene.Scene` from the GeoTIFFs of one scene folder.

Configuration (``configs/data/geotiff.yaml``), per modality either layout::

    sources:
      s2:                                   # a date-major stack and its dates file
        stack: S2_stack.tif
        dates: S2_dates.txt
        bands: [B02, B03, B04, B08]
        mask: S2_masks.tif                  # optional: one band per date
        mask_values: {valid: [0], invalid: [1]}
      s1_asc:                               # one file per date, the date in the name
        files: "S1_*.tif"
        date_pattern: null                  # default: 20180924, 2018-09-24, 20180924T105416
        bands: [VV, VH]
        mask: null                          # optional: a glob of per-date masks
    labels: {file: label.tif, band: 1}      # file null: no labels (prediction)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.dates import read_dates_file
from mtan_s1s2.data.geotiff.reader import GeoTiffFilesSeries, GeoTiffLayer, GeoTiffStackSeries, open_raster
from mtan_s1s2.data.quality import MASK_RULE, QualityRule
from mtan_s1s2.data.radiometry import file_radiometry
from mtan_s1s2.data.scene.folders import (
    FolderReader,
    SceneSources,
    find_files,
    one_file,
    open_scene_folder,
)
from mtan_s1s2.data.scene.scene import ModalitySeries, Scene

log = logging.getLogger(__name__)


def declared_nodata(paths: Sequence[Path]) -> list[float]:
    """The finite nodata values the GeoTIFFs' tags declare (every band of every file), sorted."""
    values: set[float] = set()
    for p in paths:
        with open_raster(p) as src:
            values |= {float(v) for v in src.nodatavals if v is not None and np.isfinite(v)}
    return sorted(values)


def _declared(modality: str, paths: Sequence[Path]) -> dict[str, Any]:
    nodata = declared_nodata(paths)
    if nodata:
        log.info("%s: the GeoTIFF nodata tag(s) %s of %s mean no data.", modality, nodata, paths[0].resolve())
    return {"nodata": nodata} if nodata else {}


class GeoTiffFolder(FolderReader):
    """The GeoTIFFs of one scene folder (headers only: no pixel is read)."""

    source_keys = ("stack", "dates", "files", "date_pattern", "bands", "mask", "mask_values")
    layer_keys = ("file", "band")
    file_keys = ("stack", "dates", "files")
    declared_note = "a GeoTIFF's own nodata tag is always honoured"

    def open_series(
        self, modality: str, spec: Mapping[str, Any], key: str, radiometry: Mapping[str, Any] | None
    ) -> ModalitySeries:
        """One modality's series from its ``data.sources`` entry (stack or per-date files).

        The files' own nodata tags are no data (:func:`declared_nodata`), with the values of
        ``radiometry`` (``data.radiometry.<modality>``) on top.

        Raises:
            ValueError: On a missing or ambiguous layout, a band count that is not dates x
                bands, per-date files without dates in their names, masks that do not match.
        """
        folder = self.folder
        bands = [str(b) for b in spec.get("bands") or []]
        if not bands:
            raise ValueError(f"{key}.bands is empty: name the bands of each date, in file order (e.g. [VV, VH]).")
        rule = QualityRule.from_config(spec.get("mask_values"), default=MASK_RULE, name=f"{modality} mask")
        if bool(spec.get("stack")) == bool(spec.get("files")):
            raise ValueError(
                f"{key} needs either stack (+ dates: a date-major multi-band GeoTIFF and its dates file) or files (a "
                f"glob of one GeoTIFF per date, the date in the name), got {dict(spec)}."
            )
        if spec.get("stack"):
            if not spec.get("dates"):
                raise ValueError(f"{key}.stack needs {key}.dates: a text file with one acquisition date per line.")
            stack = one_file(folder, str(spec["stack"]), f"{key}.stack")
            dates_path = one_file(folder, str(spec["dates"]), f"{key}.dates")
            mask = one_file(folder, str(spec["mask"]), f"{key}.mask") if spec.get("mask") else None
            declared = _declared(modality, [stack])
            series: ModalitySeries = GeoTiffStackSeries(
                modality, bands, stack, read_dates_file(dates_path), file_radiometry(modality, declared, radiometry),
                mask, rule, str(dates_path.resolve()),
            )  # fmt: skip
        else:
            paths = find_files(folder, str(spec["files"]), f"{key}.files")
            masks = find_files(folder, str(spec["mask"]), f"{key}.mask") if spec.get("mask") else None
            if masks:
                paths = [p for p in paths if p not in masks]  # a broad files glob may catch the masks
            declared = _declared(modality, paths)
            series = GeoTiffFilesSeries(
                modality, bands, paths, file_radiometry(modality, declared, radiometry), spec.get("date_pattern"),
                masks, rule,
            )  # fmt: skip
        series.declared = declared
        return series

    def open_layer(self, spec: Mapping[str, Any], key: str) -> GeoTiffLayer:
        """Band ``band`` (default 1) of one GeoTIFF.

        Raises:
            ValueError: Without file, or on a pattern matching no file or several.
        """
        if not spec.get("file"):
            raise ValueError(f"{key} needs file (a GeoTIFF in the scene folder), got {dict(spec)}.")
        return GeoTiffLayer(one_file(self.folder, str(spec["file"]), f"{key}.file"), int(spec.get("band") or 1))


def open_scene(
    folder: str | Path,
    modalities: Sequence[str],
    sources: Mapping[str, Mapping[str, Any]],
    reference_date: Any,
    label: Mapping[str, Any] | None = None,
    parcels: Mapping[str, Any] | None = None,
    radiometry: Mapping[str, Any] | None = None,
    resolution: float | None = None,
    snap: bool = False,
) -> Scene:
    """Open the GeoTIFFs of one scene folder (headers only: no pixel is read).

    Args:
        folder: The scene folder; file names and globs are relative to it.
        modalities: Modalities to read (keys of ``sources``), in order.
        sources: Per modality, its layout (see the module docstring).
        reference_date: Day 0 of ``doy`` (a date; GeoTIFFs carry no season attribute).
        label: ``{file, band}`` of the label codes, or None.
        parcels: ``{file, band}`` of parcel ids, or None.
        radiometry: ``data.radiometry`` per modality (defaults:
            :func:`~mtan_s1s2.data.radiometry.default_radiometry`).
        resolution: Pixel size of the scene grid (None: the finest raster's).
        snap: Read rasters off the scene grid by more than a quarter pixel, snapped
            (``data.grid.snap``), instead of refusing them.

    Raises:
        ValueError: On missing files, bad layouts (see :meth:`GeoTiffFolder.open_series`),
            rasters that do not share a CRS or do not overlap, or non-georeferenced
            rasters of different shapes.
    """
    spec = SceneSources(
        tuple(modalities), sources, reference_date, label, parcels, dict(radiometry or {}), resolution, snap
    )
    scene = open_scene_folder(GeoTiffFolder(Path(folder)), spec)
    return warn_if_not_georeferenced(scene)


def warn_if_not_georeferenced(scene: Scene) -> Scene:
    """Warn (and log) that a scene without CRS is aligned by row and column; returns it."""
    if not scene.grid.georeferenced:
        message = (
            f"Scene {scene.name} ({scene.root}) is not georeferenced (no CRS, identity transform): its rasters "
            "are aligned by row and column, spatial blocks are counted in pixels, and maps predicted from it have no "
            "CRS (identity transform)."
        )
        warnings.warn(message, UserWarning, stacklevel=3)
        log.warning(message)
    return scene


__all__ = ["GeoTiffFolder", "declared_nodata", "open_scene", "warn_if_not_georeferenced"]
