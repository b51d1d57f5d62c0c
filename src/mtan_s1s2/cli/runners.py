"""The model of a run behind one interface: fit, test, finish.

``train.py`` runs every option of the ``model`` group the same way; :func:`make_runner` is
the one place that tells the kinds apart by the class the config names:

* a LightningModule (``model=mtan``, ``model=tempcnn``, ...): :class:`LightningRunner`
  builds the network from the data, the callbacks, the loggers and the ``Trainer``;
* ``task=pretrain`` (:class:`~mtan_s1s2.pretrain_module.SITSPretrainModule`):
  :class:`PretrainRunner`, the same with unlabelled samples, no test, and an encoder
  checkpoint at the end;
* a feature baseline (``model=random_forest``, ``lightgbm``, ``minirocket``, ``multirocket_hydra``):
  :class:`~mtan_s1s2.baselines.harness.BaselineRunner`.

Both have ``fit(ckpt_path)`` (returns the validation metrics), ``test(ckpt_path)`` (the
test metrics and the per-class report), ``finish(metrics)`` (the end of the run in the
log) and ``objects`` (``datamodule``, ``model``, ``trainer``).
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any, Protocol

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.baselines.harness import BaselineRunner
from mtan_s1s2.callbacks.auto_backend import AutoBackend, warn_if_auto_unresolved
from mtan_s1s2.callbacks.checkpoint import BestCheckpoint, best_model_summary, top_k_checkpoints
from mtan_s1s2.callbacks.classification_report import ClassificationReport
from mtan_s1s2.callbacks.run_summary import RunSummary
from mtan_s1s2.checkpoints import load_classifier, read_checkpoint
from mtan_s1s2.cli.config import resolve_trainer_precision
from mtan_s1s2.cli.console import RESUME_NOISE, progress_bar_callbacks_allowed
from mtan_s1s2.data.datamodule import SITSDataModule, data_contract
from mtan_s1s2.data.date_grid import regular_dates
from mtan_s1s2.ensemble.model import EnsembleModule
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.models.losses import training_class_weights
from mtan_s1s2.models.mtan import AUTO_SPATIAL_CONTEXT, MTANClassifier
from mtan_s1s2.models.reference_times import auto_num_ref_times, auto_ref_range, dates_outside_reference
from mtan_s1s2.pretrain_module import SITSPretrainModule
from mtan_s1s2.pretrained import ENCODER_FILE, load_encoder_weights, prepare_fine_tuning, save_encoder

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What ``train()`` needs of a model: fit, test, finish (see the module docstring)."""

    @property
    def objects(self) -> dict[str, Any]:
        """``{"datamodule", "model", "trainer"}`` (``trainer`` None for baselines)."""
        ...

    def fit(self, ckpt_path: str | None = None) -> dict[str, float]:
        """Train (resuming from ``ckpt_path`` where the model can); the logged metrics."""
        ...

    def test(self, ckpt_path: str | None = None) -> dict[str, float]:
        """The test metrics (of ``ckpt_path`` when there is no better checkpoint)."""
        ...

    def finish(self, metrics: dict[str, float]) -> None:
        """Record and log the end of the run."""
        ...


def make_runner(cfg: DictConfig, datamodule: SITSDataModule, output_dir: Path) -> Runner:
    """The runner of ``cfg.model``: :class:`LightningRunner` for a LightningModule, else a baseline's.

    Raises:
        ValueError: On a data/model mismatch (see :class:`LightningRunner`).
    """
    cls = hydra.utils.get_class(cfg.model._target_)
    if issubclass(cls, SITSPretrainModule):
        return PretrainRunner(cfg, datamodule, output_dir)
    if issubclass(cls, L.LightningModule):
        return LightningRunner(cfg, datamodule, output_dir)
    extra = {"seed": cfg.get("seed"), "task_name": cfg.get("task_name")}
    return BaselineRunner(hydra.utils.instantiate(cfg.model), datamodule, output_dir, extra)


def _instantiate_list(cfg: DictConfig | None) -> list[Any]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for _, c in cfg.items() if c is not None and "_target_" in c]


