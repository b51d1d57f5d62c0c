"""The sweep summary's ensemble rows, from test_probabilities.npz files written into job folders."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from mtan_s1s2.ensemble.probabilities import PixelProbabilities
from mtan_s1s2.sweep.jobs import FOLD_KEY
from mtan_s1s2.sweep.summarize import write_summary

NAMES = ["unlabelled", "crop", "grass"]
LABELS = np.array([1, 1, 2, 2])
# P(crop) of the 4 test pixels per seed; P(grass) = 1 - P(crop). Seeds 1 and 2 get half of the
# pixels right, seed 3 all; the mean of any two or three of them gets all four right.
P_CROP = {1: [0.9, 0.4, 0.2, 0.6], 2: [0.4, 0.9, 0.6, 0.2], 3: [0.8, 0.8, 0.1, 0.1]}


def _job(root: Path, num: int, model: str, fold: int, seed: int, probabilities: bool = True) -> None:
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    if model != "random_forest":  # a network's run folder (the forest saves random_forest.joblib)
        (job / "checkpoints").mkdir()
    overrides = [f"model={model}", f"{FOLD_KEY}={fold}", f"seed={seed}"]
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    num: {num}\n")
    crop = np.asarray(P_CROP[seed])
    proba = np.stack([np.zeros(4), crop, 1 - crop], axis=1)
    pixels = PixelProbabilities(np.array([7, 7, 9, 9]), np.array([0, 1, 0, 1]), np.zeros(4), LABELS, proba, NAMES, 0)
    scores = pixels.metrics()
    summary = {
        "backend": "linear",
        "status": "completed",
        "epochs": [{"epoch": 0, "train_epoch_s": 1.0, "warmup": True}],
        "seed": seed,
        "hardware": {"cpu": "Test CPU", "device": "cpu"},
        "metrics": {f"test/{k}": v for k, v in scores.items()},
    }
    (job / "summary.json").write_text(json.dumps(summary))
    if probabilities:
        # pixels in another order than sorted: the summary aligns them by (patch_id, row, col)
        order = np.array([3, 0, 2, 1])
        shuffled = PixelProbabilities(
            pixels.patch_id[order], pixels.row[order], pixels.col[order], LABELS[order], proba[order], NAMES, 0
        )
        shuffled.write(job / "test_probabilities.npz")


def test_ensemble_row_averages_the_seeds_of_each_fold(tmp_path: Path) -> None:
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - model=mtan,tempcnn\n    - data.split.fold=1,2\n    - seed=1,2,3\n"
        "    hydra: []\n"
    )
    num = 0
    for fold, seeds in ((1, (1, 2, 3)), (2, (1, 2))):
        for seed in seeds:
            _job(tmp_path, num, "mtan", fold, seed)
            num += 1
    for seed in (1, 2):  # runs from before the probability files existed: no ensemble row
        _job(tmp_path, num, "tempcnn", 1, seed, probabilities=False)
        num += 1
    summary = write_summary(tmp_path, plot=False, console=False)
    assert [(r.params["model"], r.kind) for r in summary.rows] == [
        ("mtan", "runs"), ("mtan", "ensemble"), ("tempcnn", "runs")
    ]  # fmt: skip
    runs, ens = summary.rows[:2]
    assert runs.test_mean["OA"] == pytest.approx((0.5 + 0.5 + 1.0 + 0.5 + 0.5) / 5)
    assert ens.folds == ["1", "2"] and ens.ensemble_members == "2-3" and ens.jobs == [0, 1, 2, 3, 4]
    assert ens.test_mean["OA"] == pytest.approx(1.0) and ens.test_std["OA"] == pytest.approx(0.0)
    assert ens.test_mean["kappa"] == pytest.approx(1.0)
    # paired by fold: fold 1 ensemble 1.0 - members (0.5 + 0.5 + 1.0) / 3; fold 2 1.0 - 0.5
    deltas = [1.0 - 2.0 / 3.0, 0.5]
    mean, std, n = ens.delta_vs_members["OA"]
    assert (mean, std, n) == (pytest.approx(statistics.fmean(deltas)), pytest.approx(statistics.stdev(deltas)), 2)
    assert ens.delta_vs_members["F1"][0] == pytest.approx(statistics.fmean(deltas))  # members' F1 is 0.5 or 1.0 too
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [r["kind"] for r in rows] == ["runs", "ensemble", "runs"]
    assert float(rows[1]["test_OA_mean"]) == pytest.approx(1.0) and rows[1]["ensemble_members"] == "2-3"
    assert float(rows[1]["delta_test_OA_vs_members"]) == pytest.approx(statistics.fmean(deltas))
    assert rows[0]["delta_test_OA_vs_members"] == ""
    md = (tmp_path / "summary.md").read_text()
    assert "| model | rows | backend |" in md and "| mtan | ensemble of 2-3 |" in md
    assert "+0.417 ± 0.118, +0.417 ± 0.118 (2 folds)" in md and "Ensemble rows:" in md


def test_runs_that_tested_other_pixels_give_no_ensemble_and_say_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for num, seed in enumerate((1, 2)):
        _job(tmp_path, num, "mtan", 1, seed)
    other = PixelProbabilities.read(tmp_path / "1" / "test_probabilities.npz")
    other.patch_id = other.patch_id + 100
    other.write(tmp_path / "1" / "test_probabilities.npz")
    summary = write_summary(tmp_path, plot=False, console=False)
    assert [r.kind for r in summary.rows] == ["runs"]
    assert "No ensemble row" in caplog.text and "not the same ones" in caplog.text


def test_a_model_sweep_gets_a_row_of_the_models_together(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # one seed per model and fold: no seed ensembles, but the two models' mean gets every pixel right
    for num, (model, fold, seed) in enumerate(
        [("mtan_real", 1, 1), ("tempcnn", 1, 2), ("mtan_real", 2, 2), ("tempcnn", 2, 1), ("mtan_real", 2, 3)]
    ):
        _job(tmp_path, num, model, fold, seed)
    _job(tmp_path, 5, "random_forest", 1, 3)  # no checkpoint to average in eval.py: not joined
    summary = write_summary(tmp_path, plot=False, console=False)
    assert [(r.params["model"], r.kind) for r in summary.rows] == [
        ("mtan_real", "runs"), ("mtan_real", "ensemble"), ("tempcnn", "runs"), ("random_forest", "runs"),
        ("mtan_real+tempcnn", "ensemble"),
    ]  # fmt: skip
    both = summary.rows[-1]
    assert both.jobs == [0, 2, 4, 1, 3] and both.folds == ["1", "2"] and both.ensemble_members == "2-3"
    assert both.test_mean["OA"] == pytest.approx(1.0)  # fold 1: seeds 1+2; fold 2: seeds 2+1+3
    members = [0.5, (0.5 + 0.5 + 1.0) / 3]  # the mean member of each fold
    assert both.delta_vs_members["OA"][0] == pytest.approx(statistics.fmean(1.0 - m for m in members))
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert rows[-1]["model"] == "mtan_real+tempcnn" and rows[-1]["kind"] == "ensemble"
    md = (tmp_path / "summary.md").read_text()
    assert "| mtan_real+tempcnn | ensemble of 2-3 |" in md and "the runs of those models together" in md
    # a run of one model without its probabilities: no joined row, and the run is named
    (tmp_path / "1" / "test_probabilities.npz").unlink()
    summary = write_summary(tmp_path, plot=False, console=False)
    assert [r.params["model"] for r in summary.rows if r.kind == "ensemble"] == ["mtan_real"]
    assert "No ensemble row for model=mtan_real+tempcnn" in caplog.text and f"{tmp_path / '1'}" in caplog.text
