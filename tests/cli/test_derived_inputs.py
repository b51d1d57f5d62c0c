"""data.derived travels with the weights: train with NDVI as an extra channel, then predict.py and
eval.py compute the same channel from the checkpoint's input record; another command-line value
is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import rasterio
import xarray as xr
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict
from rasterio.crs import CRS

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.checkpoints import apply_input_spec, load_classifier, load_contract, load_run_config
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train

H = W = 24
DATES = np.asarray(["2021-03-01", "2021-04-15", "2021-06-01", "2021-07-15", "2021-09-01"], "datetime64[ns]")


def compose_predict(overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=["trainer=cpu", "progress=false", "quicklook=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


def red_nir_scene(folder: Path) -> None:
    """Float reflectance B04 and B08 (crop: NIR rises in summer; bare soil: flat), a cloud band, labels."""
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True)
    rows, cols = np.mgrid[0:H, 0:W]
    crop = (rows // 3 + cols // 3) % 2 == 0
    nir_curve = np.asarray([0.15, 0.3, 0.5, 0.45, 0.2], np.float32)[:, None, None]
    red = np.where(crop, 0.05, 0.12).astype(np.float32) + rng.normal(0, 0.01, (len(DATES), H, W)).astype(np.float32)
    nir = np.where(crop, nir_curve, 0.18).astype(np.float32) + rng.normal(0, 0.01, (len(DATES), H, W)).astype(
        np.float32
    )
    nir[2, :4, :4] = np.nan  # a hole in the file: no data, masked
    coords = {"t": DATES, "y": 5000240.0 - 10 * (np.arange(H) + 0.5), "x": 500000.0 + 10 * (np.arange(W) + 0.5)}
    ref = ((), 0, {"crs_wkt": CRS.from_epsg(32631).to_wkt()})
    gm = {"grid_mapping": "spatial_ref"}
    xr.Dataset(
        {"B04": (("t", "y", "x"), red, gm), "B08": (("t", "y", "x"), nir, gm), "spatial_ref": ref}, coords=coords
    ).to_netcdf(folder / "S2.nc")
    codes = np.where(crop, 1200, 3000).astype(np.uint16)
    xr.Dataset(
        {"CT": (("y", "x"), codes, gm), "spatial_ref": ref}, coords={k: v for k, v in coords.items() if k != "t"}
    ).to_netcdf(folder / "label.nc")


def cube_overrides(root: Path) -> list[str]:
    return [
        "data=datacube", f"data.root={root}", "data.modalities=[s2]", "~data.sources.s1_asc",
        "data.sources.s2.files=[S2.nc]", "data.sources.s2.bands=[B04,B08]", "data.sources.s2.quality=null",
        "data.labels.file=label.nc", "data.labels.variable=CT", "+data.labels.classes={crop: [1200], bare: [3000]}",
        "data.reference_date=2021-01-01", "data.split.block_size=6", "data.split.n_folds=4", "data.split.buffer=0",
        "data.batch_size=8",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ndvi_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("derived")
    red_nir_scene(base / "cubes" / "site")
    cfg = compose_train(
        [*cube_overrides(base / "cubes"), "data.derived=[ndvi]", "trainer=cpu", "trainer.max_epochs=3", "mlp=linear",
         *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES],
        output_dir=base / "train",
    )  # fmt: skip
    _, objs = train(cfg)
    GlobalHydra.instance().clear()
    return {"base": base, "ckpt": objs["trainer"].checkpoint_callback.best_model_path}


def test_the_checkpoint_records_the_derived_inputs_and_the_model_follows(ndvi_run: dict) -> None:
    contract = load_contract(ndvi_run["ckpt"])
    assert contract is not None and contract["derived"] == ["ndvi"] and contract["bands"] == {"s2": ["B04", "B08"]}
    assert len(contract["norm_stats"]["s2"]["mean"]) == 3  # B04, B08, NDVI
    assert -1 < contract["norm_stats"]["s2"]["mean"][2] < 1
    model = load_classifier(load_run_config(ndvi_run["ckpt"]), ndvi_run["ckpt"])
    assert model.net.in_channels == {"s2": 3}


def test_predict_computes_the_checkpoint_derived_inputs(
    ndvi_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt, base = ndvi_run["ckpt"], ndvi_run["base"]
    run = predict(compose_predict([f"ckpt_path={ckpt}", "tile_size=10"], tmp_path / "run"), overrides=[])
    with rasterio.open(run["scenes"][0]["files"]["class_map"]) as src:
        run_map = src.read(1)
    assert set(np.unique(run_map).tolist()) <= {1, 2}  # every pixel predicted (the NaN hole is masked on one date)
    # The preset data=datacube says data.derived: []; the checkpoint's [ndvi] is computed instead.
    line = [f"ckpt_path={ckpt}", *cube_overrides(base / "cubes"), "tile_size=7"]
    with caplog.at_level(logging.INFO, logger="mtan_s1s2.checkpoints"):
        out = predict(compose_predict(line, tmp_path / "preset"), overrides=line)
    assert "Derived inputs from the checkpoint: data.derived=['ndvi']" in caplog.text
    with rasterio.open(out["scenes"][0]["files"]["class_map"]) as src:
        np.testing.assert_array_equal(src.read(1), run_map)


def test_a_command_line_derived_input_contradicting_the_checkpoint_is_refused(ndvi_run: dict, tmp_path: Path) -> None:
    ckpt, base = ndvi_run["ckpt"], ndvi_run["base"]
    for value in ("[ndwi]", "[]"):
        line = [
            f"ckpt_path={ckpt}",
            *cube_overrides(base / "cubes"),
            f"data.derived={value}",
            "radiometry_override=true",
        ]
        with pytest.raises(
            ValueError, match=r"data\.derived=.* but the model was trained with data\.derived=\['ndvi'\]"
        ):
            predict(compose_predict(line, tmp_path / value), overrides=line)


def test_apply_input_spec_reads_older_records_as_no_derived_inputs() -> None:
    data = OmegaConf.create({"_target_": "x", "derived": ["ndvi"], "radiometry": {}})
    older = {"radiometry": {}, "norm_stats": None}  # an input record written before derived inputs existed
    assert list(apply_input_spec(data, older).derived) == []
    with pytest.raises(ValueError, match=r"data.derived=\['ndvi'\] but the model was trained with data.derived=\[\]"):
        apply_input_spec(data, older, overrides=["data.derived=[ndvi]"])
    assert list(apply_input_spec(data, {**older, "derived": ["ndvi"]}, overrides=["data.derived=[NDVI]"]).derived) == [
        "ndvi"
    ]
    assert list(apply_input_spec(data, None).derived) == ["ndvi"]  # no record at all: the data config's
