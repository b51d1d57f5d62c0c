"""A raster grid (CRS, affine transform, shape) and nearest-neighbour alignment between grids.

Every raster a scene is made of (each band of a datacube, a GeoTIFF, a label raster) has its
own :class:`Grid`. A scene reads everything on one *target* grid (:func:`common_grid`): the
pixel lattice of a reference raster (by default the finest one) over the area all rasters
cover. Another raster is read on it by :func:`index_map`: each target pixel takes the value
of the source pixel that contains its centre (nearest neighbour), so 20 m bands are
upsampled to 10 m without inventing values, and S1 and S2 rasters on different lattices are
aligned by their coordinates, never by their array indices.

A raster whose lattice is off the target's by a fraction of a pixel (a 20 m band 5 m off
the 10 m grid) would be snapped silently by nearest-neighbour reading: :func:`check_alignment`
warns with the offset, and refuses one above :data:`SNAP_TOLERANCE` pixel unless
``data.grid.snap=true``.

Grids are north-up (no rotation); rasters in different CRSs are not reprojected (the error
says how to reproject them first). A raster without georeferencing (no CRS, identity
transform) is aligned by row and column with the others, which must then have its shape.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from affine import Affine
from rasterio.crs import CRS
from rasterio.windows import Window

log = logging.getLogger(__name__)

_TOL = 1e-6
"""Relative tolerance (of a pixel) when comparing coordinates."""

SNAP_TOLERANCE = 0.25
"""Largest sub-pixel offset (in pixels of the scene grid) read by nearest centre without
``data.grid.snap=true``: a raster whose lattice is off the scene grid by more than a quarter
pixel is refused, by less (but more than rounding) it is read with a warning."""


def crs_name(crs: CRS | None) -> str:
    """``EPSG:32631`` (or the WKT's name, or ``no CRS``)."""
    if crs is None:
        return "no CRS"
    epsg = crs.to_epsg()
    return f"EPSG:{epsg}" if epsg else str(crs.to_string())[:60]


@dataclass(frozen=True)
class Grid:
    """A north-up pixel grid.

    Args:
        transform: Affine transform of the top-left corner of pixel ``(0, 0)``: ``x = a*col
            + c``, ``y = e*row + f`` (``e < 0`` north-up); identity without georeferencing.
        height: Rows.
        width: Columns.
        crs: Coordinate reference system, None when unknown.
        name: Where the grid comes from (file, variable), named in error messages.

    Raises:
        ValueError: If the transform is rotated or the shape is empty.
    """

    transform: Affine
    height: int
    width: int
    crs: CRS | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        t = self.transform
        if abs(t.b) > 0 or abs(t.d) > 0:
            raise ValueError(
                f"{self.name or 'A raster'} has a rotated grid (transform {tuple(t)[:6]}); only north-up grids are "
                "supported: warp it first, e.g. `gdalwarp -t_srs EPSG:<code> in.tif out.tif`."
            )
        if self.height < 1 or self.width < 1:
            raise ValueError(f"{self.name or 'A raster'} has an empty grid ({self.height} x {self.width} px).")

    @classmethod
    def from_coords(cls, x: np.ndarray, y: np.ndarray, crs: CRS | None, name: str = "") -> Grid:
        """The grid of pixel-centre coordinates ``x (W,)`` and ``y (H,)`` (as in xarray datacubes).

        Raises:
            ValueError: If the coordinates are not evenly spaced.
        """
        x = np.asarray(x, np.float64)
        y = np.asarray(y, np.float64)
        steps = []
        for axis, values in (("x", x), ("y", y)):
            if values.size == 1:
                steps.append(1.0 if axis == "x" else -1.0)
                continue
            d = np.diff(values)
            if not np.allclose(d, d[0], rtol=1e-6, atol=abs(d[0]) * 1e-6) or d[0] == 0:
                raise ValueError(
                    f"{name}: the {axis} coordinates are not evenly spaced (steps {d.min():g} to {d.max():g}); "
                    "a datacube must be on a regular grid."
                )
            steps.append(float(d.mean()))
        dx, dy = steps
        transform = Affine(dx, 0.0, float(x[0]) - dx / 2, 0.0, dy, float(y[0]) - dy / 2)
        if dx < 0:
            raise ValueError(f"{name}: x decreases along its axis; flip it (ds.sortby('x')).")
        if dy > 0 and y.size > 1:
            raise ValueError(
                f"{name}: y increases along its axis (south-up); give the coordinates north-up (y[::-1]) and read "
                "the rows flipped (the datacube reader does: CubeVariable.flip_y)."
            )
        return cls(transform, int(y.size), int(x.size), crs, name)

    @property
    def georeferenced(self) -> bool:
        """False for a raster with no CRS and an identity transform."""
        return self.crs is not None or not self.transform.almost_equals(Affine.identity())

    @property
    def res(self) -> tuple[float, float]:
        """Pixel size ``(x, y)``, positive, in CRS units."""
        return abs(self.transform.a), abs(self.transform.e)

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """``(left, bottom, right, top)``."""
        t = self.transform
        x0, x1 = t.c, t.c + t.a * self.width
        y0, y1 = t.f, t.f + t.e * self.height
        return min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)

    @property
    def shape(self) -> tuple[int, int]:
        """``(height, width)``."""
        return self.height, self.width

    def describe(self) -> str:
        """E.g. ``B05 of S2_20m.nc: EPSG:32631, 32 x 32 px of 20 m, bounds (501360, 5629040, 502000, 5629680)``."""
        head = f"{self.name}: " if self.name else ""
        if not self.georeferenced:
            return f"{head}not georeferenced, {self.height} x {self.width} px"
        xres, yres = self.res
        res = f"{xres:g} m" if math.isclose(xres, yres) else f"{xres:g} x {yres:g}"
        bounds = ", ".join(f"{v:.6g}" for v in self.bounds)
        return f"{head}{crs_name(self.crs)}, {self.height} x {self.width} px of {res}, bounds ({bounds})"

    def window_grid(self, window: Window) -> Grid:
        """The sub-grid of ``window``."""
        r0, c0 = int(window.row_off), int(window.col_off)
        t = self.transform @ Affine.translation(c0, r0)
        return Grid(t, int(window.height), int(window.width), self.crs, self.name)

    def full_window(self) -> Window:
        """The window of the whole grid."""
        return Window(0, 0, self.width, self.height)

    def as_dict(self) -> dict[str, Any]:
        """Plain data: CRS (WKT or None), transform (6 numbers), shape."""
        return {
            "crs": crs_name(self.crs) if self.crs is not None else None,
            "transform": [float(v) for v in tuple(self.transform)[:6]],
            "height": self.height,
            "width": self.width,
        }


