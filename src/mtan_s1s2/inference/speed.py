"""How a scene is classified fastest on this machine: backend, compilation, utilisation.

``predict.py`` decides, before the first tile, with what the training side uses:

* the **precision** (``precision: auto``): :func:`~mtan_s1s2.utils.precision.resolve_precision`,
  bf16 autocast where bf16 matrix products are native, fp32 elsewhere;
* the **MLP backend** (``mlp`` unset): every backend loads any checkpoint, so
  :func:`choose_backend` times forward passes (eval mode, ``torch.inference_mode``, the
  chosen precision) of every backend on a real chunk of the first tile and keeps the
  fastest (a prediction projected under ``tune_min_run_s`` keeps the checkpoint's backend:
  timing would cost more than it saves); ``mlp=linear|conv|channels_last`` forces one. Decisions are cached by
  :func:`~mtan_s1s2.models.backend_selection.cache_key` (device, threads, allocator,
  precision, shapes, widths) in ``decision_cache``, so a repeated run does not time again;
* **compilation** (``compile: auto``): :func:`choose_compile` applies the pay-off rule of
  :func:`~mtan_s1s2.models.compiling.compile_pays_off` to the whole prediction: the eager
  time projected over every pixel to compute in every scene against the compiled time and
  the compilation time (measured once, then cached). A prediction projected under
  ``tune_min_run_s`` eager is not compiled at all.

:class:`ChunkRunner` runs the chosen network on the chunks of
:func:`~mtan_s1s2.inference.scene.prepare_tile`; a compiled network sees every chunk padded
to ``chunk_pixels`` pixels (invalid pixels, cut off again), so it compiles one graph.
:func:`utilisation` turns a scene's time into pixels/s and a fraction of the GEMM peak
(:func:`~mtan_s1s2.utils.flops.gemm_peak`), as training's ``summary.json`` reports it.
"""

from __future__ import annotations

import copy
import json
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from mtan_s1s2.models.backend_selection import cache_key, time_backends_pruned
from mtan_s1s2.models.compiling import (
    COMPILE_COST_S,
    COMPILE_MEASUREMENT,
    CompiledNetwork,
    compile_pays_off,
    compile_seconds,
)
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.utils.flops import model_flops_per_sample
from mtan_s1s2.utils.io import write_json_atomic
from mtan_s1s2.utils.precision import autocast
from mtan_s1s2.utils.timing import timed_call

log = logging.getLogger(__name__)

COMPILE_CHOICES: tuple[object, ...] = (True, False, "auto")
"""Values of ``predict.py``'s ``compile``."""


def check_compile(value: object) -> bool | str:
    """``compile`` of ``predict.yaml``: ``auto``, ``true`` or ``false``.

    Raises:
        ValueError: On another value, naming it.
    """
    if value not in COMPILE_CHOICES:
        raise ValueError(f"compile must be auto, true or false, got {value!r}.")
    return cast("bool | str", value)


def _forward_ms(net: Any, batch: Mapping[str, Any], device: torch.device, precision: str) -> float:
    def call() -> None:
        with torch.inference_mode(), autocast(precision, device):
            net(batch)

    return timed_call(call, device) * 1e3


def time_forward(
    net: nn.Module,
    batch: Mapping[str, Any],
    device: torch.device,
    precision: str = "fp32",
    backends: Sequence[str] | None = None,
    repeats: int = 2,
    warmup: int = 1,
    prune_ratio: float | None = 1.25,
) -> dict[str, list[float]]:
    """Forward times (ms) of a copy of ``net`` per backend, in eval mode, slow backends pruned.

    Every backend runs ``warmup`` untimed passes and one timed pass; those within
    ``prune_ratio`` of the fastest first time run ``repeats - 1`` more.

    Args:
        net: A network with ``set_backend`` (:class:`~mtan_s1s2.models.mtan.MTANClassifier`);
            left untouched.
        batch: A model batch on ``device`` (a chunk of a real tile).
        device: Where to time.
        precision: Autocast precision (``fp32``, ``bf16``, ``fp16``).
        backends: Backends to time (default: every one of
            :data:`~mtan_s1s2.models.layers.mlp.MLP_BACKENDS`).
        repeats: Timed passes of a backend that is not pruned (>= 1).
        warmup: Untimed passes first (>= 0).
        prune_ratio: See above; None times every backend ``repeats`` times.

    Returns:
        Backend -> its timed passes, ms.

    Raises:
        ValueError: On ``repeats < 1``, ``warmup < 0`` or ``prune_ratio < 1`` (checked by
            :func:`~mtan_s1s2.models.backend_selection.time_backends_pruned` before any pass).
    """
    return time_backends_pruned(
        net,
        lambda candidate: _forward_ms(candidate, batch, device, precision),
        device=device,
        train=False,
        backends=backends,
        repeats=repeats,
        warmup=warmup,
        prune_ratio=prune_ratio,
    )


