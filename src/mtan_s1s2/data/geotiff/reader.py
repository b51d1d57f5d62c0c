"""Read time series from GeoTIFFs with rasterio: date-major stacks or one file per date.

Two layouts per modality (``data.sources.<modality>``):

* **date-major stack** (``stack`` + ``dates``): one multi-band GeoTIFF holding all bands of
  date 1, then all bands of date 2, ... (the layout Orfeo ToolBox's
  ``ConcatenateImages`` and iota2 write): band ``t * C + c + 1`` is band ``c`` of date
  ``t``. The dates come from a text file, one per line (:func:`~mtan_s1s2.data.dates.read_dates_file`).
  Its band count must be ``T x C``.
* **one file per date** (``files``): a glob of GeoTIFFs with ``C`` bands each, the date in
  the file name (``S2_20180924.tif``, ``..._20180924T105416_...``; ``date_pattern``).

Optional masks: a stack of ``T`` bands (``mask`` next to ``stack``) or one single-band file
per date (``mask`` glob next to ``files``, matched by date), with their valid / invalid
values (``mask_values``, default 0 valid, 1 invalid; any other value stops the run).

A file's nodata tag (``src.nodatavals``) is no data, as a datacube's ``_FillValue`` is
(:func:`~mtan_s1s2.data.geotiff.scenes.declared_nodata`).

Every raster is read by windows (``rasterio.windows``), on the scene's grid
(:mod:`mtan_s1s2.data.scene.grid`). A GeoTIFF without georeferencing (no CRS, identity transform)
works, with a warning: it is aligned with the others by row and column, and the maps
predicted from it have no CRS.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from rasterio.errors import NotGeoreferencedWarning, RasterioIOError
from rasterio.windows import Window

from mtan_s1s2.data.dates import check_increasing, date_from_name
from mtan_s1s2.data.quality import QualityRule
from mtan_s1s2.data.radiometry import Radiometry
from mtan_s1s2.data.scene.grid import Grid, read_aligned
from mtan_s1s2.data.scene.scene import ModalitySeries, RasterLayer

log = logging.getLogger(__name__)


class _Handles:
    """Open rasterio datasets of this process (reopened after a fork: DataLoader workers)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.open: dict[Path, Any] = {}

    def get(self, path: Path) -> Any:
        if self.pid != os.getpid():
            self.pid, self.open = os.getpid(), {}
        if path not in self.open:
            self.open[path] = open_raster(path)
        return self.open[path]

    def __getstate__(self) -> dict[str, Any]:
        return {"pid": -1, "open": {}}


