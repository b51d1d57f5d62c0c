"""Exact resume: a fit resumed from a checkpoint continues as if it had never stopped.

Lightning's checkpoints restore the weights, the optimiser, the schedulers, the loops and
the callbacks' states, and the datamodule resumes the interrupted epoch's order
(:class:`~mtan_s1s2.data.datamodule.SITSDataModule`). Two things are still missing for a
resumed run to reproduce the uninterrupted one: the random generators (dropout masks,
augmentations) and the training metrics accumulated over the epoch in progress.
:class:`ExactResume` keeps both in every checkpoint, under :data:`RESUME_KEY`, and puts
them back when a fit resumes (single process).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torchmetrics import Metric

from mtan_s1s2.utils.rng import capture_rng_states, restore_rng_states

RESUME_KEY = "mtan_s1s2_resume"
"""Checkpoint entry holding what a resumed fit needs beyond Lightning's own state: the
random generators and the training metrics of the epoch in progress."""


def _training_metrics(pl_module: L.LightningModule) -> dict[str, Metric]:
    """The module's training metrics by name (``loss`` for the epoch loss), or none."""
    metrics = getattr(pl_module, "train_metrics", None)
    found: dict[str, Metric] = dict(metrics.items(keep_base=True)) if metrics is not None else {}
    loss = getattr(pl_module, "train_loss", None)
    if isinstance(loss, Metric):
        found["loss"] = loss
    return found


class ExactResume(Callback):
    """Save the random generators and the epoch's training metrics; restore them on resume.

    * Every checkpoint gets ``checkpoint[RESUME_KEY] = {"rng": ..., "train_metrics": ...}``:
      the states of the torch, CUDA, NumPy and Python generators
      (:func:`~mtan_s1s2.utils.rng.capture_rng_states`) and the states of the module's
      ``train_metrics`` collection and ``train_loss`` metric, all plain tensors and
      containers (safe ``torch.load(weights_only=True)``).
    * A fit resumed from such a checkpoint (``trainer.fit(ckpt_path=...)``) gets the
      metric states back at the start of training and the generators back at its first
      batch, where the uninterrupted run drew its next number. Testing a checkpoint
      restores nothing. With several processes (DDP) nothing is restored: each rank's
      generators and metric shares are its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self._resume: dict[str, Any] | None = None  # from the checkpoint of a resumed fit
        self._rng_to_restore: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Keep the random generators and the epoch's training metrics."""
        states = {name: dict(metric.metric_state) for name, metric in _training_metrics(pl_module).items()}
        checkpoint[RESUME_KEY] = {"rng": capture_rng_states(), "train_metrics": states}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Keep what a resumed fit restores when it starts (nothing when a checkpoint is tested)."""
        if trainer.state.fn == TrainerFn.FITTING:
            self._resume = checkpoint.get(RESUME_KEY)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Restore the resumed epoch's training metrics (single process)."""
        resume, self._resume = self._resume, None
        if resume is None or trainer.world_size != 1:
            return
        metrics = _training_metrics(pl_module)
        for name, states in resume.get("train_metrics", {}).items():
            for attr, value in states.items():
                setattr(metrics[name], attr, value.to(pl_module.device))
        self._rng_to_restore = resume.get("rng")

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """At the first batch of a resumed fit, set the generators as they were at the checkpoint."""
        if self._rng_to_restore is not None:
            restore_rng_states(self._rng_to_restore)
            self._rng_to_restore = None


__all__ = ["RESUME_KEY", "ExactResume"]
