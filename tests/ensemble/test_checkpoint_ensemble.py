"""model.checkpoint_ensemble: a run tests the mean of its k best epochs; eval.py / predict.py given its folder too."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import InstantiationException

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from ensemble.test_ensemble import compose_cli
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.train import train
from mtan_s1s2.cli.validate import ConfigError, check_config
from mtan_s1s2.ensemble.members import resolve_checkpoints
from mtan_s1s2.ensemble.probabilities import PixelProbabilities, mean_probabilities

TABLE = Path(__file__).resolve().parents[1] / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"
DATA = ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3"]


def _train(out: Path, overrides: list[str]) -> tuple[dict[str, float], dict]:
    cfg = compose_train(["trainer=cpu", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES, *DATA, "seed=3", *overrides], out)
    try:
        return train(cfg)
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    out = tmp_path_factory.mktemp("checkpoint_ensemble") / "run"
    metrics, _ = _train(out, ["trainer.max_epochs=5", "model.checkpoint_ensemble=3"])
    return out, metrics


def test_the_run_keeps_and_records_its_k_best_checkpoints(ensemble_run: tuple[Path, dict[str, float]]) -> None:
    out, _ = ensemble_run
    best = json.loads((out / "summary.json").read_text())["best"]
    top_k = best["top_k"]
    assert len(top_k) == 3 and top_k[0]["path"] == best["path"] and top_k[0]["score"] == best["score"]
    scores = [entry["score"] for entry in top_k]
    assert scores == sorted(scores, reverse=True)  # val/OA: best first
    kept = sorted(p.name for p in (out / "checkpoints").glob("epoch_*.ckpt"))
    assert kept == sorted(Path(entry["path"]).name for entry in top_k)
    # the scores are those the epochs logged
    logged = {int(r["epoch"]): float(r["val/OA"]) for r in csv.DictReader(open(out / "metrics.csv")) if r["val/OA"]}
    for entry in top_k:
        epoch = int(Path(entry["path"]).stem.split("_")[1])
        assert entry["score"] == pytest.approx(logged[epoch], abs=1e-6)
    assert resolve_checkpoints(str(out)) == [Path(entry["path"]).absolute() for entry in top_k]


def test_the_run_tests_the_mean_of_its_k_best_checkpoints(
    ensemble_run: tuple[Path, dict[str, float]], tmp_path: Path
) -> None:
    out, metrics = ensemble_run
    # eval.py given the run folder averages the same three checkpoints and reproduces the run's test
    eval_metrics, objs = evaluate(compose_cli("eval", [f"ckpt_path={out}"], tmp_path), [])
    assert len(objs["members"]) == 3
    for m in ("test/OA", "test/F1", "test/kappa", "test/mIoU"):
        assert eval_metrics[m] == pytest.approx(metrics[m], abs=1e-6), m
    run_pixels = PixelProbabilities.read(out / "test_probabilities.npz")
    members = [PixelProbabilities.read(d / "test_probabilities.npz") for d in sorted((tmp_path / "members").iterdir())]
    mean = mean_probabilities(members)
    np.testing.assert_array_equal(run_pixels.label, mean.label)
    np.testing.assert_allclose(run_pixels.proba.astype(np.float32), mean.proba, atol=2e-3)
    # summary.json records the ensemble's test metrics and the network that trained (one member's
    # parameters, not the three members' together)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["test/OA"] == pytest.approx(metrics["test/OA"], abs=1e-6)
    member = objs["model"].members[0]
    assert summary["n_parameters"] == sum(p.numel() for p in member.parameters() if p.requires_grad)


@pytest.mark.parametrize("value", [0, -1])
def test_a_bad_checkpoint_ensemble_stops_before_training(value: int, tmp_path: Path) -> None:
    message = rf"model.checkpoint_ensemble must be a whole number >= 1.*got {value}"
    with pytest.raises(InstantiationException, match=message):
        _train(tmp_path / "run", ["trainer.max_epochs=1", f"model.checkpoint_ensemble={value}"])
    assert not (tmp_path / "run" / "checkpoints").exists()
    # a fraction is refused by the command-line check, naming the type
    cfg = compose_train([*DATA, "model.checkpoint_ensemble=2.5"], tmp_path / "run")
    GlobalHydra.instance().clear()
    with pytest.raises(ConfigError, match=r"model.checkpoint_ensemble=2.5 is float; SITSClassifierModule expects int"):
        check_config(cfg)


def test_a_checkpoint_ensemble_needs_the_best_checkpoint_callback(tmp_path: Path) -> None:
    overrides = ["trainer.max_epochs=1", "model.checkpoint_ensemble=2", "callbacks.model_checkpoint=null"]
    with pytest.raises(ValueError, match=r"checkpoint_ensemble=2 tests the mean of the 2 best.*model_checkpoint"):
        _train(tmp_path / "run", overrides)
