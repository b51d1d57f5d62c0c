"""How close to the machine a training run ran: counted FLOPs per sample against a GEMM peak.

:class:`Utilisation` counts the forward + backward FLOPs per sample of the model on the
first training batch (on ``meta`` tensors: nothing runs, no state changes), measures the
throughput of a large matrix product on the run's device and precision at the end of fit,
and records in ``summary.json``: ``flops_per_sample``, the achieved GFLOP/s (FLOPs per
sample x the median training samples/s of the steady epochs) and its fraction of the peak.
The optimiser, data loading and elementwise work are not counted, so the fraction is the
share of the GEMM throughput the model's counted work reaches end to end.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from mtan_s1s2.callbacks.timing import EpochTimer
from mtan_s1s2.data.batch import modalities_of
from mtan_s1s2.utils.flops import gemm_peak, model_flops_per_sample
from mtan_s1s2.utils.precision import SHORT_NAMES, short_precision

log = logging.getLogger(__name__)


class Utilisation(Callback):
    """Record FLOPs per sample, the GEMM peak and the fraction of it a run reaches.

    Attributes:
        record: ``{"flops_per_sample", "gemm_peak_gflop_per_s", "achieved_gflop_per_s",
            "fraction_of_peak", "precision"}`` once fit ends (``None`` values where unknown).
    """

    def __init__(self) -> None:
        super().__init__()
        self.flops_per_sample: float | None = None
        self.record: dict[str, Any] = {}

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Count the FLOPs per sample on the first training batch."""
        if self.flops_per_sample is not None:
            return
        net = getattr(pl_module, "net", None)
        if net is None:
            return
        try:
            self.flops_per_sample = model_flops_per_sample(net, {m: batch[m] for m in modalities_of(batch)})
        except Exception as err:  # counting must never stop a run
            log.warning(
                "Could not count the model's FLOPs (%s: %s); no utilisation in summary.json.", type(err).__name__, err
            )
            self.flops_per_sample = 0.0

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Measure the peak and the fraction of it the steady epochs reached."""
        try:
            precision = short_precision(str(trainer.precision))
        except ValueError:  # 64-true: compared with the fp32 peak
            precision = SHORT_NAMES["32-true"]
        peak = gemm_peak(pl_module.device, precision)
        timer = next((c for c in trainer.callbacks if isinstance(c, EpochTimer)), None)  # type: ignore[attr-defined]
        rate = timer.summary().median_train_samples_per_s if timer else None
        achieved = self.flops_per_sample * rate / 1e9 if self.flops_per_sample and rate else None
        self.record = {
            "precision": precision,
            "flops_per_sample": self.flops_per_sample or None,
            "gemm_peak_gflop_per_s": peak,
            "achieved_gflop_per_s": achieved,
            "fraction_of_peak": achieved / peak if achieved and peak else None,
        }


def utilisation_record(trainer: L.Trainer) -> dict[str, Any] | None:
    """The record of the trainer's :class:`Utilisation` callback, if it has one."""
    callback = next((c for c in trainer.callbacks if isinstance(c, Utilisation)), None)  # type: ignore[attr-defined]
    return callback.record or None if callback is not None else None


__all__ = ["Utilisation", "utilisation_record"]
