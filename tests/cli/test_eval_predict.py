"""eval.py and predict.py on the checkpoint of a short training run on PASTIS-R-format data."""

from __future__ import annotations

import csv
import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from conftest import compose_train
from mtan_s1s2.checkpoints import load_run_config
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.predict import build_predict_datamodule, predict
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.pastis.writer import FIRST_PATCH_ID, write_pastis_dataset

REPO = Path(__file__).resolve().parents[2]
N_TRAIN, N_VAL, N_TEST = 6, 2, 3
TEST_METRICS = ("test/OA", "test/F1", "test/mIoU", "test/kappa")
TINY_MODEL = [
    "model.net.d_model=8", "model.net.embed_time=8", "model.net.num_ref_times=4", "model.net.input_hidden=8",
    "model.net.fusion_hidden=16", "model.net.head_hidden=[16,16]",
]  # fmt: skip


def compose_cli(name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """Compose ``configs/<name>.yaml`` outside a Hydra run (``paths.output_dir`` set)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=name, overrides=["trainer=cpu", "trainer.enable_progress_bar=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One epoch on a generated PASTIS-R-format dataset, conv backend, tested on fold 5.

    The evaluation crop is the central 8x8 window, so eval.py must reproduce it.
    """
    base = tmp_path_factory.mktemp("eval_predict")
    root = write_pastis_dataset(base / "data", preset="tiny", n_train=N_TRAIN, n_val=N_VAL, n_test=N_TEST)
    cfg = compose_train(
        [
            "data=pastis_synthetic",
            f"data.root={root}",
            "data.batch_size=3",
            "data.crop_size=8",
            "data.eval_crop=center",
            "mlp=conv",
            "trainer=cpu",
            "trainer.max_epochs=1",
            "trainer.enable_progress_bar=false",
            "callbacks.progress_bar=null",
            *TINY_MODEL,
        ],
        output_dir=base / "train_run",
    )
    metrics, objs = train(cfg)
    GlobalHydra.instance().clear()
    best = objs["trainer"].checkpoint_callback.best_model_path
    return {"root": root, "dir": base / "train_run", "ckpt": best, "metrics": metrics}


def test_eval_cli_reproduces_logged_test_metrics(run: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `python eval.py ...`, in-process (a subprocess would spend its time importing torch).
    argv = ["eval.py", f"ckpt_path={run['ckpt']}", f"paths.log_dir={tmp_path}", "trainer=cpu",
            "trainer.enable_progress_bar=false"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    GlobalHydra.instance().clear()
    runpy.run_path(str(REPO / "eval.py"), run_name="__main__")
    GlobalHydra.instance().clear()
    (eval_dir,) = (tmp_path / "eval" / "runs").iterdir()
    record = json.loads((eval_dir / "metrics.json").read_text())
    assert record["backend"] == "conv" and record["n_patches"] == N_TEST
    for key in TEST_METRICS:
        assert record["metrics"][key] == pytest.approx(run["metrics"][key], abs=1e-4), key
    assert (eval_dir / "test_confusion_matrix.png").stat().st_size > 0
    confusion = list(csv.reader(open(eval_dir / "test_confusion_matrix.csv")))
    assert len(confusion) == 12 and len(confusion[0]) == 12
    assert confusion == list(csv.reader(open(run["dir"] / "test_confusion_matrix.csv")))
    with open(eval_dir / "test_per_class.csv") as f:
        assert len(list(csv.DictReader(f))) == 10


def test_evaluate_with_another_backend(run: dict, tmp_path: Path) -> None:
    cfg = compose_cli("eval", [f"ckpt_path={run['ckpt']}", "mlp=linear"], tmp_path)
    metrics, objs = evaluate(cfg)
    assert objs["model"].net.backend == "linear"
    for key in TEST_METRICS:
        assert metrics[key] == pytest.approx(run["metrics"][key], abs=1e-4), key


def test_eval_data_keys_are_merged_over_the_runs_data(run: dict, tmp_path: Path) -> None:
    # `+data.<key>=...` without a data preset edits the run's data config (e.g. parcel ids for
    # a run trained without them) instead of replacing it by a config with no _target_.
    cfg = compose_cli("eval", [f"ckpt_path={run['ckpt']}", "+data.eval_crop=full"], tmp_path)
    metrics, objs = evaluate(cfg)
    dm = objs["datamodule"]
    assert dm.eval_crop == "full" and dm.crop_size == 8 and dm.batch_size == 3  # the rest is the run's
    assert Path(dm.root) == Path(run["root"])
    assert set(TEST_METRICS) <= set(metrics)


def test_predict_data_keys_are_merged_over_the_runs_data(run: dict, tmp_path: Path) -> None:
    # predict.py chooses its data config as eval.py does (checkpoints.data_config_of)
    cfg = compose_cli("predict", [f"ckpt_path={run['ckpt']}", "+data.eval_crop=full"], tmp_path)
    dm = build_predict_datamodule(cfg, load_run_config(run["ckpt"]))
    assert dm.eval_crop == "full" and dm.crop_size == 8 and dm.batch_size == 3
    assert Path(dm.root) == Path(run["root"])


def test_predict_writes_one_map_per_patch(run: dict, tmp_path: Path) -> None:
    cfg = compose_cli("predict", [f"ckpt_path={run['ckpt']}", "split=val", "probabilities=true"], tmp_path)
    summary = predict(cfg)
    first = FIRST_PATCH_ID + N_TRAIN  # the val patches (fold 4)
    ids = list(range(first, first + N_VAL))
    assert summary["patch_ids"] == ids and summary["class_names"][0] == "unlabelled"
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == [f"PRED_{i}.npy" for i in ids]
    for i in ids:
        pred = np.load(tmp_path / "predictions" / f"PRED_{i}.npy")
        proba = np.load(tmp_path / "probabilities" / f"PROBA_{i}.npy")
        assert pred.shape == (16, 16) and pred.dtype == np.uint8  # whole patches, not the 8x8 eval crop
        assert proba.shape == (11, 16, 16) and proba.dtype == np.float32
        np.testing.assert_allclose(proba.sum(0), 1.0, atol=1e-5)
        np.testing.assert_array_equal(pred, proba.argmax(0))


def test_clear_errors(run: dict, tmp_path: Path) -> None:
    cfg = compose_cli("eval", [f"ckpt_path={tmp_path / 'missing.ckpt'}"], tmp_path)
    with pytest.raises(ValueError, match="Checkpoint not found"):
        evaluate(cfg)
    cfg = compose_cli("eval", [f"ckpt_path={run['ckpt']}", f"train_config={tmp_path / 'none.yaml'}"], tmp_path)
    with pytest.raises(ValueError, match="train_config="):
        evaluate(cfg)
    # The PASTIS nomenclature has 20 classes; the checkpoint was trained on the 11 synthetic ones.
    cfg = compose_cli(
        "eval", [f"ckpt_path={run['ckpt']}", "data=pastis", f"data.root={run['root']}", "data.crop_size=8"], tmp_path
    )
    with pytest.raises(ValueError, match="20 classes but the checkpoint was trained with 11"):
        evaluate(cfg)


def test_predict_pastis_without_annotations_writes_placed_geotiffs(run: dict, tmp_path: Path) -> None:
    import shutil

    import rasterio

    root = tmp_path / "no_labels"
    shutil.copytree(run["root"], root)
    shutil.rmtree(root / "ANNOTATIONS")
    overrides = [f"ckpt_path={run['ckpt']}", "data=pastis_synthetic", f"data.root={root}", "split=test"]
    summary = predict(compose_cli("predict", [*overrides, f"paths.log_dir={tmp_path}"], tmp_path / "out"))
    first = FIRST_PATCH_ID + N_TRAIN + N_VAL
    assert summary["patch_ids"] == list(range(first, first + N_TEST))
    meta = json.loads((root / "metadata.geojson").read_text())
    feature = next(f for f in meta["features"] if f["properties"]["ID_PATCH"] == first)
    ring = np.asarray(feature["geometry"]["coordinates"][0])
    with rasterio.open(tmp_path / "out" / "maps" / f"PRED_{first}.tif") as src:
        assert src.crs.to_epsg() == 2154 and src.dtypes == ("uint8",) and src.nodata == 255
        assert (src.transform.c, src.transform.f) == (ring[:, 0].min(), ring[:, 1].max())
        assert src.transform.a == pytest.approx((ring[:, 0].max() - ring[:, 0].min()) / src.width)
        np.testing.assert_array_equal(
            src.read(1), np.load(tmp_path / "out" / "predictions" / f"PRED_{first}.npy")
        )  # every pixel of the synthetic patches has a valid date
    cfg = compose_cli("eval", [f"ckpt_path={run['ckpt']}", "data=pastis_synthetic", f"data.root={root}"], tmp_path)
    with pytest.raises(ValueError, match=r"needs labels, but there is no ANNOTATIONS/ folder"):
        evaluate(cfg)
