"""Fast scene prediction: the background reader, skipped empty pixels, pixel chunks, the backend and
compile decisions, utilisation and the reference-time warning, each against the plain tile path."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from rasterio.windows import Window

from conftest import small_net_kwargs
from fixtures.scene_files import SOURCES, make_scene, write_cube
from mtan_s1s2.cli.predict import warn_dates_outside_reference
from mtan_s1s2.data.datacube.scenes import open_scene
from mtan_s1s2.export.cog import NODATA
from mtan_s1s2.inference.reader import BackgroundReader
from mtan_s1s2.inference.scene import PredictOptions, classify_prepared, classify_tile, predict_scene, prepare_tile
from mtan_s1s2.inference.speed import (
    ChunkRunner,
    DecisionCache,
    _measure_compiled,
    choose_backend,
    choose_compile,
    decision_key,
    forward_compile_worth_measuring,
    forward_flops_per_pixel,
    pad_pixels,
    utilisation,
)
from mtan_s1s2.models.compiling import CompiledNetwork
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.utils.flops import count_flops

NAMES = ("unlabelled", "maize", "wheat", "grass")
CPU = torch.device("cpu")


def net(mlp: str = "linear") -> MTANClassifier:
    torch.manual_seed(0)
    return MTANClassifier({"s2": 3, "s1_asc": 2}, 4, mlp=mlp, **small_net_kwargs()).eval()


def cloudy_scene(folder: Path, H: int = 16, W: int = 16):
    """A scene whose top-left quarter has no valid observation in any modality (S2 cloudy, S1 no data)."""
    make_scene(folder, H=H, W=W, clouds=0.2)
    rng = np.random.default_rng(1)
    scl = rng.choice([4, 9], p=[0.7, 0.3], size=(5, H // 2, W // 2)).astype(np.uint8)
    scl[:, : H // 4, : W // 4] = 9
    write_cube(folder / "S2_20m.nc", {"B11": rng.integers(200, 4000, (5, H // 2, W // 2)).astype(np.uint16),
                                      "SCL": scl}, np.datetime64("2020-03-01T10:30:00", "s")
               + np.arange(5) * np.timedelta64(7, "D"), res=20.0)  # fmt: skip
    vv = (rng.normal(-12, 3, (4, H // 2, W // 2)) * 1e4).astype(np.int32)
    vv[:, : H // 4, : W // 4] = 0  # the fill value
    t1 = np.datetime64("2020-03-02T17:40:00", "s") + np.arange(4) * np.timedelta64(9, "D")
    write_cube(folder / "S1_20m.nc", {"VV": vv, "VH": vv.copy()}, t1, res=20.0)
    return open_scene(folder, ["s2", "s1_asc"], SOURCES, "2020-01-01")


# ---------------------------------------------------------------- background reader


def test_the_reader_yields_every_window_in_order_at_most_depth_ahead() -> None:
    windows = [Window(i, 0, 1, 1) for i in range(6)]
    read_at: list[int] = []
    for depth in (0, 2):
        read_at.clear()
        with BackgroundReader(windows, lambda w: (read_at.append(int(w.col_off)), int(w.col_off) * 10)[1], depth) as r:
            got = []
            for w, item in r:
                time.sleep(0.05)  # classification: the reader runs ahead meanwhile, bounded by the queue
                got.append((int(w.col_off), item, len(read_at)))
        assert [(c, i) for c, i, _ in got] == [(c, 10 * c) for c in range(6)]
        # tiles read when tile c is handed over: c + 1 inline; at most c + 1 + depth (+1 held by the thread)
        assert all(c + 1 <= n <= c + 2 + depth for c, _, n in got), got
    assert max(n - c for c, _, n in got) >= 2  # with depth 2 it did read ahead


def test_an_error_in_the_reader_surfaces_at_its_tile_and_stops_the_thread() -> None:
    windows = [Window(i, 0, 1, 1) for i in range(5)]

    def read(w: Window) -> int:
        if w.col_off == 3:
            raise OSError("corrupt block in S2_stack.tif")
        return int(w.col_off)

    got = []
    before = threading.active_count()
    with pytest.raises(OSError, match="corrupt block"):
        for _, item in BackgroundReader(windows, read, depth=2):
            got.append(item)
    assert got == [0, 1, 2]
    assert threading.active_count() == before


def test_a_consumer_stopping_early_stops_the_reader() -> None:
    windows = [Window(i, 0, 1, 1) for i in range(100)]
    reads = []
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="model failed"):
        for w, _ in BackgroundReader(windows, lambda w: reads.append(w), depth=1):
            if w.col_off == 2:
                raise RuntimeError("model failed")
    assert threading.active_count() == before and len(reads) <= 5
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        BackgroundReader(windows, lambda w: w, depth=-1)


# ---------------------------------------------------------------- skipped pixels and chunks


class CountingNet(torch.nn.Module):
    """Wraps a network and counts the pixels it is fed."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.pixels = inner, 0

    def forward(self, batch: dict) -> torch.Tensor:
        mask = batch["s2"]["mask"]
        self.pixels += int(mask.shape[-2] * mask.shape[-1])
        return self.inner(batch)


