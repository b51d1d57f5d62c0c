"""End-to-end runs of train(cfg) on tiny synthetic data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from mtan_s1s2.cli.train import train


@pytest.mark.parametrize("backend", ["linear", "conv"])
def test_fast_dev_run(cfg_tiny, backend):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.fast_dev_run = True
        cfg_tiny.test = False
    cfg_tiny.mlp._target_ = f"mtan_s1s2.models.layers.mlp.{backend.capitalize()}Mlp"
    metrics, objs = train(cfg_tiny)
    assert objs["model"].net.backend == backend
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))


def test_train_and_test_write_outputs(cfg_tiny, tmp_path):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.max_epochs = 2
        cfg_tiny.trainer.limit_train_batches = 3
        cfg_tiny.trainer.limit_val_batches = 2
        cfg_tiny.trainer.limit_test_batches = 2
    metrics, _ = train(cfg_tiny)
    for key in ("val/OA", "val/F1", "val/mIoU", "val/kappa", "test/OA", "test/F1", "test/mIoU", "test/kappa"):
        assert key in metrics, key
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in ("time/train_epoch_s", "time/val_epoch_s", "time/train_samples_per_s", "time/warmup", "val/OA"):
        assert key in header, key
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "linear" and summary["n_epochs"] == 2 and summary["n_timed_epochs"] == 1
    assert summary["median_train_epoch_s"] > 0 and summary["n_parameters"] > 0
    assert "test/OA" in summary["metrics"] and "val/OA" in summary["metrics"]
    assert summary["precision"] in ("32-true", "bf16-mixed") and summary["precision_reason"].startswith("auto: ")
    use = summary["utilisation"]  # counted FLOPs x samples/s against a GEMM peak measured in the run
    assert use["precision"] == "fp32" and use["flops_per_sample"] > 1e6 and use["gemm_peak_gflop_per_s"] > 1
    rate = summary["median_train_samples_per_s"]
    assert use["achieved_gflop_per_s"] == pytest.approx(use["flops_per_sample"] * rate / 1e9)
    assert use["fraction_of_peak"] == pytest.approx(use["achieved_gflop_per_s"] / use["gemm_peak_gflop_per_s"])
    with open(tmp_path / "test_per_class.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and {"class_name", "F1", "IoU", "support_pixels"} <= set(rows[0])
    with open(tmp_path / "test_confusion_matrix.csv") as f:
        matrix = [[int(v) for v in row[1:]] for row in list(csv.reader(f))[1:]]
    assert sum(map(sum, matrix)) == sum(int(r["support_pixels"]) for r in rows) > 0
    assert (tmp_path / "test_confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"  # drawn by the run itself
    confusion = list(csv.reader(open(tmp_path / "test_confusion_matrix.csv")))
    assert len(confusion) == 12 and len(confusion[0]) == 12
    assert list((tmp_path / "checkpoints").glob("*.ckpt"))
    assert (tmp_path / "config.yaml").exists()


def test_mismatched_channels_fail_before_training(cfg_tiny):
    with open_dict(cfg_tiny):
        cfg_tiny.model.net.in_channels = {"s2": 9, "s1_asc": 3, "s1_desc": 3}
    with pytest.raises(ValueError, match=r"C=9.*model\.net\.in_channels\.s2"):
        train(cfg_tiny)
    assert not list(Path(cfg_tiny.paths.output_dir).glob("checkpoints/*.ckpt"))


@pytest.mark.parametrize("src,dst", [("linear", "conv"), ("conv", "channels_last"), ("channels_last", "linear")])
def test_checkpoint_loads_into_other_backend(cfg_tiny, tmp_path, src, dst):
    import hydra

    from mtan_s1s2.lit_module import SITSClassifierModule

    classes = {"linear": "LinearMlp", "conv": "ConvMlp", "channels_last": "ChannelsLastMlp"}
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.max_epochs = 1
        cfg_tiny.trainer.limit_train_batches = 2
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.test = False
    cfg_tiny.mlp._target_ = f"mtan_s1s2.models.layers.mlp.{classes[src]}"
    _, objs = train(cfg_tiny)
    model, dm = objs["model"].eval(), objs["datamodule"]
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    net_cfg = cfg_tiny.model.net.copy()
    net_cfg.mlp._target_ = f"mtan_s1s2.models.layers.mlp.{classes[dst]}"
    loaded = SITSClassifierModule.load_from_checkpoint(
        ckpt, net=hydra.utils.instantiate(net_cfg), weights_only=False
    ).eval()
    assert loaded.net.backend == dst
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        o1, o2 = model(batch), loaded(batch)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"
    plain = SITSClassifierModule.load_from_checkpoint(ckpt, weights_only=False).eval()  # net from net_config
    assert plain.net.backend == src
    with torch.no_grad():
        assert torch.allclose(plain(batch), o1, atol=1e-5)
