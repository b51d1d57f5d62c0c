"""``python -m mtan_s1s2.bench``: time every MLP backend (config ``configs/bench.yaml``).

Two modes (``bench.mode``):

* ``kernels`` (default): for every backend (``bench.backends``, default: every entry of
  :data:`~mtan_s1s2.models.layers.mlp.MLP_BACKENDS`), the user's single 1x1 projection,
  each of the model's own [MLP] blocks on its real inputs, and one whole training step
  (:mod:`mtan_s1s2.bench.layers`), in ``forward`` and ``forward_backward`` passes, for each
  precision (``bench.precisions``: ``32-true``, ``bf16-mixed`` and ``16-mixed`` autocast, the
  last on CUDA only, or ``auto``; rows name them ``fp32``, ``bf16``, ``fp16``) and
  eager/compiled.
  Writes ``bench.csv`` and ``bench.json`` to the run directory and prints a table with the
  speedup over ``linear``.
* ``scaling``: one training step per backend against dates, patch size and batch size,
  each case in a fresh process (time, peak memory, cost per date x pixel;
  :mod:`mtan_s1s2.bench.scaling`). Writes ``scaling.csv``/``scaling.json``.
* ``epochs``: ``train.py`` per backend in fresh processes, samples/s per backend
  (:mod:`mtan_s1s2.bench.epochs`). Writes ``epochs.csv``/``epochs.json`` (one row per run)
  and ``epochs_summary.csv``/``.json`` (median per backend with ratios).

Examples::

    python -m mtan_s1s2.bench                                  # CPU-sized defaults
    python -m mtan_s1s2.bench bench.precisions=[32-true,bf16-mixed] bench.compile=[false,true]
    python -m mtan_s1s2.bench data=synthetic_bench matmul_precision=highest   # GPU
    python -m mtan_s1s2.bench bench.mode=epochs bench.epochs.allocators=[glibc,tcmalloc]
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import hydra
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from omegaconf import DictConfig, OmegaConf

from mtan_s1s2.bench.epochs import EpochBenchConfig, aggregate, run_epoch_benchmark
from mtan_s1s2.bench.layers import (
    FORWARD_ONLY_SUITES,
    PASSES,
    S2_TILE_PIXELS,
    SUITES,
    Workload,
    block_workloads,
    predict_workload,
    projection_workloads,
    train_step_workload,
)
from mtan_s1s2.bench.report import add_ratios, blocks_total_rows, print_table, stamp, write_rows
from mtan_s1s2.bench.scaling import print_scaling, run_scaling, scaling_cases
from mtan_s1s2.bench.timing import TimerConfig, check_precisions, resolve_device, time_callable
from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.utils.allocator import tune_glibc_malloc, warn_if_untuned_allocator
from mtan_s1s2.utils.flops import copy_bandwidth, count_flops, gemm_peak
from mtan_s1s2.utils.precision import check_precision, resolve_precision, set_matmul_precision, short_precision

log = logging.getLogger(__name__)

register_resolvers()

CUDA_PROJECTION_SHAPE: tuple[int, int, int, int] = (500, 128, 64, 64)
"""The users' shape ``(N, C, H, W)`` (GPU default)."""
CPU_PROJECTION_SHAPE: tuple[int, int, int, int] = (16, 64, 32, 32)
"""CPU-sized default ``(N, C, H, W)``."""


def _check_subset(values: Any, allowed: tuple[str, ...] | list[str], key: str) -> list[str]:
    names = [str(v) for v in values]
    bad = [v for v in names if v not in allowed]
    if bad or not names:
        raise ValueError(f"{key} must be a non-empty list among {list(allowed)}; got {names}.")
    return names


def kernel_backends(requested: Any) -> list[str]:
    """Backends timed in ``kernels`` mode: ``requested`` or every entry of ``MLP_BACKENDS``.

    Raises:
        ValueError: On ``auto`` (a choice among backends, timed by ``bench.mode=epochs``)
            or an unknown name.
    """
    if requested is None:
        return list(MLP_BACKENDS)
    names = [str(b) for b in requested]
    if "auto" in names:
        raise ValueError(
            "bench.backends cannot contain 'auto' in kernels mode: auto trains with one of the "
            f"other backends ({sorted(MLP_BACKENDS)}). Time it with bench.mode=epochs."
        )
    return _check_subset(names, list(MLP_BACKENDS), "bench.backends")