def test_pixels_without_any_valid_observation_are_not_computed(tmp_path: Path) -> None:
    sc = cloudy_scene(tmp_path / "s")
    data = sc.read(count=False)
    valid_any = np.zeros((16, 16), bool)
    for d in data.values():
        valid_any |= d["mask"].any(axis=0)
    assert not valid_any[:8, :8].any() and valid_any.sum() == 192  # the quarter of no data: 64 px
    plain = CountingNet(net())
    classes_ref, proba_ref = classify_tile(plain, data, None, 0, CPU)
    assert plain.pixels == 256
    for chunk in (None, 7, 4096):
        fast = CountingNet(net())
        tile = prepare_tile(data, None, skip_empty=True, chunk_pixels=chunk)
        assert tile.n_computed == 192 and len(tile.batches) == (1 if chunk in (None, 4096) else 28)
        classes, proba = classify_prepared(fast, tile, 0, CPU, num_classes=4)
        assert fast.pixels == 192  # the 64 empty pixels never reach the model
        np.testing.assert_array_equal(classes, classes_ref)
        assert (classes[~valid_any] == NODATA).all() and (proba[:, ~valid_any] == 0).all()
        np.testing.assert_allclose(proba[:, valid_any], proba_ref[:, valid_any], atol=1e-6)
    empty = prepare_tile({m: {**d, "mask": np.zeros_like(d["mask"])} for m, d in data.items()}, None, True, 64)
    classes, proba = classify_prepared(plain, empty, 0, CPU, num_classes=4)
    assert empty.batches == [] and (classes == NODATA).all() and proba.shape == (4, 16, 16)
    with pytest.raises(ValueError, match="chunk_pixels must be a positive"):
        prepare_tile(data, None, True, 0)


def test_predict_scene_records_the_computed_pixels_and_the_same_map(tmp_path: Path) -> None:
    import rasterio

    sc = cloudy_scene(tmp_path / "s")
    maps, records = {}, {}
    for name, extra in (("plain", {"skip_empty": False, "chunk_pixels": None, "prefetch": 0}), ("fast", {})):
        opts = PredictOptions(tile_size=6, quicklook=False, device="cpu", progress=False, **extra)
        records[name] = predict_scene(net(), sc, tmp_path / name, NAMES, 0, None, opts)
        with rasterio.open(records[name]["files"]["class_map"]) as src:
            maps[name] = src.read(1)
    np.testing.assert_array_equal(maps["fast"], maps["plain"])
    assert records["plain"]["n_computed"] == 256 and records["fast"]["n_computed"] == 192
    assert records["fast"]["n_nodata"] == 64 and records["fast"]["prefetch"] == 2
    assert records["fast"]["computed_pixels_per_s"] < records["fast"]["pixels_per_s"]


# ---------------------------------------------------------------- backend and compile decisions


def chunk_batch(n: int = 64) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        m: {"x": torch.randn(1, t, c, 1, n, generator=g), "doy": torch.linspace(60, 120, t)[None],
            "mask": torch.rand(1, t, 1, n, generator=g) < 0.7}
        for m, c, t in (("s2", 3, 5), ("s1_asc", 2, 4))
    }  # fmt: skip


