"""Pixel-table prediction: one table of predicted classes and probabilities, not one file per pixel.

``python predict.py`` on ``data=table`` runs ``trainer.predict`` with
:class:`PixelTableWriter`, which collects every pixel of the split and writes one table
(``table_file``; CSV, gzipped CSV or Parquet by its extension), one row per pixel:

* ``id``: the pixel's id (``data.id_column``, or its row number in the table);
* ``label`` / ``label_name``: the reference class of the pixel (as mapped by ``data.labels``);
* ``predicted`` / ``predicted_name``: the class index and name, the ``argmax`` over the
  classes other than ``ignore_index`` (:func:`~mtan_s1s2.inference.patches.mask_ignored`);
* ``proba_<class name>``: the softmax probability of each predicted class (float32).
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

TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet")
"""Extensions of ``table_file`` (the format follows the extension)."""


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
    """

    def __init__(
        self, ids: np.ndarray, labels: np.ndarray, class_names: Sequence[str], ignore_index: int | None = 0
    ) -> None:
        super().__init__(write_interval="batch")
        self.ids = np.asarray(ids)
        self.labels = np.asarray(labels)
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

    def frame(self) -> pd.DataFrame:
        """One row per predicted pixel, in the order of the table (see the module docstring)."""
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        predicted = np.concatenate(self.predicted) if self.predicted else np.zeros(0, np.int64)
        proba = np.concatenate(self.proba) if self.proba else np.zeros((0, len(self.class_names)), np.float32)
        order = np.argsort(rows, kind="stable")
        rows, predicted, proba = rows[order], predicted[order], proba[order]
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
        return out

    def write(self, path: str | Path) -> Path:
        """Write :meth:`frame` to ``path`` (CSV, ``.csv.gz`` or Parquet by extension).

        Raises:
            ValueError: On another extension.
        """
        path = Path(check_table_file(str(path)))
        path.parent.mkdir(parents=True, exist_ok=True)
        frame = self.frame()
        if path.name.endswith(".parquet"):
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        return path


__all__ = ["TABLE_SUFFIXES", "PixelTableWriter", "check_table_file"]
