"""Resume and requeue: safe checkpoints, a run killed mid-epoch resumed to the same result."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from conftest import TINY_MODEL_OVERRIDES
from mtan_s1s2.checkpoints import load_classifier, load_run_config
from mtan_s1s2.cli.train import train
from mtan_s1s2.lit_module import SITSClassifierModule

REPO = Path(__file__).resolve().parents[2]

# 12 training patches in batches of 4: 3 steps per epoch, 2 epochs; last.ckpt every 2 steps
# (steps 2, 4) and at every epoch end (steps 3, 6). The killed run dies right after step 5,
# mid-epoch 1: it resumes from step 4 and must redo step 5 exactly.
COMMON = [
    "data=synthetic_tiny",
    "data.n_train=12",
    "data.n_val=4",
    "data.n_test=4",
    "trainer=cpu",
    "mlp=linear",  # one backend in every process: mlp=auto may time another one fastest
    "trainer.max_epochs=2",
    "trainer.limit_test_batches=1",
    "callbacks.last_checkpoint.every_n_train_steps=2",
    *TINY_MODEL_OVERRIDES,
]
KILL = "+callbacks.kill={_target_: fixtures.kill_at_step.KillAtStep, step: 5}"
TOLERANCE = 1e-6  # same seed, same CPU, same operations in the same order: observed bit-identical (0.0)


def _run(run_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "train.py", *COMMON, f"hydra.run.dir={run_dir}", f"paths.log_dir={run_dir.parent}", *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, time.perf_counter() - start


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An uninterrupted run, and the same command with ``ckpt_path=last`` killed at step 5, then run again."""
    base = tmp_path_factory.mktemp("resume")
    whole, whole_s = _run(base / "whole")
    killed, killed_s = _run(base / "resumed", "ckpt_path=last", KILL)
    resumed, resumed_s = _run(base / "resumed", "ckpt_path=last")
    return {
        "whole": (base / "whole", whole),
        "killed": killed,
        "resumed": (base / "resumed", resumed),
        "wall_s": {"whole": whole_s, "resumed": killed_s + resumed_s},
    }


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_killed_run_resumes_to_the_same_weights_and_metrics(runs):
    whole_dir, whole = runs["whole"]
    resumed_dir, resumed = runs["resumed"]
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert runs["killed"].returncode == -9, runs["killed"].stderr[-3000:]  # SIGKILL, mid-epoch 1
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restoring states from the checkpoint path at" in resumed.stderr + resumed.stdout
    a = torch.load(whole_dir / "checkpoints" / "last.ckpt")  # weights_only=True, PyTorch's default
    b = torch.load(resumed_dir / "checkpoints" / "last.ckpt")
    assert a["global_step"] == b["global_step"] == 6
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=0, atol=TOLERANCE, msg=key)
    sa = json.loads((whole_dir / "summary.json").read_text())
    sb = json.loads((resumed_dir / "summary.json").read_text())
    assert sb["resumes"] == [
        {"ckpt_path": str(resumed_dir / "checkpoints" / "last.ckpt"), "epoch": 1, "global_step": 4, "changed": {}}
    ]
    values = {k: v for k, v in sa["metrics"].items() if not k.startswith("time/")}
    assert values.keys() <= sb["metrics"].keys()
    for key, value in values.items():
        assert sb["metrics"][key] == pytest.approx(value, abs=TOLERANCE), key
    assert {"train/loss", "train/OA", "val/OA", "val/loss", "test/OA", "lr-AdamW"} <= values.keys()
    assert sb["best"]["score"] == pytest.approx(sa["best"]["score"], abs=TOLERANCE)


def test_resumed_summary_and_metrics_csv_cover_the_whole_run(runs):
    resumed_dir, _ = runs["resumed"]
    whole_dir, _ = runs["whole"]
    summary = json.loads((resumed_dir / "summary.json").read_text())
    epochs = summary["epochs"]
    assert [e["epoch"] for e in epochs] == [0, 1] and summary["n_epochs"] == 2
    assert [e["resumed"] for e in epochs] == [False, True]
    assert [e["warmup"] for e in epochs] == [True, True]  # the resumed process pays its one-off costs again
    assert [e["train_samples"] for e in epochs] == [12, 12]  # 4 before the checkpoint + 8 after the resume
    for e in epochs:  # neither negative nor counted from process start (perf_counter is seconds since boot)
        assert 0 < e["train_epoch_s"] < runs["wall_s"]["resumed"], e
    whole_rows, rows = _rows(whole_dir), _rows(resumed_dir)
    key = ["epoch", "step", "train/OA", "train/loss", "val/OA", "val/loss", "lr-AdamW", "test/OA"]
    assert [[r[k] for k in key] for r in rows] == [[r[k] for k in key] for r in whole_rows]
    assert [r["epoch"] for r in rows if r["train/OA"]] == ["0", "1"]  # each epoch once
    assert all(0 < float(r["time/train_epoch_s"]) < runs["wall_s"]["resumed"] for r in rows if r["time/train_epoch_s"])