def open_raster(path: Path) -> Any:
    """``rasterio.open(path)`` without rasterio's not-georeferenced warning (ours is clearer).

    Raises:
        ValueError: If the file is missing or not a raster (naming it).
    """
    if not path.is_file():
        raise ValueError(f"GeoTIFF not found: {path.resolve()}.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            return rasterio.open(path)
    except RasterioIOError as err:
        raise ValueError(f"Cannot read {path.resolve()} as a raster ({err}).") from None


def raster_grid(src: Any, path: Path) -> Grid:
    """The :class:`~mtan_s1s2.data.scene.grid.Grid` of an open rasterio dataset."""
    return Grid(src.transform, int(src.height), int(src.width), src.crs, name=str(path.resolve()))


def _same_grid(a: Grid, b: Grid, what: str) -> None:
    if a != b:
        raise ValueError(
            f"{what}: every file of a modality must be on one grid, but {a.describe()} and {b.describe()} differ. "
            "Resample them to one grid first (e.g. gdalwarp -tr <res> <res> -te <bounds>)."
        )


def _window_of(rows: slice, cols: slice) -> Window:
    return Window(cols.start, rows.start, cols.stop - cols.start, rows.stop - rows.start)


class GeoTiffStackSeries(ModalitySeries):
    """A modality stored as one date-major stack (band ``t * C + c + 1``) and its dates.

    Args:
        modality: Modality name.
        bands: Band names (``C`` of them).
        path: The stack.
        dates: ``(T,) datetime64[s]`` acquisition dates.
        radiometry: How stored values become physical units.
        mask: Optional stack of ``T`` mask bands.
        rule: Valid/invalid values of the mask.
        dates_source: Where the dates were read, for messages.

    Raises:
        ValueError: If the band count is not ``T x C`` (naming the file, the dates file
            and both counts), or the mask has not ``T`` bands or another grid.
    """

    def __init__(
        self,
        modality: str,
        bands: Sequence[str],
        path: Path,
        dates: np.ndarray,
        radiometry: Radiometry,
        mask: Path | None = None,
        rule: QualityRule | None = None,
        dates_source: str = "",
    ) -> None:
        self.modality, self.bands, self.path = modality, tuple(bands), path
        self.dates, self.radiometry, self.mask, self.rule = dates, radiometry, mask, rule
        self.handles = _Handles()
        src = self.handles.get(path)
        self.grid = raster_grid(src, path)
        T, C = len(dates), len(self.bands)
        if src.count != T * C:
            raise ValueError(
                f"The {modality} stack {path.resolve()} has {src.count} bands, but {dates_source or 'its dates'} "
                f"lists {T} dates and data.sources.{modality}.bands has {C} bands {list(self.bands)}: a date-major "
                f"stack needs {T} x {C} = {T * C} bands. Fix the dates file or the band list."
            )
        check_increasing(dates, f"{modality} dates ({dates_source})")
        self.mask_grid: Grid | None = None
        if mask is not None:
            msrc = self.handles.get(mask)
            if msrc.count != T:
                raise ValueError(
                    f"The {modality} mask stack {mask.resolve()} has {msrc.count} bands but there are {T} dates; a "
                    "mask stack needs one band per date, in date order."
                )
            self.mask_grid = raster_grid(msrc, mask)
            _same_grid(self.grid, self.mask_grid, f"{modality} mask")
        self.sources = tuple(str(p.resolve()) for p in (path, mask) if p is not None)

    def grids(self) -> list[Grid]:
        """The stack's grid (and the mask's)."""
        return [self.grid] + ([self.mask_grid] if self.mask_grid is not None else [])

    def read_stored(self, target: Grid, window: Window) -> np.ndarray:
        """``(T, C, h, w)`` stored values."""
        src = self.handles.get(self.path)
        flat = read_aligned(lambda r, c: src.read(window=_window_of(r, c)), self.grid, target, window)
        T, C = len(self.dates), len(self.bands)
        return flat.reshape(T, C, *flat.shape[1:])

    @property
    def has_quality(self) -> bool:
        """Whether a mask stack is read."""
        return self.mask is not None

    def read_invalid(self, target: Grid, window: Window) -> np.ndarray | None:
        """``(T, h, w)`` observations the mask flags (None without a mask).

        Raises:
            ValueError: On mask values that are neither valid nor invalid.
        """
        if self.mask is None or self.rule is None or self.mask_grid is None:
            return None
        src = self.handles.get(self.mask)
        codes = read_aligned(lambda r, c: src.read(window=_window_of(r, c)), self.mask_grid, target, window)
        return self.rule.invalid_mask(codes, str(self.mask.resolve()))


class GeoTiffFilesSeries(ModalitySeries):
    """A modality stored as one ``C``-band GeoTIFF per date, the date in each file name.

    Args:
        modality: Modality name.
        bands: Band names (``C`` of them).
        paths: One file per date.
        radiometry: How stored values become physical units.
        date_pattern: Regex of the date in the names (default
            :data:`~mtan_s1s2.data.dates.DATE_IN_NAME`).
        masks: Optional single-band mask files, matched to the dates by their names.
        rule: Valid/invalid values of the masks.

    Raises:
        ValueError: On a name without a date, two files of one date, a file whose band
            count is not ``C``, files on different grids (naming both), or a date without
            its mask.
    """

    def __init__(
        self,
        modality: str,
        bands: Sequence[str],
        paths: Sequence[Path],
        radiometry: Radiometry,
        date_pattern: str | None = None,
        masks: Sequence[Path] | None = None,
        rule: QualityRule | None = None,
    ) -> None:
        self.modality, self.bands, self.radiometry, self.rule = modality, tuple(bands), radiometry, rule
        dated = sorted(((date_from_name(p.name, date_pattern), p) for p in paths), key=lambda dp: dp[0])
        self.dates = np.asarray([d for d, _ in dated], "datetime64[s]")
        self.paths = [p for _, p in dated]
        check_increasing(self.dates, f"{modality} files ({', '.join(p.name for p in self.paths[:4])} ...)")
        self.handles = _Handles()
        self.grid: Grid | None = None
        for p in self.paths:
            src = self.handles.get(p)
            if src.count != len(self.bands):
                raise ValueError(
                    f"{p.resolve()} has {src.count} bands but data.sources.{modality}.bands lists {len(self.bands)} "
                    f"{list(self.bands)}; each per-date file holds the bands of one date."
                )
            g = raster_grid(src, p)
            if self.grid is None:
                self.grid = g
            else:
                _same_grid(self.grid, g, f"{modality} files")
        self.masks: list[Path] | None = None
        if masks is not None:
            by_date: dict[np.datetime64, Path] = {}
            for m in masks:
                d = date_from_name(m.name, date_pattern)
                if d in by_date:
                    raise ValueError(f"Two {modality} masks have the date {d}: {by_date[d]} and {m}.")
                by_date[d] = m
            missing = [str(d) for d in self.dates if d not in by_date]
            if missing:
                raise ValueError(
                    f"{modality}: no mask file for date(s) {missing[:3]} (masks found: "
                    f"{[m.name for m in masks][:4]}); give one mask per date, its date in the name."
                )
            self.masks = [by_date[d] for d in self.dates]
            assert self.grid is not None
            for m in self.masks:
                _same_grid(self.grid, raster_grid(self.handles.get(m), m), f"{modality} masks")
        self.sources = tuple(str(p.resolve()) for p in self.paths[:1]) + (
            (f"... {len(self.paths)} files in {self.paths[0].parent.resolve()}",) if len(self.paths) > 1 else ()
        )

    def grids(self) -> list[Grid]:
        """The files' grid."""
        assert self.grid is not None
        return [self.grid]

    def read_stored(self, target: Grid, window: Window) -> np.ndarray:
        """``(T, C, h, w)`` stored values."""
        assert self.grid is not None
        out = []
        for p in self.paths:
            src = self.handles.get(p)
            out.append(read_aligned(lambda r, c, src=src: src.read(window=_window_of(r, c)), self.grid, target, window))
        return np.stack(out)

    @property
    def has_quality(self) -> bool:
        """Whether per-date masks are read."""
        return self.masks is not None

    def read_invalid(self, target: Grid, window: Window) -> np.ndarray | None:
        """``(T, h, w)`` observations the masks flag (None without masks).

        Raises:
            ValueError: On mask values that are neither valid nor invalid.
        """
        if self.masks is None or self.rule is None:
            return None
        assert self.grid is not None
        out = []
        for m in self.masks:
            src = self.handles.get(m)
            codes = read_aligned(lambda r, c, src=src: src.read(1, window=_window_of(r, c)), self.grid, target, window)
            out.append(self.rule.invalid_mask(codes, str(m.resolve())))
        return np.stack(out)


class GeoTiffLayer(RasterLayer):
    """One band of a GeoTIFF (label codes, parcel ids) read on a scene's grid.

    Args:
        path: The raster.
        band: 1-based band index.

    Raises:
        ValueError: If the file is missing or has no such band.
    """

    def __init__(self, path: Path, band: int = 1) -> None:
        self.path, self.band = path, int(band)
        self.handles = _Handles()
        src = self.handles.get(path)
        if not 1 <= self.band <= src.count:
            raise ValueError(f"{path.resolve()} has {src.count} band(s); band {band} does not exist.")
        self.grid = raster_grid(src, path)
        self.name = f"band {self.band} of {path.resolve()}"
        self.fill = None if src.nodata is None else float(src.nodata)

    def read_slab(self, rows: slice, cols: slice) -> np.ndarray:
        """``(rows, cols)`` values."""
        return np.asarray(self.handles.get(self.path).read(self.band, window=_window_of(rows, cols)))


__all__ = ["GeoTiffFilesSeries", "GeoTiffLayer", "GeoTiffStackSeries", "open_raster", "raster_grid"]
