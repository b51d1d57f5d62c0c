"""``python predict.py ckpt_path=... [data=...] [scene=...]``: maps predicted by a checkpoint.

Three kinds of data, one command:

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
* **Pixel tables** (``data=table``, ``data=worldcereal_table``): every pixel of ``split``
  into one table, ``table_file`` (``predictions.csv``; ``.csv.gz`` or ``.parquet`` by
  extension): id, reference and predicted class (index and name), one probability column
  per class (:mod:`mtan_s1s2.inference.table`); with a parcel column
  (``data.split.parcels.column``) each row also gets its parcel's class, and
  ``predictions_parcels.csv`` lists one row per parcel.

Where a scene has parcel ids (``data.split.parcels``: a parcel raster, or
``{source: components}``, the connected regions of the label raster), it also gets
``parcel_class_map.tif`` (every pixel of a parcel has the parcel's class: the argmax of the
mean probabilities of its pixels) and ``parcels.csv`` (:mod:`mtan_s1s2.inference.parcels`).

In all, the class of a pixel is the ``argmax`` over the classes other than
``ignore_index`` (which is never trained to be predicted), and stored values become inputs
with the radiometry, derived inputs (``data.derived``) and normalisation statistics stored in
the checkpoint (so another reader or another scene is fed exactly as in training;
:func:`~mtan_s1s2.checkpoints.apply_input_spec`: a command-line value contradicting them
needs ``radiometry_override=true``, other derived inputs are refused; older checkpoints
without them use the data config's).
``predict_summary.json`` lists the checkpoint, the class names and every file.

Many scenes, many machines: ``python predict.py -m ckpt_path=... data=... scene=a,b,c
[hydra/launcher=joblib|slurm]`` runs one job per scene (one output folder each) and writes
``scenes.csv`` / ``predict_summary.json`` at the sweep root (:mod:`mtan_s1s2.inference.sweep`).

The model and the data are loaded as in :mod:`mtan_s1s2.cli.eval`: the run's config and
data unless ``data=...`` is given; any backend (``mlp=...``) loads any checkpoint. A feature
baseline's model file (``ckpt_path=<run>/checkpoints/lightgbm.joblib``, ``random_forest``,
``minirocket``, ``multirocket_hydra``) maps the same three kinds of data with the same files
(:class:`~mtan_s1s2.baselines.module.BaselineModule`: its class probabilities in place of
a softmax).

**Ensembles**: ``ckpt_path=[a.ckpt,b.ckpt,c.ckpt]`` (or a glob, a run or sweep folder:
:func:`~mtan_s1s2.ensemble.members.resolve_checkpoints`) writes the same maps from the mean
of the members' probabilities (:class:`~mtan_s1s2.ensemble.model.EnsembleModule`): class =
argmax of the mean, confidence = its maximum, probabilities = the mean. Each member is
loaded once and every tile (scenes) or batch (patches, tables) goes through all of them
before the next is read, so memory holds one tile per member. The members must agree on
classes, inputs and data (:func:`~mtan_s1s2.ensemble.members.check_members_agree`); the
first member's input record and data config are used.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from rasterio.crs import CRS
from rasterio.windows import Window
from torch.utils.data import DataLoader

from mtan_s1s2.checkpoints import (
    RADIOMETRY_OVERRIDE,
    Classifier,
    apply_input_spec,
    check_classes,
    check_declared_encoding,
    check_inputs,
    command_line_overrides,
    data_config_of,
    load_predictor,
    load_run_config,
)
from mtan_s1s2.cli.config import (
    CONFIG_DIR,
    prepare_run,
    register_resolvers,
    resolve_trainer_precision,
    resolve_user_paths,
)
from mtan_s1s2.cli.console import progress_bar_callbacks_allowed, quiet_lightning, warnings_to_log
from mtan_s1s2.cli.failures import record_prediction_failure
from mtan_s1s2.cli.validate import ConfigError, check_config, exit_config_error, validate_command_line
from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule
from mtan_s1s2.data.normalization import NormStats, check_norm_stats
from mtan_s1s2.data.scene.datamodule import SceneDataModule
from mtan_s1s2.data.scene.grid import tiles
from mtan_s1s2.data.table.datamodule import TableDataModule
from mtan_s1s2.ensemble.members import check_members_agree, is_ensemble, load_members, resolve_checkpoints
from mtan_s1s2.ensemble.model import EnsembleModule
from mtan_s1s2.export.cog import NODATA
from mtan_s1s2.inference.patches import PRED_DIR, PROBA_DIR, PatchMapWriter
from mtan_s1s2.inference.scene import (
    PredictOptions,
    PreparedTile,
    predict_scene,
    prepare_tile,
    whole_tiles_for_spatial_context,
)
from mtan_s1s2.inference.speed import (
    DecisionCache,
    check_compile,
    choose_backend,
    choose_compile,
    forward_flops_per_pixel,
    utilisation,
)
from mtan_s1s2.inference.table import PixelTableWriter, check_table_file, parcel_table_path
from mtan_s1s2.models.layers.mlp import AUTO_BACKEND
from mtan_s1s2.models.reference_times import dates_outside_reference
from mtan_s1s2.utils.flops import gemm_peak
from mtan_s1s2.utils.io import write_json_atomic
from mtan_s1s2.utils.precision import check_precision, resolve_precision, short_precision

log = logging.getLogger(__name__)

register_resolvers()

SUMMARY_FILE = "predict_summary.json"


def checkpoint_record(cfg: DictConfig) -> str | list[str]:
    """``ckpt_path`` as ``predict_summary.json`` records it: the file, or every member of an ensemble."""
    if is_ensemble(cfg.ckpt_path):
        return [str(p) for p in resolve_checkpoints(cfg.ckpt_path)]
    return str(Path(cfg.ckpt_path).resolve())


def load_model(cfg: DictConfig) -> tuple[Classifier | EnsembleModule, DictConfig, dict[str, Any] | None]:
    """``(model, run config, data_contract)`` of ``cfg.ckpt_path``: one checkpoint, or an ensemble of several.

    An ensemble's run config and input record are its first member's (all agree:
    :func:`~mtan_s1s2.ensemble.members.check_members_agree`).

    Raises:
        ValueError: On a missing checkpoint, or ensemble members that do not agree.
    """
    if not is_ensemble(cfg.ckpt_path):
        run_cfg = load_run_config(cfg.ckpt_path, cfg.get("train_config"))
        model, contract = load_predictor(run_cfg, cfg.ckpt_path, cfg.get("mlp"))  # a network or a baseline
        return model, run_cfg, contract
    paths = resolve_checkpoints(cfg.ckpt_path)
    members = load_members(paths, cfg.get("train_config"), cfg.get("mlp"))
    check_members_agree(members)
    log.info("Predicting with the ensemble of %d checkpoints: %s", len(members), ", ".join(map(str, paths)))
    return EnsembleModule([m.model for m in members]), members[0].run_cfg, members[0].contract


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


def _is_scene_source(data_cfg: DictConfig) -> bool:
    target = data_cfg.get("_target_")
    return bool(target) and issubclass(hydra.utils.get_class(str(target)), SceneDataModule)


def build_predict_datamodule(
    cfg: DictConfig,
    run_cfg: DictConfig,
    contract: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> SITSDataModule:
    """The datamodule of ``cfg.data`` (or the run's), set up for prediction.

    Keys added with the run's data (``+data.split.parcels=...``) are merged over it
    (:func:`~mtan_s1s2.checkpoints.data_config_of`). Stored values become inputs as in
    training: the checkpoint's radiometry and normalisation replace the data config's
    (:func:`~mtan_s1s2.checkpoints.apply_input_spec`). Scene sources read no labels
    (``data.labels.file=null``) and only ``cfg.scene`` if set.

    Args:
        cfg: The composed ``predict.yaml``.
        run_cfg: The training run's config.
        contract: The checkpoint's ``data_contract``.
        overrides: The command line's overrides (values there that contradict the
            checkpoint are refused without ``radiometry_override=true``).

    Raises:
        ValueError: If ``scene`` is given for a source without scenes, or the command line
            contradicts the checkpoint's inputs.
    """
    data_cfg = apply_input_spec(
        data_config_of(cfg, run_cfg), contract, overrides, bool(cfg.get(RADIOMETRY_OVERRIDE, False))
    )
    scene = cfg.get("scene")
    with open_dict(data_cfg):
        for k in ("batch_size", "num_workers"):
            if cfg.get(k) is not None:
                data_cfg[k] = cfg.get(k)
        if _is_scene_source(data_cfg):
            parcels = (data_cfg.get("split") or {}).get("parcels")
            if parcels and parcels.get("source") == "components" and not parcels.get("file"):
                # the regions of the label raster: read it as the parcel layer, not as labels
                labels = data_cfg.get("labels") or {}
                where = {k: labels[k] for k in ("file", "variable", "band") if labels.get(k) is not None}
                data_cfg.split.parcels = {**parcels, **where}
            data_cfg.labels = {**(data_cfg.get("labels") or {}), "file": None}
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
    if isinstance(datamodule, SceneDataModule) and datamodule.split is None and datamodule.norm_stats_config == "auto":
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


def reference_span(run_cfg: DictConfig) -> dict[str, Any] | None:
    """The checkpoint's reference times: ``{"ref_range", "time_scale", "num_ref_times"}``, or None.

    Read from the training run's ``model.net`` (``ref_range`` was resolved to numbers before
    the model was built); None for a model without reference times (TempCNN).
    """
    net_cfg = (run_cfg.get("model") or {}).get("net") or {}
    ref_range = net_cfg.get("ref_range")
    if ref_range is None or isinstance(ref_range, str):
        return None
    return {
        "ref_range": [float(v) for v in ref_range],
        "time_scale": float(net_cfg.get("time_scale", 365.0)),
        "num_ref_times": int(net_cfg.get("num_ref_times", 16)),
    }


def warn_dates_outside_reference(scene: Any, reference: Mapping[str, Any] | None) -> str | None:
    """Warn (once per scene) when a scene's dates fall outside the checkpoint's reference-time span.

    Args:
        scene: A :class:`~mtan_s1s2.data.scene.scene.Scene` (``doy`` per modality, ``series`` dates).
        reference: :func:`reference_span` of the checkpoint (None: nothing to check).

    Returns:
        The warning logged, or None.
    """
    if reference is None:
        return None
    doys = [np.asarray(d, float) for d in scene.doy.values() if len(d)]
    if not doys:
        return None
    lo, hi = min(float(d.min()) for d in doys), max(float(d.max()) for d in doys)
    problem = dates_outside_reference(
        (lo, hi), reference["ref_range"], reference["time_scale"], reference["num_ref_times"]
    )
    if problem is None:
        return None
    dates = np.concatenate([np.asarray(s.dates) for s in scene.series.values()])
    first, last = str(dates.min())[:10], str(dates.max())[:10]
    message = f"Scene {scene.name} ({first} .. {last}): {problem[0].lower()}{problem[1:]}"
    message = message.replace("Set model.net.ref_range=auto", "Retrain with model.net.ref_range=auto", 1)
    log.warning("%s", message)
    return message


def _network(model: Any) -> torch.nn.Module | None:
    """The network of a trained classifier (None for an ensemble or a baseline, which run as they are)."""
    net = getattr(model, "net", None)
    return net if isinstance(net, torch.nn.Module) else None


def _first_chunk(scene: Any, stats: NormStats | None, options: PredictOptions, derived: Any) -> PreparedTile | None:
    """The first tile of ``scene`` with a pixel to compute, prepared as prediction prepares it."""
    for w in tiles(scene.grid, options.tile_size):
        tile = prepare_tile(scene.read(w, count=False), stats, options.skip_empty, options.chunk_pixels, derived)
        if tile.batches:
            return tile
    return None


def _computed_share(tile: PreparedTile) -> float:
    return tile.n_computed / max(tile.shape[0] * tile.shape[1], 1)


def choose_inference(
    cfg: DictConfig,
    model: Classifier | EnsembleModule,
    datamodule: SceneDataModule,
    stats: NormStats | None,
    options: PredictOptions,
    forced_backend: str | None,
) -> tuple[Any, PredictOptions, dict[str, Any]]:
    """Precision, backend and compilation of this prediction, for this machine (see :mod:`mtan_s1s2.inference.speed`).

    Returns:
        ``(runner, options, record)``: what classifies the chunks, the options with the
        resolved precision, and ``{"precision", "precision_reason", "backend", "backend_reason",
        "compiled", "compile_reason", ...}`` (``inference`` of ``predict_summary.json``).
    """
    device = options.torch_device()
    precision, precision_reason = resolve_precision(check_precision(str(cfg.precision), "precision"), device.type)
    options = dataclasses.replace(options, precision=short_precision(precision))
    net = _network(model)
    plain = {
        "device": str(device), "precision": precision, "precision_reason": precision_reason,
        "skip_empty": options.skip_empty, "chunk_pixels": options.chunk_pixels, "prefetch": options.prefetch,
    }  # fmt: skip
    if net is None:  # an ensemble or a baseline: its own forward, eager
        log.info("Prediction: precision %s (%s); %s, eager", precision, precision_reason, type(model).__name__)
        return model, options, {**plain, "backend": None, "backend_reason": f"{type(model).__name__} runs as it is",
                                "compiled": False, "compile_reason": "not compiled"}  # fmt: skip
    net = net.to(device).eval()
    tile = _first_chunk(datamodule.scenes[0], stats, options, datamodule.derived_inputs)
    if tile is None:  # check_has_valid stops such a scene first; nothing to time
        return net, options, {**plain, "backend": getattr(net, "backend", None), "compiled": False}
    batch = {m: {k: v.to(device) for k, v in d.items()} for m, d in tile.batches[0].items()}
    cache = DecisionCache(Path(str(cfg.decision_cache)) if cfg.get("decision_cache") else None)
    share = _computed_share(tile)
    projected = int(sum(sc.grid.height * sc.grid.width for sc in datamodule.scenes) * share)
    min_run_s = float(cfg.get("tune_min_run_s", 120.0))
    backend = choose_backend(net, batch, device, options.precision, cache, forced_backend, projected, min_run_s)
    eager_ms = backend["timings_ms"].get(backend["backend"])
    runner, compiled = choose_compile(
        net, batch, device, options.precision, check_compile(cfg.get("compile", "auto")), eager_ms, projected,
        cache, backend["key"], options.chunk_pixels, min_run_s,
    )  # fmt: skip
    record = {
        "device": str(device),
        "precision": precision,
        "precision_reason": precision_reason,
        "backend": backend["backend"],
        "backend_reason": backend["why"],
        "backend_timings_ms": backend["timings_ms"],
        "compiled": compiled["compiled"],
        "compile_reason": compiled["why"],
        "compile": compiled,
        "skip_empty": options.skip_empty,
        "chunk_pixels": options.chunk_pixels,
        "prefetch": options.prefetch,
        "projected_pixels": projected,
        "decision_cost_s": backend["cost_s"],
    }
    log.info(
        "Prediction: precision %s (%s); backend %s (%s); %s (%s); %s, %s, %d tile(s) read ahead",
        precision, precision_reason, backend["backend"], backend["why"],
        "compiled" if compiled["compiled"] else "eager", compiled["why"],
        "pixels without a valid observation skipped" if options.skip_empty else "every pixel computed",
        f"chunks of {options.chunk_pixels} px" if options.chunk_pixels else "whole tiles",
        options.prefetch,
    )  # fmt: skip
    return runner, options, record


def predict_scenes(
    cfg: DictConfig,
    model: Classifier | EnsembleModule,
    datamodule: SceneDataModule,
    contract: Mapping[str, Any] | None,
    output_dir: Path,
    reference: Mapping[str, Any] | None = None,
    forced_backend: str | None = None,
) -> dict[str, Any]:
    """Predict every scene of ``datamodule`` to maps in ``output_dir/<scene>/``.

    Args:
        cfg: The composed ``predict.yaml``.
        model: The classifier.
        datamodule: The scenes.
        contract: The checkpoint's ``data_contract``.
        output_dir: Root of the per-scene folders.
        reference: :func:`reference_span` of the checkpoint (a scene whose dates fall
            outside it gets one warning).
        forced_backend: The backend named by ``mlp=...`` (None: chosen for this machine).

    Returns:
        The summary (also ``predict_summary.json``): ``inference`` (what was chosen and why),
        ``speed`` (pixels/s and fraction of the GEMM peak over every scene) and one record
        per scene (with its own ``speed``).
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
    probe_batch = {m: {k: torch.from_numpy(v)[None] for k, v in d.items()} for m, d in probe.items()}
    check_inputs(model, datamodule.derived_inputs.apply(probe_batch))
    chunk = cfg.get("chunk_pixels")
    options = PredictOptions(
        tile_size=int(cfg.tile_size), probabilities=bool(cfg.probabilities), confidence=bool(cfg.confidence),
        quicklook=bool(cfg.quicklook), device=str(cfg.device), progress=bool(cfg.progress),
        skip_empty=bool(cfg.get("skip_empty", True)), chunk_pixels=None if chunk is None else int(chunk),
        prefetch=int(cfg.get("prefetch", 2)),
    )  # fmt: skip
    options = whole_tiles_for_spatial_context(model, options)
    runner, options, inference = choose_inference(cfg, model, datamodule, stats, options, forced_backend)
    device = options.torch_device()
    peak = gemm_peak(device, options.precision)
    records = []
    for scene in datamodule.scenes:
        warning = warn_dates_outside_reference(scene, reference)
        log.info("Predicting scene %s (%s) with %s", scene.name, scene.grid.describe(), cfg.ckpt_path)
        record = predict_scene(
            runner, scene, output_dir / scene.name, class_names, ignore_index, stats, options, datamodule.derived_inputs
        )
        net = _network(model)
        flops = _flops_per_pixel(net, scene, datamodule) if net is not None else None
        record["speed"] = utilisation(record["n_pixels"], record["n_computed"], record["predict_s"], flops, peak)
        record["backend"], record["compiled"] = inference.get("backend"), inference.get("compiled")
        if warning:
            record["warnings"] = [warning]
        records.append(record)
    n_pixels = sum(int(r["n_pixels"]) for r in records)
    n_computed = sum(int(r["n_computed"]) for r in records)
    seconds = sum(float(r["predict_s"]) for r in records)
    flops_total = sum((r["speed"]["flops_per_pixel"] or 0.0) * r["n_computed"] for r in records)
    overall = utilisation(n_pixels, n_computed, seconds, flops_total / n_computed if flops_total else None, peak)
    log.info(
        "Predicted %d px (%d computed) in %.1f s: %.0f px/s, %s of the %s GEMM peak",
        n_pixels, n_computed, seconds, overall["pixels_per_s"] or 0.0,
        f"{overall['fraction_of_peak']:.1%}" if overall["fraction_of_peak"] else "an unknown share",
        options.precision,
    )  # fmt: skip
    return {
        "status": "completed",
        "ckpt_path": checkpoint_record(cfg),
        "output_dir": str(output_dir),
        "class_names": class_names,
        "ignore_index": ignore_index,
        "nodata": NODATA,
        "maps": "<scene>/class_map.tif: uint8 class index (COG), nodata 255 = no valid observation",
        "inference": inference,
        "speed": {**overall, "n_pixels": n_pixels, "n_computed": n_computed, "predict_s": seconds},
        "scenes": records,
    }


