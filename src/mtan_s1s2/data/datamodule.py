"""The base datamodule of every SITS source: loaders, ``setup(stage)``, checks, normalisation.

A source (synthetic, PASTIS-R, ...) is a dataset of *raw* samples (physical units, the batch
contract of :mod:`mtan_s1s2.data.batch`) plus a thin subclass of :class:`SITSDataModule` that
says which dataset serves each split. The base class owns everything else, once:

* argument checks shared by every source (``batch_size``, ``num_workers``,
  ``predict_split``, ``norm_stats``), before any data is read;
* ``setup(stage)`` and the four loaders (the split served by ``predict_dataloader`` is
  ``predict_split``), all collating with :func:`~mtan_s1s2.data.batch.collate_sits`;
* derived inputs (``data.derived``: spectral indices, the S1 cross-ratio;
  :mod:`mtan_s1s2.data.derived`): their bands are looked up by name when a source sets
  :attr:`~SITSDataModule.in_channels`, they are appended to every raw sample and counted in
  ``in_channels``, so the model, the statistics and the checkpoint follow;
* normalisation: ``norm_stats`` from the config, or ``"auto"`` (computed over the raw
  training split by :func:`~mtan_s1s2.data.normalization.compute_norm_stats`, cached where
  the source gives a cache file), applied to every sample of every loader by
  :class:`~mtan_s1s2.data.normalization.NormalizedDataset`;
* the training order: one shuffle per ``(seed, epoch)``
  (:class:`~mtan_s1s2.data.resumable_sampler.ResumableRandomSampler`), recorded in checkpoints
  (:meth:`SITSDataModule.state_dict`), so a run resumed in the middle of an epoch trains
  on the batches it had not seen yet, in the order the uninterrupted run would have.

Training augmentations (:mod:`mtan_s1s2.data.augment`) are part of the training recipe and
applied by the LightningModule (``model.augment``) to normalised training batches.

After torchgeo's ``NonGeoDataModule`` (``torchgeo/datamodules/geo.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from mtan_s1s2.data.batch import MODALITY_CHANNELS, Sample, collate_sits
from mtan_s1s2.data.derived import DerivedDataset, DerivedInputs, check_derived_names
from mtan_s1s2.data.normalization import (
    NormalizedDataset,
    NormStats,
    check_norm_stats,
    compute_norm_stats,
    load_or_compute_norm_stats,
)
from mtan_s1s2.data.radiometry import Radiometry
from mtan_s1s2.data.resumable_sampler import ResumableRandomSampler

Split = Literal["train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")
"""The splits of every datamodule."""

STAGE_SPLITS: dict[str, tuple[str, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": (),
}
"""Splits that ``setup(stage)`` prepares (``predict`` builds its split on demand)."""


class SITSDataModule(L.LightningDataModule):
    """Base class: splits of raw SITS samples served normalised, in batches.

    Subclasses set :attr:`modalities`, :attr:`in_channels` (the stored channels, once, for
    every modality; sources with band names set ``bands`` before it), :attr:`num_classes`,
    :attr:`ignore_index` and :attr:`class_names` in their ``__init__`` (after calling this
    one) and implement :meth:`build_dataset`; sources whose ``auto`` statistics should be
    cached also implement :meth:`norm_stats_cache`.

    Args:
        batch_size: Samples per batch.
        num_workers: DataLoader worker processes (persistent when > 0).
        norm_stats: ``None`` (raw values), ``"auto"`` (per-channel mean/std over the valid
            observations of the training split) or ``{modality: {"mean": [C], "std":
            [C]}}``.
        predict_split: Split served by :meth:`predict_dataloader`.
        derived: ``data.derived``: names of derived inputs (:data:`~mtan_s1s2.data.derived.INDICES`)
            appended to the channels of their modality.

    Attributes:
        modalities: Modalities of every batch, in order.
        in_channels: Channels per modality the model sees, stored bands then derived
            inputs, e.g. ``{"s2": 11, "s1_asc": 3}`` for 10 S2 bands and ``[ndvi]``.
        derived_inputs: The resolved derived inputs (empty until ``in_channels`` is set).
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: Label excluded from loss and metrics.
        class_names: Class names, index = label.
        doy_range: ``(first, last)`` ``doy`` (days since the reference date) of the data's
            dates, every split and modality (:attr:`doy_range`).

    Raises:
        ValueError: On a batch size below 1, negative workers, an unknown
            ``predict_split``, a ``norm_stats`` string other than ``auto``, or a derived
            input that is unknown or whose bands the data lack (when ``in_channels`` is set).
    """

    bands_key: str = "data.sources.{modality}.bands"
    """The config key of a modality's band names, named in errors about derived inputs."""
    rasters: bool = True
    """Samples are windows of rasters, whose pixels have neighbours (False: pixel tables,
    ``H = W = 1``); ``model.net.spatial_context=auto`` follows it."""

    modalities: list[str]
    num_classes: int
    ignore_index: int
    class_names: tuple[str, ...]
    _doy_range: tuple[float, float] | None = None

    def __init__(
        self,
        batch_size: int = 8,
        num_workers: int = 0,
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = None,
        predict_split: str = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"data.batch_size must be >= 1, got {batch_size}.")
        if int(num_workers) < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {num_workers}.")
        if predict_split not in SPLITS:
            raise ValueError(f"data.predict_split must be one of {list(SPLITS)}, got {predict_split!r}.")
        if isinstance(norm_stats, str) and norm_stats != "auto":
            raise ValueError(
                f"data.norm_stats must be 'auto', null or {{modality: {{mean, std}}}}, got {norm_stats!r}."
            )
        self._derived_names = check_derived_names(derived)
        self.derived_inputs = DerivedInputs()
        self._stored_channels: dict[str, int] = {}
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.predict_split: str = predict_split
        self._norm_stats_cfg = norm_stats
        self._norm_stats: NormStats | None = None
        self._stats_ready = False
        self.datasets: dict[str, Dataset[Sample]] = {}
        self._order_seed: int | None = None  # seed of the training orders, fixed at the first loader
        self._resume_order: dict[str, Any] | None = None  # from a checkpoint, for the next training loader
        self.unlabelled = False

    # --- channels and derived inputs -----------------------------------------------------

    @property
    def in_channels(self) -> dict[str, int]:
        """Channels per modality: the stored bands, then the derived inputs of that modality."""
        return {m: c + self.derived_inputs.count(m) for m, c in self._stored_channels.items()}

    @in_channels.setter
    def in_channels(self, stored: Mapping[str, int]) -> None:
        """Set the stored channels of every modality and resolve ``data.derived`` against their bands.

        Raises:
            ValueError: On a derived input whose bands the data lack (naming them and the fix).
        """
        self._stored_channels = {str(m): int(c) for m, c in stored.items()}
        self.derived_inputs = DerivedInputs.resolve(self._derived_names, self.stored_bands(), self.bands_key)

    def stored_bands(self) -> dict[str, tuple[str, ...] | None]:
        """Band names per modality in channel order, before derived inputs (None: not known).

        A source's own ``bands`` (read from files or configs) when it has them; otherwise
        the usual names of the modality (:data:`~mtan_s1s2.data.batch.MODALITY_CHANNELS`)
        when the channel count matches them.
        """
        own = getattr(self, "bands", None) or {}
        out: dict[str, tuple[str, ...] | None] = {}
        for m, c in self._stored_channels.items():
            if m in own:
                out[m] = tuple(own[m])
            else:
                usual = MODALITY_CHANNELS.get(m, ())
                out[m] = tuple(usual) if len(usual) == c else None
        return out

    def input_channel_names(self) -> dict[str, list[str] | None]:
        """Names of every input channel per modality (stored bands, then derived inputs; None: not known)."""
        return {
            m: None if b is None else [*b, *self.derived_inputs.names_of(m)] for m, b in self.stored_bands().items()
        }

    def with_derived(self, dataset: Dataset[Sample]) -> Dataset[Sample]:
        """``dataset`` with the derived channels appended to its raw samples (itself without derived inputs)."""
        return DerivedDataset(dataset, self.derived_inputs) if self.derived_inputs else dataset

    # --- what a source provides ---------------------------------------------------------

    def build_dataset(self, split: str, whole: bool = False) -> Dataset[Sample]:
        """The raw (un-normalised) samples of ``split``; implemented by every source.

        Args:
            split: ``train``, ``val`` or ``test``.
            whole: Whole samples (statistics, prediction) rather than the split's training
                or evaluation form (e.g. random crops).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build_dataset(split, whole).")

    def build_unlabelled_dataset(self, split: str) -> Dataset[Sample]:
        """The raw samples of ``split`` for self-supervised pretraining (``task=pretrain``).

        Every pixel with a valid observation in the split's area, labelled or not; labels
        are not used. By default the split's own samples (the patches of the synthetic
        data); tables add their unlabelled rows of the split's groups
        (:meth:`~mtan_s1s2.data.table.datamodule.TableDataModule.build_unlabelled_dataset`),
        scene sources serve every pixel of the split's groups
        (:meth:`~mtan_s1s2.data.scene.datamodule.SceneDataModule.build_unlabelled_dataset`).
        """
        return self.build_dataset(split)

    def serve_unlabelled(self, on: bool = True) -> None:
        """Serve the samples of :meth:`build_unlabelled_dataset` from now on (``task=pretrain``).

        The normalisation statistics stay those of the labelled training split.
        """
        self.unlabelled = bool(on)
        self.datasets.clear()

    def write_split(self, output_dir: str | Path) -> Path | None:
        """Record the split of the run in ``output_dir`` (sources whose split is computed do).

        Returns:
            The file written, or None.
        """
        return None

    @property
    def doy_range(self) -> tuple[float, float]:
        """``(first, last)`` ``doy`` of the data's dates: every split, every modality, in days.

        ``model.net.ref_range=auto`` spreads the reference times over it, and training warns
        when the model's reference times do not cover it. Sources set it from what they
        read (table dates, PASTIS metadata, scene coordinates or files); otherwise it is
        found once by reading every sample of every split.

        Raises:
            ValueError: If the data has no valid date.
        """
        if self._doy_range is None:
            self._doy_range = self._doy_range_of_samples()
        return self._doy_range

    def _doy_range_of_samples(self) -> tuple[float, float]:
        lo, hi = math.inf, -math.inf
        for split in SPLITS:
            try:
                dataset = self.raw_dataset(split)
            except ValueError:
                continue  # a source without this split (e.g. prediction only)
            for i in range(len(dataset)):  # type: ignore[arg-type]
                sample = dataset[i]
                for m in self.modalities:
                    doy = sample[m]["doy"]
                    if len(doy):
                        lo, hi = min(lo, float(doy.min())), max(hi, float(doy.max()))
        if not math.isfinite(lo):
            raise ValueError(f"{type(self).__name__}: no sample of any split has a date, so the data has no doy range.")
        return lo, hi

    def input_radiometry(self) -> dict[str, Radiometry]:
        """Per modality, how the stored values became the model's inputs (recorded in checkpoints).

        Sources reading stored values keep theirs in ``self.radiometry``; sources of
        physical values (synthetic) have none.
        """
        return dict(getattr(self, "radiometry", None) or {})

    def norm_stats_cache(self) -> tuple[Path, dict[str, Any]] | None:
        """``(file, key)`` caching the ``auto`` statistics, or None to compute them each time."""
        return None

    # --- normalisation ------------------------------------------------------------------

    @property
    def norm_stats_config(self) -> str | Mapping[str, Mapping[str, Any]] | None:
        """The configured ``norm_stats``: None, ``"auto"`` or ``{modality: {mean, std}}``."""
        return self._norm_stats_cfg

    def use_norm_stats(self, stats: Mapping[str, Mapping[str, Any]] | None) -> None:
        """Normalise with ``stats`` from now on, e.g. the training statistics a checkpoint stores.

        Args:
            stats: ``{modality: {"mean": [C], "std": [C]}}`` (checked against
                :attr:`in_channels` when first used), or None for raw values.
        """
        self._norm_stats_cfg = stats
        self._norm_stats = None
        self._stats_ready = False
        self.datasets.clear()

    @property
    def norm_stats(self) -> NormStats | None:
        """The statistics applied to every sample (resolved on first use)."""
        if not self._stats_ready:
            self.resolve_norm_stats()
        return self._norm_stats

    def resolve_norm_stats(self, recompute: bool = False) -> NormStats | None:
        """Resolve ``norm_stats``: check the configured values, or compute the ``auto`` ones.

        Args:
            recompute: Ignore (and overwrite) the cache of the ``auto`` statistics.

        Returns:
            The statistics now applied to every sample (None: raw values).
        """
        cfg = self._norm_stats_cfg
        if cfg is None:
            self._norm_stats = None
        elif isinstance(cfg, Mapping):
            self._norm_stats = self._check_configured_stats(cfg)
        elif (cache := self.norm_stats_cache()) is None:
            self._norm_stats = self.compute_norm_stats(self.modalities)
        else:
            path, key = cache
            if self.derived_inputs:
                key = {**key, "derived": self.derived_inputs.as_config()}
            self._norm_stats = load_or_compute_norm_stats(
                path, key, self.modalities, self.compute_norm_stats, recompute=recompute,
                description="Per-channel mean and population std over the valid observations of the training "
                f"split ({type(self).__name__}); recomputed whenever the other keys of this file change.",
            )  # fmt: skip
        self._stats_ready = True
        self.datasets.clear()
        return self._norm_stats

    def _check_configured_stats(self, cfg: Mapping[str, Mapping[str, Any]]) -> NormStats:
        """Configured statistics checked against :attr:`in_channels` (derived inputs included).

        Raises:
            ValueError: As :func:`~mtan_s1s2.data.normalization.check_norm_stats`; statistics
                of the stored bands only, while ``data.derived`` adds channels, say so and how to fix it.
        """
        try:
            return check_norm_stats(cfg, self.in_channels)
        except ValueError as err:
            short = [
                m for m, c in self._stored_channels.items()
                if self.derived_inputs.count(m) and len(dict(cfg.get(m) or {}).get("mean") or []) == c
            ]  # fmt: skip
            if not short:
                raise
            extra = {m: list(self.derived_inputs.names_of(m)) for m in short}
            raise ValueError(
                f"{err} data.norm_stats gives statistics of the stored bands only, but data.derived adds {extra}: set "
                "data.norm_stats=auto (computed over the training split, derived inputs included) or append their "
                "mean and std after the bands'."
            ) from None

    def compute_norm_stats(self, modalities: Sequence[str]) -> NormStats:
        """Statistics of ``modalities`` over the raw training split."""
        return compute_norm_stats(self.raw_dataset("train"), list(modalities), what="the training split")

    # --- datasets and loaders -----------------------------------------------------------

    @staticmethod
    def _check_split(split: str) -> None:
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; valid splits are {list(SPLITS)}.")

    def raw_dataset(self, split: str) -> Dataset[Sample]:
        """Whole, un-normalised samples of ``split``, with their derived channels (statistics, inspection).

        Raises:
            ValueError: On an unknown split.
        """
        self._check_split(split)
        return self.with_derived(self.build_dataset(split, whole=True))

    def dataset(self, split: str) -> Dataset[Sample]:
        """The normalised samples of ``split`` in its training/evaluation form, built once.

        Raises:
            ValueError: On an unknown split.
        """
        self._check_split(split)
        if split not in self.datasets:
            raw = self.build_unlabelled_dataset(split) if self.unlabelled else self.build_dataset(split)
            self.datasets[split] = NormalizedDataset(self.with_derived(raw), self.norm_stats)
        return self.datasets[split]

    def prepare_data(self) -> None:
        """Resolve the normalisation statistics once, on the main process."""
        _ = self.norm_stats

    def setup(self, stage: str | None = None) -> None:
        """Build the datasets of ``stage`` (``fit``, ``validate``, ``test``, ``predict``; None: all)."""
        for split in STAGE_SPLITS.get(stage or "", SPLITS):
            self.dataset(split)

    def loader(
        self, dataset: Dataset[Sample], sampler: Sampler[int] | None = None, drop_last: bool = False
    ) -> DataLoader[Sample]:
        """Batches of ``dataset`` (collated by :func:`~mtan_s1s2.data.batch.collate_sits`), in order or by ``sampler``.

        Every loader has its own seeded generator, so creating an iterator never draws from
        the global torch generator (which would shift the dropout masks of a resumed run).
        """
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            drop_last=drop_last,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=collate_sits,
            generator=torch.Generator().manual_seed(self.order_seed),
        )

    @property
    def order_seed(self) -> int:
        """Seed of the training orders: the process's torch seed (``seed`` of the run) when first asked."""
        if self._order_seed is None:
            self._order_seed = int(torch.initial_seed()) % (2**63 - 1)
        return self._order_seed

    def train_dataloader(self) -> DataLoader[Sample]:
        """Shuffled training batches, one order per ``(seed, epoch)``.

        The first loader built after :meth:`load_state_dict` resumes the interrupted epoch:
        it skips the batches that epoch had already trained on.
        """
        dataset = self.dataset("train")
        epoch, skip = 0, 0
        if (resume := self._resume_order) is not None:
            self._resume_order = None
            self._order_seed = int(resume["seed"])
            epoch, done = int(resume["epoch"]), int(resume["batches_done"])
            if done >= int(resume["epoch_batches"]):  # the epoch had ended: the next one starts afresh
                epoch, done = epoch + 1, 0
            if int(resume["batch_size"]) != self.batch_size:
                done = 0  # another batch size: the batches are not those of the interrupted run
            skip = done * self.batch_size
        sampler = ResumableRandomSampler(dataset, seed=self.order_seed, epoch=epoch, skip=skip)  # type: ignore[arg-type]
        # A last batch of a single sample is dropped: batch norm (model=tempcnn) needs two.
        return self.loader(dataset, sampler, drop_last=len(dataset) % self.batch_size == 1)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        """Where training stands in its order: seed, epoch and batches done (saved in every checkpoint)."""
        trainer = self.trainer
        if trainer is None:
            return {}
        epoch_batches = trainer.num_training_batches
        return {
            "train_order": {
                "seed": self.order_seed,
                "epoch": int(trainer.current_epoch),
                "batches_done": int(trainer.fit_loop.epoch_loop.batch_progress.current.ready),
                "epoch_batches": int(epoch_batches) if math.isfinite(epoch_batches) else 2**62,
                "batch_size": self.batch_size,
            }
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the training order of a checkpoint with the next :meth:`train_dataloader`."""
        self._resume_order = state_dict.get("train_order")

    def class_counts(self, num_classes: int) -> Tensor:
        """``(K,)`` int64 labelled pixels per class over the whole (uncropped) training patches.

        Labels ``>= num_classes`` are not counted.
        """
        counts = torch.zeros(num_classes, dtype=torch.long)
        raw = self.raw_dataset("train")
        loader = DataLoader(raw, batch_size=1, num_workers=self.num_workers, collate_fn=collate_sits)
        for batch in loader:
            labels = batch["label"].flatten()
            counts += torch.bincount(labels[labels < num_classes], minlength=num_classes)
        return counts

    def val_dataloader(self) -> DataLoader[Sample]:
        """Validation batches, in order."""
        return self.loader(self.dataset("val"))

    def test_dataloader(self) -> DataLoader[Sample]:
        """Test batches, in order."""
        return self.loader(self.dataset("test"))

    def predict_dataloader(self) -> DataLoader[Sample]:
        """Whole, normalised samples of ``predict_split``, in order."""
        return self.loader(NormalizedDataset(self.raw_dataset(self.predict_split), self.norm_stats))


def data_contract(datamodule: SITSDataModule) -> dict[str, Any]:
    """What a model trained on ``datamodule`` expects of its inputs, as plain data.

    Stored in checkpoints (``hparams["data_contract"]``, plain containers, so
    ``torch.load(weights_only=True)`` reads it) so that evaluation and prediction on other
    files (another reader, another scene) turn stored values into inputs exactly as in
    training: ``{"modalities", "bands" (channel order, if known), "radiometry" (per
    modality: units, scale, offset, dn_offset, nodata, nodata_rule, valid_range,
    dn_zero_nodata; :meth:`~mtan_s1s2.data.radiometry.Radiometry.as_dict`), "derived"
    (``data.derived``: the derived inputs appended after the stored bands,
    :mod:`mtan_s1s2.data.derived`), "norm_stats" (or None; covering the derived channels
    too), "class_names", "ignore_index"}``.
    """
    stats = datamodule.norm_stats
    return {
        "modalities": list(datamodule.modalities),
        "bands": {m: list(b) for m, b in getattr(datamodule, "bands", {}).items()},
        "radiometry": {m: r.as_dict() for m, r in datamodule.input_radiometry().items()},
        "derived": datamodule.derived_inputs.as_config(),
        "norm_stats": None if stats is None else {m: s.as_dict() for m, s in stats.items()},
        "class_names": list(datamodule.class_names),
        "ignore_index": int(datamodule.ignore_index),
    }


__all__ = ["SPLITS", "STAGE_SPLITS", "SITSDataModule", "Split", "data_contract"]
