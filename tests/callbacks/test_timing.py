import json

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from mtan_s1s2.callbacks.run_summary import RunSummary
from mtan_s1s2.callbacks.timing import EpochTimer
from mtan_s1s2.run_record import EpochTiming


class _Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 2)
        self.net.backend = "toy"

    def training_step(self, batch, batch_idx):
        return self.net(batch["x"]).square().mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/OA", torch.tensor(0.5), batch_size=batch["x"].shape[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n=12, bs=4):
    data = [{"x": torch.randn(3), "label": torch.zeros(2, 2, dtype=torch.long)} for _ in range(n)]
    return DataLoader(data, batch_size=bs)


def test_epoch_timer_logs_and_summarises(tmp_path):
    timer = EpochTimer(warmup_epochs=1)
    summary = RunSummary(output_dir=str(tmp_path), extra={"seed": 3})
    trainer = L.Trainer(
        max_epochs=3,
        callbacks=[timer, summary],
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="", version=""),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    trainer.fit(_Tiny(), train_dataloaders=_loader(), val_dataloaders=_loader(4))
    assert [e.warmup for e in timer.epochs] == [True, False, False]
    assert all(e.train_samples == 12 for e in timer.epochs)
    assert all(e.train_epoch_s > 0 and e.val_epoch_s > 0 for e in timer.epochs)
    s = timer.summary()
    assert s.n_timed_epochs == 2 and not s.warmup_only
    assert s.median_train_epoch_s > 0 and s.median_train_samples_per_s > 0
    for key in ("time/train_epoch_s", "time/val_epoch_s", "time/train_samples_per_s", "time/warmup"):
        assert key in trainer.callback_metrics
    metrics_csv = (tmp_path / "metrics.csv").read_text().splitlines()
    assert "time/train_epoch_s" in metrics_csv[0]
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["backend"] == "toy" and data["seed"] == 3
    assert data["n_parameters"] == 8
    assert data["median_train_epoch_s"] == pytest.approx(s.median_train_epoch_s)
    assert [e["warmup"] for e in data["epochs"]] == [True, False, False]
    assert data["peak_memory_mb"] > 0
    assert data["versions"]["torch"] == torch.__version__
    assert data["hardware"]["cpu_count"] >= 1
    assert data["metrics"]["val/OA"] == pytest.approx(0.5)


def test_warmup_only_summary_uses_all_epochs():
    timer = EpochTimer(warmup_epochs=5)
    timer.epochs = [EpochTiming(0, 2.0, None, 4, 2.0, warmup=True)]
    s = timer.summary()
    assert s.warmup_only and s.median_train_epoch_s == 2.0 and s.median_val_epoch_s is None


def test_negative_warmup_raises():
    with pytest.raises(ValueError, match="warmup_epochs"):
        EpochTimer(warmup_epochs=-1)
