"""Patch-wise prediction: a Lightning writer of per-patch class maps (``.npy``, GeoTIFF).

``python predict.py`` on patch sources (``data=pastis``, ``data=synthetic``) runs
``trainer.predict`` with :class:`PatchMapWriter`, which writes, per patch:

* ``predictions/PRED_{patch_id}.npy``: ``(H, W)`` class index (uint8 up to 256 classes);
* ``probabilities/PROBA_{patch_id}.npy``: ``(K, H, W)`` float32 softmax (``probabilities=true``);
* ``maps/PRED_{patch_id}.tif``: a COG placed by the patch's footprint (PASTIS-R
  ``metadata.geojson``), no-data 255 where no modality has a valid observation.

The class of a pixel is the ``argmax`` over the classes other than ``ignore_index``
(:func:`mask_ignored`), which is never trained to be predicted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from affine import Affine
from lightning.pytorch.callbacks import BasePredictionWriter
from rasterio.crs import CRS

from mtan_s1s2.data.scene.grid import Grid
from mtan_s1s2.export.cog import NODATA, write_map

PRED_DIR, PROBA_DIR, MAP_DIR = "predictions", "probabilities", "maps"
"""Folders of the class maps, the probabilities and the GeoTIFF maps under the output folder."""


def mask_ignored(logits: torch.Tensor, ignore_index: int | None) -> torch.Tensor:
    """``logits (B, K, ...)`` with the ``ignore_index`` class set to -inf (never the argmax)."""
    if ignore_index is None or not 0 <= ignore_index < logits.shape[1]:
        return logits
    out = logits.clone()
    out[:, ignore_index] = -torch.inf
    return out


class PatchMapWriter(BasePredictionWriter):
    """Write the class map (and optionally the probabilities) of every patch of a batch.

    Args:
        output_dir: Root of ``predictions/``, ``probabilities/`` and ``maps/``.
        num_classes: ``K`` (selects the map dtype).
        probabilities: Also write the ``(K, H, W)`` softmax.
        ignore_index: Class never predicted (left out of the argmax and the softmax).
        footprints: ``(crs, {patch_id: (left, bottom, right, top)})`` placing each patch
            (PASTIS ``metadata.geojson``): GeoTIFF maps are written too.
        class_names: Class names (for the GeoTIFF maps' colour tables and legends).
    """

    def __init__(
        self,
        output_dir: str | Path,
        num_classes: int,
        probabilities: bool = False,
        ignore_index: int | None = None,
        footprints: tuple[CRS | None, Mapping[int, tuple[float, float, float, float]]] | None = None,
        class_names: Sequence[str] = (),
    ) -> None:
        super().__init__(write_interval="batch")
        self.output_dir = Path(output_dir)
        self.dtype = np.uint8 if num_classes <= 256 else np.int16
        self.probabilities = probabilities
        self.ignore_index = ignore_index
        self.footprints = footprints
        self.class_names = list(class_names)
        self.written: list[int] = []
        self.geotiffs: list[str] = []

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
        """Write the class maps (and probabilities) of every patch of the batch."""
        logits = mask_ignored(prediction.float(), self.ignore_index)  # (B, K, H, W)
        maps = logits.argmax(dim=1).cpu().numpy().astype(self.dtype)
        probs = torch.softmax(logits, dim=1).cpu().numpy() if self.probabilities else None
        (self.output_dir / PRED_DIR).mkdir(parents=True, exist_ok=True)
        if probs is not None:
            (self.output_dir / PROBA_DIR).mkdir(parents=True, exist_ok=True)
        valid_any = None
        if self.footprints is not None:
            mods = [k for k in batch if isinstance(batch[k], dict) and "mask" in batch[k]]
            valid_any = np.zeros(maps.shape, bool)
            for m in mods:
                valid_any |= batch[m]["mask"].cpu().numpy().any(axis=1)
        for b, pid in enumerate(batch["patch_id"].tolist()):
            np.save(self.output_dir / PRED_DIR / f"PRED_{pid}.npy", maps[b])
            if probs is not None:
                np.save(self.output_dir / PROBA_DIR / f"PROBA_{pid}.npy", probs[b].astype(np.float32))
            if self.footprints is not None and valid_any is not None and int(pid) in self.footprints[1]:
                self.geotiffs.append(str(self._write_geotiff(int(pid), maps[b], valid_any[b])))
            self.written.append(int(pid))

    def _write_geotiff(self, pid: int, classes: np.ndarray, valid: np.ndarray) -> Path:
        assert self.footprints is not None
        crs, bounds = self.footprints[0], self.footprints[1][pid]
        H, W = classes.shape
        left, bottom, right, top = bounds
        grid = Grid(Affine((right - left) / W, 0.0, left, 0.0, -(top - bottom) / H, top), H, W, crs, f"patch {pid}")
        out = np.where(valid, classes, NODATA).astype(np.uint8)
        (self.output_dir / MAP_DIR).mkdir(parents=True, exist_ok=True)
        return write_map(self.output_dir / MAP_DIR / f"PRED_{pid}.tif", out, grid, self.class_names, self.ignore_index)


__all__ = ["MAP_DIR", "PRED_DIR", "PROBA_DIR", "PatchMapWriter", "mask_ignored"]
