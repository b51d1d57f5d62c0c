"""The record of one run (``summary.json``) and the timing statistics every reader takes from it.

One schema, used by its writer (:class:`~mtan_s1s2.callbacks.run_summary.RunSummary` and the
failure record of :mod:`mtan_s1s2.cli.failures`) and its readers (the sweep summary,
:mod:`mtan_s1s2.sweep.jobs`, and the epoch benchmark, :mod:`mtan_s1s2.bench.epochs`):

* :class:`EpochTiming`: one epoch of :class:`~mtan_s1s2.callbacks.timing.EpochTimer`;
* :func:`steady_epochs`: the epochs statistics are taken over (warm-up left out);
* :class:`TimingSummary`: median, mean and spread of those epochs;
* :func:`speedups`: ratios to a reference backend (> 1: faster), for times or rates;
* :class:`RunRecord`: everything ``summary.json`` holds, read and written atomically.

The JSON file is flat (timing fields at the top level) so that ``jq`` and pandas read it
without knowing this module.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from mtan_s1s2.utils.io import write_json_atomic

SUMMARY_FILE = "summary.json"
"""File name of the record in a run directory."""

RunStatus = Literal["completed", "failed", "interrupted"]


def finite_or_none(value: Any) -> float | None:
    """``float(value)`` when it is a finite number, else None (NaN, inf, text, None)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass
class EpochTiming:
    """Timing of one training epoch.

    Attributes:
        epoch: 0-based epoch index.
        train_epoch_s: Seconds of the training part of the epoch (validation excluded).
        val_epoch_s: Seconds of validation in that epoch, None when it did not run.
        train_samples: Training samples (patches) seen.
        train_samples_per_s: ``train_samples / train_epoch_s``; None when unknown.
        warmup: True for warm-up epochs (one-off costs: the first epochs of a run, and the
            first epoch of a resumed run), left out of the statistics.
        resumed: True for an epoch interrupted and resumed from a checkpoint by another
            process: its time adds the training before the checkpoint and after the resume.
    """

    epoch: int
    train_epoch_s: float
    val_epoch_s: float | None = None
    train_samples: int | None = None
    train_samples_per_s: float | None = None
    warmup: bool = False
    resumed: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], index: int = 0) -> EpochTiming | None:
        """Read one ``epochs`` entry of ``summary.json``; None when it has no train time."""
        train_s = finite_or_none(d.get("train_epoch_s"))
        if train_s is None:
            return None
        samples = d.get("train_samples")
        return cls(
            epoch=int(d.get("epoch", index)),
            train_epoch_s=train_s,
            val_epoch_s=finite_or_none(d.get("val_epoch_s")),
            train_samples=None if samples is None else int(samples),
            train_samples_per_s=finite_or_none(d.get("train_samples_per_s")),
            warmup=bool(d.get("warmup", False)),
            resumed=bool(d.get("resumed", False)),
        )


E = TypeVar("E", bound=EpochTiming)


def steady_epochs(epochs: Sequence[E]) -> tuple[list[E], bool]:
    """The epochs timing statistics are taken over: those after the warm-up.

    Args:
        epochs: Epoch timings of one run (or pooled over runs).

    Returns:
        ``(epochs, warmup_only)``: the non-warm-up epochs; if every epoch is a warm-up
        epoch, all of them and ``warmup_only=True``.
    """
    steady = [e for e in epochs if not e.warmup]
    if steady or not epochs:
        return steady, False
    return list(epochs), True


