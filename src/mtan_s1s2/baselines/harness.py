"""Fit a baseline on a datamodule and write what a training run writes.

``train.py`` runs a baseline (``model=random_forest``, ``lightgbm``, ``minirocket``,
``multirocket_hydra``) through :class:`BaselineRunner`: it is fitted on the labelled pixels
of the whole training samples (LightGBM also reads the validation pixels, for early
stopping), saved to ``checkpoints/<backend>.joblib`` with its date grid and the data
contract, evaluated on the validation and test splits exactly as the mTAN model is (same
samples, crops and normalisation), and the run directory gets the same files:
``summary.json`` (a :class:`~mtan_s1s2.run_record.RunRecord` with ``val/*`` and ``test/*``
metrics), ``test_per_class.csv``, ``test_confusion_matrix.csv`` and ``.png``,
``test_probabilities.npz``; with parcel ids (``data.split.parcels``) also the
``test_parcel/*`` metrics and the parcel report (:mod:`mtan_s1s2.parcel_metrics`).
``eval.py ckpt_path=<run>/checkpoints/<backend>.joblib`` tests it again and ``predict.py``
maps with it. A sweep (``-m model=mtan,random_forest,lightgbm data.split.fold=1,2,3``)
thus compares the models in one table.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchmetrics.classification import MulticlassConfusionMatrix

from mtan_s1s2.baselines.base import FeatureBaseline, spatial_context_of
from mtan_s1s2.baselines.features import DateGrid, Layout, date_grid, pixel_features
from mtan_s1s2.data.datamodule import SITSDataModule, data_contract
from mtan_s1s2.data.normalization import NormalizedDataset
from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, PixelProbabilities
from mtan_s1s2.metrics import classification_metrics, write_classification_report
from mtan_s1s2.parcel_metrics import aggregate_parcels, parcel_metrics, parcel_names_of, write_parcel_report
from mtan_s1s2.run_record import SUMMARY_FILE, RunRecord
from mtan_s1s2.utils.hardware import hardware, peak_memory_mb, versions

log = logging.getLogger(__name__)


def _features(
    loader: Any, grid: DateGrid, ignore_index: int, layout: Layout, spatial_context: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Features, labels, positions and parcels of the labelled pixels.

    Returns:
        ``(features (N, F), labels (N,), where (N, 3) int64: sample, row, column, parcel index
        (N,) or None without ``parcel`` in the batches)``.
    """
    feats, labels, parcels, where = [], [], [], []
    for batch in loader:
        f, y = pixel_features(batch, grid, ignore_index, layout=layout, spatial_context=spatial_context)
        feats.append(f)
        labels.append(y)
        b, r, c = np.nonzero(batch["label"].numpy() != ignore_index)  # the order of pixel_features
        where.append(np.stack([batch["patch_id"].numpy()[b], r, c], axis=1).astype(np.int64))
        if "parcel" in batch:  # the same pixels in the same order as pixel_features
            keep = batch["label"].numpy() != ignore_index
            parcels.append(batch["parcel"].numpy()[keep].astype(np.int64))
    if not feats:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64), np.zeros((0, 3), np.int64), None
    parcel = np.concatenate(parcels) if len(parcels) == len(feats) else None
    return np.concatenate(feats), np.concatenate(labels), np.concatenate(where), parcel


def _metrics(
    preds: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int, prefix: str
) -> dict[str, float]:
    if target.size == 0:
        return {}
    values = classification_metrics(num_classes, ignore_index)(torch.from_numpy(preds), torch.from_numpy(target))
    return {f"{prefix}/{k}": float(v) for k, v in values.items()}


