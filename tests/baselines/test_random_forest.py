"""The RandomForest baseline: features of masked irregular series, and a run in the training harness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from conftest import compose_train
from mtan_s1s2.baselines.features import date_grid, pixel_features
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


def test_random_forest_in_the_training_harness(tmp_path: Path) -> None:
    cfg = compose_train(
        ["data=synthetic_tiny", "model=random_forest", "model.n_estimators=25", "model.n_jobs=1", "trainer=cpu"],
        output_dir=tmp_path,
    )
    try:
        metrics, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    assert {"val/OA", "val/F1", "test/OA", "test/F1", "test/mIoU", "test/kappa"} <= set(metrics)
    assert metrics["test/OA"] > 0.3  # 10 classes, unbalanced: well above chance on the synthetic data
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "random_forest" and summary["metrics"]["test/OA"] == pytest.approx(metrics["test/OA"])
    assert summary["n_train_pixels"] > 1000 and summary["baseline"]["features"] == "interpolated"
    assert (tmp_path / "test_per_class.csv").exists() and (tmp_path / "test_confusion_matrix.png").exists()
