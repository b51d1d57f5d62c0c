"""Test-time report of a run: per-class CSV, confusion matrix as CSV and PNG; the same per parcel."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from mtan_s1s2.metrics import write_classification_report
from mtan_s1s2.parcel_metrics import parcel_names_of, write_parcel_report

log = logging.getLogger(__name__)


class ClassificationReport(Callback):
    """Write ``test_per_class.csv``, ``test_confusion_matrix.csv`` and ``.png`` after testing.

    Reads the confusion matrix the training module accumulated over the test split
    (``pl_module.test_confmat``, a torchmetrics ``MulticlassConfusionMatrix``, synchronised
    across DDP ranks) and writes the report from rank 0. With a TensorBoard logger, the
    PNG is also logged as the image ``test/confusion_matrix``. When the test batches carried
    parcel ids, it also writes the parcel report (``test_parcel_per_class.csv``,
    ``test_parcel_confusion_matrix.csv``, ``test_parcels.csv``:
    :func:`~mtan_s1s2.parcel_metrics.write_parcel_report`). Used by ``train.py`` (callbacks
    ``classification_report``) and ``eval.py``.

    Args:
        output_dir: Folder of the files (default: ``trainer.default_root_dir``).

    Attributes:
        paths: The files written by the last test.
        parcel_paths: The parcel files written by the last test (empty without parcels).
    """

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.paths: list[Path] = []
        self.parcel_paths: list[Path] = []

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Compute the matrix on every rank, write the files on rank 0."""
        confmat = pl_module.test_confmat.compute().cpu()  # type: ignore[union-attr,operator]
        if trainer.is_global_zero:
            out = Path(self.output_dir or trainer.default_root_dir)
            names = list(getattr(pl_module, "class_names", [f"class_{i}" for i in range(confmat.shape[0])]))
            self.paths = write_classification_report(out, names, confmat, int(getattr(pl_module, "ignore_index", -1)))
            log.info("Per-class report of the test split: %s", self.paths[0])
            self._log_image(trainer, self.paths[2])

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write the parcel report (rank 0), after the module aggregated the parcels."""
        result = getattr(pl_module, "test_parcel_result", None)
        self.parcel_paths = []
        if result is None or not trainer.is_global_zero:
            return
        out = Path(self.output_dir or trainer.default_root_dir)
        names = list(getattr(pl_module, "class_names", []))
        datamodule = getattr(trainer, "datamodule", None)
        self.parcel_paths = write_parcel_report(
            out, result, names, int(getattr(pl_module, "ignore_index", -1)), parcel_names_of(datamodule)
        )
        log.info("Per-class report of the test parcels: %s (%d parcels)", self.parcel_paths[0], len(result))

    @staticmethod
    def _log_image(trainer: L.Trainer, png: Path) -> None:
        """Log the confusion-matrix PNG to every TensorBoard logger, ``(H, W, C)`` uint8."""
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if not loggers:
            return
        from matplotlib.image import imread

        image = (imread(png)[..., :3] * 255).astype(np.uint8)
        for logger in loggers:
            logger.experiment.add_image("test/confusion_matrix", image, trainer.global_step, dataformats="HWC")
            logger.experiment.flush()


__all__ = ["ClassificationReport"]
