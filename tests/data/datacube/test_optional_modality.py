"""Optional modalities (``data.sources.<m>.optional``): real WorldCereal cubes, one scene without its 10 m S2 file."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from hydra.core.global_hydra import GlobalHydra

from cli.test_eval_predict import compose_cli
from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from fixtures.scene_files import MINI, MINI_SCENES
from fixtures.scene_files import MINI_LABELS as LABELS
from mtan_s1s2.baselines.features import date_grid, sample_features
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.augment import SITSAugment
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.date_grid import interpolate_to_grid
from mtan_s1s2.data.geotiff.scenes import open_scene as open_geotiff_scene
from mtan_s1s2.data.geotiff.writer import write_scene_geotiffs
from mtan_s1s2.data.scene.scene import AbsentSeries

S2_20 = ["B05", "B06", "B07", "B8A", "B11", "B12"]
SOURCES = {
    "s2": {"files": ["S2_L2A_20m_*.nc"], "bands": S2_20, "quality": {"variable": "SCL"}},
    "s2_10m": {
        "files": ["S2_L2A_10m_*.nc", "S2_L2A_20m_*.nc"],
        "bands": ["B02", "B03", "B04", "B08"],
        "quality": {"variable": "SCL"},
        "optional": True,
    },
    "s1_asc": {"files": ["S1_GRD-ASCENDING_*.nc"], "bands": ["VV", "VH"]},
}
WITH, WITHOUT = MINI_SCENES[1], MINI_SCENES[0]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real patches; the second one's S2 10 m file is left out, as in WorldCereal's patch 000028085BF08E7E."""
    base = tmp_path_factory.mktemp("optional")
    shutil.copytree(MINI / WITH, base / WITH)
    shutil.copytree(MINI / WITHOUT, base / WITHOUT, ignore=shutil.ignore_patterns("S2_L2A_10m_*"))
    return base


def datamodule(root: Path, **kwargs) -> DatacubeDataModule:
    args = dict(
        root=str(root), scenes=[WITH, WITHOUT], modalities=["s2", "s2_10m", "s1_asc"], sources=SOURCES,
        labels=LABELS, reference_date="attr:start_date",
        split={"by": "blocks", "block_size": 8, "n_folds": 3, "fold": 1}, grid={"resolution": 10}, batch_size=2,
    )  # fmt: skip
    args.update(kwargs)
    return DatacubeDataModule(**args)


def test_a_scene_without_the_files_has_no_observation_of_the_modality(root: Path) -> None:
    dm = datamodule(root)
    assert dm.in_channels == {"s2": 6, "s2_10m": 4, "s1_asc": 2}
    present, absent = (next(sc for sc in dm.scenes if sc.name == n) for n in (WITH, WITHOUT))
    assert isinstance(absent.series["s2_10m"], AbsentSeries) and not present.series["s2_10m"].absent
    assert "absent from this scene (no file matches 'S2_L2A_10m_*.nc')" in absent.describe()
    data = absent.read()
    assert data["s2_10m"]["x"].shape == (0, 4, 24, 24) and data["s2_10m"]["mask"].shape == (0, 24, 24)
    assert data["s2_10m"]["doy"].shape == (0,) and data["s2"]["x"].shape[0] == 16  # its 20 m bands are read
    full = present.read()
    s2, s10 = full["s2"], full["s2_10m"]
    # The 10 m bands share the 20 m file's dates and SCL mask, at their own resolution.
    np.testing.assert_array_equal(s10["doy"], s2["doy"])
    np.testing.assert_array_equal(s10["mask"], s2["mask"])
    b04 = s10["x"][:, 2][s10["mask"]]
    assert 0.0 < np.median(b04) < 0.3  # reflectance (CF scale 1e-4), not DN
    assert not np.array_equal(s10["x"][:, 2, ::2, ::2], s10["x"][:, 2, 1::2, 1::2])  # 10 m detail, not upsampled
    # The checkpoint's radiometry comes from the scenes that have the files.
    assert dm.input_radiometry()["s2_10m"].scale == pytest.approx(1e-4)
    # Windows of the scene without the file hold no date of it; no NaN anywhere.
    ds = dm.raw_dataset("train")
    kinds = {dm.scenes[ds.items[i][0]].name: ds[i]["s2_10m"]["x"].shape[0] for i in range(len(ds))}
    assert kinds == {WITH: 16, WITHOUT: 0}
    assert all(torch.isfinite(ds[i][m]["x"]).all() for i in range(len(ds)) for m in dm.in_channels)


def test_geotiffs_written_from_a_scene_without_the_modality_read_it_back_as_absent(root: Path, tmp_path: Path) -> None:
    scene = next(sc for sc in datamodule(root).scenes if sc.name == WITHOUT)
    spec = write_scene_geotiffs(scene, tmp_path / WITHOUT, "stack")
    bands = ["B02", "B03", "B04", "B08"]
    assert spec["sources"]["s2_10m"] == {"files": "s2_10m_2*.tif", "bands": bands, "optional": True}
    assert not list((tmp_path / WITHOUT).glob("s2_10m*"))
    back = open_geotiff_scene(tmp_path / WITHOUT, ["s2", "s2_10m", "s1_asc"], spec["sources"], "2018-08-01")
    assert back.series["s2_10m"].absent and back.read()["s2_10m"]["x"].shape == (0, 4, 24, 24)
    np.testing.assert_allclose(back.read()["s2"]["x"], scene.read()["s2"]["x"])


