"""LightningModule training a per-pixel SITS classifier (loss, optimiser, metrics)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassConfusionMatrix

from mtan_s1s2.data.augment import SITSAugment
from mtan_s1s2.data.batch import Batch, modalities_of
from mtan_s1s2.metrics import LabelledLoss, classification_metrics
from mtan_s1s2.models.compiling import CompiledNetwork, drop_compiled_copies
from mtan_s1s2.models.losses import masked_cross_entropy_terms
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.reconstruction import encoder_parameters
from mtan_s1s2.models.tempcnn import TempCNN
from mtan_s1s2.parcel_metrics import ParcelAccumulator, ParcelResult, parcel_metrics
from mtan_s1s2.resume_schedule import apply_new_optimization, describe_changes
from mtan_s1s2.utils.configs import build_from_config, factory_config, plain

Stage = Literal["train", "val", "test"]

_STAGE_NAMES = {"train": "training", "val": "validation", "test": "test"}


class SITSClassifierModule(L.LightningModule):
    """Trains a per-pixel classifier on batches of :mod:`mtan_s1s2.data.batch`.

    Metrics (torchmetrics, ``ignore_index`` honoured, classes absent from both prediction
    and target left out of macro averages): overall accuracy ``OA``, macro ``F1``, ``mIoU``
    and Cohen's ``kappa`` (:func:`~mtan_s1s2.metrics.classification_metrics`), logged as
    ``{stage}/{name}``, and ``{stage}/loss``, averaged over the labelled pixels of the
    epoch (:class:`~mtan_s1s2.metrics.LabelledLoss`), not over batches. A validation or
    test split without any labelled pixel (or an empty validation split) logs NaN for all
    of them, with one warning. Over the test split it also accumulates the confusion matrix
    (:attr:`test_confmat`), which the :class:`~mtan_s1s2.callbacks.classification_report.ClassificationReport`
    callback writes out; when the test batches carry parcel ids (``parcel``, from
    ``data.split.parcels``), the pixel probabilities of each parcel are averaged and the
    parcel metrics logged as ``test_parcel/{name}`` (:mod:`mtan_s1s2.parcel_metrics`, kept in
    :attr:`test_parcel_result`).

    Checkpoints hold plain hyperparameters only (the optimiser, scheduler and network as
    Hydra configs: dicts, lists, numbers), so they load with PyTorch's safe
    ``torch.load(weights_only=True)``: ``SITSClassifierModule.load_from_checkpoint(path)``
    and ``trainer.fit(ckpt_path=...)`` work without ``weights_only=False``. What an exact
    resume needs beyond them (random generators, the epoch's training metrics) is kept by
    the :class:`~mtan_s1s2.callbacks.resume.ExactResume` callback.

    Args:
        net: The classifier (mapping a batch to ``(B, K, H, W)`` logits), or its Hydra
            config (``_target_`` and arguments), instantiated here and kept as
            ``net_config``.
        optimizer: Optimiser config (``_target_`` and arguments, ``_partial_`` implied) or
            factory (a class or a ``functools.partial`` of one, e.g. of
            ``torch.optim.AdamW``), called with ``params=``; default AdamW with lr 1e-3.
        scheduler: Optional LR-scheduler config or factory, called with ``optimizer=``;
            ``ReduceLROnPlateau`` monitors ``monitor``.
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: Label excluded from loss and metrics (default 0 = unlabelled).
        class_weights: ``None``, a list of ``K`` floats, or ``"inverse_frequency"``
            (weights of the training labels, given with :meth:`set_class_weights` before
            fit: ``train()`` computes them with
            :func:`~mtan_s1s2.models.losses.training_class_weights`).
        class_names: Class names, index = label (default ``class_{i}``).
        monitor: Metric the plateau scheduler follows.
        label_smoothing: Label smoothing of the training cross-entropy, in ``[0, 1)`` (0 = off).
        augment: Training augmentations ``{temporal_dropout, date_shift_days, noise_std}``
            (:class:`~mtan_s1s2.data.augment.SITSAugment`), applied to training batches
            only; None or all 0 = off.
        early_stopping: Keyword arguments of Lightning's ``EarlyStopping`` (e.g.
            ``{monitor: val/loss, patience: 30}``), part of the training recipe a
            ``model=...`` option records with the weights; the callback itself is built
            by ``train()`` (:func:`~mtan_s1s2.cli.runners.early_stopping_callbacks`). None =
            train for ``trainer.max_epochs``. The checkpoint tested is still the best one of
            ``callbacks.model_checkpoint``.
        checkpoint_ensemble: ``k``: after training, test the mean of the per-pixel softmax
            probabilities of the ``k`` best epochs by ``monitor`` (a checkpoint ensemble,
            Chen, Lundberg & Lee 2017, "Checkpoint ensembles: ensemble methods from a single
            training process", arXiv:1710.03282); ``train()`` keeps that many checkpoints
            (``callbacks.model_checkpoint.save_top_k``) and ``eval.py`` / ``predict.py``
            given the run's folder average them too. 1 = the best epoch alone.
        compile: ``True``: run the network through ``torch.compile`` (if compiling fails,
            warn and fall back to eager execution); ``"auto"``: compile when the
            :class:`~mtan_s1s2.callbacks.auto_backend.AutoBackend` callback finds that it
            pays off within the run (eager without that callback); ``False``: eager. The
            state dict keeps its plain keys either way.
        net_config: Hydra config of ``net``, used when ``net`` is None. Every checkpoint
            stores it, so ``SITSClassifierModule.load_from_checkpoint(path)`` rebuilds the
            network by itself; pass ``net=`` (any backend) to override.
        pretrained: Encoder checkpoint of ``task=pretrain`` the network started from
            (``model.pretrained``), recorded here; ``train()`` checks it and loads its
            tensors (:func:`~mtan_s1s2.pretrained.prepare_fine_tuning`), this module never
            reads the file.
        freeze_encoder_epochs: Train only the head for the first N epochs (the encoder's
            parameters, :data:`~mtan_s1s2.models.mtan.ENCODER_MODULES`, get no gradient),
            then everything; 0 = never frozen.

    Raises:
        ValueError: If neither ``net`` nor ``net_config`` is given, on bad
            ``class_weights``, ``label_smoothing``, ``checkpoint_ensemble`` or ``compile``, or on an
            optimiser/scheduler config
            without ``_target_``.
    """

    class_weight: Tensor | None  # buffer (not persistent): the loss weights, None = unweighted

    def __init__(
        self,
        net: MTANClassifier | TempCNN | Mapping[str, Any] | None = None,
        optimizer: Mapping[str, Any] | Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Mapping[str, Any] | Callable[..., Any] | None = None,
        num_classes: int = 11,
        ignore_index: int = 0,
        class_weights: Sequence[float] | str | None = None,
        class_names: Sequence[str] | None = None,
        monitor: str = "val/OA",
        compile: bool | Literal["auto"] = False,
        net_config: Mapping[str, Any] | None = None,
        label_smoothing: float = 0.0,
        augment: Mapping[str, Any] | None = None,
        early_stopping: Mapping[str, Any] | None = None,
        pretrained: str | None = None,
        freeze_encoder_epochs: int = 0,
        checkpoint_ensemble: int = 1,
    ) -> None:
        super().__init__()
        k = checkpoint_ensemble
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(
                f"model.checkpoint_ensemble must be a whole number >= 1 (the best epochs whose probabilities the test "
                f"averages; 1 = the best epoch alone), got {checkpoint_ensemble!r}."
            )
        if not (compile is True or compile is False or compile == "auto"):
            raise ValueError(f"model.compile must be auto, true or false, got {compile!r}.")
        if isinstance(net, Mapping):
            net_config, net = net, None
        if int(freeze_encoder_epochs) < 0:
            raise ValueError(f"model.freeze_encoder_epochs must be >= 0 epochs, got {freeze_encoder_epochs}.")
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(f"model.label_smoothing must be in [0, 1), got {label_smoothing}.")
        self.label_smoothing = float(label_smoothing)
        self.augment = SITSAugment.from_config(augment)
        if isinstance(class_weights, str) and class_weights != "inverse_frequency":
            raise ValueError(
                f"model.class_weights must be null, a list of {num_classes} floats or "
                f"'inverse_frequency'; got {class_weights!r}."
            )
        if class_weights is not None and not isinstance(class_weights, str) and len(class_weights) != num_classes:
            raise ValueError(
                f"model.class_weights has {len(class_weights)} values; expected num_classes={num_classes}."
            )
        optimizer_cfg = factory_config(optimizer, "model.optimizer")
        scheduler_cfg = factory_config(scheduler, "model.scheduler")
        # A factory that cannot be written as a config (a lambda, ...) is used, not recorded.
        self._optimizer_factory = optimizer if optimizer_cfg is None and callable(optimizer) else None
        self._scheduler_factory = scheduler if scheduler_cfg is None and callable(scheduler) else None
        self.save_hyperparameters(
            {
                "optimizer": optimizer_cfg,
                "scheduler": scheduler_cfg,
                "num_classes": int(num_classes),
                "ignore_index": int(ignore_index),
                "class_weights": plain(class_weights),
                "class_names": plain(class_names),
                "monitor": str(monitor),
                "compile": compile,
                "net_config": plain(net_config),
                "label_smoothing": float(label_smoothing),
                "augment": plain(augment),
                "early_stopping": plain(early_stopping),
                "pretrained": None if pretrained is None else str(pretrained),
                "freeze_encoder_epochs": int(freeze_encoder_epochs),
                "checkpoint_ensemble": int(checkpoint_ensemble),
            }
        )
        if net is None:
            if net_config is None:
                raise ValueError(
                    "SITSClassifierModule needs `net` or `net_config` (a Hydra config with "
                    "`_target_`); checkpoints written by train.py store `net_config`."
                )
            import hydra

            net = hydra.utils.instantiate(self.hparams["net_config"])
        self.net: MTANClassifier | TempCNN = net  # type: ignore[assignment]
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        init_w = None if class_weights is None or isinstance(class_weights, str) else torch.tensor(class_weights)
        self.register_buffer("class_weight", init_w, persistent=False)
        self.class_names = list(class_names) if class_names else [f"class_{i}" for i in range(num_classes)]
        self._compiled: CompiledNetwork | None = None
        self.resume_changes: dict[str, list[Any]] = {}
        """What a resumed fit changed in the checkpoint's optimiser and schedule: key -> [old, new]."""
        self._val_split_empty = False
        self._warned_unlabelled: set[str] = set()
        # Checkpoints of older versions hold a second copy of every weight of a compiled run.
        self.register_load_state_dict_pre_hook(drop_compiled_copies)  # type: ignore[no-untyped-call]
        self.configure_metrics()

    def configure_metrics(self) -> None:
        """One metric collection and one pixel-weighted loss per stage (torchgeo style)."""
        metrics = classification_metrics(self.num_classes, self.ignore_index)
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.train_loss = LabelledLoss()
        self.val_loss = LabelledLoss()
        self.test_loss = LabelledLoss()
        self.test_confmat = MulticlassConfusionMatrix(self.num_classes, ignore_index=self.ignore_index)
        self.test_parcels = ParcelAccumulator(self.ignore_index)
        self.test_parcel_result: ParcelResult | None = None
        """The test parcels of the last test (None: the test batches carried no parcel ids)."""

    def _stage_metrics(self, stage: Stage) -> tuple[MetricCollection, LabelledLoss]:
        return {
            "train": (self.train_metrics, self.train_loss),
            "val": (self.val_metrics, self.val_loss),
            "test": (self.test_metrics, self.test_loss),
        }[stage]

    def forward(self, batch: Batch) -> Tensor:
        """Logits ``(B, K, H, W)`` of a batch (its modalities; labels are not needed)."""
        inputs = {m: batch[m] for m in modalities_of(batch)}
        if self._compiled is not None:
            return self._compiled(inputs)
        return self.net(inputs)  # type: ignore[no-any-return]

    def enable_compile(self, reason: str = "model.compile=true", backend: str = "inductor") -> None:
        """Run the network through ``torch.compile`` from now on (:class:`~mtan_s1s2.models.compiling.CompiledNetwork`).

        Args:
            reason: Recorded in :attr:`compile_status` (``summary.json``).
            backend: ``torch.compile`` backend (``inductor``; ``eager`` captures graphs only).
        """
        if self._compiled is None:
            self._compiled = CompiledNetwork(self.net, reason, backend=backend)

    @property
    def compile_status(self) -> str:
        """``off``, ``on (why)`` or ``failed, eager fallback: <Error>``."""
        return "off" if self._compiled is None else self._compiled.status

    @property
    def compile_record(self) -> dict[str, Any] | None:
        """This run's compilations (:meth:`~mtan_s1s2.models.compiling.CompiledNetwork.record`); None: not compiled."""
        return None if self._compiled is None else self._compiled.record()

    def setup(self, stage: str) -> None:
        """Before optimisers exist: compile the network when ``compile=True``."""
        if self.hparams["compile"] is True and self.compile_status == "off":
            self.enable_compile()

    def set_class_weights(self, weights: Tensor | Sequence[float] | None) -> None:
        """Weigh the loss of class ``k`` by ``weights[k]`` (None: unweighted).

        Raises:
            ValueError: If ``weights`` does not have ``num_classes`` values.
        """
        if weights is None:
            self.class_weight = None
            return
        tensor = torch.as_tensor(weights, dtype=torch.float32)
        if tensor.shape != (self.num_classes,):
            raise ValueError(
                f"class weights must have num_classes={self.num_classes} values, got shape {tuple(tensor.shape)}."
            )
        self.class_weight = tensor.to(self.device)

    def on_fit_start(self) -> None:
        """Check that ``class_weights: inverse_frequency`` got its weights (:meth:`set_class_weights`).

        Raises:
            ValueError: If it did not.
        """
        if self.hparams["class_weights"] == "inverse_frequency" and self.class_weight is None:
            raise ValueError(
                "model.class_weights=inverse_frequency needs the weights of the training labels before fit: "
                "compute them with mtan_s1s2.models.losses.training_class_weights(datamodule, ...) and pass them "
                "to SITSClassifierModule.set_class_weights (train.py does)."
            )

    def on_train_epoch_start(self) -> None:
        """Freeze the encoder during the first ``freeze_encoder_epochs`` epochs, then train it."""
        n = int(self.hparams.get("freeze_encoder_epochs", 0))
        if n <= 0 or not isinstance(self.net, MTANClassifier):
            return
        frozen = self.current_epoch < n
        for p in encoder_parameters(self.net):
            p.requires_grad_(not frozen)

    def on_train_start(self) -> None:
        """Note an empty validation split (its metrics are then logged as NaN)."""
        trainer = self.trainer
        val_batches = trainer.num_val_batches
        if trainer.val_dataloaders is not None and trainer.limit_val_batches != 0 and not sum(val_batches):
            self._val_split_empty = True
            self._warn_unlabelled("val", "it has no batch, e.g. data.n_val=0")

    def on_after_batch_transfer(self, batch: Batch, dataloader_idx: int) -> Batch:
        """Augment training batches (``augment``) on their device; other batches pass unchanged."""
        trainer = self._trainer
        if self.augment is not None and trainer is not None and trainer.training:
            return self.augment(batch)
        return batch

    def _shared_step(self, batch: Batch, stage: Stage) -> tuple[Tensor, Tensor]:
        """``(loss, logits (B, K, H, W))`` of a batch; updates the stage's metrics."""
        logits = self(batch)
        target = batch["label"]
        smoothing = self.label_smoothing if stage == "train" else 0.0
        total, denom = masked_cross_entropy_terms(logits, target, self.ignore_index, self.class_weight, smoothing)
        loss = total / denom.clamp_min(1e-12)
        preds = logits.argmax(dim=1)
        metrics, loss_metric = self._stage_metrics(stage)
        metrics.update(preds, target)
        loss_metric.update(total, denom, (target != self.ignore_index).sum())
        if stage == "train":
            # Lightning computes them at the end of the epoch (synchronised by torchmetrics).
            self.log("train/loss", loss_metric, on_step=False, on_epoch=True, prog_bar=True)
            self.log_dict(metrics, on_step=False, on_epoch=True)
            if self._val_split_empty:  # no validation runs: its metrics are NaN, never 0
                names = [*map(str, self.val_metrics.keys(keep_base=False)), "val/loss"]
                self.log_dict(dict.fromkeys(names, math.nan), on_step=False, on_epoch=True, batch_size=1)
        if stage == "test":
            self.test_confmat.update(preds, target)
            if "parcel" in batch:
                self.test_parcels.update(logits, target, batch["parcel"])
        return loss, logits

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        """Loss of one training batch (metrics logged per epoch)."""
        return self._shared_step(batch, "train")[0]

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """Update the validation loss and metrics."""
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> Tensor:
        """Update the test loss, metrics and confusion matrix; the batch's logits ``(B, K, H, W)``, detached.

        Callbacks read them in ``on_test_batch_end``
        (:class:`~mtan_s1s2.callbacks.test_probabilities.TestProbabilities`).
        """
        return self._shared_step(batch, "test")[1].detach()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Time the step of a compiled network."""
        if self._compiled is not None:
            self._compiled.start_step(self.device)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Close the timing of a compiled training step (forward, backward, optimiser)."""
        if self._compiled is not None:
            self._compiled.end_step("train", self.device)

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Time the step of a compiled network."""
        if self._compiled is not None:
            self._compiled.start_step(self.device)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Close the timing of a compiled validation step."""
        if self._compiled is not None:
            self._compiled.end_step("val", self.device)

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Time the step of a compiled network."""
        if self._compiled is not None:
            self._compiled.start_step(self.device)

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Close the timing of a compiled test step."""
        if self._compiled is not None:
            self._compiled.end_step("test", self.device)

    def _warn_unlabelled(self, stage: Stage, why: str) -> None:
        if stage in self._warned_unlabelled:
            return
        self._warned_unlabelled.add(stage)
        best = "; no checkpoint is chosen as best by it" if stage == "val" else ""
        warnings.warn(
            f"The {_STAGE_NAMES[stage]} split has no labelled pixel ({why}): {stage}/loss and every {stage}/ "
            f"metric are logged as NaN{best}. Give it labelled patches (data.n_{stage}, data.split.folds.{stage}) or "
            f"check its labels against ignore_index={self.ignore_index}.",
            stacklevel=2,
        )

    def _log_epoch(self, stage: Stage) -> None:
        """Log the stage's metrics and loss over the epoch (NaN, with a warning, when nothing was labelled)."""
        metrics, loss_metric = self._stage_metrics(stage)
        with loss_metric.sync_context():
            pixels = int(loss_metric.pixels)
        values: dict[str, Any]
        if pixels == 0:
            values = dict.fromkeys([*map(str, metrics.keys(keep_base=False)), f"{stage}/loss"], math.nan)
            if not self.trainer.sanity_checking:
                self._warn_unlabelled(stage, f"every label is ignore_index={self.ignore_index}")
        else:
            values = {**metrics.compute(), f"{stage}/loss": loss_metric.compute()}
        self.log_dict(values, prog_bar=stage == "val", sync_dist=False)  # already synchronised
        metrics.reset()
        loss_metric.reset()

    def on_validation_epoch_end(self) -> None:
        """Log the validation metrics and pixel-weighted loss of the epoch."""
        self._log_epoch("val")

    def on_test_epoch_start(self) -> None:
        """Start the test confusion matrix and the parcels afresh."""
        self.test_confmat.reset()
        self.test_parcels.reset()
        self.test_parcel_result = None

    def on_test_epoch_end(self) -> None:
        """Log the test metrics and pixel-weighted loss; with parcel ids, the parcel metrics too.

        The parcel metrics (``test_parcel/OA``, ``F1``, ``mIoU``, ``kappa``, ``n_parcels``)
        average the pixel probabilities of each parcel (:mod:`mtan_s1s2.parcel_metrics`).
        """
        self._log_epoch("test")
        if self.test_parcels.update_called:
            self.test_parcel_result = self.test_parcels.compute()
            values, _ = parcel_metrics(self.test_parcel_result, self.num_classes, self.ignore_index)
            self.log_dict(values, sync_dist=False)  # already synchronised
        self.test_parcels.reset()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed fit applies a changed optimiser or schedule (nothing when a checkpoint is tested).

        A changed ``model.optimizer`` or ``model.scheduler`` applies to the resumed fit
        (:func:`~mtan_s1s2.resume_schedule.apply_new_optimization`), with a warning listing
        the differences, old -> new; they are kept in :attr:`resume_changes`. The random
        generators and the epoch's training metrics are restored by the
        :class:`~mtan_s1s2.callbacks.resume.ExactResume` callback.
        """
        trainer = self._trainer
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            self.resume_changes = apply_new_optimization(
                checkpoint, self.hparams["optimizer"], self.hparams["scheduler"]
            )
            if self.resume_changes:
                warnings.warn(describe_changes(self.resume_changes, trainer.ckpt_path), stacklevel=2)

    def configure_optimizers(self) -> Any:
        """The configured optimiser (default AdamW, lr 1e-3) and optional scheduler."""
        return configure_optimization(self, list(self.parameters()))


def configure_optimization(module: L.LightningModule, params: list[torch.nn.Parameter]) -> Any:
    """Lightning's ``configure_optimizers`` result for ``params`` of a task module.

    The optimiser is the module's ``_optimizer_factory`` (a Hydra partial), else its
    ``hparams["optimizer"]`` config, else AdamW with lr 1e-3; the scheduler likewise from
    ``_scheduler_factory`` / ``hparams["scheduler"]``, stepped every epoch and watching
    ``hparams["monitor"]``; without one, the optimiser alone.
    """
    optimizer_factory = getattr(module, "_optimizer_factory", None)
    scheduler_factory = getattr(module, "_scheduler_factory", None)
    if optimizer_factory is not None:
        optimizer = optimizer_factory(params=params)
    elif module.hparams["optimizer"] is not None:
        optimizer = build_from_config(module.hparams["optimizer"], params=params)
    else:
        optimizer = torch.optim.AdamW(params, lr=1e-3)
    if scheduler_factory is not None:
        scheduler = scheduler_factory(optimizer=optimizer)
    elif module.hparams["scheduler"] is not None:
        scheduler = build_from_config(module.hparams["scheduler"], optimizer=optimizer)
    else:
        return optimizer
    return {
        "optimizer": optimizer,
        "lr_scheduler": {"scheduler": scheduler, "monitor": module.hparams["monitor"], "interval": "epoch"},
    }


__all__ = ["SITSClassifierModule", "configure_optimization"]
