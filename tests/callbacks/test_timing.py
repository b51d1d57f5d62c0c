import json
import time

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


class _Slow(_Tiny):
    """0.1 s per training batch, 0.3 s per validation run (one batch)."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.1)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        time.sleep(0.3)
        super().validation_step(batch, batch_idx)


def test_resumed_epoch_adds_the_time_before_the_checkpoint_and_counts_validation_once(tmp_path):
    from mtan_s1s2.callbacks.checkpoint import LastCheckpoint

    def trainer(**kw):
        return L.Trainer(
            callbacks=[EpochTimer(warmup_epochs=0), LastCheckpoint(dirpath=str(tmp_path), every_n_train_steps=2)],
            logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
            val_check_interval=0.5, num_sanity_val_steps=0, **kw,
        )  # fmt: skip

    # 4 batches per epoch, validation after batches 2 and 4; stopped after step 3: last.ckpt
    # is the one written after the validation of step 2
    first = trainer(max_steps=3)
    first.fit(_Slow(), train_dataloaders=_loader(n=16), val_dataloaders=_loader(n=4, bs=4))
    assert torch.load(tmp_path / "last.ckpt")["global_step"] == 2
    second = trainer(max_epochs=1)
    second.fit(_Slow(), train_dataloaders=_loader(n=16), val_dataloaders=_loader(n=4, bs=4), ckpt_path="last")
    (epoch,) = second.callbacks[0].epochs  # type: ignore[attr-defined]
    assert epoch.resumed and epoch.warmup and epoch.train_samples == 16
    assert epoch.val_epoch_s >= 0.6  # both validations, one in each process
    assert (
        0.4 <= epoch.train_epoch_s < 2.0
    )  # batches 1-2 before the checkpoint, 3-4 after; step 3 of the first run is lost
