"""LightGBM, MiniRocket and MultiRocket-Hydra beside the RandomForest: the same harness, model files and maps.

Each baseline is trained by ``train.py`` on a small extract of the real WorldCereal table
(Parquet, the real columns), saved, reloaded to identical probabilities, tested again by
``eval.py`` and mapped by ``predict.py``: the table's pixels, the real WorldCereal patches
(cropped datacubes) as scenes, and PASTIS-format patches.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from conftest import QUIET_OVERRIDES, compose_train
from fixtures.scene_files import MINI, MINI_SCENES
from mtan_s1s2.baselines.base import FeatureBaseline, load_baseline, resolve_n_jobs
from mtan_s1s2.baselines.features import DateGrid, as_series, date_grid, pixel_features
from mtan_s1s2.baselines.harness import _features
from mtan_s1s2.baselines.lightgbm import LightGBMBaseline
from mtan_s1s2.baselines.module import BaselineModule
from mtan_s1s2.baselines.rocket import MiniRocketBaseline, MultiRocketHydraBaseline, pad_series
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.normalization import check_norm_stats
from mtan_s1s2.inference.scene import classify_tile

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "tests" / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"
SMALL = {
    "random_forest": ["model.n_estimators=20"],
    "lightgbm": ["model.n_estimators=60", "model.early_stopping_rounds=10"],
    "minirocket": ["model.n_kernels=840"],
    "multirocket_hydra": ["model.n_groups=8"],
}
"""Small settings of every baseline (``model.<key>``), so each fits in seconds."""
SCENE_DATA = [
    "data=worldcereal", f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]",
    "data.split.block_size=8", "data.split.n_folds=3", "data.batch_size=4",
]  # fmt: skip


def _compose(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=["trainer=cpu", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


def _train(model: str, data: list[str], output_dir: Path) -> tuple[dict[str, float], dict]:
    cfg = compose_train(
        [*data, f"model={model}", *SMALL[model], "model.n_jobs=1", "trainer=cpu", *QUIET_OVERRIDES],
        output_dir=output_dir,
    )
    try:
        return train(cfg)
    finally:
        GlobalHydra.instance().clear()


ROCKETS = ("minirocket", "multirocket_hydra")
"""aeon's kernels compile with numba on first use (about a minute each on 2 cores): ``slow``."""


