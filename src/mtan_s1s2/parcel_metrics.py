"""Parcel-level results: pixel probabilities averaged per parcel, parcel metrics and reports.

Crop maps are delivered per parcel (field), and a parcel's class is decided from all of its
pixels. The rule, the same in the test (``train.py``, ``eval.py``), the baselines and
prediction (``predict.py``):

* the class probabilities of a parcel are the **mean of the softmax probabilities** of its
  pixels (the ``ignore_index`` class left out of the softmax, as for pixels); pixels without
  a parcel are left out, and in the test so are pixels whose label is ``ignore_index``
  (pixels of another split, unlabelled or buffer pixels): a parcel cut by a split boundary
  (``data.split.by=blocks``) is aggregated over its test pixels only;
* the parcel's class is the **argmax** of that mean, its *confidence* the mean probability
  of that class;
* the parcel's reference class is the **majority label** of its labelled pixels (ties: the
  lower class index); parcels without a labelled pixel have none and are not scored;
* the metrics count **each parcel once**: parcel OA, macro-F1, mIoU and Cohen's kappa
  (:func:`~mtan_s1s2.metrics.classification_metrics` on one prediction per parcel) and per
  class the user's and producer's accuracy over parcels (``test_parcel_per_class.csv``).

Metric names: ``test_parcel/OA``, ``test_parcel/F1``, ``test_parcel/mIoU``,
``test_parcel/kappa`` and ``test_parcel/n_parcels``, beside the pixel ``test/*`` metrics.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.classification import MulticlassConfusionMatrix
from torchmetrics.utilities import dim_zero_cat

from mtan_s1s2.metrics import classification_metrics, write_confusion_csv, write_per_class_csv

PARCEL_PREFIX = "test_parcel"
"""Prefix of the parcel metrics (``test_parcel/OA``, ...)."""
PARCEL_PER_CLASS_FILE = "test_parcel_per_class.csv"
PARCEL_CONFUSION_CSV_FILE = "test_parcel_confusion_matrix.csv"
PARCELS_FILE = "test_parcels.csv"
"""One row per test parcel: name, pixels, reference, predicted class, confidence."""


@dataclass
class ParcelResult:
    """The aggregated parcels (see the module docstring), one entry per parcel.

    Attributes:
        parcel: ``(P,)`` parcel ids (as given, ascending).
        n_pixels: ``(P,) int64`` pixels averaged.
        proba: ``(P, K) float64`` mean class probabilities.
        predicted: ``(P,) int64`` argmax of ``proba``.
        confidence: ``(P,) float64`` ``proba`` of the predicted class.
        reference: ``(P,) int64`` majority label of the labelled pixels (``ignore_index``
            when none is labelled or no labels were given).
        reference_share: ``(P,) float64`` share of the labelled pixels with the reference
            class (1 for a parcel of one label; NaN without labels).
    """

    parcel: np.ndarray
    n_pixels: np.ndarray
    proba: np.ndarray
    predicted: np.ndarray
    confidence: np.ndarray
    reference: np.ndarray
    reference_share: np.ndarray

    def __len__(self) -> int:
        return len(self.parcel)


def aggregate_parcels(
    parcel: np.ndarray, proba: np.ndarray, label: np.ndarray | None = None, ignore_index: int | None = None
) -> ParcelResult:
    """Average pixel probabilities per parcel (the rule of the module docstring).

    Args:
        parcel: ``(N,)`` parcel id of each pixel (any sortable values; integers < 0 = no parcel).
        proba: ``(N, K)`` class probabilities of each pixel (rows sum to 1).
        label: ``(N,)`` reference class index of each pixel, or None (prediction).
        ignore_index: With ``label``: pixels of this label are left out.

    Returns:
        The parcels, ascending by id.

    Raises:
        ValueError: If the shapes do not agree.
    """
    parcel = np.asarray(parcel).reshape(-1)
    proba = np.asarray(proba, np.float64)
    if proba.ndim != 2 or proba.shape[0] != parcel.shape[0]:
        raise ValueError(f"proba must be (N, K) with N = {parcel.shape[0]} parcel ids, got shape {proba.shape}.")
    K = proba.shape[1]
    keep = np.ones(parcel.shape, bool)
    if parcel.dtype.kind in "iu":
        keep &= parcel >= 0
    if label is not None:
        label = np.asarray(label).reshape(-1).astype(np.int64)
        if label.shape != parcel.shape:
            raise ValueError(f"label must be (N,) with N = {parcel.shape[0]}, got shape {label.shape}.")
        if ignore_index is not None:
            keep &= label != ignore_index
    ids, inverse = np.unique(parcel[keep], return_inverse=True)
    inverse = inverse.reshape(-1)
    P = len(ids)
    counts = np.bincount(inverse, minlength=P).astype(np.int64)
    sums = np.stack([np.bincount(inverse, weights=proba[keep, k], minlength=P) for k in range(K)], axis=1)
    mean = sums / np.maximum(counts, 1)[:, None] if P else np.zeros((0, K))
    predicted = mean.argmax(axis=1).astype(np.int64) if P else np.zeros(0, np.int64)
    confidence = mean[np.arange(P), predicted] if P else np.zeros(0)
    none = -1 if ignore_index is None else int(ignore_index)
    reference = np.full(P, none, np.int64)
    share = np.full(P, np.nan)
    if label is not None and P:
        lab = label[keep]
        n_classes = max(K, int(lab.max()) + 1)
        votes = np.bincount(inverse * n_classes + lab, minlength=P * n_classes).reshape(P, n_classes)
        if ignore_index is not None and 0 <= ignore_index < n_classes:
            votes[:, ignore_index] = 0
        total = votes.sum(axis=1)
        labelled = total > 0
        reference = np.where(labelled, votes.argmax(axis=1), none).astype(np.int64)
        share = np.where(labelled, votes.max(axis=1) / np.maximum(total, 1), np.nan)
    return ParcelResult(ids, counts, mean, predicted, confidence, reference, share)


def parcel_metrics(result: ParcelResult, num_classes: int, ignore_index: int) -> tuple[dict[str, float], Tensor]:
    """Parcel OA, macro-F1, mIoU, kappa and the parcel confusion matrix (each parcel counts once).

    Args:
        result: From :func:`aggregate_parcels` with labels.
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: Parcels without a reference class are left out.

    Returns:
        ``({"test_parcel/OA", ..., "test_parcel/n_parcels"}, confmat (K, K) int64)``; with no
        scored parcel the metrics are NaN and ``n_parcels`` 0.
    """
    scored = result.reference != ignore_index
    n = int(scored.sum())
    confmat = torch.zeros((num_classes, num_classes), dtype=torch.long)
    if n == 0:
        values = dict.fromkeys(("OA", "F1", "mIoU", "kappa"), float("nan"))
    else:
        preds = torch.from_numpy(result.predicted[scored])
        target = torch.from_numpy(result.reference[scored])
        values = {k: float(v) for k, v in classification_metrics(num_classes, ignore_index)(preds, target).items()}
        confmat = MulticlassConfusionMatrix(num_classes, ignore_index=ignore_index)(preds, target)
    out = {f"{PARCEL_PREFIX}/{k}": v for k, v in values.items()}
    out[f"{PARCEL_PREFIX}/n_parcels"] = float(n)
    return out, confmat


def masked_softmax(logits: Tensor, ignore_index: int | None, dim: int = 1) -> Tensor:
    """Softmax of ``logits`` over ``dim`` with the ``ignore_index`` class left out (its probability 0)."""
    logits = logits.float().clone()
    if ignore_index is not None and 0 <= ignore_index < logits.shape[dim]:
        logits.select(dim, ignore_index).fill_(-torch.inf)
    return torch.softmax(logits, dim=dim)


class ParcelAccumulator(Metric):
    """Collects the test pixels of every parcel, synchronised across DDP ranks.

    Each update keeps, for the pixels with a parcel and a label other than
    ``ignore_index``, the parcel index, the label and the class probabilities;
    :meth:`compute` aggregates them (:func:`aggregate_parcels`). Memory: ``K + 2`` numbers
    per test pixel.

    Args:
        ignore_index: The unlabelled class.
    """

    full_state_update = False
    parcel: list[Tensor]
    label: list[Tensor]
    proba: list[Tensor]

    def __init__(self, ignore_index: int) -> None:
        super().__init__()
        self.ignore_index = int(ignore_index)
        self.add_state("parcel", default=[], dist_reduce_fx="cat")
        self.add_state("label", default=[], dist_reduce_fx="cat")
        self.add_state("proba", default=[], dist_reduce_fx="cat")

    def update(self, logits: Tensor, target: Tensor, parcel: Tensor) -> None:
        """Add one batch.

        Args:
            logits: ``(B, K, H, W)``.
            target: ``(B, H, W)`` int64 labels.
            parcel: ``(B, H, W)`` int64 parcel index (< 0: none).
        """
        keep = (parcel >= 0) & (target != self.ignore_index)
        proba = masked_softmax(logits.detach(), self.ignore_index).permute(0, 2, 3, 1)  # (B, H, W, K)
        self.parcel.append(parcel[keep])
        self.label.append(target[keep])
        self.proba.append(proba[keep])

    @property
    def n_pixels(self) -> int:
        """Pixels collected on this rank."""
        return sum(int(p.numel()) for p in self.parcel) if isinstance(self.parcel, list) else int(self.parcel.numel())

    def compute(self) -> ParcelResult:
        """The aggregated parcels of every pixel collected."""
        parcel = dim_zero_cat(self.parcel).cpu().numpy() if self.n_pixels else np.zeros(0, np.int64)
        label = dim_zero_cat(self.label).cpu().numpy() if self.n_pixels else np.zeros(0, np.int64)
        proba = dim_zero_cat(self.proba).cpu().numpy() if self.n_pixels else np.zeros((0, 0), np.float32)
        return aggregate_parcels(parcel, proba, label, self.ignore_index)


def write_parcels_csv(
    path: Path, result: ParcelResult, class_names: Sequence[str], names: Sequence[str] | None = None
) -> Path:
    """Write one row per parcel (``test_parcels.csv``).

    Columns: ``parcel``, ``n_pixels``, ``reference`` / ``reference_name``,
    ``reference_share``, ``predicted`` / ``predicted_name``, ``confidence``.

    Args:
        path: The CSV.
        result: The parcels.
        class_names: Class names, index = class.
        names: Name of every parcel index (None: the ids themselves).

    Returns:
        ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)

    def class_name(k: int) -> str:
        return class_names[k] if 0 <= k < len(class_names) else ""

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["parcel", "n_pixels", "reference", "reference_name", "reference_share", "predicted", "predicted_name",
             "confidence"]
        )  # fmt: skip
        for i in range(len(result)):
            pid = result.parcel[i]
            name = names[int(pid)] if names is not None and 0 <= int(pid) < len(names) else pid
            ref, pred = int(result.reference[i]), int(result.predicted[i])
            writer.writerow(
                [name, int(result.n_pixels[i]), ref, class_name(ref), f"{result.reference_share[i]:.6f}", pred,
                 class_name(pred), f"{result.confidence[i]:.6f}"]
            )  # fmt: skip
    return path


