"""The datamodule of every raster source: scenes -> labelled windows split by groups.

:class:`SceneDataModule` is the base of ``data=datacube`` and ``data=geotiff``: it finds the
scene folders (:func:`~mtan_s1s2.data.scene.folders.scene_folders`), a subclass opens each
one (:meth:`SceneDataModule.open_scene`: the only part that differs between readers), and
this class checks them and serves them:

* before any work: every quality band / mask holds only known values, every scene has a
  valid observation, the label codes are all mapped (``data.labels``; unknown codes are
  counted with how to map them), the scenes have the same bands;
* the split (:mod:`mtan_s1s2.data.scene.groups`): spatial blocks, parcels or whole scenes dealt
  into folds; ``write_split`` records it in the run directory (``split.csv``);
* the samples: windows of the labelled area of each split, normalised by the base class;
  with parcel ids (``data.split.parcels``) each sample also carries the ``(s, s)`` parcel
  index of its pixels (``parcel``), which the test aggregates into parcel metrics.

Without a label raster (``data.labels.file=null``) the datamodule serves no split and is used for
prediction only (:mod:`mtan_s1s2.inference`), reading :attr:`scenes` tile by tile.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample, check_modalities
from mtan_s1s2.data.config import LABEL_KEYS, section
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.data.group_splits import SPLIT_FILE, SPLIT_NAMES, write_split
from mtan_s1s2.data.labels import LabelMapping
from mtan_s1s2.data.parcels import global_parcel_index
from mtan_s1s2.data.radiometry import Radiometry
from mtan_s1s2.data.scene.folders import SceneSources, scene_folders
from mtan_s1s2.data.scene.groups import SceneSplit, SplitConfig, split_area, split_scenes
from mtan_s1s2.data.scene.scene import Scene, modality_bands
from mtan_s1s2.data.scene.windows import SceneAreaDataset, SceneWindowDataset, area_windows, split_windows

log = logging.getLogger(__name__)


GRID_KEYS = ("resolution", "snap", "label_shift")
"""Keys of ``data.grid``."""


def grid_settings(grid: Mapping[str, Any] | None) -> tuple[float | None, bool, tuple[int, int]]:
    """``(resolution, snap, label_shift)`` of ``data.grid``.

    ``resolution``: pixel size of the scene grid (None: the finest raster's); ``snap``: read
    rasters off that grid by more than a quarter pixel by nearest centre rather than refuse
    them (:func:`~mtan_s1s2.data.scene.grid.check_alignment`); ``label_shift``: ``[rows,
    cols]`` the label and parcel rasters are moved south and east against the imagery, in
    pixels of the scene grid (``[0, 0]`` = as read; :attr:`~mtan_s1s2.data.scene.scene.Scene.label_shift`).

    Raises:
        ValueError: On an unknown key (listing the valid ones), a ``snap`` that is not a
            boolean, or a ``label_shift`` that is not two whole numbers.
    """
    cfg = dict(grid or {})
    unknown = sorted(set(cfg) - set(GRID_KEYS))
    if unknown:
        raise ValueError(f"data.grid has unknown key(s) {unknown}; valid keys are {list(GRID_KEYS)}.")
    snap = cfg.get("snap", False)
    if not isinstance(snap, bool):
        raise ValueError(f"data.grid.snap must be true or false, got {snap!r}.")
    resolution = cfg.get("resolution")
    given = cfg.get("label_shift")
    shift: list[Any] = [0, 0] if given is None else []
    if isinstance(given, Sequence) and not isinstance(given, str):
        shift = list(given)
    if not (len(shift) == 2 and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in shift)):
        raise ValueError(
            f"data.grid.label_shift must be [rows, cols], two whole numbers of pixels (rows south, columns east), "
            f"got {given!r}; e.g. data.grid.label_shift=[1,0]."
        )
    return (None if resolution is None else float(resolution)), snap, (int(shift[0]), int(shift[1]))


class SceneDataModule(SITSDataModule, ABC):
    """Base datamodule of raster scenes (see the module docstring).

    Every scene folder is opened (headers only) and checked at construction, before a model
    is built. A subclass sets its own options, calls ``super().__init__(...)`` and
    implements :meth:`open_scene`.

    Args:
        root: Folder of the scene folders (or of one scene's files).
        scenes: Scene folder names under ``root`` (or paths); None = every subfolder
            matching ``scene_glob``.
        scene_glob: Pattern of the scene folders.
        modalities: Modalities to read, in order (keys of ``sources``).
        sources: Per modality, the reader's entry (files or layout, bands, quality/mask).
        labels: ``{file, <label_keys>, classes: {name: [codes]}, ignore_codes: [...], unknown:
            error|ignore}``: the label raster (``file`` null = none, prediction only; the
            reader's :attr:`label_keys` locate it) and its mapping
            (:class:`~mtan_s1s2.data.labels.LabelMapping`; ``classes`` needed with a label
            raster).
        split: ``data.split`` (:class:`~mtan_s1s2.data.scene.groups.SplitConfig`, plus
            ``parcels``: where the parcel ids are, :class:`~mtan_s1s2.data.parcels.ParcelSpec`).
        reference_date: Day 0 of ``doy`` (a date, or ``attr:<name>`` for a datacube).
        grid: ``{resolution: <pixel size> | null, snap: false, label_shift: [0, 0]}``: the
            scene grid (null: the finest raster); ``snap: true`` reads rasters more than a
            quarter pixel off it by nearest centre instead of refusing them; ``label_shift``
            moves the label and parcel rasters ``[rows, cols]`` px south and east against the
            imagery (:func:`grid_settings`).
        radiometry: Per modality overrides of the reader's radiometry (``data.radiometry``).
        cache: Keep samples in memory once read (small datasets).
        batch_size: Windows per batch.
        num_workers: DataLoader workers.
        norm_stats: ``auto`` | None | ``{modality: {mean, std}}``.
        predict_split: Split of :meth:`predict_dataloader`.
        derived: ``data.derived``: derived inputs (spectral indices, the S1 cross-ratio;
            :mod:`mtan_s1s2.data.derived`) appended to the channels of their modality.

    Attributes:
        label_keys: The keys of ``data.labels`` that locate the label raster (the reader's
            own: ``(file, variable)`` for a datacube, ``(file, band)`` for a GeoTIFF).
        label_source: The label raster's entry (``{file, variable | band}``; None: no labels).
        scenes: The opened scenes.
        bands: Band names per modality.
        mapping: The label mapping (None without labels).
        split: The split of every labelled pixel (None without labels).
        parcel_ids: With labels and ``data.split.parcels``: per scene ``(H, W) int64`` global
            parcel index (:data:`~mtan_s1s2.data.parcels.NO_PARCEL` = none), carried by the
            samples as ``parcel`` (the test's parcel metrics); else None.
        parcel_names: The name of every parcel index (``scene <name> parcel <id>``).

    Raises:
        ValueError: On empty ``sources``, missing scene folders, or any check of the
            scenes (see :meth:`load_scenes`), naming the file, the value and the fix.
    """

    label_keys: tuple[str, ...] = ("file",)
    """The keys of ``data.labels`` that locate the label raster (a reader adds its own)."""

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
        super().__init__(batch_size, num_workers, norm_stats, predict_split, derived)
        self.modalities = check_modalities(modalities)
        self.split_cfg = SplitConfig.from_config(split)
        allowed = (*self.label_keys, *(k for k in LABEL_KEYS if k != "names"))
        self.labels_cfg = section(labels, allowed, "data.labels")
        source = {k: self.labels_cfg.pop(k) for k in self.label_keys if k in self.labels_cfg}
        self.label_source: dict[str, Any] | None = (
            {k: v for k, v in source.items() if v is not None} if source.get("file") else None
        )
        self.cache = bool(cache)
        self.scenes: list[Scene] = []
        self.bands: dict[str, tuple[str, ...]] = {}
        self.mapping: LabelMapping | None = None
        self.split: SceneSplit | None = None
        self.parcel_ids: list[np.ndarray] | None = None
        self.parcel_names: list[str] = []
        self.windows: dict[str, list[Any]] = {s: [] for s in SPLIT_NAMES}
        self.ignore_index = 0
        self.class_names = ()
        self.num_classes = 0
        if not sources:
            raise ValueError(
                "data.sources is empty: give the files (or layout) and bands of each modality "
                f"(data.modalities={list(self.modalities)})."
            )
        self.sources = SceneSources(
            tuple(self.modalities), sources, reference_date, self.label_source, dict(split or {}).get("parcels"),
            dict(radiometry or {}), *grid_settings(grid),
        )  # fmt: skip
        self.load_scenes([self.open_scene(folder, self.sources) for folder in scene_folders(root, scenes, scene_glob)])

    @abstractmethod
    def open_scene(self, folder: Path, sources: SceneSources) -> Scene:
        """Open one scene folder (headers only: no pixel is read).

        Raises:
            ValueError: On missing files, bad settings or rasters that cannot share a grid.
        """

    # --- opening and checking -------------------------------------------------------------

    def load_scenes(self, scenes: Sequence[Scene], check: bool = True) -> None:
        """Adopt the opened scenes: check them, map the labels, split them.

        Args:
            scenes: The scenes (at least one).
            check: Scan quality bands and look for a valid observation now.

        Raises:
            ValueError: On scenes with different bands, a quality band with unexpected
                values, a scene without any valid observation, unmapped label codes, or a
                split that cannot be made.
        """
        if not scenes:
            raise ValueError("No scene to read: data.root / data.scenes select none.")
        self.scenes = list(scenes)
        self.bands = modality_bands(self.scenes)
        self.in_channels = {m: len(b) for m, b in self.bands.items()}
        doys = [d for sc in self.scenes for d in sc.doy.values() if len(d)]
        self._doy_range = (float(min(d.min() for d in doys)), float(max(d.max() for d in doys)))
        for sc in self.scenes:
            log.info("%s", sc.describe())
            if check:
                sc.check_quality()
                sc.check_has_valid()
        labelled = [sc for sc in self.scenes if sc.label is not None]
        if not labelled:
            return
        if len(labelled) != len(self.scenes):
            missing = [sc.name for sc in self.scenes if sc.label is None]
            raise ValueError(f"Scenes {missing} have no label raster but others do; give every scene its label.")
        if not self.labels_cfg.get("classes"):
            raise ValueError(
                "A label raster is read (data.labels.file) but data.labels.classes is not set: map the source codes to "
                "classes, e.g. data.labels.classes={maize: [1200], wheat: [1110]}."
            )
        mapping = LabelMapping.from_config(
            self.labels_cfg["classes"],
            self.labels_cfg.get("ignore_codes") or (),
            self.labels_cfg.get("unknown", "error"),
        )
        codes = [sc.read_label() for sc in self.scenes]
        fills = {sc.label.fill for sc in self.scenes if sc.label is not None and sc.label.fill is not None}
        self._check_fill_is_no_class(mapping, fills)
        extra = {
            f for f in fills if np.isfinite(f) and mapping.codes.get(int(f) if float(f).is_integer() else f) is None
        }
        if extra:
            log.info("Label fill value(s) %s mean no label (ignore_index).", sorted(extra))
            mapping = dataclasses.replace(
                mapping, ignore_codes=mapping.ignore_codes | {int(f) if float(f).is_integer() else f for f in extra}
            )
        self._check_codes(mapping, codes)
        self.mapping = mapping
        self.class_names = mapping.class_names
        self.num_classes = mapping.num_classes
        self.ignore_index = mapping.ignore_index
        self.split = split_scenes(self.scenes, mapping, self.split_cfg, [c for c in codes if c is not None])
        if all(sc.parcels is not None for sc in self.scenes):
            self.parcel_ids, self.parcel_names = global_parcel_index(self.scenes)
            log.info("Parcels (%s): %d in %d scene(s)", self.scenes[0].parcels.name, len(self.parcel_names),  # type: ignore[union-attr]
                     len(self.scenes))  # fmt: skip
        self.windows = split_windows(self.scenes, self.split, self.split_cfg, self.ignore_index)
        for s in SPLIT_NAMES:
            log.info("%s split: %d windows of %d px", s, len(self.windows[s]), self.split_cfg.window_size)

    def _check_fill_is_no_class(self, mapping: LabelMapping, fills: set[float]) -> None:
        """Refuse a label raster whose no-data value is also the code of a class.

        Raises:
            ValueError: Naming the rasters, the code, its class and the two fixes.
        """
        for f in sorted(f for f in fills if np.isfinite(f)):
            code = int(f) if float(f).is_integer() else f
            index = mapping.codes.get(code)
            if index is None:
                continue
            where = ", ".join(sc.label.name for sc in self.scenes if sc.label is not None and sc.label.fill == f)
            raise ValueError(
                f"The label raster(s) {where} declare no-data {code!r}, but data.labels.classes maps code {code!r} "
                f"to class {mapping.class_names[index]!r}: its pixels would be both 'no label' and that class. If "
                f"{code!r} is a class, remove the file's nodata tag (`gdal_edit.py -unsetnodata label.tif`); if it "
                f"means no label, move {code!r} from data.labels.classes to data.labels.ignore_codes."
            )

    def _check_codes(self, mapping: LabelMapping, codes: Sequence[np.ndarray | None]) -> None:
        merged: dict[Any, int] = {}
        for raw in codes:
            if raw is None:
                continue
            for c, n in mapping.unknown_codes(raw).items():
                merged[c] = merged.get(c, 0) + n
        if not merged:
            return
        where = ", ".join(str(sc.label.name) for sc in self.scenes if sc.label is not None)
        listed = ", ".join(f"{c!r}: {n} px" for c, n in sorted(merged.items(), key=lambda kv: -kv[1]))
        if mapping.unknown == "ignore":
            log.info("Label codes not in data.labels.classes are ignored: %s (%s)", listed, where)
            return
        raise ValueError(
            f"Label rasters ({where}): {len(merged)} label code(s) are not mapped to a class: {listed}. Add each to "
            "a class (data.labels.classes.<name>=[...]) or to data.labels.ignore_codes, or set "
            "data.labels.unknown=ignore to leave every unmapped code out."
        )

    def input_radiometry(self) -> dict[str, Radiometry]:
        """Per modality, the radiometry its scenes were read with (one for all scenes).

        A modality whose scenes were read with different radiometry (files with other CF
        encodings) is left out, with a warning: no single record describes it. Scenes that
        lack an optional modality (:class:`~mtan_s1s2.data.scene.scene.AbsentSeries`) do not count.
        """
        out: dict[str, Radiometry] = {}
        for m in self.modalities:
            series = [sc.series[m] for sc in self.scenes if m in sc.series and not sc.series[m].absent]
            found = {repr(s.radiometry.as_dict()): s.radiometry for s in series}
            if len(found) == 1:
                out[m] = next(iter(found.values()))
            elif found:
                log.warning(
                    "%s: the scenes were read with different radiometry (%s); the checkpoint records none for it, so "
                    "prediction uses the data config's data.radiometry.%s.", m, sorted(found), m,
                )  # fmt: skip
        return out

    # --- datasets -------------------------------------------------------------------------

    def build_dataset(self, split: str, whole: bool = False) -> Dataset[Sample]:
        """Windows of ``split`` (the same whether ``whole`` or not: scenes have no random crops).

        Raises:
            ValueError: Without labels (a prediction-only datamodule), or if the split has
                no window.
        """
        self._check_split(split)
        if self.split is None:
            raise ValueError(
                f"The {split} split needs labels, but data.labels.file is null (this data config serves prediction "
                "only). Set data.labels.file to the label raster and data.labels.classes to its classes."
            )
        if not self.windows[split]:
            raise ValueError(
                f"The {split} split has no labelled window (data.split={dataclasses.asdict(self.split_cfg)}); use more "
                "groups (smaller data.split.block_size) or another data.split.fold."
            )
        return SceneWindowDataset(
            self.scenes, self.windows[split], self.split_cfg.window_size, self.split.labels, self.split.splits,
            SPLIT_NAMES.index(split), self.ignore_index, cache=self.cache, parcels=self.parcel_ids,
        )  # fmt: skip

    def build_unlabelled_dataset(self, split: str) -> Dataset[Sample]:
        """Every pixel of ``split``'s groups, labelled or not, for ``task=pretrain``.

        Windows of the tiling of :meth:`build_dataset` that hold a pixel of the split's
        area (:func:`~mtan_s1s2.data.scene.groups.split_area`: the groups dealt to the
        split, minus ``data.split.buffer`` px next to a more protected split); the mask is
        False at every pixel outside the area, so no pixel of a validation or test block
        ever reaches a training sample, and labels are ``ignore_index``. Pixels without a
        valid observation are served but hold no observation to reconstruct.

        Raises:
            ValueError: Without labels (the split needs them) or if the area is empty.
        """
        self._check_split(split)
        if self.split is None:
            raise ValueError(
                f"task=pretrain reads the unlabelled pixels of the {split} split's area, which needs the split, hence "
                "a label raster: set data.labels.file and data.labels.classes (the labels decide the folds)."
            )
        buffer = int(self.split_cfg.buffer)
        areas = [split_area(self.split, i, split, buffer) for i in range(len(self.scenes))]
        origin = self.split_cfg.by == "blocks"
        items = area_windows(self.scenes, areas, self.split_cfg.window_size, origin)
        if not items:
            raise ValueError(
                f"The {split} split's area holds no pixel (data.split={dataclasses.asdict(self.split_cfg)})."
            )
        log.info(
            "task=pretrain: %s split: %d windows, %d px of its area (labelled or not)",
            split, len(items), sum(int(a.sum()) for a in areas),
        )  # fmt: skip
        return SceneAreaDataset(
            self.scenes, items, self.split_cfg.window_size, areas, self.ignore_index, cache=self.cache
        )

    def compute_norm_stats(self, modalities: Sequence[str]) -> Any:
        """Statistics over the training windows; logs the masked observations per reason."""
        stats = super().compute_norm_stats(modalities)
        for sc in self.scenes:
            sc.report.log(f"Scene {sc.name}")
        return stats

    def write_split(self, output_dir: str | Path) -> Path | None:
        """Write ``split.csv`` (one row per group: scene, group, split, pixel counts per class).

        Returns:
            The file, or None without labels.
        """
        if self.split is None:
            return None
        path = write_split(Path(output_dir) / SPLIT_FILE, self.split.group_rows)
        log.info("Wrote the split (%d groups, by %s) to %s", len(self.split.group_rows), self.split_cfg.by, path)
        return path

    def scene(self, name: str) -> Scene:
        """The scene called ``name``.

        Raises:
            ValueError: If there is none (listing the names).
        """
        for sc in self.scenes:
            if sc.name == name:
                return sc
        raise ValueError(f"No scene named {name!r}; the scenes are {[s.name for s in self.scenes]}.")


__all__ = ["GRID_KEYS", "SceneDataModule", "grid_settings"]
