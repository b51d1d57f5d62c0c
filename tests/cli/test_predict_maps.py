"""Acceptance: one model trained with data=datacube predicts the same maps from a datacube, a
date-major GeoTIFF stack without georeferencing and per-date GeoTIFFs; COG outputs checked."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from affine import Affine
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from fixtures.scene_files import MINI, MINI_SCENES
from mtan_s1s2.checkpoints import load_contract
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.geotiff.writer import write_scene_geotiffs
from mtan_s1s2.data.normalization import check_norm_stats
from mtan_s1s2.inference.scene import classify_tile
from mtan_s1s2.inference.sweep import summarize_predictions
from mtan_s1s2.utils.precision import resolve_precision

REPO = Path(__file__).resolve().parents[2]
DATA = [
    "data=worldcereal", f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]",
    "data.split.block_size=8", "data.split.n_folds=3", "data.batch_size=4",
]  # fmt: skip


def compose_predict(overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=["trainer=cpu", "progress=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("datacube_run")
    cfg = compose_train(
        [*DATA, "trainer=cpu", "trainer.max_epochs=1", "mlp=channels_last", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES],
        output_dir=base / "train",
    )
    metrics, objs = train(cfg)
    GlobalHydra.instance().clear()
    return {
        "dir": base / "train",
        "ckpt": objs["trainer"].checkpoint_callback.best_model_path,
        "dm": objs["datamodule"],
    }


def test_training_run_records_split_and_data_contract(trained: dict) -> None:
    rows = list(csv.DictReader(open(trained["dir"] / "split.csv")))
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    contract = load_contract(trained["ckpt"])
    assert contract["bands"]["s2"] == ["B05", "B06", "B07", "B8A", "B11", "B12"]
    assert contract["class_names"][1:] == ["maize", "grassland", "winter_cereals", "potatoes"]
    assert contract["bands"]["s2_10m"] == ["B02", "B03", "B04", "B08"]
    assert set(contract["norm_stats"]) == {"s2", "s2_10m", "s1_asc"}


def test_datacube_stack_and_per_date_geotiffs_give_the_same_maps(trained: dict, tmp_path: Path) -> None:
    scene_name = MINI_SCENES[0]
    summary = predict(
        compose_predict([f"ckpt_path={trained['ckpt']}", f"scene={scene_name}", "tile_size=10"], tmp_path / "cube")
    )
    (record,) = summary["scenes"]
    cube_map = Path(record["files"]["class_map"])
    assert cube_map == tmp_path / "cube" / scene_name / "class_map.tif"
    scene = trained["dm"].scene(scene_name)
    with rasterio.open(cube_map) as src:
        assert src.crs.to_epsg() == 32631 and src.transform == scene.grid.transform
        assert src.transform == Affine(10, 0, 574840, 0, -10, 5622240)  # the label raster's 10 m lattice
        assert src.dtypes == ("uint8",) and src.nodata == 255 and src.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
        cube = src.read(1)
    # The values are the model's argmax on the whole scene, normalised with the training statistics.
    model = torch.load(trained["ckpt"], map_location="cpu", weights_only=False)
    from mtan_s1s2.checkpoints import load_classifier, load_run_config

    net = load_classifier(load_run_config(trained["ckpt"]), trained["ckpt"])
    stats = check_norm_stats(load_contract(trained["ckpt"])["norm_stats"], trained["dm"].in_channels)
    expected, _ = classify_tile(net, scene.read(count=False), stats, 0, torch.device("cpu"))
    np.testing.assert_array_equal(cube, expected)
    assert set(np.unique(cube)) <= {1, 2, 3, 4, 255} and model["hyper_parameters"]["data_contract"]

    outputs = {}
    for layout, georef in (("stack", False), ("files", True)):
        root = tmp_path / f"geotiff_{layout}"
        spec = write_scene_geotiffs(scene, root / scene_name, layout, georeferenced=georef)
        cfg = compose_predict(
            [f"ckpt_path={trained['ckpt']}", "data=geotiff", f"data.root={root}", "data.reference_date=2018-08-01",
             "data.modalities=[s2,s2_10m,s1_asc]", "tile_size=7", "radiometry_override=true"],
            tmp_path / f"pred_{layout}",
        )  # fmt: skip
        with open_dict(cfg):
            cfg.data.sources = spec["sources"]
            cfg.data.radiometry = spec["radiometry"]
        if georef:
            out = predict(cfg)
        else:
            with pytest.warns(UserWarning, match=r"not georeferenced \(no CRS, identity transform\)"):
                out = predict(cfg)
        with rasterio.open(out["scenes"][0]["files"]["class_map"]) as src:
            outputs[layout] = (src.read(1), src.crs, src.transform)
    stack_map, stack_crs, stack_t = outputs["stack"]
    assert stack_crs is None and stack_t == Affine.identity()
    np.testing.assert_array_equal(stack_map, cube)
    files_map, files_crs, files_t = outputs["files"]
    assert files_crs.to_epsg() == 32631 and files_t == scene.grid.transform
    np.testing.assert_array_equal(files_map, cube)


REFERENCE = ["precision=32-true", "mlp=linear", "compile=false", "skip_empty=false", "chunk_pixels=null", "prefetch=0"]
"""The reference map: fp32, eager, the linear backend, whole tiles read between forward passes."""


def read_maps(record: dict) -> tuple[np.ndarray, np.ndarray]:
    with rasterio.open(record["files"]["class_map"]) as src:
        classes = src.read(1)
    with rasterio.open(record["files"]["probabilities"]) as src:
        return classes, src.read().astype(int)  # percent


def test_the_fast_default_gives_the_fp32_eager_linear_map(trained: dict, tmp_path: Path) -> None:
    """docs/prediction.md, "Speed": in fp32 the same classes and probabilities within 1 percent."""
    scene_name = MINI_SCENES[0]
    scene = trained["dm"].scene(scene_name)
    root = tmp_path / "geotiff"
    spec = write_scene_geotiffs(scene, root / scene_name, "files", georeferenced=True)
    geotiff = [
        "data=geotiff", f"data.root={root}", "data.reference_date=2018-08-01", "data.modalities=[s2,s2_10m,s1_asc]",
        "radiometry_override=true",
    ]  # fmt: skip
    runs = {
        "cube_reference": REFERENCE, "cube_default": [], "geotiff_reference": [*geotiff, *REFERENCE],
        "geotiff_default": geotiff,
        # the backends timed (tune_min_run_s=0); conv forced, small chunks, one tile read ahead
        "cube_timed": ["tune_min_run_s=0", "compile=false"],
        "cube_conv": ["mlp=conv", "chunk_pixels=37", "prefetch=1"],
    }  # fmt: skip
    maps, summaries = {}, {}
    for name, flags in runs.items():
        cfg = compose_predict(
            [f"ckpt_path={trained['ckpt']}", f"scene={scene_name}", "tile_size=24", "probabilities=true",
             "quicklook=false", f"decision_cache={tmp_path / 'decisions.json'}", *flags],
            tmp_path / name,
        )  # fmt: skip
        if name.startswith("geotiff"):
            with open_dict(cfg):
                cfg.data.sources = spec["sources"]
                cfg.data.radiometry = spec["radiometry"]
        summaries[name] = predict(cfg)
        maps[name] = read_maps(summaries[name]["scenes"][0])
    ref_classes, ref_proba = maps["cube_reference"]
    valid = ref_classes != 255
    assert valid.mean() > 0.5 and np.ptp(ref_proba[:, valid]) >= 3  # probabilities vary over the scene
    for name, (classes, proba) in maps.items():
        np.testing.assert_array_equal(classes == 255, ~valid)
        np.testing.assert_array_equal(classes, ref_classes, err_msg=name)
        assert np.abs(proba - ref_proba)[:, valid].max() <= 1, name
    default = summaries["cube_default"]
    inference = default["inference"]
    expected, _ = resolve_precision("auto", "cpu")
    assert inference["precision"] == expected and inference["precision_reason"].startswith("auto: ")
    assert inference["backend"] == "channels_last" and "others not timed" in inference["backend_reason"]
    assert not inference["compiled"] and "not worth compiling" in inference["compile_reason"]
    assert inference["skip_empty"] and inference["chunk_pixels"] == 4096 and inference["prefetch"] == 2
    timed = summaries["cube_timed"]["inference"]
    assert set(timed["backend_timings_ms"]) == {"linear", "conv", "channels_last"}
    assert timed["backend"] == min(timed["backend_timings_ms"], key=timed["backend_timings_ms"].get)
    assert summaries["cube_conv"]["inference"]["backend_reason"] == "mlp=conv on the command line"
    (record,) = default["scenes"]
    assert (
        record["n_computed"] == int(valid.sum())
        and summaries["cube_reference"]["scenes"][0]["n_computed"] == valid.size
    )
    for speed in (record["speed"], default["speed"]):
        assert speed["pixels_per_s"] == pytest.approx(valid.size / record["predict_s"])
        assert speed["flops_per_pixel"] > 1e4 and 0 < speed["fraction_of_peak"] < 1
        assert speed["achieved_gflop_per_s"] == pytest.approx(
            speed["fraction_of_peak"] * speed["gemm_peak_gflop_per_s"]
        )


def test_prediction_summary_of_a_sweep(trained: dict, tmp_path: Path) -> None:
    for job, scene in enumerate(MINI_SCENES):
        predict(
            compose_predict([f"ckpt_path={trained['ckpt']}", f"scene={scene}", "quicklook=false"], tmp_path / str(job))
        )
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "predict_summary.json").write_text(json.dumps({"status": "failed", "scene": "x", "error": "E"}))
    rows = summarize_predictions(tmp_path)
    assert [(r["job"], r.get("scene"), r["status"]) for r in rows] == [
        ("0", MINI_SCENES[0], "completed"), ("1", MINI_SCENES[1], "completed"), ("2", "x", "failed"),
    ]  # fmt: skip
    assert (tmp_path / "scenes.csv").read_text().count("completed") == 2


@pytest.mark.slow
def test_predict_multirun_one_job_per_scene(trained: dict, tmp_path: Path) -> None:
    cmd = [sys.executable, "predict.py", "-m", f"ckpt_path={trained['ckpt']}", f"scene={','.join(MINI_SCENES)}",
           f"paths.log_dir={tmp_path}", "progress=false", "trainer=cpu"]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (tmp_path / "predict" / "multiruns").iterdir()
    rows = list(csv.DictReader(open(sweep / "scenes.csv")))
    assert sorted(r["scene"] for r in rows) == sorted(MINI_SCENES) and {r["status"] for r in rows} == {"completed"}
    for r in rows:
        assert Path(r["class_map"]).is_file() and Path(r["class_map"]).parent.name == r["scene"]
