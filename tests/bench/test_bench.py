"""The backend benchmark: one iteration on CPU writes stamped rows; helpers behave."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from mtan_s1s2.bench.__main__ import bench_precision, kernel_backends, run_benchmark
from mtan_s1s2.bench.epochs import (
    EpochBenchConfig,
    aggregate,
    allocator_env,
    command_backend,
    mlp_options,
    train_command,
)
from mtan_s1s2.bench.layers import FORWARD_ONLY_SUITES, PROJECTION_VARIANTS, SUITES, mlp_blocks, projection_workloads
from mtan_s1s2.bench.report import add_ratios
from mtan_s1s2.bench.timing import TimerConfig, check_precisions, time_callable
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.models.compiling import compile_or_eager
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.utils.allocator import GLIBC_TUNED
from mtan_s1s2.utils.hardware import CPU_FLAGS_RECORDED
from mtan_s1s2.utils.precision import cpu_flags

TINY_MODEL = [
    "model.net.d_model=8",
    "model.net.embed_time=8",
    "model.net.num_ref_times=2",
    "model.net.input_hidden=8",
    "model.net.fusion_hidden=8",
    "model.net.head_hidden=[8]",
]
STAMP_KEYS = (
    "timestamp",
    "python",
    "torch",
    "mtan-s1s2",
    "hostname",
    "cpu",
    "cpu_flags",
    "cpu_count",
    "torch_threads",
    "device",
    "gpu",
    "allocator",
    "float32_matmul_precision",
    "cuda_matmul_allow_tf32",
    "cudnn_allow_tf32",
    "matmul_precision_config",
)


def compose_bench(tmp_path: Path, overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="bench", overrides=overrides)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
        cfg.paths.log_dir = str(tmp_path)
    return cfg


@pytest.fixture
def cfg_bench_tiny(tmp_path: Path) -> DictConfig:
    """The real bench config shrunk to one timed call of tiny shapes on CPU."""
    return compose_bench(
        tmp_path,
        [
            "data=synthetic_tiny",
            "data.patch_size=4",
            "data.batch_size=1",
            "data.n_train=1",
            *TINY_MODEL,
            "bench.device=cpu",
            "bench.timer.method=once",
            "bench.timer.warmup=0",
            "bench.projection.shape=[2,4,3,3]",
            "bench.predict.tile=3",
            "bench.predict.dates={s2: 4, s1_asc: 3, s1_desc: 3}",
        ],
    )


def test_bench_one_iteration_writes_stamped_rows(cfg_bench_tiny: DictConfig, tmp_path: Path) -> None:
    rows = run_benchmark(cfg_bench_tiny)
    backends = list(MLP_BACKENDS)
    # every suite x backend x pass was timed (projection: its three layouts)
    seen = {(r["suite"], r["backend"], r["pass"]) for r in rows}
    for suite in SUITES:
        names = list(PROJECTION_VARIANTS) if suite == "projection" else backends
        for b in names:
            for p in ("forward",) if suite in FORWARD_ONLY_SUITES else ("forward", "forward_backward"):
                assert (suite, b, p) in seen, (suite, b, p)
    assert not any(r["suite"] == "predict" and r["pass"] != "forward" for r in rows)
    for r in (r for r in rows if r["suite"] == "predict"):
        assert r["pixels_per_s"] == pytest.approx(9 / (r["median_ms"] / 1000))
        assert r["s2_tile_hours"] == pytest.approx(10980**2 / r["pixels_per_s"] / 3600)
    assert {r["case"] for r in rows if r["suite"] == "blocks"} >= {
        "encoders.s2.embed",
        "fusion",
        "head",
        "sum of MLP blocks",
    }
    for r in rows:
        assert r["precision"] == "fp32" and r["compile"] is False and r["compile_status"] == "eager"
        assert r["median_ms"] > 0 and r["device"] == "cpu"
        assert r["cpu_flags"] == " ".join(f for f in CPU_FLAGS_RECORDED if f in cpu_flags())  # e.g. "avx2 avx512_bf16"
        assert r["float32_matmul_precision"] == "highest" and r["cudnn_allow_tf32"] is False
        assert r["allocator"] in ("tcmalloc", "jemalloc", "mimalloc", "glibc (default)", "glibc (tuned)")
    for r in rows:
        if r["backend"] == "linear":
            assert r["speedup_vs_linear"] == pytest.approx(1.0)
    # Utilisation: counted FLOPs, achieved GFLOP/s and the fraction of the GEMM peak measured in this run.
    peak = rows[0]["gemm_peak_gflop_per_s_fp32"]
    assert peak > 1 and rows[0]["copy_gb_per_s"] > 0.1
    for r in rows:
        if r["case"] != "sum of MLP blocks":
            assert r["flops"] > 0 and r["gflop_per_s"] == pytest.approx(r["flops"] / r["median_ms"] / 1e6)
            assert r["fraction_of_peak"] == pytest.approx(r["gflop_per_s"] / peak)
    projection = [r for r in rows if r["suite"] == "projection"]
    assert all(r["gb_per_s"] > 0 and r["fraction_of_bandwidth"] > 0 for r in projection)
    fwd = next(r for r in projection if r["pass"] == "forward")
    n, c, h, w = 2, 4, 3, 3  # cfg_bench_tiny projection shape
    assert fwd["flops"] == 2 * n * h * w * c * c  # one C x C matmul per pixel
    totals = [r for r in rows if r["case"] == "sum of MLP blocks"]
    for t in totals:
        parts = [r for r in rows if r["suite"] == "blocks" and r["case"] != "sum of MLP blocks"
                 and (r["backend"], r["pass"]) == (t["backend"], t["pass"])]  # fmt: skip
        assert t["flops"] == sum(r["flops"] for r in parts)

    with open(tmp_path / "bench.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(rows)
    for key in (
        *STAMP_KEYS,
        "suite",
        "case",
        "backend",
        "shape",
        "pass",
        "precision",
        "compile",
        "median_ms",
        "iqr_ms",
        "speedup_vs_linear",
    ):
        assert key in csv_rows[0], key
        assert all(key in r for r in rows), key
    assert csv_rows[0]["torch"] == torch.__version__ and csv_rows[0]["torch_threads"] == str(torch.get_num_threads())
    data = json.loads((tmp_path / "bench.json").read_text())
    assert len(data["rows"]) == len(rows) and data["meta"]["config"]["mode"] == "kernels"


def test_block_workloads_see_real_shapes() -> None:
    """Hooks find every [MLP] block; the channels-first/last layouts are what the model uses."""
    for backend in MLP_BACKENDS:
        net = MTANClassifier(
            {"s2": 10, "s1_asc": 3},
            5,
            mlp=backend,
            d_model=8,
            embed_time=8,
            num_ref_times=2,
            input_hidden=8,
            fusion_hidden=8,
            head_hidden=(8,),
        )
        assert set(mlp_blocks(net)) == {
            "encoders.s2.embed",
            "encoders.s2.proj",
            "encoders.s1_asc.embed",
            "encoders.s1_asc.proj",
            "fusion",
            "head",
        }


def test_bench_rejects_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="auto"):
        kernel_backends(["linear", "auto"])
    with pytest.raises(ValueError, match=r"bench\.backends"):
        kernel_backends(["convv"])
    with pytest.raises(ValueError, match=r"bench\.mode"):
        run_benchmark(compose_bench(tmp_path, ["bench.mode=fast"]))
    with pytest.raises(ValueError, match=r"bench\.suites"):
        run_benchmark(compose_bench(tmp_path, ["bench.device=cpu", "bench.suites=[projection,kernels]"]))
    with pytest.raises(ValueError, match="precision"):
        check_precisions(["fp8"], torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^bench.precisions=fp32 is now bench.precisions=32-true "):
        run_benchmark(compose_bench(tmp_path, ["bench.device=cpu", "bench.precisions=[fp32]"]))
    with pytest.raises(ValueError, match=r"^bench.scaling.precision=bf16 is now bench.scaling.precision=bf16-mixed "):
        scaling = ["bench.mode=scaling", "bench.device=cpu", "bench.scaling.precision=bf16"]
        run_benchmark(compose_bench(tmp_path, scaling))
    with pytest.raises(ValueError, match=r"^bench.epochs.precision=fp16 is now bench.epochs.precision=16-mixed "):
        EpochBenchConfig(precision="fp16")
    with pytest.warns(UserWarning, match="fp16"):
        assert check_precisions(["fp32", "fp16"], torch.device("cpu")) == ["fp32"]
    with pytest.raises(ValueError, match="shape"):
        projection_workloads([2, 4, 3], torch.device("cpu"))
    with pytest.raises(ValueError, match="method"):
        TimerConfig(method="fast")  # type: ignore[arg-type]


def test_timer_statistics_and_compile_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = time_callable(
        lambda: torch.ones(64).sum(), torch.device("cpu"), TimerConfig(warmup=1, min_run_time=0.01, max_run_time=0.5)
    )
    assert stats.n_blocks >= 4 and stats.median_ms > 0 and stats.iqr_ms >= 0 and stats.p25_ms <= stats.p75_ms

    def broken(module: torch.nn.Module) -> None:
        raise RuntimeError("no compiler here")

    module = torch.nn.Linear(2, 2)
    monkeypatch.setattr(torch, "compile", lambda m: m)  # the probe fails instead: no real compile here
    with pytest.warns(UserWarning, match="torch.compile failed"):
        out, status = compile_or_eager(module, True, probe=broken)
    assert out is module and status.startswith("fallback: RuntimeError")
    assert compile_or_eager(module, False) == (module, "eager")


def test_ratios_to_linear() -> None:
    rows = [
        {
            "suite": "s",
            "case": "c",
            "pass": "forward",
            "precision": "fp32",
            "compile": False,
            "backend": b,
            "median_ms": t,
        }
        for b, t in (("linear", 2.0), ("conv", 4.0), ("channels_last", 1.0))
    ]
    add_ratios(rows)
    assert [r["speedup_vs_linear"] for r in rows] == [1.0, 0.5, 2.0]


def test_epoch_mode_helpers(tmp_path: Path) -> None:
    options = mlp_options()
    assert options[:2] == ["linear", "conv"] and set(MLP_BACKENDS) <= set(options)
    cfg = EpochBenchConfig(backends=["conv"], max_epochs=3, limit_train_batches=2)
    cmd = train_command("conv", tmp_path, cfg)
    for expected in (
        "mlp=conv",
        "test=false",
        "trainer.max_epochs=3",
        "++trainer.limit_train_batches=2",
        f"hydra.run.dir={tmp_path}",
    ):
        assert expected in cmd
    with pytest.raises(ValueError, match="max_epochs"):
        EpochBenchConfig(max_epochs=1)
    with pytest.raises(ValueError, match="convv"):
        EpochBenchConfig(backends=["convv"])
    assert (
        allocator_env("glibc", {"LD_PRELOAD": "/x/libtcmalloc.so.4 /x/libother.so"})["LD_PRELOAD"] == "/x/libother.so"
    )
    assert "LD_PRELOAD" not in allocator_env("glibc", {"LD_PRELOAD": "/x/libjemalloc.so.2"})
    assert allocator_env("current", {"LD_PRELOAD": "/a.so"})["LD_PRELOAD"] == "/a.so"
    env = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.cpu.x86_shstk=off", "MALLOC_ARENA_MAX": "2"}
    default = allocator_env("glibc", env)
    assert default["GLIBC_TUNABLES"] == "glibc.cpu.x86_shstk=off" and "MALLOC_ARENA_MAX" not in default
    tuned = allocator_env("glibc_tuned", {"LD_PRELOAD": "/x/libtcmalloc.so.4"})
    assert tuned["GLIBC_TUNABLES"] == GLIBC_TUNED and "LD_PRELOAD" not in tuned
    with pytest.raises(ValueError, match="allocator"):
        allocator_env("hoard", {})

    runs = [
        {
            "allocator": "current",
            "backend": b,
            "status": "ok",
            "samples_per_s": v,
            "epoch_s": 32 / v,
            "n_timed_epochs": 2,
            "trained_backend": b,
        }
        for b, v in (("linear", 10.0), ("conv", 8.0), ("channels_last", 12.0), ("linear", 12.0))
    ] + [{"allocator": "current", "backend": "auto", "status": "failed (1)"}]
    summary = {r["backend"]: r for r in aggregate(runs)}
    assert summary["linear"]["samples_per_s"] == 11.0 and summary["linear"]["runs_ok"] == 2
    assert summary["channels_last"]["speedup_vs_conv"] == pytest.approx(1.5)
    assert summary["channels_last"]["fraction_of_fastest"] == 1.0
    assert summary["auto"]["samples_per_s"] is None and summary["auto"]["runs_ok"] == 0
    # Variants (e.g. compiled) and allocators: ratios within each, x reference = linear of the first one.
    variant_runs = [
        {"allocator": a, "variant": v, "backend": b, "status": "ok", "samples_per_s": r, "epoch_s": 1.0}
        for a, v, b, r in (
            ("glibc", "eager", "linear", 4.0), ("glibc", "eager", "conv", 2.0),
            ("current", "compiled", "linear", 10.0), ("current", "compiled", "conv", 16.0),
        )
    ]  # fmt: skip
    rows = {(r["allocator"], r["variant"], r["backend"]): r for r in aggregate(variant_runs)}
    assert rows["current", "compiled", "conv"]["speedup_vs_linear"] == pytest.approx(1.6)
    assert rows["current", "compiled", "conv"]["speedup_vs_reference"] == pytest.approx(4.0)
    assert rows["glibc", "eager", "conv"]["speedup_vs_linear"] == pytest.approx(0.5)
    assert rows["current", "compiled", "conv"]["fraction_of_fastest"] == 1.0
    cmd = train_command("conv", tmp_path, cfg, allocator="glibc")
    assert "cpu_malloc=default" in cmd and "cpu_malloc=default" not in train_command("conv", tmp_path, cfg)


def test_epoch_mode_commands_run_the_plain_train_py(tmp_path: Path) -> None:
    """``bench.epochs.commands``: neither mlp nor precision is set, so ``{default: []}`` is ``python train.py``."""
    commands = {"fp32_linear": ["mlp=linear", "trainer.precision=32-true", "model.compile=false"], "default": []}
    cfg = EpochBenchConfig(commands=commands)
    plain = train_command(None, tmp_path, cfg, name="default")
    assert not [a for a in plain if a.startswith(("mlp=", "trainer.precision="))]
    assert "task_name=bench_epochs_default" in plain and "callbacks=timing_only" in plain
    assert "trainer.precision=32-true" in train_command("conv", tmp_path, cfg)  # the grid still sets it
    assert command_backend(commands["fp32_linear"]) == "linear" and command_backend([]) == "auto"
    assert command_backend(["mlp=conv", "mlp=channels_last"]) == "channels_last"  # the last one wins, as in Hydra
    runs = [
        {"allocator": "current", "variant": v, "backend": b, "status": "ok", "samples_per_s": r, "wall_s": w}
        for v, b, r, w in (("fp32_linear", "linear", 5.0, 80.0), ("default", "auto", 9.0, 70.0))
    ]
    for r in runs:
        r["epoch_s"] = 32 / r["samples_per_s"]
    rows = {r["variant"]: r for r in aggregate(runs)}
    assert rows["default"]["speedup_vs_reference"] == pytest.approx(1.8)  # x the first command
    assert rows["default"]["fraction_of_fastest"] == 1.0 and rows["default"]["wall_s"] == 70.0


@pytest.mark.slow
def test_epoch_mode_trains_each_backend(tmp_path: Path) -> None:
    """Two backends, fresh processes, tiny data: samples/s and ratios from summary.json."""
    cfg = compose_bench(
        tmp_path,
        [
            "bench.mode=epochs",
            "bench.device=cpu",
            "bench.epochs.backends=[linear,conv]",
            "bench.epochs.data=synthetic_tiny",
            "bench.epochs.max_epochs=2",
            "bench.epochs.limit_train_batches=2",
            "bench.epochs.allocators=[glibc]",
        ],
    )
    cfg.bench.epochs.overrides = TINY_MODEL  # on a command line: 'bench.epochs.overrides=["model.net.d_model=8"]'
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = run_benchmark(cfg)
    assert [r["backend"] for r in summary] == ["linear", "conv"]
    for r in summary:
        assert r["runs_ok"] == 1 and r["samples_per_s"] > 0 and r["n_timed_epochs"] == 1
        assert r["trained_backend"] == r["backend"] and r["allocator_used"] == "glibc (default)"
    assert summary[0]["speedup_vs_linear"] == 1.0
    assert (tmp_path / "epochs.csv").exists() and (tmp_path / "epochs_summary.json").exists()


def test_in_memory_datamodule_serves_one_epoch_from_memory() -> None:
    from mtan_s1s2.bench.data import InMemoryDataset, InMemorySyntheticDataModule

    dm = InMemorySyntheticDataModule(
        steps_per_epoch=2, materialize_workers=0, preset="tiny", patch_size=4, batch_size=2
    )
    dm.setup("fit")
    assert isinstance(dm.datasets["train"], InMemoryDataset) and len(dm.datasets["train"]) == 4
    batches = list(dm.train_dataloader())
    assert len(batches) == 2 and batches[0]["s2"]["x"].shape[:1] == (2,)
    assert sorted(int(i) for b in batches for i in b["patch_id"]) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="steps_per_epoch"):
        InMemorySyntheticDataModule(steps_per_epoch=0, preset="tiny")


@pytest.mark.slow  # one train.py process per case
def test_scaling_mode_times_each_case_in_a_fresh_process(tmp_path: Path) -> None:
    cfg = compose_bench(
        tmp_path,
        [
            "bench.mode=scaling", "bench.device=cpu", "bench.scaling.backends=[channels_last]",
            "bench.scaling.dates=[4,8]", "bench.scaling.patch_sizes=[]", "bench.scaling.batch_sizes=[2]",
            "bench.scaling.reference={dates: 4, patch: 4, batch: 2}", "bench.scaling.timer.method=once",
            "bench.scaling.timer.warmup=1", "model.net.d_model=8", "model.net.embed_time=8",
            "model.net.num_ref_times=4", "model.net.head_hidden=[16,16]",
        ],
    )  # fmt: skip
    rows = run_benchmark(cfg)
    assert [(r["axis"], r[r["axis"]]) for r in rows] == [("dates", 4), ("dates", 8), ("batch", 2)]
    assert all(r["status"] == "ok" and r["step_ms"] > 0 and r["peak_memory_mb"] >= 0 for r in rows)
    r = rows[1]
    assert r["us_per_date_pixel"] == pytest.approx(r["step_ms"] * 1e3 / (8 * 4 * 4 * 2))
    assert (tmp_path / "scaling.csv").exists()


@pytest.mark.parametrize(("fixture", "auto"), [("cpuinfo_bf16", "bf16"), ("cpuinfo_avx2", "fp32")])
def test_bench_precisions_are_the_training_ones(monkeypatch: pytest.MonkeyPatch, fixture: str, auto: str) -> None:
    monkeypatch.setenv("MTAN_S1S2_CPUINFO", str(Path(__file__).parents[1] / "fixtures" / fixture))
    cpu = torch.device("cpu")
    assert [bench_precision(p, cpu, "bench.precisions") for p in ("32-true", "bf16-mixed", "16-mixed")] == [
        "fp32",
        "bf16",
        "fp16",
    ]
    assert bench_precision("auto", cpu, "bench.precisions") == auto  # as trainer.precision=auto on this CPU
