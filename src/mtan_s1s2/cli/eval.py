"""``python eval.py ckpt_path=...``: test metrics of a trained checkpoint.

The model is rebuilt from the training run's ``config.yaml`` (next to its
``checkpoints/`` folder, or ``train_config=...``) and loaded with the checkpoint's weights;
the data are the run's data config (same split, crop and normalisation, so the metrics
are those the run logged) unless ``data=...`` is given. A checkpoint of any MLP backend
loads into any other (``mlp=conv``); by default the run's own backend is used
(for an ``mlp=auto`` run, the backend it chose, saved in the checkpoint).

Outputs in the run directory (``logs/eval/runs/<date>_<time>_<host>-<pid>/``):
``metrics.json`` (OA, macro-F1, mIoU, kappa, loss), ``test_per_class.csv`` (support, F1,
IoU per class), ``test_confusion_matrix.csv`` and ``.png`` (rows = reference class,
columns = predicted class), ``config.yaml``.

**Ensembles**: ``ckpt_path=[a.ckpt,b.ckpt,c.ckpt]`` (or a glob, a run folder, a sweep
folder: :func:`~mtan_s1s2.ensemble.members.resolve_checkpoints`) evaluates the mean of the
members' probabilities (:mod:`mtan_s1s2.ensemble.model`). The members must agree on
classes, inputs and data (:func:`~mtan_s1s2.ensemble.members.check_members_agree`); the
data are the first member's run's. The run directory gets the ensemble's files above plus
``test_probabilities.npz``, each member's in ``members/<i>_<run>/``, and
``members.csv``: one line per member, their mean, and the ensemble, with the Δ of the
ensemble against the mean member in ``metrics.json``.

``main`` carries ``@hydra.main``; :func:`evaluate` does the work so tests can call it.
"""

from __future__ import annotations

import csv
import json
import logging
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.baselines.base import FeatureBaseline, load_baseline
from mtan_s1s2.baselines.harness import BaselineRunner
from mtan_s1s2.callbacks.classification_report import ClassificationReport
from mtan_s1s2.callbacks.test_probabilities import TestProbabilities
from mtan_s1s2.checkpoints import (
    RADIOMETRY_OVERRIDE,
    apply_input_spec,
    check_classes,
    check_inputs,
    command_line_overrides,
    data_config_of,
    is_lightning_run,
    load_classifier,
    load_contract,
    load_run_config,
)
from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    prepare_run,
    register_resolvers,
    resolve_trainer_precision,
    resolve_user_paths,
)
from mtan_s1s2.cli.console import progress_bar_callbacks_allowed, quiet_lightning, warnings_to_log
from mtan_s1s2.cli.validate import ConfigError, check_config, exit_config_error, validate_command_line
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.ensemble.members import check_members_agree, is_ensemble, load_members, resolve_checkpoints
from mtan_s1s2.ensemble.model import EnsembleModule
from mtan_s1s2.lit_module import SITSClassifierModule

log = logging.getLogger(__name__)

register_resolvers()


def build_datamodule(
    cfg: DictConfig, run_cfg: DictConfig, contract: Mapping[str, Any] | None = None, overrides: Sequence[str] = ()
) -> SITSDataModule:
    """The datamodule of ``cfg.data`` if given, else the run's (same split and crop).

    Keys added with the run's data (``+data.split.parcels=...``) are merged over it
    (:func:`~mtan_s1s2.checkpoints.data_config_of`). Stored values become inputs as in
    training: the checkpoint's radiometry and normalisation replace the data config's
    (:func:`~mtan_s1s2.checkpoints.apply_input_spec`; a command-line value contradicting them
    needs ``radiometry_override=true``).

    Raises:
        ValueError: If the command line contradicts the checkpoint's inputs.
    """
    data_cfg = apply_input_spec(
        data_config_of(cfg, run_cfg), contract, overrides, bool(cfg.get(RADIOMETRY_OVERRIDE, False))
    )
    loader = {k: cfg.get(k) for k in ("batch_size", "num_workers") if cfg.get(k) is not None}
    with open_dict(data_cfg):
        data_cfg.update(loader)
    log.info("Instantiating datamodule <%s>", data_cfg._target_)
    datamodule: SITSDataModule = hydra.utils.instantiate(data_cfg)
    return datamodule


def test_module(
    cfg: DictConfig, model: SITSClassifierModule, datamodule: SITSDataModule, output_dir: Path
) -> tuple[dict[str, float], L.Trainer]:
    """``trainer.test`` of ``model`` with the report files (and ``test_probabilities.npz``) in ``output_dir``.

    Returns:
        ``(metrics, trainer)``: every logged test metric.
    """
    resolve_trainer_precision(cfg)
    report = [ClassificationReport(str(output_dir)), TestProbabilities(str(output_dir))]
    callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, report)
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, logger=False, callbacks=callbacks, default_root_dir=str(output_dir), enable_progress_bar=show_bar
    )
    trainer.test(model=model, datamodule=datamodule)
    return {k: float(v) for k, v in trainer.callback_metrics.items()}, trainer


