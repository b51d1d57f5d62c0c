"""Failed runs leave a record: the NaN-loss check and the failed summary.json."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mtan_s1s2.cli.config import in_multirun
from mtan_s1s2.cli.failures import (
    raise_if_loss_not_finite,
    record_failure,
    record_prediction_failure,
    write_failed_summary,
)
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_loss_fails_the_run(value):
    with pytest.raises(FloatingPointError, match=r"train/loss is .*model\.optimizer\.lr"):
        raise_if_loss_not_finite({"train/loss": value, "val/OA": 0.5})


def test_finite_or_absent_loss_passes():
    raise_if_loss_not_finite({"train/loss": 0.3})
    raise_if_loss_not_finite({"test/OA": 0.9})  # train=false: nothing to check


def test_failed_summary_keeps_what_the_run_recorded(tmp_path):
    epoch = {
        "epoch": 0,
        "train_epoch_s": 2.5,
        "val_epoch_s": None,
        "train_samples": 8,
        "train_samples_per_s": 3.2,
        "warmup": True,
        "resumed": False,
    }
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "backend": "conv", "epochs": [epoch]}))
    cfg = OmegaConf.create({"mlp": {"_target_": "mtan_s1s2.models.layers.mlp.LinearMlp"}, "seed": 3, "task_name": "t"})
    try:
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
    except RuntimeError as err:
        write_failed_summary(tmp_path, err, cfg)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["status"] == "failed"
    assert data["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert data["backend"] == "conv" and data["epochs"] == [epoch]  # kept
    assert data["seed"] == 3 and "Traceback" in data["error_traceback"]


def test_failure_before_training_writes_a_minimal_summary(tmp_path):
    cfg = OmegaConf.create(
        {"mlp": {"_target_": "mtan_s1s2.models.layers.mlp.ConvMlp"}, "seed": 1, "paths": {"output_dir": str(tmp_path)}}
    )
    assert not in_multirun()
    assert record_failure(cfg, ValueError("bad value")) is False  # a single run re-raises
    data = json.loads((tmp_path / "summary.json").read_text())
    assert (data["status"], data["error"], data["backend"], data["seed"]) == (
        "failed",
        "ValueError: bad value",
        "conv",
        1,
    )


@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_failure_record_names_every_backend_as_the_registry_does(tmp_path, backend):
    """A job that fails before training is recorded under the backend name of its mlp config
    (``channels_last``, never a name derived from the class, such as ``channelslast``)."""
    cls = MLP_BACKENDS[backend]
    mlp = {"_target_": f"{cls.__module__}.{cls.__qualname__}", "_partial_": True}
    cfg = OmegaConf.create({"mlp": mlp, "seed": 1, "paths": {"output_dir": str(tmp_path)}})
    record_failure(cfg, MemoryError("out of memory"))
    assert json.loads((tmp_path / "summary.json").read_text())["backend"] == backend


def test_failed_prediction_job_is_recorded_for_the_scene_summary(tmp_path):
    from mtan_s1s2.inference.sweep import summarize_predictions

    job = tmp_path / "0"
    cfg = OmegaConf.create({"scene": "tile_b", "paths": {"output_dir": str(job)}})
    try:
        raise OSError("tile_b/s2.tif: not a GeoTIFF")
    except OSError as err:
        assert record_prediction_failure(cfg, err, "predict_summary.json") is False  # a single run re-raises
    data = json.loads((job / "predict_summary.json").read_text())
    message = "OSError: tile_b/s2.tif: not a GeoTIFF"
    assert (data["status"], data["scene"], data["error"]) == ("failed", "tile_b", message)
    assert "Traceback" in data["error_traceback"]
    rows = summarize_predictions(tmp_path)
    assert [(r["job"], r["scene"], r["status"], r["error"]) for r in rows] == [
        ("0", "tile_b", "failed", "OSError: tile_b/s2.tif: not a GeoTIFF")
    ]
