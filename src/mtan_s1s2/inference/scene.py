"""Predict a whole scene, tile by tile, into Cloud-Optimised GeoTIFF maps.

The scene is cut into non-overlapping tiles of ``tile_size`` px
(:func:`~mtan_s1s2.data.scene.grid.tiles`); each tile is read from the files
(:meth:`~mtan_s1s2.data.scene.scene.Scene.read`: only its window), given the training's
derived inputs (:mod:`mtan_s1s2.data.derived`), normalised with the training statistics
and cut into model batches (:func:`prepare_tile`: the pixels without any valid observation
left out, the rest in chunks of ``chunk_pixels``) by a background thread that stays
``prefetch`` tiles ahead (:class:`~mtan_s1s2.inference.reader.BackgroundReader`), while
the main thread classifies the current tile and writes it to the maps
(:class:`~mtan_s1s2.export.cog.MapWriter`). Memory depends on the tile size, the read-ahead
and the date count, never on the scene size. For a per-pixel network the map of a tiling
equals the map of the whole scene; chunking and skipping change only the arrangement of the
pixels in the batches (the same classes, probabilities to float rounding:
``docs/prediction.md``, "Speed"). A network with spatial context
(``model.net.spatial_context``) reads each pixel's neighbours within its tile, as it read them
within its training window: it gets whole tiles, neither chunked nor skipped
(:func:`whole_tiles_for_spatial_context`).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rasterio.windows import Window

from mtan_s1s2.baselines.base import spatial_context_of
from mtan_s1s2.data.derived import DerivedInputs
from mtan_s1s2.data.normalization import NormStats, normalize_sample
from mtan_s1s2.data.scene.grid import tiles
from mtan_s1s2.data.scene.scene import Scene
from mtan_s1s2.export.cog import NODATA, MapWriter
from mtan_s1s2.export.quicklook import write_quicklook
from mtan_s1s2.inference.parcels import ParcelSums, write_parcel_outputs
from mtan_s1s2.inference.reader import BackgroundReader
from mtan_s1s2.models.layers.spatial import NeighbourhoodPool
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
        skip_empty: Do not compute the pixels without any valid observation (no-data in
            the maps either way).
        chunk_pixels: Pixels per forward pass (None: the whole tile at once).
        prefetch: Tiles read ahead by a background thread while the current one is
            classified (0: read in the main thread, between tiles).

    Raises:
        ValueError: On a non-positive tile size or chunk, a negative prefetch or an unknown
            precision.
    """

    tile_size: int = 256
    probabilities: bool = False
    confidence: bool = True
    quicklook: bool = True
    device: str = "auto"
    precision: str = "fp32"
    progress: bool = True
    skip_empty: bool = True
    chunk_pixels: int | None = 4096
    prefetch: int = 2

    def __post_init__(self) -> None:
        if int(self.tile_size) < 1:
            raise ValueError(f"tile_size must be a positive number of pixels, got {self.tile_size}.")
        if self.chunk_pixels is not None and int(self.chunk_pixels) < 1:
            raise ValueError(f"chunk_pixels must be a positive number of pixels (or null), got {self.chunk_pixels}.")
        if int(self.prefetch) < 0:
            raise ValueError(f"prefetch must be >= 0 tiles (0 = read inline), got {self.prefetch}.")
        if self.precision not in AUTOCAST_PRECISIONS:
            raise ValueError(f"precision must be one of {list(AUTOCAST_PRECISIONS)}, got {self.precision!r}.")

    def torch_device(self) -> torch.device:
        """The device to run on."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


@dataclass
class PreparedTile:
    """One tile ready for the model: its pixels as model batches, and where they go back.

    Attributes:
        shape: ``(h, w)`` of the window.
        batches: Model inputs ``{modality: {"x": (1, T, C, h', w'), "doy": (1, T), "mask": (1, T,
            h', w')}}``: the whole tile (``h' x w' = h x w``) or chunks of its pixels laid out
            as one row (``h' = 1``, ``w'`` = pixels of the chunk).
        index: ``(N,)`` flat pixel indices (row-major in the tile) of the concatenated chunks'
            pixels, or None when the one batch is the whole tile.
        valid_any: ``(h, w)`` bool, True where some modality has a valid observation.
    """

    shape: tuple[int, int]
    batches: list[dict[str, dict[str, torch.Tensor]]]
    index: np.ndarray | None
    valid_any: np.ndarray

    @property
    def n_computed(self) -> int:
        """Pixels the model computes for this tile."""
        return int(self.shape[0] * self.shape[1] if self.index is None else self.index.size)


def _reads_neighbours(module: torch.nn.Module) -> bool:
    """An mTAN's neighbourhood means, or a feature baseline fitted with ``model.spatial_context`` > 1."""
    baseline = getattr(module, "baseline", None)
    return isinstance(module, NeighbourhoodPool) or (baseline is not None and spatial_context_of(baseline) != 1)


