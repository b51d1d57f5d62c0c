"""Failed runs leave a record: the NaN-loss check and the failed summary.json."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import hydra
import pytest
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from mtan_s1s2.cli.config import in_multirun
from mtan_s1s2.cli.failures import (
    input_error,
    raise_if_loss_not_finite,
    record_failure,
    record_prediction_failure,
    write_failed_summary,
)
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS

REPO = Path(__file__).resolve().parents[2]


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
    assert record_failure(cfg, ValueError("bad value")) is False  # a single run then exits with status 1
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


def test_an_input_error_is_logged_once_in_one_line_and_others_with_their_traceback(tmp_path, caplog):
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path)}})
    node = OmegaConf.create({"_target_": "mtan_s1s2.data.dates.resolve_reference_date", "spec": None})
    with pytest.raises(InstantiationException) as wrapped:  # how a datamodule's ValueError reaches main()
        hydra.utils.instantiate(node)
    assert isinstance(input_error(wrapped.value), ValueError) and input_error(RuntimeError("bug")) is None
    with caplog.at_level(logging.ERROR):
        record_failure(cfg, wrapped.value)
    (record,) = caplog.records
    assert record.exc_info is None and record.getMessage().count("data.reference_date is not set") == 1
    assert record.getMessage().startswith("Job failed: ValueError: data.reference_date is not set: give day 0")
    assert record.getMessage().endswith(f"recorded in {tmp_path / 'summary.json'}")
    assert "Traceback" in json.loads((tmp_path / "summary.json").read_text())["error_traceback"]
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        record_failure(cfg, RuntimeError("index out of range in the attention"))
    (record,) = caplog.records
    assert record.exc_info is not None  # a bug keeps its traceback


def test_a_single_run_that_fails_on_its_input_says_so_once(tmp_path):
    from fixtures.scene_files import write_default_scenes

    root = write_default_scenes(tmp_path / "cube", "datacube")  # no data.reference_date: the reader refuses
    run_dir = tmp_path / "run"
    labels = "+data.labels.classes={a: [1], b: [2]}"
    command = [sys.executable, "train.py", "data=datacube", f"data.root={root}", labels, f"hydra.run.dir={run_dir}"]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert text.count("data.reference_date is not set") == 1 and "Traceback" not in text, text
    (line,) = [line for line in text.splitlines() if "data.reference_date is not set" in line]
    assert "Job failed: ValueError: data.reference_date is not set" in line
    assert line.endswith(f"recorded in {run_dir / 'summary.json'}")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