class BaselineRunner:
    """Fit, test and report a feature baseline on a datamodule, as a Lightning run would.

    The same steps as the Lightning task (:class:`~mtan_s1s2.cli.runners.LightningRunner`):
    :meth:`fit` (training pixels, then the validation metrics), :meth:`test` (test
    metrics, per-class report) and :meth:`finish` (``summary.json``, the end of the run in
    the log).

    Args:
        baseline: The baseline (a new one to fit, or a fitted one from
            :func:`~mtan_s1s2.baselines.base.load_baseline`).
        datamodule: The data of the run (its splits and normalisation).
        output_dir: The run directory (``checkpoints/<backend>.joblib``, report files).
        extra: Fields recorded in ``summary.json`` (``seed``, ``task_name``, ...).
    """

    def __init__(
        self,
        baseline: FeatureBaseline,
        datamodule: SITSDataModule,
        output_dir: Path,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.baseline = baseline
        self.datamodule = datamodule
        self.output_dir = Path(output_dir)
        self.extra = dict(extra or {})
        self.ignore_index, self.num_classes = int(datamodule.ignore_index), int(datamodule.num_classes)
        self.n_train_pixels: int | None = None
        self.fit_s: float | None = None
        self.checkpoint: Path | None = None

    @property
    def objects(self) -> dict[str, Any]:
        """What ``train()`` returns: the ``datamodule``, the ``model`` (the baseline) and no ``trainer``."""
        return {"datamodule": self.datamodule, "model": self.baseline, "trainer": None}

    def fit(self, ckpt_path: str | None = None) -> dict[str, float]:
        """Fit on the labelled pixels of the whole training samples; save it; the validation metrics.

        A baseline that early-stops (:attr:`~mtan_s1s2.baselines.base.FeatureBaseline.uses_validation`)
        also gets the validation pixels. The saved model holds its date grid and the data
        contract (:func:`~mtan_s1s2.data.datamodule.data_contract`).

        Args:
            ckpt_path: Not used (a baseline is fitted in one go, there is nothing to resume).

        Returns:
            The ``val/*`` metrics (none when the validation split has no labelled pixel).

        Raises:
            ValueError: If the training split has no labelled pixel.
        """
        start = time.perf_counter()
        datamodule, baseline = self.datamodule, self.baseline
        train = datamodule.loader(NormalizedDataset(datamodule.raw_dataset("train"), datamodule.norm_stats))
        shared = baseline.layout == "series"
        grid = date_grid(train, datamodule.modalities, baseline.features, baseline.step_days, shared=shared)
        x_train, y_train, _, _ = _features(train, grid, self.ignore_index, baseline.layout, baseline.spatial_context)
        if y_train.size == 0:
            raise ValueError("The training split has no labelled pixel: nothing to fit the baseline on.")
        log.info(
            "Fitting %s on %d training pixels x %d features (%s dates)",
            baseline, *x_train.shape, "common" if grid.raw else "interpolated",
        )  # fmt: skip
        baseline.grid = grid
        baseline.contract = data_contract(datamodule)
        baseline.in_channels = {m: int(c) for m, c in datamodule.in_channels.items()}
        datamodule.setup("fit")
        x_val = y_val = None
        if baseline.uses_validation:
            x_val, y_val, _, _ = _features(
                datamodule.val_dataloader(), grid, self.ignore_index, baseline.layout, baseline.spatial_context
            )
        baseline.fit(x_train, y_train, x_val, y_val)
        self.fit_s = time.perf_counter() - start
        self.n_train_pixels = int(y_train.size)
        self.checkpoint = baseline.save(self.output_dir / "checkpoints" / baseline.checkpoint_name)
        return self._evaluate("val", datamodule.val_dataloader())

    def test(self, ckpt_path: str | None = None) -> dict[str, float]:
        """The ``test/*`` metrics; writes ``test_per_class.csv`` and ``test_confusion_matrix.{csv,png}``.

        Args:
            ckpt_path: Not used (the fitted or loaded baseline is tested).
        """
        self.datamodule.setup("test")
        return self._evaluate("test", self.datamodule.test_dataloader())

    def _evaluate(self, split: str, loader: Any) -> dict[str, float]:
        if self.baseline.grid is None:
            raise RuntimeError("The baseline has no date grid: fit it (or load a fitted one) before evaluating.")
        x, y, where, parcel = _features(
            loader, self.baseline.grid, self.ignore_index, self.baseline.layout, spatial_context_of(self.baseline)
        )
        if y.size == 0:
            log.warning("The %s split has no labelled pixel: no %s metrics.", split, split)
            return {}
        proba = self.baseline.predict_proba(x, self.num_classes)
        preds = proba.argmax(axis=1)
        metrics = _metrics(preds, y, self.num_classes, self.ignore_index, split)
        if split == "test":
            k, ii = self.num_classes, self.ignore_index
            confmat = MulticlassConfusionMatrix(k, ignore_index=ii)(torch.from_numpy(preds), torch.from_numpy(y))
            names = list(self.datamodule.class_names)
            write_classification_report(self.output_dir, names, confmat, ii)
            pixels = PixelProbabilities(where[:, 0], where[:, 1], where[:, 2], y, proba, names, ii)
            pixels.sorted().write(self.output_dir / PROBABILITIES_FILE)
            if parcel is not None:  # the parcel rule of mtan_s1s2.parcel_metrics, on the baseline's probabilities
                result = aggregate_parcels(parcel, proba, y, ii)
                metrics.update(parcel_metrics(result, k, ii)[0])
                write_parcel_report(self.output_dir, result, names, ii, parcel_names_of(self.datamodule))
        return metrics

    def finish(self, metrics: dict[str, float]) -> None:
        """Write ``summary.json`` (a :class:`~mtan_s1s2.run_record.RunRecord`) and log the end of the run."""
        extra = dict(self.extra)
        grid = self.baseline.grid
        record = RunRecord(
            backend=self.baseline.backend,
            requested_backend=self.baseline.backend,
            peak_memory_mb=peak_memory_mb("cpu"),
            metrics=dict(sorted(metrics.items())),
            versions=versions(),
            hardware=hardware("cpu"),
            seed=extra.pop("seed", None),
            task_name=extra.pop("task_name", None),
            extra={
                **extra,
                "baseline": {
                    "params": self.baseline.params,
                    "features": None if grid is None else "raw" if grid.raw else "interpolated",
                    "layout": self.baseline.layout,
                    "dates": None if grid is None else {m: len(d) for m, d in grid.doy.items()},
                    "fit": dict(self.baseline.fit_info),
                },
                "n_train_pixels": self.n_train_pixels,
                "fit_s": self.fit_s,
            },
        )
        record.write(self.output_dir / SUMMARY_FILE)
        if self.checkpoint is not None:
            log.info("Checkpoint: %s", self.checkpoint.resolve())
        test = {k: v for k, v in sorted(metrics.items()) if k.startswith(("test/", "test_parcel/"))}
        if test:
            log.info("Test metrics: %s", ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
        log.info("Outputs in %s", self.output_dir.resolve())


__all__ = ["BaselineRunner"]
