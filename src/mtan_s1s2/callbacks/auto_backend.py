"""The run chooses its own training configuration: MLP backend, compilation; one log line.

Part of every default callback set (``configs/callbacks/default.yaml`` and
``timing_only.yaml``). In :meth:`AutoBackend.setup` of the ``fit`` stage (after the
datamodule is set up, before the optimiser exists) it

* times forward + backward of the model on the real first training batch, device and
  precision for every concrete backend, and switches the model to the fastest
  (:func:`~mtan_s1s2.models.backend_selection.select_backend`), when the model was built
  with ``mlp=auto`` (the default); an explicit ``mlp=linear|conv|channels_last`` is kept;
* decides ``model.compile=auto`` for whichever backend trains: the projected-run rule with
  the compile-time formula first (:func:`~mtan_s1s2.models.compiling.compile_worth_measuring`:
  can compiling pay off within this run at all? decided without compiling anything), then,
  only where it could, a measured compilation and the pay-off rule
  (:func:`~mtan_s1s2.models.compiling.decide_compile`); ``model.compile=true|false`` forces it;
* logs one line with the backend, the precision and the compilation chosen, and why
  (:attr:`AutoBackend.choices`, recorded in ``summary.json`` as ``choices``).

Decisions are cached in one JSON file per user (the backend timings per device, precision
and shapes, and the measured compilation per backend), so a repeated run pays no timing.
The choices are saved in every checkpoint (:meth:`AutoBackend.state_dict`): a fit resumed
from one trains with the backend and compilation it chose when it started
(:meth:`AutoBackend.resume_from`, called by the runner before ``trainer.fit``), and
``eval.py`` rebuilds an ``mlp=auto`` run with the backend it trained with
(:func:`trained_backend`).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback

from mtan_s1s2.data.batch import modalities_of
from mtan_s1s2.models.backend_selection import cache_key, eager_step_ms, read_cache, select_backend, update_cache
from mtan_s1s2.models.compiling import (
    COMPILE_COST_S,
    COMPILE_COST_STEPS,
    COMPILE_MAX_GAIN,
    COMPILE_MEASUREMENT,
    apply_compile_measurement,
    compile_worth_measuring,
    decide_compile,
)
from mtan_s1s2.models.layers.mlp import AUTO_BACKEND
from mtan_s1s2.utils.rng import capture_rng_states, restore_rng_states

log = logging.getLogger(__name__)

CompileMode = bool | Literal["auto"]
"""``model.compile``: ``auto`` (the pay-off rule decides), ``true`` or ``false``."""


def compile_mode(value: Any) -> CompileMode:
    """``model.compile`` checked: ``True``, ``False`` or ``"auto"``.

    Raises:
        ValueError: On any other value, naming it and the choices.
    """
    if value is True or value is False or value == "auto":
        return value  # type: ignore[no-any-return]
    raise ValueError(f"model.compile must be auto, true or false, got {value!r}.")


class AutoBackend(Callback):
    """Choose the MLP backend (``mlp=auto``) and the compilation (``model.compile=auto``) of a fit.

    Acts once per fit on a module with a ``net``; on DDP every rank trains what rank 0 chose.

    Args:
        repeats: Timed forward+backward steps per backend that is not pruned (>= 1).
        prune_ratio: A backend whose first timed step is slower than this factor times the
            fastest first step gets no further repeats; ``None`` times every backend fully.
        cache_file: JSON cache of decisions (written atomically by rank 0); ``None`` times
            every run.
        compile_max_gain: Largest share of an eager step compiling is expected to save, in
            (0, 1) (:data:`~mtan_s1s2.models.compiling.COMPILE_MAX_GAIN`).
        compile_cost_steps: Compile-time formula on CPU: a compilation takes this many eager
            steps (:data:`~mtan_s1s2.models.compiling.COMPILE_COST_STEPS`).
        compile_cost_s: Compile-time formula on CUDA, seconds
            (:data:`~mtan_s1s2.models.compiling.COMPILE_COST_S`).
        compile_backend: ``torch.compile`` backend of the measured and the chosen
            compilation: ``inductor`` (the speed-up), ``eager``/``aot_eager`` (graph capture
            only: for debugging a compilation, and tests).

    Attributes:
        decision: The ``mlp=auto`` timing (``{"choice", "timings_ms", "samples_ms",
            "cached", "cost_s", "key"}``), None for an explicit backend.
        choices: What the fit trains with and why: ``backend``, ``backend_why``,
            ``precision``, ``precision_reason``, ``compile`` (bool), ``compile_why``,
            ``compile_measurement`` and the logged ``line``; None before the fit.
        precision_reason: Why the trainer's precision was chosen (set by ``train.py``).

    Raises:
        ValueError: On ``repeats < 1``, ``prune_ratio < 1`` or ``compile_max_gain`` outside
            (0, 1), at construction.
    """

    def __init__(
        self,
        repeats: int = 3,
        prune_ratio: float | None = 1.25,
        cache_file: str | None = None,
        compile_max_gain: float = COMPILE_MAX_GAIN,
        compile_cost_steps: float = COMPILE_COST_STEPS,
        compile_cost_s: float = COMPILE_COST_S,
        compile_backend: str = "inductor",
    ) -> None:
        super().__init__()
        if int(repeats) < 1:
            raise ValueError(f"callbacks.auto_backend.repeats must be >= 1, got {repeats}.")
        if prune_ratio is not None and not float(prune_ratio) >= 1:
            raise ValueError(
                "callbacks.auto_backend.prune_ratio must be >= 1 (or null to time every backend fully), "
                f"got {prune_ratio}."
            )
        if not 0.0 < float(compile_max_gain) < 1.0:
            raise ValueError(f"callbacks.auto_backend.compile_max_gain must be in (0, 1), got {compile_max_gain}.")
        self.repeats = int(repeats)
        self.prune_ratio = None if prune_ratio is None else float(prune_ratio)
        self.cache_file = Path(cache_file).expanduser() if cache_file else None
        self.compile_max_gain = float(compile_max_gain)
        self.compile_cost_steps = float(compile_cost_steps)
        self.compile_cost_s = float(compile_cost_s)
        self.compile_backend = str(compile_backend)
        self.decision: dict[str, Any] | None = None
        self.choices: dict[str, Any] | None = None
        self.precision_reason: str | None = None
        self._resumed: dict[str, Any] | None = None  # the choices saved in the checkpoint a fit resumes from

    def state_dict(self) -> dict[str, Any]:
        """The choices of the fit (``{"choices": ...}``), saved in every checkpoint."""
        return {"choices": self.choices}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to do here: the runner hands a checkpoint's choices over before the fit.

        Lightning restores callback states after :meth:`setup`, where the choices are made,
        so :meth:`resume_from` is called with the checkpoint instead.
        """

    def resume_from(self, checkpoint: Mapping[str, Any]) -> None:
        """Keep the choices saved in ``checkpoint`` for the resumed fit's :meth:`setup`.

        The resumed fit trains with the saved backend (``mlp=auto``) and compilation
        (``model.compile=auto``) instead of timing again, which could choose differently
        on a loaded machine. Checkpoints without saved choices change nothing.
        """
        choices = saved_choices(checkpoint)
        self._resumed = dict(choices) if choices else None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Choose backend and compilation, and log them with the precision, at the start of the first fit.

        The timed steps draw dropout masks from the global generators; their states are
        restored afterwards, so a run trains the same whether its decision was timed or
        read from the cache.
        """
        net = getattr(pl_module, "net", None)
        if net is None or stage != "fit" or self.choices is not None:
            return
        states = capture_rng_states()
        try:
            self._choose(trainer, pl_module, net)
        finally:
            restore_rng_states(states)

    def _choose(self, trainer: L.Trainer, pl_module: L.LightningModule, net: Any) -> None:
        mode = compile_mode(pl_module.hparams.get("compile", False))
        wants_backend = getattr(net, "requested_backend", None) == AUTO_BACKEND
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        needs_batch = wants_backend or mode == "auto"
        if needs_batch and datamodule is None:
            raise ValueError("mlp=auto and model.compile=auto time the first training batch: pass a datamodule to fit.")
        device = trainer.strategy.root_device
        inputs: dict[str, Any] = {}
        if needs_batch:
            batch = next(iter(datamodule.train_dataloader()))
            inputs = move_data_to_device({m: batch[m] for m in modalities_of(batch)}, device)
        autocast = trainer.precision_plugin.forward_context
        resumed, self._resumed = self._resumed, None
        if wants_backend and resumed and resumed.get("backend") is not None:
            if net.backend != resumed["backend"]:
                net.set_backend(str(resumed["backend"]))
            backend_why = "mlp=auto, the choice saved in the checkpoint this fit resumes from"
        elif wants_backend:
            backend_why = self._choose_backend(trainer, net, inputs, device, autocast)
        else:
            backend_why = f"mlp={getattr(net, 'backend', 'none')}"
        if mode == "auto" and resumed and "compile" in resumed:
            compile_rec = self._resume_compile(pl_module, bool(resumed["compile"]))
        else:
            compile_rec = self._choose_compile(trainer, pl_module, net, inputs, device, autocast, mode)
        if self.decision is not None:
            self.decision["compile"] = compile_rec
        backend = str(getattr(net, "backend", type(net).__name__))
        precision = str(trainer.precision)
        line = (
            f"Training with backend {backend} ({backend_why}), precision {precision} "
            f"({self.precision_reason or 'trainer.precision'}), compile {'yes' if compile_rec['chosen'] else 'no'} "
            f"({compile_rec['why']})"
        )
        log.info("%s", line)
        self.choices = {
            "backend": backend,
            "backend_why": backend_why,
            "precision": precision,
            "precision_reason": self.precision_reason,
            "compile": bool(compile_rec["chosen"]),
            "compile_why": compile_rec["why"],
            "compile_measurement": {k: v for k, v in compile_rec.items() if k not in ("chosen", "why")},
            "line": line,
        }

    def _choose_backend(
        self,
        trainer: L.Trainer,
        net: Any,
        inputs: Mapping[str, Any],
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> str:
        decision = select_backend(
            net,
            inputs,
            device,
            precision=str(trainer.precision),
            repeats=self.repeats,
            prune_ratio=self.prune_ratio,
            cache_file=self.cache_file if trainer.is_global_zero else None,
            autocast=autocast,
        )
        # Every DDP rank must train the same backend: rank 0 decides.
        choice = trainer.strategy.broadcast(decision["choice"], src=0)
        if choice != net.backend:
            net.set_backend(choice)
            decision["choice"] = choice
        self.decision = decision
        if decision["cached"]:
            return "mlp=auto, cached decision"
        return f"mlp=auto, the fastest of {len(decision['timings_ms'])} timed in {decision['cost_s']:.0f} s"

    def _choose_compile(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        net: Any,
        inputs: Mapping[str, Any],
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
        mode: CompileMode,
    ) -> dict[str, Any]:
        enable = getattr(pl_module, "enable_compile", None)
        if mode is False:
            return {"chosen": False, "why": "model.compile=false"}
        if enable is None:
            return {"chosen": False, "why": "the module cannot compile its network"}
        if mode is True:  # before the module's own setup, which then finds it compiled
            enable("model.compile=true", backend=self.compile_backend)
            return {"chosen": True, "why": "model.compile=true"}
        result = self._auto_compile(trainer, net, inputs, device, autocast) if trainer.is_global_zero else None
        result = trainer.strategy.broadcast(result, src=0)
        assert result is not None  # rank 0 decided
        if result["chosen"]:
            enable(f"auto: {result['why']}", backend=self.compile_backend)
        return result

    def _resume_compile(self, pl_module: L.LightningModule, chosen: bool) -> dict[str, Any]:
        """``model.compile=auto`` of a resumed fit: the compilation its checkpoint's fit chose."""
        why = "auto, the choice saved in the checkpoint this fit resumes from"
        enable = getattr(pl_module, "enable_compile", None)
        if chosen and enable is not None:
            enable(why, backend=self.compile_backend)
        return {"chosen": bool(chosen and enable is not None), "why": why, "cached": True}

    def _auto_compile(
        self,
        trainer: L.Trainer,
        net: Any,
        inputs: Mapping[str, Any],
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> dict[str, Any]:
        """``model.compile=auto`` on rank 0: a cached measurement, else the projected-run rule, else a measurement."""
        steps = projected_steps(trainer, len(trainer.datamodule.train_dataloader()))  # type: ignore[attr-defined]
        backend = str(getattr(net, "backend", type(net).__name__))
        key = self.decision["key"] if self.decision else cache_key(net, inputs, device, str(trainer.precision))
        cached = read_cache(self.cache_file).get(key, {}).get("compile", {}).get(backend)
        if cached and cached.get("measurement") == COMPILE_MEASUREMENT:  # older entries timed eager apart
            return {**cached, "projected_steps": steps, "cached": True, **apply_compile_measurement(cached, steps)}
        eager_ms: float | None = None
        if self.decision is not None:
            eager_ms = float(self.decision["timings_ms"][self.decision["choice"]])
        if eager_ms is None and device.type == "cuda":  # the CUDA formula needs the step time (ms to measure)
            eager_ms = eager_step_ms(net, inputs, device, autocast)
        worth, why = compile_worth_measuring(
            steps,
            device,
            None if eager_ms is None else eager_ms / 1e3,
            self.compile_max_gain,
            self.compile_cost_steps,
            self.compile_cost_s,
        )
        if not worth:
            return {"chosen": False, "why": why, "projected_steps": steps, "cached": False}
        result = decide_compile(net, inputs, device, steps, autocast=autocast, backend=self.compile_backend)
        result["cached"] = False
        if result.get("compiled_ms") is not None and self.cache_file is not None:
            measured = {
                **{k: result[k] for k in ("eager_ms", "compiled_ms", "compile_s")},
                "measurement": COMPILE_MEASUREMENT,
            }
            entry = read_cache(self.cache_file).get(key, {})
            entry["compile"] = {**entry.get("compile", {}), backend: measured}
            update_cache(self.cache_file, key, entry)
        return result


def projected_steps(trainer: L.Trainer, batches_per_epoch: int) -> int:
    """Training steps a fit will take, from ``max_steps``, ``max_epochs`` and ``limit_train_batches``."""
    limit = trainer.limit_train_batches
    if isinstance(limit, int):
        per_epoch = min(batches_per_epoch, limit)
    else:
        per_epoch = int(batches_per_epoch * float(limit if limit is not None else 1.0))
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else 1
    steps = per_epoch * epochs
    if trainer.max_steps is not None and trainer.max_steps > 0:
        steps = min(steps, trainer.max_steps) if trainer.max_epochs not in (None, -1) else trainer.max_steps
    return max(int(steps), 0)


def saved_choices(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The :attr:`AutoBackend.choices` saved in a Lightning checkpoint, None if it has none.

    Args:
        checkpoint: The loaded checkpoint (``torch.load``), whose ``"callbacks"`` entry
            holds each callback's :meth:`~lightning.pytorch.callbacks.Callback.state_dict`.
    """
    states = checkpoint.get("callbacks") or {}
    for key, state in states.items():
        if str(key).split("{")[0] == AutoBackend.__qualname__ and isinstance(state, Mapping):
            choices = state.get("choices")
            return dict(choices) if isinstance(choices, Mapping) else None
    return None


def trained_backend(checkpoint: Mapping[str, Any]) -> str | None:
    """The MLP backend the checkpoint's fit trained with (its saved choices), None if unknown."""
    choices = saved_choices(checkpoint)
    backend = None if choices is None else choices.get("backend")
    return None if backend is None else str(backend)


def _auto_backend_callback(trainer: L.Trainer) -> AutoBackend | None:
    return next((c for c in trainer.callbacks if isinstance(c, AutoBackend)), None)  # type: ignore[attr-defined]


def auto_backend_decision(trainer: L.Trainer) -> dict[str, Any] | None:
    """The ``mlp=auto`` timing of the trainer's :class:`AutoBackend` callback, if it made one."""
    callback = _auto_backend_callback(trainer)
    return None if callback is None else callback.decision


def run_choices(trainer: L.Trainer) -> dict[str, Any] | None:
    """What the fit trains with and why (:attr:`AutoBackend.choices`), if the trainer has the callback."""
    callback = _auto_backend_callback(trainer)
    return None if callback is None else callback.choices


def warn_if_auto_unresolved(net: Any, callbacks: Sequence[Callback]) -> None:
    """Warn when a network built with ``mlp=auto`` has no :class:`AutoBackend` callback to resolve it.

    Such a network trains with the linear backend.

    Args:
        net: The network (anything without ``requested_backend == "auto"`` is fine).
        callbacks: The trainer's callbacks.
    """
    if getattr(net, "requested_backend", None) != AUTO_BACKEND or getattr(net, "backend", None) != "linear":
        return
    if not any(isinstance(c, AutoBackend) for c in callbacks):
        warnings.warn(
            "The model was built with mlp=auto but the trainer has no AutoBackend callback, so it trains "
            "with the linear backend; keep callbacks.auto_backend (configs/callbacks/default.yaml) or choose "
            "a backend (mlp=linear|conv|channels_last).",
            stacklevel=2,
        )


__all__ = [
    "AutoBackend",
    "CompileMode",
    "auto_backend_decision",
    "compile_mode",
    "projected_steps",
    "run_choices",
    "saved_choices",
    "trained_backend",
    "warn_if_auto_unresolved",
]
