"""`python train.py -m ...` as a user runs it: job directories, the sweep summary, failures."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES
from mtan_s1s2.ensemble.probabilities import PixelProbabilities

REPO = Path(__file__).resolve().parents[2]

TINY = [
    "data=synthetic_tiny",
    "trainer=cpu",
    *QUIET_OVERRIDES,
    "trainer.enable_model_summary=false",
    "callbacks.lr_monitor=null",
    *TINY_MODEL_OVERRIDES,
    "+trainer.limit_val_batches=1",
    "test=false",
]


def run_sweep(
    log_dir: Path, overrides: list[str], task_name: str = "train", tiny: list[str] = TINY
) -> tuple[int, str, Path, int]:
    """Run a multirun in a subprocess; return (exit status, output, sweep dir, pid).

    The sweep dir is ``<log_dir>/<task_name>/multiruns/<one dir>``; ``tiny`` are the
    overrides that shrink the run (after ``overrides``).
    """
    proc = subprocess.Popen(
        [sys.executable, "train.py", "-m", *overrides, *tiny, f"paths.log_dir={log_dir}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=600)
    sweeps = list((log_dir / task_name / "multiruns").iterdir())
    assert len(sweeps) == 1, (sweeps, out[-3000:])
    return proc.returncode, out, sweeps[0], proc.pid


@pytest.fixture(scope="module")
def backend_sweep(tmp_path_factory) -> tuple[int, str, Path, int]:
    return run_sweep(
        tmp_path_factory.mktemp("logs"), ["mlp=linear,conv", "trainer.max_epochs=2", "+trainer.limit_train_batches=2"]
    )


def test_each_job_keeps_its_own_outputs(backend_sweep):
    rc, out, sweep_dir, pid = backend_sweep
    assert rc == 0, out[-3000:]
    assert sweep_dir.name.endswith(f"-{pid}")  # <date>_<time>_<host>-<pid>: unique per sweep
    assert (sweep_dir / "multirun.yaml").exists()
    for num, backend in (("0", "linear"), ("1", "conv")):
        job = sweep_dir / num
        for name in (
            ".hydra/config.yaml",
            ".hydra/overrides.yaml",
            "metrics.csv",
            "summary.json",
            "checkpoints/last.ckpt",
        ):
            assert (job / name).exists(), f"{job}/{name}"
        assert f"mlp={backend}" in (job / ".hydra" / "overrides.yaml").read_text()
        summary = json.loads((job / "summary.json").read_text())
        assert (summary["backend"], summary["status"], summary["n_epochs"]) == (backend, "completed", 2)


def test_sweep_summary_table_and_plot(backend_sweep):
    rc, out, sweep_dir, _ = backend_sweep
    rows = list(csv.DictReader(open(sweep_dir / "summary.csv")))
    assert [(r["mlp"], r["backend"], r["status"]) for r in rows] == [
        ("linear", "linear", "completed"),
        ("conv", "conv", "completed"),
    ]
    for r in rows:
        assert float(r["median_train_epoch_s"]) > 0 and float(r["mean_train_epoch_s"]) > 0
        assert float(r["train_samples_per_s"]) > 0 and r["n_timed_epochs"] == "1"  # epoch 0 is warm-up
        assert 0 <= float(r["best_val_OA"]) <= 1 and r["hardware"]
    assert float(rows[0]["speedup_vs_linear"]) == pytest.approx(1.0)
    conv_speedup = float(rows[1]["speedup_vs_linear"])
    ratio = float(rows[0]["median_train_epoch_s"]) / float(rows[1]["median_train_epoch_s"])
    assert conv_speedup == pytest.approx(ratio, rel=1e-3)
    md = (sweep_dir / "summary.md").read_text()
    assert "| mlp | backend | status |" in md and "Jobs: 2 jobs (2 completed)." in md
    assert f"{conv_speedup:.2f}x" in md
    assert (sweep_dir / "epoch_times.png").read_bytes()[:4] == b"\x89PNG"
    assert "speed-up" in out and "Sweep summary" in out  # the table is printed at the end


def test_a_failing_job_is_a_row_and_the_sweep_fails(tmp_path):
    rc, out, sweep_dir, _ = run_sweep(
        tmp_path, ["mlp=linear", "model.optimizer.lr=-1,1e-3", "trainer.max_epochs=1", "+trainer.limit_train_batches=1"]
    )
    assert rc != 0
    assert "1 of 2 sweep jobs failed" in out and "Invalid learning rate" in out
    rows = {r["model.optimizer.lr"]: r for r in csv.DictReader(open(sweep_dir / "summary.csv"))}
    assert rows["-1"]["status"] == "failed" and "ValueError: Invalid learning rate: -1" in rows["-1"]["error"]
    assert rows["0.001"]["status"] == "completed" and float(rows["0.001"]["median_train_epoch_s"]) > 0
    failed = json.loads((sweep_dir / "0" / "summary.json").read_text())
    assert failed["status"] == "failed" and failed["backend"] == "linear"
    assert (sweep_dir / "1" / "metrics.csv").exists()  # the job after the failure still ran
    assert "job 0 (model.optimizer.lr=-1 seed=42): **failed**" in (sweep_dir / "summary.md").read_text()


def test_real_ensemble_trains_three_seeds_and_scores_their_ensemble(tmp_path):
    """experiment=real_ensemble sweeps seeds 1-3 by itself; the summary scores them as one model."""
    overrides = ["experiment=real_ensemble", "trainer.max_epochs=1", "+trainer.limit_train_batches=2"]
    overrides += ["model.early_stopping=null", "test=true"]
    tested = [o for o in TINY if o != "test=false"]  # the ensemble row needs test probabilities
    rc, out, sweep_dir, _ = run_sweep(tmp_path, overrides, task_name="real_ensemble", tiny=tested)
    assert rc == 0, out[-3000:]
    seeds = sorted(json.loads((sweep_dir / str(n) / "summary.json").read_text())["seed"] for n in range(3))
    assert seeds == [1, 2, 3] and not (sweep_dir / "3").exists()
    rows = list(csv.DictReader(open(sweep_dir / "summary.csv")))
    assert [r["kind"] for r in rows] == ["runs", "ensemble"]
    assert rows[1]["ensemble_members"] == "3"
    # the ensemble row scores the mean of the three seeds' test probabilities, pixel by pixel
    members = [PixelProbabilities.read(sweep_dir / str(n) / "test_probabilities.npz").sorted() for n in range(3)]
    mean = sum(m.proba.astype(np.float32) for m in members)
    expected = float((mean.argmax(1) == members[0].label).mean())
    assert float(rows[1]["test_OA_mean"]) == pytest.approx(expected, abs=1e-4)


def test_real_with_tempcnn_trains_both_networks_and_scores_them_together(tmp_path):
    """experiment=real_with_tempcnn sweeps the recipe and TempCNN; the summary's last row is their mean."""
    overrides = ["experiment=real_with_tempcnn", "hydra.sweeper.params.seed=1", "trainer.max_epochs=2"]
    overrides += ["+trainer.limit_train_batches=2", "model.early_stopping=null", "model.checkpoint_ensemble=2"]
    tiny = [o for o in TINY if o != "test=false" and not o.startswith("model.net.")]  # both networks' defaults
    rc, out, sweep_dir, _ = run_sweep(tmp_path, overrides, task_name="real_with_tempcnn", tiny=tiny)
    assert rc == 0, out[-3000:]
    targets = [yaml_target(sweep_dir / str(n)) for n in range(2)]
    assert targets == ["mtan_s1s2.models.mtan.MTANClassifier", "mtan_s1s2.models.tempcnn.TempCNN"]
    assert not (sweep_dir / "2").exists()
    rows = list(csv.DictReader(open(sweep_dir / "summary.csv")))
    assert [(r["model"], r["kind"]) for r in rows] == [
        ("mtan_real", "runs"), ("tempcnn", "runs"), ("mtan_real+tempcnn", "ensemble")
    ]  # fmt: skip
    # each run's file is the mean of its 2 best epochs; the last row the mean of the two runs
    members = [PixelProbabilities.read(sweep_dir / str(n) / "test_probabilities.npz").sorted() for n in range(2)]
    mean = sum(m.proba.astype(np.float32) for m in members)
    expected = float((mean.argmax(1) == members[0].label).mean())
    assert float(rows[2]["test_OA_mean"]) == pytest.approx(expected, abs=1e-4)
    # eval.py given the sweep folder averages the same runs (2 checkpoints each, so each run half)
    evaluated = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "eval.py", f"ckpt_path={sweep_dir}", "trainer=cpu", f"hydra.run.dir={evaluated}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((evaluated / "metrics.json").read_text())
    assert len(record["ckpt_path"]) == 4 and record["ensemble"] is True
    ensemble = PixelProbabilities.read(evaluated / "test_probabilities.npz").sorted()
    np.testing.assert_array_equal(ensemble.label, members[0].label)
    np.testing.assert_allclose(ensemble.proba.astype(np.float32), mean / 2, atol=2e-3)


def yaml_target(job: Path) -> str:
    """The network class a job trained (``model.net._target_`` of its resolved config)."""
    return yaml.safe_load((job / ".hydra" / "config.yaml").read_text())["model"]["net"]["_target_"]
