"""Scene-wide prediction: tiles give the whole-scene map exactly, memory does not grow with the scene."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch

from conftest import small_net_kwargs
from fixtures.scene_files import SOURCES, make_scene, times, write_cube
from mtan_s1s2.data.datacube.scenes import open_scene
from mtan_s1s2.data.normalization import compute_norm_stats
from mtan_s1s2.export.cog import NODATA
from mtan_s1s2.inference.scene import PredictOptions, classify_tile, predict_scene, whole_tiles_for_spatial_context
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.tempcnn import TempCNN

NAMES = ("unlabelled", "maize", "wheat", "grass")


def net() -> MTANClassifier:
    torch.manual_seed(0)
    return MTANClassifier({"s2": 3, "s1_asc": 2}, 4, mlp="channels_last", **small_net_kwargs()).eval()


def scene(folder: Path, H: int = 16, W: int = 16, **kwargs):
    make_scene(folder, H=H, W=W, **kwargs)
    return open_scene(folder, ["s2", "s1_asc"], SOURCES, "2020-01-01")


def test_tiled_map_equals_the_whole_scene_map_exactly(tmp_path: Path) -> None:
    sc = scene(tmp_path / "a", H=20, W=18)
    model = net()
    whole_classes, whole_proba = classify_tile(model, sc.read(), None, 0, torch.device("cpu"))
    out = {}
    for tile in (7, 64):
        opts = PredictOptions(tile_size=tile, probabilities=True, quicklook=False, device="cpu", progress=False)
        record = predict_scene(model, sc, tmp_path / f"t{tile}", NAMES, 0, None, opts)
        with rasterio.open(record["files"]["class_map"]) as src:
            out[tile] = src.read(1)
        assert record["n_tiles"] == (9 if tile == 7 else 1)
    np.testing.assert_array_equal(out[7], out[64])
    np.testing.assert_array_equal(out[7], whole_classes)
    assert set(np.unique(out[7])) <= {1, 2, 3}  # class 0 (ignore_index) is never predicted
    with (
        rasterio.open(tmp_path / "t7" / "probabilities.tif") as a,
        rasterio.open(tmp_path / "t64" / "probabilities.tif") as b,
    ):
        assert np.abs(a.read().astype(int) - b.read().astype(int)).max() <= 1  # percent, rounded
    np.testing.assert_allclose(whole_proba[1:].sum(0), 1.0, atol=1e-5)


def test_nodata_where_no_modality_is_valid_and_no_valid_scene_fails_first(tmp_path: Path) -> None:
    model = MTANClassifier({"s2": 3}, 4, **small_net_kwargs()).eval()
    scl = np.full((5, 8, 8), 4, np.uint8)
    scl[:, :2, :2] = 9  # top-left 40 m x 40 m always cloudy
    for name, cloud in (("some", scl), ("all", np.full((5, 8, 8), 9, np.uint8))):
        make_scene(tmp_path / name)
        write_cube(tmp_path / name / "S2_20m.nc", {"B11": np.full((5, 8, 8), 900, np.uint16), "SCL": cloud}, times(5),
                   res=20.0)  # fmt: skip
    opts = PredictOptions(tile_size=5, quicklook=True, progress=False)
    some = open_scene(tmp_path / "some", ["s2"], SOURCES, "2020-01-01")
    rec = predict_scene(model, some, tmp_path / "o", NAMES, 0, None, opts)
    with rasterio.open(rec["files"]["class_map"]) as src:
        m = src.read(1)
    assert (m[:4, :4] == NODATA).all() and (m[4:, 4:] != NODATA).all() and rec["n_nodata"] == 16
    assert Path(rec["files"]["quicklook"]).is_file()
    cloudy = open_scene(tmp_path / "all", ["s2"], SOURCES, "2020-01-01")
    with pytest.raises(ValueError, match="no valid observation in any modality"):
        predict_scene(model, cloudy, tmp_path / "p", NAMES, 0, None, opts)
    assert not (tmp_path / "p").exists()  # failed before any work


def test_peak_memory_does_not_grow_with_the_scene(tmp_path: Path) -> None:
    model = net()
    opts = PredictOptions(tile_size=16, quicklook=False, confidence=True, device="cpu", progress=False)
    scenes = {size: scene(tmp_path / f"s{size}", H=size, W=size) for size in (16, 64)}  # 1 tile, 16 tiles
    predict_scene(model, scenes[16], tmp_path / "warm-up", NAMES, 0, None, opts)  # imports, caches
    peaks = {}
    for size, sc in scenes.items():
        tracemalloc.start()
        predict_scene(model, sc, tmp_path / f"o{size}", NAMES, 0, None, opts)
        peaks[size] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # Numpy buffers (reads, maps) are traced: a buffer of the whole scene would be 16x larger.
    assert peaks[64] < 1.5 * peaks[16] + 128 * 1024, peaks


class MeanReflectance(torch.nn.Module):
    """Logits ``(B, K, H, W)``: a fixed linear map of each pixel's mean valid S2 values (varies over a scene)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight)  # (K, C)

    def forward(self, batch: dict) -> torch.Tensor:
        x, mask = batch["s2"]["x"], batch["s2"]["mask"].float()  # (B, T, C, H, W), (B, T, H, W)
        mean = (x * mask[:, :, None]).sum(1) / mask.sum(1).clamp(min=1)[:, None]  # (B, C, H, W)
        return torch.einsum("kc,bchw->bkhw", self.weight, mean)


