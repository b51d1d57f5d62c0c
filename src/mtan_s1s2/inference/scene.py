"""Predict a whole scene, tile by tile, into Cloud-Optimised GeoTIFF maps.

The model is per-pixel (no spatial context), so the scene is cut into non-overlapping
tiles of ``tile_size`` px (:func:`~mtan_s1s2.data.scene.grid.tiles`); each tile is read from the
files (:meth:`~mtan_s1s2.data.scene.scene.Scene.read`: only its window), given the training's
derived inputs (:mod:`mtan_s1s2.data.derived`), normalised with the training statistics,
classified and written to the maps (:class:`~mtan_s1s2.export.cog.MapWriter`) before the
next is read, so memory depends on the tile size and the date count, never on
the scene size. The map of a tiling equals the map of the whole scene.

Per pixel: the class is the ``argmax`` of the logits over the real classes (the
``ignore_index`` class, never trained to be predicted, is left out), probabilities are their
softmax, and pixels where no modality has a valid observation get the no-data value.
Before any tile is predicted, every quality band / mask is scanned for unexpected values and
the scene must have a valid observation. A scene with parcel ids (``data.split.parcels``)
also gets ``parcel_class_map.tif`` and ``parcels.csv`` (:mod:`mtan_s1s2.inference.parcels`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rasterio.windows import Window

from mtan_s1s2.data.derived import DerivedInputs
from mtan_s1s2.data.normalization import NormStats, normalize_sample
from mtan_s1s2.data.scene.grid import tiles
from mtan_s1s2.data.scene.scene import Scene
from mtan_s1s2.export.cog import NODATA, MapWriter
from mtan_s1s2.export.quicklook import write_quicklook
from mtan_s1s2.inference.parcels import ParcelSums, write_parcel_outputs
from mtan_s1s2.utils.precision import AUTOCAST_PRECISIONS, autocast

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictOptions:
    """How a scene is predicted (``configs/predict.yaml``).

    Args:
        tile_size: Tile side, pixels (memory grows with its square and the date count).
        probabilities: Write ``probabilities.tif`` (one band per class, percent).
        confidence: Write ``confidence.tif`` (max probability, percent).
        quicklook: Write ``quicklook.png`` with a legend.
        device: ``cpu``, ``cuda``, ``cuda:1`` or ``auto`` (CUDA if available).
        precision: Short name of the autocast precision (``fp32``, ``bf16`` or ``fp16``; fp16
            on CUDA only): :func:`~mtan_s1s2.utils.precision.short_precision` of
            ``predict.py``'s ``precision`` (``32-true``, ``bf16-mixed``, ``16-mixed``, ``auto``).
        progress: Show a progress bar.

    Raises:
        ValueError: On a non-positive tile size or an unknown precision.
    """

    tile_size: int = 256
    probabilities: bool = False
    confidence: bool = True
    quicklook: bool = True
    device: str = "auto"
    precision: str = "fp32"
    progress: bool = True

    def __post_init__(self) -> None:
        if int(self.tile_size) < 1:
            raise ValueError(f"tile_size must be a positive number of pixels, got {self.tile_size}.")
        if self.precision not in AUTOCAST_PRECISIONS:
            raise ValueError(f"precision must be one of {list(AUTOCAST_PRECISIONS)}, got {self.precision!r}.")

    def torch_device(self) -> torch.device:
        """The device to run on."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def classify_tile(
    model: torch.nn.Module,
    data: Mapping[str, Mapping[str, np.ndarray]],
    norm_stats: NormStats | None,
    ignore_index: int | None,
    device: torch.device,
    precision: str = "fp32",
    derived: DerivedInputs | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Classes and probabilities of one tile.

    Args:
        model: Maps a batch to ``(B, K, h, w)`` logits.
        data: One window of a scene (:meth:`~mtan_s1s2.data.scene.scene.Scene.read`).
        norm_stats: The training statistics (None: raw values).
        ignore_index: Class left out of the argmax and the softmax.
        device: Where to run.
        precision: Autocast precision.
        derived: The derived inputs appended before normalisation (None: none).

    Returns:
        ``(classes (h, w) uint8, proba (K, h, w) float32)``; classes are :data:`NODATA`
        where no modality has a valid observation.
    """
    sample = {
        m: {"x": torch.from_numpy(d["x"]), "doy": torch.from_numpy(d["doy"]), "mask": torch.from_numpy(d["mask"])}
        for m, d in data.items()
    }
    if derived is not None:
        sample = derived.apply(sample)
    if norm_stats is not None:
        sample = normalize_sample(sample, norm_stats)
    batch = {m: {k: v[None].to(device) for k, v in d.items()} for m, d in sample.items()}
    with torch.inference_mode():
        with autocast(precision, device):
            logits = model(batch)[0].float()  # (K, h, w)
        if ignore_index is not None and 0 <= ignore_index < logits.shape[0]:
            logits[ignore_index] = -torch.inf
        proba = torch.softmax(logits, dim=0).cpu().numpy()
        classes = logits.argmax(dim=0).to(torch.uint8).cpu().numpy()
    valid_any = np.zeros(classes.shape, bool)
    for d in data.values():
        valid_any |= np.asarray(d["mask"]).any(axis=0)
    classes[~valid_any] = NODATA
    return classes, proba


def _progress(windows: Sequence[Window], label: str, enabled: bool) -> Iterator[Window]:
    if not enabled:
        yield from windows
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(label, total=len(windows))
        for w in windows:
            yield w
            bar.advance(task)


def predict_scene(
    model: torch.nn.Module,
    scene: Scene,
    out_dir: str | Path,
    class_names: Sequence[str],
    ignore_index: int | None = 0,
    norm_stats: NormStats | None = None,
    options: PredictOptions | None = None,
    derived: DerivedInputs | None = None,
) -> dict[str, Any]:
    """Predict ``scene`` into maps in ``out_dir`` (see the module docstring).

    Args:
        model: The classifier (eval mode), batch -> ``(B, K, h, w)`` logits.
        scene: The scene (labels not needed).
        out_dir: Folder of its maps.
        class_names: Class names, index = class (``K`` of them).
        ignore_index: The unlabelled class, never predicted.
        norm_stats: The training statistics.
        options: Tile size, outputs, device, precision.
        derived: The training's derived inputs (the datamodule's ``derived_inputs``).

    Returns:
        The scene's record: grid, files, pixel counts per class, time and pixels/s.

    Raises:
        ValueError: On a quality band with unexpected values or a scene without any valid
            observation (before any tile is predicted).
    """
    opts = options or PredictOptions()
    device = opts.torch_device()
    scene.check_quality(opts.tile_size)
    scene.check_has_valid(opts.tile_size)
    model = model.to(device).eval()
    windows = tiles(scene.grid, opts.tile_size)
    writer = MapWriter(out_dir, scene.grid, class_names, ignore_index, opts.probabilities, opts.confidence)
    sums = ParcelSums(len(class_names), scene.parcels.fill) if scene.parcels is not None else None
    start = time.perf_counter()
    try:
        for w in _progress(windows, f"scene {scene.name}", opts.progress):
            data = scene.read(w)
            classes, proba = classify_tile(model, data, norm_stats, ignore_index, device, opts.precision, derived)
            writer.write(w, classes, proba if (opts.probabilities or opts.confidence) else None)
            if sums is not None:
                sums.add(scene.read_parcels(w), proba, classes != NODATA)  # type: ignore[arg-type]
    except BaseException:
        writer.abort()
        raise
    seconds = time.perf_counter() - start
    files = writer.close()
    out = Path(out_dir)
    n_parcels = None
    if sums is not None:
        parcels = sums.result()
        files.update(write_parcel_outputs(scene, parcels, out, class_names, ignore_index, windows))
        n_parcels = len(parcels)
        log.info("Scene %s: %d parcels (%s) -> %s", scene.name, n_parcels, scene.parcels.name, files["parcels"])  # type: ignore[union-attr]
    if opts.quicklook:
        files["quicklook"] = str(
            write_quicklook(out / "class_map.tif", out / "quicklook.png", class_names, ignore_index, title=scene.name)
        )
    n_pixels = scene.grid.height * scene.grid.width
    record = {
        "scene": scene.name,
        "root": str(scene.root) if scene.root else None,
        "output_dir": str(out.resolve()),
        "grid": scene.grid.as_dict(),
        "georeferenced": scene.grid.georeferenced,
        "files": files,
        "n_tiles": len(windows),
        "tile_size": opts.tile_size,
        "n_pixels": n_pixels,
        "n_nodata": writer.n_nodata,
        "n_parcels": n_parcels,
        "pixels_per_class": {class_names[i]: int(n) for i, n in enumerate(writer.counts) if i != ignore_index},
        "predict_s": seconds,
        "pixels_per_s": n_pixels / seconds if seconds > 0 else None,
        "device": str(device),
        "precision": opts.precision,
        "dates": {m: len(s.dates) for m, s in scene.series.items()},
    }
    scene.report.log(f"Scene {scene.name}")
    log.info(
        "Scene %s: %d px in %d tiles, %.1f s (%.0f px/s); maps in %s",
        scene.name, n_pixels, len(windows), seconds, n_pixels / max(seconds, 1e-9), out,
    )  # fmt: skip
    return record


__all__ = ["PredictOptions", "classify_tile", "predict_scene"]
