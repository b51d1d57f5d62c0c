"""A scene: per-modality time series and optional labels on one grid, read window by window.

A :class:`Scene` is what every raster reader (``data=datacube``, ``data=geotiff``) builds:

* ``grid``: the target :class:`~mtan_s1s2.data.scene.grid.Grid` (CRS, transform, shape) every
  raster is read on (:func:`~mtan_s1s2.data.scene.grid.common_grid`: by default the finest
  raster's lattice over the area all rasters cover);
* ``series``: per modality a :class:`ModalitySeries`: band names, acquisition dates (with
  time of day), the :class:`~mtan_s1s2.data.radiometry.Radiometry` of its stored values, and
  windowed reads of the stored values and of its quality mask; nothing is read until a
  window is asked for;
* ``label`` / ``parcels``: optional single-band :class:`RasterLayer` (source label codes,
  parcel ids).

:meth:`Scene.read` returns a window in the batch contract of :mod:`mtan_s1s2.data.batch`
(physical units, ``doy`` days since the scene's reference date, ``mask`` True = valid:
finite, not a no-data fill, not flagged by the quality band).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from rasterio.windows import Window

from mtan_s1s2.data.dates import days_since
from mtan_s1s2.data.radiometry import MaskReport, Radiometry
from mtan_s1s2.data.scene.grid import Grid, common_grid, tiles

log = logging.getLogger(__name__)


class ModalitySeries(ABC):
    """The time series of one modality in a scene, read lazily by window.

    Attributes:
        modality: ``s2``, ``s1_asc``, ...
        bands: Band names, in channel order.
        dates: ``(T,) datetime64[s]`` acquisition times, strictly increasing.
        radiometry: How stored values become physical units (and which are no data).
        sources: Files read, for messages.
        declared: What the files themselves declare of their encoding: ``{scale, offset,
            nodata}`` (a datacube's CF attributes, a GeoTIFF's nodata tag), keys only when
            present.
    """

    modality: str
    bands: tuple[str, ...]
    dates: np.ndarray
    radiometry: Radiometry
    sources: tuple[str, ...]
    declared: Mapping[str, Any] = MappingProxyType({})

    @abstractmethod
    def grids(self) -> list[Grid]:
        """The grids of every raster of this series (bands, quality band)."""

    @abstractmethod
    def read_stored(self, target: Grid, window: Window) -> np.ndarray:
        """``(T, C, h, w)`` stored values of ``window`` of ``target`` (the source dtype)."""

    def read_invalid(self, target: Grid, window: Window) -> np.ndarray | None:
        """``(T, h, w)`` True where the quality band or mask flags an observation; None without one.

        Raises:
            ValueError: On quality values that are neither valid nor invalid.
        """
        return None

    def read_masked(self, target: Grid, window: Window) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """Physical values of ``window`` with the radiometry's no-data and the quality band applied.

        Returns:
            ``x`` ``(T, C, h, w)`` float32 in physical units, ``valid`` ``(T, h, w)`` bool, and the
            count of invalid observations per reason (``quality`` for the quality band or mask).

        Raises:
            ValueError: On quality values that are neither valid nor invalid.
        """
        x, valid, reasons = self.radiometry.apply(self.read_stored(target, window), self.dates)
        invalid = self.read_invalid(target, window)
        if invalid is not None:
            reasons["quality"] = int((valid & invalid).sum())
            valid &= ~invalid
        return x, valid, reasons

    @property
    def has_quality(self) -> bool:
        """Whether a quality band or mask is read."""
        return False

    @property
    def absent(self) -> bool:
        """Whether the scene lacks this modality's files (:class:`AbsentSeries`)."""
        return False

    def describe(self) -> str:
        """One line: modality, bands, dates, files."""
        d = self.dates
        span = f"{str(d[0])[:16]} .. {str(d[-1])[:16]}" if len(d) else "no dates"
        return f"{self.modality}: {len(self.bands)} bands {list(self.bands)}, {len(d)} dates ({span})"


class AbsentSeries(ModalitySeries):
    """An optional modality that a scene has no files of (``data.sources.<modality>.optional``).

    It has its bands and no acquisition date: every window reads ``(0, C, h, w)`` values, so
    the scene's pixels hold no observation of the modality, as a pixel under cloud on every
    date. The models take such a series as they take an all-masked one (the multi-time
    attention gives 0 and ``available`` False; the date-grid composites mark every window
    empty).

    Args:
        modality: ``s2_10m``, ...
        bands: Band names, in channel order (the same as the scenes that have the files).
        missing: The file patterns that matched nothing, for messages.
    """

    def __init__(self, modality: str, bands: tuple[str, ...], missing: tuple[str, ...]) -> None:
        self.modality = modality
        self.bands = tuple(bands)
        self.dates = np.zeros(0, dtype="datetime64[s]")
        self.radiometry = Radiometry()
        self.sources = tuple(f"no file matches {p!r}" for p in missing)

    @property
    def absent(self) -> bool:
        """Always True."""
        return True

    def grids(self) -> list[Grid]:
        """None: the series has no raster."""
        return []

    def read_stored(self, target: Grid, window: Window) -> np.ndarray:
        """``(0, C, h, w)`` float32: no acquisition."""
        return np.zeros((0, len(self.bands), int(window.height), int(window.width)), dtype=np.float32)

    def describe(self) -> str:
        """One line: the modality is absent from this scene, and why."""
        why = "; ".join(self.sources)
        return f"{self.modality}: absent from this scene ({why}), {len(self.bands)} bands {list(self.bands)}"


