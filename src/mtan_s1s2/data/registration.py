"""Label registration: does the label raster sit on the imagery, or a few pixels off it?

Label rasters are often rasterised from parcel polygons (LPIS, field surveys) apart from the
imagery; a half-pixel convention, a datum or an older geolocation can leave them whole
pixels off it. The pixels then learn from the neighbour's label: at parcel borders the
labels are wrong, and every model is scored against them. This module measures the offset
from the training labels alone: for every offset ``(dy, dx)`` within ``radius`` px it fits a
RandomForest (scikit-learn) that predicts the label of pixel ``(y, x)`` from the imagery of
pixel ``(y + dy, x + dx)`` (every band's composites on a regular date grid, the window means
of :mod:`~mtan_s1s2.data.date_grid`), scored by grouped
cross-validation over spatial blocks. With labels on the imagery, ``(0, 0)`` scores best;
an offset that scores higher on every fold is the ``data.grid.label_shift`` that puts the
labels back on the imagery (:attr:`~mtan_s1s2.data.scene.scene.Scene.label_shift`).

``python scripts/check_registration.py data=...`` runs it on a raster datamodule's training
split (``data.split.fold``'s training pixels; validation and test pixels are never read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from rasterio.windows import Window
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GroupKFold

from mtan_s1s2.data.date_grid import regular_dates, window_mean_images_to_grid
from mtan_s1s2.data.scene.scene import Scene


def composite_features(sample: dict[str, dict[str, np.ndarray]], grid: torch.Tensor, step_days: float) -> np.ndarray:
    """``(F, h, w)`` float32 features of a window: every band's composite at each grid date.

    Per modality (in sorted order), :func:`~mtan_s1s2.data.date_grid.window_mean_images_to_grid`:
    the mean of the valid observations within half a step of each grid date, the line between
    the nearest ones where that window is empty, 0 for a pixel without any. Observations that
    are NaN count as invalid.

    Args:
        sample: :meth:`Scene.read` of a window: per modality ``x`` ``(T, C, h, w)``, ``doy``
            ``(T,)`` days, ``mask`` ``(T, h, w)`` bool (True = valid).
        grid: ``(G,)`` float64 grid dates, days (the same for every scene).
        step_days: Days between grid dates: the composite window.

    Returns:
        ``(G * sum(C), h, w)`` float32, grid-date-major within a modality.
    """
    out = []
    for m in sorted(sample):
        x, doy, mask = sample[m]["x"], sample[m]["doy"], sample[m]["mask"]
        valid = mask & np.isfinite(x).all(axis=1)
        values, _ = window_mean_images_to_grid(
            torch.from_numpy(np.ascontiguousarray(x, np.float32))[None],
            torch.from_numpy(np.asarray(doy, np.float64))[None],
            torch.from_numpy(valid)[None],
            grid,
            step_days,
        )
        out.append(values[0].flatten(0, 1).numpy())
    return np.concatenate(out, 0)


@dataclass
class RegistrationCheck:
    """OA of the label of each pixel predicted from the imagery of each offset pixel.

    Attributes:
        offsets: ``(n, 2)`` int ``(dy, dx)``: imagery read ``dy`` rows south and ``dx`` columns east of the label.
        oa: ``(n, folds)`` OA of each offset on each cross-validation fold.
        pixels: Labelled training pixels used.
    """

    offsets: np.ndarray
    oa: np.ndarray
    pixels: int

    @property
    def mean_oa(self) -> np.ndarray:
        """``(n,)`` OA of each offset, mean over the folds."""
        return np.asarray(self.oa.mean(1))

    def at(self, dy: int, dx: int) -> np.ndarray:
        """``(folds,)`` OA of one offset."""
        i = int(np.flatnonzero((self.offsets[:, 0] == dy) & (self.offsets[:, 1] == dx))[0])
        return np.asarray(self.oa[i])

    def best(self) -> tuple[int, int]:
        """The offset of the highest mean OA (ties: the nearest to ``(0, 0)``)."""
        order = np.lexsort((np.abs(self.offsets).sum(1), -np.round(self.mean_oa, 12)))
        dy, dx = self.offsets[order[0]]
        return int(dy), int(dx)

    def suggested_shift(self) -> tuple[int, int]:
        """The ``data.grid.label_shift`` that puts the labels on the imagery.

        The best offset if it beats ``(0, 0)`` on every fold, else ``(0, 0)``.
        """
        dy, dx = self.best()
        if (dy, dx) != (0, 0) and bool((self.at(dy, dx) > self.at(0, 0)).all()):
            return dy, dx
        return 0, 0

    def table(self) -> str:
        """A Markdown grid of the mean OA (%): rows ``dy`` (north to south), columns ``dx`` (west to east)."""
        dys, dxs = sorted(set(self.offsets[:, 0].tolist())), sorted(set(self.offsets[:, 1].tolist()))
        lines = ["| dy \\ dx | " + " | ".join(f"{dx:+d}" for dx in dxs) + " |", "|---" * (len(dxs) + 1) + "|"]
        for dy in dys:
            cells = [f"{100 * self.at(dy, dx).mean():.1f}" for dx in dxs]
            lines.append(f"| {dy:+d} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def check_registration(
    scenes: Sequence[Scene],
    labels: Sequence[np.ndarray],
    use: Sequence[np.ndarray],
    radius: int = 2,
    block: int = 16,
    folds: int = 3,
    max_pixels: int = 20000,
    n_estimators: int = 100,
    seed: int = 0,
    step_days: float = 30.0,
) -> RegistrationCheck:
    """Score every offset within ``radius`` px (see the module docstring).

    Args:
        scenes: The scenes.
        labels: Per scene ``(H, W)`` int class index (a datamodule's ``split.labels``).
        use: Per scene ``(H, W)`` bool, the labelled pixels to use (the training split's).
        radius: Largest offset tried, pixels (``(2 r + 1)^2`` offsets).
        block: Side of the spatial blocks the cross-validation groups pixels by, pixels.
        folds: Cross-validation folds (GroupKFold over the blocks).
        max_pixels: Pixels used at most (a random subset beyond).
        n_estimators: Trees of each forest.
        seed: Seed of the subset and the forests.
        step_days: Days between the dates of the composites (each the mean of the valid
            observations within half of it).

    Returns:
        The OA of every offset on every fold.

    Raises:
        ValueError: If ``radius`` is negative, fewer than ``folds`` blocks hold a pixel to
            use, or fewer than two classes are present.
    """
    if radius < 0:
        raise ValueError(f"radius must be >= 0 px, got {radius}.")
    rng = np.random.default_rng(seed)
    picks = []
    for i, (scene, use_i) in enumerate(zip(scenes, use, strict=True)):
        H, W = scene.grid.height, scene.grid.width
        inner = np.zeros((H, W), bool)
        inner[radius : H - radius, radius : W - radius] = True
        ys, xs = np.nonzero(use_i & inner)
        picks.append(np.stack([np.full(len(ys), i), ys, xs], 1))
    pixels = np.concatenate(picks) if picks else np.zeros((0, 3), int)
    if len(pixels) > max_pixels:
        pixels = pixels[np.sort(rng.choice(len(pixels), max_pixels, replace=False))]
    y = np.array([labels[i][r, c] for i, r, c in pixels])
    groups = pixels[:, 0] * 1_000_000 + (pixels[:, 1] // block) * 1000 + pixels[:, 2] // block
    if len(np.unique(groups)) < folds:
        raise ValueError(
            f"Only {len(np.unique(groups))} blocks of {block} px hold labelled training pixels away from the edges; "
            f"the check needs at least {folds} (lower folds or block)."
        )
    if len(np.unique(y)) < 2:
        raise ValueError(f"The training pixels hold {len(np.unique(y))} class; the check needs at least two.")
    doys = [d for sc in scenes for d in sc.doy.values() if len(d)]
    grid = regular_dates(min(float(d.min()) for d in doys), max(float(d.max()) for d in doys), step_days)
    # per scene, the features of the rows and columns the pixels (and their offsets) need
    feats: dict[int, tuple[np.ndarray, int, int]] = {}
    for i in np.unique(pixels[:, 0]).tolist():
        rows, cols = pixels[pixels[:, 0] == i, 1], pixels[pixels[:, 0] == i, 2]
        r0, r1 = int(rows.min()) - radius, int(rows.max()) + radius + 1
        c0, c1 = int(cols.min()) - radius, int(cols.max()) + radius + 1
        sample = scenes[i].read(Window(c0, r0, c1 - c0, r1 - r0), count=False)
        feats[i] = (composite_features(sample, grid, step_days), r0, c0)
    offsets = np.array([(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)])
    splits = list(GroupKFold(n_splits=folds).split(pixels, y, groups))
    oa = np.zeros((len(offsets), folds))
    for k, (dy, dx) in enumerate(offsets):
        X = np.empty((len(pixels), next(iter(feats.values()))[0].shape[0]), np.float32)
        for i, (f, r0, c0) in feats.items():
            sel = pixels[:, 0] == i
            X[sel] = f[:, pixels[sel, 1] + dy - r0, pixels[sel, 2] + dx - c0].T
        for j, (train, test) in enumerate(splits):
            forest = RandomForestClassifier(n_estimators, random_state=seed, n_jobs=1).fit(X[train], y[train])
            oa[k, j] = float((forest.predict(X[test]) == y[test]).mean())
    return RegistrationCheck(offsets, oa, len(pixels))


__all__ = ["RegistrationCheck", "check_registration", "composite_features"]