def flat_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config (without ``hydra``) as ``{"model.net.d_model": 32, ...}``, lists as text."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif isinstance(node, list):
            out[prefix] = str(node)
        else:
            out[prefix] = node

    container = OmegaConf.to_container(cfg, resolve=True)
    walk({k: v for k, v in container.items() if k != "hydra"} if isinstance(container, dict) else {}, "")
    return out


def fill_from_data(net_cfg: DictConfig, datamodule: SITSDataModule) -> None:
    """Fill the network keys that depend on the data: ``seq_len`` (``???``) and the ``auto`` reference times.

    * ``model.net.seq_len`` (TempCNN): dates per sample, from ``datamodule.seq_len`` (pixel
      tables whose pixels all have the same number of dates, equal across modalities).
      Otherwise (datacubes, scenes), for a model with a ``date_range`` key, ``seq_len``
      becomes None and ``date_range`` (if null) the data's first and last doy: the
      model interpolates every series at dates every ``date_step_days`` over it.
    * ``model.net.ref_range: auto`` (mTAN): the reference times span the data's dates,
      ``datamodule.doy_range / model.net.time_scale``.
    * ``model.net.num_ref_times: auto`` (mTAN): at least 16, one reference time per date of
      a regular series (``datamodule.seq_len``) and one per 30 days of the dates' span
      (:func:`~mtan_s1s2.models.reference_times.auto_num_ref_times`).

    * ``model.net.spatial_context: auto`` (mTAN): the neighbourhood of
      :data:`~mtan_s1s2.models.mtan.AUTO_SPATIAL_CONTEXT` pixels on rasters, 1 (per pixel) on
      pixel tables (``datamodule.rasters``).

    A model whose reference times do not cover the data's dates (e.g. the default one-year
    ``ref_range: [0, 1]`` on a 2.5-year datacube) gets one warning naming both spans and
    the fix (:func:`~mtan_s1s2.models.reference_times.dates_outside_reference`).

    Raises:
        ValueError: If the data cannot provide the value; the message names the key.
    """
    if "seq_len" in net_cfg.keys() and OmegaConf.is_missing(net_cfg, "seq_len"):
        seq_len = getattr(datamodule, "seq_len", None)
        if seq_len and len(set(seq_len.values())) == 1:
            net_cfg.seq_len = dict(seq_len)
        elif "date_range" in net_cfg.keys():
            net_cfg.seq_len = None
            if net_cfg.date_range is None:
                net_cfg.date_range = [float(v) for v in datamodule.doy_range]
            lo, hi = net_cfg.date_range
            step = float(net_cfg.get("date_step_days", 10.0))
            log.info(
                "model.net.seq_len: %s; every series is interpolated at %d dates every %g days from doy %.0f to %.0f "
                "(model.net.date_range, date_step_days)",
                f"dates per pixel {dict(seq_len)} differ between modalities" if seq_len else "no common date grid",
                len(regular_dates(lo, hi, step)), step, lo, hi,
            )  # fmt: skip
        else:
            raise ValueError(
                f"model.net.seq_len: this model needs the same number of dates in every sample, which "
                f"{type(datamodule).__name__} does not guarantee (dates vary per sample). Use a pixel table with "
                "regular dates (data=table) or set model.net.seq_len."
            )
    if net_cfg.get("num_ref_times") == "auto":
        seq_len = getattr(datamodule, "seq_len", None)
        lo, hi = datamodule.doy_range
        net_cfg.num_ref_times = auto_num_ref_times(seq_len, (lo, hi))
        log.info(
            "model.net.num_ref_times=auto: %d reference times (%s; dates over %.0f days)", net_cfg.num_ref_times,
            f"dates per pixel {dict(seq_len)}" if seq_len else "no regular date grid", hi - lo,
        )  # fmt: skip
    if net_cfg.get("spatial_context") == "auto":
        rasters = bool(getattr(datamodule, "rasters", True))
        net_cfg.spatial_context = AUTO_SPATIAL_CONTEXT if rasters else 1
        log.info(
            "model.net.spatial_context=auto: %s",
            f"the {AUTO_SPATIAL_CONTEXT} x {AUTO_SPATIAL_CONTEXT} px around each pixel, pooled "
            f"({net_cfg.get('spatial_pool', 'mean')}), beside its own"
            if rasters else "per pixel (a pixel table: no neighbours)",
        )  # fmt: skip
    if net_cfg.get("ref_range") == "auto":
        scale = float(net_cfg.get("time_scale", 365.0))
        lo, hi = datamodule.doy_range
        net_cfg.ref_range = auto_ref_range((lo, hi), scale)
        log.info(
            "model.net.ref_range=auto: reference times over doy %.0f to %.0f (ref_range, in tau: %s)",
            lo, hi, [round(float(v), 4) for v in net_cfg.ref_range],
        )  # fmt: skip
    if "ref_range" in net_cfg.keys():
        warning = dates_outside_reference(
            datamodule.doy_range, net_cfg.ref_range, float(net_cfg.get("time_scale", 365.0)),
            int(net_cfg.get("num_ref_times", 16)),
        )  # fmt: skip
        if warning:
            log.warning("%s", warning)


