"""``python train.py``: train and test a classifier from the Hydra config in ``configs/``.

``main`` carries ``@hydra.main``; :func:`train` does the work so tests can call it with a
composed config (lightning-hydra-template layout).
"""

from __future__ import annotations

import logging
from typing import Any, cast

import hydra
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.baselines.harness import fit_baseline
from mtan_s1s2.baselines.random_forest import RandomForestBaseline
from mtan_s1s2.cli.config import CONFIG_DIR, prepare_run, register_resolvers
from mtan_s1s2.cli.ddp import single_run_for_ddp
from mtan_s1s2.cli.failures import raise_if_loss_not_finite, record_failure
from mtan_s1s2.cli.plugins import require_sweep_plugins
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.lit_module import SITSClassifierModule

log = logging.getLogger(__name__)

register_resolvers()


def _instantiate_list(cfg: DictConfig | None) -> list[Any]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for _, c in cfg.items() if c is not None and "_target_" in c]


def fill_from_data(net_cfg: DictConfig, datamodule: SITSDataModule) -> None:
    """Fill the network keys that depend on the data: ``seq_len`` (``???``) and ``ref_range: auto``.

    * ``model.net.seq_len`` (TempCNN): dates per sample, from ``datamodule.seq_len`` (pixel
      tables whose pixels all have the same number of dates).
    * ``model.net.ref_range: auto`` (mTAN): the reference times span the data's dates,
      ``datamodule.doy_range / model.net.time_scale``.

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
        doy_range = getattr(datamodule, "doy_range", None)
        if doy_range is None:
            raise ValueError(
                f"model.net.ref_range=auto needs the date range of the data, which {type(datamodule).__name__} does "
                "not give; set model.net.ref_range=[start,end] (in units of doy / model.net.time_scale)."
            )
        scale = float(net_cfg.get("time_scale", 365.0))
        lo, hi = (float(v) for v in doy_range)
        net_cfg.ref_range = [lo / scale, max(hi, lo + 1.0) / scale]
        log.info("model.net.ref_range=auto: reference times over doy %.0f..%.0f (tau %s)", lo, hi, net_cfg.ref_range)


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Build data, model, callbacks, loggers and trainer from ``cfg``; fit, then test.

    A baseline model (``model=random_forest``) is fitted and evaluated on the same data by
    :func:`~mtan_s1s2.baselines.harness.fit_baseline` instead, with the same output files.

    The model's input channels and class count are taken from the datamodule
    (``model.net.in_channels``, ``model.net.num_classes``), and one batch is checked
    against the model before any training, so a data/model mismatch fails fast with a
    ``ValueError`` naming the expected shape and the config key.

    Args:
        cfg: The composed ``configs/train.yaml``.

    Returns:
        ``(metrics, objects)``: every logged metric as a float (validation from fit, test
        from test), and the instantiated ``datamodule``, ``model``, ``trainer``.
    """
    output_dir = prepare_run(cfg)

    log.info("Instantiating datamodule <%s>", cfg.data._target_)
    datamodule: SITSDataModule = hydra.utils.instantiate(cfg.data)
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
    # Self-contained checkpoints: load_from_checkpoint(path) rebuilds the network from this.
    model.hparams["net_config"] = OmegaConf.to_container(cfg.model.net, resolve=True)

    datamodule.setup("fit")
    first = next(iter(datamodule.train_dataloader()))
    model.net.check_inputs({m: first[m] for m in model.net.modalities if m in first})

    callbacks = _instantiate_list(cfg.get("callbacks"))
    loggers = _instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, default_root_dir=str(output_dir)
    )
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        trainer.fit(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    if cfg.get("test", False):
        checkpoint = cast("ModelCheckpoint | None", trainer.checkpoint_callback)  # typed as the Checkpoint base
        ckpt = checkpoint.best_model_path if checkpoint else ""
        trainer.test(model=model, datamodule=datamodule, ckpt_path=ckpt or None, weights_only=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    log.info("Outputs in %s", output_dir)
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


@require_sweep_plugins
@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns ``cfg.optimized_metric`` for hyperparameter sweepers.

    A run that raises, or whose training loss ends NaN/inf, is recorded in its
    ``summary.json`` with ``status: failed`` and the error. A single run then re-raises;
    a multirun job returns None instead, so the other jobs still run (the sweep summary
    lists the failure and the sweep exits non-zero at the end, see
    :mod:`mtan_s1s2.sweep`).

    Args:
        cfg: The composed ``configs/train.yaml``.

    Returns:
        The value of ``cfg.optimized_metric``, or None.
    """
    try:
        with single_run_for_ddp(cfg):
            metrics, _ = train(cfg)
        raise_if_loss_not_finite(metrics)
    except Exception as err:
        if not record_failure(cfg, err):
            raise
        return None
    key = cfg.get("optimized_metric")
    return metrics.get(key) if key else None


__all__ = ["fill_from_data", "main", "train"]