def test_missing_files_stop_the_run_unless_the_modality_is_optional(root: Path) -> None:
    required = {**SOURCES, "s2_10m": {k: v for k, v in SOURCES["s2_10m"].items() if k != "optional"}}
    with pytest.raises(ValueError, match=r"data\.sources\.s2_10m\.files: no file matches 'S2_L2A_10m_\*\.nc'"):
        datamodule(root, sources=required)
    with pytest.raises(ValueError, match=r"data\.sources\.s2_10m\.optional must be true or false, got 'yes'"):
        datamodule(root, sources={**SOURCES, "s2_10m": {**SOURCES["s2_10m"], "optional": "yes"}})
    # A scene with the files of no modality is an error, not a scene of empty series.
    with pytest.raises(ValueError, match=rf"Scene {WITHOUT} \(.*\) has the files of none of its modalities"):
        datamodule(root, modalities=["s2_10m"])
    # Optional does not hide a wrong band in a scene that has the files.
    bad = {**SOURCES, "s2_10m": {**SOURCES["s2_10m"], "bands": ["B02", "B8"]}}
    with pytest.raises(ValueError, match=r"band 'B8' is in none of"):
        datamodule(root, sources=bad)


def test_date_grids_augmentation_and_features_take_a_modality_without_dates() -> None:
    x, doy = torch.zeros(2, 0, 3, 5), torch.zeros(2, 0, dtype=torch.float64)
    mask = torch.zeros(2, 0, 5, dtype=torch.bool)
    values, has_data, gap = interpolate_to_grid(x, doy, mask, torch.tensor([0.0, 10.0, 20.0], dtype=torch.float64))
    assert values.shape == (2, 3, 3, 5) and not values.any() and not has_data.any() and math.isinf(gap.max())
    all_valid, no_date = torch.ones(2, 3, 4, 4, dtype=torch.bool), torch.zeros(2, 0, 4, 4, dtype=torch.bool)
    batch = {
        "s2": {"x": torch.ones(2, 3, 2, 4, 4), "doy": torch.tensor([[0.0, 10, 20]] * 2), "mask": all_valid},
        "s2_10m": {"x": torch.zeros(2, 0, 4, 4, 4), "doy": torch.zeros(2, 0), "mask": no_date},
    }
    out = SITSAugment(temporal_dropout=0.5, date_shift_days=5.0, noise_std=0.1)(batch)
    assert out["s2_10m"]["mask"].shape == (2, 0, 4, 4) and out["s2"]["mask"].any(dim=1).all()
    present = {**batch, "s2_10m": {**batch["s2"], "x": torch.full((2, 3, 4, 4, 4), 0.2)}}
    grid = date_grid([present], ["s2", "s2_10m"], mode="interpolated", step_days=10.0)
    features = sample_features(batch, 0, grid)  # the grid of scenes with data, a sample without
    assert features.shape == (16, 3 * 2 + 3 * 4)
    assert np.all(features[:, :6] == 1.0) and np.isnan(features[:, 6:]).all()  # NaN: missing, for the forest


@pytest.mark.parametrize("model", ["experiment=real", "model=tempcnn"])
def test_train_on_scenes_with_and_without_the_modality(root: Path, tmp_path: Path, model: str) -> None:
    overrides = [
        "data=worldcereal", f"data.root={root}", f"data.scenes=[{WITH},{WITHOUT}]", "data.split.block_size=8",
        "data.split.n_folds=3", "data.batch_size=2", "data.modalities=[s2,s2_10m,s1_asc]",
        "data.grid.label_shift=[0,0]", model, "trainer=cpu", "trainer.max_epochs=1", *QUIET_OVERRIDES,
    ]  # fmt: skip
    if model == "experiment=real":
        overrides += [*TINY_MODEL_OVERRIDES, "model.checkpoint_ensemble=1"]
    metrics, objs = train(compose_train(overrides, output_dir=tmp_path / "train"))
    GlobalHydra.instance().clear()
    assert objs["datamodule"].in_channels == {"s2": 6, "s2_10m": 4, "s1_asc": 2}
    assert 0.0 < metrics["test/OA"] <= 1.0 and math.isfinite(metrics["test/loss"])
    # The map of the scene without the 10 m file: every pixel classified (it has S2 20 m and S1).
    ckpt = objs["trainer"].checkpoint_callback.best_model_path
    args = [f"ckpt_path={ckpt}", f"scene={WITHOUT}", "tile_size=12", "progress=false"]
    summary = predict(compose_cli("predict", args, tmp_path / "predict"), overrides=[])
    GlobalHydra.instance().clear()
    with rasterio.open(summary["scenes"][0]["files"]["class_map"]) as src:
        classes = src.read(1)
    assert classes.shape == (24, 24) and set(np.unique(classes)) <= {1, 2, 3, 4}