@dataclass
class DecisionCache:
    """Prediction decisions (backend, compilation) kept in a JSON file between runs.

    Args:
        path: The JSON file (None: nothing is kept). An unreadable file is ignored with a
            warning and rewritten.
    """

    path: Path | None
    entries: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = Path(self.path).expanduser()
            if self.path.exists():
                try:
                    self.entries = dict(json.loads(self.path.read_text()))
                except (OSError, json.JSONDecodeError, TypeError, ValueError):
                    log.warning("Ignoring the unreadable prediction decision cache %s", self.path)

    def get(self, key: str) -> dict[str, Any]:
        """The entry of ``key`` (empty if none)."""
        return dict(self.entries.get(key) or {})

    def update(self, key: str, **values: Any) -> None:
        """Merge ``values`` into the entry of ``key`` and write the file (a failure is only logged)."""
        self.entries[key] = {**self.get(key), **values}
        if self.path is None:
            return
        try:
            write_json_atomic(self.path, self.entries)
        except OSError as err:
            log.warning(
                "Could not write the prediction decision cache %s (%s); the next run times again.", self.path, err
            )


def decision_key(net: nn.Module, batch: Mapping[str, Any], device: torch.device, precision: str) -> str:
    """Cache key of a prediction decision (forward passes, so training's decisions are not reused).

    :func:`~mtan_s1s2.models.backend_selection.cache_key` with the precision
    ``predict:<precision>``, of the network in its reference backend (``linear``), so the key
    does not depend on the backend the checkpoint was trained with.
    """
    if hasattr(net, "set_backend") and getattr(net, "backend", "linear") != "linear":
        net = copy.deepcopy(net)
        net.set_backend("linear")  # type: ignore[operator]
    return cache_key(net, batch, device, f"predict:{precision}")


