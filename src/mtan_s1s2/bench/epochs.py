"""Epoch-throughput mode: ``train.py`` per backend, each in a fresh process, side by side.

``python -m mtan_s1s2.bench bench.mode=epochs`` trains every backend for a few short
epochs (fixed steps per epoch with ``trainer.limit_train_batches``, no validation, no test,
timing callbacks only), reads each run's ``summary.json`` (median training samples/s over
the epochs after the first, which is warm-up: allocator growth, kernel selection,
``mlp=auto`` timing) and reports samples/s per backend with the ratios to ``linear``,
``conv`` and the fastest backend. This is how the CPU target "``channels_last`` >= 1.25x
the samples/s of ``conv``, ``auto`` within 5 % of the fastest" is measured.

Several rounds (``bench.epochs.rounds``) rotate the backend order so that a slow drift of
the machine does not favour one backend; the median over rounds is reported. Runs can also
be repeated per C allocator (``bench.epochs.allocators=[glibc,glibc_tuned,tcmalloc]``), which
sets or clears ``LD_PRELOAD`` and glibc's malloc tunables for the child process; the
allocator each child actually used (from its ``summary.json``) is reported next to the
requested one.
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.models.layers.mlp import BACKEND_CHOICES
from mtan_s1s2.run_record import SUMMARY_FILE, RunRecord, speedups
from mtan_s1s2.utils.allocator import CACHING_ALLOCATORS, find_allocator_library, glibc_malloc_env
from mtan_s1s2.utils.precision import check_precision

log = logging.getLogger(__name__)

ALLOCATOR_CHOICES: tuple[str, ...] = ("current", "glibc", "glibc_tuned", *CACHING_ALLOCATORS)


def mlp_options(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Options of the ``mlp`` config group: every backend ``train.py`` accepts, ``auto`` too.

    The registry's backends come first, in its order
    (:data:`~mtan_s1s2.models.layers.mlp.BACKEND_CHOICES`).
    """
    names = sorted(p.stem for p in (config_dir / "mlp").glob("*.yaml"))
    order = list(BACKEND_CHOICES)
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


@dataclass
class EpochBenchConfig:
    """Settings of the epoch-throughput mode (config ``bench.epochs``).

    Attributes:
        backends: ``mlp`` options to train (None: all of :func:`mlp_options`).
        data: ``data`` config option of the training runs.
        max_epochs: Epochs per run; the first is warm-up and excluded (needs >= 2).
        limit_train_batches: Training steps per epoch (``trainer.limit_train_batches``).
        precision: ``trainer.precision`` of the runs (``32-true``, ``bf16-mixed``, ``16-mixed``,
            ``auto``).
        matmul_precision: Top-level ``matmul_precision`` of the runs.
        accelerator: ``cpu`` or ``gpu`` (``trainer`` option).
        in_memory: Generate the training patches of one epoch once and serve them from
            memory (:mod:`mtan_s1s2.bench.data`), so that epochs time the model rather than
            the on-the-fly data generator (use on GPUs, where generation is the bottleneck).
        rounds: Runs per backend; the backend order rotates every round.
        allocators: C allocators to run with: ``current`` (inherit ``LD_PRELOAD``),
            ``glibc`` (clear it and any glibc malloc tunables, and do not tune it in-process:
            glibc's default),
            ``glibc_tuned`` (glibc with ``GLIBC_TUNABLES`` =
            :data:`~mtan_s1s2.utils.allocator.GLIBC_TUNED`), ``tcmalloc``/``jemalloc``/
            ``mimalloc`` (preload the installed library) or a path to a shared object.
        overrides: Extra ``train.py`` overrides for every run.
        variants: Name -> extra overrides of one configuration to train every backend with
            (e.g. ``{eager: [], compiled: [model.compile=true]}``); every backend runs once
            per variant, allocator and round.
        commands: Name -> overrides of one plain ``train.py`` command, run once per
            allocator and round instead of the ``backends`` x ``variants`` grid. Neither
            ``mlp`` nor ``trainer.precision`` is set for them: ``{default: []}`` is
            ``python train.py`` (``mlp=auto``, ``precision: auto``, ``model.compile=auto``),
            ``{conv: [mlp=conv]}`` is ``python train.py mlp=conv``, ``{fp32_linear:
            [mlp=linear, trainer.precision=32-true, model.compile=false]}`` a fixed
            configuration. Their row's ``backend`` is the ``mlp`` they give (``auto`` if none).
        timeout_s: Seconds after which one run is killed and marked failed.
    """

    backends: Sequence[str] | None = None
    data: str = "synthetic"
    max_epochs: int = 4
    limit_train_batches: int = 8
    precision: str = "32-true"
    matmul_precision: str = "highest"
    accelerator: str = "cpu"
    in_memory: bool = False
    rounds: int = 1
    allocators: Sequence[str] = ("current",)
    overrides: Sequence[str] = field(default_factory=list)
    variants: dict[str, list[str]] = field(default_factory=lambda: {"eager": []})
    commands: dict[str, list[str]] | None = None
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.max_epochs < 2:
            raise ValueError(f"bench.epochs.max_epochs must be >= 2 (epoch 0 is warm-up), got {self.max_epochs}.")
        if self.limit_train_batches < 1 or self.rounds < 1:
            raise ValueError(
                f"bench.epochs.limit_train_batches and rounds must be >= 1, got "
                f"{self.limit_train_batches} and {self.rounds}."
            )
        check_precision(self.precision, "bench.epochs.precision")
        if self.accelerator not in ("cpu", "gpu"):
            raise ValueError(f"bench.epochs accelerator must be 'cpu' or 'gpu', got {self.accelerator!r}.")
        known = mlp_options()
        bad = [b for b in self.backends or () if b not in known]
        if bad:
            raise ValueError(f"Unknown backend(s) {bad} for bench.epochs.backends; choose among {known}.")


