"""``summary.json``: one machine-readable record per run, for sweeps and reports."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only

from mtan_s1s2.callbacks.timing import EpochTimer
from mtan_s1s2.models.layers.mlp import count_parameters
from mtan_s1s2.utils.allocator import detect_allocator, warn_if_untuned_allocator
from mtan_s1s2.utils.hardware import hardware, peak_memory_mb, precision_settings, versions


def _to_float(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class RunSummary(Callback):
    """Write ``summary.json`` after fit and again after test, and when a run fails.

    Fields: ``backend``, ``status`` (``completed``; ``failed`` or ``interrupted`` when fit
    or test raised, with the epochs timed so far), ``error`` (``"Type: message"`` or
    null), timing summary of :class:`EpochTimer` (median train-epoch time without
    warm-up, samples/s, per-epoch records), ``peak_memory_mb``, ``n_parameters``,
    ``precision``, ``metrics`` (last logged value of every metric), ``best`` (checkpoint
    monitor and score), ``versions``, ``hardware`` and ``allocator``
    (the C memory allocator, :mod:`mtan_s1s2.utils.allocator`; a CPU fit with glibc's
    untuned default ``malloc`` logs a warning once per process).

    Args:
        output_dir: Directory of ``summary.json`` (default: ``trainer.default_root_dir``).
        filename: File name.
        extra: Additional fields to record (e.g. the seed, config choices).
    """

    def __init__(self, output_dir: str | None = None, filename: str = "summary.json", extra: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.filename = filename
        self.extra = dict(extra or {})
        self.metrics: dict[str, float | None] = {}

    def path(self, trainer: L.Trainer) -> Path:
        return Path(self.output_dir or trainer.default_root_dir) / self.filename

    def build(
        self, trainer: L.Trainer, pl_module: L.LightningModule, status: str = "completed", error: str | None = None
    ) -> dict[str, Any]:
        self.metrics.update({k: _to_float(v) for k, v in trainer.callback_metrics.items()})
        timer = next((c for c in trainer.callbacks if isinstance(c, EpochTimer)), None)
        ckpt = trainer.checkpoint_callback if isinstance(trainer.checkpoint_callback, ModelCheckpoint) else None
        net = getattr(pl_module, "net", pl_module)
        settings = precision_settings()
        summary: dict[str, Any] = {
            "backend": getattr(net, "backend", None),
            "status": status,
            "error": error,
            **(timer.summary() if timer else {}),
            "peak_memory_mb": peak_memory_mb(pl_module.device),
            "n_parameters": count_parameters(pl_module),
            "requested_backend": getattr(net, "requested_backend", None),
            "auto_backend": getattr(pl_module, "auto_backend", None),
            "compile": getattr(pl_module, "compile_status", None),
            "precision": str(trainer.precision),
            "matmul_precision": settings["float32_matmul_precision"],
            "cudnn_allow_tf32": settings["cudnn_allow_tf32"],
            "precision_settings": settings,
            "global_step": trainer.global_step,
            "metrics": dict(sorted(self.metrics.items())),
            "best": {
                "monitor": ckpt.monitor if ckpt else None,
                "score": _to_float(ckpt.best_model_score) if ckpt and ckpt.best_model_score is not None else None,
                "path": ckpt.best_model_path if ckpt else None,
            },
            "versions": versions(),
            "hardware": hardware(pl_module.device),
            "allocator": detect_allocator().as_dict(),
            **self.extra,
        }
        return summary

    @rank_zero_only
    def write(
        self, trainer: L.Trainer, pl_module: L.LightningModule, status: str = "completed", error: str | None = None
    ) -> None:
        path = self.path(trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.build(trainer, pl_module, status, error), indent=2, default=str) + "\n")

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        warn_if_untuned_allocator(pl_module.device)  # once per process, CPU + glibc default only

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write(trainer, pl_module)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        status = "interrupted" if isinstance(exception, KeyboardInterrupt) else "failed"
        error = f"{type(exception).__name__}: {' '.join(str(exception).split())}"
        try:
            self.write(trainer, pl_module, status=status, error=error)
        except Exception as err:  # never mask the run's own exception
            warnings.warn(f"RunSummary could not write {self.filename} after {error}: {err}")