def _overlap(a: Grid, b: Grid) -> bool:
    al, ab, ar, at = a.bounds
    bl, bb, br, bt = b.bounds
    return min(ar, br) > max(al, bl) and min(at, bt) > max(ab, bb)


def check_same_crs(grids: Sequence[Grid]) -> None:
    """All georeferenced grids share one CRS, or none is georeferenced.

    Raises:
        ValueError: Naming both grids, and how to reproject.
    """
    first = grids[0]
    for g in grids[1:]:
        if g.georeferenced != first.georeferenced:
            geo, plain = (g, first) if g.georeferenced else (first, g)
            raise ValueError(
                f"Cannot align a georeferenced raster with one that is not: {geo.describe()} and "
                f"{plain.describe()}. Georeference both (e.g. `gdal_edit.py -a_srs EPSG:<code> -a_ullr ...`) or "
                "neither."
            )
        if g.crs != first.crs and g.crs is not None and first.crs is not None:
            raise ValueError(
                f"The rasters of a scene must share one CRS, but {first.describe()} and {g.describe()} differ. "
                "Reproject one onto the other first, e.g. `gdalwarp -t_srs EPSG:<code> -tr <res> <res> in.tif out.tif` "
                "or rioxarray's `reproject_match`."
            )


def lattice_offset(source: Grid, target: Grid) -> tuple[float, float]:
    """How far ``source``'s pixel edges lie from ``target``'s lattice, ``(x, y)`` in CRS units.

    Measured modulo the finer of the two pixel sizes and wrapped to ``[-step/2, step/2)``:
    a 20 m raster whose origin is 5 m off a 10 m grid is ``(5, ...)`` off; 0 when every
    edge of the finer lattice is an edge of the coarser one.
    """
    out = []
    for s_origin, s_step, t_origin, t_step in (
        (source.transform.c, source.transform.a, target.transform.c, target.transform.a),
        (source.transform.f, source.transform.e, target.transform.f, target.transform.e),
    ):
        step = min(abs(s_step), abs(t_step))
        steps = (s_origin - t_origin) / step
        out.append((steps - round(steps)) * step)
    return out[0], out[1]