class RasterLayer(ABC):
    """A single-band raster (label codes, parcel ids) read on a scene's grid.

    Attributes:
        grid: Its own grid.
        name: File (and variable), for messages.
        fill: Its no-data value, if any (read as "no label").
    """

    grid: Grid
    name: str
    fill: float | None = None

    @abstractmethod
    def read_slab(self, rows: slice, cols: slice) -> np.ndarray:
        """``(rows, cols)`` values of a rectangle of the raster."""

    def read(self, target: Grid, window: Window) -> np.ndarray:
        """``(h, w)`` values of ``window`` of ``target`` (nearest neighbour)."""
        from mtan_s1s2.data.scene.grid import read_aligned

        return read_aligned(self.read_slab, self.grid, target, window)


@dataclass
class Scene:
    """One scene (a tile, a patch, a site): see the module docstring.

    Args:
        name: Scene name (folder name), used for output folders and the split record.
        series: Modality -> :class:`ModalitySeries`, in the order of ``data.modalities``.
        reference_date: Day 0 of ``doy`` (``datetime64``).
        label: Source label codes, or None.
        parcels: Parcel ids (for splits by parcel), or None.
        resolution: Pixel size of the target grid (None: the finest raster's).
        snap: Read rasters off the target lattice by more than a quarter pixel, snapped
            (``data.grid.snap``; :func:`~mtan_s1s2.data.scene.grid.check_alignment`).
        label_shift: ``(rows, cols)``, pixels of the target grid: the label and parcel
            rasters are moved that many rows south (down) and columns east (right) against
            the imagery (``data.grid.label_shift``), so imagery pixel ``(y, x)`` takes the label
            of ``(y - rows, x - cols)``. Pixels whose label would come from outside the grid
            have none. For label rasters rasterised off the imagery by whole pixels, which
            :mod:`mtan_s1s2.data.registration` measures.
        root: Folder of the scene's files.
        attrs: Scene attributes (a datacube's global attributes).

    Attributes:
        grid: The target grid.

    Raises:
        ValueError: If the rasters do not share a CRS, do not overlap (naming both grids),
            or a series has no date, or a raster is off the grid by more than a quarter
            pixel without ``snap``.
    """

    name: str
    series: dict[str, ModalitySeries]
    reference_date: np.datetime64
    label: RasterLayer | None = None
    parcels: RasterLayer | None = None
    resolution: float | None = None
    snap: bool = False
    label_shift: tuple[int, int] = (0, 0)
    root: Path | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    grid: Grid = field(init=False)
    report: MaskReport = field(init=False, default_factory=MaskReport)
    _warned: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        grids: list[Grid] = []
        for layer in (self.label, self.parcels):
            if layer is not None:
                grids.append(layer.grid)
        for s in self.series.values():
            if s.absent:
                continue
            if len(s.dates) == 0:
                raise ValueError(f"Scene {self.name}: {s.modality} has no acquisition date ({', '.join(s.sources)}).")
            grids += s.grids()
        self.grid = common_grid(grids, self.resolution, name=f"scene {self.name}", snap=self.snap)
        self.doy = {m: days_since(s.dates, self.reference_date) for m, s in self.series.items()}

    @property
    def modalities(self) -> list[str]:
        """The modalities of the scene, in order."""
        return list(self.series)

    def describe(self) -> str:
        """Several lines: the grid, each series, the label."""
        lines = [f"scene {self.name} ({self.root}): {self.grid.describe()}"]
        lines += [f"  {s.describe()}" for s in self.series.values()]
        if self.label is not None:
            lines.append(f"  label: {self.label.name}")
        return "\n".join(lines)

    def read(self, window: Window | None = None, count: bool = True) -> dict[str, dict[str, np.ndarray]]:
        """One window of every modality, in physical units.

        Args:
            window: Window of :attr:`grid` (None: the whole scene).
            count: Add the invalid observations to :attr:`report`.

        Returns:
            Per modality ``{"x": (T, C, h, w) float32, "doy": (T,) float32, "mask": (T, h,
            w) bool}``.

        Raises:
            ValueError: On quality values that are neither valid nor invalid.
        """
        window = window or self.grid.full_window()
        out: dict[str, dict[str, np.ndarray]] = {}
        for m, s in self.series.items():
            x, valid, reasons = s.read_masked(self.grid, window)
            if count:
                self.report.add(m, valid.size, reasons)
            if not self._warned:
                warning = s.radiometry.plausibility(x, valid, m)
                if warning:
                    log.warning("%s (scene %s, %s)", warning, self.name, ", ".join(s.sources))
            out[m] = {"x": x, "doy": self.doy[m].copy(), "mask": valid}
        self._warned = True
        return out

    def read_label(self, window: Window | None = None) -> np.ndarray | None:
        """``(h, w)`` source label codes of a window, or None without a label raster.

        With a :attr:`label_shift`, the pixels whose label would come from outside the grid
        hold the raster's no-data value, or NaN (codes as ``float64``) where it has none.
        """
        if self.label is None:
            return None
        return self._read_shifted(self.label, window or self.grid.full_window(), parcels=False)

    def read_parcels(self, window: Window | None = None) -> np.ndarray | None:
        """``(h, w)`` parcel ids of a window, or None without a parcel raster.

        With a :attr:`label_shift`, the pixels whose parcel would come from outside the grid
        hold the raster's no-data value, NaN (float ids) or 0 (no parcel).
        """
        if self.parcels is None:
            return None
        return self._read_shifted(self.parcels, window or self.grid.full_window(), parcels=True)

    def _read_shifted(self, layer: RasterLayer, window: Window, parcels: bool) -> np.ndarray:
        """``layer`` on ``window``, moved by :attr:`label_shift` (see :meth:`read_label`)."""
        dy, dx = self.label_shift
        if dy == 0 and dx == 0:
            return layer.read(self.grid, window)
        r0, c0 = int(window.row_off) - dy, int(window.col_off) - dx
        h, w = int(window.height), int(window.width)
        top, bottom = max(r0, 0), min(r0 + h, self.grid.height)
        left, right = max(c0, 0), min(c0 + w, self.grid.width)
        inside = bottom > top and right > left
        probe = Window(left, top, right - left, bottom - top) if inside else Window(0, 0, 1, 1)
        values = layer.read(self.grid, probe)
        fill = layer.fill
        if (
            fill is not None
            and values.dtype.kind in "iu"
            and float(fill).is_integer()
            and np.can_cast(np.min_scalar_type(int(fill)), values.dtype)
        ):
            out = np.full((h, w), int(fill), dtype=values.dtype)
        elif fill is not None:
            out = np.full((h, w), fill, dtype=np.result_type(values.dtype, np.float64))
        elif values.dtype.kind == "f" or not parcels:
            out = np.full((h, w), np.nan, dtype=np.result_type(values.dtype, np.float64))
        else:
            out = np.zeros((h, w), dtype=values.dtype)  # parcel id 0: no parcel
        if inside:
            out[top - r0 : bottom - r0, left - c0 : right - c0] = values
        return out

    def windows(self, size: int) -> Iterator[Window]:
        """Tiles of ``size`` px covering the scene, row-major."""
        yield from tiles(self.grid, size)

    def check_quality(self, tile: int = 512) -> None:
        """Read every quality band / mask once, so unexpected values stop the run before any work.

        Raises:
            ValueError: On values that are neither valid nor invalid (counted, with the fix).
        """
        for s in self.series.values():
            if s.has_quality:
                for w in tiles(self.grid, tile):
                    s.read_invalid(self.grid, w)

    def check_has_valid(self, tile: int = 256) -> None:
        """Stop at the first valid observation; raise if the scene has none.

        Raises:
            ValueError: If no modality has a valid observation anywhere (naming the files
                and why observations were invalid).
        """
        report = MaskReport()
        for w in tiles(self.grid, tile):
            for m, s in self.series.items():
                _, valid, reasons = s.read_masked(self.grid, w)
                if valid.any():
                    return
                report.add(m, valid.size, reasons)
        files = "; ".join(", ".join(s.sources) for s in self.series.values())
        raise ValueError(
            f"Scene {self.name} has no valid observation in any modality ({' | '.join(report.lines())}); read from "
            f"{files}. Check data.radiometry (nodata values) and the quality/mask settings, or leave the scene out."
        )


def modality_bands(scenes: list[Scene]) -> dict[str, tuple[str, ...]]:
    """Band names per modality, checked to agree between scenes.

    Raises:
        ValueError: If two scenes have different bands or modalities.
    """
    first = scenes[0]
    bands = {m: s.bands for m, s in first.series.items()}
    for sc in scenes[1:]:
        other = {m: s.bands for m, s in sc.series.items()}
        if other != bands:
            raise ValueError(
                f"Scenes {first.name} and {sc.name} have different modalities or bands ({bands} vs {other}); every "
                "scene of a run needs the same."
            )
    return bands


__all__ = ["AbsentSeries", "ModalitySeries", "RasterLayer", "Scene", "modality_bands"]