def evaluate_classifier(
    cfg: DictConfig, run_cfg: DictConfig, datamodule: SITSDataModule, output_dir: Path
) -> tuple[dict[str, float], dict[str, Any]]:
    """Test a Lightning checkpoint of ``train.py`` with a ``Trainer`` (backend ``cfg.mlp`` if given).

    Returns:
        ``(metrics, objects)`` as :func:`evaluate`.
    """
    model = load_classifier(run_cfg, cfg.ckpt_path, cfg.get("mlp"))
    check_classes(model, datamodule)
    datamodule.setup("test")
    check_inputs(model, next(iter(datamodule.test_dataloader())))
    log.info("Evaluating %s (backend %s) on the test split", cfg.ckpt_path, model.net.backend)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    metrics, trainer = test_module(cfg, model, datamodule, output_dir)
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


MEMBERS_DIR, MEMBERS_FILE = "members", "members.csv"
"""An ensemble's folder of per-member reports and its table of member and ensemble metrics."""

_REPORTED = ("OA", "F1", "mIoU", "kappa", "loss")


def evaluate_ensemble(cfg: DictConfig, overrides: Sequence[str]) -> tuple[dict[str, float], dict[str, Any]]:
    """Test the mean of the probabilities of the checkpoints ``cfg.ckpt_path`` names, and each member.

    Every member is loaded once, checked against the others
    (:func:`~mtan_s1s2.ensemble.members.check_members_agree`) and tested on the first
    member's data (``data=...`` replaces it), its reports in ``members/<i>_<run>/``; then
    the ensemble (:class:`~mtan_s1s2.ensemble.model.EnsembleModule`), its reports in the
    run directory. Writes ``members.csv`` and ``metrics.json`` (see the module docstring).

    Returns:
        ``(metrics, objects)``: the ensemble's test metrics and the ``datamodule``, the
        ``model`` (the ensemble), ``trainer``, ``members`` (each member's metrics).

    Raises:
        ValueError: If a checkpoint is missing, is a baseline's, or differs from the first
            in classes, input record or data (naming the member and the key).
    """
    paths = resolve_checkpoints(cfg.ckpt_path)
    log.info("Ensemble of %d checkpoints: %s", len(paths), ", ".join(map(str, paths)))
    members = load_members(paths, cfg.get("train_config"), cfg.get("mlp"))
    check_members_agree(members)
    output_dir = prepare_run(cfg)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    datamodule = build_datamodule(cfg, members[0].run_cfg, members[0].contract, overrides)
    check_classes(members[0].model, datamodule)
    datamodule.setup("test")
    ensemble = EnsembleModule([m.model for m in members])
    check_inputs(ensemble, next(iter(datamodule.test_dataloader())))
    rows: list[dict[str, Any]] = []
    for i, member in enumerate(members, start=1):
        folder = output_dir / MEMBERS_DIR / f"{i}_{member.ckpt_path.parent.parent.name}"
        folder.mkdir(parents=True, exist_ok=True)
        log.info("Member %d/%d: %s (backend %s)", i, len(members), member.ckpt_path, member.model.net.backend)
        metrics, _ = test_module(cfg, member.model, datamodule, folder)
        rows.append({"member": str(i), "ckpt_path": str(member.ckpt_path), "backend": member.model.net.backend,
                     **{m: metrics.get(f"test/{m}") for m in _REPORTED}})  # fmt: skip
    log.info("The ensemble of %d members (backends %s)", len(members), ensemble.net.backend)
    metrics, trainer = test_module(cfg, ensemble, datamodule, output_dir)
    mean_member = {m: statistics.fmean(v) for m in _REPORTED if (v := [r[m] for r in rows if r[m] is not None])}
    delta = {m: metrics[f"test/{m}"] - mean_member[m] for m in _REPORTED if f"test/{m}" in metrics and m in mean_member}
    ensemble_row = {"member": "ensemble", "backend": ensemble.net.backend}
    table = [
        *rows,
        {"member": "mean", **mean_member},
        {**ensemble_row, **{m: metrics.get(f"test/{m}") for m in _REPORTED}},
    ]
    with open(output_dir / MEMBERS_FILE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["member", "ckpt_path", "backend", *_REPORTED], restval="")
        writer.writeheader()
        writer.writerows(table)
    record = {
        "ckpt_path": [str(p) for p in paths],
        "ensemble": True,
        "backend": ensemble.net.backend,
        "split": "test",
        "n_patches": len(datamodule.test_dataloader().dataset),  # type: ignore[arg-type]  # a map-style Dataset, sized
        "metrics": dict(sorted(metrics.items())),
        "mean_member": mean_member,
        "delta_vs_mean_member": delta,
        "members": rows,
    }
    (output_dir / "metrics.json").write_text(json.dumps(record, indent=2))
    log.info("Ensemble test metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    log.info("Ensemble - mean member: %s", {k: round(v, 4) for k, v in delta.items()})
    log.info("Outputs in %s", output_dir)
    objects = {"datamodule": datamodule, "model": ensemble, "trainer": trainer, "members": rows}
    return metrics, objects


def evaluate_baseline(
    cfg: DictConfig,
    run_cfg: DictConfig,
    datamodule: SITSDataModule,
    output_dir: Path,
    baseline: FeatureBaseline | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Test the fitted baseline of a feature-baseline run (its ``checkpoints/<backend>.joblib``).

    The same features, metrics and report files as the run's own test
    (:class:`~mtan_s1s2.baselines.harness.BaselineRunner`).

    Args:
        cfg: The composed ``eval.yaml``.
        run_cfg: The run's config (its ``model._target_`` names the baseline class).
        datamodule: The data to test on.
        output_dir: Where the report files go.
        baseline: The model read from ``cfg.ckpt_path`` (None: read it here).

    Returns:
        ``(metrics, objects)`` as :func:`evaluate` (``trainer`` None, no ``test/loss``).

    Raises:
        ValueError: If the run's model is no feature baseline or the file holds another one.
    """
    cls = hydra.utils.get_class(run_cfg.model._target_)
    if not issubclass(cls, FeatureBaseline):
        raise ValueError(
            f"eval.py tests Lightning checkpoints and feature-baseline runs (model=random_forest, lightgbm, "
            f"minirocket, multirocket_hydra); the run's model is {cls.__name__}."
        )
    baseline = baseline if baseline is not None else load_baseline(cfg.ckpt_path, cls)
    log.info("Evaluating %s (%s) on the test split", cfg.ckpt_path, baseline.backend)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    runner = BaselineRunner(baseline, datamodule, output_dir)
    return runner.test(), runner.objects


def evaluate(cfg: DictConfig, overrides: Sequence[str] | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Test metrics of ``cfg.ckpt_path`` (see the module docstring).

    Args:
        cfg: The composed ``configs/eval.yaml``.
        overrides: The command line's overrides (None: the running Hydra job's).

    Returns:
        ``(metrics, objects)``: the test metrics (``test/OA``, ``test/F1``, ``test/mIoU``,
        ``test/kappa``, and ``test/loss`` for the Lightning models) and the
        ``datamodule``, ``model``, ``trainer`` (an ensemble's: :func:`evaluate_ensemble`).
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    overrides = command_line_overrides() if overrides is None else list(overrides)
    if is_ensemble(cfg.ckpt_path):
        return evaluate_ensemble(cfg, overrides)
    run_cfg = load_run_config(cfg.ckpt_path, cfg.get("train_config"))
    output_dir = prepare_run(cfg)
    lightning_model = is_lightning_run(run_cfg)
    baseline = None if lightning_model else load_baseline(cfg.ckpt_path, hydra.utils.get_class(run_cfg.model._target_))
    contract = load_contract(cfg.ckpt_path) if baseline is None else baseline.contract
    datamodule = build_datamodule(cfg, run_cfg, contract, overrides)
    if baseline is None:
        metrics, objects = evaluate_classifier(cfg, run_cfg, datamodule, output_dir)
    else:
        metrics, objects = evaluate_baseline(cfg, run_cfg, datamodule, output_dir, baseline)
    model = objects["model"]
    record = {
        "ckpt_path": str(Path(cfg.ckpt_path).resolve()),
        "backend": model.net.backend if lightning_model else model.backend,
        "split": "test",
        "n_patches": len(datamodule.test_dataloader().dataset),  # type: ignore[arg-type]  # a map-style Dataset, sized
        "metrics": dict(sorted(metrics.items())),
    }
    (output_dir / "metrics.json").write_text(json.dumps(record, indent=2))
    log.info("Test metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    log.info("Outputs in %s", output_dir)
    return metrics, objects


@validate_command_line("eval")
@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="eval")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns the test overall accuracy (exit status 2 on a config mistake)."""
    warnings_to_log()
    try:
        metrics, _ = evaluate(cfg)
    except ConfigError as err:
        exit_config_error(err)
    return metrics.get("test/OA")


__all__ = [
    "MEMBERS_DIR",
    "MEMBERS_FILE",
    "build_datamodule",
    "evaluate",
    "evaluate_baseline",
    "evaluate_classifier",
    "evaluate_ensemble",
    "main",
    "test_module",
]
