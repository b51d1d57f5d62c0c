"""LightningModule training a per-pixel SITS classifier (loss, optimiser, metrics)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor
from torchmetrics.classification import MulticlassConfusionMatrix

from mtan_s1s2.data.augment import SITSAugment
from mtan_s1s2.data.batch import Batch, modalities_of
from mtan_s1s2.metrics import classification_metrics
from mtan_s1s2.models.layers.mlp import AUTO_BACKEND
from mtan_s1s2.models.losses import inverse_frequency_weights, masked_cross_entropy
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.tempcnn import TempCNN

Stage = Literal["train", "val", "test"]


class SITSClassifierModule(L.LightningModule):
    """Trains a per-pixel classifier on batches of :mod:`mtan_s1s2.data.batch`.

    Metrics (torchmetrics, ``ignore_index`` honoured, classes absent from both prediction
    and target left out of macro averages): overall accuracy ``OA``, macro ``F1``, ``mIoU``
    and Cohen's ``kappa`` (:func:`~mtan_s1s2.metrics.classification_metrics`), logged as
    ``{stage}/{name}``. Over the test split it also accumulates the confusion matrix
    (:attr:`test_confmat`), which the :class:`~mtan_s1s2.callbacks.classification_report.ClassificationReport`
    callback writes out.

    Args:
        net: The classifier, mapping a batch to ``(B, K, H, W)`` logits.
        optimizer: Optimiser factory (``functools.partial`` of e.g. ``torch.optim.AdamW``);
            default AdamW with lr 1e-3.
        scheduler: Optional LR-scheduler factory; ``ReduceLROnPlateau`` monitors
            ``monitor``.
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: Label excluded from loss and metrics (default 0 = unlabelled).
        class_weights: ``None``, a list of ``K`` floats, or ``"inverse_frequency"``
            (computed from the training labels at the start of fit).
        class_names: Class names, index = label (default ``class_{i}``).
        monitor: Metric the plateau scheduler follows.
        label_smoothing: Label smoothing of the training cross-entropy, in ``[0, 1)`` (0 = off).
        augment: Training augmentations ``{temporal_dropout, date_shift_days, noise_std}``
            (:class:`~mtan_s1s2.data.augment.SITSAugment`), applied to training batches
            only; None or all 0 = off.
        early_stopping: Keyword arguments of Lightning's ``EarlyStopping`` (e.g.
            ``{monitor: val/loss, patience: 30}``), added to the trainer's callbacks by
            :meth:`configure_callbacks`, so a training recipe is one ``model=...`` option;
            None = train for ``trainer.max_epochs``. The checkpoint tested is still the best
            one of ``callbacks.model_checkpoint``.
        compile: Run the network through ``torch.compile``; if compiling fails, warn and
            fall back to eager execution. The state dict keeps its plain keys either way.
        net_config: Hydra config of ``net``, used when ``net`` is None. ``train.py`` stores
            it in every checkpoint, so ``SITSClassifierModule.load_from_checkpoint(path)``
            rebuilds the network by itself; pass ``net=`` (any backend) to override.

    Raises:
        ValueError: If neither ``net`` nor ``net_config`` is given, or on bad
            ``class_weights`` or ``label_smoothing``.
    """

    class_weight: Tensor | None  # buffer (not persistent): the loss weights, None = unweighted

    def __init__(
        self,
        net: MTANClassifier | TempCNN | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        num_classes: int = 11,
        ignore_index: int = 0,
        class_weights: Sequence[float] | str | None = None,
        class_names: Sequence[str] | None = None,
        monitor: str = "val/OA",
        compile: bool = False,
        net_config: dict[str, Any] | None = None,
        label_smoothing: float = 0.0,
        augment: Mapping[str, Any] | None = None,
        early_stopping: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net"])
        if net is None:
            if net_config is None:
                raise ValueError(
                    "SITSClassifierModule needs `net` or `net_config` (a Hydra config with "
                    "`_target_`); checkpoints written by train.py store `net_config`."
                )
            import hydra

            net = hydra.utils.instantiate(net_config)
        self.net: MTANClassifier | TempCNN = net
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(f"model.label_smoothing must be in [0, 1), got {label_smoothing}.")
        self.label_smoothing = float(label_smoothing)
        self.augment = SITSAugment.from_config(augment)
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        if isinstance(class_weights, str) and class_weights != "inverse_frequency":
            raise ValueError(
                f"model.class_weights must be null, a list of {num_classes} floats or "
                f"'inverse_frequency'; got {class_weights!r}."
            )
        if class_weights is not None and not isinstance(class_weights, str) and len(class_weights) != num_classes:
            raise ValueError(
                f"model.class_weights has {len(class_weights)} values; expected num_classes={num_classes}."
            )
        init_w = None if class_weights is None or isinstance(class_weights, str) else torch.tensor(class_weights)
        self.register_buffer("class_weight", init_w, persistent=False)
        self.class_names = list(class_names) if class_names else [f"class_{i}" for i in range(num_classes)]
        self.compile_status = "off"
        self._compiled: Callable[..., Tensor] | None = None
        self.configure_metrics()

    def configure_metrics(self) -> None:
        """One metric collection per stage, cloned with the stage prefix (torchgeo style)."""
        metrics = classification_metrics(self.num_classes, self.ignore_index)
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.test_confmat = MulticlassConfusionMatrix(self.num_classes, ignore_index=self.ignore_index)

    def forward(self, batch: Batch) -> Tensor:
        """Logits ``(B, K, H, W)`` of a batch (its modalities; labels are not needed)."""
        inputs = {m: batch[m] for m in modalities_of(batch)}
        if self._compiled is not None:
            try:
                return self._compiled(inputs)
            except Exception as err:  # compilers fail in many ways; eager always works
                warnings.warn(
                    f"torch.compile failed ({type(err).__name__}: {err}); falling back to eager mode.", stacklevel=2
                )
                self._compiled = None
                self.compile_status = f"failed, eager fallback: {type(err).__name__}"
        return self.net(inputs)  # type: ignore[no-any-return]

    def setup(self, stage: str) -> None:
        """Before optimisers exist: compile the network when asked."""
        if self.hparams["compile"] and self._compiled is None and self.compile_status == "off":
            try:
                self._compiled = torch.compile(self.net)
                self.compile_status = "on"
            except Exception as err:
                warnings.warn(
                    f"torch.compile unavailable ({type(err).__name__}: {err}); using eager mode.", stacklevel=2
                )
                self.compile_status = f"failed, eager fallback: {type(err).__name__}"

    def on_fit_start(self) -> None:
        """Warn when ``mlp=auto`` has no callback to resolve it; count classes for weights."""
        if getattr(self.net, "requested_backend", None) == AUTO_BACKEND and self.net.backend == "linear":
            from mtan_s1s2.callbacks.auto_backend import AutoBackend

            if not any(isinstance(c, AutoBackend) for c in self.trainer.callbacks):  # type: ignore[attr-defined]
                warnings.warn(
                    "The model was built with mlp=auto but the trainer has no AutoBackend callback, so it trains "
                    "with the linear backend; use the mlp=auto config (it adds callbacks.auto_backend).",
                    stacklevel=2,
                )
        if self.hparams["class_weights"] == "inverse_frequency" and self.class_weight is None:
            counts = torch.zeros(self.num_classes, dtype=torch.long)
            for batch in self.trainer.datamodule.train_dataloader():  # type: ignore[attr-defined]
                counts += torch.bincount(batch["label"].flatten(), minlength=self.num_classes)[: self.num_classes]
            self.class_weight = inverse_frequency_weights(counts, self.ignore_index).to(self.device)

    def configure_callbacks(self) -> list[Callback]:
        """``EarlyStopping`` when ``early_stopping`` is set (its keys are Lightning's arguments)."""
        cfg = self.hparams.get("early_stopping")
        if not cfg:
            return []
        from lightning.pytorch.callbacks import EarlyStopping

        return [EarlyStopping(**dict(cfg))]

    def on_after_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        """Augment training batches (``augment``) on their device; other batches pass unchanged."""
        trainer = self._trainer
        if self.augment is not None and trainer is not None and trainer.training:
            return self.augment(batch)
        return batch

    def _shared_step(self, batch: Batch, stage: Stage) -> Tensor:
        logits = self(batch)
        target = batch["label"]
        B = target.shape[0]
        smoothing = self.label_smoothing if stage == "train" else 0.0
        loss = masked_cross_entropy(logits, target, self.ignore_index, self.class_weight, smoothing)
        preds = logits.argmax(dim=1)
        metrics = {"train": self.train_metrics, "val": self.val_metrics, "test": self.test_metrics}[stage]
        metrics.update(preds, target)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=B, sync_dist=True)
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage != "train", batch_size=B)
        if stage == "test":
            self.test_confmat.update(preds, target)
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        """Loss of one training batch (metrics logged per epoch)."""
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """Update the validation loss and metrics."""
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        """Update the test loss, metrics and confusion matrix."""
        self._shared_step(batch, "test")

    def on_test_epoch_start(self) -> None:
        """Start the test confusion matrix afresh."""
        self.test_confmat.reset()

    def configure_optimizers(self) -> Any:
        """The configured optimiser (default AdamW, lr 1e-3) and optional scheduler."""
        factory = self.hparams["optimizer"] or functools.partial(torch.optim.AdamW, lr=1e-3)
        optimizer = factory(params=self.parameters())
        if self.hparams["scheduler"] is None:
            return optimizer
        scheduler = self.hparams["scheduler"](optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.hparams["monitor"], "interval": "epoch"},
        }


__all__ = ["SITSClassifierModule"]
