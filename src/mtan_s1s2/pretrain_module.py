"""LightningModule of ``task=pretrain``: self-supervised pretraining of the mTAN encoder.

The encoder of :class:`~mtan_s1s2.models.mtan.MTANClassifier` learns to reconstruct
held-out acquisitions of every pixel with at least one valid observation, labelled or not
(:mod:`mtan_s1s2.models.reconstruction`; ``docs/model.md``, "Self-supervised
pretraining"). The loss, logged per epoch as ``train/loss`` and ``val/loss``, is the mean
squared error over the held-out valid observations of the epoch (normalised units, every
observation and channel weighted alike). The run writes an encoder checkpoint
(:mod:`mtan_s1s2.pretrained`) that ``model.pretrained=<file>`` starts a classifier from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor

from mtan_s1s2.data.batch import Batch, modalities_of
from mtan_s1s2.lit_module import configure_optimization
from mtan_s1s2.metrics import LabelledLoss
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.reconstruction import MTANReconstructor
from mtan_s1s2.utils.configs import factory_config, plain


class SITSPretrainModule(L.LightningModule):
    """Pretrains the encoder of an mTAN by reconstructing held-out acquisitions.

    ``task=pretrain`` turns any mTAN option of the ``model`` group into this module
    (``python train.py task=pretrain model=mtan_small_real data=worldcereal``): the network
    config (``model.net``), optimiser and schedule are those of the model option; the
    classifier's recipe keys (``num_classes``, ``class_weights``, ``label_smoothing``,
    ``augment``, ...) are accepted so that every option composes, and are not used.

    Args:
        net: Hydra config of :class:`~mtan_s1s2.models.mtan.MTANClassifier` (or the
            network itself); its head is built but never trained.
        optimizer: Optimiser config or factory, called with ``params=`` (default AdamW,
            lr 1e-3).
        scheduler: Optional LR-scheduler config or factory, called with ``optimizer=``.
        mask_ratio: Share of every sample's valid dates held out of the input and
            reconstructed, ``(0, 1)`` (``model.mask_ratio``).
        decoder_hidden: Hidden width of each modality's decoder MLP.
        monitor: Metric the plateau scheduler follows (``val/loss`` under ``task=pretrain``).
        compile: Accepted for the model configs; pretraining runs eagerly.
        early_stopping: Keyword arguments of Lightning's ``EarlyStopping`` (built by ``train()``).
        net_config: Hydra config of ``net`` when ``net`` is None.
        num_classes: Not used (the classifier's).
        ignore_index: Not used.
        class_weights: Not used.
        class_names: Not used.
        label_smoothing: Not used.
        augment: Not used (held-out dates are the only corruption).
        pretrained: Must be null: pretraining starts from a fresh encoder.
        freeze_encoder_epochs: Not used.
        checkpoint_ensemble: Not used (the encoder is that of the best epoch by ``val/loss``).

    Raises:
        ValueError: If the network is not an :class:`~mtan_s1s2.models.mtan.MTANClassifier`,
            ``mask_ratio`` is outside ``(0, 1)`` or ``pretrained`` is set.
    """

    def __init__(
        self,
        net: MTANClassifier | Mapping[str, Any] | None = None,
        optimizer: Mapping[str, Any] | Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Mapping[str, Any] | Callable[..., Any] | None = None,
        mask_ratio: float = 0.3,
        decoder_hidden: int = 64,
        monitor: str = "val/loss",
        compile: bool | Literal["auto"] = False,
        early_stopping: Mapping[str, Any] | None = None,
        net_config: Mapping[str, Any] | None = None,
        num_classes: int = 2,
        ignore_index: int = 0,
        class_weights: Sequence[float] | str | None = None,
        class_names: Sequence[str] | None = None,
        label_smoothing: float = 0.0,
        augment: Mapping[str, Any] | None = None,
        pretrained: str | None = None,
        freeze_encoder_epochs: int = 0,
        checkpoint_ensemble: int = 1,
    ) -> None:
        super().__init__()
        if isinstance(net, Mapping):
            net_config, net = net, None
        if pretrained:
            raise ValueError(
                f"task=pretrain trains a fresh encoder; model.pretrained={pretrained!r} is for fine-tuning a "
                "classifier. Drop model.pretrained (or drop task=pretrain to fine-tune)."
            )
        optimizer_cfg = factory_config(optimizer, "model.optimizer")
        scheduler_cfg = factory_config(scheduler, "model.scheduler")
        self._optimizer_factory = optimizer if optimizer_cfg is None and callable(optimizer) else None
        self._scheduler_factory = scheduler if scheduler_cfg is None and callable(scheduler) else None
        self.save_hyperparameters(
            {
                "optimizer": optimizer_cfg,
                "scheduler": scheduler_cfg,
                "mask_ratio": float(mask_ratio),
                "decoder_hidden": int(decoder_hidden),
                "monitor": str(monitor),
                "net_config": plain(net_config),
                "early_stopping": plain(early_stopping),
            }
        )
        if net is None:
            if net_config is None:
                raise ValueError("SITSPretrainModule needs `net` or `net_config` (a Hydra config with `_target_`).")
            import hydra

            net = hydra.utils.instantiate(self.hparams["net_config"])
        if not isinstance(net, MTANClassifier):
            raise ValueError(
                f"task=pretrain pretrains the mTAN encoder, but model.net is {type(net).__name__}; use an mTAN "
                "option of the model group (model=mtan or model=mtan_small_real)."
            )
        net.head.requires_grad_(False)  # the classifier's head: not part of the encoder
        if net.head_norm is not None:
            net.head_norm.requires_grad_(False)
        self.net: MTANClassifier = net
        self.reconstructor = MTANReconstructor(net, mask_ratio, decoder_hidden)
        self.train_loss = LabelledLoss()
        self.val_loss = LabelledLoss()

    def _step(self, batch: Batch, metric: LabelledLoss, generator: torch.Generator | None = None) -> Tensor:
        inputs = {m: batch[m] for m in modalities_of(batch) if m in self.net.in_channels}
        total, count, _ = self.reconstructor(inputs, generator=generator)
        metric.update(total, count, count.long())
        loss: Tensor = total / count.clamp_min(1.0)
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        """Masked reconstruction MSE of one batch (logged per epoch, observation-weighted)."""
        loss = self._step(batch, self.train_loss)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """Add the batch's reconstruction error to the epoch's ``val/loss``.

        The held-out dates of validation batches are drawn with a generator seeded by the
        batch index, so every epoch scores the same observations.
        """
        self._step(batch, self.val_loss, torch.Generator(device=self.device).manual_seed(batch_idx))

    def on_validation_epoch_end(self) -> None:
        """Log ``val/loss`` over the epoch's held-out valid observations."""
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        self.val_loss.reset()

    def configure_optimizers(self) -> Any:
        """The configured optimiser (default AdamW, lr 1e-3) over the trainable parameters, and scheduler."""
        return configure_optimization(self, [p for p in self.parameters() if p.requires_grad])


__all__ = ["SITSPretrainModule"]
