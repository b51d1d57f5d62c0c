"""Job-side helpers: NaN-loss check, failed summary.json, DDP detection, missing-plugin messages."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mtan_s1s2.sweep.job import (
    _uses_subprocess_ddp,
    in_multirun,
    raise_if_loss_not_finite,
    record_failure,
    write_failed_summary,
)
from mtan_s1s2.sweep.plugins import missing_plugin_message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_loss_fails_the_run(value):
    with pytest.raises(FloatingPointError, match=r"train/loss is .*model\.optimizer\.lr"):
        raise_if_loss_not_finite({"train/loss": value, "val/OA": 0.5})


def test_finite_or_absent_loss_passes():
    raise_if_loss_not_finite({"train/loss": 0.3})
    raise_if_loss_not_finite({"test/OA": 0.9})  # train=false: nothing to check


def test_failed_summary_keeps_what_the_run_recorded(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "backend": "conv", "epochs": [{"epoch": 0}]}))
    cfg = OmegaConf.create({"mlp": {"_target_": "mtan_s1s2.models.layers.mlp.LinearMlp"}, "seed": 3, "task_name": "t"})
    try:
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
    except RuntimeError as err:
        write_failed_summary(tmp_path, err, cfg)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["status"] == "failed"
    assert data["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert data["backend"] == "conv" and data["epochs"] == [{"epoch": 0}]  # kept
    assert data["seed"] == 3 and "Traceback" in data["error_traceback"]


def test_failure_before_training_writes_a_minimal_summary(tmp_path):
    cfg = OmegaConf.create(
        {"mlp": {"_target_": "mtan_s1s2.models.layers.mlp.ConvMlp"}, "seed": 1, "paths": {"output_dir": str(tmp_path)}}
    )
    assert not in_multirun()
    assert record_failure(cfg, ValueError("bad value")) is False  # a single run re-raises
    data = json.loads((tmp_path / "summary.json").read_text())
    assert (data["status"], data["error"], data["backend"], data["seed"]) == ("failed", "ValueError: bad value", "conv", 1)


@pytest.mark.parametrize(
    "strategy,expected",
    [("ddp", True), ("ddp_find_unused_parameters_true", True), ("ddp_spawn", False), ("auto", False), (None, False),
     ({"_target_": "lightning.pytorch.strategies.DDPStrategy"}, True)],
)
def test_subprocess_ddp_detection(strategy, expected):
    assert _uses_subprocess_ddp(OmegaConf.create({"trainer": {"strategy": strategy}})) is expected


def test_missing_plugin_message_names_the_extra():
    msg = missing_plugin_message(["-m", "hparams_search=optuna", "mlp=conv"], is_installed=lambda module: False)
    assert "hydra-optuna-sweeper" in msg and 'pip install "mtan-s1s2[optuna]"' in msg
    msg = missing_plugin_message(["hydra/launcher=slurm", "+hydra/launcher=joblib"], is_installed=lambda m: False)
    assert "mtan-s1s2[slurm]" in msg and "mtan-s1s2[joblib]" in msg
    assert missing_plugin_message(["hparams_search=optuna"], is_installed=lambda m: True) is None
    assert missing_plugin_message(["mlp=conv", "-m"], is_installed=lambda m: False) is None
