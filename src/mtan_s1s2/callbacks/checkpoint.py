"""Checkpoints: the best one by a finite validation score, and ``last.ckpt`` to resume from."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor


class BestCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that never takes a NaN or infinite score as the best.

    Lightning's ``ModelCheckpoint`` keeps an epoch whose monitored score is NaN as a top-k
    checkpoint (scored ``-inf``), so a run whose validation split has no labelled pixel
    would test an arbitrary epoch as "best". Here such an epoch is not a candidate, and
    ``best_model_path`` stays empty until a finite score is logged (``last.ckpt`` is
    :class:`LastCheckpoint`'s). Arguments are those of ``ModelCheckpoint``.
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Resolve the folder; warn about earlier checkpoints in it only if this fit does not resume from them."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*exists and is not empty")
            super().setup(trainer, pl_module, stage)
        folder = Path(str(self.dirpath))
        self._earlier = sorted(p.name for p in folder.glob(f"*{self.FILE_EXTENSION}")) if folder.is_dir() else []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A fit that does not resume, in a folder that already holds checkpoints: say so."""
        if getattr(self, "_earlier", None) and not trainer.ckpt_path and trainer.is_global_zero:
            warnings.warn(
                f"Checkpoint directory {self.dirpath} already holds {', '.join(self._earlier[:3])}"
                f"{', ...' if len(self._earlier) > 3 else ''} and this fit does not resume from them "
                "(ckpt_path=last would): they may be overwritten.",
                stacklevel=2,
            )

    def check_monitor_top_k(self, trainer: L.Trainer, current: Tensor | None = None) -> bool:
        """Whether ``current`` enters the top k; never when it is None, NaN or infinite."""
        if current is None or not math.isfinite(float(current)):
            return False
        return super().check_monitor_top_k(trainer, current)


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``: the state to resume from, at the end of every epoch and every N steps.

    Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when it
    also saves a top-k checkpoint, so after an epoch that did not improve the best score,
    ``last.ckpt`` is older than the run. This writes it at the end of every training epoch
    (after validation) and, with ``every_n_train_steps``, every that many optimiser steps
    inside epochs; ``ckpt_path=last`` resumes from the newest. The file is written under a
    temporary name and renamed, so a job killed while saving leaves the previous one
    whole. Nothing is written with ``fast_dev_run``.

    Args:
        dirpath: Folder of ``last.ckpt`` (default: Lightning's checkpoint folder).
        every_n_train_steps: Also save every this many optimiser steps (0: epoch ends only).

    Raises:
        ValueError: On a negative ``every_n_train_steps``.
    """

    def __init__(self, dirpath: str | None = None, every_n_train_steps: int = 0) -> None:
        if int(every_n_train_steps) < 0:
            raise ValueError(
                f"callbacks.last_checkpoint.every_n_train_steps must be >= 0 (0 = off), got {every_n_train_steps}."
            )
        super().__init__(dirpath=dirpath, monitor=None, save_top_k=0, save_last=False, every_n_epochs=0)
        self.every_steps = int(every_n_train_steps)

    @property
    def path(self) -> Path:
        """``<dirpath>/last.ckpt``."""
        return Path(str(self.dirpath)) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"

    def write_last(self, trainer: L.Trainer) -> None:
        """Write ``last.ckpt`` now (atomically, rank 0)."""
        tmp = Path(str(self.dirpath)) / f".writing{self.FILE_EXTENSION}"  # no "last" in it: ckpt_path=last ignores it
        trainer.save_checkpoint(tmp, self.save_weights_only)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("LastCheckpoint.write_last")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = self.last_model_path = str(self.path)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(self)

    def _skip(self, trainer: L.Trainer) -> bool:
        from lightning.pytorch.trainer.states import TrainerFn

        return bool(trainer.fast_dev_run) or trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking  # type: ignore[attr-defined]

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Every ``every_n_train_steps`` optimiser steps."""
        step = trainer.global_step
        if self.every_steps and step % self.every_steps == 0 and step != self._last_global_step_saved:
            if not self._skip(trainer):
                self.write_last(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """At the end of the epoch (validation has run, unless it runs several times per epoch)."""
        if self._should_save_on_train_epoch_end(trainer) and not self._skip(trainer):
            self.write_last(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """After a validation that does not end its epoch (``val_check_interval`` < 1)."""
        if not self._should_save_on_train_epoch_end(trainer) and not self._skip(trainer):
            self.write_last(trainer)


def best_checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The trainer's checkpoint callback that monitors a metric (the best-model one), if any."""
    candidates = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
    monitored = [c for c in candidates if c.monitor is not None]
    plain = [c for c in candidates if not isinstance(c, LastCheckpoint)]
    chosen = monitored or plain
    return chosen[0] if chosen else None


def top_k_checkpoints(trainer: L.Trainer) -> list[dict[str, Any]]:
    """The kept best checkpoints, best first: ``[{"path", "score"}, ...]`` (``save_top_k`` of them at most).

    Empty when no checkpoint callback monitors a metric or none has a finite score yet. Ties
    keep the earlier epoch first (Lightning keeps the first of equal scores).
    """
    ckpt = best_checkpoint_callback(trainer)
    if ckpt is None or ckpt.monitor is None:
        return []
    kept = [(str(path), float(score)) for path, score in ckpt.best_k_models.items() if math.isfinite(float(score))]
    kept.sort(key=lambda item: (-item[1] if ckpt.mode == "max" else item[1], item[0]))
    return [{"path": path, "score": score} for path, score in kept]


def best_model_summary(trainer: L.Trainer) -> dict[str, Any]:
    """``{"monitor", "score", "path", "top_k"}`` of the best checkpoint; score and path None when there is none.

    ``top_k`` lists the kept best checkpoints (:func:`top_k_checkpoints`): with
    ``checkpoint_ensemble`` > 1 the test averages them, and ``eval.py`` / ``predict.py`` given
    the run's folder take them all.
    """
    ckpt = best_checkpoint_callback(trainer)
    score = None if ckpt is None or ckpt.best_model_score is None else float(ckpt.best_model_score)
    return {
        "monitor": None if ckpt is None else ckpt.monitor,
        "score": score if score is not None and math.isfinite(score) else None,
        "path": (ckpt.best_model_path or None) if ckpt is not None and ckpt.monitor is not None else None,
        "top_k": top_k_checkpoints(trainer),
    }


__all__ = ["BestCheckpoint", "LastCheckpoint", "best_checkpoint_callback", "best_model_summary", "top_k_checkpoints"]
