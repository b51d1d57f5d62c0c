"""End-to-end runs of train(cfg) on tiny synthetic data."""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf, open_dict

from conftest import TINY_MODEL_OVERRIDES, compose_train, train_composed
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.batch import CLASS_NAMES
from mtan_s1s2.utils.hardware import CPU_FLAGS_RECORDED
from mtan_s1s2.utils.precision import cpu_flags, resolve_precision


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
    # precision: auto resolves per CPU (bf16-mixed with AVX512-BF16/AMX): the record names what ran
    expected, reason = resolve_precision("auto", "auto")
    assert summary["precision"] == expected and summary["precision_reason"] == reason
    use = summary["utilisation"]  # counted FLOPs x samples/s against a GEMM peak measured in the run
    assert use["precision"] == {"32-true": "fp32", "bf16-mixed": "bf16"}[expected]
    # a measured peak: emulated bf16 (MTAN_S1S2_CPUINFO=tests/fixtures/cpuinfo_bf16 on an AVX2 CPU) is < 1 GFLOP/s
    assert use["flops_per_sample"] > 1e6 and use["gemm_peak_gflop_per_s"] > 0
    assert summary["hardware"]["cpu_flags"] == [f for f in CPU_FLAGS_RECORDED if f in cpu_flags()]
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
    loaded = SITSClassifierModule.load_from_checkpoint(ckpt, net=hydra.utils.instantiate(net_cfg)).eval()
    assert loaded.net.backend == dst
    batch = next(iter(dm.val_dataloader()))
    with torch.no_grad():
        o1, o2 = model(batch), loaded(batch)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"
    plain = SITSClassifierModule.load_from_checkpoint(ckpt).eval()  # net from net_config, weights_only=True
    assert plain.net.backend == src
    with torch.no_grad():
        assert torch.allclose(plain(batch), o1, atol=1e-5)


VAL_KEYS = ("val/OA", "val/F1", "val/mIoU", "val/kappa", "val/loss")


def _check_no_best_and_nan_val(metrics, output_dir: Path, caplog) -> None:
    for key in VAL_KEYS:
        assert math.isnan(metrics[key]), (key, metrics[key])
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["best"] == {"monitor": "val/OA", "score": None, "path": None, "top_k": []}
    assert not list((output_dir / "checkpoints").glob("epoch_*.ckpt"))  # no NaN epoch kept as "best"
    assert (output_dir / "checkpoints" / "last.ckpt").exists()
    assert "No best checkpoint: val/OA was never a finite number" in caplog.text
    assert 0.0 <= metrics["test/OA"] <= 1.0  # the last epoch's weights were tested instead


def test_empty_validation_split_warns_once_logs_nan_and_keeps_no_best(cfg_tiny, tmp_path, caplog):
    with open_dict(cfg_tiny):
        cfg_tiny.data.n_val = 0
        cfg_tiny.trainer.max_epochs = 2
        cfg_tiny.trainer.limit_train_batches = 2
        cfg_tiny.trainer.limit_test_batches = 1
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="validation split has no labelled pixel") as w:
        metrics, _ = train(cfg_tiny)
    assert len([x for x in w if "validation split has no labelled pixel" in str(x.message)]) == 1  # once
    _check_no_best_and_nan_val(metrics, tmp_path, caplog)
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    val = [r["val/OA"] for r in rows if r["val/OA"]]
    assert val == ["nan", "nan"]  # logged every epoch, as NaN, never 0


def test_unlabelled_validation_split_logs_nan_not_zero(tmp_path, caplog):
    from mtan_s1s2.data.pastis.writer import write_pastis_dataset

    root = write_pastis_dataset(tmp_path / "data", preset="tiny", n_train=4, n_val=2, n_test=2)
    for feature in json.loads((root / "metadata.geojson").read_text())["features"]:
        if feature["properties"]["Fold"] == 4:  # the validation fold: every pixel unlabelled (0, ignored)
            target = root / "ANNOTATIONS" / f"TARGET_{feature['properties']['ID_PATCH']}.npy"
            np.save(target, np.zeros_like(np.load(target)))
    cfg = compose_train(
        ["data=pastis_synthetic", f"data.root={root}", "data.batch_size=2", "trainer=cpu", "trainer.max_epochs=1",
         "trainer.enable_progress_bar=false", *TINY_MODEL_OVERRIDES],
        output_dir=tmp_path / "run",
    )  # fmt: skip
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="every label is ignore_index=0"):
        metrics, _ = train(cfg)
    _check_no_best_and_nan_val(metrics, tmp_path / "run", caplog)