def _model_workloads(cfg: DictConfig, device: torch.device, backends: list[str], suites: list[str]) -> list[Workload]:
    """Block and train-step workloads of the configured model on one synthetic batch."""
    datamodule = hydra.utils.instantiate(cfg.data, num_workers=0)
    datamodule.setup("fit")
    batch = move_data_to_device(next(iter(datamodule.train_dataloader())), device)
    inputs = {m: batch[m] for m in datamodule.modalities}
    net_cfg = cfg.model.net
    optimizer = hydra.utils.instantiate(cfg.model.optimizer)
    out: list[Workload] = []
    for backend in backends:

        def make_net(backend: str = backend) -> torch.nn.Module:
            torch.manual_seed(int(cfg.seed))
            net: torch.nn.Module = hydra.utils.instantiate(
                net_cfg, in_channels=dict(datamodule.in_channels), num_classes=int(datamodule.num_classes), mlp=backend
            )
            return net.to(device)

        if "blocks" in suites:
            out += block_workloads(make_net, inputs, device, backend)
        if "predict" in suites:
            p = cfg.bench.get("predict") or {}
            out.append(
                predict_workload(
                    make_net,
                    dict(datamodule.in_channels),
                    dict(p.get("dates") or {}),
                    int(p.get("tile") or 32),
                    device,
                    backend,
                    seed=int(cfg.seed),
                )
            )
        if "train_step" in suites:
            out.append(
                train_step_workload(
                    make_net,
                    lambda params: optimizer(params=params),
                    batch,
                    datamodule.modalities,
                    device,
                    backend,
                    ignore_index=int(datamodule.ignore_index),
                )
            )
    return out


def utilisation(
    flops: int, median_ms: float, peak_gflop_s: float, bytes_moved: int | None, bandwidth_gb_s: float
) -> dict[str, Any]:
    """Achieved GFLOP/s and its fraction of the GEMM peak (and bandwidth, when bytes are known)."""
    seconds = median_ms / 1e3
    out: dict[str, Any] = {"flops": flops, "gflop_per_s": None, "fraction_of_peak": None}
    if seconds > 0 and flops:
        out["gflop_per_s"] = flops / seconds / 1e9
        out["fraction_of_peak"] = out["gflop_per_s"] / peak_gflop_s if peak_gflop_s else None
    out["gb_per_s"] = bytes_moved / seconds / 1e9 if bytes_moved and seconds > 0 else None
    out["fraction_of_bandwidth"] = out["gb_per_s"] / bandwidth_gb_s if out["gb_per_s"] and bandwidth_gb_s else None
    return out


def _tile_pixels(shape: str) -> int:
    """``H * W`` of a predict workload's shape ``"s2:1x73x10x32x32,..."``."""
    dims = shape.split(",")[0].split(":")[1].split("x")
    return int(dims[-1]) * int(dims[-2])


def _print_predict(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    predict_rows = [r for r in rows if r["suite"] == "predict"]
    if not predict_rows:
        return
    table = Table(title=f"Prediction throughput ({predict_rows[0]['case']})")
    for col in ("backend", "precision", "compiled", "ms per tile (IQR)", "pixels/s", "10980 x 10980 px S2 tile"):
        table.add_column(col, justify="right" if col not in ("backend", "precision", "compiled") else "left")
    for r in predict_rows:
        table.add_row(
            r["backend"], r["precision"], str(r["compile_status"]), f"{r['median_ms']:.1f} ({r['iqr_ms']:.1f})",
            f"{r['pixels_per_s']:,.0f}", f"{r['s2_tile_hours']:.2f} h",
        )  # fmt: skip
    Console(width=200).print(table)


def _with_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(r) for r in rows] + blocks_total_rows(rows)
    add_ratios(out)
    return out


def bench_precision(value: str, device: torch.device, key: str) -> str:
    """The short name (``fp32``, ``bf16``, ``fp16``) of a configured precision, ``auto`` resolved for ``device``.

    Raises:
        ValueError: On a value outside :data:`~mtan_s1s2.utils.precision.PRECISIONS` (an
            older short name gets the new one: ``bench.precisions=fp32 is now ...=32-true``).
    """
    precision, _ = resolve_precision(check_precision(value, key), device.type)
    return short_precision(precision)


