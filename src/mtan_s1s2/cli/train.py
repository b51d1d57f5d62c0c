"""``python train.py``: train and test a classifier from the Hydra config in ``configs/``.

``main`` carries ``@hydra.main``; :func:`train` does the work so tests can call it with a
composed config (lightning-hydra-template layout).
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.baselines.harness import fit_baseline
from mtan_s1s2.baselines.random_forest import RandomForestBaseline
from mtan_s1s2.callbacks.checkpoint import best_model_summary
from mtan_s1s2.callbacks.classification_report import ClassificationReport
from mtan_s1s2.callbacks.run_summary import RunSummary
from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    in_multirun,
    prepare_run,
    register_resolvers,
    resolve_trainer_precision,
    resolve_user_paths,
)
from mtan_s1s2.cli.console import RESUME_NOISE, progress_bar_callbacks_allowed, quiet_lightning, warnings_to_log
from mtan_s1s2.cli.ddp import single_run_for_ddp
from mtan_s1s2.cli.failures import raise_if_loss_not_finite, record_failure
from mtan_s1s2.cli.plugins import require_sweep_plugins
from mtan_s1s2.cli.validate import ConfigError, check_config, exit_config_error, validate_command_line
from mtan_s1s2.data.datamodule import SITSDataModule, data_contract
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.models.reference_times import auto_ref_range, dates_outside_reference

log = logging.getLogger(__name__)

register_resolvers()


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


def _test_checkpoint(cfg: DictConfig, trainer: L.Trainer) -> str | None:
    """The checkpoint to test (None: the weights in memory), saying why when it is not the best one."""
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
    if not cfg.get("train", True):
        ckpt = cfg.get("ckpt_path")
        return str(ckpt) if ckpt else None
    if best["monitor"]:
        log.warning(
            "No best checkpoint: %s was never a finite number (empty validation split?), so the best-checkpoint "
            "test is skipped; testing the weights of the last epoch instead.",
            best["monitor"],
        )
    return None


def _report(trainer: L.Trainer, metrics: dict[str, float], output_dir: Path) -> None:
    """The end of the run on the console and in ``train.log``: best checkpoint, test metrics, report files."""
    best = best_model_summary(trainer)
    if best["path"]:
        log.info("Best checkpoint: %s (%s %.4f)", Path(best["path"]).resolve(), best["monitor"], best["score"])
    elif getattr(trainer, "fast_dev_run", False):
        log.info("Best checkpoint: none (fast_dev_run writes no checkpoint)")
    elif best["monitor"]:
        log.info("Best checkpoint: none (%s was never finite); last checkpoint in %s", best["monitor"], output_dir)
    test = {k: v for k, v in sorted(metrics.items()) if k.startswith("test/")}
    if test:
        log.info("Test metrics: %s", ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
    report = next((c for c in trainer.callbacks if isinstance(c, ClassificationReport)), None)  # type: ignore[attr-defined]
    if report is not None and report.paths:
        others = ", ".join(p.name for p in report.paths[1:])
        log.info("Per-class report: %s (confusion matrix: %s)", report.paths[0].resolve(), others)
    log.info("Outputs in %s", output_dir.resolve())


def _log_tensorboard_hparams(loggers: list[Logger], cfg: DictConfig, metrics: dict[str, float], best: Any) -> None:
    """The resolved config as hyperparameters of every TensorBoard logger, with the run's key results."""
    results = {
        "hp/best_val_score": best if best is not None else math.nan,
        "hp/test_OA": metrics.get("test/OA", math.nan),
    }
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.log_hyperparams(flat_config(cfg), metrics=results)
            logger.save()


