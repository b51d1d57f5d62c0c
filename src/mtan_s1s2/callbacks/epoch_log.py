"""One log line per epoch (metrics, epoch time, ETA), for runs whose output goes to a file."""

from __future__ import annotations

import datetime
import logging
import math
import statistics
import sys
import time
from collections.abc import Sequence

import lightning as L
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)

DEFAULT_METRICS: tuple[str, ...] = ("train/loss", "train/OA", "val/loss", "val/OA", "val/F1", "val/mIoU")


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4g}"


class EpochLog(Callback):
    """Log one line per epoch through ``logging`` (console and ``train.log``).

    A run started with ``nohup`` or by SLURM writes to a file, where a progress bar shows
    nothing until the end. Then (or whenever no progress bar is shown) every epoch logs::

        Epoch 2/4: train/loss 1.234, train/OA 0.512 | val/loss 1.301, val/OA 0.498, ... | 21.3 s | ETA 0:00:43

    The epoch time is its wall time, training and validation; the ETA is the mean epoch
    time of this process times the epochs left (from ``trainer.max_epochs``, or
    ``max_steps``). Rank 0 only.

    Args:
        metrics: Keys to show, when logged (missing ones are left out).
        always: Also log when stdout is a terminal with a progress bar.
    """

    def __init__(self, metrics: Sequence[str] = DEFAULT_METRICS, always: bool = False) -> None:
        super().__init__()
        self.metrics = list(metrics)
        self.always = bool(always)
        self.active = False
        self._epoch_start = 0.0
        self._times: list[float] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Decide whether to log, and start the clock (a resumed epoch starts here)."""
        bar = trainer.progress_bar_callback
        shown = bar is not None and bool(getattr(bar, "is_enabled", True)) and sys.stdout.isatty()
        self.active = trainer.is_global_zero and (self.always or not shown)
        self._times = []
        self._epoch_start = time.perf_counter()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start the epoch clock."""
        self._epoch_start = time.perf_counter()

    def _epochs_left(self, trainer: L.Trainer) -> int | None:
        left: list[int] = []
        if trainer.max_epochs is not None and trainer.max_epochs >= 0:
            left.append(trainer.max_epochs - trainer.current_epoch - 1)
        n = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps >= 0 and math.isfinite(n) and n > 0:
            left.append(math.ceil((trainer.max_steps - trainer.global_step) / n))
        return max(min(left), 0) if left else None

    def line(self, trainer: L.Trainer, epoch_s: float) -> str:
        """The line of the epoch that just ended."""
        values = {k: float(v) for k, v in trainer.callback_metrics.items() if k in self.metrics}
        groups = []
        for stage in ("train", "val"):
            shown = [f"{k} {_fmt(values[k])}" for k in self.metrics if k.startswith(f"{stage}/") and k in values]
            if shown:
                groups.append(", ".join(shown))
        total = f"/{trainer.max_epochs}" if trainer.max_epochs is not None and trainer.max_epochs >= 0 else ""
        head = f"Epoch {trainer.current_epoch + 1}{total}: " + (" | ".join(groups) or "no metrics")
        parts = [head, f"{epoch_s:.1f} s"]
        left = self._epochs_left(trainer)
        if left is not None and self._times:
            eta = statistics.fmean(self._times) * left
            parts.append(f"ETA {datetime.timedelta(seconds=round(eta))}")
        return " | ".join(parts)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log the epoch's line (validation has run by now)."""
        if not self.active:
            return
        epoch_s = time.perf_counter() - self._epoch_start
        self._times.append(epoch_s)
        log.info(self.line(trainer, epoch_s))


__all__ = ["DEFAULT_METRICS", "EpochLog"]