@dataclass(frozen=True)
class KernelSettings:
    """What ``kernels`` mode measures (``bench.*``), checked.

    Attributes:
        device: Where the kernels run.
        backends: MLP backends (``bench.backends``).
        suites: ``projection``, ``blocks``, ``train_step``, ``predict`` (``bench.suites``).
        passes: ``forward``, ``forward_backward``, ... (``bench.passes``).
        precisions: Short names of the autocast precisions (``bench.precisions``, default:
            ``32-true`` and ``bf16-mixed`` on CUDA, ``32-true`` on a CPU).
        compile_modes: Eager (False) and/or compiled (True).
        timer: Warm-up, repeats and clock of every measurement.
    """

    device: torch.device
    backends: list[str]
    suites: list[str]
    passes: list[str]
    precisions: list[str]
    compile_modes: list[bool]
    timer: TimerConfig

    @classmethod
    def from_config(cls, b: DictConfig) -> KernelSettings:
        """From ``cfg.bench``.

        Raises:
            ValueError: On an unknown backend, suite, pass or precision.
        """
        device = resolve_device(b.get("device"))
        default_precisions = ["32-true", "bf16-mixed"] if device.type == "cuda" else ["32-true"]
        requested = [str(p) for p in (b.get("precisions") or default_precisions)]
        return cls(
            device=device,
            backends=kernel_backends(b.get("backends")),
            suites=_check_subset(b.suites, SUITES, "bench.suites"),
            passes=_check_subset(b.passes, PASSES, "bench.passes"),
            precisions=check_precisions([bench_precision(p, device, "bench.precisions") for p in requested], device),
            compile_modes=[bool(c) for c in (b.get("compile") or [False])],
            timer=TimerConfig(**OmegaConf.to_container(b.timer, resolve=True)),  # type: ignore[arg-type]
        )


def _kernel_cases(cfg: DictConfig, k: KernelSettings) -> dict[tuple[str, str], list[Workload]]:
    """The workloads of every ``(suite, case)``, the backends of one case next to each other."""
    b = cfg.bench
    workloads: list[Workload] = []
    if "projection" in k.suites:
        default_shape = CUDA_PROJECTION_SHAPE if k.device.type == "cuda" else CPU_PROJECTION_SHAPE
        shape = list(b.projection.get("shape") or default_shape)
        variants = b.projection.get("variants")
        workloads += projection_workloads(shape, k.device, list(variants) if variants else None, seed=int(cfg.seed))
    if any(s in k.suites for s in ("blocks", "train_step", "predict")):
        workloads += _model_workloads(cfg, k.device, k.backends, k.suites)
    # Backends of one case next to each other, so a drifting machine hurts all alike.
    cases = list(dict.fromkeys((w.suite, w.case) for w in workloads))
    return {c: [w for w in workloads if (w.suite, w.case) == c] for c in cases}


@dataclass
class _KernelContext:
    """What every measurement of one run shares: settings, peaks, FLOP counts so far, the stamp."""

    k: KernelSettings
    peaks: dict[str, float]
    bandwidth: float
    common: dict[str, Any]
    flops: dict[tuple[str, ...], int] = field(default_factory=dict)


def _measure(ctx: _KernelContext, w: Workload, pass_: str, precision: str, compile_: bool) -> dict[str, Any]:
    """Time one workload in one pass, precision and compile mode; its ``bench.csv`` row."""
    device = ctx.k.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    fn, status = w.make(pass_, precision, compile_)
    stats = time_callable(fn, device, ctx.k.timer)
    key = (w.suite, w.case, w.backend, pass_, precision)
    if key not in ctx.flops:  # counted eagerly: compiled kernels do the same work
        eager, _ = (fn, status) if not compile_ else w.make(pass_, precision, False)
        ctx.flops[key] = count_flops(eager)
    use = utilisation(ctx.flops[key], stats.median_ms, ctx.peaks[precision], w.bytes_moved(pass_), ctx.bandwidth)
    row: dict[str, Any] = {
        "suite": w.suite,
        "case": w.case,
        "backend": w.backend,
        "shape": w.shape,
        "pass": pass_,
        "precision": precision,
        "compile": compile_,
        "compile_status": status,
        **stats.as_dict(),
        **use,
        "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        **ctx.common,
    }
    if w.suite == "predict" and stats.median_ms > 0:
        pixels = _tile_pixels(w.shape)
        row["pixels_per_s"] = pixels / (stats.median_ms / 1000.0)
        row["s2_tile_hours"] = S2_TILE_PIXELS / row["pixels_per_s"] / 3600.0
    log.info(
        "%-10s %-32s %-14s %-16s %-4s %-8s %10.3f ms (IQR %.3f, %d blocks)",
        w.suite, w.case, w.backend, pass_, precision, status, stats.median_ms, stats.iqr_ms, stats.n_blocks,
    )  # fmt: skip
    del fn
    return row


