"""Lightning datamodule over the synthetic S1/S2 satellite image time series."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from mtan_s1s2.data.batch import CLASS_NAMES, MODALITY_CHANNELS, collate_sits
from mtan_s1s2.data.synthetic import GENERATOR_KEYS, PRESETS, SyntheticSITSDataset, check_modalities


class SyntheticSITSDataModule(L.LightningDataModule):
    """Train/val/test splits of :class:`~mtan_s1s2.data.synthetic.SyntheticSITSDataset`.

    Each split draws from its own random stream (``split`` in the patch key), so the
    splits never share a patch whatever the seed. Batches follow
    :mod:`mtan_s1s2.data.batch`: per modality ``x (B, T, C, H, W)``, ``doy (B, T)``,
    ``mask (B, T, H, W)``; ``label (B, H, W)``, ``patch_id (B,)``.

    Args:
        preset: Name in :data:`~mtan_s1s2.data.synthetic.PRESETS` (``"tiny"``,
            ``"default"``, ``"bench"``): sizes and generator settings.
        n_train: Training patches; ``None`` = the preset's.
        n_val: Validation patches; ``None`` = the preset's.
        n_test: Test patches; ``None`` = the preset's.
        patch_size: Patch height and width, pixels; ``None`` = the preset's.
        batch_size: Patches per batch.
        num_workers: DataLoader worker processes (persistent when > 0).
        seed: Dataset seed.
        modalities: Modalities to load, among ``"s2"``, ``"s1_asc"``, ``"s1_desc"``.
        norm_stats: Optional ``{modality: {"mean": [C], "std": [C]}}`` to normalise ``x``.
        generator: Optional generator settings overriding the preset, among
            ``s2_revisit_days``, ``s2_drop_prob``, ``s1_revisit_days``, ``cloud_prob``.

    Attributes:
        modalities: Modalities of every batch, in the given order.
        in_channels: Channels per modality, e.g. ``{"s2": 10, "s1_asc": 3, "s1_desc": 3}``.
        num_classes: Number of classes including the unlabelled class 0 (11).
        ignore_index: Label of unlabelled pixels (0).
        class_names: Class names, index = label.
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
        norm_stats: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
        generator: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if preset not in PRESETS:
            raise ValueError(f"Unknown synthetic preset {preset!r}; valid presets are {sorted(PRESETS)}.")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}.")
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
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.dataset_kwargs: dict[str, Any] = {
            "patch_size": cfg["patch_size"] if patch_size is None else int(patch_size),
            "seed": int(seed),
            "modalities": check_modalities(modalities),
            "norm_stats": norm_stats,
            **{k: cfg[k] for k in GENERATOR_KEYS},
            **generator,
        }
        self.modalities: list[str] = self.dataset_kwargs["modalities"]
        self.in_channels: dict[str, int] = {m: len(MODALITY_CHANNELS[m]) for m in self.modalities}
        self.num_classes: int = len(CLASS_NAMES)
        self.ignore_index: int = 0
        self.class_names: tuple[str, ...] = CLASS_NAMES
        self.datasets: dict[str, SyntheticSITSDataset] = {}
        # Build one (cheap, lazy) dataset now so bad settings fail at instantiation.
        self._make("val")

    def _make(self, split: str) -> SyntheticSITSDataset:
        if split not in self.datasets:
            self.datasets[split] = SyntheticSITSDataset(
                n_samples=self.sizes[split], split=split, **self.dataset_kwargs
            )
        return self.datasets[split]

    def setup(self, stage: str | None = None) -> None:
        """Create the datasets of ``stage`` (``fit``, ``validate``, ``test``, ``predict``)."""
        by_stage = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
        for split in by_stage.get(stage or "", ("train", "val", "test")):
            self._make(split)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self._make(split),
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_sits,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
