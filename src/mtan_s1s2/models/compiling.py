"""``torch.compile`` of the classifiers, in one place.

Everything the package does with ``torch.compile`` lives here, and every caller uses it:

* :func:`compiled_inputs`: what a compiled network is fed (a dynamic batch axis, the date
  axis padded to a few static lengths).
* :func:`compile_or_eager`: compile a module, falling back to eager execution with a
  warning when compiling fails (the benchmarks).
* :class:`CompiledNetwork`: the network of a training run (``model.compile=true``, or
  ``mlp=auto``'s decision): date buckets shared by training, validation and test, eager
  fallback, and every compilation counted and timed (``n_compiles`` and ``compile_s`` in
  ``summary.json``).
* :func:`compile_seconds`: the compilation time of a first call (its excess over the
  median of later calls with a compiled graph).
* :func:`compile_pays_off` and :func:`decide_compile`: the pay-off rule (compile when the
  projected saving over the run exceeds the compilation time), as the
  :class:`~mtan_s1s2.callbacks.auto_backend.AutoBackend` callback applies it for
  ``model.compile=auto``.
* :func:`compile_worth_measuring`: the projected-run rule with the compile-time formula,
  which decides *before* anything is compiled whether a compilation could pay off at all,
  so a short run pays neither a compilation nor its measurement.

Graphs. Dynamo compiles one graph per combination of what it guards on: the static date
counts, the module's train/eval mode and the autograd mode. Training (train mode,
gradients, dropout) therefore compiles its own graph and validation and test (eval mode,
no autograd: ``torch.inference_mode``) share another, per date bucket: with dropout in
the graph there is no sharing between the two. What is shared is the bucket: every stage
pads to the same date counts, and a bucket only grows (:attr:`CompiledNetwork.min_dates`),
so a date count that varies from batch to batch (5..20 dates: buckets 8, 16, 24) compiles
at most one graph per bucket reached and mode, and none once the largest bucket is in use.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import statistics
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from mtan_s1s2.data.batch import pad_dates
from mtan_s1s2.utils.timing import clock, timed_call

log = logging.getLogger(__name__)

COMPILE_DATE_MULTIPLE = 8
"""A compiled network sees date counts rounded up to this multiple (:func:`compiled_inputs`)."""

STEADY_SAMPLES = 5
"""Steps per stage without a new graph that :class:`CompiledNetwork` times, for :func:`compile_seconds`."""


def compiled_inputs(
    inputs: Mapping[str, Any], multiple: int = COMPILE_DATE_MULTIPLE, min_dates: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The inputs of a ``torch.compile``d network: a dynamic batch axis, a few static date counts.

    Batches differ in size (the last one) and in their number of dates (padding to the
    longest series of the batch). The batch axis is marked dynamic, so it never
    recompiles. The date axis is padded with invalid dates (:func:`~mtan_s1s2.data.batch.pad_dates`,
    no effect on the outputs) up to a multiple of ``multiple``, and at least to
    ``min_dates``, and kept static: a dynamic date axis makes inductor's backward of the
    ``conv`` backend assume the strides of its first date count (``AssertionError:
    expected ... stride`` on the next one, torch 2.13), while static counts compile once
    per bucket (one graph for the default synthetic data, whose S2 and S1 counts stay
    within one multiple of 8).

    Args:
        inputs: ``{modality: {"x": (B, T, C, H, W), "doy": (B, T), "mask": (B, T, H, W)}}``.
        multiple: Granularity of the padded ``T`` (1: no rounding).
        min_dates: Modality -> smallest padded ``T`` (a multiple of ``multiple``); None = none.

    Returns:
        The padded inputs, the same structure.
    """
    padded = pad_dates(inputs, multiple)
    for m, floor in (min_dates or {}).items():
        if m in padded and padded[m]["doy"].shape[1] < floor:
            padded[m] = pad_dates({m: padded[m]}, int(floor))[m]
    for value in padded.values():
        for key in ("x", "doy", "mask"):
            tensor = value[key]
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
            torch._dynamo.mark_static(tensor, 1)
    return padded


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled in this process so far (its ``unique_graphs`` counter)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def compile_seconds(first_s: float, later_s: Sequence[float]) -> float:
    """Compilation time of a call that compiled: its excess over the median later call.

    Args:
        first_s: Seconds of the call that compiled (compilation plus one execution).
        later_s: Seconds of comparable calls that did not compile; empty = the whole
            first call counts as compilation (an overestimate by one execution).

    Returns:
        Seconds, >= 0.
    """
    if not later_s:
        return max(float(first_s), 0.0)
    return max(float(first_s) - statistics.median(later_s), 0.0)