def whole_tiles_for_spatial_context(model: Any, options: PredictOptions) -> PredictOptions:
    """Whole tiles, every pixel computed, for a network that reads its neighbours (``model.net.spatial_context``).

    Skipping empty pixels and chunking lay a tile's pixels out as one row, which a per-pixel
    network does not notice but a network with spatial context would read as neighbours.
    For such a network (or an ensemble holding one, or a feature baseline fitted with
    ``model.spatial_context``) ``skip_empty`` and ``chunk_pixels`` are
    turned off, with a log line; memory then grows with ``tile_size`` squared (lower it if
    a tile does not fit).
    """
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    if not any(_reads_neighbours(m) for m in modules):
        return options
    if options.skip_empty or options.chunk_pixels is not None:
        log.info(
            "The network reads each pixel's neighbours (model.net.spatial_context): predicting whole tiles of "
            "%d px with every pixel computed (skip_empty=false, chunk_pixels=null in place of %s, %s)",
            options.tile_size, options.skip_empty, options.chunk_pixels,
        )  # fmt: skip
    return replace(options, skip_empty=False, chunk_pixels=None)


def prepare_tile(
    data: Mapping[str, Mapping[str, np.ndarray]],
    norm_stats: NormStats | None,
    skip_empty: bool = False,
    chunk_pixels: int | None = None,
    derived: DerivedInputs | None = None,
) -> PreparedTile:
    """Normalise a window and cut it into model batches.

    A per-pixel model reads its pixels in any arrangement: ``skip_empty``
    keeps only the pixels where some modality has a valid observation (the others are
    no-data in the map whatever the model says), and ``chunk_pixels`` feeds them in chunks
    of at most that many pixels (a working set that stays in the CPU caches: a forward of
    a 256 x 256 px tile with a year of dates moves gigabytes of activations). A network with
    spatial context needs the tile as it is (:func:`whole_tiles_for_spatial_context`).

    Args:
        data: One window of a scene (:meth:`~mtan_s1s2.data.scene.scene.Scene.read`).
        norm_stats: The training statistics (None: raw values).
        skip_empty: Leave out the pixels without any valid observation.
        chunk_pixels: Pixels per batch (None: one batch; with neither option the batch is
            the tile as it is, ``(1, T, C, h, w)``).
        derived: The derived inputs appended before normalisation (None: none).

    Returns:
        The :class:`PreparedTile`.

    Raises:
        ValueError: On ``chunk_pixels < 1``.
    """
    if chunk_pixels is not None and int(chunk_pixels) < 1:
        raise ValueError(f"chunk_pixels must be a positive number of pixels (or null), got {chunk_pixels}.")
    if derived is not None:
        sample = {m: {k: torch.from_numpy(np.asarray(d[k])) for k in ("x", "doy", "mask")} for m, d in data.items()}
        data = {m: {k: v.numpy() for k, v in d.items()} for m, d in derived.apply(sample).items()}
    first = next(iter(data.values()))
    h, w = np.asarray(first["mask"]).shape[-2:]
    valid_any = np.zeros((h, w), bool)
    for d in data.values():
        valid_any |= np.asarray(d["mask"]).any(axis=0)
    if not skip_empty and chunk_pixels is None:
        sample = {m: {k: torch.from_numpy(np.asarray(d[k])) for k in ("x", "doy", "mask")} for m, d in data.items()}
        if norm_stats is not None:
            sample = normalize_sample(sample, norm_stats)
        return PreparedTile(
            (h, w), [{m: {k: v[None] for k, v in d.items()} for m, d in sample.items()}], None, valid_any
        )
    index = np.flatnonzero(valid_any) if skip_empty else np.arange(h * w)
    packed = {}
    for m, d in data.items():
        x, mask = np.asarray(d["x"]), np.asarray(d["mask"])
        t, c = x.shape[:2]
        packed[m] = {
            "x": torch.from_numpy(x.reshape(t, c, 1, h * w)[..., index]),  # (T, C, 1, N)
            "doy": torch.from_numpy(np.asarray(d["doy"])),
            "mask": torch.from_numpy(mask.reshape(t, 1, h * w)[..., index]),  # (T, 1, N)
        }
    if norm_stats is not None:
        packed = normalize_sample(packed, norm_stats)
    size = int(chunk_pixels) if chunk_pixels is not None else max(index.size, 1)
    batches = [
        {m: {"x": d["x"][None, ..., i : i + size], "doy": d["doy"][None], "mask": d["mask"][None, ..., i : i + size]}
         for m, d in packed.items()}
        for i in range(0, index.size, size)
    ]  # fmt: skip
    return PreparedTile((h, w), batches, index, valid_any)


