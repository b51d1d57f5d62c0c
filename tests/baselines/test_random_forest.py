"""The RandomForest baseline: features of masked irregular series, and a run in the training harness."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from conftest import compose_train
from mtan_s1s2.baselines.features import DateGrid, date_grid, neighbourhood_means, pixel_features
from mtan_s1s2.baselines.random_forest import CHECKPOINT_NAME, RandomForestBaseline
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.train import train


def _batch(doy: list[list[float]], values: np.ndarray, mask: np.ndarray, labels: np.ndarray) -> dict:
    """One modality ``s1_asc`` with C=1 and H=1, W=P pixels."""
    return {
        "s1_asc": {
            "x": torch.from_numpy(values[:, :, None, None, :].astype(np.float32)),  # (B, T, 1, 1, P)
            "doy": torch.tensor(doy),
            "mask": torch.from_numpy(mask[:, :, None, :]),  # (B, T, 1, P)
        },
        "label": torch.from_numpy(labels[:, None, :]),  # (B, 1, P)
    }


def test_raw_features_when_dates_are_common() -> None:
    values = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])  # (B=1, T=3, P=2)
    mask = np.array([[[True, True], [False, True], [True, True]]])
    batch = _batch([[0.0, 10.0, 20.0]], values, mask, np.array([[1, 2]]))
    grid = date_grid([batch], ["s1_asc"])
    assert grid.raw and grid.doy["s1_asc"].tolist() == [0.0, 10.0, 20.0]
    feats, labels = pixel_features(batch, grid)
    assert labels.tolist() == [1, 2]
    np.testing.assert_array_equal(feats, [[1.0, np.nan, 5.0], [2.0, 4.0, 6.0]])


def test_interpolated_features_on_a_regular_grid() -> None:
    # Two samples with different dates: interpolated every 10 days over [0, 30].
    values = np.array([[[0.0], [10.0], [30.0], [0.0]], [[5.0], [5.0], [5.0], [5.0]]])  # (B, T=4, P=1)
    mask = np.array([[[True], [True], [True], [False]], [[False], [False], [False], [False]]])
    batch = _batch([[0.0, 10.0, 30.0, 30.0], [5.0, 6.0, 7.0, 8.0]], values, mask, np.array([[1], [2]]))
    grid = date_grid([batch], ["s1_asc"], step_days=10.0)
    assert not grid.raw and grid.doy["s1_asc"].tolist() == [0.0, 10.0, 20.0, 30.0]
    feats, labels = pixel_features(batch, grid)
    np.testing.assert_allclose(feats[0], [0.0, 10.0, 20.0, 30.0])  # linear between the valid dates
    assert np.isnan(feats[1]).all() and labels.tolist() == [1, 2]  # no valid observation: missing
    with pytest.raises(ValueError, match="same dates"):
        date_grid([batch], ["s1_asc"], mode="raw")


def test_random_forest_in_the_training_harness(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = compose_train(
        ["data=synthetic_tiny", "model=random_forest", "model.n_estimators=25", "model.n_jobs=1", "trainer=cpu"],
        output_dir=tmp_path,
    )
    try:
        with caplog.at_level(logging.INFO):
            metrics, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    assert f"Test metrics: test/F1 {metrics['test/F1']:.4f}, test/OA {metrics['test/OA']:.4f}" in caplog.text
    assert {"val/OA", "val/F1", "test/OA", "test/F1", "test/mIoU", "test/kappa"} <= set(metrics)
    assert metrics["test/OA"] > 0.3  # 10 classes, unbalanced: well above chance on the synthetic data
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "random_forest" and summary["metrics"]["test/OA"] == pytest.approx(metrics["test/OA"])
    assert summary["n_train_pixels"] > 1000 and summary["baseline"]["features"] == "interpolated"
    assert (tmp_path / "test_per_class.csv").exists() and (tmp_path / "test_confusion_matrix.png").exists()

    # The fitted forest is the run's checkpoint: eval.py tests it again to the same metrics.
    ckpt = tmp_path / "checkpoints" / CHECKPOINT_NAME
    assert ckpt.is_file()
    eval_dir = tmp_path / "eval"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        eval_cfg = compose(config_name="eval", overrides=["trainer=cpu", f"ckpt_path={ckpt}"])
    GlobalHydra.instance().clear()
    with open_dict(eval_cfg):
        eval_cfg.paths.output_dir = eval_cfg.paths.log_dir = str(eval_dir)
    evaluated, eval_objs = evaluate(eval_cfg)
    test_metrics = {k: v for k, v in metrics.items() if k.startswith("test/")}
    assert evaluated == pytest.approx(test_metrics, abs=0.0) and eval_objs["trainer"] is None
    record = json.loads((eval_dir / "metrics.json").read_text())
    assert record["backend"] == "random_forest" and record["metrics"]["test/OA"] == metrics["test/OA"]
    assert (eval_dir / "test_per_class.csv").read_text() == (tmp_path / "test_per_class.csv").read_text()


def test_random_forest_checkpoint_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # invalid observations: missing values
    y = (np.nan_to_num(x[:, 0]) > 0).astype(np.int64) + 1  # classes 1 and 2 of K=4
    forest = RandomForestBaseline(n_estimators=10, n_jobs=1, seed=3)
    forest.grid = DateGrid({"s2": np.array([0.0, 10.0, 20.0])}, raw=True)
    with pytest.raises(RuntimeError, match="fit must be called before saving"):
        forest.save(tmp_path / "unfitted.joblib")
    forest.fit(x, y)
    path = forest.save(tmp_path / "checkpoints" / CHECKPOINT_NAME)
    loaded = RandomForestBaseline.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(x, 4), forest.predict_proba(x, 4))
    assert loaded.params == forest.params and loaded.grid.doy["s2"].tolist() == [0.0, 10.0, 20.0]
    import joblib

    joblib.dump({"not": "a forest"}, tmp_path / "other.joblib")
    with pytest.raises(ValueError, match=r"does not hold a fitted RandomForestBaseline.*got dict"):
        RandomForestBaseline.load(tmp_path / "other.joblib")


def test_neighbourhood_means_leave_out_pixels_without_data_and_missing_features() -> None:
    values = np.arange(18, dtype=np.float64).reshape(2, 3, 3)  # (H=2, W=3, F=3)
    values[0, 1, 2] = np.nan  # a missing observation of a pixel with data
    valid = np.array([[True, True, False], [True, True, True]])
    means = neighbourhood_means(values, valid, 3)
    # pixel (0, 0): neighbours (0,0), (0,1), (1,0), (1,1) all hold data
    np.testing.assert_allclose(means[0, 0], np.nanmean(values[[0, 0, 1, 1], [0, 1, 0, 1]], axis=0), rtol=1e-6)
    # pixel (0, 1): (0, 2) holds no data; feature 2 of (0, 1) is missing
    cells = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    want = [np.nanmean([values[r, c, f] for r, c in cells]) for f in range(3)]
    np.testing.assert_allclose(means[0, 1], want, rtol=1e-6)
    # pixel (0, 2) without data still gets the mean of its neighbours with data (the map's no-data is elsewhere)
    np.testing.assert_allclose(means[0, 2, 0], np.mean([values[r, c, 0] for r, c in [(0, 1), (1, 1), (1, 2)]]))
    alone = neighbourhood_means(np.full((1, 1, 2), 3.0), np.array([[False]]), 3)
    np.testing.assert_array_equal(alone, np.full((1, 1, 2), 3.0))  # no neighbour with data: its own values
    for k in (0, 2, 4):
        with pytest.raises(ValueError, match=rf"model.spatial_context .* got {k}"):
            RandomForestBaseline(spatial_context=k)


def test_spatial_context_features_follow_the_pixels_own() -> None:
    values = np.array([[[1.0, 2.0, 4.0], [3.0, 4.0, 8.0]]])  # (B=1, T=2, P=3): a 1 x 3 raster
    mask = np.ones((1, 2, 3), bool)
    batch = _batch([[0.0, 10.0]], values, mask, np.array([[1, 2, 1]]))
    grid = date_grid([batch], ["s1_asc"])
    own, _ = pixel_features(batch, grid)
    feats, labels = pixel_features(batch, grid, spatial_context=3)
    assert feats.shape == (3, 4) and labels.tolist() == [1, 2, 1]
    np.testing.assert_array_equal(feats[:, :2], own)
    np.testing.assert_allclose(feats[:, 2:], [[1.5, 3.5], [7 / 3, 5.0], [3.0, 6.0]])
