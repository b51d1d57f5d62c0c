"""PASTIS-R-format S1/S2 satellite image time series: dataset and datamodule (``data=pastis``).

The file layout, dates and ``metadata.geojson`` are read by
:mod:`mtan_s1s2.data.pastis_layout`; normalisation statistics are cached by
:mod:`mtan_s1s2.data.pastis_stats`.

Labels (``TARGET`` channel 0), PASTIS nomenclature: 0 = background (not a crop parcel),
1-18 = crop types, 19 = void (parcels mostly outside the patch, or of uncertain class).
Two conventions are common, both a matter of ``ignore_labels``:

* ``ignore_labels=[19]`` (default, the U-TAE semantic-segmentation benchmark): void is
  ignored, background is a class to predict; ``ignore_index = 19``, 20 classes.
* ``ignore_labels=[0, 19]`` (crop-type mapping): background and void are both ignored;
  they map to ``ignore_index = 0``.

Every label listed in ``ignore_labels`` becomes ``ignore_index`` (default: the first one),
which the loss and every metric leave out.

Masks: PASTIS-R has no cloud mask, so ``mask`` is False only where an observation is
no-data: NaN or infinite in any channel, or equal to ``nodata`` in every channel.

Files are read memory-mapped (``np.load(mmap_mode="r")``): only the crop window of each
patch is read from disk.

Check a folder and (re)compute its statistics::

    python -m mtan_s1s2.data.pastis --root /data/PASTIS-R [--recompute-stats]
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from mtan_s1s2.data.batch import CLASS_NAMES, collate_sits
from mtan_s1s2.data.pastis_layout import (
    METADATA_FILE,
    PASTIS_MODALITIES,
    PASTIS_NAMES,
    PASTIS_REFERENCE_DATE,
    PatchRecord,
    check_root,
    describe,
    label_path,
    modality_path,
    parse_date,
    read_metadata,
    resolve_modalities,
    scan_patches,
)

log = logging.getLogger(__name__)

Split = Literal["train", "val", "test"]
CropMode = Literal["random", "center", "full"]
SPLITS: tuple[str, ...] = ("train", "val", "test")

PASTIS_CLASS_NAMES: tuple[str, ...] = (
    "background",
    "meadow",
    "soft_winter_wheat",
    "corn",
    "winter_barley",
    "winter_rapeseed",
    "spring_barley",
    "sunflower",
    "grapevine",
    "beet",
    "winter_triticale",
    "winter_durum_wheat",
    "fruits_vegetables_flowers",
    "potatoes",
    "leguminous_fodder",
    "soybeans",
    "orchard",
    "mixed_cereal",
    "sorghum",
    "void",
)
"""The PASTIS nomenclature: 0 = background, 1-18 crop types, 19 = void label."""

CLASS_NAME_SETS: dict[str, tuple[str, ...]] = {"pastis": PASTIS_CLASS_NAMES, "synthetic": CLASS_NAMES}
"""Named nomenclatures for ``data.class_names``."""

DEFAULT_FOLDS: dict[str, list[int]] = {"train": [1, 2, 3], "val": [4], "test": [5]}
"""PASTIS fold 1 of its 5-fold cross-validation."""


# ----------------------------------------------------------------------------------------
# Labels and normalisation
# ----------------------------------------------------------------------------------------


def resolve_class_names(class_names: str | Sequence[str]) -> tuple[str, ...]:
    """``"pastis"``, ``"synthetic"`` or an explicit list of names (index = label).

    Raises:
        ValueError: On an unknown name or fewer than two classes.
    """
    if isinstance(class_names, str):
        if class_names not in CLASS_NAME_SETS:
            raise ValueError(
                f"Unknown data.class_names={class_names!r}; use one of {sorted(CLASS_NAME_SETS)} or a list of names."
            )
        return CLASS_NAME_SETS[class_names]
    names = tuple(str(n) for n in class_names)
    if len(names) < 2:
        raise ValueError(f"data.class_names needs at least two classes, got {list(names)}.")
    return names


def label_lookup(num_classes: int, ignore_labels: Sequence[int], ignore_index: int) -> np.ndarray:
    """Table mapping raw labels to training labels: ``ignore_labels`` -> ``ignore_index``.

    Returns:
        ``(max(K, max(ignore_labels) + 1),) int64``; raw labels beyond it are invalid.
    """
    size = max([num_classes, *(int(v) + 1 for v in ignore_labels)])
    lut = np.arange(size, dtype=np.int64)
    lut[[int(v) for v in ignore_labels]] = ignore_index
    return lut


NormStats = dict[str, tuple[np.ndarray, np.ndarray]]


def check_norm_stats(
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]], in_channels: Mapping[str, int]
) -> NormStats:
    """Validate ``{modality: {"mean": [C], "std": [C]}}`` against the data's bands.

    Returns:
        ``{modality: (mean (C,) float32, std (C,) float32)}``.

    Raises:
        ValueError: If a modality is missing, or has the wrong count, or a non-positive std.
    """
    out: NormStats = {}
    for m, c in in_channels.items():
        if m not in norm_stats:
            raise ValueError(
                f"data.norm_stats has no entry for {m!r} (it has {list(norm_stats)}); give mean and std "
                "for every modality, or use data.norm_stats=auto."
            )
        mean = np.asarray([float(v) for v in norm_stats[m]["mean"]], np.float32)
        std = np.asarray([float(v) for v in norm_stats[m]["std"]], np.float32)
        if mean.shape != (c,) or std.shape != (c,):
            raise ValueError(
                f"data.norm_stats.{m} needs {c} means and stds (the files have C={c}); got {mean.size} and {std.size}."
            )
        if not (np.isfinite(mean).all() and (std > 0).all()):
            raise ValueError(f"data.norm_stats.{m} must have finite means and positive stds, got {dict(norm_stats[m])}.")
        out[m] = (mean, std)
    return out


def _nodata_per_modality(nodata: float | Mapping[str, float | None] | None, modalities: Sequence[str]) -> dict:
    if nodata is None or isinstance(nodata, (int, float)):
        return {m: None if nodata is None else float(nodata) for m in modalities}
    if not isinstance(nodata, Mapping):
        raise ValueError(f"data.nodata must be null, a number or {{modality: number}}, got {nodata!r}.")
    unknown = [k for k in nodata if k not in PASTIS_MODALITIES and k not in PASTIS_NAMES]
    if unknown:
        raise ValueError(f"data.nodata has unknown modality {unknown[0]!r}; valid: {list(PASTIS_MODALITIES)}.")
    named = {PASTIS_NAMES.get(k, k): v for k, v in nodata.items()}
    return {m: None if named.get(m) is None else float(named[m]) for m in modalities}


# ----------------------------------------------------------------------------------------
# Dataset
# ----------------------------------------------------------------------------------------


class PASTISDataset(Dataset):
    """Patches of a PASTIS-R-format folder, read memory-mapped.

    Each item follows :mod:`mtan_s1s2.data.batch`::

        {"s2": {"x": (T, C, h, w) float32 reflectance (normalised if norm_stats),
                "doy": (T,) float32 days since the reference date,
                "mask": (T, h, w) bool, True = valid},
         "s1_asc" / "s1_desc": the same with backscatter,
         "label": (h, w) int64, "patch_id": int (ID_PATCH)}

    Args:
        root: Dataset folder.
        records: Patches to serve (from :func:`read_metadata`).
        modalities: Our modality names.
        sizes: ``(H, W)`` of each record (from :func:`scan_patches`).
        crop: ``"random"`` (a random ``crop_size`` window per access, for training),
            ``"center"`` (the central window) or ``"full"`` (the whole patch).
        crop_size: Window side, pixels; ``None`` means the whole patch for every mode.
        norm_stats: ``{modality: (mean (C,), std (C,))}``; ``x = (x - mean) / std``.
        nodata: Per modality, a fill value marking no-data when all channels equal it.
        label_lut: Raw label -> training label (see :func:`label_lookup`).
        num_classes: ``K``; raw labels must map into ``[0, K)``.
    """

    def __init__(
        self,
        root: Path,
        records: Sequence[PatchRecord],
        modalities: Sequence[str],
        sizes: Sequence[tuple[int, int]],
        crop: CropMode = "full",
        crop_size: int | None = None,
        norm_stats: NormStats | None = None,
        nodata: Mapping[str, float | None] | None = None,
        label_lut: np.ndarray | None = None,
        num_classes: int | None = None,
    ) -> None:
        if crop not in ("random", "center", "full"):
            raise ValueError(f"crop must be 'random', 'center' or 'full', got {crop!r}.")
        self.root = Path(root)
        self.records = list(records)
        self.modalities = list(modalities)
        self.sizes = list(sizes)
        self.crop = crop
        self.crop_size = crop_size
        self.norm_stats = norm_stats
        self.nodata = dict(nodata or {})
        self.label_lut = label_lut
        self.num_classes = num_classes

    def __len__(self) -> int:
        return len(self.records)

    def _window(self, index: int) -> tuple[int, int, int, int]:
        """``(y0, x0, h, w)`` of the window to read."""
        H, W = self.sizes[index]
        c = self.crop_size
        if self.crop == "full" or c is None:
            return 0, 0, H, W
        if self.crop == "center":
            return (H - c) // 2, (W - c) // 2, c, c
        y0 = int(torch.randint(0, H - c + 1, ()).item())
        x0 = int(torch.randint(0, W - c + 1, ()).item())
        return y0, x0, c, c

    def read_modality(self, index: int, modality: str, window: tuple[int, int, int, int] | None = None) -> dict:
        """One modality of patch ``index``, un-normalised.

        Returns:
            ``{"x": (T, C, h, w) float32, "doy": (T,) float32, "mask": (T, h, w) bool}``.
        """
        rec = self.records[index]
        y0, x0, h, w = window or (0, 0, *self.sizes[index])
        arr = np.load(modality_path(self.root, modality, rec.patch_id), mmap_mode="r")
        x = np.array(arr[:, :, y0 : y0 + h, x0 : x0 + w], dtype=np.float32)  # copies the window only
        mask = np.isfinite(x).all(axis=1)
        fill = self.nodata.get(modality)
        if fill is not None:
            mask &= ~(x == np.float32(fill)).all(axis=1)
        return {"x": x, "doy": rec.doy[modality].copy(), "mask": mask}

    def read_label(self, index: int, window: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """Training labels ``(h, w) int64`` of patch ``index`` (``ignore_labels`` mapped).

        Raises:
            ValueError: If a raw label falls outside the configured classes.
        """
        rec = self.records[index]
        y0, x0, h, w = window or (0, 0, *self.sizes[index])
        arr = np.load(label_path(self.root, rec.patch_id), mmap_mode="r")
        raw = arr[0] if arr.ndim == 3 else arr
        raw = np.asarray(raw[y0 : y0 + h, x0 : x0 + w])
        label = raw.astype(np.int64)
        if self.label_lut is None:
            return label
        size = self.label_lut.shape[0]
        known = (label >= 0) & (label < size) & (label == raw)  # integral, inside the table
        mapped = np.where(known, self.label_lut[np.clip(label, 0, size - 1)], -1)
        bad = (mapped < 0) | (mapped >= (self.num_classes or size))
        if bad.any():
            value = raw[bad].flat[0].item()
            raise ValueError(
                f"Patch {rec.patch_id}: label {value!r} in {label_path(self.root, rec.patch_id)} is not a class "
                f"index in [0, {self.num_classes}) of data.class_names; set data.class_names to your nomenclature "
                "or list the value in data.ignore_labels."
            )
        return mapped

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Read patch ``index`` (see the class docstring for the contract)."""
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} is out of range for a dataset of {len(self)} patches.")
        window = self._window(i)
        sample: dict[str, Any] = {}
        for m in self.modalities:
            d = self.read_modality(i, m, window)
            x = d["x"]
            if self.norm_stats is not None:
                mean, std = self.norm_stats[m]
                x = (x - mean[:, None, None]) / std[:, None, None]  # NaN under a False mask stays NaN
            sample[m] = {
                "x": torch.from_numpy(x),
                "doy": torch.from_numpy(d["doy"]),
                "mask": torch.from_numpy(d["mask"]),
            }
        sample["label"] = torch.from_numpy(self.read_label(i, window))
        sample["patch_id"] = self.records[i].patch_id
        return sample

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, n_patches={len(self)}, modalities={self.modalities}, "
            f"crop={self.crop!r}, crop_size={self.crop_size}, normalised={self.norm_stats is not None})"
        )


