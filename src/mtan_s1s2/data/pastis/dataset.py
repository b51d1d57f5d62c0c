"""Patches of a PASTIS-R-format folder (raw values, read memory-mapped), and its labels.

Labels (``TARGET`` channel 0), PASTIS nomenclature: 0 = background (not a crop parcel),
1-18 = crop types, 19 = void (parcels mostly outside the patch, or of uncertain class).
Every label listed in ``data.labels.ignore_codes`` becomes ``ignore_index``, which the loss and every
metric leave out (see :mod:`mtan_s1s2.data.pastis.datamodule` for the two usual
conventions).

Values: the stored values become physical units with each modality's
:class:`~mtan_s1s2.data.radiometry.Radiometry` (``data.radiometry``: scale, S2 offsets, S1
units, no-data). Masks: PASTIS-R has no cloud mask, so ``mask`` is False only where an
observation is no-data: NaN or infinite, a no-data fill (S2: DN 0 in any band; S1: 0 in
every channel, by default) or a non-positive linear backscatter.

Files are read memory-mapped (``np.load(mmap_mode="r")``): only the window of each patch
that is served is read from disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import CLASS_NAMES, Sample
from mtan_s1s2.data.pastis.layout import PatchRecord, label_path, modality_path
from mtan_s1s2.data.radiometry import MaskReport, Radiometry, default_radiometry

CropMode = Literal["random", "center", "full"]

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
"""Named nomenclatures for ``data.labels.names``."""


def resolve_class_names(class_names: str | Sequence[str]) -> tuple[str, ...]:
    """``"pastis"``, ``"synthetic"`` or an explicit list of names (index = label).

    Raises:
        ValueError: On an unknown name or fewer than two classes.
    """
    if isinstance(class_names, str):
        if class_names not in CLASS_NAME_SETS:
            raise ValueError(
                f"Unknown data.labels.names={class_names!r}; use one of {sorted(CLASS_NAME_SETS)} or a list of names."
            )
        return CLASS_NAME_SETS[class_names]
    names = tuple(str(n) for n in class_names)
    if len(names) < 2:
        raise ValueError(f"data.labels.names needs at least two classes, got {list(names)}.")
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


class PASTISDataset(Dataset[Sample]):
    """Patches of a PASTIS-R-format folder, read memory-mapped.

    Each item follows :mod:`mtan_s1s2.data.batch`::

        {"s2": {"x": (T, C, h, w) float32 reflectance, as stored (raw),
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
        radiometry: Per modality, how stored values become physical units and which are no
            data (default: :func:`~mtan_s1s2.data.radiometry.default_radiometry`).
        label_lut: Raw label -> training label (see :func:`label_lookup`).
        num_classes: ``K``; raw labels must map into ``[0, K)``.
        labels: Read the labels (``False``: samples without ``label``, e.g. for statistics).
    """

    def __init__(
        self,
        root: Path,
        records: Sequence[PatchRecord],
        modalities: Sequence[str],
        sizes: Sequence[tuple[int, int]],
        crop: CropMode = "full",
        crop_size: int | None = None,
        radiometry: Mapping[str, Radiometry] | None = None,
        label_lut: np.ndarray | None = None,
        num_classes: int | None = None,
        labels: bool = True,
    ) -> None:
        if crop not in ("random", "center", "full"):
            raise ValueError(f"crop must be 'random', 'center' or 'full', got {crop!r}.")
        self.root = Path(root)
        self.records = list(records)
        self.modalities = list(modalities)
        self.sizes = list(sizes)
        self.crop = crop
        self.crop_size = crop_size
        self.radiometry = {m: (radiometry or {}).get(m) or default_radiometry(m) for m in self.modalities}
        self.report = MaskReport()
        """Invalid observations read so far, by reason."""
        self.label_lut = label_lut
        self.num_classes = num_classes
        self.labels = labels

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

    def read_modality(
        self, index: int, modality: str, window: tuple[int, int, int, int] | None = None
    ) -> dict[str, np.ndarray]:
        """One modality of patch ``index``, in physical units, un-normalised.

        Returns:
            ``{"x": (T, C, h, w) float32, "doy": (T,) float32, "mask": (T, h, w) bool}``.
        """
        rec = self.records[index]
        y0, x0, h, w = window or (0, 0, *self.sizes[index])
        arr = np.load(modality_path(self.root, modality, rec.patch_id), mmap_mode="r")
        stored = np.asarray(arr[:, :, y0 : y0 + h, x0 : x0 + w])  # reads the window only
        x, mask, reasons = self.radiometry[modality].apply(stored, rec.dates[modality])
        self.report.add(modality, mask.size, reasons)
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
                f"index in [0, {self.num_classes}) of data.labels.names; set data.labels.names to your nomenclature "
                "or list the value in data.labels.ignore_codes."
            )
        return mapped

    def __getitem__(self, index: int) -> Sample:
        """Read patch ``index`` (see the class docstring for the contract).

        Raises:
            IndexError: If ``index`` is out of range.
            ValueError: If a label is not a configured class.
        """
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} is out of range for a dataset of {len(self)} patches.")
        window = self._window(i)
        sample: Sample = {}
        for m in self.modalities:
            d = self.read_modality(i, m, window)
            sample[m] = {
                "x": torch.from_numpy(d["x"]),
                "doy": torch.from_numpy(d["doy"]),
                "mask": torch.from_numpy(d["mask"]),
            }
        if self.labels:
            sample["label"] = torch.from_numpy(self.read_label(i, window))
        sample["patch_id"] = self.records[i].patch_id
        return sample

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, n_patches={len(self)}, modalities={self.modalities}, "
            f"crop={self.crop!r}, crop_size={self.crop_size})"
        )


__all__ = [
    "CLASS_NAME_SETS",
    "PASTIS_CLASS_NAMES",
    "CropMode",
    "PASTISDataset",
    "label_lookup",
    "resolve_class_names",
]
