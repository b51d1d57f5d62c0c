"""``data=synthetic``: train/val/test splits of the synthetic S1/S2 generator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mtan_s1s2.data.batch import CLASS_NAMES, MODALITY_CHANNELS, ORBIT_MODALITIES, check_modalities
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.data.synthetic.dataset import SyntheticSITSDataset
from mtan_s1s2.data.synthetic.generator import DAYS_PER_YEAR, GENERATOR_KEYS, PRESETS


class SyntheticSITSDataModule(SITSDataModule):
    """Train/val/test splits of :class:`~mtan_s1s2.data.synthetic.dataset.SyntheticSITSDataset`.

    Each split draws from its own random stream (``split`` in the patch key), so the
    splits never share a patch whatever the seed. Batches follow
    :mod:`mtan_s1s2.data.batch`: per modality ``x (B, T, C, H, W)``, ``doy (B, T)``,
    ``mask (B, T, H, W)``; ``label (B, H, W)``, ``patch_id (B,)``.

    Args:
        preset: Name in :data:`~mtan_s1s2.data.synthetic.generator.PRESETS` (``"tiny"``,
            ``"default"``, ``"bench"``): sizes and generator settings.
        n_train: Training patches; ``None`` = the preset's.
        n_val: Validation patches; ``None`` = the preset's.
        n_test: Test patches; ``None`` = the preset's.
        patch_size: Patch height and width, pixels; ``None`` = the preset's.
        batch_size: Patches per batch.
        num_workers: DataLoader worker processes (persistent when > 0).
        seed: Dataset seed.
        modalities: Modalities to load, among ``"s2"``, ``"s1_asc"``, ``"s1_desc"``.
        norm_stats: ``{modality: {"mean": [C], "std": [C]}}`` to normalise ``x``, ``"auto"``
            to compute them from the training split, or ``None`` (raw values).
        generator: Optional generator settings overriding the preset, among
            ``s2_revisit_days``, ``s2_drop_prob``, ``s1_revisit_days``, ``cloud_prob``.
        predict_split: Split served by ``predict_dataloader``.
        derived: ``data.derived``: derived inputs (spectral indices, the S1 cross-ratio;
            :mod:`mtan_s1s2.data.derived`) appended to the channels of their modality.

    Attributes:
        modalities: Modalities of every batch, in the given order.
        in_channels: Channels per modality, e.g. ``{"s2": 10, "s1_asc": 3, "s1_desc": 3}``
            (plus the derived inputs of each).
        num_classes: Number of classes including the unlabelled class 0 (11).
        ignore_index: Label of unlabelled pixels (0).
        class_names: Class names, index = label.

    Raises:
        ValueError: On an unknown preset, modality or generator setting, or invalid sizes.
    """

    def __init__(
        self,
        preset: str = "default",
        n_train: int | None = None,
        n_val: int | None = None,
        n_test: int | None = None,
        patch_size: int | None = None,
        batch_size: int = 8,
        num_workers: int = 0,
        seed: int = 0,
        modalities: Sequence[str] = ("s2", "s1_asc", "s1_desc"),
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = None,
        generator: Mapping[str, Any] | None = None,
        predict_split: str = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, norm_stats, predict_split, derived)
        if preset not in PRESETS:
            raise ValueError(f"Unknown synthetic preset {preset!r}; valid presets are {sorted(PRESETS)}.")
        generator = dict(generator or {})
        unknown = sorted(set(generator) - set(GENERATOR_KEYS))
        if unknown:
            raise ValueError(
                f"Unknown generator setting(s) {unknown}; valid ones are {list(GENERATOR_KEYS)} "
                "(sizes and patch_size have their own arguments)."
            )
        cfg = PRESETS[preset]
        self.preset = preset
        self.sizes = {
            "train": cfg["n_train"] if n_train is None else int(n_train),
            "val": cfg["n_val"] if n_val is None else int(n_val),
            "test": cfg["n_test"] if n_test is None else int(n_test),
        }
        self.dataset_kwargs: dict[str, Any] = {
            "patch_size": cfg["patch_size"] if patch_size is None else int(patch_size),
            "seed": int(seed),
            "modalities": check_modalities(modalities, valid=ORBIT_MODALITIES),
            **{k: cfg[k] for k in GENERATOR_KEYS},
            **generator,
        }
        self.modalities = list(self.dataset_kwargs["modalities"])
        self.in_channels = {m: len(MODALITY_CHANNELS[m]) for m in self.modalities}
        self.num_classes = len(CLASS_NAMES)
        self.ignore_index = 0
        self.class_names = CLASS_NAMES
        self._doy_range = (0.0, float(DAYS_PER_YEAR))  # the generator draws every date in [0, 365)
        # One (cheap, lazy) dataset now, so bad generator settings fail at instantiation.
        self.build_dataset("val")

    def build_dataset(self, split: str, whole: bool = False) -> SyntheticSITSDataset:
        """Patches of ``split`` (always whole)."""
        return SyntheticSITSDataset(n_samples=self.sizes[split], split=split, **self.dataset_kwargs)


__all__ = ["SyntheticSITSDataModule"]
