"""Honest splits of scenes: every labelled pixel in a group, every group in one split.

Pixels are never split at random (neighbouring pixels of one field are nearly copies,
Roberts et al. 2017): every labelled pixel belongs to a *group* and every group to one split
(:func:`~mtan_s1s2.data.group_splits.split_of_groups`: stratified grouped k-fold, ``fold``
is the test fold, the next one validation). Groups (``data.split.by``):

* ``blocks``: square spatial blocks of ``block_size`` px on a lattice shared by every scene
  of one CRS and resolution (:func:`~mtan_s1s2.data.scene.grid.lattice_origin`), so two
  overlapping scenes never put one field in two splits;
* ``parcels``: the parcels of ``data.split.parcels`` (a parcel-id raster, or the connected
  regions of the label raster; :mod:`mtan_s1s2.data.parcels`): every pixel of a parcel goes
  to one split, pixels without a parcel id are not used. Groups are keyed by (scene, parcel
  id): parcel ids numbered per scene or tile (id 17 of two tiles, two fields) are two groups;
* ``scenes``: whole scenes (a held-out patch or tile).

A buffer of ``data.split.buffer`` px (default :data:`DEFAULT_BUFFER`) separates the splits:
labelled pixels that close to a group of another split are left out (train gives way to
val and test, val to test; :func:`buffer_drop`), counted in the log and in ``split.csv``.

:func:`split_scenes` returns the split of every pixel and one record per group for the run
directory (``split.csv``); the training windows of each split are cut by
:mod:`~mtan_s1s2.data.scene.windows`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mtan_s1s2.data.group_splits import SPLIT_NAMES, split_of_groups
from mtan_s1s2.data.labels import LabelMapping
from mtan_s1s2.data.parcels import parcel_name, scene_parcel_index
from mtan_s1s2.data.scene.grid import crs_name, lattice_origin
from mtan_s1s2.data.scene.scene import Scene

log = logging.getLogger(__name__)

SplitBy = Literal["blocks", "parcels", "scenes"]
SPLIT_BY: tuple[str, ...] = ("blocks", "parcels", "scenes")
NO_SPLIT = -1
DEFAULT_BUFFER = 1
"""Default ``data.split.buffer``, pixels. Even a per-pixel model (receptive field 0) leaks
across a shared edge: neighbouring pixels see overlapping ground (the sensor's point-spread
function, mixed pixels on field edges) and, on the 10 m grid, the 20 m bands (S2 B05-B8A,
B11, B12; S1) resampled from one source pixel are copies for 2 x 2 pixels. One pixel
removes every labelled pair of different splits that touches (also diagonally); larger
buffers (the autocorrelation range of the landscape) cost more labelled pixels."""
MAX_SPLIT_PIXELS = 2_000_000
"""Labelled pixels passed to the fold assignment at most (evenly subsampled beyond)."""


@dataclass(frozen=True)
class SplitConfig:
    """How scenes are cut into train/val/test (config ``data.split``).

    Args:
        by: ``blocks``, ``parcels`` or ``scenes``.
        block_size: Side of the spatial blocks, pixels.
        n_folds: Folds of the grouped k-fold (>= 3).
        fold: Test fold (1-based); the next one is validation.
        seed: Seed of the fold assignment.
        window: Side of the sample windows, pixels (None: ``block_size``).
        buffer: Pixels between the groups of different splits (default 1, 0 = none):
            labelled pixels within ``buffer`` px (8-neighbourhood, Chebyshev distance) of a
            pixel of a group of a more protected split are left out (see :func:`buffer_drop`).
        train_fraction: Share of the training labels used, ``(0, 1]`` (1 = all): whole
            training groups are kept (:func:`train_groups_kept`), the labels of the others
            become ``ignore_index`` (their pixels stay in the training area, which
            ``task=pretrain`` reads unlabelled). Validation and test are never subsampled.
        train_fraction_seed: Seed of the choice of the training groups kept.

    Raises:
        ValueError: On an unknown ``by``, non-positive sizes or a negative buffer.
    """

    by: str = "blocks"
    block_size: int = 16
    n_folds: int = 5
    fold: int = 1
    seed: int = 0
    window: int | None = None
    buffer: int = DEFAULT_BUFFER
    train_fraction: float = 1.0
    train_fraction_seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < float(self.train_fraction) <= 1.0:
            raise ValueError(
                f"data.split.train_fraction must be in (0, 1] (share of the training labels used), got "
                f"{self.train_fraction}."
            )
        if self.by not in SPLIT_BY:
            raise ValueError(f"data.split.by must be one of {list(SPLIT_BY)}, got {self.by!r}.")
        if int(self.block_size) < 1:
            raise ValueError(f"data.split.block_size must be a positive number of pixels, got {self.block_size}.")
        if self.window is not None and int(self.window) < 1:
            raise ValueError(f"data.split.window must be a positive number of pixels or null, got {self.window}.")
        if int(self.buffer) < 0:
            raise ValueError(
                f"data.split.buffer must be a number of pixels >= 0 (0 = no buffer between splits), got {self.buffer}."
            )

    @property
    def window_size(self) -> int:
        """Side of the sample windows."""
        return int(self.window or self.block_size)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> SplitConfig:
        """From ``data.split`` (the ``parcels`` layer is read by the scene readers).

        Raises:
            ValueError: On unknown keys or bad values.
        """
        cfg = {k: v for k, v in dict(cfg or {}).items() if k != "parcels"}
        names = ("by", "block_size", "n_folds", "fold", "seed", "window", "buffer", "train_fraction",
                 "train_fraction_seed")  # fmt: skip
        unknown = sorted(set(cfg) - set(names))
        if unknown:
            raise ValueError(f"data.split has unknown key(s) {unknown}; valid keys are {[*names, 'parcels']}.")
        return cls(**cfg)


def scene_groups(scene: Scene, cfg: SplitConfig) -> tuple[np.ndarray, list[str]]:
    """The group of every pixel of a scene.

    Returns:
        ``(ids, names)``: ``(H, W) int64`` group ids (-1: no group, never used) and the name
        of every id. Block names are shared across scenes (the blocks of one CRS and
        resolution lie on one lattice); parcel names hold the scene (a parcel id is a
        group of one scene).

    Raises:
        ValueError: If ``by=parcels`` and the scene has no parcel raster.
    """
    H, W = scene.grid.shape
    if cfg.by == "scenes":
        return np.zeros((H, W), np.int64), [f"scene {scene.name}"]
    if cfg.by == "parcels":
        if scene.parcels is None:
            raise ValueError(
                f"data.split.by=parcels, but scene {scene.name} has no parcel ids: set data.split.parcels "
                "({source: components} for the connected regions of the label raster, {file, variable} of a parcel "
                "raster of a datacube, {file, band} of a GeoTIFF) or use data.split.by=blocks."
            )
        ids, values = scene_parcel_index(scene)
        return ids, [parcel_name(scene.name, v) for v in values.tolist()]
    origin = lattice_origin(scene.grid)
    rows = (np.arange(H) + origin[0]) // cfg.block_size
    cols = (np.arange(W) + origin[1]) // cfg.block_size
    r0, c0 = int(rows.min()), int(cols.min())
    n_cols = int(cols.max()) - c0 + 1
    ids = (rows - r0)[:, None].astype(np.int64) * n_cols + (cols - c0)[None, :]
    space = crs_name(scene.grid.crs) if scene.grid.georeferenced else f"scene {scene.name}"
    res = f"{scene.grid.res[0]:g}m" if scene.grid.georeferenced else "px"
    names = [
        f"{space} {res} block {cfg.block_size} r{r} c{c}"
        for r in range(r0, int(rows.max()) + 1)
        for c in range(c0, c0 + n_cols)
    ]
    return ids, names


def buffer_drop(splits: np.ndarray, buffer: int) -> np.ndarray:
    """The pixels a buffer between splits leaves out.

    Splits are protected in the order test, val, train: a pixel of ``train`` within
    ``buffer`` px of a ``val`` or ``test`` pixel is dropped, a ``val`` pixel within
    ``buffer`` px of a ``test`` pixel is dropped, test pixels are all kept (the reported
    metrics use every test pixel). Afterwards no two pixels of different splits are
    closer than ``buffer + 1`` px (Chebyshev distance: diagonal neighbours count).

    Args:
        splits: ``(H, W) int8`` split codes (index in
            :data:`~mtan_s1s2.data.splits.SPLIT_NAMES`, ``-1`` = no group).
        buffer: Pixels, >= 0 (0: nothing is dropped).

    Returns:
        ``(H, W) bool``, True = leave the pixel out.
    """
    from scipy.ndimage import maximum_filter

    drop = np.zeros(splits.shape, bool)
    if buffer <= 0:
        return drop
    size = 2 * int(buffer) + 1
    for k in range(len(SPLIT_NAMES) - 1):
        near = maximum_filter((splits > k).astype(np.uint8), size=size, mode="constant", cval=0).astype(bool)
        drop |= (splits == k) & near
    return drop


@dataclass
class SceneSplit:
    """The split of every labelled pixel of the scenes.

    Attributes:
        labels: Per scene, ``(H, W) int16`` class indices (``ignore_index`` = unlabelled).
        splits: Per scene, ``(H, W) int8``: index in :data:`~mtan_s1s2.data.group_splits.SPLIT_NAMES`
            or -1 (no group).
        group_split: Group name -> split name.
        group_rows: One record per group (for ``split.csv``; ``n_buffer`` = labelled pixels
            the buffer between splits left out).
        buffer_dropped: Labelled pixels the buffer left out, per split.
        areas: Per scene, ``(H, W) int8``: the split of the pixel's group, labelled or
            not (-1: a group without labelled pixels, or no group), before the buffer; the
            area ``task=pretrain`` reads unlabelled pixels from (:func:`split_area`).
    """

    labels: list[np.ndarray]
    splits: list[np.ndarray]
    group_split: dict[str, str]
    group_rows: list[dict[str, Any]]
    buffer_dropped: dict[str, int] = field(default_factory=dict)
    areas: list[np.ndarray] = field(default_factory=list)


def split_area(split: SceneSplit, scene_index: int, name: str, buffer: int) -> np.ndarray:
    """The pixels of the groups of split ``name`` in one scene, labelled or not, minus the buffer.

    Every pixel of a group dealt to ``name`` (all pixels of its spatial blocks, whether
    labelled or not), except those within ``buffer`` px of a group of a more protected
    split (:func:`buffer_drop`: train gives way to val and test, val to test). Pixels of
    groups without any labelled pixel belong to no split and are never in an area.

    Args:
        split: The scenes' split.
        scene_index: Index of the scene.
        name: ``train``, ``val`` or ``test``.
        buffer: ``data.split.buffer``, pixels.

    Returns:
        ``(H, W) bool``.
    """
    area = split.areas[scene_index]
    inside: np.ndarray = (area == SPLIT_NAMES.index(name)) & ~buffer_drop(area, buffer)
    return inside


def train_groups_kept(
    rows: Sequence[Mapping[str, Any]], fraction: float, seed: int, classes: Sequence[str]
) -> set[str]:
    """The training groups whose labels a ``data.split.train_fraction`` run uses.

    Group-wise, so the labelled pixels of one field stay together: first one random group
    holding each class (classes in random order, skipped when an earlier pick already holds
    it), so every training class keeps labels; then random groups until the kept groups
    hold ``fraction`` of the training split's labelled pixels.

    Args:
        rows: The group records of the split (``split``, ``group``, ``n_labelled``,
            ``n_<class>``).
        fraction: Share of the training labels, ``(0, 1]``.
        seed: Seed of the random choices.
        classes: Class names (``n_<class>`` columns).

    Returns:
        Names of the training groups kept (all of them when ``fraction`` is 1).
    """
    train = [r for r in rows if r["split"] == "train" and r["n_labelled"] > 0]
    if fraction >= 1.0:
        return {r["group"] for r in train}
    rng = np.random.default_rng(seed)
    order = [train[i] for i in rng.permutation(len(train))]
    target = fraction * sum(r["n_labelled"] for r in train)
    kept: list[Mapping[str, Any]] = []
    for c in [classes[i] for i in rng.permutation(len(classes))]:
        key = f"n_{c}"
        if any(r.get(key, 0) > 0 for r in kept):
            continue
        pick = next((r for r in order if r.get(key, 0) > 0 and r not in kept), None)
        if pick is not None:
            kept.append(pick)
    for r in order:
        if sum(k["n_labelled"] for k in kept) >= target:
            break
        if r not in kept:
            kept.append(r)
    return {r["group"] for r in kept}


def split_scenes(
    scenes: Sequence[Scene], mapping: LabelMapping, cfg: SplitConfig, codes: Sequence[np.ndarray]
) -> SceneSplit:
    """Map the labels, group the pixels and deal the groups into train/val/test.

    Args:
        scenes: The scenes.
        mapping: Source codes -> classes.
        cfg: The split settings.
        codes: Per scene, ``(H, W)`` source label codes (whole scene).

    Raises:
        ValueError: If no pixel is labelled, or there are fewer groups than folds.
    """
    ii = mapping.ignore_index
    labels: list[np.ndarray] = []
    global_ids: list[np.ndarray] = []  # per scene, (H, W) index into `names` (-1: no group)
    names: list[str] = []
    index: dict[str, int] = {}  # group name -> global id
    for scene, raw in zip(scenes, codes, strict=True):
        labels.append(mapping.map(raw).astype(np.int16))
        ids, id_names = scene_groups(scene, cfg)
        for name in id_names:
            index.setdefault(name, len(index))
        names = list(index)
        lut = np.asarray([index[n] for n in id_names], np.int64)
        global_ids.append(np.where(ids >= 0, lut[ids.clip(min=0)], -1))
    keep = [(lab != ii) & (g >= 0) for lab, g in zip(labels, global_ids, strict=True)]
    g_all = np.concatenate([g[k] for g, k in zip(global_ids, keep, strict=True)])
    y_all = np.concatenate([lab[k] for lab, k in zip(labels, keep, strict=True)]).astype(np.int64)
    if y_all.size == 0:
        raise ValueError(
            f"No labelled pixel in scenes {[s.name for s in scenes]} (every label code maps to ignore_index, or no "
            "labelled pixel has a parcel id). Check data.labels.classes and data.labels.file."
        )
    if y_all.size > MAX_SPLIT_PIXELS:
        step = int(np.ceil(y_all.size / MAX_SPLIT_PIXELS))
        g_all, y_all = g_all[::step], y_all[::step]
    by_id = split_of_groups(
        g_all, y_all, int(cfg.n_folds), int(cfg.fold), int(cfg.seed), ignore_index=ii,
        class_names=mapping.class_names, group_name=lambda g: names[int(g)],
    )  # fmt: skip
    code = {s: i for i, s in enumerate(SPLIT_NAMES)}
    split_lut = np.full(len(names) + 1, NO_SPLIT, np.int8)  # last entry: no group (-1)
    for g, s in by_id.items():
        split_lut[int(g)] = code[s]
    splits = [split_lut[g] for g in global_ids]
    areas = [sp.copy() for sp in splits]
    drops = [buffer_drop(sp, int(cfg.buffer)) & (lab != ii) for sp, lab in zip(splits, labels, strict=True)]
    dropped = {s: sum(int((d & (sp == code[s])).sum()) for d, sp in zip(drops, splits, strict=True)) for s in code}
    rows: list[dict[str, Any]] = []
    for scene, g, lab, d in zip(scenes, global_ids, labels, drops, strict=True):
        for gid in np.unique(g[g >= 0]).tolist():
            if split_lut[gid] == NO_SPLIT:
                continue
            where = g == gid
            lab_k = lab[where & ~d]
            counts = np.bincount(lab_k[lab_k != ii], minlength=mapping.num_classes)
            rows.append(
                {
                    "scene": scene.name,
                    "group": names[gid],
                    "split": SPLIT_NAMES[int(split_lut[gid])],
                    "n_pixels": int(where.sum()),
                    "n_labelled": int((lab_k != ii).sum()),
                    "n_buffer": int((where & d).sum()),
                    **{f"n_{mapping.class_names[c]}": int(counts[c]) for c in range(mapping.num_classes) if c != ii},
                }
            )
    for sp, d in zip(splits, drops, strict=True):
        sp[d] = NO_SPLIT  # left out of every split's samples (their labels are ignore_index everywhere)
    use_train_fraction(rows, labels, global_ids, splits, index, cfg, mapping)
    for s in SPLIT_NAMES:
        n = sum(int(((sp == code[s]) & (lab != ii)).sum()) for sp, lab in zip(splits, labels, strict=True))
        log.info("Split %s: %d labelled pixels in %d groups", s, n, len({r["group"] for r in rows if r["split"] == s}))
    if cfg.buffer > 0:
        log.info(
            "Buffer of %d px between the splits (data.split.buffer): left out %d labelled pixels (train %d, val %d, "
            "test %d); split.csv lists them per group (n_buffer).",
            int(cfg.buffer), sum(dropped.values()), dropped["train"], dropped["val"], dropped["test"],
        )  # fmt: skip
    return SceneSplit(labels, splits, {names[int(g)]: s for g, s in by_id.items()}, rows, dropped, areas)


def use_train_fraction(
    rows: list[dict[str, Any]],
    labels: Sequence[np.ndarray],
    global_ids: Sequence[np.ndarray],
    splits: Sequence[np.ndarray],
    index: Mapping[str, int],
    cfg: SplitConfig,
    mapping: LabelMapping,
) -> None:
    """Apply ``data.split.train_fraction``: the labels of the training groups not kept become ``ignore_index``.

    Marks every group record with ``labels_used`` (False: a training group whose labels
    are left out) and changes ``labels`` in place.

    Args:
        rows: The group records (``split.csv``).
        labels: Per scene, ``(H, W)`` class indices.
        global_ids: Per scene, ``(H, W)`` group ids (-1: no group).
        splits: Per scene, ``(H, W)`` split codes.
        index: Group name -> group id.
        cfg: The split settings.
        mapping: The label mapping (class names, ``ignore_index``).
    """
    ii = mapping.ignore_index
    train = SPLIT_NAMES.index("train")
    kept = train_groups_kept(rows, float(cfg.train_fraction), int(cfg.train_fraction_seed), mapping.class_names)
    for r in rows:
        r["labels_used"] = r["split"] != "train" or r["group"] in kept
    if cfg.train_fraction >= 1.0:
        return
    dropped_ids = np.asarray([index[r["group"]] for r in rows if not r["labels_used"]], np.int64)
    for lab, g, sp in zip(labels, global_ids, splits, strict=True):
        lab[np.isin(g, dropped_ids) & (sp == train)] = ii
    log.info(
        "data.split.train_fraction=%g (seed %d): the labels of %d of %d training groups are used (%d labelled "
        "pixels); the others stay in the training area, unlabelled.",
        float(cfg.train_fraction), int(cfg.train_fraction_seed), len(kept),
        sum(1 for r in rows if r["split"] == "train"),
        sum(r["n_labelled"] for r in rows if r["split"] == "train" and r["labels_used"]),
    )  # fmt: skip


__all__ = [
    "DEFAULT_BUFFER",
    "SPLIT_BY",
    "SceneSplit",
    "SplitConfig",
    "buffer_drop",
    "scene_groups",
    "split_area",
    "split_scenes",
    "train_groups_kept",
    "use_train_fraction",
]
