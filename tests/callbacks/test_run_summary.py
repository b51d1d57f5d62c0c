"""RunSummary records a run that raised: status, error and the epochs timed before it."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from mtan_s1s2.callbacks.run_summary import RunSummary
from mtan_s1s2.callbacks.timing import EpochTimer


class _FailsInSecondEpoch(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 2)
        self.net.backend = "toy"

    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.net(batch["x"]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_failed_run_writes_status_error_and_epochs_so_far(tmp_path):
    data = DataLoader(
        [{"x": torch.randn(3), "label": torch.zeros(2, 2, dtype=torch.long)} for _ in range(8)], batch_size=4
    )
    trainer = L.Trainer(
        max_epochs=3,
        callbacks=[EpochTimer(warmup_epochs=1), RunSummary(output_dir=str(tmp_path))],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    with pytest.raises(torch.OutOfMemoryError):
        trainer.fit(_FailsInSecondEpoch(), train_dataloaders=data)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert [e["epoch"] for e in summary["epochs"]] == [0] and summary["backend"] == "toy"
