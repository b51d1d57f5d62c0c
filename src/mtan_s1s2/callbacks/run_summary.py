"""``summary.json``: one machine-readable record per run, for sweeps and reports."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only

from mtan_s1s2.callbacks.auto_backend import auto_backend_decision, run_choices
from mtan_s1s2.callbacks.checkpoint import best_model_summary
from mtan_s1s2.callbacks.majority_class import majority_class_record
from mtan_s1s2.callbacks.timing import EpochTimer
from mtan_s1s2.callbacks.utilisation import utilisation_record
from mtan_s1s2.run_record import SUMMARY_FILE, RunRecord, TimingSummary, finite_or_none
from mtan_s1s2.utils.allocator import detect_allocator, warn_if_untuned_allocator
from mtan_s1s2.utils.hardware import hardware, peak_memory_mb, precision_settings, versions


class RunSummary(Callback):
    """Write ``summary.json`` after fit, again after test, and when a run fails.

    The file is a :class:`~mtan_s1s2.run_record.RunRecord`.

    The record holds the backend, the status (``completed``; ``failed`` or ``interrupted``
    when fit or test raised, with the epochs timed so far) and error, the timing summary
    of :class:`~mtan_s1s2.callbacks.timing.EpochTimer` (median train-epoch time without
    warm-up, samples/s, per-epoch records), peak memory, parameter count, precision
    settings, the last value of every logged metric, the best checkpoint, a run stuck at
    the majority class (:mod:`mtan_s1s2.callbacks.majority_class`), versions,
    hardware and the C memory allocator (:mod:`mtan_s1s2.utils.allocator`; a CPU fit with
    glibc's untuned default ``malloc`` logs a warning once per process).

    A run resumed from a checkpoint (``ckpt_path=...``) covers the whole run: the epoch
    records come from :class:`~mtan_s1s2.callbacks.timing.EpochTimer`'s checkpointed
    state, ``metrics`` keeps the values logged before the checkpoint (e.g. the learning
    rate of the interrupted epoch), ``resumes`` lists every checkpoint it continued from,
    and ``peak_memory_mb`` is the largest over its processes.

    Args:
        output_dir: Directory of ``summary.json`` (default: ``trainer.default_root_dir``).
        filename: File name.
        extra: Additional fields to record; ``seed`` and ``task_name`` have their own.
    """

    def __init__(
        self, output_dir: str | None = None, filename: str = SUMMARY_FILE, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.filename = filename
        self.extra = dict(extra or {})
        self.metrics: dict[str, float | None] = {}
        self.precision_reason: str | None = None
        """Why the run's precision was chosen (set by ``train.py``)."""
        self.resumes: list[dict[str, Any]] = []
        self._earlier_peak_mb: float | None = None
        self._to_restore: dict[str, Any] | None = None
        self._module: L.LightningModule | None = None

    def path(self, trainer: L.Trainer) -> Path:
        """Where ``summary.json`` goes."""
        return Path(self.output_dir or trainer.default_root_dir) / self.filename

    def build(
        self, trainer: L.Trainer, pl_module: L.LightningModule, status: str = "completed", error: str | None = None
    ) -> RunRecord:
        """The record of the run as it stands."""
        self.metrics.update({k: finite_or_none(v) for k, v in trainer.callback_metrics.items()})
        timer = next((c for c in trainer.callbacks if isinstance(c, EpochTimer)), None)  # type: ignore[attr-defined]
        net = getattr(pl_module, "net", pl_module)
        settings = precision_settings()
        extra = dict(self.extra)
        compiled = getattr(pl_module, "compile_record", None) or {}
        return RunRecord(
            status=status,
            error=error,
            backend=getattr(net, "backend", None),
            requested_backend=getattr(net, "requested_backend", None),
            auto_backend=auto_backend_decision(trainer),
            choices=run_choices(trainer),
            compile=getattr(pl_module, "compile_status", None),
            compile_s=compiled.get("compile_s"),
            n_compiles=compiled.get("n_compiles"),
            compilations=list(compiled.get("compilations", [])),
            utilisation=utilisation_record(trainer),
            timing=timer.summary() if timer else TimingSummary(),
            peak_memory_mb=self._peak_memory_mb(pl_module),
            n_parameters=sum(p.numel() for p in pl_module.parameters() if p.requires_grad),
            precision=str(trainer.precision),
            precision_reason=self.precision_reason,
            matmul_precision=settings["float32_matmul_precision"],
            cudnn_allow_tf32=settings["cudnn_allow_tf32"],
            precision_settings=settings,
            global_step=trainer.global_step,
            resumes=list(self.resumes),
            metrics=dict(sorted(self.metrics.items())),
            best=best_model_summary(trainer),
            majority_class=majority_class_record(trainer),
            versions=versions(),
            hardware=hardware(pl_module.device),
            allocator=detect_allocator().as_dict(),
            seed=extra.pop("seed", None),
            task_name=extra.pop("task_name", None),
            extra=extra,
        )

    def _peak_memory_mb(self, pl_module: L.LightningModule) -> float | None:
        now = peak_memory_mb(pl_module.device)
        values = [v for v in (now, self._earlier_peak_mb) if v is not None]
        return max(values) if values else None

    @rank_zero_only
    def write(
        self, trainer: L.Trainer, pl_module: L.LightningModule, status: str = "completed", error: str | None = None
    ) -> None:
        """Write the record (rank 0 only)."""
        self.build(trainer, pl_module, status, error).write(self.path(trainer))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Warn once about an untuned CPU allocator."""
        warn_if_untuned_allocator(pl_module.device)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A resumed fit: continue the record of the checkpoint and note where it resumed."""
        state, self._to_restore = self._to_restore, None
        if state is not None:
            self.resumes = [dict(r) for r in state.get("resumes", [])]
            self._earlier_peak_mb = state.get("peak_memory_mb")
            self.metrics = {str(k): finite_or_none(v) for k, v in state.get("metrics", {}).items()}
        if trainer.ckpt_path:
            self.resumes.append(
                {
                    "ckpt_path": str(trainer.ckpt_path),
                    "epoch": int(trainer.current_epoch),
                    "global_step": int(trainer.global_step),
                    "changed": dict(getattr(pl_module, "resume_changes", {})),
                }
            )

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Keep the module: :meth:`state_dict` records its peak memory.

        The trained module stays the one recorded when the test runs another (the checkpoint
        ensemble of ``model.checkpoint_ensemble``): parameters, compilation and memory are
        those of the network that trained.
        """
        if stage == "fit" or self._module is None:
            self._module = pl_module

    def state_dict(self) -> dict[str, Any]:
        """Resumes so far, the peak memory and the metrics logged so far (saved in every checkpoint)."""
        peak = None if self._module is None else self._peak_memory_mb(self._module)
        trainer = getattr(self._module, "_trainer", None)
        if trainer is not None:
            self.metrics.update({k: finite_or_none(v) for k, v in trainer.callback_metrics.items()})
        return {"resumes": list(self.resumes), "peak_memory_mb": peak, "metrics": dict(self.metrics)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's record for the fit that resumes from it (see :meth:`on_train_start`)."""
        self._to_restore = state_dict

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Testing a checkpoint loads its state; it must not rewind the record."""
        self._to_restore = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the finished fit."""
        self.write(trainer, pl_module)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the test metrics too (with the trained module's record, see :meth:`setup`)."""
        self.write(trainer, self._module if self._module is not None else pl_module)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Record a failed (or interrupted) run, with the epochs timed so far."""
        status = "interrupted" if isinstance(exception, KeyboardInterrupt) else "failed"
        error = f"{type(exception).__name__}: {' '.join(str(exception).split())}"
        try:
            self.write(trainer, pl_module, status=status, error=error)
        except Exception as err:  # never mask the run's own exception
            warnings.warn(f"RunSummary could not write {self.filename} after {error}: {err}", stacklevel=2)


__all__ = ["RunSummary"]
