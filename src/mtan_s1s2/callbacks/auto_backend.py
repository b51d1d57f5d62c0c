"""``mlp=auto``: a callback that times every MLP backend at the start of fit and keeps the fastest.

Added by ``configs/mlp/auto.yaml`` together with the placeholder backend
:class:`~mtan_s1s2.models.layers.mlp.AutoMlp`. In :meth:`AutoBackend.setup` of the ``fit``
stage (after the datamodule is set up, before the optimiser exists) it times forward +
backward of the model on the real first training batch, device and precision for every
concrete backend (:func:`~mtan_s1s2.models.backend_selection.select_backend`), switches the
model to the fastest, decides whether compiling it pays for itself within this run
(:func:`~mtan_s1s2.models.compiling.decide_compile`), and keeps the decision in
:attr:`AutoBackend.decision` (recorded in ``summary.json``) and the layout choice in a cache
file, so a repeated run does not time the layouts again.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback

from mtan_s1s2.data.batch import modalities_of
from mtan_s1s2.models.backend_selection import select_backend
from mtan_s1s2.models.compiling import decide_compile
from mtan_s1s2.models.layers.mlp import AUTO_BACKEND

log = logging.getLogger(__name__)


class AutoBackend(Callback):
    """Choose the fastest MLP backend for this machine, precision and batch shape.

    Acts only on a model built with ``mlp=auto`` (``net.requested_backend == "auto"``), once
    per fit. On DDP every rank trains the backend rank 0 chose.

    Args:
        repeats: Timed forward+backward steps per backend that is not pruned (>= 1).
        prune_ratio: A backend whose first timed step is slower than this factor times the
            fastest first step gets no further repeats; ``None`` times every backend fully.
        cache_file: JSON cache of decisions (written atomically by rank 0); ``None`` times
            every run.
        compile: ``auto`` (compile the chosen backend when the measured saving over the
            projected run exceeds the measured compilation time; runs projected under
            ``compile_min_run_s`` are not compiled at all), ``true`` or ``false``.
        compile_min_run_s: Shortest projected eager training time for which compilation is
            measured, seconds.

    Attributes:
        decision: ``{"choice", "timings_ms", "samples_ms", "cached", "cost_s", "key"}`` once
            the backend is chosen, else None.

    Raises:
        ValueError: On ``repeats < 1`` or ``prune_ratio < 1``, at construction.
    """

    def __init__(
        self,
        repeats: int = 3,
        prune_ratio: float | None = 1.25,
        cache_file: str | None = None,
        compile: bool | str = "auto",
        compile_min_run_s: float = 120.0,
    ) -> None:
        super().__init__()
        if compile not in (True, False, "auto"):
            raise ValueError(f"callbacks.auto_backend.compile must be auto, true or false, got {compile!r}.")
        self.compile = compile
        self.compile_min_run_s = float(compile_min_run_s)
        if int(repeats) < 1:
            raise ValueError(f"callbacks.auto_backend.repeats must be >= 1, got {repeats}.")
        if prune_ratio is not None and not float(prune_ratio) >= 1:
            raise ValueError(
                "callbacks.auto_backend.prune_ratio must be >= 1 (or null to time every backend fully), "
                f"got {prune_ratio}."
            )
        self.repeats = int(repeats)
        self.prune_ratio = None if prune_ratio is None else float(prune_ratio)
        self.cache_file = Path(cache_file).expanduser() if cache_file else None
        self.decision: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Time the backends and switch the model, at the start of the first fit."""
        net = getattr(pl_module, "net", None)
        if (
            net is None
            or stage != "fit"
            or self.decision is not None
            or getattr(net, "requested_backend", None) != AUTO_BACKEND
        ):
            return
        device = trainer.strategy.root_device
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        if datamodule is None:
            raise ValueError("mlp=auto times the backends on the first training batch: pass a datamodule to fit.")
        batch = next(iter(datamodule.train_dataloader()))
        inputs = move_data_to_device({m: batch[m] for m in modalities_of(batch)}, device)
        decision = select_backend(
            net,
            inputs,
            device,
            precision=str(trainer.precision),
            repeats=self.repeats,
            prune_ratio=self.prune_ratio,
            cache_file=self.cache_file if trainer.is_global_zero else None,
            autocast=trainer.precision_plugin.forward_context,
        )
        # Every DDP rank must train the same backend: rank 0 decides.
        choice = trainer.strategy.broadcast(decision["choice"], src=0)
        if choice != net.backend:
            net.set_backend(choice)
            decision["choice"] = choice
        decision["compile"] = self._decide_compile(trainer, pl_module, net, inputs, decision)
        self.decision = decision

    def _decide_compile(
        self, trainer: L.Trainer, pl_module: L.LightningModule, net: Any, inputs: Any, decision: dict[str, Any]
    ) -> dict[str, Any]:
        if self.compile is False:
            return {"chosen": False, "why": "callbacks.auto_backend.compile=false"}
        enable = getattr(pl_module, "enable_compile", None)
        if enable is None:
            return {"chosen": False, "why": "the module cannot compile its network"}
        if self.compile is True:
            enable("callbacks.auto_backend.compile=true")
            return {"chosen": True, "why": "callbacks.auto_backend.compile=true"}
        steps = projected_steps(trainer, len(trainer.datamodule.train_dataloader()))  # type: ignore[attr-defined]
        result = decide_compile(
            net,
            inputs,
            trainer.strategy.root_device,
            eager_ms=float(decision["timings_ms"][decision["choice"]]),
            projected_steps=steps,
            autocast=trainer.precision_plugin.forward_context,
            min_run_s=self.compile_min_run_s,
        )
        result["chosen"] = bool(trainer.strategy.broadcast(result["chosen"], src=0))
        if result["chosen"]:
            enable(f"auto: {result['why']}")
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


def auto_backend_decision(trainer: L.Trainer) -> dict[str, Any] | None:
    """The decision of the trainer's :class:`AutoBackend` callback, if it made one."""
    callback = next((c for c in trainer.callbacks if isinstance(c, AutoBackend)), None)  # type: ignore[attr-defined]
    return None if callback is None else callback.decision


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
            "with the linear backend; use the mlp=auto config (it adds callbacks.auto_backend).",
            stacklevel=2,
        )


__all__ = ["AutoBackend", "auto_backend_decision", "projected_steps", "warn_if_auto_unresolved"]