def check_alignment(grids: Sequence[Grid], target: Grid, snap: bool = False) -> None:
    """Warn about, or refuse, rasters whose pixels are off the scene grid by a fraction of a pixel.

    Nearest-centre reading snaps such a raster by up to half a pixel without a word; this
    says by how much (metres and pixels). Offsets up to :data:`SNAP_TOLERANCE` of a target
    pixel are read with a warning; larger ones are refused unless ``snap`` (``data.grid.snap``)
    accepts the snapping (still warned).

    Raises:
        ValueError: On an offset above :data:`SNAP_TOLERANCE` pixel without ``snap``,
            naming the raster, the offset and the fixes.
    """
    if not target.georeferenced:
        return
    res_x, res_y = target.res
    seen: set[tuple[float, float, float, float]] = set()
    for g in grids:
        dx, dy = lattice_offset(g, target)
        px = max(abs(dx) / res_x, abs(dy) / res_y)
        if px <= _TOL * 10:
            continue
        key = (round(dx, 6), round(dy, 6), *g.res)
        if key in seen:  # bands of one file: one message
            continue
        seen.add(key)
        what = (
            f"{g.name or 'A raster'} ({g.res[0]:g} m pixels) lies {dx:+g} m in x and {dy:+g} m in y off the scene "
            f"grid ({target.describe()}): {abs(dx) / res_x:.3g} and {abs(dy) / res_y:.3g} px of {res_x:g} m"
        )
        if px > SNAP_TOLERANCE and not snap:
            raise ValueError(
                f"{what}, more than the {SNAP_TOLERANCE:g} px a raster may be snapped by when read by nearest centre. "
                "Resample it onto the grid first (e.g. `gdalwarp -tap -tr <res> <res>` or rioxarray's "
                "`reproject_match`), or set data.grid.snap=true to read it snapped."
            )
        message = f"{what}; its pixels are read by nearest centre (snapped by up to that much)."
        warnings.warn(message, UserWarning, stacklevel=3)
        log.warning("%s", message)


def common_grid(
    grids: Sequence[Grid], resolution: float | None = None, name: str = "scene grid", snap: bool = False
) -> Grid:
    """The target grid of a scene: a reference lattice over the area every grid covers.

    Every raster is then checked to lie on that lattice (:func:`check_alignment`).

    Args:
        grids: The grids of every raster of the scene (bands, quality bands, labels).
        resolution: Pixel size of the target grid, in CRS units (e.g. 10 or 20); None =
            the finest of ``grids``. The lattice is that of the first grid of this
            resolution (so label pixels stay where they are), else one starting at the
            top-left corner of the common area.
        name: Name of the result.
        snap: Read rasters off the lattice by more than :data:`SNAP_TOLERANCE` pixel by
            nearest centre (``data.grid.snap``) instead of refusing them.

    Returns:
        The grid; rasters coarser than it are upsampled, finer ones subsampled (nearest).

    Raises:
        ValueError: On different CRSs, rasters that do not overlap (naming both grids),
            non-georeferenced rasters of different shapes, a bad ``resolution``, or a
            raster off the lattice by more than :data:`SNAP_TOLERANCE` pixel.
    """
    if not grids:
        raise ValueError("A scene needs at least one raster.")
    check_same_crs(grids)
    first = grids[0]
    if not first.georeferenced:
        for g in grids[1:]:
            if g.shape != first.shape:
                raise ValueError(
                    f"Rasters without georeferencing are aligned by row and column, so they need one shape, but "
                    f"{first.describe()} and {g.describe()} differ. Georeference them or resample to one grid."
                )
        return Grid(first.transform, first.height, first.width, None, name)
    for g in grids[1:]:
        if not _overlap(first, g):
            raise ValueError(
                f"These rasters do not overlap, so they cannot be aligned by their coordinates: {first.describe()} "
                f"and {g.describe()}. Check that they are the same place (and the same CRS)."
            )
    left = max(g.bounds[0] for g in grids)
    bottom = max(g.bounds[1] for g in grids)
    right = min(g.bounds[2] for g in grids)
    top = min(g.bounds[3] for g in grids)
    if right <= left or top <= bottom:
        raise ValueError(
            "The rasters of this scene have no area in common: "
            + "; ".join(g.describe() for g in grids[:4])
            + ". Check that they cover the same place."
        )
    if resolution is not None and not (float(resolution) > 0):
        raise ValueError(f"data.grid.resolution must be a positive pixel size (e.g. 10), got {resolution!r}.")
    finest = min(min(g.res) for g in grids)
    res = float(resolution) if resolution is not None else finest
    ref = next((g for g in grids if math.isclose(g.res[0], res, rel_tol=1e-6) and math.isclose(g.res[1], res)), None)
    if ref is not None:
        t = ref.transform
        # First/last lattice column and row whose pixel lies inside the common area.
        c0 = math.ceil((left - t.c) / t.a - _TOL)
        c1 = math.floor((right - t.c) / t.a + _TOL)
        r0 = math.ceil((top - t.f) / t.e - _TOL)
        r1 = math.floor((bottom - t.f) / t.e + _TOL)
        transform = t @ Affine.translation(c0, r0)
        height, width = r1 - r0, c1 - c0
    else:
        transform = Affine(res, 0.0, left, 0.0, -res, top)
        width = math.floor((right - left) / res + _TOL)
        height = math.floor((top - bottom) / res + _TOL)
    if height < 1 or width < 1:
        raise ValueError(
            f"The area common to the rasters is smaller than one pixel of {res:g}: "
            + "; ".join(g.describe() for g in grids[:4])
        )
    target = Grid(transform, int(height), int(width), first.crs, name)
    check_alignment(grids, target, snap)
    return target


