"""User paths are relative to the launch directory, also with ``hydra.job.chdir=true``; errors name absolute paths."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.pastis.writer import write_pastis_dataset

REPO = Path(__file__).resolve().parents[2]
RUN = [
    "data=pastis_synthetic", "data.root=data", "data.batch_size=2", "trainer=cpu", "trainer.limit_train_batches=1",
    "trainer.limit_val_batches=1", "test=false", "hydra.job.chdir=true", "paths.log_dir=logs", *TINY_MODEL_OVERRIDES,
]  # fmt: skip


def _train_in(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *RUN, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_relative_data_root_and_ckpt_path_with_chdir(tmp_path, monkeypatch):
    write_pastis_dataset(tmp_path / "data", preset="tiny", n_train=2, n_val=1, n_test=1)
    monkeypatch.chdir(tmp_path)  # a first epoch, in-process, started from tmp_path with relative paths
    overrides = [o for o in RUN if not o.startswith(("hydra.", "paths."))] + ["trainer.max_epochs=1"]
    cfg = compose_train(overrides, output_dir=tmp_path / "first")
    train(cfg)
    # `cd tmp_path && python train.py ... hydra.job.chdir=true`: the job runs in its own directory
    second = _train_in(
        tmp_path, "trainer.max_epochs=2", "hydra.run.dir=logs/second", "ckpt_path=first/checkpoints/last.ckpt"
    )
    assert second.returncode == 0, second.stderr[-3000:]
    run_dir = tmp_path / "logs" / "second"
    assert OmegaConf.load(run_dir / "config.yaml").data.root == str(tmp_path / "data")  # recorded absolute
    summary = json.loads((run_dir / "summary.json").read_text())
    resume = {"ckpt_path": str(tmp_path / "first" / "checkpoints" / "last.ckpt"), "epoch": 1, "global_step": 1}
    # the resumed run trains 2 epochs instead of 1: the cosine schedule is stretched and says so
    changed = {"model.scheduler.T_max": [1, 2], "lr": [0.0, pytest.approx(5e-4)]}
    assert summary["resumes"] == [{**resume, "changed": changed}]
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1]


def test_missing_relative_root_is_reported_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compose_train(["data=pastis", "data.root=nowhere/PASTIS-R", "trainer=cpu"], output_dir=tmp_path / "run")
    with pytest.raises(Exception, match=re.escape(f"data.root='{tmp_path}/nowhere/PASTIS-R'")):  # Hydra wraps it
        train(cfg)
