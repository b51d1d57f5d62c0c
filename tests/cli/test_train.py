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


TABLES = Path(__file__).resolve().parents[1] / "data" / "worldcereal" / "tables"


@pytest.mark.parametrize("model", ["tempcnn", "mtan"])
def test_train_on_a_pixel_table(tmp_path, model):
    """A pixel table, TempCNN or mTAN (reference times over the data's dates) and every report file."""
    from hydra.core.global_hydra import GlobalHydra

    from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train

    overrides = [
        "data=worldcereal_table", f"data.path={TABLES / 'public_extractions_wide.parquet'}", f"model={model}",
        "trainer=cpu", "trainer.max_epochs=2", "model.augment={temporal_dropout: 0.2, noise_std: 0.05}",
        *QUIET_OVERRIDES,
    ]  # fmt: skip
    if model == "mtan":
        overrides += [*TINY_MODEL_OVERRIDES, "model.net.ref_range=auto", "model.label_smoothing=0.1"]
        overrides += ["model.net.attention_init=identity", "model.net.head_norm=true"]
        overrides += ["model.early_stopping={monitor: val/loss, patience: 1, mode: min}"]
    else:
        overrides += ["model.net.filters=8", "model.net.hidden=16"]
    cfg = compose_train(overrides, output_dir=tmp_path)
    try:
        metrics, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    assert objs["model"].net.backend == ("tempcnn" if model == "tempcnn" else "linear")
    stoppers = [c for c in objs["trainer"].callbacks if type(c).__name__ == "EarlyStopping"]
    assert len(stoppers) == (1 if model == "mtan" else 0)
    assert {"val/OA", "test/OA", "test/F1"} <= set(metrics)
    if model == "mtan":
        ref = objs["model"].net.ref_times
        assert 0 < float(ref.min()) and float(ref.max()) < 335 / 365  # spread over Dec 2016 .. Nov 2017
    rows = list(csv.DictReader(open(tmp_path / "test_per_class.csv")))
    assert {"users_accuracy", "producers_accuracy", "F1", "IoU"} <= set(rows[0])
    assert (tmp_path / "test_confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "split.csv").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["backend"] == objs["model"].net.backend


def test_models_that_need_fixed_dates_say_so(cfg_tiny):
    with open_dict(cfg_tiny):
        cfg_tiny.model = {"_target_": "mtan_s1s2.lit_module.SITSClassifierModule", "net": {"seq_len": "???"}}
    with pytest.raises(ValueError, match=r"model.net.seq_len: this model needs the same number of dates"):
        train(cfg_tiny)


def test_random_forest_without_test_metrics(tmp_path):
    from hydra.core.global_hydra import GlobalHydra

    from conftest import compose_train

    cfg = compose_train(
        ["data=worldcereal_table", f"data.path={TABLES / 'public_extractions_wide.parquet'}", "model=random_forest",
         "model.n_estimators=20", "model.n_jobs=1", "test=false"],
        output_dir=tmp_path,
    )  # fmt: skip
    try:
        metrics, _ = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    assert "val/OA" in metrics and not any(k.startswith("test/") for k in metrics)  # choices on validation only
