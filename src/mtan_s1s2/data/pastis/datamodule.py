"""``data=pastis``: train/val/test folds of a PASTIS-R-format dataset.

The file layout, dates and ``metadata.geojson`` are read by
:mod:`mtan_s1s2.data.pastis.layout`, patches by :mod:`mtan_s1s2.data.pastis.dataset`;
the ``auto`` normalisation statistics are computed over the training folds and cached
beside the data (:mod:`mtan_s1s2.data.normalization`).

Labels (``data.labels``): the raw labels are class indices named by ``names``; every label
listed in ``ignore_codes`` becomes ``ignore_index`` (the first of them), which the loss and
every metric leave out. Two PASTIS conventions are common:

* ``ignore_codes=[19]`` (default, the U-TAE semantic-segmentation benchmark): void is
  ignored, background is a class to predict; ``ignore_index = 19``, 20 classes.
* ``ignore_codes=[0, 19]`` (crop-type mapping): background and void are both ignored;
  they map to ``ignore_index = 0``.

Splits (``data.split``): the ``Fold`` of each patch in ``metadata.geojson``; ``folds``
lists the folds of each split, or ``fold`` picks round ``fold`` of the 5-fold
cross-validation (:func:`utae_folds`).

Check a folder and (re)compute its statistics::

    python -m mtan_s1s2.data.pastis --root /data/PASTIS-R [--recompute-stats]
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from torch.utils.data import Subset

from mtan_s1s2.data.config import SPLIT_KEYS, section
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule, Split
from mtan_s1s2.data.dates import resolve_reference_date
from mtan_s1s2.data.normalization import NormStats, compute_norm_stats
from mtan_s1s2.data.pastis.dataset import (
    CropMode,
    PASTISDataset,
    label_lookup,
    resolve_class_names,
)
from mtan_s1s2.data.pastis.layout import (
    LABEL_FOLDER,
    METADATA_FILE,
    PASTIS_NAMES,
    PASTIS_REFERENCE_DATE,
    PatchRecord,
    check_root,
    read_metadata,
    resolve_modalities,
    scan_patches,
)
from mtan_s1s2.data.radiometry import radiometry_per_modality

log = logging.getLogger(__name__)

DEFAULT_FOLDS: dict[str, list[int]] = {"train": [1, 2, 3], "val": [4], "test": [5]}
"""PASTIS fold 1 of its 5-fold cross-validation."""

PASTIS_SPLIT_KEYS: tuple[str, ...] = (*(k for k in SPLIT_KEYS if k != "seed"), "folds")
"""Keys of ``data.split`` for PASTIS (the folds are fixed by the metadata: no seed)."""
PASTIS_LABEL_KEYS: tuple[str, ...] = ("names", "ignore_codes", "read")
"""Keys of ``data.labels`` for PASTIS (raw labels are class indices: ``names``, not ``classes``)."""


def utae_folds(fold: int, n_folds: int = 5) -> dict[str, list[int]]:
    """The folds of cross-validation round ``fold`` (U-TAE's protocol): test ``fold``, val the one before.

    ``utae_folds(5)`` = train 1-3, val 4, test 5 (:data:`DEFAULT_FOLDS`); ``utae_folds(1)``
    = train 2-4, val 5, test 1.

    Raises:
        ValueError: If ``fold`` is not in ``1..n_folds``.
    """
    if not 1 <= int(fold) <= int(n_folds):
        raise ValueError(f"data.split.fold must be in 1..{n_folds} (data.split.n_folds), got {fold}.")
    val = (int(fold) - 2) % int(n_folds) + 1
    return {
        "train": [k for k in range(1, int(n_folds) + 1) if k not in (int(fold), val)],
        "val": [val],
        "test": [int(fold)],
    }


def stats_filename(train_folds: Sequence[int]) -> str:
    """``NORM_S1S2_folds_1-2-3.json`` for training folds 1, 2, 3."""
    return f"NORM_S1S2_folds_{'-'.join(str(int(f)) for f in sorted(train_folds))}.json"


class PASTISDataModule(SITSDataModule):
    """Train/val/test folds of a PASTIS-R-format dataset (config ``data=pastis``).

    Everything that can be checked without reading pixels is checked at construction,
    before a model is built: the root and the modality folders, ``metadata.geojson``, the
    folds, and the header of every file (presence, shape, date count, bands).

    Args:
        root: Dataset folder (config ``data.root``, default ``$PASTIS_ROOT``).
        split: ``{by: folds, folds, fold, n_folds}``: ``folds`` = ``{"train": [...], "val":
            [...], "test": [...]}`` values of ``Fold`` selecting each split (PASTIS fold 1:
            train 1-3, val 4, test 5; ``val`` and ``test`` may be empty lists, no such
            split), ignored when ``fold`` is set; ``fold`` = test fold of the 5-fold
            cross-validation of U-TAE/PASTIS (``-m data.split.fold=1,2,3,4,5``): fold ``k``
            is the test split, fold ``k - 1`` (cyclically) validation, the other three
            training (:func:`utae_folds`; ``fold=5`` is the default ``folds``), None = use
            ``folds``; ``n_folds`` = folds of that cross-validation (PASTIS: 5).
        modalities: Any of ``s2``, ``s1_asc``, ``s1_desc`` (or PASTIS-R's ``S2``,
            ``S1A``, ``S1D``); batches use our names.
        reference_date: Day 0 of ``doy``, ``YYYY-MM-DD`` or ``YYYYMMDD``.
        labels: ``{names, ignore_codes, read}``: ``names`` = ``"pastis"`` (the 20 PASTIS
            classes), ``"synthetic"`` (the 11 classes of the synthetic generator) or a
            list of names, index = label; ``ignore_codes`` = raw labels mapped to
            ``ignore_index`` = ``ignore_codes[0]`` (a class index in ``[0, K)``), excluded
            from loss and metrics (PASTIS: ``[19]``, void only, or ``[0, 19]``, background
            and void); ``read`` = read ``ANNOTATIONS/``: ``True``, ``False`` (prediction
            only) or ``None`` (if the folder exists). Without labels only whole patches
            are served (``predict.py``); training and evaluation stop with a clear error.
        crop_size: Side of the training crops, pixels (random position per access);
            ``None`` = whole patches.
        eval_crop: ``"full"`` (whole patches) or ``"center"`` (central ``crop_size``
            window) for validation and test.
        batch_size: Patches per batch.
        num_workers: DataLoader worker processes (persistent when > 0).
        radiometry: Per modality (our names or PASTIS-R's), how the stored values become
            physical units and which are no data: ``{s2: {scale: 1.0e-4}, s1_asc: {units:
            linear}, ...}`` (:class:`~mtan_s1s2.data.radiometry.Radiometry`; defaults:
            :func:`~mtan_s1s2.data.radiometry.default_radiometry`).
        norm_stats: ``"auto"`` (per-channel mean/std over the valid observations of the
            training folds, cached as ``NORM_S1S2_folds_<train folds>.json`` beside the
            data), ``None`` (no normalisation) or ``{modality: {"mean": [C], "std": [C]}}``.
        stats_file: Where the ``auto`` statistics are cached; ``None`` = under ``root``
            (use this for a read-only dataset folder).
        stats_max_patches: Use at most this many (evenly spaced) training patches for the
            ``auto`` statistics; ``None`` = all.
        predict_split: Split served by :meth:`predict_dataloader` (whole patches, in
            ``metadata.geojson`` order).
        derived: ``data.derived``: derived inputs (spectral indices, the S1 cross-ratio;
            :mod:`mtan_s1s2.data.derived`) appended to the channels of their modality; the
            bands are PASTIS-R's (S2: B02-B12 as in the files, S1: VV, VH, VH/VV).

    Attributes:
        modalities: Modalities of every batch (our names), in the given order.
        in_channels: Bands per modality, read from the files, e.g. ``{"s2": 10, "s1_asc": 3}``.
        num_classes: ``K = len(labels.names)``.
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
        split: Mapping[str, Any] | None = None,
        modalities: Sequence[str] = ("s2", "s1_asc", "s1_desc"),
        reference_date: str | int = PASTIS_REFERENCE_DATE,
        labels: Mapping[str, Any] | None = None,
        crop_size: int | None = 64,
        eval_crop: Literal["full", "center"] = "full",
        batch_size: int = 4,
        num_workers: int = 0,
        radiometry: Mapping[str, Mapping[str, Any]] | None = None,
        norm_stats: str | Mapping[str, Mapping[str, Sequence[float]]] | None = "auto",
        stats_file: str | None = None,
        stats_max_patches: int | None = None,
        predict_split: Split = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, norm_stats, predict_split, derived)
        self.modalities = resolve_modalities(modalities)
        label_cfg: dict[str, Any] = {"names": "pastis", "ignore_codes": [19], "read": None}
        label_cfg.update(section(labels, PASTIS_LABEL_KEYS, "data.labels"))
        split_cfg: dict[str, Any] = {"by": "folds", "folds": None, "fold": None, "n_folds": 5}
        split_cfg.update(section(split, PASTIS_SPLIT_KEYS, "data.split"))
        if split_cfg["by"] != "folds":
            raise ValueError(
                f"data.split.by must be 'folds' for PASTIS (the Fold of each patch in {METADATA_FILE}), got "
                f"{split_cfg['by']!r}."
            )
        read = label_cfg["read"]
        if read is None:
            read = root is None or (Path(str(root)).expanduser() / LABEL_FOLDER).is_dir()
            if not read:
                log.info("No %s/ in %s: labels are not read (prediction only).", LABEL_FOLDER, root)
        self.has_labels = bool(read)
        self.root = check_root(root, self.modalities, labels=self.has_labels)
        self._set_crops(crop_size, eval_crop)
        self.reference_date = resolve_reference_date(reference_date)
        named = {PASTIS_NAMES.get(str(k), str(k)): v for k, v in (radiometry or {}).items()}
        self.radiometry = radiometry_per_modality(named, self.modalities)
        self.stats_file = stats_file
        if stats_max_patches is not None and int(stats_max_patches) < 1:
            raise ValueError(f"data.stats_max_patches must be >= 1 or null, got {stats_max_patches}.")
        self.stats_max_patches = None if stats_max_patches is None else int(stats_max_patches)

        self._set_labels(label_cfg["names"], label_cfg["ignore_codes"] or ())
        self._scan_patches(split_cfg["folds"], split_cfg["fold"], int(split_cfg["n_folds"]))

    def _set_crops(self, crop_size: int | None, eval_crop: Literal["full", "center"]) -> None:
        """Check and keep the crop settings (``data.crop_size``, ``data.eval_crop``)."""
        if eval_crop not in ("full", "center"):
            raise ValueError(f"data.eval_crop must be 'full' or 'center', got {eval_crop!r}.")
        if eval_crop == "center" and crop_size is None:
            raise ValueError("data.eval_crop=center needs data.crop_size (the window side, pixels).")
        if crop_size is not None and int(crop_size) < 1:
            raise ValueError(f"data.crop_size must be a positive number of pixels or null, got {crop_size}.")
        self.crop_size = None if crop_size is None else int(crop_size)
        self.eval_crop = eval_crop

    def _set_labels(self, names: str | Sequence[str], ignore_codes: Sequence[int]) -> None:
        """Class names, ignored raw labels (the first is the ignore_index) and the raw label -> class lookup."""
        self.class_names = resolve_class_names(names)
        self.num_classes = len(self.class_names)
        self.ignore_labels = [int(v) for v in ignore_codes]
        if not self.ignore_labels:
            raise ValueError(
                "data.labels.ignore_codes is empty: list the raw label(s) to ignore; the first one is the ignore_index "
                "(e.g. data.labels.ignore_codes=[19])."
            )
        if any(v < 0 for v in self.ignore_labels):
            raise ValueError(f"data.labels.ignore_codes must be non-negative raw labels, got {self.ignore_labels}.")
        ignore_index = self.ignore_labels[0]
        if not 0 <= ignore_index < self.num_classes:
            codes = ",".join(str(v) for v in self.ignore_labels)
            raise ValueError(
                f"data.labels.ignore_codes[0]={ignore_index} is the ignore_index and must be a class index in "
                f"[0, {self.num_classes}) of data.labels.names; list a class index first (e.g. "
                f"data.labels.ignore_codes=[0,{codes}]) or add a class name for it."
            )
        self.ignore_index = ignore_index
        self.label_lut = label_lookup(self.num_classes, self.ignore_labels, self.ignore_index)

    def _scan_patches(self, folds: Mapping[str, int | Sequence[int]] | None, fold: int | None, n_folds: int) -> None:
        """Read the metadata, select the folds of each split and scan the patch files (bands, sizes)."""
        all_records = read_metadata(self.root, self.modalities, self.reference_date)
        self.all_records = all_records
        self.fold = None if fold is None else int(fold)
        if self.fold is not None:
            folds = utae_folds(self.fold, int(n_folds))
        self.folds = self._check_folds(folds or DEFAULT_FOLDS, all_records)
        self.records: dict[str, list[PatchRecord]] = {
            s: [r for r in all_records if r.fold in self.folds[s]] for s in SPLITS
        }
        doys = [d for r in all_records for d in r.doy.values() if len(d)]
        self._doy_range = (float(min(d.min() for d in doys)), float(max(d.max() for d in doys))) if doys else None
        in_channels: dict[str, int] = {}
        self.sizes: dict[str, list[tuple[int, int]]] = {}
        for split in SPLITS:
            channels, self.sizes[split] = scan_patches(
                self.root, self.records[split], self.modalities, labels=self.has_labels
            )
            for m, c in channels.items():
                if in_channels.setdefault(m, c) != c:
                    raise ValueError(f"{m} files have C={c} bands in the {split} folds but {in_channels[m]} elsewhere.")
            self._check_sizes(split)
        self.in_channels = in_channels

    def _check_folds(self, folds: Mapping[str, Any], records: Sequence[PatchRecord]) -> dict[str, list[int]]:
        present = sorted({r.fold for r in records})
        unknown = sorted(set(folds) - set(SPLITS))
        if unknown:
            raise ValueError(f"data.split.folds has unknown split(s) {unknown}; use train, val and test.")
        out: dict[str, list[int]] = {}
        for split in SPLITS:
            if split not in folds:
                raise ValueError(
                    f"data.split.folds has no {split!r} entry; give the Fold values of each of {list(SPLITS)}."
                )
            value = folds[split]
            chosen = [int(value)] if isinstance(value, (int, np.integer)) else [int(v) for v in value]
            if (chosen or split == "train") and not any(r.fold in chosen for r in records):
                raise ValueError(
                    f"data.split.folds.{split}={chosen} selects no patch of {self.root / METADATA_FILE}; the folds "
                    f"present are {present}."
                )
            out[split] = chosen
        for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
            shared = sorted(set(out[a]) & set(out[b]))
            if shared:
                log.warning(
                    "data.split.folds: %s and %s share fold(s) %s; their metrics are not independent.", a, b, shared
                )
        return out

    def _check_sizes(self, split: str) -> None:
        sizes = self.sizes[split]
        c = self.crop_size
        if c is not None:
            small = [(r.patch_id, s) for r, s in zip(self.records[split], sizes, strict=True) if min(s) < c]
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

    # --- datasets and normalisation ----------------------------------------------------

    def build_dataset(self, split: str, whole: bool = False) -> PASTISDataset:
        """Raw patches of ``split``.

        Random crops for training, full or central windows for validation and test
        (``eval_crop``), whole patches when ``whole``.

        Raises:
            ValueError: If a training/evaluation form is asked for without labels.
        """
        if not whole and not self.has_labels:
            raise ValueError(
                f"The {split} split needs labels, but there is no {LABEL_FOLDER}/ folder in "
                f"data.root={str(self.root)!r} (or data.labels.read=false): training and evaluation need it; "
                "predict.py works without."
            )
        if whole:
            crop: CropMode = "full"
        elif split == "train":
            crop = "random"
        else:
            crop = "full" if self.eval_crop == "full" else "center"
        return PASTISDataset(
            self.root, self.records[split], self.modalities, self.sizes[split], crop=crop,
            crop_size=self.crop_size, radiometry=self.radiometry, label_lut=self.label_lut,
            num_classes=self.num_classes, labels=self.has_labels,
        )  # fmt: skip

    def norm_stats_cache(self) -> tuple[Path, dict[str, Any]]:
        """``<root>/NORM_S1S2_folds_<train folds>.json`` (or ``stats_file``) and its key.

        The key holds the training patch ids, the radiometry and ``stats_max_patches``.
        """
        train_folds = sorted(self.folds["train"])
        path = Path(self.stats_file) if self.stats_file else self.root / stats_filename(train_folds)
        ids = ",".join(str(r.patch_id) for r in self.records["train"])
        key = {
            "train_folds": train_folds,
            "n_patches": len(self.records["train"]),
            "patch_ids_sha1": hashlib.sha1(ids.encode()).hexdigest(),
            "max_patches": self.stats_max_patches,
            "radiometry": {m: dataclasses.asdict(r) for m, r in self.radiometry.items()},
        }
        return path, key

    def compute_norm_stats(self, modalities: Sequence[str]) -> NormStats:
        """Statistics over the whole training patches (at most ``stats_max_patches``, evenly spaced)."""
        raw = PASTISDataset(
            self.root,
            self.records["train"],
            self.modalities,
            self.sizes["train"],
            crop="full",
            radiometry=self.radiometry,
            labels=False,
        )
        n = len(raw)
        indices = list(range(n))
        if self.stats_max_patches is not None and self.stats_max_patches < n:
            indices = sorted({int(i) for i in np.linspace(0, n - 1, self.stats_max_patches)})
        folds = "-".join(str(f) for f in sorted(self.folds["train"]))
        first = raw[indices[0]]
        for m in modalities:
            warning = self.radiometry[m].plausibility(first[m]["x"].numpy(), first[m]["mask"].numpy(), m)
            if warning:
                log.warning("%s (first training patch of %s)", warning, self.root)
        stats = compute_norm_stats(
            Subset(self.with_derived(raw), indices), list(modalities), what=f"the training folds {folds}"
        )
        raw.report.log(f"Training folds {folds} of {self.root}")
        return stats


__all__ = [
    "DEFAULT_FOLDS",
    "PASTIS_LABEL_KEYS",
    "PASTIS_SPLIT_KEYS",
    "PASTISDataModule",
    "stats_filename",
    "utae_folds",
]