def test_a_scene_whose_y_axis_ascends_gives_the_north_up_map(tmp_path: Path) -> None:
    import xarray as xr

    sc = scene(tmp_path / "down", H=12, W=10)
    (tmp_path / "up").mkdir()
    for f in sorted((tmp_path / "down").glob("*.nc")):
        with xr.open_dataset(f, mask_and_scale=False) as ds:
            flipped = ds.isel(y=slice(None, None, -1)).load()  # the same pixels, rows stored south to north
        assert flipped["y"].values[1] > flipped["y"].values[0]
        flipped.to_netcdf(tmp_path / "up" / f.name)
    up = open_scene(tmp_path / "up", ["s2", "s1_asc"], SOURCES, "2020-01-01")
    assert up.grid == sc.grid and up.grid.transform.e < 0
    with xr.open_dataset(tmp_path / "up" / "S2_10m.nc", mask_and_scale=False) as ds:
        stored_rows = ds["B02"].values  # (T, H, W), row 0 the southernmost
    np.testing.assert_array_equal(
        up.series["s2"].read_stored(up.grid, up.grid.full_window())[:, 0], stored_rows[:, ::-1]
    )
    opts = PredictOptions(tile_size=5, probabilities=True, quicklook=False, device="cpu", progress=False)
    stats = compute_norm_stats([sc.read(count=False)])
    maps, proba = {}, {}
    for name, s in (("down", sc), ("up", up)):
        model = MeanReflectance(torch.tensor([[0.0, 0, 0], [1.0, -1, 0], [-1, 1, 0.5], [0.5, 0.5, -1]]))
        record = predict_scene(model, s, tmp_path / f"map_{name}", NAMES, 0, stats, opts)
        with rasterio.open(record["files"]["class_map"]) as src:
            maps[name] = src.read(1)
            assert src.transform == sc.grid.transform and src.transform.e < 0  # north-up
        with rasterio.open(record["files"]["probabilities"]) as src:
            proba[name] = src.read()
    assert len(np.unique(maps["down"])) == 3 and len(np.unique(proba["down"][0])) > 10
    np.testing.assert_array_equal(maps["up"], maps["down"])
    np.testing.assert_array_equal(proba["up"], proba["down"])


@pytest.mark.parametrize("pool", ["mean", "attention", "similarity"])
def test_a_network_with_spatial_context_is_given_whole_tiles(tmp_path: Path, pool: str) -> None:
    """Skipping and chunking lay pixels out as a row: a network reading its neighbours must not get that."""
    sc = scene(tmp_path / "a", H=12, W=10)
    torch.manual_seed(0)
    model = MTANClassifier(
        {"s2": 3, "s1_asc": 2}, 4, mlp="channels_last", spatial_context=3, spatial_pool=pool, **small_net_kwargs()
    )
    model.eval()
    with torch.no_grad():
        for p in model.head.parameters():  # logits that differ from pixel to pixel
            p.mul_(50.0)
    whole_classes, whole_proba = classify_tile(model, sc.read(), None, 0, torch.device("cpu"))
    # the options a user gets by default (skip the empty pixels, chunks of 4096) are replaced
    opts = PredictOptions(tile_size=64, probabilities=True, quicklook=False, device="cpu", progress=False)
    assert opts.skip_empty and opts.chunk_pixels == 4096
    record = predict_scene(model, sc, tmp_path / "map", NAMES, 0, None, opts)
    with rasterio.open(record["files"]["probabilities"]) as src:
        written = src.read().astype(float)
    with rasterio.open(record["files"]["class_map"]) as src:
        np.testing.assert_array_equal(src.read(1), whole_classes)
    np.testing.assert_allclose(written, np.round(whole_proba[1:] * 100), atol=1)
    rows = PredictOptions(tile_size=64, skip_empty=False, chunk_pixels=7, device="cpu")
    assert whole_tiles_for_spatial_context(net(), rows) == rows  # a per-pixel network keeps its chunks


def test_tempcnn_with_spatial_context_is_given_whole_tiles() -> None:
    rows = PredictOptions(tile_size=64, skip_empty=True, chunk_pixels=7, device="cpu")
    per_pixel = TempCNN({"s2": 3}, 4, date_range=[0.0, 100.0])
    assert whole_tiles_for_spatial_context(per_pixel, rows) == rows
    whole = whole_tiles_for_spatial_context(TempCNN({"s2": 3}, 4, date_range=[0.0, 100.0], spatial_context=3), rows)
    assert (whole.skip_empty, whole.chunk_pixels, whole.tile_size) == (False, None, 64)