def fill_model_from_data(cfg: DictConfig, datamodule: SITSDataModule) -> None:
    """Set the model keys the data decide: input channels, class count, ignored label, class names.

    ``model.net.in_channels`` is taken from the data only when it is ``???`` (the
    default); an explicit value is kept and checked against a real batch later.
    """
    with open_dict(cfg):
        if OmegaConf.is_missing(cfg.model.net, "in_channels"):
            cfg.model.net.in_channels = dict(datamodule.in_channels)
        fill_from_data(cfg.model.net, datamodule)
        cfg.model.num_classes = int(datamodule.num_classes)  # model.net.num_classes follows it
        cfg.model.ignore_index = int(datamodule.ignore_index)
        cfg.model.class_names = list(datamodule.class_names)


def early_stopping_callbacks(model_cfg: DictConfig) -> list[Callback]:
    """Lightning's ``EarlyStopping`` with the arguments of ``model.early_stopping``, or none when it is null.

    The recipe lives with the model (``model=mtan_small_real`` stops on ``val/loss``), so
    one ``model=...`` option is a whole training recipe.
    """
    spec = model_cfg.get("early_stopping")
    if not spec:
        return []
    from lightning.pytorch.callbacks import EarlyStopping

    kwargs = OmegaConf.to_container(spec, resolve=True) if OmegaConf.is_config(spec) else dict(spec)
    return [EarlyStopping(**kwargs)]  # type: ignore[arg-type]


def keep_checkpoint_ensemble(callbacks: list[Callback], k: int) -> None:
    """Make the best-checkpoint callback keep the ``k`` best epochs (``model.checkpoint_ensemble``).

    Raises:
        ValueError: If ``k`` > 1 and no checkpoint callback monitors a metric
            (``callbacks.model_checkpoint=null``).
    """
    if k <= 1:
        return
    monitored = [c for c in callbacks if isinstance(c, BestCheckpoint) and c.monitor is not None]
    if not monitored:
        raise ValueError(
            f"model.checkpoint_ensemble={k} tests the mean of the {k} best checkpoints, but no checkpoint callback "
            "monitors a metric (callbacks.model_checkpoint is null or has no monitor); restore it, or set "
            "model.checkpoint_ensemble=1."
        )
    monitored[0].save_top_k = k