def test_the_backend_is_timed_once_then_cached_and_a_forced_one_is_kept(tmp_path: Path) -> None:
    batch = chunk_batch()
    cache_file = tmp_path / "decisions.json"
    model = net("linear")
    first = choose_backend(model, batch, CPU, "fp32", DecisionCache(cache_file))
    assert not first["cached"] and set(first["timings_ms"]) == {"linear", "conv", "channels_last"}
    assert first["backend"] == min(first["timings_ms"], key=first["timings_ms"].get) == model.backend
    stored = json.loads(cache_file.read_text())
    assert stored[decision_key(model, batch, CPU, "fp32")]["backend"] == first["backend"]
    again = choose_backend(net("conv"), batch, CPU, "fp32", DecisionCache(cache_file))
    assert again["cached"] and again["cost_s"] == 0.0 and again["backend"] == first["backend"]
    assert "cached decision" in again["why"]
    # A prediction projected under min_run_s keeps the checkpoint's backend, timed once, nothing cached.
    small_file = tmp_path / "small.json"
    small = choose_backend(net("conv"), batch, CPU, "fp32", DecisionCache(small_file), None, 64, min_run_s=1e6)
    assert small["backend"] == "conv" and set(small["timings_ms"]) == {"conv"} and "others not timed" in small["why"]
    assert not small_file.exists()
    forced = choose_backend(net("linear"), batch, CPU, "fp32", DecisionCache(None), forced="conv")
    assert forced["backend"] == "conv" and forced["timings_ms"] == {} and "mlp=conv" in forced["why"]
    assert decision_key(model, batch, CPU, "fp32") != decision_key(model, batch, CPU, "bf16")


def test_the_compile_rule_projects_over_the_pixels_to_predict(tmp_path: Path) -> None:
    model, batch = net(), chunk_batch(64)
    cache = DecisionCache(tmp_path / "d.json")
    key = decision_key(model, batch, CPU, "fp32")

    def decide(projected_pixels: int, requested: bool | str = "auto") -> tuple[ChunkRunner, dict]:
        return choose_compile(model, batch, CPU, "fp32", requested, 64.0, projected_pixels, cache, key, 64, 120.0)

    runner, record = decide(10_000)  # 1 ms per px: 10 s eager, under 120 s
    assert runner.compiled is None and not record["compiled"] and "not worth compiling" in record["why"]
    assert record["eager_px_per_s"] == pytest.approx(1000.0) and record["projected_eager_s"] == pytest.approx(10.0)
    runner, record = decide(10**9, requested=False)
    assert runner.compiled is None and record["why"] == "compile=false"
    # A measurement of the former kind (eager timed apart from the compiled passes) is not used:
    # the rules go on as without one (100 s eager, under 120 s)
    cache.update(key, compile={"compiled_px_per_s": 2000.0, "compile_s": 60.0})
    runner, record = decide(100_000)
    assert runner.compiled is None and not record["cached"] and "not worth compiling" in record["why"]
    # A side-by-side measurement kept from an earlier run decides without compiling: compiled
    # 2000 px/s against eager 1000 px/s, 60 s to compile.
    side_by_side = {"compiled_px_per_s": 2000.0, "eager_px_per_s": 1000.0, "compile_s": 60.0}
    cache.update(key, compile={**side_by_side, "measurement": "side_by_side"})
    runner, record = decide(100_000)  # saves 50 s < 60 s
    assert runner.compiled is None and record["cached"] and "saves 50 s for 60 s" in record["why"]
    runner, record = decide(1_000_000)  # saves 500 s > 60 s
    assert isinstance(runner.compiled, CompiledNetwork) and record["compiled"] and record["cached"]


def test_a_compile_measurement_times_eager_and_compiled_passes_side_by_side() -> None:
    """``_measure_compiled``: the compilation, then compiled and eager passes alternated (3 each)."""
    model = net("channels_last")
    compiled = ChunkRunner(model, CompiledNetwork(model, "test", backend="eager"), chunk_pixels=64)
    twin = copy.deepcopy(model)
    eager = ChunkRunner(twin, None, chunk_pixels=64)
    eager_passes: list[int] = []
    twin.register_forward_pre_hook(lambda mod, args: eager_passes.append(1))
    measured = _measure_compiled(compiled, eager, chunk_batch(64), CPU, "fp32", 64)
    assert not isinstance(measured, str), measured
    compiled_px_per_s, compile_s, eager_px_per_s = measured
    assert compiled_px_per_s > 0 and eager_px_per_s > 0 and compile_s >= 0
    assert len(eager_passes) == 3


def test_a_compiled_runner_pads_every_chunk_to_one_width_and_gives_the_eager_logits() -> None:
    model = net("channels_last")
    runner = ChunkRunner(model, CompiledNetwork(model, "test", backend="eager"), chunk_pixels=64)
    widths = []
    handle = model.register_forward_pre_hook(lambda mod, args: widths.append(int(args[0]["s2"]["mask"].shape[-1])))
    with torch.inference_mode():
        for n in (64, 23, 1):
            batch = chunk_batch(n)
            got, want = runner(batch), model(batch)
            assert got.shape == want.shape == (1, 4, 1, n)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    handle.remove()
    assert widths[::2] == [64, 64, 64]  # every compiled call at the chunk width
    padded = pad_pixels(chunk_batch(5), 8)
    assert padded["s2"]["x"].shape[-1] == 8 and not padded["s2"]["mask"][..., 5:].any()