def choose_backend(
    net: nn.Module,
    batch: Mapping[str, Any],
    device: torch.device,
    precision: str,
    cache: DecisionCache,
    forced: str | None = None,
    projected_pixels: int | None = None,
    min_run_s: float = 0.0,
) -> dict[str, Any]:
    """Switch ``net`` to the fastest backend for prediction here (or to ``forced``), and say why.

    A cached decision is used as it is. Otherwise the network's own backend (the
    checkpoint's) is timed first; a prediction projected from it under ``min_run_s``
    (``projected_pixels`` at its speed) keeps it, since timing the others would cost more
    than it can save; longer ones time the other backends too (:func:`time_forward`) and
    keep the fastest, and the decision is cached.

    Args:
        net: The network; switched in place. A network without ``set_backend`` (TempCNN)
            is left as it is.
        batch: A chunk of the first tile, on ``device``.
        device: Where prediction runs.
        precision: Autocast precision.
        cache: Where decisions are kept.
        forced: A backend named on the command line (``mlp=...``): used as it is.
        projected_pixels: Pixels the prediction will compute (None: always time every backend).
        min_run_s: Shortest projected prediction, seconds, for which the backends are timed.

    Returns:
        ``{"backend", "why", "timings_ms" (backend -> median ms, measured or cached; {} when
        nothing was timed), "cached", "cost_s", "key"}``.
    """
    key = decision_key(net, batch, device, precision)
    out: dict[str, Any] = {"timings_ms": {}, "cached": False, "cost_s": 0.0, "key": key}
    if not hasattr(net, "set_backend"):
        return {
            **out,
            "backend": getattr(net, "backend", type(net).__name__),
            "why": "the model has one implementation",
        }
    if forced is not None:
        net.set_backend(forced)  # type: ignore[operator]
        return {**out, "backend": forced, "why": f"mlp={forced} on the command line"}
    pixels = _pixels(batch)
    entry = cache.get(key)
    if entry.get("backend") in MLP_BACKENDS:
        net.set_backend(str(entry["backend"]))  # type: ignore[operator]
        timings = dict(entry.get("timings_ms") or {})
        shown = ", ".join(f"{b} {ms:.0f} ms" for b, ms in timings.items())
        return {**out, "backend": str(entry["backend"]), "why": f"cached decision ({shown} per {pixels} px)",
                "timings_ms": timings, "cached": True}  # fmt: skip
    start = time.perf_counter()
    own = str(getattr(net, "backend", "linear"))
    samples = time_forward(net, batch, device, precision, backends=[own], prune_ratio=None)
    projected_s = statistics.median(samples[own]) / 1e3 / max(pixels, 1) * (projected_pixels or 0)
    if projected_pixels is not None and projected_s < min_run_s:
        timings = {own: statistics.median(samples[own])}
        why = (
            f"the checkpoint's; prediction projected at {projected_s:.0f} s, under {min_run_s:.0f} s: others not timed"
        )
        return {**out, "backend": own, "why": why, "timings_ms": timings, "cost_s": time.perf_counter() - start}
    others = [b for b in MLP_BACKENDS if b != own]
    samples.update(time_forward(net, batch, device, precision, backends=others))
    timings = {b: statistics.median(s) for b, s in samples.items()}
    choice, cost = min(timings, key=timings.__getitem__), time.perf_counter() - start
    cache.update(key, backend=choice, timings_ms=timings)
    net.set_backend(choice)  # type: ignore[operator]
    shown = ", ".join(f"{b} {ms:.0f} ms" for b, ms in timings.items())
    return {
        **out,
        "backend": choice,
        "why": f"fastest forward pass of {pixels} px ({shown}; timed in {cost:.1f} s)",
        "timings_ms": timings,
        "cost_s": cost,
    }


def _pixels(batch: Mapping[str, Any]) -> int:
    mask = next(iter(batch.values()))["mask"]
    return int(mask.shape[-2] * mask.shape[-1])


class ChunkRunner:
    """The network prediction runs: eager, or compiled with every chunk padded to ``chunk_pixels``.

    Args:
        net: The network (on its device, eval mode).
        compiled: A :class:`~mtan_s1s2.models.compiling.CompiledNetwork` of ``net``, or None
            (eager).
        chunk_pixels: Pixels per chunk (batches laid out as one row, ``(1, T, C, 1, n)``);
            a compiled network sees ``n`` padded to it with invalid pixels (so one graph
            serves every chunk). None: batches are fed as they come.

    Attributes:
        compiled_calls: Calls of the compiled network so far.
        first_call_s: Seconds of the first compiled call (compilation included).
    """

    def __init__(self, net: nn.Module, compiled: CompiledNetwork | None = None, chunk_pixels: int | None = None):
        self.net = net
        self.compiled = compiled
        self.chunk_pixels = chunk_pixels
        self.compiled_calls = 0
        self.first_call_s: float | None = None

    def __call__(self, batch: Mapping[str, Any]) -> Tensor:
        """Logits ``(1, K, h, w)`` of ``batch``."""
        if self.compiled is None or not self.compiled.active:
            return cast(Tensor, self.net(batch))
        n = _pixels(batch)
        one_row = next(iter(batch.values()))["mask"].shape[-2] == 1
        if self.chunk_pixels is not None and one_row and n < self.chunk_pixels:
            batch = pad_pixels(batch, self.chunk_pixels)
        start = time.perf_counter()
        logits = self.compiled(batch)
        if self.compiled_calls == 0:
            self.first_call_s = time.perf_counter() - start
        self.compiled_calls += 1
        return logits[..., :n] if one_row else logits


