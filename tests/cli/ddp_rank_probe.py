"""Test helper for test_ddp.py: each DDP rank writes the metrics it ended fit with.

Imported by the ranks of a ``trainer=ddp`` run through ``PYTHONPATH`` (not a test module).
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback


class RankMetricsProbe(Callback):
    """Write ``output_dir/rank{global_rank}.json`` with ``trainer.callback_metrics`` after fit."""

    def __init__(self, output_dir: str) -> None:
        self.output_dir = Path(output_dir)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        record = {"world_size": trainer.world_size, "global_step": trainer.global_step, "metrics": metrics}
        (self.output_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