def _flops_per_pixel(net: torch.nn.Module, scene: Any, datamodule: SceneDataModule) -> float | None:
    """Forward FLOPs per pixel of ``net`` at the scene's date counts (None if they cannot be counted)."""
    channels = dict(getattr(net, "in_channels", None) or datamodule.in_channels)
    batch = {
        m: {
            "x": torch.zeros(1, len(s.dates), int(channels[m]), 1, 16),
            "doy": torch.from_numpy(np.asarray(scene.doy[m], np.float32))[None],
            "mask": torch.ones(1, len(s.dates), 1, 16, dtype=torch.bool),
        }
        for m, s in scene.series.items()
        if m in channels
    }
    try:
        return forward_flops_per_pixel(net, batch)
    except Exception as err:  # counting must never stop a prediction
        log.warning("Could not count the model's FLOPs (%s: %s); no fraction of peak.", type(err).__name__, err)
        return None


def predict_patches(
    cfg: DictConfig,
    model: Classifier | EnsembleModule,
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
        "ckpt_path": checkpoint_record(cfg),
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


def predict_table(
    cfg: DictConfig,
    model: Classifier | EnsembleModule,
    datamodule: TableDataModule,
    output_dir: Path,
) -> dict[str, Any]:
    """Predict every pixel of ``cfg.split`` of a table into one table (``table_file``: CSV or Parquet).

    Returns:
        The summary (also ``predict_summary.json``).

    Raises:
        ValueError: On a ``table_file`` of another format, or classes that do not fit the model.
    """
    path = output_dir / check_table_file(str(cfg.get("table_file") or "predictions.csv"))
    check_classes(model, datamodule)
    loader = split_dataloader(datamodule, cfg.split)
    check_inputs(model, next(iter(loader)))
    class_names = list(datamodule.class_names)
    parcels = None if datamodule.table.parcels is None else np.asarray(datamodule.table.parcels)
    writer = PixelTableWriter(datamodule.table.ids, datamodule.labels, class_names, int(model.ignore_index), parcels)
    resolve_trainer_precision(cfg)
    callbacks, show_bar = progress_bar_callbacks_allowed(cfg.trainer, [writer])
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, logger=False, callbacks=callbacks, default_root_dir=str(output_dir), enable_progress_bar=show_bar
    )
    log.info("Predicting the %s split of the table with %s", cfg.split, cfg.ckpt_path)
    trainer.predict(model=model, dataloaders=loader, return_predictions=False)
    written = writer.write(path)
    n_pixels = len(writer.frame())
    log.info("Wrote the predictions of %d pixels to %s", n_pixels, written)
    extra: dict[str, Any] = {}
    if parcels is not None:
        parcel_table = writer.write_parcels(parcel_table_path(path))
        extra = {"parcels": str(parcel_table), "n_parcels": len(writer.parcel_frame())}
        log.info("Wrote the predictions of %d parcels to %s", extra["n_parcels"], parcel_table)
    return {
        "status": "completed",
        "ckpt_path": checkpoint_record(cfg),
        "split": cfg.split,
        "output_dir": str(output_dir),
        "n_pixels": n_pixels,
        "class_names": class_names,
        "ignore_index": int(model.ignore_index),
        "table": str(written),
        "columns": "id, label, label_name, predicted, predicted_name, proba_<class> per predicted class"
        + (", parcel, parcel_predicted, parcel_predicted_name, parcel_confidence" if parcels is not None else ""),
        **extra,
    }