@pytest.mark.parametrize(
    "model", [pytest.param(m, marks=pytest.mark.slow) if m in ROCKETS else m for m in sorted(SMALL)]
)
def test_baseline_on_a_real_table_saves_reloads_evaluates_and_predicts(model: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    metrics, objs = _train(model, ["data=worldcereal_table", f"data.path={TABLE}"], run)
    assert {"val/OA", "val/F1", "test/OA", "test/F1", "test/mIoU", "test/kappa"} <= set(metrics)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == model and summary["metrics"]["test/OA"] == pytest.approx(metrics["test/OA"])
    assert summary["baseline"]["features"] == "raw" and summary["n_train_pixels"] == 72  # the extract's train split
    assert summary["baseline"]["dates"] == {"s2": 12, "s1": 12}  # 12 monthly composites, both modalities
    for name in ("test_per_class.csv", "test_confusion_matrix.csv", "test_confusion_matrix.png"):
        assert (run / name).is_file(), name
    assert 0.0 < metrics["test/OA"] <= 1.0

    # The model file holds the fitted model, its date grid and the data contract.
    ckpt = run / "checkpoints" / f"{model}.joblib"
    fitted: FeatureBaseline = objs["model"]
    loaded = load_baseline(ckpt)
    assert type(loaded) is type(fitted) and loaded.contract is not None
    assert loaded.contract["class_names"] == list(objs["datamodule"].class_names)
    assert loaded.contract["norm_stats"]["s2"]["mean"] == pytest.approx(fitted.contract["norm_stats"]["s2"]["mean"])
    dm = objs["datamodule"]
    x, y, _, _ = _features(dm.test_dataloader(), loaded.grid, dm.ignore_index, loaded.layout)
    k = dm.num_classes
    np.testing.assert_array_equal(loaded.predict_proba(x, k), fitted.predict_proba(x, k))
    np.testing.assert_allclose(loaded.predict_proba(x, k).sum(axis=1), 1.0, atol=1e-5)

    # eval.py tests the model file again to the same metrics and report.
    evaluated, eval_objs = evaluate(_compose("eval", [f"ckpt_path={ckpt}"], tmp_path / "eval"))
    assert evaluated == pytest.approx({k: v for k, v in metrics.items() if k.startswith("test/")}, abs=0.0)
    assert eval_objs["trainer"] is None
    assert (tmp_path / "eval" / "test_per_class.csv").read_text() == (run / "test_per_class.csv").read_text()
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["backend"] == model

    # predict.py writes the test pixels' table: its predictions give the test OA of the run.
    out = predict(_compose("predict", [f"ckpt_path={ckpt}", "split=test"], tmp_path / "pred"))
    table = pd.read_csv(out["table"])
    assert len(table) == out["n_pixels"] == len(y) and table["label"].tolist() == y.tolist()
    assert (table["predicted"] == table["label"]).mean() == pytest.approx(metrics["test/OA"])
    proba = table[[c for c in table.columns if c.startswith("proba_")]].to_numpy()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def scene_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """RandomForest, LightGBM and MiniRocket fitted on the cropped real WorldCereal patches."""
    base = tmp_path_factory.mktemp("scene_baselines")
    runs = {}
    for model in ("random_forest", "lightgbm", "minirocket"):
        metrics, objs = _train(model, SCENE_DATA, base / model)
        runs[model] = {"ckpt": base / model / "checkpoints" / f"{model}.joblib", "dm": objs["datamodule"]}
    return runs


@pytest.mark.parametrize("model", ["random_forest", "lightgbm", "minirocket"])
def test_baseline_maps_a_scene(model: str, scene_runs: dict[str, dict], tmp_path: Path) -> None:
    run = scene_runs[model]
    scene_name = MINI_SCENES[0]
    maps = {}
    for tile in (7, 64):
        out = predict(
            _compose(
                "predict",
                [f"ckpt_path={run['ckpt']}", f"scene={scene_name}", f"tile_size={tile}", "probabilities=true",
                 "progress=false"],
                tmp_path / f"tile{tile}",
            )
        )  # fmt: skip
        (record,) = out["scenes"]
        with rasterio.open(record["files"]["class_map"]) as src:
            assert src.dtypes == ("uint8",) and src.nodata == 255 and src.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
            maps[tile] = src.read(1)
        with rasterio.open(record["files"]["probabilities"]) as src:
            assert src.count == 4  # one band per class other than the unlabelled one
    np.testing.assert_array_equal(maps[7], maps[64])  # the tiling does not change the map

    # The map is the baseline's argmax on the whole scene, normalised with the stored statistics.
    baseline = load_baseline(run["ckpt"])
    module = BaselineModule(baseline).eval()
    scene = run["dm"].scene(scene_name)
    assert run["dm"].in_channels == {"s2": 6, "s2_10m": 4, "s1_asc": 2}  # the preset reads the 10 m bands
    stats = check_norm_stats(baseline.contract["norm_stats"], run["dm"].in_channels)
    expected, proba = classify_tile(module, scene.read(count=False), stats, 0, torch.device("cpu"))
    np.testing.assert_array_equal(maps[7], expected)
    assert set(np.unique(maps[7])) <= {1, 2, 3, 4, 255} and (maps[7] != 255).any()
    assert proba[0].max() == 0.0  # the unlabelled class is never predicted


def test_tempcnn_checkpoint_maps_a_table(tmp_path: Path) -> None:
    """TempCNN (a Lightning checkpoint) maps a table like the baselines: its predictions give the run's test OA."""
    cfg = compose_train(
        ["data=worldcereal_table", f"data.path={TABLE}", "model=tempcnn", "trainer=cpu", "trainer.max_epochs=2",
         *QUIET_OVERRIDES],
        output_dir=tmp_path / "run",
    )  # fmt: skip
    try:
        metrics, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    ckpt = objs["trainer"].checkpoint_callback.best_model_path
    out = predict(_compose("predict", [f"ckpt_path={ckpt}", "split=test"], tmp_path / "pred"))
    table = pd.read_csv(out["table"])
    assert (table["predicted"] == table["label"]).mean() == pytest.approx(metrics["test/OA"])


def test_baseline_maps_pastis_patches(tmp_path: Path) -> None:
    from mtan_s1s2.data.pastis.writer import FIRST_PATCH_ID, write_pastis_dataset

    root = write_pastis_dataset(tmp_path / "data", preset="tiny", n_train=6, n_val=2, n_test=3)
    data = ["data=pastis_synthetic", f"data.root={root}", "data.batch_size=3", "data.crop_size=null"]
    metrics, objs = _train("lightgbm", data, tmp_path / "run")
    ckpt = tmp_path / "run" / "checkpoints" / "lightgbm.joblib"
    out = predict(_compose("predict", [f"ckpt_path={ckpt}", "split=test", "probabilities=true"], tmp_path / "pred"))
    ids = list(range(FIRST_PATCH_ID + 8, FIRST_PATCH_ID + 11))  # fold 5: the test patches
    assert out["patch_ids"] == ids and len(out["geotiffs"]) == 3  # placed by metadata.geojson
    correct = total = 0
    for batch in objs["datamodule"].test_dataloader():
        for b, pid in enumerate(batch["patch_id"].tolist()):
            pred = np.load(tmp_path / "pred" / "predictions" / f"PRED_{pid}.npy")
            proba = np.load(tmp_path / "pred" / "probabilities" / f"PROBA_{pid}.npy")
            np.testing.assert_array_equal(pred, proba.argmax(0))
            label = batch["label"][b].numpy()
            correct += int((pred[label != 0] == label[label != 0]).sum())
            total += int((label != 0).sum())
    assert correct / total == pytest.approx(metrics["test/OA"])  # whole test patches: the run's test pixels


def _batch(doy: list[list[float]], values: np.ndarray, mask: np.ndarray, labels: np.ndarray) -> dict:
    """One modality ``s2`` with C channels and H=1, W=P pixels; ``values (B, T, C, P)``."""
    return {
        "s2": {
            "x": torch.from_numpy(values[:, :, :, None, :].astype(np.float32)),
            "doy": torch.tensor(doy),
            "mask": torch.from_numpy(mask[:, :, None, :]),
        },
        "label": torch.from_numpy(labels[:, None, :]),
    }


def test_series_features_fill_gaps_in_time_channel_major() -> None:
    # One sample, 4 common dates, 2 channels, 2 pixels; pixel 0 misses date 1, pixel 1 has no valid date.
    values = np.zeros((1, 4, 2, 2))
    values[0, :, 0, 0] = [0.0, 99.0, 20.0, 30.0]
    values[0, :, 1, 0] = [1.0, 99.0, 3.0, 4.0]
    mask = np.array([[[True, False], [False, False], [True, False], [True, False]]])
    batch = _batch([[0.0, 10.0, 20.0, 30.0]], values, mask, np.array([[1, 2]]))
    grid = date_grid([batch], ["s2"], shared=True)
    assert grid.raw
    flat, _ = pixel_features(batch, grid)
    np.testing.assert_array_equal(flat[0], [0.0, 1.0, np.nan, np.nan, 20.0, 3.0, 30.0, 4.0])  # date-major, NaN
    series, labels = pixel_features(batch, grid, layout="series")
    assert labels.tolist() == [1, 2]
    np.testing.assert_allclose(as_series(series, grid)[0], [[0.0, 10.0, 20.0, 30.0], [1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(as_series(series, grid)[1], np.zeros((2, 4)))  # no valid date: the mean
    assert pad_series(as_series(series, grid)).shape == (2, 2, 9)
    np.testing.assert_array_equal(pad_series(as_series(series, grid))[0, 0, 3:], 30.0)  # the last value repeated


def test_raw_features_refuse_other_dates_and_shared_grids_span_all_modalities() -> None:
    batch = _batch([[0.0, 10.0]], np.ones((1, 2, 1, 1)), np.ones((1, 2, 1), bool), np.array([[1]]))
    grid = DateGrid({"s2": np.array([0.0, 5.0])}, raw=True)
    with pytest.raises(ValueError, match=r"other s2 dates.*model.features=interpolated"):
        pixel_features(batch, grid)
    two = dict(batch)
    two["s1"] = {k: v.clone() for k, v in batch["s2"].items()}
    two["s1"]["doy"] = torch.tensor([[3.0, 25.0]])
    shared = date_grid([two], ["s2", "s1"], step_days=10.0, shared=True)
    assert not shared.raw and all(d.tolist() == [0.0, 10.0, 20.0] for d in shared.doy.values())
    with pytest.raises(ValueError, match="every modality"):
        date_grid([two], ["s2", "s1"], mode="raw", shared=True)


def test_lightgbm_stops_early_on_the_validation_pixels() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0.5) + 1  # classes 1..4
    x_val = rng.normal(size=(100, 8)).astype(np.float32)
    y_val = (x_val[:, 0] > 0).astype(np.int64) + 2 * (x_val[:, 1] > 0.5) + 1
    noisy = rng.random(300) < 0.3  # label noise: later rounds overfit it
    y[noisy] = rng.integers(1, 5, int(noisy.sum()))
    y_val[:5] = 6  # a class absent from training: left out of the validation loss
    gbm = LightGBMBaseline(n_estimators=500, early_stopping_rounds=20, n_jobs=1, seed=1)
    gbm.fit(x, y, x_val, y_val)
    assert 10 <= gbm.fit_info["best_iteration"] < 500 - 20 and gbm.fit_info["early_stopping_val_pixels"] == 95
    assert gbm.model.best_iteration_ == gbm.fit_info["best_iteration"]
    proba = gbm.predict_proba(x_val, 7)
    assert proba.shape == (100, 7) and proba[:, [0, 5, 6]].max() == 0.0
    assert (proba.argmax(1) == y_val)[5:].mean() > 0.7  # the rule is learnt despite the noise
    no_val = LightGBMBaseline(n_estimators=30, n_jobs=1).fit(x, y)
    assert no_val.fit_info["best_iteration"] == 30  # no validation pixels: every round


def test_same_seed_same_model_other_seed_other_bagging() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * rng.normal(size=200) > 0).astype(np.int64) + 1
    a, b, c = (LightGBMBaseline(n_estimators=40, early_stopping_rounds=None, n_jobs=2, seed=s) for s in (3, 3, 4))
    pa, pb, pc = (m.fit(x, y).predict_proba(x, 3) for m in (a, b, c))
    np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(pa, pc)


@pytest.mark.parametrize(
    "module,build,option",
    [
        ("lightgbm", lambda: LightGBMBaseline(), "model=lightgbm"),
        ("aeon.classification.convolution_based", lambda: MiniRocketBaseline(), "model=minirocket"),
        ("aeon.classification.convolution_based", lambda: MultiRocketHydraBaseline(), "model=multirocket_hydra"),
    ],
)
def test_missing_library_names_the_pip_command(module, build, option, monkeypatch: pytest.MonkeyPatch) -> None:
    importlib.import_module(module)
    monkeypatch.setitem(sys.modules, module, None)  # Python's marker of a module that cannot be imported
    with pytest.raises(ImportError, match=rf"{option} needs the .* pip install 'mtan-s1s2\[baselines\]'"):
        build()


def test_n_jobs_follow_the_machine(caplog: pytest.LogCaptureFixture) -> None:
    import os

    cores = len(os.sched_getaffinity(0))
    assert resolve_n_jobs(-1) == cores and resolve_n_jobs(3) == 3 and resolve_n_jobs(-cores - 5) == 1
    with pytest.raises(ValueError, match="got 0"):
        resolve_n_jobs(0)
    with caplog.at_level(logging.INFO), pytest.raises(ValueError, match=r"model\.features must be"):
        MiniRocketBaseline(features="dense")  # type: ignore[arg-type]


def test_random_forest_with_spatial_context_maps_whole_tiles(tmp_path: Path) -> None:
    """model.spatial_context=3: twice the features, and the map is the forest on the whole scene at once."""
    metrics, objs = _train("random_forest", [*SCENE_DATA, "model.spatial_context=3"], tmp_path / "run")
    fitted: FeatureBaseline = objs["model"]
    assert fitted.spatial_context == 3 and 0.0 < metrics["test/OA"] <= 1.0
    per_pixel = sum(len(dates) * fitted.in_channels[m] for m, dates in fitted.grid.doy.items())
    assert fitted.model.n_features_in_ == 2 * per_pixel  # each pixel's features and their neighbourhood means
    ckpt = tmp_path / "run" / "checkpoints" / "random_forest.joblib"
    scene_name = MINI_SCENES[0]
    out = predict(
        _compose(
            "predict",
            [f"ckpt_path={ckpt}", f"scene={scene_name}", "tile_size=256", "progress=false"],
            tmp_path / "pred",
        )
    )
    (record,) = out["scenes"]
    assert out["inference"]["skip_empty"] is False and out["inference"]["chunk_pixels"] is None
    with rasterio.open(record["files"]["class_map"]) as src:
        written = src.read(1)
    baseline = load_baseline(ckpt)
    assert baseline.spatial_context == 3
    scene = objs["datamodule"].scene(scene_name)
    stats = check_norm_stats(baseline.contract["norm_stats"], objs["datamodule"].in_channels)
    expected, _ = classify_tile(BaselineModule(baseline).eval(), scene.read(count=False), stats, 0, torch.device("cpu"))
    np.testing.assert_array_equal(written, expected)