def compile_pays_off(eager_s: float, compiled_s: float, steps: int, compile_s: float) -> tuple[bool, float]:
    """The pay-off rule: compile when the projected saving over the run exceeds the compilation time.

    Args:
        eager_s: Seconds of one eager step.
        compiled_s: Seconds of one compiled step (compilation excluded).
        steps: Steps the run will take.
        compile_s: Seconds of compilation.

    Returns:
        ``(pays_off, saving_s)`` with ``saving_s = (eager_s - compiled_s) x steps``.
    """
    saving_s = (eager_s - compiled_s) * steps
    return saving_s > compile_s, saving_s


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]


def compile_or_eager(
    module: nn.Module, enabled: bool = True, probe: Callable[[nn.Module], Any] | None = None, reset: bool = False
) -> tuple[nn.Module, str]:
    """``torch.compile`` a module, falling back to eager with a warning if that fails.

    Compilation is lazy, so ``probe(compiled)`` (one representative call) is run here and
    any error it raises triggers the fallback.

    Args:
        module: What to compile.
        enabled: False returns ``module`` unchanged (status ``eager``).
        probe: One call of the compiled module that compiles it; None = compile lazily
            (errors then surface at the first call).
        reset: Reset Dynamo's caches first. The benchmarks do: every workload compiles
            the same ``forward`` code for another module (backend, precision, pass), which
            would otherwise pile up guards and hit the recompile limit.

    Returns:
        ``(module, status)``: status ``"eager"``, ``"compiled"`` or
        ``"fallback: <ErrorType>: <message>"``.
    """
    if not enabled:
        return module, "eager"
    if reset:
        torch._dynamo.reset()
    try:
        compiled = cast(nn.Module, torch.compile(module))  # an OptimizedModule
        if probe is not None:
            probe(compiled)
        return compiled, "compiled"
    except Exception as err:  # compilers fail in many ways; eager always works
        msg = _error_text(err)
        warnings.warn(f"torch.compile failed ({msg}); running eager instead.", stacklevel=2)
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # drop half-built graphs
        return module, f"fallback: {msg}"