# ---------------------------------------------------------------- utilisation and reference times


def test_forward_flops_per_pixel_do_not_depend_on_the_pixel_layout() -> None:
    model = net()
    row = chunk_batch(16)
    tile = {m: {"x": d["x"].reshape(1, *d["x"].shape[1:3], 4, 4), "doy": d["doy"],
                "mask": d["mask"].reshape(1, d["mask"].shape[1], 4, 4)} for m, d in row.items()}  # fmt: skip
    per_pixel = forward_flops_per_pixel(model, row)
    with torch.inference_mode():
        counted = count_flops(lambda: model(tile)) / 16
    assert per_pixel == pytest.approx(counted) and per_pixel > 1000
    u = utilisation(1000, 600, 2.0, per_pixel, peak_gflop_per_s=10.0)
    assert u["pixels_per_s"] == 500.0 and u["computed_pixels_per_s"] == 300.0
    assert u["achieved_gflop_per_s"] == pytest.approx(per_pixel * 300 / 1e9)
    assert u["fraction_of_peak"] == pytest.approx(u["achieved_gflop_per_s"] / 10.0)
    assert utilisation(10, 10, 0.0, None, None)["fraction_of_peak"] is None


def test_one_warning_names_the_scene_its_dates_and_the_reference_span(tmp_path: Path, caplog) -> None:
    sc = cloudy_scene(tmp_path / "T31UDS_2020")  # dates 2020-03-01 .. 2020-03-29T17:40: doy 60..88.7
    short = {"ref_range": [0.0, 0.1], "time_scale": 365.0, "num_ref_times": 16}  # doy 0..36.5
    with caplog.at_level("WARNING", logger="mtan_s1s2.cli.predict"):
        message = warn_dates_outside_reference(sc, short)
    assert message is not None and [r.getMessage() for r in caplog.records] == [message]
    assert message.startswith("Scene T31UDS_2020 (2020-03-01 .. 2020-03-29): the data's dates span doy 60..89")
    assert "cover doy 0..36.5" in message and "model.net.ref_range=[0, 0.1]" in message
    assert warn_dates_outside_reference(sc, {**short, "ref_range": [0.0, 1.0]}) is None
    assert warn_dates_outside_reference(sc, None) is None


def test_a_compilation_that_cannot_pay_off_is_not_measured() -> None:
    """The projected-run rule: at most 45 % of the eager time saved, against ~75 eager chunk passes on CPU."""
    # 1,000,000 px at 1,000 px/s: 1000 s eager, 450 s saved at most; 75 passes of 4 s = 300 s to compile
    worth, why = forward_compile_worth_measuring(1000.0, 4.0, CPU)
    assert worth and why == "1000 s eager x 0.45 max gain > ~300 s to compile"
    # 600 s eager: 270 s saved at most, under 300 s
    worth, why = forward_compile_worth_measuring(600.0, 4.0, CPU)
    assert not worth and "saves 270 s at most, under the ~300 s a compilation takes" in why
    # on CUDA the formula is seconds, whatever the chunk takes
    worth, why = forward_compile_worth_measuring(600.0, 4.0, torch.device("cuda"), cost_s=40.0)
    assert worth and why.endswith("> ~40 s to compile")


def test_choose_compile_applies_the_projected_run_rule_before_compiling(tmp_path: Path) -> None:
    """Over the ``tune_min_run_s`` floor but unable to pay off: eager, nothing compiled or cached."""
    model, batch = net(), chunk_batch(64)
    cache = DecisionCache(tmp_path / "d.json")
    key = decision_key(model, batch, CPU, "fp32")
    # 2 s per 64 px chunk eager; 5,000 px = 156 s eager (over 120 s), 70 s saved at most < 150 s
    runner, record = choose_compile(model, batch, CPU, "fp32", "auto", 2000.0, 5_000, cache, key, 64, 120.0)
    assert runner.compiled is None and not record["compiled"] and record["compiled_px_per_s"] is None
    assert "under the ~150 s a compilation takes: not compiled" in record["why"]
    assert not (tmp_path / "d.json").exists()
