"""``data=datacube``: scenes of xarray datacubes (NetCDF, Zarr), split by spatial blocks or parcels.

One folder per scene under ``root`` (or the folders listed in ``scenes``); per modality the
files and bands of :mod:`mtan_s1s2.data.datacube.scenes`; labels from a raster variable
(``labels.file`` + ``labels.variable``) mapped to classes by ``labels.classes``; samples and
splits from :mod:`mtan_s1s2.data.scene`.
See ``configs/data/datacube.yaml`` and the WorldCereal preset ``configs/data/worldcereal.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mtan_s1s2.data.datacube.scenes import DatacubeFolder
from mtan_s1s2.data.scene.datamodule import SceneDataModule
from mtan_s1s2.data.scene.folders import SceneSources, open_scene_folder
from mtan_s1s2.data.scene.scene import Scene


class DatacubeDataModule(SceneDataModule):
    """Train/val/test windows of datacube scenes (config ``data=datacube``).

    Every file is opened (headers only) and checked at construction, before a model is
    built: files and variables exist, bands of a modality share their dates, the rasters
    overlap (or the error names both grids), quality values are known, each scene has a
    valid observation, every label code is mapped.

    Args:
        root: Folder of the scene folders (or of one scene's files).
        scenes: Scene folder names under ``root`` (or paths); None = every subfolder
            matching ``scene_glob``.
        scene_glob: Pattern of the scene folders.
        modalities: Modalities to read (keys of ``sources``), e.g. ``[s2, s1_asc]``.
        sources: Per modality ``{files: [globs], bands: [variables], quality: {variable,
            valid, invalid}}``.
        labels: ``{file, variable, classes, ignore_codes, unknown}``: the raster of the label
            codes (``file``: a glob in the scene folder, null = no labels, prediction
            only; ``variable``) and the codes of each class
            (:class:`~mtan_s1s2.data.labels.LabelMapping`).
        split: ``{by: blocks|parcels|scenes, block_size, n_folds, fold, seed, window,
            parcels: {file, variable}}``.
        reference_date: Day 0 of ``doy``: a date or ``attr:<name>`` (a global attribute).
        grid: ``{resolution: <pixel size> | null, snap: false}``: the scene grid (null: the
            finest raster); ``snap: true`` reads bands more than a quarter pixel off it by
            nearest centre instead of refusing them.
        radiometry: Per modality overrides of the CF scale/offset/fill (``data.radiometry``).
        engine: xarray engine (null: xarray's choice).
        dims: ``{time, y, x}`` dimension names (null entries: detected).
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

    label_keys = ("file", "variable")
    """The keys of ``data.labels`` that locate the label raster."""

    def __init__(
        self,
        root: str | None = None,
        scenes: Sequence[str] | None = None,
        scene_glob: str = "*",
        modalities: Sequence[str] = ("s2", "s1_asc"),
        sources: Mapping[str, Mapping[str, Any]] | None = None,
        labels: Mapping[str, Any] | None = None,
        split: Mapping[str, Any] | None = None,
        reference_date: str | None = None,
        grid: Mapping[str, Any] | None = None,
        radiometry: Mapping[str, Any] | None = None,
        engine: str | None = None,
        dims: Mapping[str, str | None] | None = None,
        cache: bool = False,
        batch_size: int = 8,
        num_workers: int = 0,
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = "auto",
        predict_split: str = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        self.engine = engine
        self.dims = dims
        super().__init__(
            root, scenes, scene_glob, modalities, sources, labels, split, reference_date, grid, radiometry,
            cache, batch_size, num_workers, norm_stats, predict_split, derived,
        )  # fmt: skip

    def open_scene(self, folder: Path, sources: SceneSources) -> Scene:
        """Open one scene folder (see :func:`~mtan_s1s2.data.datacube.scenes.open_scene`)."""
        return open_scene_folder(DatacubeFolder(folder, self.engine, self.dims), sources)


__all__ = ["DatacubeDataModule"]
