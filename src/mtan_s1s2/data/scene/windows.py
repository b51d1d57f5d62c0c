"""Training windows of scenes: the samples of each split, as tensors of the batch contract.

Samples are windows of ``data.split.window`` px (default ``block_size``, on the block
lattice of :mod:`~mtan_s1s2.data.scene.groups`) holding at least one labelled pixel of the
split; the labels of pixels of other splits are set to ``ignore_index`` in that split's
samples, so no pixel is ever trained and tested on. Border windows are padded to the full
size (mask False, label ``ignore_index``), so every sample of a batch has one shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from rasterio.windows import Window
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.group_splits import SPLIT_NAMES
from mtan_s1s2.data.parcels import NO_PARCEL
from mtan_s1s2.data.scene.grid import lattice_origin, tiles
from mtan_s1s2.data.scene.groups import SceneSplit, SplitConfig
from mtan_s1s2.data.scene.scene import Scene


def split_windows(
    scenes: Sequence[Scene], split: SceneSplit, cfg: SplitConfig, ignore_index: int
) -> dict[str, list[tuple[int, Window]]]:
    """Per split, ``(scene index, window)`` of every window holding a labelled pixel of it."""
    out: dict[str, list[tuple[int, Window]]] = {s: [] for s in SPLIT_NAMES}
    size = cfg.window_size
    for i, scene in enumerate(scenes):
        origin = lattice_origin(scene.grid) if cfg.by == "blocks" else (0, 0)
        labelled = split.labels[i] != ignore_index
        for w in tiles(scene.grid, size, origin):
            r0, c0, h, wd = int(w.row_off), int(w.col_off), int(w.height), int(w.width)
            sp = split.splits[i][r0 : r0 + h, c0 : c0 + wd][labelled[r0 : r0 + h, c0 : c0 + wd]]
            for k, s in enumerate(SPLIT_NAMES):
                if (sp == k).any():
                    out[s].append((i, w))
    return out


def area_windows(
    scenes: Sequence[Scene], areas: Sequence[np.ndarray], size: int, on_lattice: bool = True
) -> list[tuple[int, Window]]:
    """``(scene index, window)`` of every tile holding a pixel of the scene's ``area``.

    Args:
        scenes: The scenes.
        areas: Per scene, ``(H, W) bool`` pixels to serve.
        size: Tile side, pixels.
        on_lattice: Tiles on the block lattice (``data.split.by=blocks``), else from the
            scene's corner.
    """
    out: list[tuple[int, Window]] = []
    for i, (scene, area) in enumerate(zip(scenes, areas, strict=True)):
        origin = lattice_origin(scene.grid) if on_lattice else (0, 0)
        for w in tiles(scene.grid, size, origin):
            r0, c0, h, wd = int(w.row_off), int(w.col_off), int(w.height), int(w.width)
            if area[r0 : r0 + h, c0 : c0 + wd].any():
                out.append((i, w))
    return out


class SceneWindowDataset(Dataset[Sample]):
    """Windows of scenes as samples of the batch contract (raw physical values).

    Args:
        scenes: The scenes.
        items: ``(scene index, window)`` of every sample.
        size: Side every sample is padded to (mask False, label ``ignore_index``).
        labels: Per scene ``(H, W)`` class indices, or None (samples without labels).
        splits: Per scene ``(H, W)`` split codes (with ``split_code``: pixels of other
            splits get ``ignore_index``).
        split_code: Index of the split these samples serve.
        ignore_index: Label of unlabelled pixels.
        cache: Keep every sample read in memory (small datasets read many times).
        parcels: Per scene ``(H, W) int64`` parcel index (:data:`~mtan_s1s2.data.parcels.NO_PARCEL`
            = none), or None: samples then carry no ``parcel`` entry.
    """

    def __init__(
        self,
        scenes: Sequence[Scene],
        items: Sequence[tuple[int, Window]],
        size: int,
        labels: Sequence[np.ndarray] | None = None,
        splits: Sequence[np.ndarray] | None = None,
        split_code: int | None = None,
        ignore_index: int = 0,
        cache: bool = False,
        parcels: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.scenes = list(scenes)
        self.items = list(items)
        self.size = int(size)
        self.labels = labels
        self.splits = splits
        self.split_code = split_code
        self.ignore_index = int(ignore_index)
        self.cache: dict[int, Sample] | None = {} if cache else None
        self.parcels = parcels

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index``: per modality ``x (T, C, s, s)``, ``doy (T,)``, ``mask (T, s, s)``; ``label``, ``parcel``.

        Raises:
            IndexError: If ``index`` is out of range.
        """
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for {len(self)} windows.")
        index = index % len(self)
        if self.cache is not None and index in self.cache:
            return self.cache[index]
        i, w = self.items[index]
        scene = self.scenes[i]
        data = scene.read(w)
        h, wd, s = int(w.height), int(w.width), self.size
        pad = ((0, s - h), (0, s - wd)) if (h, wd) != (s, s) else None
        sample: Sample = {}
        for m, d in data.items():
            x, mask = d["x"], d["mask"]
            if pad is not None:
                x = np.pad(x, ((0, 0), (0, 0), *pad))
                mask = np.pad(mask, ((0, 0), *pad))
            sample[m] = {"x": torch.from_numpy(x), "doy": torch.from_numpy(d["doy"]), "mask": torch.from_numpy(mask)}
        if self.labels is not None:
            r0, c0 = int(w.row_off), int(w.col_off)
            lab = self.labels[i][r0 : r0 + h, c0 : c0 + wd].astype(np.int64)
            if self.splits is not None and self.split_code is not None:
                lab = np.where(self.splits[i][r0 : r0 + h, c0 : c0 + wd] == self.split_code, lab, self.ignore_index)
            if pad is not None:
                lab = np.pad(lab, pad, constant_values=self.ignore_index)
            sample["label"] = torch.from_numpy(lab)
        if self.parcels is not None:
            r0, c0 = int(w.row_off), int(w.col_off)
            ids = self.parcels[i][r0 : r0 + h, c0 : c0 + wd]
            if pad is not None:
                ids = np.pad(ids, pad, constant_values=NO_PARCEL)
            sample["parcel"] = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
        sample["patch_id"] = index
        if self.cache is not None:
            self.cache[index] = sample
        return sample


