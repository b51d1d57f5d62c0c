"""Epoch timing that makes backend speed comparisons honest."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from mtan_s1s2.run_record import EpochTiming, TimingSummary
from mtan_s1s2.utils.timing import clock


class EpochTimer(Callback):
    """Log training time without validation, validation time and throughput per epoch.

    Logged every epoch (so they land in ``metrics.csv`` with the CSV logger):

    * ``time/train_epoch_s``: wall-clock seconds of the training part of the epoch (data
      loading included, validation excluded).
    * ``time/val_epoch_s``: seconds spent in validation during that epoch (when it ran).
    * ``time/train_samples_per_s``: training samples (patches) per second.
    * ``time/warmup``: 1 for the first ``warmup_epochs`` epochs, whose timings include
      one-off costs (allocator growth, kernel selection, compilation), and for the first
      epoch a resumed run trains (the new process pays them again), else 0.

    CUDA is synchronised before every clock reading. The per-epoch records are kept in
    :attr:`epochs` (:class:`~mtan_s1s2.run_record.EpochTiming`) and summarised by
    :meth:`summary`.

    Resuming: the records, and the time and samples of the epoch in progress up to the
    checkpoint, are saved in every checkpoint (:meth:`state_dict`). A fit resumed from it
    starts with the earlier epochs' records, and the interrupted epoch's time is the time
    trained before the checkpoint plus the time after the resume (the work lost between
    the checkpoint and the interruption, and the restart itself, are not counted); that
    epoch is marked ``resumed``. Testing a checkpoint does not rewind the records.

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
        self._val_s = 0.0  # validation seconds of the epoch
        self._val_here = 0.0  # of those, measured by this process (not before a resume)
        self._val_ran = False
        self._samples = 0
        self._elapsed = 0.0  # training seconds of the epoch before a resume
        self._resumed = False
        self._restart_warmup = False
        self._epoch = 0
        self._to_restore: dict[str, Any] | None = None

    def _now(self, pl_module: L.LightningModule) -> float:
        return clock(pl_module.device)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the clock; a resumed fit continues the records and the epoch of its checkpoint."""
        self._val_s, self._val_here, self._val_ran, self._samples = 0.0, 0.0, False, 0
        self._elapsed, self._resumed = 0.0, False
        state, self._to_restore = self._to_restore, None
        if state is not None:
            self.epochs = [e for i, d in enumerate(state.get("epochs", [])) if (e := EpochTiming.from_dict(d, i))]
            current = state.get("current")
            if current and int(current["epoch"]) == trainer.current_epoch:  # resumed inside that epoch
                self._elapsed = float(current["train_s"])
                self._samples = int(current["samples"])
                self._val_s, self._val_ran = float(current["val_s"]), bool(current["val_ran"])
                self._resumed = True
            self._restart_warmup = True
        self._epoch = trainer.current_epoch
        self._start = self._now(pl_module)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the epoch clock (not called for an epoch resumed in its middle)."""
        self._val_s, self._val_here, self._val_ran, self._samples = 0.0, 0.0, False, 0
        self._elapsed, self._resumed = 0.0, False
        self._epoch = trainer.current_epoch
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
            seconds = self._now(pl_module) - self._val_start
            self._val_s += seconds
            self._val_here += seconds
            self._val_ran = True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record and log the epoch: training time without validation, throughput, warm-up flag."""
        train_s = max(self._train_seconds(pl_module), 1e-9)
        record = EpochTiming(
            epoch=trainer.current_epoch,
            train_epoch_s=train_s,
            val_epoch_s=self._val_s if self._val_ran else None,
            train_samples=self._samples,
            train_samples_per_s=self._samples / train_s,
            warmup=trainer.current_epoch < self.warmup_epochs or self._restart_warmup,
            resumed=self._resumed,
        )
        self._restart_warmup = False
        self.epochs = [e for e in self.epochs if e.epoch != record.epoch] + [record]
        logs = {
            "time/train_epoch_s": train_s,
            "time/train_samples_per_s": self._samples / train_s,
            "time/warmup": float(record.warmup),
        }
        if self._val_ran:
            logs["time/val_epoch_s"] = self._val_s
        pl_module.log_dict(logs, on_step=False, on_epoch=True, sync_dist=False, rank_zero_only=True)

    def _train_seconds(self, pl_module: L.LightningModule) -> float:
        """Training seconds of the epoch so far (validation excluded, time before a resume included)."""
        return self._elapsed + (self._now(pl_module) - self._start) - self._val_here

    def state_dict(self) -> dict[str, Any]:
        """The records and the epoch in progress (saved in every checkpoint)."""
        state: dict[str, Any] = {"epochs": [asdict(e) for e in self.epochs]}
        if self._start:
            state["current"] = {
                "epoch": self._epoch,
                "train_s": self._elapsed + (clock() - self._start) - self._val_here,
                "samples": self._samples,
                "val_s": self._val_s,
                "val_ran": self._val_ran,
            }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's records for the fit that resumes from it (see :meth:`on_train_start`)."""
        self._to_restore = state_dict

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Testing a checkpoint loads its state; it must not rewind the records."""
        self._to_restore = None

    def summary(self) -> TimingSummary:
        """Median (and mean, std) train-epoch time and throughput over non-warm-up epochs.

        All epochs are used, with ``warmup_only``, when every epoch is a warm-up epoch.
        """
        return TimingSummary.of(self.epochs, self.warmup_epochs)


__all__ = ["EpochTimer"]
