"""``python train.py``: train and test a classifier from the Hydra config in ``configs/``.

``main`` carries ``@hydra.main``; :func:`train` does the work so tests can call it with a
composed config (lightning-hydra-template layout).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    in_multirun,
    prepare_run,
    register_resolvers,
    resolve_user_paths,
    sweep_params_ignored,
)
from mtan_s1s2.cli.console import quiet_lightning, warnings_to_log
from mtan_s1s2.cli.ddp import single_run_for_ddp
from mtan_s1s2.cli.failures import raise_if_loss_not_finite, record_failure
from mtan_s1s2.cli.plugins import require_sweep_plugins
from mtan_s1s2.cli.runners import make_runner
from mtan_s1s2.cli.validate import ConfigError, check_config, exit_config_error, validate_command_line
from mtan_s1s2.data.datamodule import SITSDataModule

log = logging.getLogger(__name__)

register_resolvers()


def start_run(cfg: DictConfig) -> Path:
    """The start of a training run: absolute user paths, the config check, seeds; the output folder.

    Raises:
        ConfigError: On a config value of the wrong type or an unknown argument.
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    return prepare_run(cfg)


def build_datamodule(cfg: DictConfig, output_dir: Path) -> SITSDataModule:
    """The run's datamodule (``cfg.data``); its split is recorded in ``output_dir``."""
    log.info("Instantiating datamodule <%s>", cfg.data._target_)
    datamodule: SITSDataModule = hydra.utils.instantiate(cfg.data)
    datamodule.write_split(output_dir)
    return datamodule


def train(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Build data and model from ``cfg``; fit, then test; write what the run produced.

    Every option of the ``model`` group runs through the same steps
    (:func:`~mtan_s1s2.cli.runners.make_runner`): the Lightning models (``model=mtan``,
    ``model=tempcnn``) with a ``Trainer``, callbacks and loggers; a baseline
    (``model=random_forest``) fitted and evaluated on the same data, with the same output
    files (:class:`~mtan_s1s2.baselines.harness.BaselineRunner`).

    User paths (``data.root``, ``ckpt_path``, ...) are made absolute against the launch
    directory first, and every value is checked against the argument it feeds
    (:func:`~mtan_s1s2.cli.validate.check_config`). The model's input channels and class
    count are taken from the datamodule (``model.net.in_channels``, ``model.num_classes``,
    which ``model.net.num_classes`` follows), and one batch is checked against the model
    before any training, so a data/model mismatch fails fast with a ``ValueError`` naming the
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
        from test), and the instantiated ``datamodule``, ``model``, ``trainer`` (None for
        a baseline).

    Raises:
        ConfigError: On a config value of the wrong type or an unknown argument.
    """
    output_dir = start_run(cfg)
    datamodule = build_datamodule(cfg, output_dir)
    runner = make_runner(cfg, datamodule, output_dir)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        metrics.update(runner.fit(ckpt_path=cfg.get("ckpt_path")))
    if cfg.get("test", False):
        metrics.update(runner.test(ckpt_path=cfg.get("ckpt_path")))
    runner.finish(metrics)
    return metrics, runner.objects


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
    if ignored := sweep_params_ignored():
        log.warning(ignored)
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


__all__ = ["build_datamodule", "main", "start_run", "train"]
