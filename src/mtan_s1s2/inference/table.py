"""Pixel-table prediction: one table of predicted classes and probabilities, not one file per pixel.

``python predict.py`` on ``data=table`` runs ``trainer.predict`` with
:class:`PixelTableWriter`, which collects every pixel of the split and writes one table
(``table_file``; CSV, gzipped CSV or Parquet by its extension), one row per pixel:

* ``id``: the pixel's id (``data.id_column``, or its row number in the table);
* ``label`` / ``label_name``: the reference class of the pixel (as mapped by ``data.labels``);
* ``predicted`` / ``predicted_name``: the class index and name, the ``argmax`` over the
  classes other than ``ignore_index`` (:func:`~mtan_s1s2.inference.patches.mask_ignored`);
* ``proba_<class name>``: the softmax probability of each predicted class (float32).

With a parcel column (``data.split.parcels: {column: ...}``) every row also gets
``parcel``, ``parcel_predicted`` / ``parcel_predicted_name`` (the class of its parcel: the
argmax of the mean probabilities of the parcel's predicted pixels,
:mod:`mtan_s1s2.parcel_metrics`) and ``parcel_confidence``, and :meth:`PixelTableWriter.write_parcels`
writes one row per parcel beside the table (``<name>_parcels.<ext>``): ``parcel``,
``n_pixels``, ``label`` / ``label_name`` (majority of its pixels), ``predicted`` /
``predicted_name``, ``confidence`` and ``proba_<class name>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from mtan_s1s2.inference.patches import mask_ignored
from mtan_s1s2.parcel_metrics import ParcelResult, aggregate_parcels

TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet")
"""Extensions of ``table_file`` (the format follows the extension)."""


def parcel_table_path(path: str | Path) -> Path:
    """The parcel table beside a predictions table: ``predictions.csv`` -> ``predictions_parcels.csv``."""
    path = Path(path)
    suffix = next(s for s in sorted(TABLE_SUFFIXES, key=len, reverse=True) if path.name.endswith(s))
    return path.with_name(path.name.removesuffix(suffix) + "_parcels" + suffix)


def check_table_file(name: str) -> str:
    """``name`` if its extension is one of :data:`TABLE_SUFFIXES`.

    Raises:
        ValueError: Naming the value and the extensions.
    """
    if not any(str(name).endswith(s) for s in TABLE_SUFFIXES):
        raise ValueError(f"table_file={name!r} must end in one of {list(TABLE_SUFFIXES)} (the format follows it).")
    return str(name)


class PixelTableWriter(BasePredictionWriter):
    """Collect the predictions of every pixel of a table split; :meth:`write` saves them as one table.

    Args:
        ids: Pixel id of every row of the datamodule's table (``patch_id`` of a sample
            indexes it).
        labels: ``(N,)`` reference class index of every row.
        class_names: Class names, index = class.
        ignore_index: Class never predicted (no probability column).
        parcels: ``(N,)`` parcel id of every row, or None (no parcel columns).
    """

    def __init__(
        self,
        ids: np.ndarray,
        labels: np.ndarray,
        class_names: Sequence[str],
        ignore_index: int | None = 0,
        parcels: np.ndarray | None = None,
    ) -> None:
        super().__init__(write_interval="batch")
        self.ids = np.asarray(ids)
        self.labels = np.asarray(labels)
        self.parcels = None if parcels is None else np.asarray(parcels)
        self.class_names = list(class_names)
        self.ignore_index = ignore_index
        self.rows: list[np.ndarray] = []
        self.predicted: list[np.ndarray] = []
        self.proba: list[np.ndarray] = []

    def write_on_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        prediction: torch.Tensor,
        batch_indices: Sequence[int] | None,
        batch: dict[str, Any],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Keep the classes and probabilities of the batch's pixels (``prediction (B, K, 1, 1)`` logits)."""
        logits = mask_ignored(prediction.float(), self.ignore_index)[:, :, 0, 0]  # (B, K)
        self.rows.append(batch["patch_id"].cpu().numpy().astype(np.int64))
        self.predicted.append(logits.argmax(dim=1).cpu().numpy())
        self.proba.append(torch.softmax(logits, dim=1).cpu().numpy().astype(np.float32))

    def _collected(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, predicted, proba)`` of the pixels predicted so far, in table order."""
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        predicted = np.concatenate(self.predicted) if self.predicted else np.zeros(0, np.int64)
        proba = np.concatenate(self.proba) if self.proba else np.zeros((0, len(self.class_names)), np.float32)
        order = np.argsort(rows, kind="stable")
        return rows[order], predicted[order], proba[order]

    def _parcels(self, rows: np.ndarray, proba: np.ndarray) -> tuple[ParcelResult, np.ndarray]:
        """The parcels of the predicted rows and each row's position in them."""
        assert self.parcels is not None
        codes, values = pd.factorize(self.parcels[rows], sort=True)
        result = aggregate_parcels(np.asarray(codes, np.int64), proba, self.labels[rows], self.ignore_index)
        result.parcel = np.asarray(values, dtype=object)
        return result, np.asarray(codes, np.int64)

    def frame(self) -> pd.DataFrame:
        """One row per predicted pixel, in the order of the table (see the module docstring)."""
        rows, predicted, proba = self._collected()
        names = np.asarray(self.class_names, dtype=object)
        out = pd.DataFrame({
            "id": self.ids[rows],
            "label": self.labels[rows].astype(np.int64),
            "label_name": names[self.labels[rows]],
            "predicted": predicted.astype(np.int64),
            "predicted_name": names[predicted],
        })  # fmt: skip
        for k, name in enumerate(self.class_names):
            if k != self.ignore_index:
                out[f"proba_{name}"] = proba[:, k]
        if self.parcels is not None:
            result, where = self._parcels(rows, proba)
            out["parcel"] = self.parcels[rows]
            out["parcel_predicted"] = result.predicted[where]
            out["parcel_predicted_name"] = names[result.predicted[where]]
            out["parcel_confidence"] = result.confidence[where].astype(np.float32)
        return out

    def parcel_frame(self) -> pd.DataFrame:
        """One row per parcel (see the module docstring).

        Raises:
            ValueError: Without parcel ids.
        """
        if self.parcels is None:
            raise ValueError("The table has no parcel column: set data.split.parcels={column: <parcel-id column>}.")
        rows, _, proba = self._collected()
        result, _ = self._parcels(rows, proba)
        names = np.asarray([*self.class_names, ""], dtype=object)  # index -1: no reference
        out = pd.DataFrame({
            "parcel": result.parcel,
            "n_pixels": result.n_pixels,
            "label": result.reference,
            "label_name": names[result.reference],
            "predicted": result.predicted,
            "predicted_name": names[result.predicted],
            "confidence": result.confidence.astype(np.float32),
        })  # fmt: skip
        for k, name in enumerate(self.class_names):
            if k != self.ignore_index:
                out[f"proba_{name}"] = result.proba[:, k].astype(np.float32)
        return out

    def write_parcels(self, path: str | Path) -> Path:
        """Write :meth:`parcel_frame` to ``path`` (CSV, ``.csv.gz`` or Parquet by extension)."""
        return _write_frame(self.parcel_frame(), path)

    def write(self, path: str | Path) -> Path:
        """Write :meth:`frame` to ``path`` (CSV, ``.csv.gz`` or Parquet by extension).

        Raises:
            ValueError: On another extension.
        """
        return _write_frame(self.frame(), path)


def _write_frame(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` as CSV, ``.csv.gz`` or Parquet by the extension of ``path``.

    Raises:
        ValueError: On another extension.
    """
    path = Path(check_table_file(str(path)))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".parquet"):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


__all__ = ["TABLE_SUFFIXES", "PixelTableWriter", "check_table_file", "parcel_table_path"]
