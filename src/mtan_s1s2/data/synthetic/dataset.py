"""Synthetic S1/S2 patches as a map-style dataset (raw values, generated on the fly)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import CLASS_NAMES, MODALITY_CHANNELS, ORBIT_MODALITIES, Sample, check_modalities
from mtan_s1s2.data.datamodule import SPLITS
from mtan_s1s2.data.synthetic.generator import SyntheticConfig, generate_patch


class SyntheticSITSDataset(Dataset[Sample]):
    """Synthetic S1/S2 satellite image time series patches, generated on the fly.

    Sample ``i`` of split ``split`` is a pure function of ``(seed, split, i)``: it is
    generated from ``np.random.SeedSequence([seed, split_code, i])``, so any worker, order
    or modality subset gives the same arrays, and splits never share a patch.

    Args:
        n_samples: Number of patches.
        patch_size: Patch height and width ``H = W``, pixels (10 m).
        seed: Random seed.
        modalities: Modalities to return, among ``"s2"``, ``"s1_asc"``, ``"s1_desc"``.
        s2_revisit_days: S2 revisit interval, days.
        s2_drop_prob: Probability that an S2 acquisition is missing.
        s1_revisit_days: S1 revisit intervals (days) to draw from, per patch and orbit.
        cloud_prob: Mean probability of a (partly) cloudy S2 date, seasonal.
        split: ``"train"``, ``"val"`` or ``"test"``: selects an independent random stream.

    Each item follows the contract of :mod:`mtan_s1s2.data.batch`, in physical units::

        {"s2": {"x": (T, 10, H, W) float32 reflectance, "doy": (T,) float32,
                "mask": (T, H, W) bool},
         "s1_asc" / "s1_desc": {"x": (T, 3, H, W) float32 backscatter (VV, VH, VH/VV) dB,
                "doy": (T,) float32, "mask": (T, H, W) bool},
         "label": (H, W) int64, "patch_id": int}

    with ``doy`` in days since 1 January, ``mask`` True = valid (NaN only under a False
    mask).

    Raises:
        ValueError: On a negative or non-integer ``n_samples``, an unknown split or
            modality, or invalid generator settings.
    """

    def __init__(
        self,
        n_samples: int,
        patch_size: int = 32,
        seed: int = 0,
        modalities: Sequence[str] = ("s2", "s1_asc", "s1_desc"),
        s2_revisit_days: float = 5,
        s2_drop_prob: float = 0.15,
        s1_revisit_days: Sequence[int] = (6, 12),
        cloud_prob: float = 0.3,
        split: str = "train",
    ) -> None:
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 0:
            raise ValueError(f"n_samples must be a non-negative int, got {n_samples!r}.")
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; valid splits are {list(SPLITS)}.")
        if isinstance(s1_revisit_days, (int, float)):
            raise ValueError(f"s1_revisit_days must be a sequence of days, e.g. (6, 12), got {s1_revisit_days!r}.")
        self.n_samples = int(n_samples)
        self.seed = int(seed)
        self.split = split
        self.modalities = check_modalities(modalities, valid=ORBIT_MODALITIES)
        self.config = SyntheticConfig(
            patch_size=patch_size,
            s2_revisit_days=float(s2_revisit_days),
            s2_drop_prob=float(s2_drop_prob),
            s1_revisit_days=tuple(int(r) if float(r) == int(r) else float(r) for r in s1_revisit_days),  # type: ignore[misc]
            cloud_prob=float(cloud_prob),
        )
        self.in_channels = {m: len(MODALITY_CHANNELS[m]) for m in self.modalities}
        self.class_names = CLASS_NAMES

    def __len__(self) -> int:
        return self.n_samples

    def __getitem__(self, index: int) -> Sample:
        """Generate patch ``index`` (see the class docstring for the contract).

        Raises:
            IndexError: If ``index`` is out of range.
        """
        i = int(index)
        if i < 0:
            i += self.n_samples
        if not 0 <= i < self.n_samples:
            raise IndexError(f"index {index} is out of range for a dataset of {self.n_samples} patches.")
        raw = generate_patch(self.config, (self.seed, SPLITS.index(self.split), i), self.modalities)
        sample: Sample = {}
        for m in self.modalities:
            sample[m] = {
                "x": torch.from_numpy(np.ascontiguousarray(raw[m]["x"], dtype=np.float32)),
                "doy": torch.from_numpy(raw[m]["doy"]),
                "mask": torch.from_numpy(raw[m]["mask"]),
            }
        sample["label"] = torch.from_numpy(raw["label"])
        sample["patch_id"] = i
        return sample

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}(n_samples={self.n_samples}, split={self.split!r}, seed={self.seed}, "
            f"patch_size={c.patch_size}, modalities={self.modalities}, s2_revisit_days={c.s2_revisit_days}, "
            f"s1_revisit_days={c.s1_revisit_days})"
        )


__all__ = ["SyntheticSITSDataset"]