class CompiledNetwork:
    """A classifier run through ``torch.compile``, with every compilation counted and timed.

    Deliberately not an ``nn.Module``: a training module holds it as a plain attribute
    next to its network, so the weights appear once in a checkpoint, under the
    network's own names (a registered ``OptimizedModule`` would add an
    ``_orig_mod.``-prefixed copy of every weight, which an eager model cannot load).

    Calls pad the dates (:func:`compiled_inputs`) to buckets that only grow, shared by
    every stage (see the module docstring). A network with a fixed date count
    (``seq_len``, e.g. TempCNN) is fed unpadded. If a compiled call raises, it warns once,
    switches to eager execution for good and records why in :attr:`status`.

    Timing: :meth:`start_step` and :meth:`end_step` bracket each step of a stage (the
    Lightning hooks of a training step, which includes the lazily compiled backward, and
    of validation and test steps). A step during which Dynamo compiled is recorded in
    :attr:`compilations` with its duration; :attr:`compile_s` sums the excess of each
    over the median of the same stage's steps that did not compile
    (:func:`compile_seconds`).

    Args:
        net: The network (``inputs -> logits``).
        reason: Why it is compiled (``model.compile=true``, ``auto: ...``), in :attr:`status`.
        multiple: Date-count granularity (:data:`COMPILE_DATE_MULTIPLE`).
        backend: ``torch.compile`` backend: ``inductor`` (generated kernels: the speed-up),
            or ``eager``/``aot_eager`` (Dynamo's graph capture, guards and recompiles
            without code generation: for debugging a compilation, and for tests).

    Attributes:
        status: ``on (reason)`` or ``failed, eager fallback: <Error>``.
        min_dates: Modality -> the largest padded date count used so far.
        compilations: One dict per step that compiled: ``stage``, ``graphs`` (new Dynamo
            graphs), ``dates`` (padded date count per modality) and ``step_s``.
    """

    def __init__(
        self,
        net: nn.Module,
        reason: str = "model.compile=true",
        multiple: int = COMPILE_DATE_MULTIPLE,
        backend: str = "inductor",
    ):
        self.net = net
        self.multiple = 1 if getattr(net, "seq_len", None) is not None else int(multiple)
        self.status = f"on ({reason})"
        self.min_dates: dict[str, int] = {}
        self.compilations: list[dict[str, Any]] = []
        self._steady: dict[str, list[float]] = {}
        self._step: tuple[float, int] | None = None
        self._compiled: Callable[..., Tensor] | None
        try:
            self._compiled = torch.compile(net, backend=backend)
        except Exception as err:  # e.g. no compiler for this platform
            warnings.warn(f"torch.compile unavailable ({_error_text(err)}); using eager mode.", stacklevel=2)
            self._compiled = None
            self.status = f"failed, eager fallback: {type(err).__name__}"

    @property
    def active(self) -> bool:
        """Whether calls still run the compiled network (False after a fallback)."""
        return self._compiled is not None

    def __call__(self, inputs: Mapping[str, Any]) -> Tensor:
        """Logits of ``inputs`` (``{modality: {x, doy, mask}}``), compiled unless it fell back."""
        if self._compiled is None:
            return cast(Tensor, self.net(inputs))
        padded = compiled_inputs(inputs, self.multiple, self.min_dates)
        for m, value in padded.items():
            self.min_dates[m] = max(self.min_dates.get(m, 0), int(value["doy"].shape[1]))
        try:
            return self._compiled(padded)
        except Exception as err:  # compilers fail in many ways; eager always works
            warnings.warn(f"torch.compile failed ({_error_text(err)}); falling back to eager mode.", stacklevel=2)
            self._compiled = None
            self.status = f"failed, eager fallback: {type(err).__name__}"
            return cast(Tensor, self.net(inputs))

    def start_step(self, device: torch.device | None = None) -> None:
        """Start timing a step (call before its forward)."""
        self._step = (clock(device), graphs_compiled())

    def end_step(self, stage: str, device: torch.device | None = None) -> None:
        """Close the timing of :meth:`start_step`: a compilation, or a reference step of ``stage``."""
        if self._step is None or self._compiled is None:
            self._step = None
            return
        start, graphs_before = self._step
        self._step = None
        elapsed = clock(device) - start
        new_graphs = graphs_compiled() - graphs_before
        if new_graphs > 0:
            self.compilations.append(
                {"stage": stage, "graphs": new_graphs, "dates": dict(self.min_dates), "step_s": elapsed}
            )
            log.info(
                "torch.compile: %d new graph(s) in a %s step (dates %s), %.1f s",
                new_graphs,
                stage,
                self.min_dates,
                elapsed,
            )
        elif len(steady := self._steady.setdefault(stage, [])) < STEADY_SAMPLES:
            steady.append(elapsed)

    @property
    def n_compiles(self) -> int:
        """Dynamo graphs compiled during the timed steps."""
        return sum(int(c["graphs"]) for c in self.compilations)

    @property
    def compile_s(self) -> float | None:
        """Seconds of compilation over every timed step (None before any compiled step)."""
        if not self.compilations:
            return None
        return sum(compile_seconds(c["step_s"], self._steady.get(c["stage"], [])) for c in self.compilations)

    def record(self) -> dict[str, Any]:
        """``{"status", "n_compiles", "compile_s", "compilations"}`` for ``summary.json``."""
        return {
            "status": self.status,
            "n_compiles": self.n_compiles,
            "compile_s": self.compile_s,
            "compilations": [dict(c) for c in self.compilations],
        }


COMPILED_COPY_PREFIX = "_compiled._orig_mod."
"""Prefix of the second copy of every weight in checkpoints of compiled runs written before
:class:`CompiledNetwork` (the compiled network was a registered submodule ``_compiled``)."""


