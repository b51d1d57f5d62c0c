"""``trainer=ddp`` with 2 CPU processes (gloo): one output directory, outputs from rank 0 only."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES
from mtan_s1s2.cli.ddp import _uses_subprocess_ddp

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

TINY = [
    "data=synthetic_tiny",
    *QUIET_OVERRIDES,
    "trainer.enable_model_summary=false",
    "callbacks.lr_monitor=null",
    *TINY_MODEL_OVERRIDES,
    "test=false",
]


def test_ddp_two_cpu_processes_share_one_output_dir(tmp_path):
    probe_dir = tmp_path / "probe"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "train.py",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=2",
        *TINY,
        "+callbacks.rank_probe._target_=fixtures.ddp_rank_probe.RankMetricsProbe",
        f"+callbacks.rank_probe.output_dir={probe_dir}",
        f"paths.log_dir={tmp_path / 'logs'}",
    ]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]

    runs = list((tmp_path / "logs" / "train" / "runs").iterdir())
    assert len(runs) == 1, runs  # rank 1 wrote into rank 0's directory, made none of its own
    run = runs[0]
    assert not (tmp_path / "logs" / "train" / "multiruns").exists()
    assert (run / "train_ddp_process_1.log").exists() and (run / ".hydra").is_dir()
    assert [p.relative_to(run) for p in run.rglob("summary.json")] == [Path("summary.json")]
    assert list((run / "checkpoints").glob("*.ckpt"))

    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["n_epochs"] == 1 and len(summary["epochs"]) == 1
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert sum(bool(r.get("time/train_epoch_s")) for r in rows) == 1  # timings logged once, by rank 0
    assert sum(bool(r.get("val/OA")) for r in rows) == 1

    ranks = [json.loads((probe_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == summary["global_step"] == 2
    # torchmetrics reduces OA/F1/mIoU/kappa over both ranks; the losses are logged per rank
    synced = [k for k in ranks[0]["metrics"] if k.startswith(("train/", "val/")) and not k.endswith("loss")]
    assert {"val/OA", "val/F1", "val/mIoU", "train/OA"} <= set(synced)
    for key in synced:
        assert ranks[0]["metrics"][key] == pytest.approx(ranks[1]["metrics"][key], abs=1e-6), key
    assert summary["metrics"]["val/OA"] == pytest.approx(ranks[0]["metrics"]["val/OA"])


@pytest.mark.parametrize(
    "strategy,expected",
    [
        ("ddp", True),
        ("ddp_find_unused_parameters_true", True),
        ("ddp_spawn", False),
        ("auto", False),
        (None, False),
        ({"_target_": "lightning.pytorch.strategies.DDPStrategy"}, True),
    ],
)
def test_subprocess_ddp_detection(strategy, expected):
    assert _uses_subprocess_ddp(OmegaConf.create({"trainer": {"strategy": strategy}})) is expected
