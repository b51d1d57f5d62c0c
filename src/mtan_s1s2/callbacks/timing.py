"""Epoch timing that makes backend speed comparisons honest."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from mtan_s1s2.run_record import EpochTiming, TimingSummary
from mtan_s1s2.utils.hardware import synchronize


class EpochTimer(Callback):
    """Log training time without validation, validation time and throughput per epoch.

    Logged every epoch (so they land in ``metrics.csv`` with the CSV logger):

    * ``time/train_epoch_s``: wall-clock seconds of the training part of the epoch (data
      loading included, validation excluded).
    * ``time/val_epoch_s``: seconds spent in validation during that epoch (when it ran).
    * ``time/train_samples_per_s``: training samples (patches) per second.
    * ``time/warmup``: 1 for the first ``warmup_epochs`` epochs, whose timings include
      one-off costs (allocator growth, kernel selection, compilation), else 0.

    CUDA is synchronised before every clock reading. The per-epoch records are kept in
    :attr:`epochs` (:class:`~mtan_s1s2.run_record.EpochTiming`) and summarised by
    :meth:`summary`. They are deliberately not saved in
    checkpoints: loading the best checkpoint for testing must not rewind them, and a
    resumed run times only the epochs it ran.

    Args:
        warmup_epochs: Leading epochs flagged as warm-up and left out of the summary.
    """

    def __init__(self, warmup_epochs: int = 1) -> None:
        super().__init__()
        if warmup_epochs < 0:
            raise ValueError(f"warmup_epochs must be >= 0, got {warmup_epochs}.")
        self.warmup_epochs = warmup_epochs
        self.epochs: list[EpochTiming] = []
        self._start = 0.0
        self._val_start = 0.0
        self._val_s = 0.0
        self._val_ran = False
        self._samples = 0

    def _now(self, pl_module: L.LightningModule) -> float:
        synchronize(pl_module.device)
        return time.perf_counter()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the epoch clock."""
        self._val_s, self._val_ran, self._samples = 0.0, False, 0
        self._start = self._now(pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Count the training samples of the epoch."""
        self._samples += int(batch["label"].shape[0])

    @staticmethod
    def _in_fit_validation(trainer: L.Trainer) -> bool:
        return trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the validation clock (validation inside fit only)."""
        if self._in_fit_validation(trainer):
            self._val_start = self._now(pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Add the validation time to the epoch's."""
        if self._in_fit_validation(trainer):
            self._val_s += self._now(pl_module) - self._val_start
            self._val_ran = True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record and log the epoch: training time without validation, throughput, warm-up flag."""
        total = self._now(pl_module) - self._start
        train_s = max(total - self._val_s, 1e-9)
        record = EpochTiming(
            epoch=trainer.current_epoch,
            train_epoch_s=train_s,
            val_epoch_s=self._val_s if self._val_ran else None,
            train_samples=self._samples,
            train_samples_per_s=self._samples / train_s,
            warmup=trainer.current_epoch < self.warmup_epochs,
        )
        self.epochs.append(record)
        logs = {
            "time/train_epoch_s": train_s,
            "time/train_samples_per_s": self._samples / train_s,
            "time/warmup": float(record.warmup),
        }
        if self._val_ran:
            logs["time/val_epoch_s"] = self._val_s
        pl_module.log_dict(logs, on_step=False, on_epoch=True, sync_dist=False, rank_zero_only=True)

    def summary(self) -> TimingSummary:
        """Median (and mean, std) train-epoch time and throughput over non-warm-up epochs.

        All epochs are used, with ``warmup_only``, when every epoch is a warm-up epoch.
        """
        return TimingSummary.of(self.epochs, self.warmup_epochs)


__all__ = ["EpochTimer"]