def allocator_env(name: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a child process running with allocator ``name``.

    Raises:
        ValueError: On an unknown name, or an allocator whose library is not installed.
    """
    env = dict(os.environ if environ is None else environ)
    if name == "current":
        return env
    preload = [
        p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if not any(a in p for a in CACHING_ALLOCATORS)
    ]
    # Every other choice starts from glibc's default malloc settings.
    env = glibc_malloc_env(env, tuned=name == "glibc_tuned")
    if name in ("glibc", "glibc_tuned"):
        lib = None
    elif name in ALLOCATOR_CHOICES:
        lib = find_allocator_library(name)
        if lib is None:
            pkg = {"tcmalloc": "libgoogle-perftools4", "jemalloc": "libjemalloc2", "mimalloc": "libmimalloc2.0"}[name]
            raise ValueError(
                f"bench.epochs.allocators has {name!r} but no lib{name} is installed (e.g. `apt-get install {pkg}`)."
            )
    elif os.path.isfile(name):
        lib = name
    else:
        raise ValueError(
            f"Unknown allocator {name!r}: choose among {list(ALLOCATOR_CHOICES)} or give the path of a shared object."
        )
    preload = ([lib] if lib else []) + preload
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def command_backend(overrides: Sequence[str]) -> str:
    """The ``mlp`` option a list of ``train.py`` overrides asks for (the last one wins); ``auto`` if none."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("mlp=")]
    return given[-1] if given else "auto"


def train_command(
    backend: str | None, run_dir: Path, cfg: EpochBenchConfig, allocator: str = "current", name: str | None = None
) -> list[str]:
    """``python -m mtan_s1s2.bench.train_entry`` with the overrides of one timed run.

    ``allocator="glibc"`` times glibc's default ``malloc``, so the run does not tune it
    in-process either (``cpu_malloc=default``). ``backend=None`` is a plain ``train.py``
    command of :attr:`EpochBenchConfig.commands`: neither ``mlp`` nor ``trainer.precision``
    is set.
    """
    chosen = [] if backend is None else [f"mlp={backend}", f"trainer.precision={cfg.precision}"]
    cmd = [
        sys.executable,
        "-m",
        "mtan_s1s2.bench.train_entry",
        *chosen,
        f"data={cfg.data}",
        f"trainer={cfg.accelerator}",
        "callbacks=timing_only",
        "logger=csv",
        "test=false",
        f"trainer.max_epochs={cfg.max_epochs}",
        f"++trainer.limit_train_batches={cfg.limit_train_batches}",  # ++: add or override
        "++trainer.limit_val_batches=0",  # no validation: it is not timed anyway
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        f"matmul_precision={cfg.matmul_precision}",
        f"task_name=bench_epochs_{name or backend}",
        f"hydra.run.dir={run_dir}",
    ]
    if allocator == "glibc":
        cmd.append("cpu_malloc=default")
    if cfg.in_memory:
        cmd += [
            "data._target_=mtan_s1s2.bench.data.InMemorySyntheticDataModule",
            f"+data.steps_per_epoch={cfg.limit_train_batches}",
        ]
    return cmd + list(cfg.overrides)


def _allocator_label(info: dict[str, Any]) -> str | None:
    if not info.get("name"):
        return None
    if info["name"] == "glibc":
        return "glibc (tuned)" if info.get("tuned") else "glibc (default)"
    return str(info["name"])


def _summary_row(summary: RunRecord) -> dict[str, Any]:
    auto = summary.auto_backend
    t = summary.timing
    return {
        "samples_per_s": t.median_train_samples_per_s,
        "epoch_s": t.median_train_epoch_s,
        "std_epoch_s": t.std_train_epoch_s,
        "n_timed_epochs": t.n_timed_epochs,
        "trained_backend": summary.backend,
        "auto_choice": auto.get("choice") if isinstance(auto, dict) else None,
        "auto_timings_ms": auto.get("timings_ms") if isinstance(auto, dict) else None,
        "allocator_used": _allocator_label(summary.allocator),
        "peak_memory_mb": summary.peak_memory_mb,
        "epoch_samples_per_s": [e.train_samples_per_s for e in t.epochs],
        "precision": summary.precision,
        "compile": summary.compile,
        "compile_s": summary.compile_s,
        "n_compiles": summary.n_compiles,
        "fraction_of_peak": (summary.utilisation or {}).get("fraction_of_peak"),
        "precision_reason": summary.precision_reason,
        "choices_line": (summary.choices or {}).get("line"),
    }


def run_epoch_benchmark(cfg: EpochBenchConfig, output_dir: Path) -> list[dict[str, Any]]:
    """Train each backend (per allocator, per round) in a fresh process; one row per run.

    Args:
        cfg: Settings.
        output_dir: Runs go to ``<output_dir>/epochs/<allocator>/r<round>_<backend>``.

    Returns:
        One row per run: ``allocator``, ``round``, ``backend``, ``status``, ``samples_per_s``
        (median over timed epochs), ``epoch_s``, ``n_timed_epochs``, ``trained_backend``,
        ``auto_choice``, ``allocator_used``, ``wall_s``, ``cpu_user_s``, ``cpu_sys_s``,
        ``minor_page_faults`` (whole run), ``run_dir``.
    """
    backends = list(cfg.backends) if cfg.backends else mlp_options()
    envs = {a: allocator_env(a) for a in cfg.allocators}  # fail before any run on a missing lib
    combos: list[tuple[str, str | None]] = (
        [(name, None) for name in cfg.commands] if cfg.commands else [(v, b) for v in cfg.variants for b in backends]
    )
    rows: list[dict[str, Any]] = []
    for alloc in cfg.allocators:
        for rnd in range(cfg.rounds):
            order = combos[rnd % len(combos) :] + combos[: rnd % len(combos)]
            for variant, grid_backend in order:
                extra = list(cfg.commands[variant]) if cfg.commands else list(cfg.variants[variant])
                backend = grid_backend or command_backend(extra)
                safe_alloc = Path(alloc).name if os.sep in alloc else alloc
                run_dir = (output_dir / "epochs" / safe_alloc / f"r{rnd}_{backend}_{variant}").resolve()
                run_dir.mkdir(parents=True, exist_ok=True)
                cmd = train_command(grid_backend, run_dir, cfg, alloc, name=variant) + extra
                log.info("[%s, round %d] %s", alloc, rnd, " ".join(cmd[1:]))
                row: dict[str, Any] = {
                    "allocator": alloc,
                    "round": rnd,
                    "backend": backend,
                    "variant": variant,
                    "run_dir": str(run_dir),
                }
                start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                with open(run_dir / "stdout.log", "w") as out:
                    try:
                        proc = subprocess.run(
                            cmd,
                            env={**envs[alloc], "HYDRA_FULL_ERROR": "1"},
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            timeout=cfg.timeout_s,
                            check=False,
                        )
                        code: int | str = proc.returncode
                    except subprocess.TimeoutExpired:
                        code = f"timeout after {cfg.timeout_s:.0f} s"
                row["wall_s"] = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                # CPU time and page faults of the whole run (start-up and warm-up included):
                # they show an allocator's effect even on a busy machine, where wall time does not.
                row["cpu_user_s"] = after.ru_utime - usage.ru_utime
                row["cpu_sys_s"] = after.ru_stime - usage.ru_stime
                row["minor_page_faults"] = after.ru_minflt - usage.ru_minflt
                summary_path = run_dir / SUMMARY_FILE
                if code == 0 and summary_path.exists():
                    row.update(status="ok", **_summary_row(RunRecord.read(summary_path)))
                else:
                    tail = (run_dir / "stdout.log").read_text().strip().splitlines()[-5:]
                    row.update(status=f"failed ({code})", error=" | ".join(tail))
                    log.error("Run %s failed (%s); see %s/stdout.log", backend, code, run_dir)
                rows.append(row)
    return rows


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median samples/s over rounds per (allocator, variant, backend), with ratios.

    Adds ``speedup_vs_linear``, ``speedup_vs_conv`` (samples/s ratios within the same
    allocator and variant, > 1 = faster), ``fraction_of_fastest`` (1.0 = the fastest run of
    the whole benchmark) and ``speedup_vs_reference``: the ratio to ``linear`` under the
    first allocator and variant (with ``allocators=[glibc, ...]`` and an eager fp32 first
    variant: the package's former default), or to the first command of
    :attr:`EpochBenchConfig.commands`. ``wall_s`` is the median wall time of the whole
    command (start-up, backend timing, compilation and every epoch); ``choices`` the
    run's one-line account of its backend, precision and compilation.
    """
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["allocator"], r.get("variant", "eager"), r["backend"]), []).append(r)
    out: list[dict[str, Any]] = []
    for (alloc, variant, backend), members in groups.items():
        ok = [m for m in members if m["status"] == "ok" and m.get("samples_per_s")]
        rates = [m["samples_per_s"] for m in ok]
        out.append(
            {
                "allocator": alloc,
                "variant": variant,
                "allocator_used": ok[0].get("allocator_used") if ok else None,
                "backend": backend,
                "trained_backend": ok[0].get("trained_backend") if ok else None,
                "auto_choice": ok[0].get("auto_choice") if ok else None,
                "precision": ok[0].get("precision") if ok else None,
                "compile": ok[0].get("compile") if ok else None,
                "runs_ok": len(ok),
                "runs": len(members),
                "samples_per_s": statistics.median(rates) if rates else None,
                "samples_per_s_min": min(rates) if rates else None,
                "samples_per_s_max": max(rates) if rates else None,
                "epoch_s": statistics.median([m["epoch_s"] for m in ok]) if ok else None,
                **{
                    k: statistics.median([m[k] for m in ok]) if ok and all(m.get(k) is not None for m in ok) else None
                    for k in ("cpu_user_s", "cpu_sys_s", "minor_page_faults", "fraction_of_peak", "compile_s")
                },
                "n_timed_epochs": ok[0].get("n_timed_epochs") if ok else None,
                "wall_s": statistics.median(walls)
                if (walls := [m["wall_s"] for m in members if "wall_s" in m])
                else None,
                "choices": ok[0].get("choices_line") if ok else None,
            }
        )
    for alloc, variant in dict.fromkeys((r["allocator"], r["variant"]) for r in out):
        members = [r for r in out if (r["allocator"], r["variant"]) == (alloc, variant)]
        backend_rates = {r["backend"]: r["samples_per_s"] for r in members}
        ratios = {ref: speedups(backend_rates, ref, "rate") for ref in ("linear", "conv")}
        for r in members:
            for ref in ("linear", "conv"):
                r[f"speedup_vs_{ref}"] = ratios[ref][r["backend"]]
    fastest = max((r["samples_per_s"] for r in out if r["samples_per_s"]), default=None)
    first = (out[0]["allocator"], out[0]["variant"]) if out else None
    reference = next(
        (r["samples_per_s"] for r in out if (r["allocator"], r["variant"]) == first and r["backend"] == "linear"),
        out[0]["samples_per_s"] if out else None,  # commands: the first one
    )
    for r in out:
        v = r["samples_per_s"]
        r["fraction_of_fastest"] = v / fastest if v and fastest else None
        r["speedup_vs_reference"] = v / reference if v and reference else None
    return out


__all__ = [
    "ALLOCATOR_CHOICES",
    "EpochBenchConfig",
    "aggregate",
    "allocator_env",
    "command_backend",
    "mlp_options",
    "run_epoch_benchmark",
    "train_command",
]
