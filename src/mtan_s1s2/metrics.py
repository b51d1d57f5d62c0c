"""Classification metrics and the per-class report of a confusion matrix.

One definition serves the training module, ``eval.py`` and the baselines, so their numbers
are comparable: overall accuracy ``OA``, macro ``F1``, ``mIoU`` and Cohen's ``kappa``
(torchmetrics, ``ignore_index`` pixels excluded, classes absent from both prediction and
reference left out of macro averages), and per class the support, the user's and producer's
accuracy, F1 and IoU computed from the confusion matrix (rows = reference class, columns =
predicted class).

In remote-sensing terms (Congalton, 1991; Olofsson et al., 2014, "Good practices for
estimating area and assessing accuracy of land change"): the *user's accuracy* of a class
is the share of the pixels mapped as that class that are that class on the ground (the
precision, 1 - commission error), the *producer's accuracy* the share of the reference
pixels of that class that the map gets right (the recall, 1 - omission error).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassCohenKappa,
    MulticlassF1Score,
    MulticlassJaccardIndex,
)

PER_CLASS_FILE = "test_per_class.csv"
CONFUSION_CSV_FILE = "test_confusion_matrix.csv"
CONFUSION_PNG_FILE = "test_confusion_matrix.png"


def classification_metrics(num_classes: int, ignore_index: int) -> MetricCollection:
    """``OA``, ``F1`` (macro), ``mIoU`` and ``kappa`` over the labelled pixels.

    Args:
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: Label excluded from every metric.

    Returns:
        A torchmetrics collection updated with ``(preds, target)``, both ``(N, ...)`` int64.
    """
    k, ii = num_classes, ignore_index
    return MetricCollection(
        {
            "OA": MulticlassAccuracy(k, average="micro", ignore_index=ii),
            "F1": MulticlassF1Score(k, average="macro", ignore_index=ii),
            "mIoU": MulticlassJaccardIndex(k, average="macro", ignore_index=ii),
            "kappa": MulticlassCohenKappa(k, ignore_index=ii),
        }
    )


class LabelledLoss(Metric):
    """The loss of an epoch over all its labelled pixels, synchronised across DDP ranks.

    Each batch adds the sum of its per-pixel losses and its number of labelled pixels (or
    their total class weight), so a batch of 100 labelled pixels counts 100 times as much
    as a batch of one: the result is the pixel-weighted mean, not a mean of batch means.

    Attributes:
        total: Sum of the per-pixel (weighted) losses, float32.
        weight: Labelled pixels (their total class weight with class weights), float32.
        pixels: Labelled pixels, int64.
    """

    full_state_update = False
    total: Tensor
    weight: Tensor
    pixels: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("weight", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("pixels", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, total: Tensor, weight: Tensor, pixels: Tensor | int) -> None:
        """Add one batch.

        Args:
            total: Scalar, sum of the batch's per-pixel losses (detached).
            weight: Scalar, its labelled pixels (or their total class weight).
            pixels: Its labelled pixels.
        """
        self.total += total.detach().float()
        self.weight += weight.detach().float()
        self.pixels += torch.as_tensor(pixels, dtype=torch.long, device=self.pixels.device)

    def compute(self) -> Tensor:
        """``total / weight``; NaN when no pixel was labelled (there is no loss to report)."""
        if self.weight <= 0:
            return torch.tensor(float("nan"), device=self.total.device)
        return self.total / self.weight


def per_class_scores(confmat: Tensor | np.ndarray) -> dict[str, np.ndarray]:
    """Support, predicted pixels, user's and producer's accuracy, F1 and IoU of every class.

    Args:
        confmat: ``(K, K)`` pixel counts, rows = reference class, columns = predicted.

    Returns:
        ``{"support": (K,) int64`` reference pixels, ``"predicted": (K,) int64`` pixels
        mapped as the class, ``"users_accuracy"`` (precision) ``, "producers_accuracy"``
        (recall), ``"F1"``, ``"IoU": (K,) float64}``; a ratio with an empty denominator
        (no pixel mapped as the class, or none in the reference) is 0.
    """
    m = np.asarray(confmat.cpu() if isinstance(confmat, Tensor) else confmat, dtype=np.float64)
    tp = np.diag(m)
    fp = m.sum(axis=0) - tp
    fn = m.sum(axis=1) - tp

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, np.divide(num, den, out=np.zeros_like(num), where=den > 0))

    return {
        "support": m.sum(axis=1).astype(np.int64),
        "predicted": m.sum(axis=0).astype(np.int64),
        "users_accuracy": ratio(tp, tp + fp),
        "producers_accuracy": ratio(tp, tp + fn),
        "F1": ratio(2 * tp, 2 * tp + fp + fn),
        "IoU": ratio(tp, tp + fp + fn),
    }


def write_per_class_csv(
    path: Path, class_names: Sequence[str], confmat: Tensor | np.ndarray, ignore_index: int, unit: str = "pixels"
) -> Path:
    """Write the per-class report (the ``ignore_index`` row left out).

    Columns: ``class_index``, ``class_name``, ``support_<unit>`` (reference pixels or
    parcels), ``predicted_<unit>``, ``users_accuracy`` (precision), ``producers_accuracy``
    (recall), ``F1``, ``IoU`` (:func:`per_class_scores`).

    Args:
        path: The CSV.
        class_names: Class names, index = class.
        confmat: ``(K, K)`` counts, rows = reference class, columns = predicted.
        ignore_index: The unlabelled class (no row).
        unit: What ``confmat`` counts: ``pixels`` or ``parcels`` (column names).

    Returns:
        ``path``.
    """
    scores = per_class_scores(confmat)
    ratios = ("users_accuracy", "producers_accuracy", "F1", "IoU")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["class_index", "class_name", f"support_{unit}", f"predicted_{unit}", *ratios])
        for i, name in enumerate(class_names):
            if i == ignore_index:
                continue
            counts = [int(scores["support"][i]), int(scores["predicted"][i])]
            writer.writerow([i, name, *counts, *(f"{scores[r][i]:.6f}" for r in ratios)])
    return path


def write_confusion_csv(path: Path, class_names: Sequence[str], confmat: Tensor | np.ndarray) -> Path:
    """Write the confusion matrix (rows = reference class, columns = predicted class).

    Returns:
        ``path``.
    """
    m = np.asarray(confmat.cpu() if isinstance(confmat, Tensor) else confmat, dtype=np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["reference\\predicted", *class_names])
        for i, name in enumerate(class_names):
            writer.writerow([name, *[int(v) for v in m[i]]])
    return path


def plot_confusion_matrix(
    confmat: Tensor | np.ndarray, class_names: Sequence[str], path: Path, ignore_index: int | None = None
) -> Path:
    """Save the confusion matrix as a PNG: colours = share of each reference class (row), numbers = pixel counts.

    The ``ignore_index`` class is left out when it is empty.

    Returns:
        ``path``.
    """
    from matplotlib.figure import Figure

    matrix = np.asarray(confmat.cpu() if isinstance(confmat, Tensor) else confmat, dtype=np.int64)
    keep = np.ones(len(class_names), dtype=bool)
    if ignore_index is not None and 0 <= ignore_index < len(class_names):
        if matrix[ignore_index].sum() == 0 and matrix[:, ignore_index].sum() == 0:
            keep[ignore_index] = False
    m = matrix[np.ix_(keep, keep)]
    names = [n for n, k in zip(class_names, keep, strict=True) if k]
    share = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    k = len(names)
    fig = Figure(figsize=(max(5.0, 0.55 * k + 2.5), max(4.5, 0.5 * k + 2.0)))
    ax = fig.subplots()
    image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="share of the reference class")
    ax.set_xticks(range(k), names, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(k), names, fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("reference class")
    if k <= 25:
        for i in range(k):
            for j in range(k):
                if m[i, j]:
                    colour = "white" if share[i, j] > 0.5 else "black"
                    ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize=6, color=colour)
    oa = np.trace(m) / max(m.sum(), 1)
    ax.set_title(f"Confusion matrix (pixels), OA = {oa:.4f}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def write_classification_report(
    output_dir: Path, class_names: Sequence[str], confmat: Tensor | np.ndarray, ignore_index: int
) -> list[Path]:
    """The per-class CSV, the confusion matrix CSV and its PNG, in ``output_dir``.

    Returns:
        The three paths.
    """
    return [
        write_per_class_csv(output_dir / PER_CLASS_FILE, class_names, confmat, ignore_index),
        write_confusion_csv(output_dir / CONFUSION_CSV_FILE, class_names, confmat),
        plot_confusion_matrix(confmat, class_names, output_dir / CONFUSION_PNG_FILE, ignore_index),
    ]


__all__ = [
    "CONFUSION_CSV_FILE",
    "CONFUSION_PNG_FILE",
    "PER_CLASS_FILE",
    "LabelledLoss",
    "classification_metrics",
    "per_class_scores",
    "plot_confusion_matrix",
    "write_classification_report",
    "write_confusion_csv",
    "write_per_class_csv",
]
