"""A warning when training never leaves the majority class.

A classifier that predicts one class everywhere scores the share of that class as OA
(often 0.6-0.8 on crop maps) and a Cohen's kappa of 0, and without this check such a run
ends "completed" like any other. :class:`MajorityClassWarning` looks at the validation
kappa (the training kappa when there is no validation split) at the end of every epoch
from epoch ``epochs`` on:

* kappa below ``kappa_below`` (0.05 by default: a model that predicts one class, or
  guesses, has kappa about 0; on Landis and Koch's scale 0-0.2 is "slight" agreement)
  triggers one warning;
* the warning names the class the model predicts most, with its share of the labelled
  validation pixels (one prediction pass over the validation split, run only then), and
  what to check: the reference times (``model.net.ref_range``), the normalisation
  (``data.norm_stats``), the learning rate;
* the finding goes to ``summary.json`` (``majority_class``), with the epoch the model
  left the majority class if it later does.

Runs shorter than ``epochs`` epochs are not checked: a model may need a few epochs to
leave its start.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import move_data_to_device

log = logging.getLogger(__name__)


class MajorityClassWarning(Callback):
    """Warn once (and record) when kappa stays near 0 after ``epochs`` epochs (see the module docstring).

    Args:
        epochs: First epoch (1-based) checked.
        kappa_below: Kappa under which the run counts as stuck at the majority class.

    Attributes:
        record: ``{"epoch", "kappa", "metric", "predicted_class", "predicted_share",
            "recovered_epoch"}`` once the warning was given, else empty.

    Raises:
        ValueError: On ``epochs`` below 1 or ``kappa_below`` outside ``(-1, 1]``.
    """

    def __init__(self, epochs: int = 5, kappa_below: float = 0.05) -> None:
        super().__init__()
        if int(epochs) < 1:
            raise ValueError(f"callbacks.majority_class.epochs must be >= 1, got {epochs}.")
        if not -1.0 < float(kappa_below) <= 1.0:
            raise ValueError(f"callbacks.majority_class.kappa_below must be in (-1, 1], got {kappa_below}.")
        self.epochs = int(epochs)
        self.kappa_below = float(kappa_below)
        self.record: dict[str, Any] = {}

    @staticmethod
    def _kappa(trainer: L.Trainer) -> tuple[str, float] | None:
        for key in ("val/kappa", "train/kappa"):
            value = trainer.callback_metrics.get(key)
            if value is not None and math.isfinite(float(value)):
                return key, float(value)
        return None

    def stuck(self, epoch: int, kappa: float) -> bool:
        """Whether a kappa at ``epoch`` (1-based) means a run stuck at the majority class."""
        return epoch >= self.epochs and kappa < self.kappa_below

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Check the epoch's kappa (validation has run by now; its metrics are logged)."""
        if trainer.sanity_checking or getattr(trainer, "fast_dev_run", False):
            return
        found = self._kappa(trainer)
        if found is None:
            return
        key, kappa = found
        epoch = int(trainer.current_epoch) + 1
        if self.record:
            if self.record.get("recovered_epoch") is None and kappa >= self.kappa_below:
                self.record["recovered_epoch"] = epoch
                log.info("Epoch %d: %s %.3f: the model has left the majority class.", epoch, key, kappa)
            return
        if not self.stuck(epoch, kappa):
            return
        name, share = self._most_predicted(trainer, pl_module)
        self.record = {
            "epoch": epoch,
            "metric": key,
            "kappa": kappa,
            "predicted_class": name,
            "predicted_share": share,
            "recovered_epoch": None,
        }
        predicted = "" if name is None else f" and predicts {name!r} for {100 * share:.1f} % of the labelled pixels"
        log.warning(
            "Epoch %d: %s is %.3f (below %g) after %d epochs: the model has not left the majority class%s. Check the "
            "reference times (model.net.ref_range=auto spreads them over the data's dates), the normalisation "
            "(data.norm_stats: auto computes it over the training split) and the learning rate "
            "(model.optimizer.lr).",
            epoch, key, kappa, self.kappa_below, epoch, predicted,
        )  # fmt: skip

    @torch.no_grad()
    def _most_predicted(self, trainer: L.Trainer, pl_module: L.LightningModule) -> tuple[str | None, float]:
        """The class predicted for most labelled validation pixels, and its share of them."""
        loaders = trainer.val_dataloaders
        loader = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
        if loader is None:
            return None, math.nan
        ignore = int(getattr(pl_module, "ignore_index", -100))
        num_classes = int(getattr(pl_module, "num_classes", 0))
        counts = torch.zeros(max(num_classes, 1), dtype=torch.long)
        was_training = pl_module.training
        pl_module.eval()
        try:
            for i, batch in enumerate(loader):
                if i >= trainer.num_val_batches[0]:  # trainer.limit_val_batches
                    break
                batch = move_data_to_device(batch, pl_module.device)
                preds = pl_module(batch).argmax(dim=1)
                labelled = preds[batch["label"] != ignore].flatten().cpu()
                counts += torch.bincount(labelled, minlength=counts.numel())[: counts.numel()]
        finally:
            pl_module.train(was_training)
        total = int(counts.sum())
        if total == 0:
            return None, math.nan
        k = int(counts.argmax())
        names = list(getattr(pl_module, "class_names", []) or [])
        return (names[k] if k < len(names) else str(k)), int(counts[k]) / total


def majority_class_record(trainer: L.Trainer) -> dict[str, Any] | None:
    """The finding of the trainer's :class:`MajorityClassWarning`, if it warned."""
    callback = next((c for c in trainer.callbacks if isinstance(c, MajorityClassWarning)), None)  # type: ignore[attr-defined]
    return dict(callback.record) if callback is not None and callback.record else None


__all__ = ["MajorityClassWarning", "majority_class_record"]
