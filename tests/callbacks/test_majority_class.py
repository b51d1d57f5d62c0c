"""A run that never leaves the majority class says so (console, train.log, summary.json)."""

from __future__ import annotations

import json
import logging

import pytest
from omegaconf import open_dict

from mtan_s1s2.callbacks.majority_class import MajorityClassWarning
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.batch import CLASS_NAMES


def test_a_run_that_cannot_learn_is_flagged_with_the_class_it_predicts(cfg_tiny, tmp_path, caplog):
    """lr=0: the weights never move, the model keeps predicting what its initial weights give."""
    with open_dict(cfg_tiny):
        cfg_tiny.model.optimizer.lr = 0.0
        cfg_tiny.trainer.max_epochs = 2
        cfg_tiny.trainer.limit_train_batches = 2
        cfg_tiny.trainer.limit_val_batches = 2
        cfg_tiny.test = False
        cfg_tiny.callbacks.majority_class.epochs = 2
    with caplog.at_level(logging.INFO):
        metrics, _ = train(cfg_tiny)
    assert metrics["val/kappa"] < 0.05
    record = json.loads((tmp_path / "summary.json").read_text())["majority_class"]
    assert record["epoch"] == 2 and record["metric"] == "val/kappa" and record["recovered_epoch"] is None
    assert record["kappa"] == pytest.approx(metrics["val/kappa"])
    assert record["predicted_class"] in CLASS_NAMES[1:] and 0 < record["predicted_share"] <= 1
    (warning,) = [r.getMessage() for r in caplog.records if "has not left the majority class" in r.getMessage()]
    assert warning.startswith(f"Epoch 2: val/kappa is {record['kappa']:.3f} (below 0.05) after 2 epochs")
    assert f"predicts {record['predicted_class']!r} for {100 * record['predicted_share']:.1f} %" in warning
    assert "model.net.ref_range=auto" in warning and "data.norm_stats" in warning and "model.optimizer.lr" in warning


def test_runs_shorter_than_the_check_and_healthy_runs_are_left_alone(cfg_tiny, tmp_path, caplog):
    with open_dict(cfg_tiny):
        cfg_tiny.model.optimizer.lr = 0.0
        cfg_tiny.trainer.limit_train_batches = 1
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.test = False  # max_epochs=1 < callbacks.majority_class.epochs=5
    with caplog.at_level(logging.WARNING):
        train(cfg_tiny)
    assert "majority class" not in caplog.text
    assert json.loads((tmp_path / "summary.json").read_text())["majority_class"] is None
    check = MajorityClassWarning(epochs=5, kappa_below=0.05)
    assert not check.stuck(4, 0.0) and check.stuck(5, 0.049) and not check.stuck(5, 0.05) and not check.stuck(9, 0.6)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"callbacks.majority_class.epochs must be >= 1, got 0"):
        MajorityClassWarning(epochs=0)
    with pytest.raises(ValueError, match=r"kappa_below must be in \(-1, 1\], got 2"):
        MajorityClassWarning(kappa_below=2)
