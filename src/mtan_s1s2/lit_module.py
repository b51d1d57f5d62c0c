"""LightningModule training a per-pixel SITS classifier (loss, optimiser, metrics)."""

from __future__ import annotations

import csv
import functools
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassCohenKappa,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MulticlassJaccardIndex,
)

from mtan_s1s2.data.batch import modalities_of

Stage = Literal["train", "val", "test"]


def masked_cross_entropy(
    logits: Tensor, target: Tensor, ignore_index: int, weight: Tensor | None = None
) -> Tensor:
    """Cross-entropy over labelled pixels, finite (0) when no pixel is labelled.

    ``F.cross_entropy(reduction="mean")`` divides by the number (or weight) of labelled
    pixels and returns NaN when that is 0; this divides by ``max(total weight, eps)``.

    Args:
        logits: ``(B, K, H, W)`` float logits.
        target: ``(B, H, W)`` int64 labels; ``ignore_index`` pixels are excluded.
        ignore_index: Label value excluded from the loss.
        weight: Optional ``(K,)`` class weights.

    Returns:
        Scalar float32 loss.
    """
    ce = F.cross_entropy(logits.float(), target, weight=weight, ignore_index=ignore_index, reduction="none")
    valid = target != ignore_index
    if weight is None:
        denom = valid.sum().to(ce.dtype)
    else:
        denom = (weight[target.clamp(0, weight.numel() - 1)] * valid).sum()
    return ce.sum() / denom.clamp_min(1e-12)


def inverse_frequency_weights(counts: Tensor, ignore_index: int | None = None) -> Tensor:
    """Class weights ``1 / frequency``, normalised to mean 1 over present classes.

    Classes absent from ``counts`` get weight 0 (they cannot be in the loss anyway), so the
    weights stay finite.

    Args:
        counts: ``(K,)`` pixel counts per class.
        ignore_index: Class whose weight is forced to 0.
    """
    counts = counts.double()
    if ignore_index is not None and 0 <= ignore_index < counts.numel():
        counts = counts.clone()
        counts[ignore_index] = 0
    present = counts > 0
    w = torch.zeros_like(counts)
    w[present] = counts[present].sum() / counts[present]
    if present.any():
        w = w / w[present].mean()
    return w.float()