def classify_prepared(
    model: Callable[[Mapping[str, Any]], torch.Tensor],
    tile: PreparedTile,
    ignore_index: int | None,
    device: torch.device,
    precision: str = "fp32",
    num_classes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Classes and probabilities of a :class:`PreparedTile`.

    Args:
        model: Maps a batch to ``(B, K, h, w)`` logits (a module, or a compiled network).
        tile: The prepared tile.
        ignore_index: Class left out of the argmax and the softmax.
        device: Where to run.
        precision: Autocast precision (``fp32``, ``bf16``, ``fp16``).
        num_classes: ``K``, the probability bands of a tile without any computed pixel.

    Returns:
        ``(classes (h, w) uint8, proba (K, h, w) float32)``; classes are :data:`NODATA`
        where no modality has a valid observation (and proba 0 at the pixels not computed).
    """
    h, w = tile.shape
    outputs = []
    with torch.inference_mode():
        for batch in tile.batches:
            on_device = {m: {k: v.to(device) for k, v in d.items()} for m, d in batch.items()}
            with autocast(precision, device):
                logits = model(on_device)[0].float()  # (K, h', w')
            outputs.append(logits.reshape(logits.shape[0], -1))
        k = int(outputs[0].shape[0]) if outputs else int(num_classes or 0)
        if outputs:
            logits = torch.cat(outputs, dim=1)  # (K, N)
            if ignore_index is not None and 0 <= ignore_index < k:
                logits[ignore_index] = -torch.inf
            proba_n = torch.softmax(logits, dim=0).cpu().numpy()
            classes_n = logits.argmax(dim=0).to(torch.uint8).cpu().numpy()
        else:  # a tile without a pixel to compute
            proba_n, classes_n = np.zeros((k, 0), np.float32), np.zeros(0, np.uint8)
    if tile.index is None:
        classes_flat, proba_flat = classes_n, proba_n
    else:
        classes_flat = np.full(h * w, NODATA, np.uint8)
        proba_flat = np.zeros((k, h * w), np.float32)
        classes_flat[tile.index], proba_flat[:, tile.index] = classes_n, proba_n
    classes, proba = classes_flat.reshape(h, w), proba_flat.reshape(k, h, w)
    classes[~tile.valid_any] = NODATA
    return classes, proba


def classify_tile(
    model: Callable[[Mapping[str, Any]], torch.Tensor],
    data: Mapping[str, Mapping[str, np.ndarray]],
    norm_stats: NormStats | None,
    ignore_index: int | None,
    device: torch.device,
    precision: str = "fp32",
    derived: DerivedInputs | None = None,
    skip_empty: bool = False,
    chunk_pixels: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Classes and probabilities of one tile: :func:`prepare_tile`, then :func:`classify_prepared`.

    Args:
        model: Maps a batch to ``(B, K, h, w)`` logits.
        data: One window of a scene (:meth:`~mtan_s1s2.data.scene.scene.Scene.read`).
        norm_stats: The training statistics (None: raw values).
        ignore_index: Class left out of the argmax and the softmax.
        device: Where to run.
        precision: Autocast precision.
        derived: The derived inputs appended before normalisation (None: none).
        skip_empty: Do not compute the pixels without any valid observation.
        chunk_pixels: Pixels per forward pass (None: the whole tile at once).

    Returns:
        ``(classes (h, w) uint8, proba (K, h, w) float32)``; classes are :data:`NODATA`
        where no modality has a valid observation.
    """
    tile = prepare_tile(data, norm_stats, skip_empty, chunk_pixels, derived)
    return classify_prepared(model, tile, ignore_index, device, precision)


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
    model: Callable[[Mapping[str, Any]], torch.Tensor],
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
        model: The classifier, batch -> ``(B, K, h, w)`` logits: a module (moved to the
            device, eval mode) or a compiled network (already on the device).
        scene: The scene (labels not needed).
        out_dir: Folder of its maps.
        class_names: Class names, index = class (``K`` of them).
        ignore_index: The unlabelled class, never predicted.
        norm_stats: The training statistics.
        options: Tile size, outputs, device, precision, pixel chunks, read-ahead.
        derived: The training's derived inputs (the datamodule's ``derived_inputs``).

    Returns:
        The scene's record: grid, files, pixel counts per class, time, pixels/s (of the
        whole scene) and the pixels computed (``n_computed``: every pixel with a valid
        observation, or every pixel without ``skip_empty``).

    Raises:
        ValueError: On a quality band with unexpected values or a scene without any valid
            observation (before any tile is predicted).
    """
    opts = whole_tiles_for_spatial_context(model, options or PredictOptions())
    device = opts.torch_device()
    scene.check_quality(opts.tile_size)
    scene.check_has_valid(opts.tile_size)
    if isinstance(model, torch.nn.Module):
        model = model.to(device).eval()
    windows = tiles(scene.grid, opts.tile_size)
    writer = MapWriter(out_dir, scene.grid, class_names, ignore_index, opts.probabilities, opts.confidence)

    sums = ParcelSums(len(class_names), scene.parcels.fill) if scene.parcels is not None else None

    def read(w: Window) -> tuple[PreparedTile, np.ndarray | None]:
        tile = prepare_tile(scene.read(w), norm_stats, opts.skip_empty, opts.chunk_pixels, derived)
        return tile, scene.read_parcels(w) if sums is not None else None

    n_computed = 0
    start = time.perf_counter()
    try:
        with BackgroundReader(windows, read, opts.prefetch, name=f"reader {scene.name}") as reader:
            for _, (w, (tile, parcel_ids)) in zip(
                _progress(windows, f"scene {scene.name}", opts.progress), reader, strict=True
            ):
                classes, proba = classify_prepared(model, tile, ignore_index, device, opts.precision, len(class_names))
                writer.write(w, classes, proba if (opts.probabilities or opts.confidence) else None)
                if sums is not None:
                    sums.add(parcel_ids, proba, classes != NODATA)  # type: ignore[arg-type]
                n_computed += tile.n_computed
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
        "n_computed": n_computed,
        "n_parcels": n_parcels,
        "pixels_per_class": {class_names[i]: int(n) for i, n in enumerate(writer.counts) if i != ignore_index},
        "predict_s": seconds,
        "pixels_per_s": n_pixels / seconds if seconds > 0 else None,
        "computed_pixels_per_s": n_computed / seconds if seconds > 0 else None,
        "device": str(device),
        "precision": opts.precision,
        "skip_empty": opts.skip_empty,
        "chunk_pixels": opts.chunk_pixels,
        "prefetch": opts.prefetch,
        "dates": {m: len(s.dates) for m, s in scene.series.items()},
    }
    scene.report.log(f"Scene {scene.name}")
    log.info(
        "Scene %s: %d px in %d tiles, %.1f s (%.0f px/s); maps in %s",
        scene.name, n_pixels, len(windows), seconds, n_pixels / max(seconds, 1e-9), out,
    )  # fmt: skip
    return record


__all__ = ["PredictOptions", "PreparedTile", "classify_prepared", "classify_tile", "predict_scene", "prepare_tile"]
