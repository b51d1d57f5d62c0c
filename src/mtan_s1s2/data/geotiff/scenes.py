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
    label: {file: label.tif, band: 1}       # null: no labels (prediction)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.dates import read_dates_file, resolve_reference_date
from mtan_s1s2.data.geotiff.reader import GeoTiffFilesSeries, GeoTiffLayer, GeoTiffStackSeries, open_raster
from mtan_s1s2.data.quality import MASK_RULE, QualityRule
from mtan_s1s2.data.radiometry import RADIOMETRY_KEYS, file_radiometry
from mtan_s1s2.data.scene.scene import ModalitySeries, Scene, find_files

log = logging.getLogger(__name__)

SOURCE_KEYS = ("stack", "dates", "files", "date_pattern", "bands", "mask", "mask_values")
LAYER_KEYS = ("file", "band")


def _check_keys(cfg: Mapping[str, Any], allowed: Sequence[str], key: str) -> None:
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        hint = ""
        if set(unknown) & set(RADIOMETRY_KEYS):
            modality = key.rsplit(".", 1)[-1]
            hint = (
                f" No-data values, scale and units are radiometry: data.radiometry.{modality}.nodata=[...] (a "
                "GeoTIFF's own nodata tag is always honoured)."
            )
        raise ValueError(f"{key} has unknown key(s) {unknown}; valid keys are {list(allowed)}.{hint}")


def declared_nodata(paths: Sequence[Path]) -> list[float]:
    """The finite nodata values the GeoTIFFs' tags declare (every band of every file), sorted."""
    values: set[float] = set()
    for p in paths:
        with open_raster(p) as src:
            values |= {float(v) for v in src.nodatavals if v is not None and np.isfinite(v)}
    return sorted(values)


def _one_file(folder: Path, pattern: str, key: str) -> Path:
    paths = find_files(folder, pattern, key)
    if len(paths) > 1:
        raise ValueError(f"{key}={pattern!r} matches {len(paths)} files in {folder.resolve()}; match one.")
    return paths[0]


def _layer(folder: Path, spec: Mapping[str, Any] | None, key: str) -> GeoTiffLayer | None:
    if not spec:
        return None
    _check_keys(spec, LAYER_KEYS, key)
    if not spec.get("file"):
        raise ValueError(f"{key} needs file (a GeoTIFF in the scene folder), got {dict(spec)}.")
    return GeoTiffLayer(_one_file(folder, str(spec["file"]), f"{key}.file"), int(spec.get("band") or 1))


def open_series(
    folder: Path, modality: str, spec: Mapping[str, Any], radiometry: Mapping[str, Any] | None = None
) -> ModalitySeries:
    """One modality's series from its ``data.sources`` entry (stack or per-date files).

    The files' own nodata tags are no data (:func:`declared_nodata`), with the values of
    ``radiometry`` (``data.radiometry.<modality>``) on top.

    Raises:
        ValueError: On a missing or ambiguous layout, a band count that is not dates x
            bands, per-date files without dates in their names, masks that do not match.
    """
    key = f"data.sources.{modality}"
    _check_keys(spec, SOURCE_KEYS, key)
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
        stack = _one_file(folder, str(spec["stack"]), f"{key}.stack")
        dates_path = _one_file(folder, str(spec["dates"]), f"{key}.dates")
        mask = _one_file(folder, str(spec["mask"]), f"{key}.mask") if spec.get("mask") else None
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


def _declared(modality: str, paths: Sequence[Path]) -> dict[str, Any]:
    nodata = declared_nodata(paths)
    if nodata:
        log.info("%s: the GeoTIFF nodata tag(s) %s of %s mean no data.", modality, nodata, paths[0].resolve())
    return {"nodata": nodata} if nodata else {}


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
        ValueError: On missing files, bad layouts (see :func:`open_series`), rasters that
            do not share a CRS or do not overlap, or non-georeferenced rasters of
            different shapes.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"Scene folder not found: {folder.resolve()}; set data.root / data.scenes.")
    radiometry = dict(radiometry or {})
    series: dict[str, ModalitySeries] = {}
    for m in modalities:
        if m not in sources:
            raise ValueError(
                f"data.modalities has {m!r} but data.sources has no entry for it (it has {sorted(sources)})."
            )
        series[m] = open_series(folder, m, dict(sources[m]), radiometry.get(m))
    scene = Scene(
        name=folder.name, series=series, reference_date=resolve_reference_date(reference_date, {}, folder.name),
        label=_layer(folder, label, "data.label"), parcels=_layer(folder, parcels, "data.split.parcels"),
        resolution=resolution, snap=snap, root=folder.resolve(),
    )  # fmt: skip
    if not scene.grid.georeferenced:
        message = (
            f"Scene {scene.name} ({folder.resolve()}) is not georeferenced (no CRS, identity transform): its rasters "
            "are aligned by row and column, spatial blocks are counted in pixels, and maps predicted from it have no "
            "CRS (identity transform)."
        )
        warnings.warn(message, UserWarning, stacklevel=2)
        log.warning(message)
    return scene


__all__ = ["open_scene", "open_series"]