def write_parcel_report(
    output_dir: Path,
    result: ParcelResult,
    class_names: Sequence[str],
    ignore_index: int,
    names: Sequence[str] | None = None,
) -> list[Path]:
    """``test_parcel_per_class.csv``, ``test_parcel_confusion_matrix.csv`` and ``test_parcels.csv``.

    Args:
        output_dir: Folder of the files.
        result: The test parcels (with labels).
        class_names: Class names, index = class.
        ignore_index: The unlabelled class.
        names: Name of every parcel index, for ``test_parcels.csv``.

    Returns:
        The three paths.
    """
    _, confmat = parcel_metrics(result, len(class_names), ignore_index)
    return [
        write_per_class_csv(output_dir / PARCEL_PER_CLASS_FILE, class_names, confmat, ignore_index, unit="parcels"),
        write_confusion_csv(output_dir / PARCEL_CONFUSION_CSV_FILE, class_names, confmat),
        write_parcels_csv(output_dir / PARCELS_FILE, result, class_names, names),
    ]


def parcel_names_of(datamodule: Any) -> list[str] | None:
    """The datamodule's parcel names (``parcel_names``), or None."""
    names = getattr(datamodule, "parcel_names", None)
    return cast(list[str], list(names)) if names else None


__all__ = [
    "PARCELS_FILE",
    "PARCEL_CONFUSION_CSV_FILE",
    "PARCEL_PER_CLASS_FILE",
    "PARCEL_PREFIX",
    "ParcelAccumulator",
    "ParcelResult",
    "aggregate_parcels",
    "masked_softmax",
    "parcel_metrics",
    "parcel_names_of",
    "write_parcel_report",
    "write_parcels_csv",
]