def test_fast_dev_run_says_the_best_checkpoint_test_is_skipped(cfg_tiny, caplog):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.fast_dev_run = True
        cfg_tiny.test = True
    with caplog.at_level(logging.INFO):
        metrics, _ = train(cfg_tiny)
    assert "fast_dev_run writes no checkpoint, so the best-checkpoint test is skipped" in caplog.text
    assert "test/OA" in metrics


def test_progress_bar_off_works_with_the_default_callbacks(tmp_path):
    # the default callbacks hold a RichProgressBar; Lightning refuses it with enable_progress_bar=False
    cfg = compose_train(
        ["data=synthetic_tiny", "trainer=cpu", "trainer.enable_progress_bar=false", "trainer.fast_dev_run=true",
         "test=false", *TINY_MODEL_OVERRIDES],
        output_dir=tmp_path,
    )  # fmt: skip
    assert cfg.callbacks.progress_bar._target_.endswith("RichProgressBar")
    _, objs = train(cfg)
    assert objs["trainer"].progress_bar_callback is None


def test_end_of_run_report_names_best_checkpoint_metrics_and_per_class_file(cfg_tiny, tmp_path, caplog):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.limit_train_batches = 1
        cfg_tiny.trainer.limit_val_batches = 1
        cfg_tiny.trainer.limit_test_batches = 1
    with caplog.at_level(logging.INFO):
        metrics, _ = train(cfg_tiny)
    best = json.loads((tmp_path / "summary.json").read_text())["best"]["path"]
    assert f"Best checkpoint: {best} (val/OA " in caplog.text
    assert f"Test metrics: test/F1 {metrics['test/F1']:.4f}, test/OA {metrics['test/OA']:.4f}" in caplog.text
    assert f"Per-class report: {tmp_path / 'test_per_class.csv'}" in caplog.text
    # one line per epoch: pytest's stdout is not a terminal
    assert "Epoch 1/1: train/loss " in caplog.text and "| ETA 0:00:00" in caplog.text


def test_inverse_frequency_warns_with_the_names_of_absent_classes(cfg_tiny):
    from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule

    dm = SyntheticSITSDataModule(preset="tiny", n_train=2, seed=0)
    present = set()
    for i in range(2):
        present |= set(np.unique(dm.raw_dataset("train")[i]["label"]).tolist())
    absent = [f"{name} ({k})" for k, name in enumerate(CLASS_NAMES) if k and k not in present]
    assert absent, "the test needs a class missing from 2 tiny patches"
    with open_dict(cfg_tiny):
        cfg_tiny.data.n_train = 2
        cfg_tiny.model.class_weights = "inverse_frequency"
        cfg_tiny.trainer.fast_dev_run = True
        cfg_tiny.test = False
    with pytest.warns(UserWarning, match="inverse_frequency") as w:
        _, objs = train(cfg_tiny)
    message = next(str(x.message) for x in w if "inverse_frequency" in str(x.message))
    assert ", ".join(absent) in message and f"{len(absent)} class(es)" in message
    weights = objs["model"].class_weight
    assert all(weights[k] == 0 for k, name in enumerate(CLASS_NAMES) if f"{name} ({k})" in absent)