def run_kernels(cfg: DictConfig, output_dir: Path) -> list[dict[str, Any]]:
    """``kernels`` mode; returns the rows written to ``bench.csv``/``bench.json``."""
    k = KernelSettings.from_config(cfg.bench)
    device = k.device
    warn_if_untuned_allocator(device)
    by_case = _kernel_cases(cfg, k)
    common = stamp(device, matmul_precision_config=cfg.get("matmul_precision"), bench_timer=k.timer.method)
    # The references utilisation is a fraction of, measured in this run on this device.
    peaks = {p: gemm_peak(device, p) for p in k.precisions}
    bandwidth = copy_bandwidth(device)
    log.info("Peaks: %s GEMM GFLOP/s, copy %.1f GB/s", {p: round(v, 1) for p, v in peaks.items()}, bandwidth)
    common.update({f"gemm_peak_gflop_per_s_{p}": v for p, v in peaks.items()}, copy_gb_per_s=bandwidth)
    meta = {"config": OmegaConf.to_container(cfg.bench, resolve=True), **common}
    ctx = _KernelContext(k, peaks, bandwidth, common)
    rows: list[dict[str, Any]] = []
    final: list[dict[str, Any]] = []
    csv_path, json_path = output_dir / "bench.csv", output_dir / "bench.json"
    for (suite, _case), members in by_case.items():
        for pass_ in k.passes:
            if suite in FORWARD_ONLY_SUITES and pass_ != "forward":
                continue
            for precision in k.precisions:
                for compile_ in k.compile_modes:
                    rows += [_measure(ctx, w, pass_, precision, compile_) for w in members]
        # Written after every case, so an interrupted run (time limit) keeps what it measured.
        final = _with_totals(rows)
        csv_path, json_path = write_rows(final, output_dir, "bench", meta)
    rows = final
    where = (
        f"{device}, {common['torch_threads']} threads, allocator {common['allocator']}, "
        f"matmul {common['float32_matmul_precision']}"
    )
    print_table(rows, title=f"MLP backends on {common.get('gpu') or common.get('cpu')} ({where})")
    _print_predict(rows)
    log.info("Wrote %s and %s", csv_path, json_path)
    return rows