@dataclass
class TimingSummary:
    """Statistics of the steady epochs of a run (:func:`steady_epochs`).

    Attributes:
        n_epochs: Epochs timed in all.
        n_timed_epochs: Epochs the statistics use.
        warmup_epochs: Leading epochs flagged as warm-up.
        warmup_only: True when only warm-up epochs existed (and were used).
        median_train_epoch_s: Median training time per epoch, seconds.
        mean_train_epoch_s: Mean training time per epoch, seconds.
        std_train_epoch_s: Sample standard deviation (0 for one epoch), seconds.
        median_train_samples_per_s: Median throughput, samples per second.
        median_val_epoch_s: Median validation time, seconds.
        epochs: Every epoch.
    """

    n_epochs: int = 0
    n_timed_epochs: int = 0
    warmup_epochs: int = 0
    warmup_only: bool = False
    median_train_epoch_s: float | None = None
    mean_train_epoch_s: float | None = None
    std_train_epoch_s: float | None = None
    median_train_samples_per_s: float | None = None
    median_val_epoch_s: float | None = None
    epochs: list[EpochTiming] = field(default_factory=list)

    @classmethod
    def of(cls, epochs: Sequence[EpochTiming], warmup_epochs: int = 0) -> TimingSummary:
        """Summarise ``epochs`` (see :func:`steady_epochs`)."""
        timed, warmup_only = steady_epochs(epochs)
        times = [e.train_epoch_s for e in timed]
        rates = [e.train_samples_per_s for e in timed if e.train_samples_per_s is not None]
        vals = [e.val_epoch_s for e in timed if e.val_epoch_s is not None]
        return cls(
            n_epochs=len(epochs),
            n_timed_epochs=len(timed),
            warmup_epochs=warmup_epochs,
            warmup_only=warmup_only,
            median_train_epoch_s=statistics.median(times) if times else None,
            mean_train_epoch_s=statistics.fmean(times) if times else None,
            std_train_epoch_s=(statistics.stdev(times) if len(times) > 1 else 0.0) if times else None,
            median_train_samples_per_s=statistics.median(rates) if rates else None,
            median_val_epoch_s=statistics.median(vals) if vals else None,
            epochs=list(epochs),
        )


def speedups(
    values: Mapping[str, float | None], reference: str, kind: Literal["time", "rate"]
) -> dict[str, float | None]:
    """Ratio of every value to the reference's, oriented so that > 1 means faster.

    Args:
        values: Name (e.g. backend) -> a time (lower is faster) or a rate (higher is faster).
        reference: Name of the reference entry.
        kind: ``"time"`` (ratio = reference / value) or ``"rate"`` (value / reference).

    Returns:
        Name -> ratio; None where the value or the reference is missing or not positive.
    """
    ref = values.get(reference)
    out: dict[str, float | None] = {}
    for name, value in values.items():
        if not ref or not value or ref <= 0 or value <= 0:
            out[name] = None
        else:
            out[name] = ref / value if kind == "time" else value / ref
    return out


