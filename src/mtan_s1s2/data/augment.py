"""Training-time augmentation of SITS batches: drop acquisitions, shift dates, add noise.

Small real datasets (a few hundred labelled pixels) overfit quickly; the SITS literature
regularises with augmentations that keep the label true:

* **temporal dropout** (``temporal_dropout``): each acquisition of a sample is dropped
  (its mask set False, every pixel at that date) with this probability, as the random
  temporal dropout of the PASTIS-R fusion paper (Garnot et al., 2022). Also a random
  subset of dates: the model learns not to rely on one cloud-free date. A sample keeps at
  least one of its valid dates per modality.
* **date shift** (``date_shift_days``): every date of a sample (all modalities alike)
  moves by one random offset, uniform in ``[-s, s]`` days: phenology a little earlier or
  later (another year, another latitude).
* **Gaussian noise** (``noise_std``): added to every valid value, in normalised units
  (the datamodule normalises before augmenting, so ``0.05`` is 5 % of a channel's std).

All are off (0) by default. :class:`SITSAugment` works on collated batches on their device;
the training module applies it to training batches only (config ``model.augment``,
:meth:`~mtan_s1s2.lit_module.SITSClassifierModule.on_after_batch_transfer`), so a recipe
(model, regularisation, augmentation) is one ``model=...`` option. It draws from torch's
global generator, seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from mtan_s1s2.data.batch import Batch, modalities_of


@dataclass(frozen=True)
class SITSAugment:
    """Augmentations of a training batch (config ``model.augment``).

    Args:
        temporal_dropout: Probability of dropping each acquisition of a sample, in [0, 1).
        date_shift_days: Half-width of the uniform date shift of a sample, days (>= 0).
        noise_std: Standard deviation of the Gaussian noise on valid values (>= 0).

    Raises:
        ValueError: On a value out of range (naming the key).
    """

    temporal_dropout: float = 0.0
    date_shift_days: float = 0.0
    noise_std: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.temporal_dropout < 1.0:
            raise ValueError(f"model.augment.temporal_dropout must be in [0, 1), got {self.temporal_dropout}.")
        if self.date_shift_days < 0:
            raise ValueError(f"model.augment.date_shift_days must be >= 0, got {self.date_shift_days}.")
        if self.noise_std < 0:
            raise ValueError(f"model.augment.noise_std must be >= 0, got {self.noise_std}.")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | SITSAugment | None) -> SITSAugment | None:
        """From ``{temporal_dropout, date_shift_days, noise_std}``; None when every value is 0.

        Raises:
            ValueError: On an unknown key (listing the valid ones) or a value out of range.
        """
        if isinstance(cfg, SITSAugment):
            return cfg if cfg.active else None
        values = dict(cfg or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(f"Unknown model.augment key(s) {unknown}; valid keys are {valid}.")
        out = cls(**{k: float(v) for k, v in values.items()})
        return out if out.active else None

    @property
    def active(self) -> bool:
        """True if any augmentation is on."""
        return bool(self.temporal_dropout or self.date_shift_days or self.noise_std)

    def __call__(self, batch: Batch) -> Batch:
        """An augmented copy of ``batch``.

        Args:
            batch: Per modality ``x (B, T, C, H, W)``, ``doy (B, T)``, ``mask (B, T, H, W)``.
        """
        out = dict(batch)
        mods = modalities_of(batch)
        if not mods:
            return out
        ref = batch[mods[0]]["doy"]
        B = ref.shape[0]
        shift = None
        if self.date_shift_days:
            shift = (torch.rand(B, 1, device=ref.device, dtype=ref.dtype) * 2 - 1) * self.date_shift_days
        for m in mods:
            x, doy, mask = batch[m]["x"], batch[m]["doy"], batch[m]["mask"]
            if self.temporal_dropout:
                mask = self._drop_dates(mask)
            if shift is not None:
                doy = doy + shift
            if self.noise_std:
                noise = torch.randn_like(x) * self.noise_std
                x = x + noise * mask[:, :, None].to(x.dtype)
            out[m] = {**batch[m], "x": x, "doy": doy, "mask": mask}
        return out

    def _drop_dates(self, mask: torch.Tensor) -> torch.Tensor:
        """Drop each date of each sample with ``temporal_dropout``; keep one valid date if all would go."""
        B, T = mask.shape[:2]
        if T == 0:  # no date to drop (a batch of scenes without an optional modality)
            return mask
        has_data = mask.flatten(2).any(dim=2)  # (B, T) dates with a valid pixel
        keep = torch.rand(B, T, device=mask.device) >= self.temporal_dropout
        none_left = ~(keep & has_data).any(dim=1)  # (B,)
        if none_left.any():  # keep one random valid date of those samples
            score = torch.rand(B, T, device=mask.device) + has_data.float()
            keep = keep | (none_left[:, None] & (score == score.max(dim=1, keepdim=True).values))
        return mask & keep.reshape(B, T, *([1] * (mask.ndim - 2)))


__all__ = ["SITSAugment"]