class LightningRunner:
    """A :class:`~mtan_s1s2.lit_module.SITSClassifierModule` run: model, callbacks, loggers, ``Trainer``.

    Building it fills the model config from the data (:func:`fill_model_from_data`),
    instantiates the model (storing the data contract prediction needs), checks one
    training batch against it, resolves ``trainer.precision`` and builds the trainer.

    Args:
        cfg: The composed ``configs/train.yaml`` (its model keys are filled in place).
        datamodule: The run's data.
        output_dir: The run directory.

    Raises:
        ValueError: If a batch does not fit the model (naming the expected shape and the
            config key), or a data-dependent model key cannot be filled.
    """

    tests_checkpoint_ensembles: bool = True
    """Whether ``model.checkpoint_ensemble`` applies (not to pretraining, which keeps its best encoder)."""

    def __init__(self, cfg: DictConfig, datamodule: SITSDataModule, output_dir: Path) -> None:
        self.cfg, self.datamodule, self.output_dir = cfg, datamodule, Path(output_dir)
        self.model = self._build_model()
        self.loggers: list[Logger] = []
        self.trainer = self._build_trainer()

    @property
    def objects(self) -> dict[str, Any]:
        """``{"datamodule", "model", "trainer"}``."""
        return {"datamodule": self.datamodule, "model": self.model, "trainer": self.trainer}

    def _build_model(self) -> SITSClassifierModule:
        cfg, datamodule = self.cfg, self.datamodule
        encoder = prepare_fine_tuning(cfg, datamodule)  # model.pretrained: checked before any training
        fill_model_from_data(cfg, datamodule)
        backend = cfg.mlp._target_ if "mlp" in cfg.model.net else "none"
        log.info("Instantiating model <%s> with mlp backend <%s>", cfg.model.net._target_, backend)
        model: SITSClassifierModule = hydra.utils.instantiate(cfg.model)
        if encoder is not None:
            loaded = load_encoder_weights(model.net, encoder)  # type: ignore[arg-type]
            log.info("model.pretrained: loaded %d encoder tensors; the head starts fresh", len(loaded))
        # What prediction on other files needs to feed the model as in training (cli/predict.py).
        model.hparams["data_contract"] = data_contract(datamodule)
        datamodule.setup("fit")
        first = next(iter(datamodule.train_dataloader()))
        model.net.check_inputs({m: first[m] for m in model.net.modalities if m in first})
        return model

    def _build_trainer(self) -> L.Trainer:
        cfg = self.cfg
        precision_reason = resolve_trainer_precision(cfg)
        self.loggers = _instantiate_list(cfg.get("logger"))
        callbacks = _instantiate_list(cfg.get("callbacks")) + [lg for lg in self.loggers if isinstance(lg, Callback)]
        for callback in callbacks:
            if isinstance(callback, (RunSummary, AutoBackend)):
                callback.precision_reason = precision_reason
        if not any(isinstance(c, AutoBackend) for c in callbacks):  # which logs it with the other choices
            log.info("Precision %s (%s)", cfg.trainer.precision, precision_reason)
        callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, callbacks)
        callbacks += early_stopping_callbacks(cfg.model)
        if self.tests_checkpoint_ensembles:
            keep_checkpoint_ensemble(callbacks, int(cfg.model.get("checkpoint_ensemble") or 1))
        warn_if_auto_unresolved(self.model.net, callbacks)
        trainer: L.Trainer = hydra.utils.instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=self.loggers or False,
            default_root_dir=str(self.output_dir),
            enable_progress_bar=show_bar,
        )
        if trainer.world_size == 1:  # the datamodule resumes an interrupted epoch's order itself
            warnings.filterwarnings("ignore", message=RESUME_NOISE)
        return trainer

    def fit(self, ckpt_path: str | None = None) -> dict[str, float]:
        """``trainer.fit`` (resumed from ``ckpt_path``); every logged metric.

        With ``model.class_weights: inverse_frequency``, the weights of the training labels
        are computed first (:func:`~mtan_s1s2.models.losses.training_class_weights`). A
        resumed fit keeps the backend and compilation saved in its checkpoint
        (:meth:`~mtan_s1s2.callbacks.auto_backend.AutoBackend.resume_from`).
        """
        model = self.model
        if self.cfg.model.get("class_weights") == "inverse_frequency":
            model.set_class_weights(
                training_class_weights(self.datamodule, model.num_classes, model.ignore_index, model.class_names)
            )
        resumed = self._resume_path(ckpt_path)
        if resumed is not None:  # a resumed fit trains with the backend and compilation its checkpoint chose
            checkpoint = read_checkpoint(resumed)
            for callback in self.trainer.callbacks:  # type: ignore[attr-defined]
                if isinstance(callback, AutoBackend):
                    callback.resume_from(checkpoint)
        self.trainer.fit(model=model, datamodule=self.datamodule, ckpt_path=ckpt_path)
        return {k: float(v) for k, v in self.trainer.callback_metrics.items()}

    def _resume_path(self, ckpt_path: str | None) -> Path | None:
        """The checkpoint file a fit resumes from, None when there is none.

        ``ckpt_path`` itself, or for ``last`` the newest ``last*.ckpt`` in the checkpoint
        callbacks' folders (as Lightning picks it).
        """
        if not ckpt_path:
            return None
        if str(ckpt_path) != "last":
            path = Path(ckpt_path)
            return path if path.is_file() else None
        folders = {Path(d) for cb in self.trainer.checkpoint_callbacks if (d := getattr(cb, "dirpath", None))}
        candidates = [f for folder in folders for f in folder.glob("last*.ckpt") if f.is_file()]
        return max(candidates, key=lambda f: f.stat().st_mtime) if candidates else None

    def test(self, ckpt_path: str | None = None) -> dict[str, float]:
        """``trainer.test`` of the best checkpoint (see :meth:`test_checkpoint`); every logged metric.

        With ``model.checkpoint_ensemble`` > 1 after training, the test is that of the mean
        of the kept best checkpoints' probabilities (:meth:`checkpoint_ensemble`).
        """
        checkpoint = self.test_checkpoint(ckpt_path)
        ensemble = self.checkpoint_ensemble() if checkpoint is not None and self.cfg.get("train", True) else None
        if ensemble is not None:
            self.trainer.test(model=ensemble, datamodule=self.datamodule)
        else:
            self.trainer.test(model=self.model, datamodule=self.datamodule, ckpt_path=checkpoint)
        return {k: float(v) for k, v in self.trainer.callback_metrics.items()}

    def checkpoint_ensemble(self) -> EnsembleModule | None:
        """The mean of the kept best checkpoints (``model.checkpoint_ensemble`` of them), None for fewer than 2.

        Each member is rebuilt from this run's config and loaded from its file
        (:func:`~mtan_s1s2.checkpoints.load_classifier`), as ``eval.py`` loads an ensemble.
        """
        if not self.tests_checkpoint_ensembles or int(self.cfg.model.get("checkpoint_ensemble") or 1) <= 1:
            return None
        kept = top_k_checkpoints(self.trainer)
        if len(kept) < 2:
            return None
        log.info(
            "Testing the checkpoint ensemble of the %d best epochs by %s: %s",
            len(kept),
            best_model_summary(self.trainer)["monitor"],
            ", ".join(f"{Path(c['path']).name} ({c['score']:.4f})" for c in kept),
        )
        return EnsembleModule([load_classifier(self.cfg, c["path"]) for c in kept])

    def test_checkpoint(self, ckpt_path: str | None = None) -> str | None:
        """The checkpoint to test (None: the weights in memory), saying why when it is not the best one.

        Args:
            ckpt_path: The run's ``ckpt_path``, tested when the run did not train
                (``train=false``).
        """
        trainer = self.trainer
        best = best_model_summary(trainer)
        fast_dev_run = getattr(trainer, "fast_dev_run", False)  # set by Lightning from the argument
        if fast_dev_run:
            log.info(
                "fast_dev_run writes no checkpoint, so the best-checkpoint test is skipped: testing the weights in "
                "memory on %s batch(es) to check the pipeline.",
                int(fast_dev_run),
            )
            return None
        if best["path"]:
            return str(best["path"])
        if not self.cfg.get("train", True):
            return str(ckpt_path) if ckpt_path else None
        if best["monitor"]:
            log.warning(
                "No best checkpoint: %s was never a finite number (empty validation split?), so the best-checkpoint "
                "test is skipped; testing the weights of the last epoch instead.",
                best["monitor"],
            )
        return None

    def finish(self, metrics: dict[str, float]) -> None:
        """TensorBoard hyperparameters; the best checkpoint, test metrics and report files in the log."""
        trainer, output_dir = self.trainer, self.output_dir
        best = best_model_summary(trainer)
        results = {
            "hp/best_val_score": best["score"] if best["score"] is not None else math.nan,
            "hp/test_OA": metrics.get("test/OA", math.nan),
        }
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(flat_config(self.cfg), metrics=results)
                logger.save()
        if best["path"]:
            log.info("Best checkpoint: %s (%s %.4f)", Path(best["path"]).resolve(), best["monitor"], best["score"])
            if int(self.cfg.model.get("checkpoint_ensemble") or 1) > 1 and len(best["top_k"]) > 1:
                log.info("Tested: the mean of the %d best checkpoints (model.checkpoint_ensemble)", len(best["top_k"]))
        elif getattr(trainer, "fast_dev_run", False):
            log.info("Best checkpoint: none (fast_dev_run writes no checkpoint)")
        elif best["monitor"]:
            log.info("Best checkpoint: none (%s was never finite); last checkpoint in %s", best["monitor"], output_dir)
        test = {k: v for k, v in sorted(metrics.items()) if k.startswith(("test/", "test_parcel/"))}
        if test:
            log.info("Test metrics: %s", ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
        report = next((c for c in trainer.callbacks if isinstance(c, ClassificationReport)), None)  # type: ignore[attr-defined]
        if report is not None and report.paths:
            others = ", ".join(p.name for p in report.paths[1:])
            log.info("Per-class report: %s (confusion matrix: %s)", report.paths[0].resolve(), others)
        log.info("Outputs in %s", output_dir.resolve())


class PretrainRunner(LightningRunner):
    """A ``task=pretrain`` run: the encoder learns to reconstruct held-out acquisitions.

    Like :class:`LightningRunner`, but the datamodule serves every pixel of each split's
    area, labelled or not (:meth:`~mtan_s1s2.data.datamodule.SITSDataModule.serve_unlabelled`;
    validation: the reconstruction loss over the validation split), there is no test, and
    :meth:`fit` ends by writing the encoder of the best epoch by ``val/loss``
    (``callbacks.model_checkpoint``) to ``<run>/checkpoints/encoder.pt``
    (:func:`~mtan_s1s2.pretrained.save_encoder`).
    """

    encoder_path: Path | None = None
    tests_checkpoint_ensembles = False

    def _build_model(self) -> SITSPretrainModule:  # type: ignore[override]
        cfg, datamodule = self.cfg, self.datamodule
        datamodule.serve_unlabelled()
        fill_model_from_data(cfg, datamodule)
        log.info("Instantiating pretraining of <%s> (task=pretrain)", cfg.model.net._target_)
        model: SITSPretrainModule = hydra.utils.instantiate(cfg.model)
        datamodule.setup("fit")
        first = next(iter(datamodule.train_dataloader()))
        model.net.check_inputs({m: first[m] for m in model.net.modalities if m in first})
        return model

    def fit(self, ckpt_path: str | None = None) -> dict[str, float]:
        """``trainer.fit``, then the encoder checkpoint of the best epoch (or the last one without a best)."""
        self.trainer.fit(model=self.model, datamodule=self.datamodule, ckpt_path=ckpt_path)
        metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
        best = best_model_summary(self.trainer)
        if best["path"]:
            state = torch.load(best["path"], map_location="cpu", weights_only=True)["state_dict"]
            self.model.load_state_dict(state)
        net_config = OmegaConf.to_container(self.cfg.model.net, resolve=True)
        net = self.model.net
        assert isinstance(net, MTANClassifier)  # SITSPretrainModule refuses any other network
        self.encoder_path = save_encoder(
            self.output_dir / "checkpoints" / ENCODER_FILE,
            net,
            net_config,  # type: ignore[arg-type]
            self.datamodule,
            {
                "run_dir": str(self.output_dir.resolve()),
                "mask_ratio": float(self.model.hparams["mask_ratio"]),
                "epochs": int(self.trainer.current_epoch),
                "checkpoint": str(best["path"]) if best["path"] else "weights of the last epoch",
                "val_loss": best["score"] if best["score"] is not None else metrics.get("val/loss"),
            },
        )
        return metrics

    def test(self, ckpt_path: str | None = None) -> dict[str, float]:
        """Nothing: pretraining has no test split to score (``test: false`` under ``task=pretrain``)."""
        log.info("task=pretrain: no test (the encoder is evaluated by fine-tuning: model.pretrained=<encoder.pt>)")
        return {}

    def finish(self, metrics: dict[str, float]) -> None:
        """The encoder checkpoint and the run directory in the log."""
        best = best_model_summary(self.trainer)
        if best["path"]:
            log.info("Best epoch: %s (%s %.4f)", Path(best["path"]).resolve(), best["monitor"], best["score"])
        if self.encoder_path is not None:
            log.info(
                "Encoder checkpoint: %s (fine-tune with model.pretrained=%s)",
                self.encoder_path.resolve(), self.encoder_path.resolve(),
            )  # fmt: skip
        log.info("Outputs in %s", self.output_dir.resolve())


__all__ = [
    "LightningRunner",
    "PretrainRunner",
    "Runner",
    "early_stopping_callbacks",
    "fill_from_data",
    "fill_model_from_data",
    "flat_config",
    "make_runner",
]
