"""``metrics.csv`` that survives a resume: the CSV logger of ``logger=csv`` (and ``tensorboard``).

Lightning's ``CSVLogger`` warns "Experiment logs directory ... exists and is not empty.
Previous log files in this directory will be deleted" on every run (the run directory
already holds Hydra's ``.hydra/`` and ``train.log``), and deletes ``metrics.csv`` when a
requeued or resumed job writes to the same directory. :class:`RunCSVLogger` keeps the rows
a resumed run continues from, and drops those the resumed run logs again (from the
checkpoint's step on), so ``metrics.csv`` holds each epoch once.
"""

from __future__ import annotations

import csv
import os

import lightning as L
from lightning.fabric.loggers.csv_logs import _ExperimentWriter as _FabricExperimentWriter
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, appending to an existing ``metrics.csv`` instead of deleting it."""

    def __init__(self, log_dir: str) -> None:
        self.rows = 0
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        """Read the header and row count of an existing file (Lightning warns and deletes it)."""
        if not self._fs.isfile(self.metrics_file_path):
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            reader = csv.DictReader(f)
            self.rows = sum(1 for _ in reader)
            self.metrics_keys = sorted(reader.fieldnames or [])

    def save(self) -> None:
        """Append the rows logged since the last save."""
        pending = len(self.metrics)
        super().save()
        self.rows += pending

    def drop_rows_from_step(self, step: int) -> int:
        """Remove the rows logged at ``step`` or later; returns how many were removed."""
        self.save()
        if not self._fs.isfile(self.metrics_file_path):
            return 0
        with self._fs.open(self.metrics_file_path, "r", newline="") as f:
            rows = list(csv.DictReader(f))
        kept = [r for r in rows if not r.get("step") or float(r["step"]) < step]
        if len(kept) < len(rows):
            with self._fs.open(self.metrics_file_path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
                writer.writeheader()
                writer.writerows(kept)
        self.rows = len(kept)
        return len(rows) - len(kept)


class RunCSVLogger(CSVLogger, Callback):
    """``CSVLogger`` for a run directory that may already exist (Hydra's, or a resumed run's).

    Writes ``<save_dir>/<name>/<version>/metrics.csv`` (``hparams.yaml`` beside it) like
    ``CSVLogger``, flushing every ``flush_logs_every_n_steps`` logged steps (default 1:
    every epoch's rows are on disk when a job is killed), without the "exists and is not
    empty" warning. An existing ``metrics.csv`` is continued, not deleted. The logger is
    also a callback (``train.py`` adds it to the trainer's callbacks): a fit resumed from a
    checkpoint at optimiser step ``G`` drops the rows logged at step ``G`` or later, which
    it logs again (rows of earlier steps are work it does not redo: an epoch's training
    row is logged at its last step ``G - 1``).

    Args:
        save_dir: Save directory.
        name: Experiment sub-folder (``""``: none).
        version: Version sub-folder (``""``: none).
        prefix: Prefix of every metric key.
        flush_logs_every_n_steps: Write the rows to disk every this many logged steps.
    """

    def __init__(
        self,
        save_dir: str,
        name: str | None = "",
        version: int | str | None = "",
        prefix: str = "",
        flush_logs_every_n_steps: int = 1,
    ) -> None:
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)

    @property
    @rank_zero_experiment
    def experiment(self) -> _FabricExperimentWriter:
        """The writer (continues an existing ``metrics.csv``)."""
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    @property
    def metrics_file(self) -> str:
        """Path of ``metrics.csv``."""
        return os.path.join(self.log_dir, ExperimentWriter.NAME_METRICS_FILE)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A resumed fit: drop the rows it logs again (rank 0)."""
        if trainer.ckpt_path and rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by Lightning
            writer = self.experiment
            assert isinstance(writer, _AppendingWriter)
            writer.drop_rows_from_step(trainer.global_step)


__all__ = ["RunCSVLogger"]