class SITSClassifierModule(L.LightningModule):
    """Trains a per-pixel classifier on batches of :mod:`mtan_s1s2.data.batch`.

    Metrics (torchmetrics, ``ignore_index`` honoured, classes absent from both prediction
    and target left out of macro averages): overall accuracy ``OA``, macro ``F1``, ``mIoU``
    and Cohen's ``kappa``, logged as ``{stage}/{name}``. At test time per-class F1/IoU and
    the confusion matrix are written as CSV to ``output_dir``.

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
        class_names: Names for the per-class CSV (default ``class_{i}``).
        monitor: Metric the plateau scheduler and checkpointing follow.
        output_dir: Where test-time CSVs go (default: the trainer's ``default_root_dir``).
        compile: Run the network through ``torch.compile``; if compiling fails, warn and
            fall back to eager execution. The state dict keeps its plain keys either way.
        auto_backend: Options of ``mlp=auto``: ``repeats`` (timed steps per backend),
            ``prune_ratio`` (a backend whose first timed step is slower than this factor
            times the fastest gets no further repeats; ``null`` times all fully) and
            ``cache_file`` (JSON cache of decisions, ``null`` to always measure).
        net_config: Hydra config of ``net``, used when ``net`` is None. ``train.py`` stores
            it in every checkpoint, so ``SITSClassifierModule.load_from_checkpoint(path)``
            rebuilds the network by itself; pass ``net=`` (any backend) to override.

    Raises:
        ValueError: If neither ``net`` nor ``net_config`` is given, or on bad
            ``class_weights``.
    """

    def __init__(
        self,
        net: nn.Module | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        num_classes: int = 11,
        ignore_index: int = 0,
        class_weights: Sequence[float] | str | None = None,
        class_names: Sequence[str] | None = None,
        monitor: str = "val/OA",
        output_dir: str | None = None,
        compile: bool = False,
        auto_backend: dict[str, Any] | None = None,
        net_config: dict[str, Any] | None = None,
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
        self.net = net
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        if isinstance(class_weights, str) and class_weights != "inverse_frequency":
            raise ValueError(
                f"model.class_weights must be null, a list of {num_classes} floats or "
                f"'inverse_frequency'; got {class_weights!r}."
            )
        if class_weights is not None and not isinstance(class_weights, str) and len(class_weights) != num_classes:
            raise ValueError(f"model.class_weights has {len(class_weights)} values; expected num_classes={num_classes}.")
        init_w = None if class_weights is None or isinstance(class_weights, str) else torch.tensor(class_weights)
        self.register_buffer("class_weight", init_w, persistent=False)
        self.class_names = list(class_names) if class_names else [f"class_{i}" for i in range(num_classes)]
        self.auto_backend_options = {"repeats": 3, "prune_ratio": 1.25, "cache_file": None, **(auto_backend or {})}
        self.auto_backend: dict[str, Any] | None = None  # the mlp=auto decision, once made
        self.compile_status = "off"
        self._compiled: Callable[..., Tensor] | None = None
        self.configure_metrics()

    def configure_metrics(self) -> None:
        """One ``MetricCollection`` per stage, cloned with the stage prefix (torchgeo style)."""
        k, ii = self.num_classes, self.ignore_index
        metrics = MetricCollection(
            {
                "OA": MulticlassAccuracy(k, average="micro", ignore_index=ii),
                "F1": MulticlassF1Score(k, average="macro", ignore_index=ii),
                "mIoU": MulticlassJaccardIndex(k, average="macro", ignore_index=ii),
                "kappa": MulticlassCohenKappa(k, ignore_index=ii),
            }
        )
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.test_per_class = MetricCollection(
            {
                "F1": MulticlassF1Score(k, average="none", ignore_index=ii),
                "IoU": MulticlassJaccardIndex(k, average="none", ignore_index=ii),
            }
        )
        self.test_confmat = MulticlassConfusionMatrix(k, ignore_index=ii)

    def forward(self, batch: dict[str, Any]) -> Tensor:
        inputs = {m: batch[m] for m in modalities_of(batch)}
        if self._compiled is not None:
            try:
                return self._compiled(inputs)
            except Exception as err:  # compilers fail in many ways; eager always works
                warnings.warn(f"torch.compile failed ({type(err).__name__}: {err}); falling back to eager mode.")
                self._compiled = None
                self.compile_status = f"failed, eager fallback: {type(err).__name__}"
        return self.net(inputs)

    def setup(self, stage: str) -> None:
        """Before optimisers exist: resolve ``mlp=auto`` and compile when asked."""
        if stage == "fit" and getattr(self.net, "requested_backend", None) == "auto" and self.auto_backend is None:
            self.auto_backend = self._select_backend()
        if self.hparams.compile and self._compiled is None and self.compile_status == "off":
            try:
                self._compiled = torch.compile(self.net)
                self.compile_status = "on"
            except Exception as err:
                warnings.warn(f"torch.compile unavailable ({type(err).__name__}: {err}); using eager mode.")
                self.compile_status = f"failed, eager fallback: {type(err).__name__}"

    def _select_backend(self) -> dict[str, Any]:
        from lightning.fabric.utilities.apply_func import move_data_to_device

        from mtan_s1s2.models.backend_selection import select_backend

        trainer = self.trainer
        device = trainer.strategy.root_device
        batch = next(iter(trainer.datamodule.train_dataloader()))  # type: ignore[union-attr]
        inputs = move_data_to_device({m: batch[m] for m in modalities_of(batch)}, device)
        result = select_backend(
            self.net,
            inputs,
            device,
            precision=str(trainer.precision),
            repeats=int(self.auto_backend_options["repeats"]),
            prune_ratio=self.auto_backend_options["prune_ratio"],
            cache_file=self.auto_backend_options["cache_file"] if trainer.is_global_zero else None,
            autocast=trainer.precision_plugin.forward_context,
        )
        # Every DDP rank must train the same backend: rank 0 decides.
        choice = trainer.strategy.broadcast(result["choice"], src=0)
        if choice != self.net.backend:
            self.net.set_backend(choice)
            result["choice"] = choice
        return result

    def on_fit_start(self) -> None:
        if self.hparams.class_weights == "inverse_frequency" and self.class_weight is None:
            counts = torch.zeros(self.num_classes, dtype=torch.long)
            for batch in self.trainer.datamodule.train_dataloader():  # type: ignore[union-attr]
                counts += torch.bincount(batch["label"].flatten(), minlength=self.num_classes)[: self.num_classes]
            self.class_weight = inverse_frequency_weights(counts, self.ignore_index).to(self.device)

    def _shared_step(self, batch: dict[str, Any], stage: Stage) -> Tensor:
        logits = self(batch)
        target = batch["label"]
        B = target.shape[0]
        loss = masked_cross_entropy(logits, target, self.ignore_index, self.class_weight)
        preds = logits.argmax(dim=1)
        metrics = {"train": self.train_metrics, "val": self.val_metrics, "test": self.test_metrics}[stage]
        metrics.update(preds, target)
        self.log(f"{stage}/loss", loss, on_step=False, on_epoch=True, prog_bar=True, batch_size=B, sync_dist=True)
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage != "train", batch_size=B)
        if stage == "test":
            self.test_per_class.update(preds, target)
            self.test_confmat.update(preds, target)
        return loss

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        per_class = {k: v.cpu() for k, v in self.test_per_class.compute().items()}
        confmat = self.test_confmat.compute().cpu()
        self.test_per_class.reset()
        self.test_confmat.reset()
        if self.trainer.is_global_zero:
            out = Path(self.hparams.output_dir or self.trainer.default_root_dir)
            write_per_class_csv(out / "test_per_class.csv", self.class_names, per_class, confmat, self.ignore_index)
            write_confusion_csv(out / "test_confusion_matrix.csv", self.class_names, confmat)

    def configure_optimizers(self) -> Any:
        factory = self.hparams.optimizer or functools.partial(torch.optim.AdamW, lr=1e-3)
        optimizer = factory(params=self.parameters())
        if self.hparams.scheduler is None:
            return optimizer
        scheduler = self.hparams.scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": self.hparams.monitor, "interval": "epoch"},
        }


def write_per_class_csv(
    path: Path, class_names: Sequence[str], per_class: dict[str, Tensor], confmat: Tensor, ignore_index: int
) -> None:
    """Write per-class support, F1 and IoU (``ignore_index`` row left out)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    support = confmat.sum(dim=1)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["class_index", "class_name", "support_pixels", "F1", "IoU"])
        for i, name in enumerate(class_names):
            if i == ignore_index:
                continue
            writer.writerow([i, name, int(support[i]), f"{float(per_class['F1'][i]):.6f}", f"{float(per_class['IoU'][i]):.6f}"])


def write_confusion_csv(path: Path, class_names: Sequence[str], confmat: Tensor) -> None:
    """Write the confusion matrix (rows = reference class, columns = predicted class)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["reference\\predicted", *class_names])
        for i, name in enumerate(class_names):
            writer.writerow([name, *[int(v) for v in confmat[i]]])