@dataclass
class RunRecord:
    """Everything a run writes to ``summary.json``.

    Attributes:
        status: ``completed``, ``failed`` (an error, a NaN loss, out of memory) or
            ``interrupted`` (Ctrl-C).
        error: ``"Type: message"`` (one line) of a run that did not complete.
        error_traceback: The last frames of its traceback.
        backend: MLP backend that trained (``linear``, ``conv``, ``channels_last``).
        requested_backend: Backend of the config (``auto`` for ``mlp=auto``).
        auto_backend: The ``mlp=auto`` decision (choice, timings, cache key, cost).
        choices: What the fit trained with and why, as logged in one line at its start
            (:attr:`~mtan_s1s2.callbacks.auto_backend.AutoBackend.choices`): ``backend``,
            ``backend_why``, ``precision``, ``precision_reason``, ``compile`` (bool),
            ``compile_why``, ``compile_measurement``, ``line``.
        compile: ``torch.compile`` status: ``off``, ``on (why)`` or the eager fallback.
        compile_s: Compilation time summed over every compilation (each step that
            compiled minus the median step of its stage that did not), seconds. Most of
            it falls in the warm-up epoch, which the epoch statistics leave out; a date
            bucket first reached later is compiled in a later epoch.
        n_compiles: Graphs ``torch.compile`` compiled (training, validation and test;
            None when the run was not compiled).
        compilations: One entry per step that compiled: ``stage``, ``graphs``, ``dates``
            (padded date count per modality), ``step_s``.
        utilisation: FLOPs per sample, the GEMM peak of the device and precision, the
            achieved GFLOP/s and its fraction of the peak
            (:class:`~mtan_s1s2.callbacks.utilisation.Utilisation`).
        timing: Epoch timings and their statistics.
        peak_memory_mb: Peak memory, MiB (CUDA allocator on GPU, process peak RSS on CPU).
        n_parameters: Trainable parameters.
        precision: ``trainer.precision``.
        precision_reason: Why that precision (``auto`` resolved for the machine, or the config).
        matmul_precision: ``torch.get_float32_matmul_precision()``.
        cudnn_allow_tf32: Whether cuDNN may use TF32.
        precision_settings: Every float32 precision flag in force.
        global_step: Optimiser steps taken.
        resumes: Checkpoints the run resumed from, in order: ``ckpt_path``, ``epoch`` and
            ``global_step`` where it continued, and ``changed``: the optimiser/schedule
            keys whose new values the resumed fit applied, ``{key: [old, new]}`` with the
            learning rate as ``lr`` (empty for a run that was never resumed).
        metrics: Last logged value of every metric (None where NaN/inf).
        best: Checkpoint ``monitor``, its best ``score`` and ``path``.
        majority_class: A run that had not left the majority class after several epochs
            (:class:`~mtan_s1s2.callbacks.majority_class.MajorityClassWarning`): ``epoch``,
            ``metric``, ``kappa``, ``predicted_class``, ``predicted_share``,
            ``recovered_epoch``; None when no warning was given.
        versions: Python and package versions.
        hardware: Host, CPU/GPU, threads, allocator label.
        allocator: The C memory allocator in detail.
        seed: The run's seed.
        task_name: ``train``, ``eval``, ...
        extra: Any other field (kept as written).
    """

    status: str = "completed"
    error: str | None = None
    error_traceback: str | None = None
    backend: str | None = None
    requested_backend: str | None = None
    auto_backend: dict[str, Any] | None = None
    choices: dict[str, Any] | None = None
    compile: str | None = None
    compile_s: float | None = None
    n_compiles: int | None = None
    compilations: list[dict[str, Any]] = field(default_factory=list)
    utilisation: dict[str, Any] | None = None
    timing: TimingSummary = field(default_factory=TimingSummary)
    peak_memory_mb: float | None = None
    n_parameters: int | None = None
    precision: str | None = None
    precision_reason: str | None = None
    matmul_precision: str | None = None
    cudnn_allow_tf32: bool | None = None
    precision_settings: dict[str, Any] = field(default_factory=dict)
    global_step: int | None = None
    resumes: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float | None] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    majority_class: dict[str, Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    allocator: dict[str, Any] = field(default_factory=dict)
    seed: int | str | None = None
    task_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON form (timing fields and ``extra`` at the top level)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("timing", "extra"):
                continue
            out[f.name] = getattr(self, f.name)
        timing = asdict(self.timing)
        out.update(timing)
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        """Read the JSON form; unknown keys go to ``extra``, missing ones keep defaults."""
        own = {f.name for f in fields(cls)} - {"timing", "extra"}
        timing_keys = {f.name for f in fields(TimingSummary)}
        epochs = [e for i, raw in enumerate(d.get("epochs") or []) if (e := EpochTiming.from_dict(raw, i)) is not None]
        timing = TimingSummary(**{k: d[k] for k in timing_keys - {"epochs"} if k in d}, epochs=epochs)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in own and f.name in d and not (d[f.name] is None and f.default_factory is not MISSING):
                kwargs[f.name] = d[f.name]
        extra = {k: v for k, v in d.items() if k not in own and k not in timing_keys}
        return cls(**kwargs, timing=timing, extra=extra)

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        """Read ``path`` (a ``summary.json``).

        Raises:
            OSError: If the file cannot be read.
            ValueError: If it is not a JSON object.
        """
        content = json.loads(Path(path).read_text())
        if not isinstance(content, dict):
            raise ValueError(f"{path} does not hold a JSON object.")
        return cls.from_dict(content)

    def write(self, path: str | Path) -> Path:
        """Write atomically (a reader never sees half a file)."""
        return write_json_atomic(path, self.to_dict())


__all__ = [
    "SUMMARY_FILE",
    "EpochTiming",
    "RunRecord",
    "RunStatus",
    "TimingSummary",
    "finite_or_none",
    "speedups",
    "steady_epochs",
]