def _print_epochs(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Training throughput (median over rounds, epoch 0 excluded)")
    cols = (
        "allocator", "variant", "backend", "trained as", "precision", "compile", "runs", "samples/s",
        "x reference", "x linear", "x conv", "of fastest", "of GEMM peak", "compile s", "wall s", "sys s",
        "minor faults",
    )  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right" if col not in cols[:6] else "left")

    def f(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    for r in rows:
        table.add_row(
            f"{r['allocator']} ({r['allocator_used']})", str(r["variant"]), r["backend"], str(r["trained_backend"]),
            str(r.get("precision")), str(r.get("compile")), f"{r['runs_ok']}/{r['runs']}", f(r["samples_per_s"], ".2f"),
            f(r["speedup_vs_reference"], ".2f"), f(r["speedup_vs_linear"], ".2f"), f(r["speedup_vs_conv"], ".2f"),
            f(r["fraction_of_fastest"], ".1%"), f(r.get("fraction_of_peak"), ".1%"), f(r.get("compile_s"), ".0f"),
            f(r.get("wall_s"), ".0f"), f(r.get("cpu_sys_s"), ".1f"), f(r.get("minor_page_faults"), ",.0f"),
        )  # fmt: skip
    Console(width=220).print(table)
    for r in rows:
        if r.get("choices"):
            log.info("%s: %s", r["variant"], r["choices"])


def run_epochs(cfg: DictConfig, output_dir: Path) -> list[dict[str, Any]]:
    """``epochs`` mode; returns the per-backend summary rows (``epochs_summary.*``).

    Raises:
        RuntimeError: After writing the results, if any training run failed.
    """
    device = resolve_device(cfg.bench.get("device"))
    e = cast("dict[str, Any]", OmegaConf.to_container(cfg.bench.epochs, resolve=True))
    assert isinstance(e, dict)
    ecfg = EpochBenchConfig(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        matmul_precision=str(cfg.get("matmul_precision") or "highest"),
        **{k: v for k, v in e.items() if v is not None or k == "backends"},
    )
    common = stamp(device, matmul_precision_config=ecfg.matmul_precision, bench_mode="epochs")
    # Rows have their own "allocator" (requested) and "allocator_used" (seen by the run).
    common["bench_process_allocator"] = common.pop("allocator")
    runs = [{**r, **common} for r in run_epoch_benchmark(ecfg, output_dir)]
    summary = [{**r, **common} for r in aggregate(runs)]
    meta = {"config": e, **common}
    write_rows(runs, output_dir, "epochs", meta)
    write_rows(summary, output_dir, "epochs_summary", meta)
    _print_epochs(summary)
    log.info("Wrote %s/epochs.csv and %s/epochs_summary.csv", output_dir, output_dir)
    failed = [r for r in runs if r["status"] != "ok"]
    if failed:
        raise RuntimeError(
            f"{len(failed)} training run(s) failed: "
            + "; ".join(f"{r['backend']} ({r['status']}): {r['run_dir']}/stdout.log" for r in failed)
        )
    return summary


def run_scaling_mode(cfg: DictConfig, output_dir: Path) -> list[dict[str, Any]]:
    """``scaling`` mode; returns the rows written to ``scaling.csv``/``scaling.json``."""
    s = cfg.bench.scaling
    device = resolve_device(cfg.bench.get("device"))
    backends = kernel_backends(s.get("backends"))
    precision = check_precisions([bench_precision(str(s.precision), device, "bench.scaling.precision")], device)[0]
    reference = {"dates": int(s.reference.dates), "patch": int(s.reference.patch), "batch": int(s.reference.batch)}
    net: dict[str, Any] = {}
    for key in cfg.model.net:
        if key == "num_classes":
            continue  # follows model.num_classes, unset here: each case gives its own (bench/scaling.py)
        if OmegaConf.is_missing(cfg.model.net, key):
            net[str(key)] = "???"  # in_channels: given by each case too
            continue
        value = cfg.model.net[key]
        net[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    common = {
        "device": str(device),
        "precision": precision,
        "cpu_malloc": cfg.get("cpu_malloc", "tuned"),
        "net": net,
        "timer": OmegaConf.to_container(s.timer, resolve=True),
    }
    cases = [
        {**common, **c}
        for c in scaling_cases(backends, list(s.dates), list(s.patch_sizes), list(s.batch_sizes), reference)
    ]
    rows = [{**r, **stamp(device)} for r in run_scaling(cases, timeout_s=float(s.timeout_s))]
    write_rows(rows, output_dir, "scaling", {"config": OmegaConf.to_container(s, resolve=True)})
    print_scaling(rows)
    log.info("Wrote %s/scaling.csv", output_dir)
    return rows


def run_benchmark(cfg: DictConfig) -> list[dict[str, Any]]:
    """Run the benchmark described by a composed ``configs/bench.yaml``.

    Applies ``matmul_precision`` to matmuls and cuDNN alike (so conv and linear are timed
    at the same float32 precision), then runs ``bench.mode`` and writes its CSV/JSON to
    ``paths.output_dir``.

    Returns:
        The rows written (``kernels``: one per measurement; ``epochs``: one per backend).

    Raises:
        ValueError: On an unknown mode, backend, suite, pass or precision.
    """
    if cfg.get("matmul_precision"):
        set_matmul_precision(cfg.matmul_precision)
    if cfg.get("cpu_malloc", "tuned") == "tuned":
        tune_glibc_malloc()
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    mode = cfg.bench.get("mode", "kernels")
    runners: dict[str, Callable[[DictConfig, Path], list[dict[str, Any]]]] = {
        "kernels": run_kernels,
        "epochs": run_epochs,
        "scaling": run_scaling_mode,
    }
    if mode not in runners:
        raise ValueError(f"bench.mode must be one of {list(runners)}, got {mode!r}.")
    return runners[mode](cfg, output_dir)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="bench")
def main(cfg: DictConfig) -> None:
    """Hydra entry point of ``python -m mtan_s1s2.bench``."""
    run_benchmark(cfg)


if __name__ == "__main__":
    main()