def drop_compiled_copies(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load-state-dict pre-hook: read a checkpoint with ``_compiled._orig_mod.*`` copies as an eager one.

    Each ``{prefix}_compiled._orig_mod.<name>`` is dropped where ``{prefix}net.<name>`` is
    present (the copies share storage: they are the same weights) and renamed to it where
    it is not. Registered by the training module with
    ``register_load_state_dict_pre_hook``; edits ``state_dict`` in place.

    Args:
        module: The module being loaded (unused; part of the hook's signature).
        state_dict: The weights being loaded.
        prefix: The module's prefix in ``state_dict``.
        *args: The rest of the hook's signature (unused).
    """
    copies = [k for k in state_dict if k.startswith(prefix + COMPILED_COPY_PREFIX)]
    for key in copies:
        value = state_dict.pop(key)
        state_dict.setdefault(prefix + "net." + key[len(prefix + COMPILED_COPY_PREFIX) :], value)


COMPILE_MAX_GAIN = 0.3
"""Largest share of an eager step that compiling is expected to save. Measured speed-ups of a
compiled training step: 1.15-1.2x on an AVX2 CPU, 1.1-1.4x on a CPU with AVX512-BF16
(docs/results.md), i.e. 13-29 % of the eager step saved."""

COMPILE_COST_STEPS = 60.0
"""Compile-time formula on CPU: one compilation (the training graph and the evaluation graph)
takes about this many eager training steps (37-69 s of compilation against 0.7-1.1 s steps on
the CPUs measured in docs/results.md). Expressed in steps, it holds on a slower or busier
CPU too, where the compiler slows down as much as the steps."""

COMPILE_COST_S = 40.0
"""Compile-time formula on CUDA: seconds of one compilation (the compiler runs on the CPU, so
it does not shrink with the GPU's step time)."""


def compile_worth_measuring(
    steps: int,
    device: torch.device,
    eager_s: float | None = None,
    max_gain: float = COMPILE_MAX_GAIN,
    cost_steps: float = COMPILE_COST_STEPS,
    cost_s: float = COMPILE_COST_S,
) -> tuple[bool, str]:
    """The projected-run rule: could compiling pay off within ``steps`` training steps at all?

    The largest saving a compilation can bring is ``max_gain`` of every eager step of the
    run; it must exceed the compile-time formula (:data:`COMPILE_COST_STEPS` eager steps
    on CPU, :data:`COMPILE_COST_S` seconds on CUDA) for a compilation to be worth
    measuring. On CPU both sides scale with the eager step time, so the rule needs no
    timing: ``steps x max_gain > cost_steps``. On CUDA it needs the eager step time.

    Args:
        steps: Training steps the run will take.
        device: Where the run trains.
        eager_s: Seconds of one eager training step (needed on CUDA; None on CPU is fine).
        max_gain: Largest share of an eager step compiling saves (:data:`COMPILE_MAX_GAIN`), in (0, 1).
        cost_steps: CPU compile-time formula (:data:`COMPILE_COST_STEPS`).
        cost_s: CUDA compile-time formula (:data:`COMPILE_COST_S`).

    Returns:
        ``(worth_measuring, why)``; ``why`` gives both sides of the rule.

    Raises:
        ValueError: If ``max_gain`` is not in (0, 1), or ``eager_s`` is None on CUDA.
    """
    if not 0.0 < max_gain < 1.0:
        raise ValueError(f"callbacks.auto_backend.compile_max_gain must be in (0, 1), got {max_gain}.")
    if device.type != "cuda":
        bound = steps * max_gain
        worth = bound > cost_steps
        return worth, (
            f"{steps} steps x {max_gain:.2f} max gain = {bound:.0f} eager steps saved at most, "
            f"{'over' if worth else 'under'} the ~{cost_steps:.0f} eager steps a compilation takes on CPU"
        )
    if eager_s is None:
        raise ValueError("compile_worth_measuring needs the eager step time on CUDA (eager_s).")
    bound_s = steps * eager_s * max_gain
    worth = bound_s > cost_s
    return worth, (
        f"{steps} steps x {eager_s * 1e3:.0f} ms x {max_gain:.2f} max gain = {bound_s:.0f} s saved at most, "
        f"{'over' if worth else 'under'} the ~{cost_s:.0f} s a compilation takes"
    )


COMPILE_MEASUREMENT = "side_by_side"
"""How cached compile measurements were taken: compiled and eager steps (training,
:func:`decide_compile`) or forward passes (prediction,
:func:`~mtan_s1s2.inference.speed.choose_compile`) alternated in one process. Cache entries
without it were timed otherwise and are measured again."""


def decide_compile(
    net: nn.Module,
    inputs: Mapping[str, Any],
    device: torch.device,
    projected_steps: int,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    repeats: int = 3,
    backend: str = "inductor",
) -> dict[str, Any]:
    """Compile when it pays for itself within this run, judged by measurement.

    A copy of ``net`` is compiled and timed on :func:`compiled_inputs` (what training feeds
    it): its first forward+backward, then ``repeats`` compiled steps alternating with
    ``repeats`` eager steps of another copy on ``inputs`` (what eager training feeds it),
    after one untimed eager step. Both sides are timed in the same moment of the same
    process, so a loaded machine or an allocator state slows both alike (an eager time from
    the backend timing at the start of fit, or from an earlier process's cache, is not
    comparable: on the 2-core AVX512-BF16 CPU it made a 1.25x faster compiled step look
    slower). The compilation time is :func:`compile_seconds` of the first compiled call, and
    :func:`compile_pays_off` decides on the medians. Dynamo's and inductor's caches then
    serve the training run, which compiles the same code. Call it only where
    :func:`compile_worth_measuring` says a compilation could pay off: the measurement costs a
    compilation.

    Args:
        net: The model, already switched to its backend (left untouched).
        inputs: The model inputs of a real batch, on ``device``.
        device: Where to time.
        projected_steps: Training steps the run will take.
        autocast: Precision context of training.
        repeats: Timed compiled and eager steps (>= 1 each).
        backend: ``torch.compile`` backend (``inductor``; ``eager`` only captures graphs: tests).

    Returns:
        ``{"chosen": bool, "why": str, "eager_ms", "compiled_ms", "compile_s",
        "projected_steps", "saving_s", "measured_in_s"}`` (timings None when compiling failed).
    """
    out: dict[str, Any] = {
        "chosen": False,
        "eager_ms": None,
        "compiled_ms": None,
        "compile_s": None,
        "projected_steps": projected_steps,
    }
    ctx = autocast or contextlib.nullcontext
    candidate = copy.deepcopy(net).to(device).train()
    eager = copy.deepcopy(net).to(device).train()
    compiled = cast(nn.Module, torch.compile(candidate, backend=backend))
    # as CompiledNetwork feeds it: a network with a fixed date count (TempCNN) unpadded
    static = compiled_inputs(inputs, 1 if getattr(net, "seq_len", None) is not None else COMPILE_DATE_MULTIPLE)

    def step(module: nn.Module, fn: Callable[[Any], Tensor], x: Mapping[str, Any]) -> Callable[[], None]:
        def run() -> None:  # one training step's forward + backward, as mlp=auto times the backends
            module.zero_grad(set_to_none=True)
            with ctx():
                y = fn(x)
            y.float().square().mean().backward()  # type: ignore[no-untyped-call]

        return run

    compiled_step, eager_step = step(candidate, compiled, static), step(eager, eager, inputs)
    try:
        start = clock(device)
        first_s = timed_call(compiled_step, device)
        eager_step()  # warm-up: kernel selection and allocator growth, as for the compiled first call
        samples: list[float] = []
        eager_samples: list[float] = []
        for _ in range(max(int(repeats), 1)):
            samples.append(timed_call(compiled_step, device))
            eager_samples.append(timed_call(eager_step, device))
    except Exception as err:  # compilers fail in many ways; eager always works
        out["why"] = f"compilation failed ({_error_text(err)}): eager"
        return out
    compiled_ms = statistics.median(samples) * 1e3
    compile_s = compile_seconds(first_s, samples)
    out.update(
        eager_ms=statistics.median(eager_samples) * 1e3,
        compiled_ms=compiled_ms,
        compile_s=compile_s,
        measured_in_s=clock(device) - start,
    )
    out.update(apply_compile_measurement(out, projected_steps))
    return out


def apply_compile_measurement(measured: Mapping[str, Any], projected_steps: int) -> dict[str, Any]:
    """The pay-off rule on a measurement (this run's, or a cached one of an earlier run).

    Args:
        measured: ``{"eager_ms", "compiled_ms", "compile_s"}``.
        projected_steps: Training steps of this run.

    Returns:
        ``{"chosen", "saving_s", "why"}``.
    """
    eager_ms, compiled_ms = float(measured["eager_ms"]), float(measured["compiled_ms"])
    compile_s = float(measured["compile_s"])
    chosen, saving_s = compile_pays_off(eager_ms / 1e3, compiled_ms / 1e3, projected_steps, compile_s)
    why = (
        f"compiled {compiled_ms:.0f} ms vs eager {eager_ms:.0f} ms per step over {projected_steps} steps "
        f"saves {saving_s:.0f} s for {compile_s:.0f} s of compilation"
    )
    return {"chosen": chosen, "saving_s": saving_s, "why": why}


__all__ = [
    "COMPILED_COPY_PREFIX",
    "COMPILE_COST_S",
    "COMPILE_COST_STEPS",
    "COMPILE_DATE_MULTIPLE",
    "COMPILE_MAX_GAIN",
    "COMPILE_MEASUREMENT",
    "STEADY_SAMPLES",
    "CompiledNetwork",
    "apply_compile_measurement",
    "compile_or_eager",
    "compile_pays_off",
    "compile_seconds",
    "compile_worth_measuring",
    "compiled_inputs",
    "decide_compile",
    "drop_compiled_copies",
    "graphs_compiled",
]
