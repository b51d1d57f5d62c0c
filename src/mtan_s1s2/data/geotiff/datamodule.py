"""``data=geotiff``: scenes of GeoTIFFs (date-major stacks or one file per date), read with rasterio.

One folder per scene under ``root`` (or the folders listed in ``scenes``); per modality a
layout of :mod:`mtan_s1s2.data.geotiff.scenes`; labels from a raster band (``labels.file``
+ ``labels.band``) mapped to classes by ``labels.classes``; samples and splits from
:mod:`mtan_s1s2.data.scene`. See ``configs/data/geotiff.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mtan_s1s2.data.geotiff.scenes import GeoTiffFolder, warn_if_not_georeferenced
from mtan_s1s2.data.scene.datamodule import SceneDataModule
from mtan_s1s2.data.scene.folders import SceneSources, open_scene_folder
from mtan_s1s2.data.scene.scene import Scene


class GeoTiffDataModule(SceneDataModule):
    """Train/val/test windows of GeoTIFF scenes (config ``data=geotiff``).

    Every file's header is read and checked at construction, before a model is built:
    files exist, a stack has ``dates x bands`` bands, per-date files carry their date and
    share one grid, masks match the dates, rasters overlap (or the error names both
    grids), mask values are known, each scene has a valid observation, every label code is
    mapped. A scene without georeferencing works, with a warning.

    Args:
        root: Folder of the scene folders (or of one scene's files).
        scenes: Scene folder names under ``root`` (or paths); None = every subfolder
            matching ``scene_glob``.
        scene_glob: Pattern of the scene folders.
        modalities: Modalities to read (keys of ``sources``).
        sources: Per modality ``{stack, dates}`` or ``{files, date_pattern}``, plus
            ``bands``, ``mask``, ``mask_values``.
        labels: ``{file, band, classes, ignore_codes, unknown}``: the raster of the label
            codes (``file``: a GeoTIFF in the scene folder, null = no labels, prediction
            only; ``band``, default 1) and the codes of each class
            (:class:`~mtan_s1s2.data.labels.LabelMapping`).
        split: ``{by: blocks|parcels|scenes, block_size, n_folds, fold, seed, window,
            parcels: {file, band}}``.
        reference_date: Day 0 of ``doy`` (a date).
        grid: ``{resolution: <pixel size> | null, snap: false}`` (``snap: true`` reads rasters
            more than a quarter pixel off the grid by nearest centre instead of refusing them).
        radiometry: Per modality scale/offset/units/no-data (``data.radiometry``).
        cache: Keep samples in memory once read.
        batch_size: Windows per batch.
        num_workers: DataLoader workers.
        norm_stats: ``auto`` | null | ``{modality: {mean, std}}``.
        predict_split: Split of ``predict_dataloader``.
        derived: ``data.derived``: derived inputs (spectral indices, the S1 cross-ratio;
            :mod:`mtan_s1s2.data.derived`) appended to the channels of their modality.

    Raises:
        ValueError: On any of the checks above, naming the file, the value and the fix.
    """

    label_keys = ("file", "band")
    """The keys of ``data.labels`` that locate the label raster."""

    def __init__(
        self,
        root: str | None = None,
        scenes: Sequence[str] | None = None,
        scene_glob: str = "*",
        modalities: Sequence[str] = ("s2",),
        sources: Mapping[str, Mapping[str, Any]] | None = None,
        labels: Mapping[str, Any] | None = None,
        split: Mapping[str, Any] | None = None,
        reference_date: str | None = None,
        grid: Mapping[str, Any] | None = None,
        radiometry: Mapping[str, Any] | None = None,
        cache: bool = False,
        batch_size: int = 8,
        num_workers: int = 0,
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = "auto",
        predict_split: str = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            root, scenes, scene_glob, modalities, sources, labels, split, reference_date, grid, radiometry,
            cache, batch_size, num_workers, norm_stats, predict_split, derived,
        )  # fmt: skip

    def open_scene(self, folder: Path, sources: SceneSources) -> Scene:
        """Open one scene folder (see :func:`~mtan_s1s2.data.geotiff.scenes.open_scene`)."""
        return warn_if_not_georeferenced(open_scene_folder(GeoTiffFolder(folder), sources))


__all__ = ["GeoTiffDataModule"]
