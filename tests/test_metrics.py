"""Metrics and the per-class report: the same numbers from torchmetrics and from the confusion matrix."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchmetrics.classification import MulticlassConfusionMatrix, MulticlassF1Score, MulticlassJaccardIndex

from mtan_s1s2.metrics import classification_metrics, per_class_scores, write_classification_report


def _preds_and_target(k: int = 5, n: int = 400) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, k - 1, (n,), generator=g)  # class k - 1 never in the reference
    preds = torch.where(torch.rand(n, generator=g) < 0.7, target, torch.randint(0, k, (n,), generator=g))
    return preds, target


def test_per_class_scores_equal_torchmetrics() -> None:
    k, ii = 5, 0
    preds, target = _preds_and_target(k)
    confmat = MulticlassConfusionMatrix(k, ignore_index=ii)(preds, target)
    scores = per_class_scores(confmat)
    f1 = MulticlassF1Score(k, average="none", ignore_index=ii)(preds, target).numpy()
    iou = MulticlassJaccardIndex(k, average="none", ignore_index=ii)(preds, target).numpy()
    np.testing.assert_allclose(scores["F1"][1:], f1[1:], atol=1e-6)
    np.testing.assert_allclose(scores["IoU"][1:], iou[1:], atol=1e-6)
    assert scores["support"][0] == 0 and scores["support"].sum() == (target != ii).sum()


def test_classification_metrics_ignore_the_ignore_index() -> None:
    preds, target = _preds_and_target()
    wrong_where_ignored = torch.where(target == 0, (preds + 1) % 5, preds)
    a = classification_metrics(5, 0)(preds, target)
    b = classification_metrics(5, 0)(wrong_where_ignored, target)
    assert set(a) == {"OA", "F1", "mIoU", "kappa"}
    assert all(torch.isclose(a[k], b[k]) for k in a)


def test_report_files(tmp_path: Path) -> None:
    preds, target = _preds_and_target()
    confmat = MulticlassConfusionMatrix(5, ignore_index=0)(preds, target)
    names = ["unlabelled", "wheat", "maize", "meadow", "water"]
    per_class, confusion_csv, png = write_classification_report(tmp_path, names, confmat, ignore_index=0)
    rows = list(csv.DictReader(per_class.open()))
    assert [r["class_name"] for r in rows] == names[1:]
    assert sum(int(r["support_pixels"]) for r in rows) == int(confmat.sum())
    matrix = [list(map(int, r[1:])) for r in list(csv.reader(confusion_csv.open()))[1:]]
    assert np.array_equal(np.array(matrix), confmat.numpy())
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width > 300


def test_users_and_producers_accuracy() -> None:
    # rows = reference, columns = predicted; class 0 ignored
    confmat = np.array([[0, 0, 0], [0, 8, 2], [0, 6, 4]])
    s = per_class_scores(confmat)
    np.testing.assert_allclose(s["users_accuracy"][1:], [8 / 14, 4 / 6])  # precision: 1 - commission error
    np.testing.assert_allclose(s["producers_accuracy"][1:], [8 / 10, 4 / 10])  # recall: 1 - omission error
    assert s["predicted"].tolist() == [0, 14, 6] and s["support"].tolist() == [0, 10, 10]
    ua, pa = s["users_accuracy"][1], s["producers_accuracy"][1]
    np.testing.assert_allclose(s["F1"][1], 2 * ua * pa / (ua + pa))


def test_per_class_csv_columns(tmp_path: Path) -> None:
    confmat = np.array([[0, 0, 0], [0, 8, 2], [0, 6, 4]])
    per_class, _, _ = write_classification_report(tmp_path, ["unlabelled", "a", "b"], confmat, ignore_index=0)
    rows = list(csv.DictReader(per_class.open()))
    assert list(rows[0]) == [
        "class_index", "class_name", "support_pixels", "predicted_pixels",
        "users_accuracy", "producers_accuracy", "F1", "IoU",
    ]  # fmt: skip
    assert rows[1]["predicted_pixels"] == "6" and float(rows[1]["users_accuracy"]) == pytest.approx(4 / 6)