def index_map(source: Grid, target: Grid, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of ``source`` holding the centres of the pixels of ``window`` of ``target``.

    Args:
        source: Grid of the raster to read.
        target: Grid it is read on.
        window: Window of ``target``.

    Returns:
        ``(rows (h,), cols (w,)) int64`` indices into ``source``.

    Raises:
        ValueError: If a centre falls outside ``source`` (the window leaves the area it
            covers).
    """
    r0, c0 = int(window.row_off), int(window.col_off)
    h, w = int(window.height), int(window.width)
    if not source.georeferenced:
        rows, cols = np.arange(r0, r0 + h), np.arange(c0, c0 + w)
    else:
        ts, tt = source.transform, target.transform
        yc = tt.f + tt.e * (np.arange(r0, r0 + h) + 0.5)
        xc = tt.c + tt.a * (np.arange(c0, c0 + w) + 0.5)
        # Rounded first: a centre on a source pixel edge (subsampling by 2) goes the same way everywhere.
        rows = np.floor(np.round((yc - ts.f) / ts.e, 6)).astype(np.int64)
        cols = np.floor(np.round((xc - ts.c) / ts.a, 6)).astype(np.int64)
    outside = rows.min() < 0 or cols.min() < 0 or rows.max() >= source.height or cols.max() >= source.width
    if rows.size and cols.size and outside:
        raise ValueError(
            f"Window {window} of {target.describe()} reaches outside {source.describe()}; it cannot be read there."
        )
    return rows, cols


def read_aligned(read_slab: Any, source: Grid, target: Grid, window: Window) -> np.ndarray:
    """Read ``window`` of ``target`` from a raster on ``source`` (nearest neighbour).

    Args:
        read_slab: ``(row_slice, col_slice) -> (..., rows, cols) array`` reading a
            rectangle of the source raster (lazily: only that rectangle is read).
        source: The raster's grid.
        target: The grid to read on.
        window: Window of ``target``.

    Returns:
        ``(..., h, w)`` values, the source's dtype.
    """
    rows, cols = index_map(source, target, window)
    rmin, rmax, cmin, cmax = int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())
    slab = np.asarray(read_slab(slice(rmin, rmax + 1), slice(cmin, cmax + 1)))
    same_rows = rows.size == rmax - rmin + 1 and bool(np.all(np.diff(rows) == 1))
    same_cols = cols.size == cmax - cmin + 1 and bool(np.all(np.diff(cols) == 1))
    if not same_rows:
        slab = slab[..., rows - rmin, :]
    if not same_cols:
        slab = slab[..., cols - cmin]
    return slab


def tiles(grid: Grid, size: int, origin: tuple[int, int] = (0, 0)) -> list[Window]:
    """Windows of at most ``size`` x ``size`` px covering ``grid`` (row-major order).

    Args:
        grid: The grid to cover.
        size: Tile side, pixels (> 0).
        origin: ``(row, col)`` of ``grid``'s first pixel in a larger lattice whose tiles
            start at multiples of ``size`` (so tiles of neighbouring scenes line up); the
            first row/column of tiles is then partial.

    Raises:
        ValueError: If ``size`` is not positive.
    """
    if int(size) < 1:
        raise ValueError(f"The tile size must be a positive number of pixels, got {size}.")
    size = int(size)
    r_first = -(origin[0] % size)
    c_first = -(origin[1] % size)
    out = []
    for r in range(r_first, grid.height, size):
        for c in range(c_first, grid.width, size):
            r0, c0 = max(r, 0), max(c, 0)
            out.append(Window(c0, r0, min(c + size, grid.width) - c0, min(r + size, grid.height) - r0))
    return [w for w in out if w.height > 0 and w.width > 0]


def lattice_origin(grid: Grid) -> tuple[int, int]:
    """``(row, col)`` of the grid's first pixel in the CRS-wide lattice of its pixel size.

    Scenes of one CRS and resolution thus share a block lattice (blocks that straddle two
    scenes get the same id); a grid without georeferencing starts at ``(0, 0)``.
    """
    if not grid.georeferenced:
        return 0, 0
    t = grid.transform
    return round(t.f / t.e), round(t.c / t.a)


__all__ = [
    "SNAP_TOLERANCE",
    "Grid",
    "check_alignment",
    "check_same_crs",
    "common_grid",
    "crs_name",
    "index_map",
    "lattice_offset",
    "lattice_origin",
    "read_aligned",
    "tiles",
]
