"""train.py, eval.py and predict.py with parcels: the connected regions of the WorldCereal label raster.

A one-epoch run on two cropped real WorldCereal patches with ``data.split.parcels={source:
components}`` reports parcel metrics beside the pixel metrics (``summary.json``, the parcel
report files), ``eval.py`` reproduces them and ``predict.py`` writes the parcel map.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rasterio
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from cli.test_eval_predict import compose_cli
from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from fixtures.scene_files import MINI, MINI_SCENES
from mtan_s1s2.cli.eval import evaluate
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train
from mtan_s1s2.parcel_metrics import PARCEL_PER_CLASS_FILE, PARCELS_FILE

DATA = [
    "data=worldcereal", f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]",
    "data.split.block_size=8", "data.split.n_folds=3", "data.batch_size=4", "data.split.parcels={source:components}",
]  # fmt: skip
PARCEL_METRICS = ("test_parcel/OA", "test_parcel/F1", "test_parcel/mIoU", "test_parcel/kappa", "test_parcel/n_parcels")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("parcels_run")
    cfg = compose_train(
        [*DATA, "trainer=cpu", "trainer.max_epochs=1", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES],
        output_dir=base / "train",
    )
    metrics, objs = train(cfg)
    GlobalHydra.instance().clear()
    return {"dir": base / "train", "ckpt": objs["trainer"].checkpoint_callback.best_model_path, "metrics": metrics}


def test_train_reports_parcel_metrics_beside_pixel_metrics(run: dict) -> None:
    summary = json.loads((run["dir"] / "summary.json").read_text())
    for key in PARCEL_METRICS:
        assert summary["metrics"][key] == pytest.approx(run["metrics"][key]), key
    assert 0.0 <= summary["metrics"]["test_parcel/OA"] <= 1.0
    parcels = list(csv.DictReader(open(run["dir"] / PARCELS_FILE)))
    scored = [p for p in parcels if p["reference_name"] != "unlabelled"]
    assert len(scored) == summary["metrics"]["test_parcel/n_parcels"] > 0
    right = sum(p["reference"] == p["predicted"] for p in scored)
    assert summary["metrics"]["test_parcel/OA"] == pytest.approx(right / len(scored))
    assert all(float(p["reference_share"]) == 1.0 for p in scored)  # regions of one label code are of one class
    assert all(p["parcel"].startswith("scene ") for p in parcels)
    per_class = list(csv.DictReader(open(run["dir"] / PARCEL_PER_CLASS_FILE)))
    assert sum(int(r["support_parcels"]) for r in per_class) == len(scored)


def test_eval_reproduces_the_parcel_metrics(run: dict, tmp_path: Path) -> None:
    metrics, _ = evaluate(compose_cli("eval", [f"ckpt_path={run['ckpt']}"], tmp_path), overrides=[])
    GlobalHydra.instance().clear()
    for key in PARCEL_METRICS:
        assert metrics[key] == pytest.approx(run["metrics"][key], abs=1e-5), key
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["metrics"]["test_parcel/OA"] == pytest.approx(run["metrics"]["test_parcel/OA"], abs=1e-5)
    assert (tmp_path / PARCEL_PER_CLASS_FILE).read_text() == (run["dir"] / PARCEL_PER_CLASS_FILE).read_text()


def test_predict_writes_the_parcel_map_of_the_label_regions(run: dict, tmp_path: Path) -> None:
    overrides = [f"ckpt_path={run['ckpt']}", f"scene={MINI_SCENES[0]}", "tile_size=10", "progress=false"]
    summary = predict(compose_cli("predict", overrides, tmp_path), overrides=[])
    GlobalHydra.instance().clear()
    (record,) = summary["scenes"]
    files = record["files"]
    table = pd.read_csv(files["parcels"])
    assert record["n_parcels"] == len(table) > 1
    with rasterio.open(files["parcel_class_map"]) as src:
        parcel_map = src.read(1)
    # Every pixel of a parcel has the parcel's class (the regions cross the 10 px tiles).
    from mtan_s1s2.data.parcels import connected_components

    with rasterio.open(files["class_map"]) as src:
        assert src.shape == parcel_map.shape
    import xarray as xr

    stored = xr.open_dataset(next((MINI / MINI_SCENES[0]).glob("OUTPUT_POLY-110_10m_*.nc")))["CT"].values
    # the preset moves the label rasters (and the parcels made of them) rows south: data.grid.label_shift
    rows, cols = OmegaConf.load(run["dir"] / "config.yaml").data.grid.label_shift
    assert (rows, cols) == (2, 0)
    label = np.full_like(stored, np.nan)
    label[rows:] = stored[:-rows]
    regions = connected_components(label, connectivity=4)
    lookup = dict(zip(table["parcel"].tolist(), table["predicted"].tolist(), strict=True))
    for region in np.unique(regions[regions > 0]).tolist():
        values = np.unique(parcel_map[regions == region])
        assert values.tolist() == [lookup.get(region, 255)], region
    assert (parcel_map[regions == 0] == 255).all()
