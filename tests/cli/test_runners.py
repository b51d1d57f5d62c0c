"""One interface for every model option: the runner is chosen from the class the config names."""

from __future__ import annotations

from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from lightning.pytorch.callbacks import EarlyStopping
from omegaconf import OmegaConf

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.baselines.harness import BaselineRunner
from mtan_s1s2.cli.runners import LightningRunner, early_stopping_callbacks, make_runner
from mtan_s1s2.cli.train import build_datamodule, start_run


def _runner(tmp_path: Path, *overrides: str):
    cfg = compose_train(["data=synthetic_tiny", "trainer=cpu", *QUIET_OVERRIDES, *overrides], output_dir=tmp_path)
    try:
        output_dir = start_run(cfg)
        return make_runner(cfg, build_datamodule(cfg, output_dir), output_dir)
    finally:
        GlobalHydra.instance().clear()


def test_lightning_models_and_baselines_get_their_runner(tmp_path):
    stop = "model.early_stopping={monitor: val/loss, patience: 2}"
    lightning = _runner(tmp_path / "mtan", *TINY_MODEL_OVERRIDES, stop)
    assert isinstance(lightning, LightningRunner)
    objs = lightning.objects
    assert objs["model"].num_classes == objs["datamodule"].num_classes == objs["model"].net.num_classes
    stoppers = [c for c in objs["trainer"].callbacks if isinstance(c, EarlyStopping)]
    assert [(s.monitor, s.patience) for s in stoppers] == [("val/loss", 2)]
    baseline = _runner(tmp_path / "rf", "model=random_forest", "model.n_estimators=5", "model.n_jobs=1")
    assert isinstance(baseline, BaselineRunner) and baseline.objects["trainer"] is None
    assert baseline.objects["model"].params["n_estimators"] == 5


def test_early_stopping_callbacks_follow_the_model_recipe():
    assert early_stopping_callbacks(OmegaConf.create({"early_stopping": None})) == []
    (stopper,) = early_stopping_callbacks(
        OmegaConf.create({"early_stopping": {"monitor": "val/loss", "mode": "min", "patience": 30}})
    )
    assert isinstance(stopper, EarlyStopping) and (stopper.monitor, stopper.patience) == ("val/loss", 30)
