"""Ensembles of checkpoints in eval.py and predict.py: short training runs of two seeds on real file formats."""

from __future__ import annotations

import csv
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from fixtures.scene_files import MINI, MINI_SCENES
from mtan_s1s2.checkpoints import read_checkpoint
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.predict import build_predict_datamodule, predict, training_norm_stats
from mtan_s1s2.cli.train import train
from mtan_s1s2.cli.validate import ConfigError, check_config
from mtan_s1s2.data.pastis.writer import write_pastis_dataset
from mtan_s1s2.ensemble.members import check_members_agree, load_members, resolve_checkpoints
from mtan_s1s2.ensemble.model import EnsembleModule
from mtan_s1s2.ensemble.probabilities import PixelProbabilities, mean_probabilities, probabilities_from_logits
from mtan_s1s2.inference.scene import classify_tile

TABLE = Path(__file__).resolve().parents[1] / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"
TEST_METRICS = ("OA", "F1", "mIoU", "kappa")


def compose_cli(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """``configs/<name>.yaml`` composed outside a Hydra run, output in ``output_dir``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=["trainer=cpu", "trainer.enable_progress_bar=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


def _train(base: Path, name: str, overrides: list[str], network: bool = True) -> dict:
    tiny = TINY_MODEL_OVERRIDES if network else []
    cfg = compose_train(["trainer=cpu", "trainer.max_epochs=1", *QUIET_OVERRIDES, *tiny, *overrides], base / name)
    metrics, objs = train(cfg)
    GlobalHydra.instance().clear()
    best = objs["trainer"].checkpoint_callback.best_model_path if objs["trainer"] is not None else ""
    return {"dir": base / name, "ckpt": Path(best), "metrics": metrics}


@pytest.fixture(scope="module")
def table_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Two seeds of the same fold of a WorldCereal-format table, one with mlp=linear, one with mlp=conv."""
    base = tmp_path_factory.mktemp("ensemble_table")
    data = ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3"]
    return [
        _train(base, "run_seed1", [*data, "seed=1", "mlp=linear"]),
        _train(base, "run_seed2", [*data, "seed=2", "mlp=conv"]),
    ]


def test_training_runs_write_their_test_probabilities(table_runs: list[dict], tmp_path: Path) -> None:
    for run in table_runs:  # the Lightning runs (TestProbabilities callback)
        pixels = PixelProbabilities.read(run["dir"] / "test_probabilities.npz")
        assert pixels.proba.dtype == np.float16 and pixels.class_names[0] == "unlabelled"
        assert pixels.proba.shape == (len(pixels), 8) and float(np.abs(pixels.proba[:, 0]).max()) == 0.0
        np.testing.assert_allclose(pixels.proba.astype(np.float32).sum(1), 1.0, atol=5e-3)
        assert pixels.metrics()["OA"] == pytest.approx(run["metrics"]["test/OA"], abs=0.02)  # float16 near-ties
    data = ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3"]
    forest = _train(tmp_path, "forest", [*data, "model=random_forest", "model.n_estimators=20"], False)
    pixels = PixelProbabilities.read(forest["dir"] / "test_probabilities.npz")  # the baselines' harness
    assert len(pixels) == len(PixelProbabilities.read(table_runs[0]["dir"] / "test_probabilities.npz"))
    assert pixels.metrics()["OA"] == pytest.approx(forest["metrics"]["test/OA"], abs=1e-6)


def test_ensemble_probabilities_are_the_mean_of_the_members(table_runs: list[dict]) -> None:
    members = load_members([r["ckpt"] for r in table_runs])
    assert [m.model.net.backend for m in members] == ["linear", "conv"]
    ensemble = EnsembleModule([m.model for m in members])
    cfg = compose_cli("eval", [f"ckpt_path={table_runs[0]['ckpt']}"], table_runs[0]["dir"] / "unused")
    from mtan_s1s2.cli.eval import build_datamodule

    dm = build_datamodule(cfg, members[0].run_cfg, members[0].contract)
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    with torch.no_grad():
        p1, p2 = (probabilities_from_logits(m.model(batch), 0) for m in members)
        p_ens = torch.softmax(ensemble(batch), dim=1)
    assert (p1 - p2).abs().max() > 1e-3  # two seeds give different probabilities: the mean is not either member
    expected = (p1 + p2) / 2
    assert torch.allclose(p_ens, expected, atol=1e-6), f"{(p_ens - expected).abs().max()}"
    assert float(p_ens[:, 0].max()) == 0.0  # the ignore_index class is never predicted
    assert torch.equal(ensemble(batch).argmax(1), expected.argmax(1))


def test_eval_writes_the_ensemble_and_each_member(table_runs: list[dict], tmp_path: Path) -> None:
    ckpts = ",".join(str(r["ckpt"]) for r in table_runs)
    metrics, objs = evaluate(compose_cli("eval", [f"ckpt_path=[{ckpts}]"], tmp_path), [])
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["ensemble"] is True and record["ckpt_path"] == [str(r["ckpt"]) for r in table_runs]
    assert record["backend"] == "ensemble(linear+conv)"
    for member, run in zip(record["members"], table_runs, strict=True):  # each member reproduces its own test
        for m in TEST_METRICS:
            assert member[m] == pytest.approx(run["metrics"][f"test/{m}"], abs=1e-4), m
    for m in TEST_METRICS:
        mean = np.mean([run["metrics"][f"test/{m}"] for run in table_runs])
        assert record["mean_member"][m] == pytest.approx(mean, abs=1e-4)
        assert record["delta_vs_mean_member"][m] == pytest.approx(metrics[f"test/{m}"] - mean, abs=1e-4)
    # the ensemble's pixel probabilities are the mean of the members' (float16 files)
    files = [PixelProbabilities.read(d / "test_probabilities.npz") for d in sorted((tmp_path / "members").iterdir())]
    ensemble = PixelProbabilities.read(tmp_path / "test_probabilities.npz")
    mean = mean_probabilities(files)
    np.testing.assert_array_equal(ensemble.label, mean.label)
    np.testing.assert_allclose(ensemble.proba.astype(np.float32), mean.proba, atol=2e-3)
    assert ensemble.metrics()["OA"] == pytest.approx(metrics["test/OA"], abs=1e-6)
    for name in ("test_per_class.csv", "test_confusion_matrix.csv", "test_confusion_matrix.png", "members.csv"):
        assert (tmp_path / name).stat().st_size > 0
    confusion = list(csv.reader(open(tmp_path / "test_confusion_matrix.csv")))
    assert sum(int(v) for row in confusion[1:] for v in row[1:]) == len(ensemble)
    table = list(csv.DictReader(open(tmp_path / "members.csv")))
    assert [r["member"] for r in table] == ["1", "2", "mean", "ensemble"]
    assert float(table[-1]["OA"]) == pytest.approx(metrics["test/OA"], abs=1e-6)


def test_eval_mixes_an_mtan_run_and_a_tempcnn_run_with_equal_weight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two run folders of different networks, each with its checkpoint ensemble of 2: 4 members, each run half."""
    data = ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3", "seed=1", "trainer.max_epochs=3"]
    mtan = _train(tmp_path, "mtan", [*data, "model.checkpoint_ensemble=2"])
    tempcnn = _train(tmp_path, "tempcnn", [*data, "model=tempcnn", "model.checkpoint_ensemble=2"], network=False)
    metrics, _ = evaluate(compose_cli("eval", [f"ckpt_path=[{mtan['dir']},{tempcnn['dir']}]"], tmp_path / "eval"), [])
    record = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert len(record["ckpt_path"]) == 4 and all("tempcnn/checkpoints" in p for p in record["ckpt_path"][2:])
    assert record["backend"].startswith("ensemble(") and record["backend"].count("tempcnn") == 2
    runs = [PixelProbabilities.read(r["dir"] / "test_probabilities.npz") for r in (mtan, tempcnn)]
    assert np.abs(runs[0].proba.astype(np.float32) - runs[1].proba.astype(np.float32)).max() > 1e-2
    ensemble = PixelProbabilities.read(tmp_path / "eval" / "test_probabilities.npz")
    expected = mean_probabilities(runs)  # each run's file: the mean of its 2 checkpoints
    np.testing.assert_array_equal(ensemble.label, expected.label)
    np.testing.assert_allclose(ensemble.proba.astype(np.float32), expected.proba, atol=2e-3)
    assert ensemble.metrics()["OA"] == pytest.approx(metrics["test/OA"], abs=1e-6)
    # a run folder of 2 checkpoints beside one checkpoint: the weights are 2:1, and a warning says so
    one = sorted((tempcnn["dir"] / "checkpoints").glob("epoch_*.ckpt"))[0]
    with caplog.at_level(logging.WARNING, logger="mtan_s1s2.ensemble.members"):
        assert len(resolve_checkpoints([str(mtan["dir"]), str(one)])) == 3
    assert f"{mtan['dir']}: 2, {tempcnn['dir']}: 1" in caplog.text and "model.checkpoint_ensemble" in caplog.text
    caplog.clear()
    resolve_checkpoints([str(mtan["dir"]), str(tempcnn["dir"])])
    assert "different numbers of checkpoints" not in caplog.text
    # the same inside one sweep folder: a run that kept 1 checkpoint beside one that kept 2
    sweep = tmp_path / "sweep"
    for job, run in (("0", mtan), ("1", tempcnn)):  # the copies' summary.json name their own checkpoints
        shutil.copytree(run["dir"], sweep / job)
        summary = sweep / job / "summary.json"
        summary.write_text(summary.read_text().replace(str(run["dir"]), str(sweep / job)))
    summary = json.loads((sweep / "1" / "summary.json").read_text())
    summary["best"] = {"path": str(sweep / "1" / "checkpoints" / one.name)}
    (sweep / "1" / "summary.json").write_text(json.dumps(summary))
    with caplog.at_level(logging.WARNING, logger="mtan_s1s2.ensemble.members"):
        assert len(resolve_checkpoints(str(sweep))) == 3
    assert f"{sweep / '0'}: 2, {sweep / '1'}: 1" in caplog.text


def test_ckpt_path_names_a_sweep_folder_or_a_glob(table_runs: list[dict]) -> None:
    base = table_runs[0]["dir"].parent
    expected = [r["ckpt"].absolute() for r in table_runs]
    assert resolve_checkpoints(str(base)) == expected  # each run's best checkpoint (summary.json)
    assert resolve_checkpoints(str(base / "run_*" / "checkpoints" / "epoch_*.ckpt")) == expected
    assert resolve_checkpoints([str(table_runs[1]["dir"]), str(table_runs[0]["ckpt"])]) == expected[::-1]
    with pytest.raises(ValueError, match="matches no file"):
        resolve_checkpoints(str(base / "nothing_*.ckpt"))


def test_members_that_differ_are_refused_naming_the_member_and_key(table_runs: list[dict], tmp_path: Path) -> None:
    # other class names in the run's config
    renamed = tmp_path / "renamed"
    shutil.copytree(table_runs[1]["dir"], renamed)
    cfg = yaml.safe_load((renamed / "config.yaml").read_text())
    cfg["model"]["class_names"][2] = "corn"
    (renamed / "config.yaml").write_text(yaml.safe_dump(cfg))
    ckpt = renamed / "checkpoints" / table_runs[1]["ckpt"].name
    members = load_members([table_runs[0]["ckpt"], ckpt])
    with pytest.raises(ValueError, match=r"renamed/epoch_\d+\.ckpt .* classes: model\.class_names\[2\] is corn"):
        check_members_agree(members)
    # other normalisation statistics in the checkpoint's input record
    restats = tmp_path / "restats"
    shutil.copytree(table_runs[1]["dir"], restats)
    ckpt = restats / "checkpoints" / table_runs[1]["ckpt"].name
    content = read_checkpoint(ckpt)
    content["hyper_parameters"]["data_contract"]["norm_stats"]["s2"]["mean"][3] += 0.5
    torch.save(content, ckpt)
    with pytest.raises(ValueError, match=r"restats/.*input record.*data_contract\.norm_stats\.s2\.mean\[3\]"):
        evaluate(compose_cli("eval", [f"ckpt_path=[{table_runs[0]['ckpt']},{ckpt}]"], tmp_path / "eval"), [])
    # another fold: the data differ
    cfg = yaml.safe_load((table_runs[1]["dir"] / "config.yaml").read_text())
    cfg["data"]["split"]["fold"] = 2
    refold = tmp_path / "refold"
    shutil.copytree(table_runs[1]["dir"], refold)
    (refold / "config.yaml").write_text(yaml.safe_dump(cfg))
    members = load_members([table_runs[0]["ckpt"], refold / "checkpoints" / table_runs[1]["ckpt"].name])
    with pytest.raises(ValueError, match=r"refold/.*data config: data\.split\.fold is 2"):
        check_members_agree(members)


def test_predict_table_from_an_ensemble(table_runs: list[dict], tmp_path: Path) -> None:
    tables = []
    for i, run in enumerate(table_runs):
        predict(compose_cli("predict", [f"ckpt_path={run['ckpt']}", "progress=false"], tmp_path / str(i)), [])
        tables.append(pd.read_csv(tmp_path / str(i) / "predictions.csv"))
    ckpts = ",".join(str(r["ckpt"]) for r in table_runs)
    summary = predict(compose_cli("predict", [f"ckpt_path=[{ckpts}]", "progress=false"], tmp_path / "ens"), [])
    assert summary["ckpt_path"] == [str(r["ckpt"]) for r in table_runs]
    ens = pd.read_csv(tmp_path / "ens" / "predictions.csv")
    columns = [c for c in ens.columns if c.startswith("proba_")]
    assert ens["id"].tolist() == tables[0]["id"].tolist()
    expected = (tables[0][columns].to_numpy() + tables[1][columns].to_numpy()) / 2
    np.testing.assert_allclose(ens[columns].to_numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(ens["predicted"].to_numpy(), expected.argmax(axis=1) + 1)  # column 0 is class 1


def test_train_refuses_a_list_of_checkpoints() -> None:
    cfg = compose_train(["ckpt_path=[a.ckpt,b.ckpt]"])
    with pytest.raises(ConfigError, match=r"ckpt_path=\['a.ckpt', 'b.ckpt'\] is a list; train.py resumes one"):
        check_config(cfg)


@pytest.fixture(scope="module")
def patch_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Two seeds on a generated PASTIS-R-format dataset."""
    base = tmp_path_factory.mktemp("ensemble_patches")
    root = write_pastis_dataset(base / "data", preset="tiny", n_train=4, n_val=2, n_test=2)
    data = ["data=pastis_synthetic", f"data.root={root}", "data.batch_size=2", "data.crop_size=8"]
    return [_train(base, f"seed{s}", [*data, f"seed={s}"]) for s in (1, 2)]


def test_predict_patches_from_an_ensemble(patch_runs: list[dict], tmp_path: Path) -> None:
    probas = []
    for i, run in enumerate(patch_runs):
        predict(compose_cli("predict", [f"ckpt_path={run['ckpt']}", "probabilities=true"], tmp_path / str(i)), [])
        probas.append({p.name: np.load(p) for p in sorted((tmp_path / str(i) / "probabilities").iterdir())})
    ckpts = ",".join(str(r["ckpt"]) for r in patch_runs)
    out = tmp_path / "ens"
    summary = predict(compose_cli("predict", [f"ckpt_path=[{ckpts}]", "probabilities=true"], out), [])
    assert len(summary["patch_ids"]) == 2
    for name, p1 in probas[0].items():
        expected = (p1 + probas[1][name]) / 2  # (K, H, W)
        got = np.load(out / "probabilities" / name)
        np.testing.assert_allclose(got, expected, atol=1e-6)
        pred = np.load(out / "predictions" / name.replace("PROBA", "PRED"))
        np.testing.assert_array_equal(pred, expected.argmax(0))


@pytest.fixture(scope="module")
def scene_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Two seeds on the WorldCereal datacube test scenes (data=worldcereal), mlp=linear and mlp=channels_last."""
    base = tmp_path_factory.mktemp("ensemble_scenes")
    data = [
        "data=worldcereal", f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]",
        "data.split.block_size=8", "data.split.n_folds=3", "data.batch_size=4",
    ]  # fmt: skip
    return [
        _train(base, f"seed{s}", [*data, f"seed={s}", f"mlp={mlp}"]) for s, mlp in ((1, "linear"), (2, "channels_last"))
    ]


def test_predict_scene_from_an_ensemble_tile_by_tile(scene_runs: list[dict], tmp_path: Path) -> None:
    import rasterio

    scene_name = MINI_SCENES[0]
    ckpts = ",".join(str(r["ckpt"]) for r in scene_runs)
    overrides = [f"ckpt_path=[{ckpts}]", f"scene={scene_name}", "tile_size=7", "probabilities=true", "progress=false"]
    summary = predict(compose_cli("predict", overrides, tmp_path), [])
    (record,) = summary["scenes"]
    # the expected map: the mean of the members' probabilities over the whole scene in one window
    members = load_members([r["ckpt"] for r in scene_runs])
    cfg = compose_cli("predict", [f"ckpt_path={scene_runs[0]['ckpt']}", f"scene={scene_name}"], tmp_path / "unused")
    dm = build_predict_datamodule(cfg, members[0].run_cfg, members[0].contract)
    stats = training_norm_stats(members[0].contract, dm)
    data = dm.scenes[0].read(count=False)
    outputs = [classify_tile(m.model, data, stats, 0, torch.device("cpu")) for m in members]
    mean = (outputs[0][1] + outputs[1][1]) / 2  # (K, H, W)
    assert np.abs(outputs[0][1] - outputs[1][1]).max() > 1e-3
    expected = mean.argmax(0).astype(np.uint8)
    expected[outputs[0][0] == 255] = 255  # no valid observation
    with rasterio.open(record["files"]["class_map"]) as src:
        np.testing.assert_array_equal(src.read(1), expected)
    with rasterio.open(record["files"]["probabilities"]) as src:  # one uint8 percent band per class
        percent = src.read().astype(np.float64)
    valid = expected != 255
    k = mean.shape[0]
    assert percent.shape[0] in (k, k - 1)
    written = percent if percent.shape[0] == k else np.concatenate([np.zeros_like(percent[:1]), percent])
    assert np.abs(written[:, valid] - 100 * mean[:, valid]).max() <= 1.0  # rounded to whole percent