def predict(cfg: DictConfig, overrides: Sequence[str] | None = None) -> dict[str, Any]:
    """Write the maps predicted by ``cfg.ckpt_path`` (see the module docstring).

    Args:
        cfg: The composed ``configs/predict.yaml``.
        overrides: The command line's overrides (None: the running Hydra job's).

    Returns:
        The content of ``predict_summary.json`` (``output_dir``, ``scenes`` or ``patch_ids``, ...).
    """
    resolve_user_paths(cfg)
    check_config(cfg)
    quiet_lightning()
    model, run_cfg, contract = load_model(cfg)
    output_dir = prepare_run(cfg)
    overrides = command_line_overrides() if overrides is None else list(overrides)
    datamodule = build_predict_datamodule(cfg, run_cfg, contract, overrides)
    requested = getattr(_network(model), "requested_backend", None) if cfg.get("mlp") is not None else None
    forced_backend = None if requested in (None, AUTO_BACKEND) else str(requested)
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if isinstance(datamodule, TableDataModule):
        summary = predict_table(cfg, model, datamodule, output_dir)
    elif isinstance(datamodule, SceneDataModule):
        check_declared_encoding(datamodule.scenes, contract, bool(cfg.get(RADIOMETRY_OVERRIDE, False)))
        summary = predict_scenes(cfg, model, datamodule, contract, output_dir, reference_span(run_cfg), forced_backend)
    else:
        if contract is not None and contract.get("norm_stats") is not None:
            datamodule.use_norm_stats(contract["norm_stats"])
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
        if not record_prediction_failure(cfg, err, SUMMARY_FILE):
            raise


__all__ = [
    "SUMMARY_FILE",
    "build_predict_datamodule",
    "check_bands",
    "checkpoint_record",
    "choose_inference",
    "load_model",
    "main",
    "predict",
    "predict_patches",
    "predict_scenes",
    "reference_span",
    "split_dataloader",
    "training_norm_stats",
    "warn_dates_outside_reference",
]