class SceneAreaDataset(SceneWindowDataset):
    """Windows of scenes whose pixels outside an area are masked out (``task=pretrain``).

    Every observation of a pixel outside ``areas`` gets mask False (its values are never
    read), and every label is ``ignore_index``: the samples carry the area's pixels only,
    labelled or not.

    Args:
        scenes: The scenes.
        items: ``(scene index, window)`` of every sample (:func:`area_windows`).
        size: Side every sample is padded to.
        areas: Per scene, ``(H, W) bool`` pixels served.
        ignore_index: The label of every pixel.
        cache: Keep every sample read in memory.
    """

    def __init__(
        self,
        scenes: Sequence[Scene],
        items: Sequence[tuple[int, Window]],
        size: int,
        areas: Sequence[np.ndarray],
        ignore_index: int = 0,
        cache: bool = False,
    ) -> None:
        super().__init__(scenes, items, size, None, None, None, ignore_index, cache=False)
        self.areas = list(areas)
        self.area_cache: dict[int, Sample] | None = {} if cache else None

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index`` (see :class:`SceneWindowDataset`), masked to the area, labels ``ignore_index``."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for {len(self)} windows.")
        index = index % len(self)
        if self.area_cache is not None and index in self.area_cache:
            return self.area_cache[index]
        sample = super().__getitem__(index)
        i, w = self.items[index]
        r0, c0, h, wd = int(w.row_off), int(w.col_off), int(w.height), int(w.width)
        inside = np.zeros((self.size, self.size), bool)
        inside[:h, :wd] = self.areas[i][r0 : r0 + h, c0 : c0 + wd]
        keep = torch.from_numpy(inside)
        for value in sample.values():
            if isinstance(value, dict):
                value["mask"] = value["mask"] & keep
        sample["label"] = torch.full((self.size, self.size), self.ignore_index, dtype=torch.int64)
        if self.area_cache is not None:
            self.area_cache[index] = sample
        return sample


__all__ = ["SceneAreaDataset", "SceneWindowDataset", "area_windows", "split_windows"]
