"""Pixels of a table as samples of the batch contract: ``(T, C, 1, 1)`` patches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.dates import days_since
from mtan_s1s2.data.table.reader import PixelTable


class PixelTableDataset(Dataset[Sample]):
    """Some pixels of a :class:`~mtan_s1s2.data.table.reader.PixelTable`, one sample each.

    A sample is a 1x1 patch (:mod:`mtan_s1s2.data.batch`)::

        {m: {"x": (T, C, 1, 1) float32, "doy": (T,) float32, "mask": (T, 1, 1) bool}, ...,
         "label": (1, 1) int64, "patch_id": int}

    so the model, the metrics and the timing treat pixels like any patch. Values under a
    False mask are set to 0.

    Args:
        table: The pixels, in physical units.
        indices: Which pixels (positions in ``table``), in order.
        labels: ``(N,)`` class index of every pixel of ``table`` (0 = unlabelled).
        reference_date: Day 0 of ``doy`` (days since it, the time of day as the fraction:
            :func:`~mtan_s1s2.data.dates.days_since`).
        parcels: ``(N,) int64`` parcel index of every pixel of ``table``, or None; samples
            then carry ``"parcel": (1, 1) int64``.
    """

    def __init__(
        self,
        table: PixelTable,
        indices: Sequence[int],
        labels: np.ndarray,
        reference_date: Any,
        parcels: np.ndarray | None = None,
    ) -> None:
        self.table = table
        self.indices = [int(i) for i in indices]
        self.labels = labels
        self.reference_date = np.datetime64(reference_date, "s")
        self.modalities = list(table.x)
        self.parcels = parcels

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Sample:
        """Pixel ``index`` of this split as a 1x1 sample."""
        i = self.indices[index]
        sample: Sample = {}
        for m in self.modalities:
            valid = self.table.valid[m][i]
            x = np.where(valid[:, None], self.table.x[m][i], 0.0).astype(np.float32)
            doy = days_since(self.table.dates[m][i], self.reference_date)
            sample[m] = {
                "x": torch.from_numpy(x[:, :, None, None]),
                "doy": torch.from_numpy(doy),
                "mask": torch.from_numpy(valid[:, None, None].copy()),
            }
        sample["label"] = torch.full((1, 1), int(self.labels[i]), dtype=torch.int64)
        if self.parcels is not None:
            sample["parcel"] = torch.full((1, 1), int(self.parcels[i]), dtype=torch.int64)
        sample["patch_id"] = i
        return sample

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pixels={len(self)}, modalities={self.modalities})"


__all__ = ["PixelTableDataset"]
