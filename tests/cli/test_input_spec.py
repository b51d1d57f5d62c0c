"""The checkpoint carries the input definition: a model trained on a float NDVI datacube
(scale 1) maps the same values stored as a GeoTIFF stack with ``data=geotiff``, whose preset
says S2 ``scale: 1.0e-4``, exactly as it maps the datacube."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
import xarray as xr
from affine import Affine
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict
from rasterio.crs import CRS

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.checkpoints import load_contract, read_checkpoint
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train

H = W = 24
DATES = np.asarray(["2021-03-01", "2021-04-15", "2021-06-01", "2021-07-15", "2021-09-01"], "datetime64[ns]")
X0, Y0 = 500000.0, 5000240.0


def ndvi_scene(folder: Path) -> np.ndarray:
    """A float32 NDVI cube (crop: a season's curve; bare soil: about 0, with exact zeros) and its labels."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    rows, cols = np.mgrid[0:H, 0:W]
    crop = (rows // 3 + cols // 3) % 2 == 0  # 3 px checkerboard: both classes in every block
    curve = np.asarray([0.2, 0.45, 0.85, 0.7, 0.3], np.float32)[:, None, None]
    ndvi = np.where(crop, curve, 0.05).astype(np.float32) + rng.normal(0, 0.03, (len(DATES), H, W)).astype(np.float32)
    ndvi[:, ~crop & (rows % 2 == 0)] = 0.0  # bare soil at exactly 0: valid values
    coords = {"t": DATES, "y": Y0 - 10 * (np.arange(H) + 0.5), "x": X0 + 10 * (np.arange(W) + 0.5)}
    ref = ((), 0, {"crs_wkt": CRS.from_epsg(32631).to_wkt()})
    xr.Dataset(
        {"NDVI": (("t", "y", "x"), ndvi, {"grid_mapping": "spatial_ref"}), "spatial_ref": ref}, coords=coords
    ).to_netcdf(folder / "S2_NDVI.nc")
    codes = np.where(crop, 1200, 3000).astype(np.uint16)
    xr.Dataset(
        {"CT": (("y", "x"), codes, {"grid_mapping": "spatial_ref"}), "spatial_ref": ref},
        coords={k: v for k, v in coords.items() if k != "t"},
    ).to_netcdf(folder / "label.nc")
    return ndvi


def ndvi_stack(folder: Path, ndvi: np.ndarray) -> None:
    """The same NDVI values as a date-major float32 GeoTIFF stack and its dates file."""
    folder.mkdir(parents=True)
    profile = dict(driver="GTiff", width=W, height=H, count=len(DATES), dtype="float32",
                   crs=CRS.from_epsg(32631), transform=Affine(10, 0, X0, 0, -10, Y0))  # fmt: skip
    with rasterio.open(folder / "S2_stack.tif", "w", **profile) as dst:
        dst.write(ndvi)
    (folder / "S2_dates.txt").write_text("\n".join(str(d)[:10] for d in DATES) + "\n")


CUBE = [
    "data=datacube", "data.modalities=[s2]", "~data.sources.s1_asc", "data.sources.s2.files=[S2_NDVI.nc]",
    "data.sources.s2.bands=[NDVI]", "data.sources.s2.quality=null", "data.labels.file=label.nc",
    "data.labels.variable=CT", "+data.labels.classes={crop: [1200], bare: [3000]}", "data.reference_date=2021-01-01",
    "data.split.block_size=6", "data.split.n_folds=4", "data.split.buffer=0", "data.batch_size=8",
]  # fmt: skip


def compose_predict(overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=["trainer=cpu", "progress=false", "quicklook=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


def geotiff_overrides(root: Path) -> list[str]:
    return [
        "data=geotiff", f"data.root={root}", "data.modalities=[s2]", "~data.sources.s1_asc",
        "data.sources.s2.bands=[NDVI]", "data.reference_date=2021-01-01", "tile_size=10",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ndvi_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("ndvi")
    ndvi = ndvi_scene(base / "cubes" / "site")
    ndvi_stack(base / "tifs" / "site", ndvi)
    cfg = compose_train(
        [*CUBE, f"data.root={base / 'cubes'}", "trainer=cpu", "trainer.max_epochs=12", "mlp=linear",
         "model.optimizer.lr=0.01", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES],
        output_dir=base / "train",
    )  # fmt: skip
    _, objs = train(cfg)
    GlobalHydra.instance().clear()
    return {"base": base, "ckpt": objs["trainer"].checkpoint_callback.best_model_path}


def test_the_checkpoint_records_the_input_radiometry(ndvi_run: dict) -> None:
    contract = load_contract(ndvi_run["ckpt"])  # read with torch.load(weights_only=True)
    assert contract is not None and contract["bands"] == {"s2": ["NDVI"]}
    s2 = contract["radiometry"]["s2"]
    assert s2["units"] == "reflectance" and s2["scale"] == 1.0 and s2["offset"] == 0.0 and s2["nodata"] == []
    assert s2["dn_zero_nodata"] is True and s2["nodata_rule"] == "any"  # float values: their zeros are data
    assert set(contract["norm_stats"]["s2"]) >= {"mean", "std"}


def test_geotiff_preset_predicts_with_the_checkpoint_radiometry(
    ndvi_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt, base = ndvi_run["ckpt"], ndvi_run["base"]
    cube = predict(compose_predict([f"ckpt_path={ckpt}"], tmp_path / "cube"), overrides=[])
    with rasterio.open(cube["scenes"][0]["files"]["class_map"]) as src:
        cube_map = src.read(1)
    assert set(np.unique(cube_map)) == {1, 2}  # both classes: the model learnt NDVI
    cfg = compose_predict([f"ckpt_path={ckpt}", *geotiff_overrides(base / "tifs")], tmp_path / "tif")
    assert cfg.data.radiometry.s2.scale == pytest.approx(1e-4)  # what the preset says
    with caplog.at_level(logging.INFO, logger="mtan_s1s2.checkpoints"):
        out = predict(cfg, overrides=[])
    assert "data.radiometry.s2.scale=0.0001 but the model was trained on 1.0" in caplog.text
    with rasterio.open(out["scenes"][0]["files"]["class_map"]) as src:
        np.testing.assert_array_equal(src.read(1), cube_map)


def test_a_command_line_radiometry_contradicting_the_checkpoint_is_refused(ndvi_run: dict, tmp_path: Path) -> None:
    ckpt, base = ndvi_run["ckpt"], ndvi_run["base"]
    line = [f"ckpt_path={ckpt}", *geotiff_overrides(base / "tifs"), "data.radiometry.s2.scale=0.0001"]
    with pytest.raises(ValueError, match=r"data\.radiometry\.s2\.scale=0\.0001 but the model was trained on 1\.0.*"
                                         r"radiometry_override=true"):  # fmt: skip
        predict(compose_predict(line, tmp_path / "refused"), overrides=line)
    confirmed = [*line, "radiometry_override=true"]
    out = predict(compose_predict(confirmed, tmp_path / "confirmed"), overrides=confirmed)
    with rasterio.open(out["scenes"][0]["files"]["class_map"]) as src:
        classes = set(np.unique(src.read(1)).tolist()) - {255}
    assert len(classes) == 1  # NDVI x 1e-4: every pixel looks alike to the model (and its zeros become DN 0 fills)


def test_an_old_checkpoint_without_the_record_works_with_a_warning(
    ndvi_run: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = read_checkpoint(ndvi_run["ckpt"])
    del checkpoint["hyper_parameters"]["data_contract"]["radiometry"]
    old = Path(ndvi_run["ckpt"]).with_name("old.ckpt")
    torch.save(checkpoint, old)
    with caplog.at_level(logging.WARNING, logger="mtan_s1s2.checkpoints"):
        out = predict(compose_predict([f"ckpt_path={old}"], tmp_path / "old"), overrides=[])
    assert "records no input radiometry" in caplog.text and out["status"] == "completed"
