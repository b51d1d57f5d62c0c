"""``python predict.py ckpt_path=... [data=...] [scene=...]``: maps predicted by a checkpoint.

Two kinds of data, one command:

* **Scenes** (``data=datacube``, ``data=geotiff``, ``data=worldcereal``): every scene of the
  data config (or only ``scene=NAME``) is predicted whole, tile by tile
  (:func:`~mtan_s1s2.inference.scene.predict_scene`, ``tile_size``), into
  ``<output_dir>/<scene>/``: ``class_map.tif`` (COG, uint8, colour table, class names,
  no-data 255 where no modality has a valid observation, the CRS and transform of the
  input grid), ``confidence.tif``, ``probabilities.tif`` (``probabilities=true``),
  ``quicklook.png`` with a legend, ``legend.csv`` and a QGIS style. Labels are never
  needed (the data config's label raster is not read).
* **Patches** (``data=pastis``, ``data=synthetic``): every patch of ``split`` (whole
  patches), as before: ``predictions/PRED_{patch_id}.npy`` (``(H, W)`` class index) and,
  with ``probabilities=true``, ``probabilities/PROBA_{patch_id}.npy`` (``(K, H, W)``
  float32 softmax); for PASTIS-R data whose ``metadata.geojson`` has geometries, also
  ``maps/PRED_{patch_id}.tif``, a COG placed by the patch's footprint and the collection's
  CRS. ``ANNOTATIONS/`` is not needed.

In both, the class of a pixel is the ``argmax`` over the classes other than
``ignore_index`` (which is never trained to be predicted), and inputs are normalised with
the statistics stored in the checkpoint (so another reader or another scene is fed exactly
as in training; older checkpoints without them use the data config's).
``predict_summary.json`` lists the checkpoint, the class names and every file.

Many scenes, many machines: ``python predict.py -m ckpt_path=... data=... scene=a,b,c
[hydra/launcher=joblib|slurm]`` runs one job per scene (one output folder each) and writes
``scenes.csv`` / ``predict_summary.json`` at the sweep root (:mod:`mtan_s1s2.inference.sweep`).

The model and the data are loaded as in :mod:`mtan_s1s2.cli.eval`: the run's config and
data unless ``data=...`` is given; any backend (``mlp=...``) loads any checkpoint.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
import torch
from affine import Affine
from lightning.pytorch.callbacks import BasePredictionWriter
from omegaconf import DictConfig, OmegaConf, open_dict
from rasterio.crs import CRS
from rasterio.windows import Window
from torch.utils.data import DataLoader

from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    in_multirun,
    prepare_run,
    register_resolvers,
    resolve_trainer_precision,
    resolve_user_paths,
)
from mtan_s1s2.cli.console import progress_bar_callbacks_allowed, quiet_lightning, warnings_to_log
from mtan_s1s2.cli.eval import check_classes, check_inputs, load_classifier, load_run_config
from mtan_s1s2.cli.validate import ConfigError, check_config, exit_config_error, validate_command_line
from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule
from mtan_s1s2.data.grid import Grid
from mtan_s1s2.data.normalization import NormStats, check_norm_stats
from mtan_s1s2.data.scene_datamodule import SceneDataModule
from mtan_s1s2.export.cog import NODATA, write_map
from mtan_s1s2.inference.scene import PredictOptions, predict_scene
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.utils.io import write_json_atomic

log = logging.getLogger(__name__)

register_resolvers()

PRED_DIR, PROBA_DIR, MAP_DIR = "predictions", "probabilities", "maps"
SUMMARY_FILE = "predict_summary.json"


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


def load_contract(ckpt_path: str | Path) -> dict[str, Any] | None:
    """The ``data_contract`` a checkpoint stores (training statistics, bands, classes), or None."""
    checkpoint = torch.load(str(ckpt_path), map_location="cpu", weights_only=False)
    contract = (checkpoint.get("hyper_parameters") or {}).get("data_contract")
    return dict(contract) if contract else None


def _is_scene_source(data_cfg: DictConfig) -> bool:
    target = data_cfg.get("_target_")
    return bool(target) and issubclass(hydra.utils.get_class(str(target)), SceneDataModule)


def build_predict_datamodule(cfg: DictConfig, run_cfg: DictConfig) -> SITSDataModule:
    """The datamodule of ``cfg.data`` (or the run's), set up for prediction.

    Scene sources read no labels (``data.label=null``) and only ``cfg.scene`` if set.

    Raises:
        ValueError: If ``scene`` is given for a source without scenes.
    """
    data_cfg = OmegaConf.create(OmegaConf.to_container(cfg.get("data") or run_cfg.data, resolve=True))
    assert isinstance(data_cfg, DictConfig)
    scene = cfg.get("scene")
    with open_dict(data_cfg):
        for k in ("batch_size", "num_workers"):
            if cfg.get(k) is not None:
                data_cfg[k] = cfg.get(k)
        if _is_scene_source(data_cfg):
            data_cfg.label = None
            if scene is not None:
                data_cfg.scenes = [str(s) for s in scene] if OmegaConf.is_list(scene) else [str(scene)]
        elif scene is not None:
            raise ValueError(
                f"scene={scene!r} selects scenes of data=datacube / data=geotiff, but the data config is "
                f"{data_cfg.get('_target_')}; drop scene= or use a raster data config."
            )
    log.info("Instantiating datamodule <%s>", data_cfg._target_)
    datamodule: SITSDataModule = hydra.utils.instantiate(data_cfg)
    return datamodule


def training_norm_stats(contract: Mapping[str, Any] | None, datamodule: SITSDataModule) -> NormStats | None:
    """The checkpoint's normalisation statistics (checked against the data), else the data config's.

    Raises:
        ValueError: If the checkpoint's statistics do not fit the data's bands, or neither
            the checkpoint nor the data config has statistics a label-less source can use.
    """
    if contract is not None and "norm_stats" in contract:
        stats = contract["norm_stats"]
        if stats is None:
            return None
        log.info("Normalising with the training statistics stored in the checkpoint.")
        return check_norm_stats(stats, datamodule.in_channels, key="the checkpoint's normalisation statistics")
    if isinstance(datamodule, SceneDataModule) and datamodule.split is None and datamodule._norm_stats_cfg == "auto":
        raise ValueError(
            "The checkpoint stores no normalisation statistics (trained before they were recorded) and data.norm_stats "
            "is auto, which needs labels. Give data.norm_stats={modality: {mean: [...], std: [...]}} as in training."
        )
    return datamodule.norm_stats


def check_bands(contract: Mapping[str, Any] | None, datamodule: SITSDataModule) -> None:
    """Fail early if the data's band names differ from those the model was trained on.

    Raises:
        ValueError: Naming the modality and both band lists.
    """
    trained = (contract or {}).get("bands") or {}
    bands = getattr(datamodule, "bands", {}) or {}
    for m, names in trained.items():
        if m in bands and list(bands[m]) != list(names):
            raise ValueError(
                f"The model was trained on {m} bands {list(names)} but the data have {list(bands[m])}; give the same "
                f"bands in the same order (data.sources.{m}.bands)."
            )


def predict_scenes(
    cfg: DictConfig,
    model: SITSClassifierModule,
    datamodule: SceneDataModule,
    contract: Mapping[str, Any] | None,
    output_dir: Path,
) -> dict[str, Any]:
    """Predict every scene of ``datamodule`` to maps in ``output_dir/<scene>/``.

    Returns:
        The summary (also ``predict_summary.json``).
    """
    class_names = list((contract or {}).get("class_names") or model.class_names)
    ignore_index = int(model.ignore_index)
    if len(class_names) != int(model.num_classes):
        class_names = list(model.class_names)
    stats = training_norm_stats(contract, datamodule)
    check_bands(contract, datamodule)
    first = datamodule.scenes[0]
    corner = Window(0, 0, min(2, first.grid.width), min(2, first.grid.height))
    probe = first.read(corner, count=False)
    check_inputs(model, {m: {k: torch.from_numpy(v)[None] for k, v in d.items()} for m, d in probe.items()})
    options = PredictOptions(
        tile_size=int(cfg.tile_size), probabilities=bool(cfg.probabilities), confidence=bool(cfg.confidence),
        quicklook=bool(cfg.quicklook), device=str(cfg.device), precision=str(cfg.precision),
        progress=bool(cfg.progress),
    )  # fmt: skip
    records = []
    for scene in datamodule.scenes:
        log.info("Predicting scene %s (%s) with %s", scene.name, scene.grid.describe(), cfg.ckpt_path)
        records.append(predict_scene(model, scene, output_dir / scene.name, class_names, ignore_index, stats, options))
    return {
        "status": "completed",
        "ckpt_path": str(Path(cfg.ckpt_path).resolve()),
        "output_dir": str(output_dir),
        "class_names": class_names,
        "ignore_index": ignore_index,
        "nodata": NODATA,
        "maps": "<scene>/class_map.tif: uint8 class index (COG), nodata 255 = no valid observation",
        "scenes": records,
    }


def predict_patches(
    cfg: DictConfig,
    model: SITSClassifierModule,
    datamodule: SITSDataModule,
    output_dir: Path,
) -> dict[str, Any]:
    """Predict every whole patch of ``cfg.split`` (``.npy`` maps; GeoTIFFs for placed PASTIS patches).

    Returns:
        The summary (also ``predict_summary.json``).
    """
    if getattr(datamodule, "has_labels", True):
        check_classes(model, datamodule)
    loader = split_dataloader(datamodule, cfg.split)
    check_inputs(model, next(iter(loader)))
    footprints = None
    if hasattr(datamodule, "root") and (Path(str(datamodule.root)) / "metadata.geojson").is_file():
        from mtan_s1s2.data.pastis.layout import read_footprints

        crs_text, bounds = read_footprints(Path(str(datamodule.root)))
        if bounds:
            crs = CRS.from_user_input(crs_text) if crs_text else None
            footprints = (crs, bounds)
    class_names = list(getattr(datamodule, "class_names", None) or model.class_names)
    writer = PatchMapWriter(
        output_dir, int(model.num_classes), bool(cfg.probabilities), int(model.ignore_index), footprints, class_names
    )
    resolve_trainer_precision(cfg)
    callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, [writer])
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, logger=False, callbacks=callbacks, default_root_dir=str(output_dir), enable_progress_bar=show_bar
    )
    log.info("Predicting the %s split with %s (backend %s)", cfg.split, cfg.ckpt_path, model.net.backend)
    trainer.predict(model=model, dataloaders=loader, return_predictions=False)
    log.info("Wrote %d class maps to %s", len(writer.written), output_dir / PRED_DIR)
    return {
        "status": "completed",
        "ckpt_path": str(Path(cfg.ckpt_path).resolve()),
        "split": cfg.split,
        "output_dir": str(output_dir),
        "n_patches": len(writer.written),
        "class_names": class_names,
        "ignore_index": int(model.ignore_index),
        "maps": f"{PRED_DIR}/PRED_{{patch_id}}.npy, (H, W) {np.dtype(writer.dtype).name} class index",
        "probabilities": f"{PROBA_DIR}/PROBA_{{patch_id}}.npy, (K, H, W) float32" if cfg.probabilities else None,
        "geotiffs": sorted(writer.geotiffs),
        "patch_ids": sorted(writer.written),
    }


def predict(cfg: DictConfig) -> dict[str, Any]:
    """Write the maps predicted by ``cfg.ckpt_path`` (see the module docstring).

    Args:
        cfg: The composed ``configs/predict.yaml``.

    Returns:
        The content of ``predict_summary.json`` (``output_dir``, ``scenes`` or ``patch_ids``, ...).
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    run_cfg = load_run_config(cfg.ckpt_path, cfg.get("train_config"))
    output_dir = prepare_run(cfg)
    datamodule = build_predict_datamodule(cfg, run_cfg)
    model = load_classifier(run_cfg, cfg.ckpt_path, cfg.get("mlp"))
    contract = load_contract(cfg.ckpt_path)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if isinstance(datamodule, SceneDataModule):
        summary = predict_scenes(cfg, model, datamodule, contract, output_dir)
    else:
        if contract is not None and contract.get("norm_stats") is not None:
            datamodule._norm_stats_cfg = contract["norm_stats"]
            datamodule._stats_ready = False
        summary = predict_patches(cfg, model, datamodule, output_dir)
    write_json_atomic(output_dir / SUMMARY_FILE, summary)
    return summary


@validate_command_line("predict")
@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="predict")
def main(cfg: DictConfig) -> None:
    """Hydra entry point (exit status 2 on a config mistake).

    A failing job of a multirun records ``status: failed`` and its error in its
    ``predict_summary.json`` and returns, so the other scenes are still predicted (the
    sweep summary lists the failure); a single run re-raises.
    """
    warnings_to_log()
    try:
        predict(cfg)
    except ConfigError as err:
        exit_config_error(err)
    except Exception as err:
        if not in_multirun():
            raise
        out = Path(str(cfg.paths.output_dir))
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "status": "failed",
            "scene": cfg.get("scene"),
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
        }
        (out / SUMMARY_FILE).write_text(json.dumps(record, indent=2, default=str))
        log.error("Prediction failed: %s", record["error"])


__all__ = [
    "PatchMapWriter",
    "build_predict_datamodule",
    "check_bands",
    "load_contract",
    "main",
    "mask_ignored",
    "predict",
    "predict_patches",
    "predict_scenes",
    "split_dataloader",
    "training_norm_stats",
]
