"""Fit a baseline on a datamodule and write what a training run writes.

``train.py`` calls :func:`fit_baseline` when ``model`` is a baseline (``model=random_forest``):
the baseline is fitted on the labelled pixels of the whole training samples, evaluated on
the validation and test splits exactly as the mTAN model is (same samples, crops and
normalisation), and the run directory gets the same files: ``summary.json`` (a
:class:`~mtan_s1s2.run_record.RunRecord` with ``val/*`` and ``test/*`` metrics),
``test_per_class.csv``, ``test_confusion_matrix.csv`` and ``.png``. A sweep
(``-m model=mtan,random_forest data.fold=1,2,3``) thus compares the models in one table.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchmetrics.classification import MulticlassConfusionMatrix

from mtan_s1s2.baselines.features import date_grid, pixel_features
from mtan_s1s2.baselines.random_forest import RandomForestBaseline
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.data.normalization import NormalizedDataset
from mtan_s1s2.metrics import classification_metrics, write_classification_report
from mtan_s1s2.run_record import SUMMARY_FILE, RunRecord
from mtan_s1s2.utils.hardware import hardware, peak_memory_mb, versions

log = logging.getLogger(__name__)


def _features(loader: Any, grid: Any, ignore_index: int) -> tuple[np.ndarray, np.ndarray]:
    feats, labels = [], []
    for batch in loader:
        f, y = pixel_features(batch, grid, ignore_index)
        feats.append(f)
        labels.append(y)
    if not feats:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(feats), np.concatenate(labels)


def _metrics(
    preds: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int, prefix: str
) -> dict[str, float]:
    if target.size == 0:
        return {}
    values = classification_metrics(num_classes, ignore_index)(torch.from_numpy(preds), torch.from_numpy(target))
    return {f"{prefix}/{k}": float(v) for k, v in values.items()}


def fit_baseline(
    baseline: RandomForestBaseline,
    datamodule: SITSDataModule,
    output_dir: Path,
    extra: dict[str, Any] | None = None,
    test: bool = True,
) -> dict[str, float]:
    """Fit ``baseline`` on the training split, evaluate it, write the run's files.

    Args:
        baseline: The baseline to fit.
        datamodule: The data of the run (its splits and normalisation).
        output_dir: The run directory.
        extra: Fields recorded in ``summary.json`` (``seed``, ``task_name``, ...).
        test: Also evaluate the test split (``test=false`` in the config: validation only,
            for choices made without looking at test data).

    Returns:
        The ``val/*`` and ``test/*`` metrics.

    Raises:
        ValueError: If the training split has no labelled pixel.
    """
    start = time.perf_counter()
    ii, k = int(datamodule.ignore_index), int(datamodule.num_classes)
    train = datamodule.loader(NormalizedDataset(datamodule.raw_dataset("train"), datamodule.norm_stats))
    grid = date_grid(train, datamodule.modalities, baseline.features, baseline.step_days)
    x_train, y_train = _features(train, grid, ii)
    if y_train.size == 0:
        raise ValueError("The training split has no labelled pixel: nothing to fit the baseline on.")
    log.info(
        "Fitting %s on %d training pixels x %d features (%s dates)",
        baseline, *x_train.shape, "common" if grid.raw else "interpolated",
    )  # fmt: skip
    baseline.fit(x_train, y_train)
    fit_s = time.perf_counter() - start
    metrics: dict[str, float] = {}
    confmat = None
    datamodule.setup("fit")
    splits = [("val", datamodule.val_dataloader())]
    if test:
        datamodule.setup("test")
        splits.append(("test", datamodule.test_dataloader()))
    for split, loader in splits:
        x, y = _features(loader, grid, ii)
        if y.size == 0:
            log.warning("The %s split has no labelled pixel: no %s metrics.", split, split)
            continue
        preds = baseline.predict_proba(x, k).argmax(axis=1)
        metrics.update(_metrics(preds, y, k, ii, split))
        if split == "test":
            confmat = MulticlassConfusionMatrix(k, ignore_index=ii)(torch.from_numpy(preds), torch.from_numpy(y))
    if confmat is not None:
        write_classification_report(output_dir, list(datamodule.class_names), confmat, ii)
    extra = dict(extra or {})
    record = RunRecord(
        backend=baseline.backend,
        requested_backend=baseline.backend,
        peak_memory_mb=peak_memory_mb("cpu"),
        metrics=dict(sorted(metrics.items())),
        versions=versions(),
        hardware=hardware("cpu"),
        seed=extra.pop("seed", None),
        task_name=extra.pop("task_name", None),
        extra={
            **extra,
            "baseline": {"params": baseline.params, "features": "raw" if grid.raw else "interpolated"},
            "n_train_pixels": int(y_train.size),
            "fit_s": fit_s,
        },
    )
    record.write(output_dir / SUMMARY_FILE)
    log.info("Baseline metrics: %s", {m: round(v, 4) for m, v in metrics.items()})
    return metrics


__all__ = ["fit_baseline"]