# ----------------------------------------------------------------------------------------
# Datamodule
# ----------------------------------------------------------------------------------------


class PASTISDataModule(L.LightningDataModule):
    """Train/val/test folds of a PASTIS-R-format dataset (config ``data=pastis``).

    Everything that can be checked without reading pixels is checked at construction,
    before a model is built: the root and the modality folders, ``metadata.geojson``, the
    folds, and the header of every file (presence, shape, date count, bands).

    Args:
        root: Dataset folder (config ``data.root``, default ``$PASTIS_ROOT``).
        folds: ``{"train": [...], "val": [...], "test": [...]}`` values of ``Fold``
            selecting each split (PASTIS fold 1: train 1-3, val 4, test 5).
        modalities: Any of ``s2``, ``s1_asc``, ``s1_desc`` (or PASTIS-R's ``S2``,
            ``S1A``, ``S1D``); batches use our names.
        reference_date: Day 0 of ``doy``, ``YYYY-MM-DD`` or ``YYYYMMDD``.
        class_names: ``"pastis"`` (the 20 PASTIS classes), ``"synthetic"`` (the 11
            classes of the synthetic generator) or a list of names; index = label.
        ignore_labels: Raw labels mapped to ``ignore_index`` (excluded from loss and
            metrics). PASTIS: ``[19]`` (void only) or ``[0, 19]`` (background and void).
        ignore_index: Label the ignored pixels get; ``None`` = ``ignore_labels[0]``.
            Must be a class index in ``[0, K)``.
        crop_size: Side of the training crops, pixels (random position per access);
            ``None`` = whole patches.
        eval_crop: ``"full"`` (whole patches) or ``"center"`` (central ``crop_size``
            window) for validation and test.
        batch_size: Patches per batch.
        num_workers: DataLoader worker processes (persistent when > 0).
        nodata: Fill value of no-data observations (all channels equal to it), a number,
            ``{modality: number}`` or ``None`` (only NaN/inf are no-data).
        norm_stats: ``"auto"`` (per-channel mean/std over the valid observations of the
            training folds, cached as ``NORM_S1S2_folds_<train folds>.json`` beside the
            data), ``None`` (no normalisation) or ``{modality: {"mean": [C], "std": [C]}}``.
        stats_file: Where the ``auto`` statistics are cached; ``None`` = under ``root``
            (use this for a read-only dataset folder).
        stats_max_patches: Use at most this many (evenly spaced) training patches for the
            ``auto`` statistics; ``None`` = all.
        predict_split: Split served by :meth:`predict_dataloader` (whole patches, in
            ``metadata.geojson`` order).

    Attributes:
        modalities: Modalities of every batch (our names), in the given order.
        in_channels: Bands per modality, read from the files, e.g. ``{"s2": 10, "s1_asc": 3}``.
        num_classes: ``K = len(class_names)``.
        ignore_index: Label excluded from loss and metrics.
        class_names: Class names, index = label.
        records: Selected patches per split.

    Raises:
        ValueError: On a missing ``root``, a missing modality folder or file, a patch
            whose date count disagrees with its array, a fold that selects no patch, or
            inconsistent settings; each message names the value and the fix.
    """

    def __init__(
        self,
        root: str | None = None,
        folds: Mapping[str, int | Sequence[int]] | None = None,
        modalities: Sequence[str] = ("s2", "s1_asc", "s1_desc"),
        reference_date: str | int = PASTIS_REFERENCE_DATE,
        class_names: str | Sequence[str] = "pastis",
        ignore_labels: Sequence[int] = (19,),
        ignore_index: int | None = None,
        crop_size: int | None = 64,
        eval_crop: Literal["full", "center"] = "full",
        batch_size: int = 4,
        num_workers: int = 0,
        nodata: float | Mapping[str, float | None] | None = None,
        norm_stats: str | Mapping[str, Mapping[str, Sequence[float]]] | None = "auto",
        stats_file: str | None = None,
        stats_max_patches: int | None = None,
        predict_split: Split = "test",
    ) -> None:
        super().__init__()
        self.modalities: list[str] = resolve_modalities(modalities)
        self.root = check_root(root, self.modalities)
        if int(batch_size) < 1:
            raise ValueError(f"data.batch_size must be >= 1, got {batch_size}.")
        if int(num_workers) < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {num_workers}.")
        if eval_crop not in ("full", "center"):
            raise ValueError(f"data.eval_crop must be 'full' or 'center', got {eval_crop!r}.")
        if eval_crop == "center" and crop_size is None:
            raise ValueError("data.eval_crop=center needs data.crop_size (the window side, pixels).")
        if crop_size is not None and int(crop_size) < 1:
            raise ValueError(f"data.crop_size must be a positive number of pixels or null, got {crop_size}.")
        if predict_split not in SPLITS:
            raise ValueError(f"data.predict_split must be one of {list(SPLITS)}, got {predict_split!r}.")
        if isinstance(norm_stats, str) and norm_stats != "auto":
            raise ValueError(f"data.norm_stats must be 'auto', null or {{modality: {{mean, std}}}}, got {norm_stats!r}.")
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.crop_size = None if crop_size is None else int(crop_size)
        self.eval_crop = eval_crop
        self.predict_split: str = predict_split
        self.reference_date = parse_date(reference_date)
        self.nodata = _nodata_per_modality(nodata, self.modalities)
        self.stats_file = stats_file
        self.stats_max_patches = None if stats_max_patches is None else int(stats_max_patches)
        self._norm_stats_cfg = norm_stats

        # Labels.
        self.class_names: tuple[str, ...] = resolve_class_names(class_names)
        self.num_classes: int = len(self.class_names)
        self.ignore_labels = [int(v) for v in ignore_labels]
        if ignore_index is None:
            if not self.ignore_labels:
                raise ValueError("data.ignore_labels is empty: set data.ignore_index to a class index to ignore.")
            ignore_index = self.ignore_labels[0]
        if not 0 <= int(ignore_index) < self.num_classes:
            raise ValueError(
                f"data.ignore_index={ignore_index} must be a class index in [0, {self.num_classes}) of "
                f"data.class_names; map ignored labels to one (e.g. data.ignore_index=0) or add a class name for it."
            )
        if any(v < 0 for v in self.ignore_labels):
            raise ValueError(f"data.ignore_labels must be non-negative raw labels, got {self.ignore_labels}.")
        self.ignore_index: int = int(ignore_index)
        self.label_lut = label_lookup(self.num_classes, self.ignore_labels, self.ignore_index)

        # Patches and folds.
        all_records = read_metadata(self.root, self.modalities, self.reference_date)
        self.folds = self._check_folds(folds or DEFAULT_FOLDS, all_records)
        self.records: dict[str, list[PatchRecord]] = {
            s: [r for r in all_records if r.fold in self.folds[s]] for s in SPLITS
        }
        self.in_channels: dict[str, int] = {}
        self.sizes: dict[str, list[tuple[int, int]]] = {}
        for split in SPLITS:
            channels, self.sizes[split] = scan_patches(self.root, self.records[split], self.modalities)
            for m, c in channels.items():
                if self.in_channels.setdefault(m, c) != c:
                    raise ValueError(f"{m} files have C={c} bands in the {split} folds but {self.in_channels[m]} elsewhere.")
            self._check_sizes(split)
        self.norm_stats: NormStats | None = None
        if isinstance(norm_stats, Mapping):
            self.norm_stats = check_norm_stats(norm_stats, self.in_channels)
        self._stats_ready = not isinstance(norm_stats, str)
        self.datasets: dict[str, PASTISDataset] = {}

    def _check_folds(self, folds: Mapping[str, Any], records: Sequence[PatchRecord]) -> dict[str, list[int]]:
        present = sorted({r.fold for r in records})
        unknown = sorted(set(folds) - set(SPLITS))
        if unknown:
            raise ValueError(f"data.folds has unknown split(s) {unknown}; use train, val and test.")
        out: dict[str, list[int]] = {}
        for split in SPLITS:
            if split not in folds:
                raise ValueError(f"data.folds has no {split!r} entry; give the Fold values of each of {list(SPLITS)}.")
            value = folds[split]
            chosen = [int(value)] if isinstance(value, (int, np.integer)) else [int(v) for v in value]
            if not any(r.fold in chosen for r in records):
                raise ValueError(
                    f"data.folds.{split}={chosen} selects no patch of {self.root / METADATA_FILE}; the folds "
                    f"present are {present}."
                )
            out[split] = chosen
        for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
            shared = sorted(set(out[a]) & set(out[b]))
            if shared:
                log.warning("data.folds: %s and %s share fold(s) %s; their metrics are not independent.", a, b, shared)
        return out

    def _check_sizes(self, split: str) -> None:
        sizes = self.sizes[split]
        c = self.crop_size
        if c is not None:
            small = [(r.patch_id, s) for r, s in zip(self.records[split], sizes) if min(s) < c]
            if small:
                raise ValueError(
                    f"Patch {small[0][0]} ({split}) is {small[0][1]} pixels, smaller than data.crop_size={c}; "
                    "lower data.crop_size or set it to null."
                )
        whole = self.crop_size is None or (split != "train" and self.eval_crop == "full")
        if whole and len(set(sizes)) > 1 and self.batch_size > 1:
            raise ValueError(
                f"The {split} patches have different sizes {sorted(set(sizes))[:3]} and are served whole: "
                "set data.crop_size (and data.eval_crop=center) or data.batch_size=1."
            )

    # --- normalisation ------------------------------------------------------------------

    def _resolve_norm_stats(self) -> None:
        if self._stats_ready:
            return
        from mtan_s1s2.data.pastis_stats import load_or_compute_norm_stats

        stats = load_or_compute_norm_stats(
            self.root,
            self.raw_dataset("train"),
            train_folds=self.folds["train"],
            nodata=self.nodata,
            max_patches=self.stats_max_patches,
            stats_file=self.stats_file,
        )
        self.norm_stats = check_norm_stats(stats, self.in_channels)
        self._stats_ready = True

    def raw_dataset(self, split: str) -> PASTISDataset:
        """Whole, un-normalised patches of ``split`` (for statistics and inspection)."""
        return PASTISDataset(
            self.root, self.records[split], self.modalities, self.sizes[split], crop="full",
            nodata=self.nodata, label_lut=self.label_lut, num_classes=self.num_classes,
        )  # fmt: skip

    def dataset(self, split: str, crop: CropMode | None = None) -> PASTISDataset:
        """The normalised dataset of ``split``; ``crop`` defaults to the split's crop mode."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; valid splits are {list(SPLITS)}.")
        self._resolve_norm_stats()
        if crop is None:
            crop = "random" if split == "train" else ("full" if self.eval_crop == "full" else "center")
        return PASTISDataset(
            self.root, self.records[split], self.modalities, self.sizes[split], crop=crop,
            crop_size=self.crop_size, norm_stats=self.norm_stats, nodata=self.nodata,
            label_lut=self.label_lut, num_classes=self.num_classes,
        )  # fmt: skip

    # --- Lightning hooks ----------------------------------------------------------------

    def prepare_data(self) -> None:
        """Compute (or load) the normalisation statistics once, on the main process."""
        self._resolve_norm_stats()

    def setup(self, stage: str | None = None) -> None:
        """Create the datasets of ``stage`` (``fit``, ``validate``, ``test``, ``predict``)."""
        by_stage = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ()}
        for split in by_stage.get(stage or "", SPLITS):
            if split not in self.datasets:
                self.datasets[split] = self.dataset(split)

    def _loader(self, dataset: PASTISDataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_sits,
        )

    def _split(self, split: str) -> PASTISDataset:
        if split not in self.datasets:
            self.datasets[split] = self.dataset(split)
        return self.datasets[split]

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._split("train"), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._split("val"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._split("test"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        """Whole patches of ``predict_split``, in ``metadata.geojson`` order."""
        return self._loader(self.dataset(self.predict_split, crop="full"), shuffle=False)


# ----------------------------------------------------------------------------------------
# Command line: python -m mtan_s1s2.data.pastis --root ROOT [--recompute-stats]
# ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Check a PASTIS-R-format folder, and (re)compute its normalisation statistics."""
    from mtan_s1s2.data.norm_stats import norm_stats_to_yaml
    from mtan_s1s2.data.pastis_stats import load_or_compute_norm_stats

    parser = argparse.ArgumentParser(
        prog="python -m mtan_s1s2.data.pastis",
        description="Check every file of a PASTIS-R-format dataset, print its folds and the normalisation "
        "statistics of its training folds (computed once and cached beside the data).",
    )
    parser.add_argument("--root", required=True, help="dataset folder (holds metadata.geojson)")
    parser.add_argument("--modalities", nargs="+", default=list(PASTIS_MODALITIES), help="e.g. s2 s1_asc (or S2 S1A)")
    parser.add_argument(
        "--train-folds", nargs="+", type=int, default=DEFAULT_FOLDS["train"], help="folds of the statistics"
    )
    parser.add_argument("--reference-date", default=PASTIS_REFERENCE_DATE, help="day 0 of the printed day ranges")
    parser.add_argument("--nodata", type=float, default=None, help="fill value of no-data observations")
    parser.add_argument("--max-patches", type=int, default=None, help="at most this many training patches")
    parser.add_argument("--stats-file", default=None, help="cache file (default: under --root)")
    parser.add_argument("--recompute-stats", action="store_true", help="recompute and overwrite the cached statistics")
    args = parser.parse_args(argv)

    mods = resolve_modalities(args.modalities)
    root = check_root(args.root, mods)
    records = read_metadata(root, mods, parse_date(args.reference_date))
    in_channels, sizes = scan_patches(root, records, mods)
    print(f"PASTIS-R-format dataset at {root}: {len(records)} patches, days since {args.reference_date}")
    print(describe(records, sizes, in_channels))
    train = [i for i, r in enumerate(records) if r.fold in args.train_folds]
    if not train:
        folds = sorted({r.fold for r in records})
        raise ValueError(f"--train-folds {args.train_folds} selects no patch; the folds are {folds}.")
    nodata = _nodata_per_modality(args.nodata, mods)
    dataset = PASTISDataset(root, [records[i] for i in train], mods, [sizes[i] for i in train], nodata=nodata)
    stats = load_or_compute_norm_stats(
        root, dataset, train_folds=args.train_folds, nodata=nodata, max_patches=args.max_patches,
        stats_file=args.stats_file, recompute=args.recompute_stats,
    )  # fmt: skip
    print(f"# mean/std over valid observations of folds {sorted(args.train_folds)} ({len(train)} patches)")
    print(norm_stats_to_yaml({m: {k: s[k] for k in ("mean", "std")} for m, s in stats.items()}), end="")




__all__ = [
    "CLASS_NAME_SETS",
    "PASTIS_CLASS_NAMES",
    "PASTIS_MODALITIES",
    "PASTISDataModule",
    "PASTISDataset",
    "PatchRecord",
    "label_lookup",
    "main",
    "resolve_class_names",
]


if __name__ == "__main__":
    main()