def test_tensorboard_keeps_metrics_csv_and_logs_hparams_and_confusion_matrix(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    cfg = compose_train(
        ["data=synthetic_tiny", "trainer=cpu", "logger=tensorboard", "trainer.max_epochs=1",
         "trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
         "trainer.enable_progress_bar=false", *TINY_MODEL_OVERRIDES],
        output_dir=tmp_path,
    )  # fmt: skip
    metrics, _ = train(cfg)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "val/OA" in header and "test/OA" in header
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    assert "test/confusion_matrix" in events.Tags()["images"]
    image = events.Images("test/confusion_matrix")[0]
    assert image.width > 100 and image.height > 100
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["model.net.d_model"].number_value == 8 and hparams["data.preset"].string_value == "tiny"
    assert events.Scalars("hp/test_OA")[-1].value == pytest.approx(metrics["test/OA"])


TABLES = Path(__file__).resolve().parents[1] / "fixtures" / "worldcereal" / "tables"


@pytest.mark.parametrize("model", ["tempcnn", "mtan"])
def test_train_on_a_pixel_table(tmp_path, model, caplog):
    """A pixel table, TempCNN or mTAN (reference times over the data's dates) and every report file."""
    from conftest import QUIET_OVERRIDES

    overrides = [
        "data=worldcereal_table", f"data.path={TABLES / 'public_extractions_wide.parquet'}", f"model={model}",
        "trainer=cpu", "trainer.max_epochs=2", "model.augment={temporal_dropout: 0.2, noise_std: 0.05}",
        *QUIET_OVERRIDES,
    ]  # fmt: skip
    if model == "mtan":
        overrides += [*TINY_MODEL_OVERRIDES, "mlp=linear", "model.net.ref_range=auto", "model.label_smoothing=0.1"]
        overrides += ["model.net.attention_init=identity", "model.net.head_norm=true"]
        overrides += ["model.early_stopping={monitor: val/loss, patience: 1, mode: min}"]
    else:
        overrides += ["model.net.filters=8", "model.net.hidden=16"]
    with caplog.at_level(logging.INFO):
        metrics, objs = train_composed(overrides, tmp_path)
    assert "will override existing callbacks" not in caplog.text  # the model's EarlyStopping is no news
    assert objs["model"].net.backend == ("tempcnn" if model == "tempcnn" else "linear")
    stoppers = [c for c in objs["trainer"].callbacks if type(c).__name__ == "EarlyStopping"]
    assert len(stoppers) == (1 if model == "mtan" else 0)
    assert {"val/OA", "test/OA", "test/F1"} <= set(metrics)
    if model == "mtan":
        ref = objs["model"].net.ref_times
        # the centres of 4 equal steps of the dates' span (Dec 2016 .. Nov 2017, doy 0 .. 335)
        assert ref.numpy() * 365 == pytest.approx([41.875, 125.625, 209.375, 293.125], abs=1e-3)
    rows = list(csv.DictReader(open(tmp_path / "test_per_class.csv")))
    assert {"users_accuracy", "producers_accuracy", "F1", "IoU"} <= set(rows[0])
    assert (tmp_path / "test_confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "split.csv").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["backend"] == objs["model"].net.backend


def test_tempcnn_on_a_datacube_reads_a_date_grid(tmp_path, caplog):
    """TempCNN on a datacube (dates per scene): every series interpolated on a 10-day grid, recorded."""
    from conftest import QUIET_OVERRIDES

    cube = Path(__file__).resolve().parents[1] / "fixtures" / "worldcereal_mini"
    overrides = ["data=worldcereal_tza", f"data.root={cube}", "data.split.n_folds=3", "model=tempcnn", "trainer=cpu",
                 "trainer.max_epochs=1", "model.net.filters=8", "model.net.hidden=16", *QUIET_OVERRIDES]  # fmt: skip
    with caplog.at_level(logging.INFO):
        metrics, objs = train_composed(overrides, tmp_path)
    net = objs["model"].net
    # the fixture's 20 Sentinel-1 dates, doy 19.7 .. 247.7 (2019-10-12 .. 2020-05-27), on a grid every 10 days
    assert net.seq_len is None and net.num_dates == 24 and net.grid[0] == pytest.approx(19.66, abs=0.01)
    assert "every series is interpolated at 24 dates every 10 days from doy 20 to 248" in caplog.text
    recorded = OmegaConf.load(tmp_path / "config.yaml").model.net
    assert recorded.seq_len is None and recorded.date_range[1] == pytest.approx(247.66, abs=0.01)
    assert 0.0 <= metrics["test/OA"] <= 1.0


def test_models_that_need_fixed_dates_say_so(cfg_tiny):
    with open_dict(cfg_tiny):
        cfg_tiny.model = {"_target_": "mtan_s1s2.lit_module.SITSClassifierModule", "net": {"seq_len": "???"}}
    with pytest.raises(ValueError, match=r"model.net.seq_len: this model needs the same number of dates"):
        train(cfg_tiny)


def test_random_forest_without_test_metrics(tmp_path):
    metrics, _ = train_composed(
        ["data=worldcereal_table", f"data.path={TABLES / 'public_extractions_wide.parquet'}", "model=random_forest",
         "model.n_estimators=20", "model.n_jobs=1", "test=false"],
        tmp_path,
    )  # fmt: skip
    assert "val/OA" in metrics and not any(k.startswith("test/") for k in metrics)  # choices on validation only


def test_fast_dev_run_says_it_writes_no_checkpoint_not_that_the_score_was_never_finite(cfg_tiny, caplog):
    with open_dict(cfg_tiny):
        cfg_tiny.trainer.fast_dev_run = True
    with caplog.at_level(logging.INFO):
        metrics, _ = train(cfg_tiny)
    assert math.isfinite(metrics["val/OA"])  # it logged a score
    assert "never finite" not in caplog.text and "never a finite number" not in caplog.text
    assert "Best checkpoint: none (fast_dev_run writes no checkpoint)" in caplog.text