def pad_pixels(batch: Mapping[str, Any], n: int) -> dict[str, dict[str, Tensor]]:
    """A one-row batch ``(1, T, C, 1, w)`` padded to ``w = n`` pixels with invalid observations (x 0, mask False)."""
    out: dict[str, dict[str, Tensor]] = {}
    for m, d in batch.items():
        x, mask = d["x"], d["mask"]
        extra = n - int(x.shape[-1])
        out[m] = {
            **d,
            "x": torch.cat([x, x.new_zeros((*x.shape[:-1], extra))], dim=-1),
            "mask": torch.cat([mask, mask.new_zeros((*mask.shape[:-1], extra))], dim=-1),
        }
    return out


def choose_compile(
    net: nn.Module,
    batch: Mapping[str, Any],
    device: torch.device,
    precision: str,
    requested: bool | str,
    eager_ms: float | None,
    projected_pixels: int,
    cache: DecisionCache,
    key: str,
    chunk_pixels: int | None,
    min_run_s: float = 120.0,
) -> tuple[ChunkRunner, dict[str, Any]]:
    """The runner of prediction, compiled when that pays for itself over the whole prediction.

    ``compile: auto`` (the pay-off rule, :func:`~mtan_s1s2.models.compiling.compile_pays_off`,
    over pixels: eager and compiled seconds per pixel times the pixels to compute, against
    the compilation time):

    1. a cached measurement of this key (compiled and eager pixels/s timed side by side,
       compilation s) decides without compiling anything;
    2. otherwise a prediction projected under ``min_run_s`` eager is not compiled, nor one
       whose largest possible saving is under the compile-time formula
       (:func:`forward_compile_worth_measuring`: decided without compiling anything);
    3. otherwise the network is compiled and timed on ``batch`` (padded to ``chunk_pixels``:
       the first call, then three more alternating with eager passes, :func:`_measure_compiled`);
       the measurement is cached and the rule decides (a rejected compilation leaves the
       network eager).

    Args:
        net: The network, switched to its backend, on ``device``, eval mode.
        batch: A chunk of the first tile, on ``device``.
        device: Where prediction runs.
        precision: Autocast precision.
        requested: ``auto``, True or False (``compile``).
        eager_ms: Eager forward ms of ``batch`` (None: timed here, for ``auto`` only).
        projected_pixels: Pixels the prediction will compute (every scene).
        cache: Where measurements are kept.
        key: The decision's cache key (:func:`decision_key`).
        chunk_pixels: Pixels per chunk (the compiled network's static width).
        min_run_s: Below this projected eager time, nothing is compiled.

    Returns:
        ``(runner, record)`` with ``record = {"compiled", "why", "eager_px_per_s",
        "compiled_px_per_s", "compile_s", "projected_pixels", "projected_eager_s", "cached"}``.
    """
    eager = ChunkRunner(net, None, chunk_pixels)

    def compiled_runner(reason: str) -> ChunkRunner:
        return ChunkRunner(net, CompiledNetwork(net, reason), chunk_pixels)

    record: dict[str, Any] = {
        "compiled": False, "eager_px_per_s": None, "compiled_px_per_s": None, "compile_s": None,
        "projected_pixels": int(projected_pixels), "projected_eager_s": None, "cached": False,
    }  # fmt: skip
    if requested is False:
        return eager, {**record, "why": "compile=false"}
    if requested is True:
        return compiled_runner("compile=true"), {**record, "compiled": True, "why": "compile=true"}
    if eager_ms is None:
        _forward_ms(net, batch, device, precision)  # warm-up
        eager_ms = _forward_ms(net, batch, device, precision)
    eager_s_px = eager_ms / 1e3 / max(_pixels(batch), 1)
    projected_s = eager_s_px * projected_pixels
    record.update(eager_px_per_s=1.0 / eager_s_px if eager_s_px > 0 else None, projected_eager_s=projected_s)

    def verdict(compiled_px_per_s: float, eager_px_per_s: float, compile_s: float, how: str) -> tuple[bool, str]:
        pays, saving = compile_pays_off(1.0 / eager_px_per_s, 1.0 / compiled_px_per_s, int(projected_pixels), compile_s)
        return pays, (
            f"{how}: compiled {compiled_px_per_s:.0f} px/s vs eager {eager_px_per_s:.0f} px/s over "
            f"{int(projected_pixels)} px saves {saving:.0f} s for {compile_s:.0f} s of compilation"
        )

    entry = cache.get(key).get("compile")
    if entry and entry.get("measurement") == COMPILE_MEASUREMENT:  # older entries timed eager apart
        pays, why = verdict(
            float(entry["compiled_px_per_s"]), float(entry["eager_px_per_s"]), float(entry["compile_s"]), "cached"
        )
        record.update(compiled_px_per_s=entry["compiled_px_per_s"], compile_s=entry["compile_s"], cached=True)
        if pays:
            return compiled_runner(f"auto: {why}"), {**record, "compiled": True, "why": why}
        return eager, {**record, "why": why}
    if projected_s < min_run_s:
        why = f"projected at {projected_s:.0f} s eager, under tune_min_run_s={min_run_s:.0f}: not worth compiling"
        return eager, {**record, "why": why}
    worth, why = forward_compile_worth_measuring(projected_s, eager_ms / 1e3, device)
    if not worth:
        return eager, {**record, "why": why}
    runner = compiled_runner("auto")
    measured = _measure_compiled(runner, eager, batch, device, precision, max(_pixels(batch), int(chunk_pixels or 0)))
    if isinstance(measured, str):
        return eager, {**record, "why": measured}
    compiled_px_per_s, compile_s, eager_px_per_s = measured
    cache.update(
        key,
        compile={
            "compiled_px_per_s": compiled_px_per_s,
            "eager_px_per_s": eager_px_per_s,
            "compile_s": compile_s,
            "measurement": COMPILE_MEASUREMENT,
        },
    )
    pays, why = verdict(compiled_px_per_s, eager_px_per_s, compile_s, "measured")
    record.update(compiled_px_per_s=compiled_px_per_s, compile_s=compile_s)
    if pays and runner.compiled is not None:
        runner.compiled.status = f"on (auto: {why})"
        return runner, {**record, "compiled": True, "why": why}
    return eager, {**record, "why": why}


