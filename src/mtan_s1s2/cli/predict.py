"""``python predict.py ckpt_path=... [data=...] [split=test] [probabilities=true]``.

Per-pixel class maps of every patch of a split, one ``.npy`` file per patch named by its
id, written as the batches come (nothing is held in memory):

* ``predictions/PRED_{patch_id}.npy``: ``(H, W)`` class index (``uint8``, or ``int16``
  for more than 255 classes), ``argmax`` of the logits over all classes;
* ``probabilities/PROBA_{patch_id}.npy`` (with ``probabilities=true``): ``(K, H, W)``
  ``float32`` softmax;
* ``predict_summary.json``: checkpoint, split, class names (index = value in the maps),
  ``ignore_index`` and the list of files.

Whole patches are predicted (``data=pastis`` ignores its crops here). The model and the
data are loaded as in :mod:`mtan_s1s2.cli.eval`: the run's config and data unless
``data=...`` is given; any backend (``mlp=...``) loads any checkpoint.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    prepare_run,
    register_resolvers,
    resolve_trainer_precision,
    resolve_user_paths,
)
from mtan_s1s2.cli.console import progress_bar_callbacks_allowed, quiet_lightning, warnings_to_log
from mtan_s1s2.cli.eval import build_datamodule, check_classes, check_inputs, load_classifier, load_run_config
from mtan_s1s2.cli.validate import ConfigError, check_config, validate_command_line
from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule

log = logging.getLogger(__name__)

register_resolvers()

PRED_DIR, PROBA_DIR = "predictions", "probabilities"


class PatchMapWriter(BasePredictionWriter):
    """Write the class map (and optionally the probabilities) of every patch of a batch.

    Args:
        output_dir: Root of ``predictions/`` and ``probabilities/``.
        num_classes: ``K`` (selects the map dtype).
        probabilities: Also write the ``(K, H, W)`` softmax.
    """

    def __init__(self, output_dir: str | Path, num_classes: int, probabilities: bool = False) -> None:
        super().__init__(write_interval="batch")
        self.output_dir = Path(output_dir)
        self.dtype = np.uint8 if num_classes <= 256 else np.int16
        self.probabilities = probabilities
        self.written: list[int] = []

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
        logits = prediction.float()  # (B, K, H, W)
        maps = logits.argmax(dim=1).cpu().numpy().astype(self.dtype)
        probs = torch.softmax(logits, dim=1).cpu().numpy() if self.probabilities else None
        (self.output_dir / PRED_DIR).mkdir(parents=True, exist_ok=True)
        if probs is not None:
            (self.output_dir / PROBA_DIR).mkdir(parents=True, exist_ok=True)
        for b, pid in enumerate(batch["patch_id"].tolist()):
            np.save(self.output_dir / PRED_DIR / f"PRED_{pid}.npy", maps[b])
            if probs is not None:
                np.save(self.output_dir / PROBA_DIR / f"PROBA_{pid}.npy", probs[b].astype(np.float32))
            self.written.append(int(pid))


def split_dataloader(datamodule: SITSDataModule, split: str) -> DataLoader[Sample]:
    """Whole, normalised samples of ``split``, in order.

    The datamodule's ``predict_dataloader`` with ``predict_split = split``.

    Raises:
        ValueError: On an unknown split.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}.")
    datamodule.predict_split = split
    return datamodule.predict_dataloader()


def predict(cfg: DictConfig) -> dict[str, Any]:
    """Write the class maps of ``cfg.split`` predicted by ``cfg.ckpt_path``.

    Args:
        cfg: The composed ``configs/predict.yaml``.

    Returns:
        The content of ``predict_summary.json`` (``output_dir``, ``patch_ids``, ...).
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    run_cfg = load_run_config(cfg.ckpt_path, cfg.get("train_config"))
    output_dir = prepare_run(cfg)

    datamodule = build_datamodule(cfg, run_cfg)
    model = load_classifier(run_cfg, cfg.ckpt_path, cfg.get("mlp"))
    check_classes(model, datamodule)
    loader = split_dataloader(datamodule, cfg.split)
    check_inputs(model, next(iter(loader)))

    writer = PatchMapWriter(output_dir, int(model.num_classes), bool(cfg.probabilities))
    resolve_trainer_precision(cfg)
    callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, [writer])
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, logger=False, callbacks=callbacks, default_root_dir=str(output_dir), enable_progress_bar=show_bar
    )
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    log.info("Predicting the %s split with %s (backend %s)", cfg.split, cfg.ckpt_path, model.net.backend)
    trainer.predict(model=model, dataloaders=loader, return_predictions=False)

    summary = {
        "ckpt_path": str(Path(cfg.ckpt_path).resolve()),
        "split": cfg.split,
        "output_dir": str(output_dir),
        "n_patches": len(writer.written),
        "class_names": list(getattr(datamodule, "class_names", model.class_names)),
        "ignore_index": int(model.ignore_index),
        "maps": f"{PRED_DIR}/PRED_{{patch_id}}.npy, (H, W) {np.dtype(writer.dtype).name} class index",
        "probabilities": f"{PROBA_DIR}/PROBA_{{patch_id}}.npy, (K, H, W) float32" if cfg.probabilities else None,
        "patch_ids": sorted(writer.written),
    }
    (output_dir / "predict_summary.json").write_text(json.dumps(summary, indent=2))
    log.info("Wrote %d class maps to %s", len(writer.written), output_dir / PRED_DIR)
    return summary


@validate_command_line("predict")
@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="predict")
def main(cfg: DictConfig) -> None:
    """Hydra entry point (exit status 2 on a config mistake)."""
    warnings_to_log()
    try:
        predict(cfg)
    except ConfigError as err:
        print("\n".join(f"Config error: {line}" for line in str(err).splitlines()), file=sys.stderr)
        raise SystemExit(2) from None


__all__ = ["PatchMapWriter", "main", "predict", "split_dataloader"]