def test_checkpoint_loads_with_pytorch_safe_default_and_resumes_from_a_path(cfg_tiny, tmp_path):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.limit_train_batches = 2
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.test = False
    train(cfg_tiny)
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(ckpt, weights_only=True)
    assert checkpoint["hyper_parameters"]["optimizer"] == {
        "_target_": "torch.optim.AdamW",
        "lr": 1e-3,
        "weight_decay": 1e-2,
    }
    model = SITSClassifierModule.load_from_checkpoint(ckpt)  # as the README shows it
    assert model.net.backend == "linear"
    # python train.py ... ckpt_path=<run>/checkpoints/last.ckpt: one more epoch from there
    with open_dict(cfg_tiny):
        cfg_tiny.ckpt_path = str(ckpt)
        cfg_tiny.trainer.max_epochs = 2
        cfg_tiny.paths.output_dir = str(tmp_path / "second")  # checkpoints/ follows
    _, objs = train(cfg_tiny)
    assert objs["trainer"].global_step == 4 and objs["trainer"].current_epoch == 2
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1] and summary["resumes"][0]["global_step"] == 2


def test_quiet_console_and_epoch_lines_in_train_log(runs):
    whole_dir, whole = runs["whole"]
    out = whole.stdout + whole.stderr
    log = (whole_dir / "train.log").read_text()
    for text in (out, log):
        assert "Epoch 1/2: train/loss" in text and "Epoch 2/2: train/loss" in text and "ETA 0:00:00" in text
        assert "val/OA" in text.split("Epoch 1/2:")[1].splitlines()[0]
        assert f"Best checkpoint: {whole_dir / 'checkpoints'}" in text
        assert "Test metrics: test/F1" in text and f"Per-class report: {whole_dir / 'test_per_class.csv'}" in text
    for noise in ("exists and is not empty", "litlogger", "does not have many workers", "LeafSpec"):
        assert noise not in out, noise


def test_resume_with_a_new_lr_and_schedule_applies_them_and_says_so(cfg_tiny, tmp_path):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.limit_train_batches = 1
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.test = False
        cfg_tiny.model.optimizer.lr = 1e-3
    train(cfg_tiny)  # cosine over 1 epoch from 1e-3
    with open_dict(cfg_tiny):
        cfg_tiny.ckpt_path = str(tmp_path / "checkpoints" / "last.ckpt")
        cfg_tiny.model.optimizer.lr = 1e-4
        cfg_tiny.trainer.max_epochs = 3  # T_max follows: cosine over 3 epochs from 1e-4
        cfg_tiny.paths.output_dir = str(tmp_path / "resumed")
    with pytest.warns(UserWarning, match=r"model.optimizer.lr 0.001 -> 0.0001, model.scheduler.T_max 1 -> 3") as w:
        train(cfg_tiny)
    applied = [1e-4 * (1 + math.cos(math.pi * epoch / 3)) / 2 for epoch in (1, 2)]  # a fresh run's epochs 1, 2
    assert "(lr 0 -> 7.5e-05)" in str(w[0].message)
    logged = [float(r["lr-AdamW"]) for r in _rows(tmp_path / "resumed") if r.get("lr-AdamW")]
    assert logged == pytest.approx(applied)
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["resumes"][0]["changed"] == {
        "model.optimizer.lr": [1e-3, 1e-4],
        "model.scheduler.T_max": [1, 3],
        "lr": [0.0, pytest.approx(applied[0])],
    }
    checkpoint = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["optimizer"]["lr"] == 1e-4
    assert checkpoint["lr_schedulers"][0]["base_lrs"] == [1e-4] and checkpoint["lr_schedulers"][0]["T_max"] == 3


@pytest.mark.slow
def test_compiled_checkpoints_predict_and_resume_eager_or_compiled(cfg_tiny, tmp_path):
    """compiled -> predict's loader, compiled -> eager resume, eager -> compiled resume, compiled -> compiled."""
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.limit_train_batches = 2
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.trainer.precision = "32-true"
        cfg_tiny.test = False
        cfg_tiny.model.compile = True
    _, objs = train(cfg_tiny)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_compiles"] >= 2 and {c["stage"] for c in summary["compilations"]} == {"train", "val"}
    assert summary["compile_s"] > 0 and summary["compile"] == "on (model.compile=true)"
    compiled_ckpt = tmp_path / "checkpoints" / "last.ckpt"
    state = torch.load(compiled_ckpt, weights_only=True)["state_dict"]
    assert not [k for k in state if "_orig_mod" in k]
    model = load_classifier(load_run_config(compiled_ckpt), compiled_ckpt)  # what predict.py and eval.py load
    batch = next(iter(objs["datamodule"].val_dataloader()))
    trained = objs["model"].eval()
    with torch.no_grad():
        expected, out = trained(batch), model(batch)  # compiled in memory vs eager from the checkpoint
    assert torch.allclose(out, expected, atol=1e-4), f"{(out - expected).abs().max()}"
    resumed = []
    for name, compile_, ckpt in (("eager", False, compiled_ckpt), ("compiled", True, None)):
        with open_dict(cfg_tiny):
            cfg_tiny.model.compile = compile_
            cfg_tiny.ckpt_path = str(ckpt or resumed[-1] / "checkpoints" / "last.ckpt")  # eager -> compiled
            cfg_tiny.trainer.max_epochs = len(resumed) + 2
            cfg_tiny.paths.output_dir = str(tmp_path / name)
        _, objs = train(cfg_tiny)
        assert objs["trainer"].global_step == 2 * (len(resumed) + 2), name
        resumed.append(tmp_path / name)
    state = torch.load(resumed[-1] / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert not [k for k in state if "_orig_mod" in k]