def _measure_compiled(
    runner: ChunkRunner,
    eager: ChunkRunner,
    batch: Mapping[str, Any],
    device: torch.device,
    precision: str,
    width: int,
    repeats: int = 3,
) -> tuple[float, float, float] | str:
    """``(compiled px/s, compilation s, eager px/s)``, or why compiling failed.

    The compiled runner's first call (the compilation), then ``repeats`` compiled passes
    alternating with ``repeats`` eager passes of ``eager``, so both sides are timed in the same
    moment of the same process (as :func:`~mtan_s1s2.models.compiling.decide_compile` does for
    training); medians.
    """
    assert runner.compiled is not None
    try:
        first = _forward_ms(runner, batch, device, precision)
        later: list[float] = []
        eager_ms: list[float] = []
        for _ in range(repeats):
            later.append(_forward_ms(runner, batch, device, precision))
            eager_ms.append(_forward_ms(eager, batch, device, precision))
    except Exception as err:  # compilers fail in many ways; eager always works
        return f"compilation failed ({type(err).__name__}): eager"
    if not runner.compiled.active:
        return f"compilation failed ({runner.compiled.status}): eager"
    compile_s = compile_seconds(first / 1e3, [t / 1e3 for t in later])
    return width / (statistics.median(later) / 1e3), compile_s, width / (statistics.median(eager_ms) / 1e3)


FORWARD_COMPILE_MAX_GAIN = 0.45
"""Largest share of an eager forward pass that compiling is expected to save. Measured on the
whole model in fp32 (docs/results.md, "Utilisation and compilation"): compiled forward passes
took 0.58 (linear), 0.82 (conv) and 0.72 (channels_last) of the eager time, 18-42 % saved."""

FORWARD_COMPILE_COST_PASSES = 75.0
"""Compile-time formula of prediction on CPU: compiling the forward pass takes about this many
eager forward passes of the chunk it is measured on (356 s of compilation against 4.7 s per
eager 4096 px chunk on the 2-core CPU, docs/results.md "A whole scene"). Expressed in passes,
it holds on a slower or busier machine, where both sides slow down alike."""