def fill_from_data(net_cfg: DictConfig, datamodule: SITSDataModule) -> None:
    """Fill the network keys that depend on the data: ``seq_len`` (``???``) and ``ref_range: auto``.

    * ``model.net.seq_len`` (TempCNN): dates per sample, from ``datamodule.seq_len`` (pixel
      tables whose pixels all have the same number of dates).
    * ``model.net.ref_range: auto`` (mTAN): the reference times span the data's dates,
      ``datamodule.doy_range / model.net.time_scale``.

    A model whose reference times do not cover the data's dates (e.g. the default one-year
    ``ref_range: [0, 1]`` on a 2.5-year datacube) gets one warning naming both spans and
    the fix (:func:`~mtan_s1s2.models.reference_times.dates_outside_reference`).

    Raises:
        ValueError: If the data cannot provide the value; the message names the key.
    """
    if "seq_len" in net_cfg.keys() and OmegaConf.is_missing(net_cfg, "seq_len"):
        seq_len = getattr(datamodule, "seq_len", None)
        if not seq_len:
            raise ValueError(
                f"model.net.seq_len: this model needs the same number of dates in every sample, which "
                f"{type(datamodule).__name__} does not guarantee (dates vary per sample). Use a pixel table with "
                "regular dates (data=table) or set model.net.seq_len."
            )
        net_cfg.seq_len = dict(seq_len)
    if net_cfg.get("ref_range") == "auto":
        scale = float(net_cfg.get("time_scale", 365.0))
        lo, hi = datamodule.doy_range
        net_cfg.ref_range = auto_ref_range((lo, hi), scale)
        log.info("model.net.ref_range=auto: reference times over doy %.0f..%.0f (tau %s)", lo, hi, net_cfg.ref_range)
    if "ref_range" in net_cfg.keys():
        warning = dates_outside_reference(
            datamodule.doy_range, net_cfg.ref_range, float(net_cfg.get("time_scale", 365.0)),
            int(net_cfg.get("num_ref_times", 16)),
        )  # fmt: skip
        if warning:
            log.warning("%s", warning)


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Build data, model, callbacks, loggers and trainer from ``cfg``; fit, then test.

    A baseline model (``model=random_forest``) is fitted and evaluated on the same data by
    :func:`~mtan_s1s2.baselines.harness.fit_baseline` instead, with the same output files.

    User paths (``data.root``, ``ckpt_path``, ...) are made absolute against the launch
    directory first, and every value is checked against the argument it feeds
    (:func:`~mtan_s1s2.cli.validate.check_config`). The model's input channels and class
    count are taken from the datamodule (``model.net.in_channels``,
    ``model.net.num_classes``), and one batch is checked against the model before any
    training, so a data/model mismatch fails fast with a ``ValueError`` naming the
    expected shape and the config key.

    ``ckpt_path`` resumes a fit (a path, or ``last``: the newest ``last.ckpt`` of this run
    directory, nothing when there is none yet). The test uses the best checkpoint by
    ``callbacks.model_checkpoint.monitor``; without one (``fast_dev_run``, a validation
    split that never gave a finite score) the weights in memory, saying so. The end of
    the run logs the best checkpoint, the test metrics and the per-class report's path.

    Args:
        cfg: The composed ``configs/train.yaml``.

    Returns:
        ``(metrics, objects)``: every logged metric as a float (validation from fit, test
        from test), and the instantiated ``datamodule``, ``model``, ``trainer``.

    Raises:
        ConfigError: On a config value of the wrong type or an unknown argument.
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    output_dir = prepare_run(cfg)

    log.info("Instantiating datamodule <%s>", cfg.data._target_)
    datamodule: SITSDataModule = hydra.utils.instantiate(cfg.data)
    datamodule.write_split(output_dir)
    if issubclass(hydra.utils.get_class(cfg.model._target_), RandomForestBaseline):  # model=random_forest
        baseline = hydra.utils.instantiate(cfg.model)
        (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        extra = {"seed": cfg.get("seed"), "task_name": cfg.get("task_name")}
        scores = fit_baseline(baseline, datamodule, output_dir, extra, test=bool(cfg.get("test", True)))
        log.info("Outputs in %s", output_dir)
        return scores, {"datamodule": datamodule, "model": baseline, "trainer": None}
    with open_dict(cfg):
        # "???" (the default) means "take it from the data"; an explicit value is kept and
        # checked against a real batch below.
        if OmegaConf.is_missing(cfg.model.net, "in_channels"):
            cfg.model.net.in_channels = dict(datamodule.in_channels)
        fill_from_data(cfg.model.net, datamodule)
        cfg.model.net.num_classes = int(datamodule.num_classes)
        cfg.model.num_classes = int(datamodule.num_classes)
        cfg.model.ignore_index = int(datamodule.ignore_index)
        cfg.model.class_names = list(datamodule.class_names)
    backend = cfg.mlp._target_ if "mlp" in cfg.model.net else "none"
    log.info("Instantiating model <%s> with mlp backend <%s>", cfg.model.net._target_, backend)
    model: SITSClassifierModule = hydra.utils.instantiate(cfg.model)
    # What prediction on other files needs to feed the model as in training (cli/predict.py).
    model.hparams["data_contract"] = data_contract(datamodule)

    datamodule.setup("fit")
    first = next(iter(datamodule.train_dataloader()))
    model.net.check_inputs({m: first[m] for m in model.net.modalities if m in first})

    precision_reason = resolve_trainer_precision(cfg)
    log.info("Precision %s (%s)", cfg.trainer.precision, precision_reason)
    loggers = _instantiate_list(cfg.get("logger"))
    callbacks = _instantiate_list(cfg.get("callbacks")) + [lg for lg in loggers if isinstance(lg, Callback)]
    for callback in callbacks:
        if isinstance(callback, RunSummary):
            callback.precision_reason = precision_reason
    callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, callbacks)
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        default_root_dir=str(output_dir),
        enable_progress_bar=show_bar,
    )
    if trainer.world_size == 1:  # the datamodule resumes an interrupted epoch's order itself
        warnings.filterwarnings("ignore", message=RESUME_NOISE)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        trainer.fit(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    if cfg.get("test", False):
        trainer.test(model=model, datamodule=datamodule, ckpt_path=_test_checkpoint(cfg, trainer))
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    _log_tensorboard_hparams(loggers, cfg, metrics, best_model_summary(trainer)["score"])
    _report(trainer, metrics, output_dir)
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


@require_sweep_plugins
@validate_command_line("train")
@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns ``cfg.optimized_metric`` for hyperparameter sweepers.

    A mistake in the command line (unknown key, value of the wrong type) stops the run at
    start-up with one line per mistake and exit status 2. A run that raises, or whose
    training loss ends NaN/inf, is recorded in its ``summary.json`` with ``status:
    failed`` and the error, which is logged once (an error about the input, e.g. a missing
    ``data.reference_date``, in one line). A single run then exits with status 1; a
    multirun job returns None instead, so the other jobs still run (the sweep summary
    lists the failure and the sweep exits non-zero at the end, see :mod:`mtan_s1s2.sweep`).

    Args:
        cfg: The composed ``configs/train.yaml``.

    Returns:
        The value of ``cfg.optimized_metric``, or None.
    """
    warnings_to_log()
    try:
        with single_run_for_ddp(cfg):
            metrics, _ = train(cfg)
        raise_if_loss_not_finite(metrics)
    except ConfigError as err:
        if in_multirun():
            record_failure(cfg, err)
            return None
        exit_config_error(err)
    except Exception as err:
        if not record_failure(cfg, err):  # logged once there; Hydra would print it again
            raise SystemExit(1) from None
        return None
    key = cfg.get("optimized_metric")
    return metrics.get(key) if key else None


__all__ = ["fill_from_data", "flat_config", "main", "train"]
