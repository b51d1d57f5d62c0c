"""Learning is real: the model beats the class prior, and S1 matters for maize vs sunflower."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from conftest import compose_train
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.batch import CLASS_NAMES

MAIZE, SUNFLOWER = CLASS_NAMES.index("maize"), CLASS_NAMES.index("sunflower")


def _cfg(tmp_path: Path, overrides: list[str]):
    return compose_train(
        [
            "trainer=cpu",
            "callbacks.progress_bar=null",
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            "callbacks.model_checkpoint.save_last=false",
            *overrides,
        ],
        output_dir=tmp_path,
    )


def _majority_share(dm) -> float:
    counts = torch.zeros(dm.num_classes)
    for batch in dm.val_dataloader():
        counts += torch.bincount(batch["label"].flatten(), minlength=dm.num_classes)[: dm.num_classes].float()
    counts[dm.ignore_index] = 0
    return float(counts.max() / counts.sum())


def test_tiny_training_beats_class_prior(tmp_path):
    cfg = _cfg(
        tmp_path,
        [
            "data=synthetic_tiny",
            "data.n_train=32",
            "data.n_val=16",
            "trainer.max_epochs=8",
            "model.net.d_model=16",
            "model.net.num_ref_times=8",
            "model.net.head_hidden=[64]",
            "model.optimizer.lr=3e-3",
            "test=false",
        ],
    )
    metrics, objs = train(cfg)
    prior = _majority_share(objs["datamodule"])
    assert prior < 0.35
    assert metrics["val/OA"] > prior + 0.3, f"val/OA={metrics['val/OA']:.3f}, majority-class share={prior:.3f}"
    assert metrics["val/kappa"] > 0.4


def _maize_sunflower_confusion(run_dir: Path) -> float:
    with open(run_dir / "test_confusion_matrix.csv") as f:
        rows = list(csv.reader(f))[1:]
    cm = torch.tensor([[int(v) for v in r[1:]] for r in rows], dtype=torch.float)
    confused = cm[MAIZE, SUNFLOWER] + cm[SUNFLOWER, MAIZE]
    return float(confused / (cm[MAIZE].sum() + cm[SUNFLOWER].sum()).clamp_min(1))


@pytest.mark.slow
def test_s2_only_confuses_maize_and_sunflower_more(tmp_path):
    common = [
        "data.n_train=96",
        "data.n_val=32",
        "data.n_test=48",
        "data.patch_size=24",
        "trainer.max_epochs=6",
        "model.net.d_model=16",
    ]
    rates = {}
    for name, extra in {"fused": [], "s2_only": ["experiment=s2_only"]}.items():
        run_dir = tmp_path / name
        train(_cfg(run_dir, [*common, *extra]))
        rates[name] = _maize_sunflower_confusion(run_dir)
    assert rates["s2_only"] > rates["fused"] + 0.1, rates