def forward_compile_worth_measuring(
    projected_eager_s: float,
    eager_chunk_s: float,
    device: torch.device,
    max_gain: float = FORWARD_COMPILE_MAX_GAIN,
    cost_passes: float = FORWARD_COMPILE_COST_PASSES,
    cost_s: float = COMPILE_COST_S,
) -> tuple[bool, str]:
    """The projected-run rule of prediction: could compiling pay off over this prediction at all?

    The largest saving is ``projected_eager_s x max_gain``; measuring a compilation is only
    worth it when that exceeds the compile-time formula: ``cost_passes`` eager chunk passes
    on CPU, ``cost_s`` seconds on CUDA (:data:`~mtan_s1s2.models.compiling.COMPILE_COST_S`).

    Args:
        projected_eager_s: Eager seconds of the whole prediction (every pixel to compute).
        eager_chunk_s: Eager seconds of one chunk's forward pass.
        device: Where prediction runs.
        max_gain: Largest share of an eager pass compiling saves, in (0, 1).
        cost_passes: CPU compile-time formula, in eager chunk passes.
        cost_s: CUDA compile-time formula, seconds.

    Returns:
        ``(worth, why)``; ``why`` gives both sides in seconds.
    """
    saving_s = projected_eager_s * max_gain
    compile_s = cost_s if device.type == "cuda" else cost_passes * eager_chunk_s
    if saving_s > compile_s:
        return True, f"{projected_eager_s:.0f} s eager x {max_gain:.2f} max gain > ~{compile_s:.0f} s to compile"
    return False, (
        f"projected at {projected_eager_s:.0f} s eager: {max_gain:.2f} max gain saves {saving_s:.0f} s at most, "
        f"under the ~{compile_s:.0f} s a compilation takes: not compiled"
    )


def forward_flops_per_pixel(net: nn.Module, batch: Mapping[str, Any]) -> float:
    """Forward FLOPs per pixel of ``net`` on a batch shaped like ``batch`` (counted on ``meta``: nothing runs).

    Args:
        net: The network.
        batch: A model batch (its pixel count divides the total).

    Returns:
        Matmul and convolution FLOPs of one forward pass, per pixel.
    """
    return model_flops_per_sample(net, batch, backward=False) / max(_pixels(batch), 1)


def utilisation(
    n_pixels: int,
    n_computed: int,
    seconds: float,
    flops_per_pixel: float | None,
    peak_gflop_per_s: float | None,
) -> dict[str, Any]:
    """Speed of a prediction: pixels/s and the fraction of the GEMM peak its counted work reached.

    Args:
        n_pixels: Pixels of the maps (every pixel of the scenes).
        n_computed: Pixels the model computed (the others had no valid observation).
        seconds: Wall time of the tiles (reading, classifying, writing).
        flops_per_pixel: Forward FLOPs per computed pixel (:func:`forward_flops_per_pixel`).
        peak_gflop_per_s: :func:`~mtan_s1s2.utils.flops.gemm_peak` of the device and precision.

    Returns:
        ``{"pixels_per_s", "computed_pixels_per_s", "flops_per_pixel", "achieved_gflop_per_s",
        "gemm_peak_gflop_per_s", "fraction_of_peak"}`` (None where unknown).
    """
    rate = n_pixels / seconds if seconds > 0 else None
    computed_rate = n_computed / seconds if seconds > 0 else None
    achieved = flops_per_pixel * computed_rate / 1e9 if flops_per_pixel and computed_rate else None
    return {
        "pixels_per_s": rate,
        "computed_pixels_per_s": computed_rate,
        "flops_per_pixel": flops_per_pixel,
        "achieved_gflop_per_s": achieved,
        "gemm_peak_gflop_per_s": peak_gflop_per_s,
        "fraction_of_peak": achieved / peak_gflop_per_s if achieved and peak_gflop_per_s else None,
    }


__all__ = [
    "COMPILE_CHOICES",
    "ChunkRunner",
    "DecisionCache",
    "check_compile",
    "choose_backend",
    "choose_compile",
    "decision_key",
    "forward_compile_worth_measuring",
    "forward_flops_per_pixel",
    "pad_pixels",
    "time_forward",
    "utilisation",
]
