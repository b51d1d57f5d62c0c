"""Test-time record of a run: the probabilities of every labelled test pixel (``test_probabilities.npz``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, PixelProbabilities, probabilities_from_logits

log = logging.getLogger(__name__)


class TestProbabilities(Callback):
    """Write the softmax probabilities of the labelled test pixels after testing.

    The sweep summary averages these files over the runs of a fold that differ only by
    seed (its ``ensemble`` rows; :mod:`mtan_s1s2.sweep.ensembles`). Reads the logits that
    ``test_step`` returns (``(B, K, H, W)``), keeps the pixels whose label is not
    ``ignore_index`` and writes, at the end of the test,
    ``test_probabilities.npz`` (:class:`~mtan_s1s2.ensemble.probabilities.PixelProbabilities`:
    sample, row, column, reference class, float16 probabilities over the classes other
    than ``ignore_index``). A DDP test writes one file per rank
    (``test_probabilities_rank{r}.npz``), read back together.

    Args:
        output_dir: Folder of the file (default: ``trainer.default_root_dir``).

    Attributes:
        path: The file written by the last test (None before).
    """

    # not a pytest test class, whatever its name
    __test__ = False

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__()
        self.output_dir = output_dir
        self.path: Path | None = None
        self._parts: list[dict[str, np.ndarray]] = []

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start afresh (a second test of the same trainer replaces the file)."""
        self._parts = []

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Keep the probabilities of the batch's labelled pixels."""
        if not isinstance(outputs, torch.Tensor) or outputs.ndim != 4:
            return  # a module whose test_step returns no logits
        ignore_index = int(getattr(pl_module, "ignore_index", -1))
        proba = probabilities_from_logits(outputs, ignore_index)  # (B, K, H, W)
        label = batch["label"]
        b, r, c = torch.nonzero(label != ignore_index, as_tuple=True)
        patch_id = batch["patch_id"].to(label.device)
        self._parts.append(
            {
                "patch_id": patch_id[b].cpu().numpy(),
                "row": r.cpu().numpy(),
                "col": c.cpu().numpy(),
                "label": label[b, r, c].cpu().numpy(),
                "proba": proba[b, :, r, c].cpu().numpy().astype(np.float16),
            }
        )

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write the file (one per rank under DDP)."""
        names = list(getattr(pl_module, "class_names", []))
        k = int(getattr(pl_module, "num_classes", len(names)))
        names = names if len(names) == k else [f"class_{i}" for i in range(k)]

        def joined(key: str, empty: np.ndarray) -> np.ndarray:
            return np.concatenate([p[key] for p in self._parts]) if self._parts else empty

        none = np.zeros(0, np.int64)
        record = PixelProbabilities(
            joined("patch_id", none), joined("row", none), joined("col", none), joined("label", none),
            joined("proba", np.zeros((0, k), np.float16)), names, int(getattr(pl_module, "ignore_index", -1)),
        )  # fmt: skip
        out = Path(self.output_dir or trainer.default_root_dir)
        name = PROBABILITIES_FILE if trainer.world_size == 1 else f"test_probabilities_rank{trainer.global_rank}.npz"
        self.path = record.sorted().write(out / name)
        self._parts = []
        log.info("Test probabilities of %d labelled pixels: %s", len(record), self.path)


__all__ = ["TestProbabilities"]
