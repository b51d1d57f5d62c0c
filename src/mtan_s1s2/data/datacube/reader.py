"""Read a scene from xarray datacubes (NetCDF, Zarr): one or more files per modality.

The layout openEO, odc-stac, stackstac and the WorldCereal extractions write: each file has a
time dimension (a ``datetime64`` coordinate, e.g. ``t``, ``time``, ``timestamp``), spatial
dimensions ``y``/``x`` with pixel-centre coordinates, and one variable per band (``B02``,
``VV``, ``SCL``). Per modality (``data.sources.<modality>``):

* ``files``: glob patterns relative to the scene folder (or absolute); every variable of
  ``bands`` is looked up in them. Bands may come from files on different grids (S2 10 m
  and 20 m files): every band is read on the scene's grid by its coordinates
  (:mod:`mtan_s1s2.data.scene.grid`). Several files holding the same band (one per year) are
  concatenated in time.
* ``quality``: a quality variable (``SCL``) and its valid/invalid values
  (:class:`~mtan_s1s2.data.quality.QualityRule`).

Values are read raw (``mask_and_scale=False``); the CF attributes ``scale_factor``,
``add_offset`` and ``_FillValue`` / ``missing_value`` become the modality's
:class:`~mtan_s1s2.data.radiometry.Radiometry` (``scale``, ``offset``, ``nodata``) unless
``data.radiometry.<modality>`` sets them. Arrays stay lazy: a window reads only its
rectangle of each file.

The CRS is read from the CF grid mapping (``crs_wkt`` / ``spatial_ref``), else from a
global ``crs`` or ``epsg`` attribute.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rasterio.crs import CRS
from rasterio.errors import CRSError
from rasterio.windows import Window

from mtan_s1s2.data.dates import check_increasing
from mtan_s1s2.data.quality import QualityRule
from mtan_s1s2.data.radiometry import Radiometry
from mtan_s1s2.data.scene.grid import Grid, read_aligned
from mtan_s1s2.data.scene.scene import ModalitySeries, RasterLayer

log = logging.getLogger(__name__)

Y_NAMES: tuple[str, ...] = ("y", "lat", "latitude", "northing", "rows")
X_NAMES: tuple[str, ...] = ("x", "lon", "longitude", "easting", "cols")


def open_cube(path: Path, engine: str | None = None) -> Any:
    """Open a NetCDF file or Zarr store lazily, values raw (``mask_and_scale=False``).

    Raises:
        ValueError: If it cannot be opened (naming the file and the engines to install).
    """
    import xarray as xr

    try:
        if path.suffix == ".zarr" or ((path.is_dir() and (path / ".zgroup").exists()) or (path / "zarr.json").exists()):
            return xr.open_zarr(path, mask_and_scale=False)
        return xr.open_dataset(path, engine=engine, mask_and_scale=False)
    except (ImportError, ValueError, OSError) as err:
        raise ValueError(
            f"Cannot open the datacube {path.resolve()} ({type(err).__name__}: {err}). NetCDF needs netCDF4 or "
            "h5netcdf (pip install netCDF4), Zarr needs zarr; set data.engine to choose one."
        ) from None


def crs_of(ds: Any, var: str) -> CRS | None:
    """The CRS of variable ``var``: CF grid mapping, else a ``crs``/``epsg`` attribute, else None."""
    names = []
    gm = ds[var].attrs.get("grid_mapping") or ds.attrs.get("grid_mapping")
    if gm:
        names.append(str(gm))
    names += ["spatial_ref", "crs"]
    for name in names:
        if name in ds.variables:
            attrs = ds[name].attrs
            for key in ("crs_wkt", "spatial_ref"):
                if attrs.get(key):
                    try:
                        return CRS.from_wkt(str(attrs[key]))
                    except CRSError:
                        pass
    for key in ("crs", "epsg", "EPSG"):
        value = ds[var].attrs.get(key, ds.attrs.get(key))
        if value is None:
            continue
        try:
            text = str(value).strip()
            if text.isdigit():
                return CRS.from_epsg(int(text))
            if text.startswith("+init="):
                text = text[len("+init=") :].upper()
            return CRS.from_user_input(text)
        except CRSError:
            continue
    return None


@dataclass
class Dims:
    """Dimension names of a datacube variable: time (None for a static layer), y, x."""

    time: str | None
    y: str
    x: str


def find_dims(da: Any, where: str, overrides: Mapping[str, str | None] | None = None, static: bool = False) -> Dims:
    """Time, y and x dimensions of ``da`` (``data.dims`` overrides the detection).

    Raises:
        ValueError: If a dimension cannot be found (naming the variable's dimensions and
            the config key).
    """
    over = {k: v for k, v in (overrides or {}).items() if v}
    dims = [str(d) for d in da.dims]

    def pick(key: str, names: Sequence[str]) -> str:
        if key in over:
            if over[key] not in dims:
                raise ValueError(f"{where}: data.dims.{key}={over[key]!r} is not a dimension of it ({dims}).")
            return str(over[key])
        for d in dims:
            if d.lower() in names:
                return d
        raise ValueError(f"{where}: no {key} dimension among {dims}; name it with data.dims.{key}=<name>.")

    y, x = pick("y", Y_NAMES), pick("x", X_NAMES)
    rest = [d for d in dims if d not in (y, x)]
    if static:
        for d in rest:
            if da.sizes[d] != 1:
                raise ValueError(f"{where}: a label/parcel layer must be 2-D (y, x); it has dimensions {dims}.")
        return Dims(rest[0] if rest else None, y, x)
    if "time" in over:
        t = pick("time", ())
    else:
        times = [d for d in rest if d in da.coords and np.issubdtype(da.coords[d].dtype, np.datetime64)]
        if len(times) != 1 or len(rest) != 1:
            raise ValueError(
                f"{where}: expected dimensions (time, y, x) with a datetime time coordinate, got {dims}; name the "
                "time dimension with data.dims.time=<name>."
            )
        t = times[0]
    return Dims(t, y, x)


@dataclass
class CubeVariable:
    """One variable of one datacube file: where it is, its dims, grid and dates.

    ``grid`` is always north-up: a variable whose y coordinate ascends (south-up, row 0 the
    southernmost) has ``flip_y`` set, and :meth:`read_slab` reads its rows in reverse, so
    row ``r`` of ``grid`` is row ``H - 1 - r`` of the file.
    """

    path: Path
    ds: Any
    var: str
    dims: Dims
    grid: Grid
    times: np.ndarray | None
    flip_y: bool = False

    @property
    def where(self) -> str:
        """``VAR of /abs/file.nc``."""
        return f"{self.var} of {self.path.resolve()}"

    def read_slab(self, rows: slice, cols: slice) -> np.ndarray:
        """``(T, rows, cols)`` (or ``(rows, cols)`` for a static layer) raw values; rows of the north-up ``grid``."""
        if self.flip_y:
            height = self.grid.height
            rows = slice(height - rows.stop, height - rows.start)
        da = self.ds[self.var].isel({self.dims.y: rows, self.dims.x: cols})
        if self.dims.time is None:
            out = np.asarray(da.transpose(self.dims.y, self.dims.x).values)
        elif self.times is None:  # a static layer with a singleton extra dimension
            out = np.asarray(da.transpose(self.dims.time, self.dims.y, self.dims.x).values[0])
        else:
            out = np.asarray(da.transpose(self.dims.time, self.dims.y, self.dims.x).values)
        return np.ascontiguousarray(out[..., ::-1, :]) if self.flip_y else out

    def cf(self) -> dict[str, Any]:
        """The CF encoding attributes: ``scale_factor``, ``add_offset``, fill value."""
        attrs = self.ds[self.var].attrs
        fill = attrs.get("_FillValue", attrs.get("missing_value"))
        return {
            "scale": None if attrs.get("scale_factor") is None else float(attrs["scale_factor"]),
            "offset": None if attrs.get("add_offset") is None else float(attrs["add_offset"]),
            "fill": None if fill is None else float(np.asarray(fill).ravel()[0]),
        }


def cube_variable(
    path: Path, ds: Any, var: str, dims_cfg: Mapping[str, str | None] | None, static: bool = False
) -> CubeVariable:
    """Describe variable ``var`` of an opened datacube.

    Raises:
        ValueError: On missing dimensions or irregular coordinates.
    """
    where = f"{var} of {path.resolve()}"
    da = ds[var]
    dims = find_dims(da, where, dims_cfg, static=static)
    crs = crs_of(ds, var)
    y = np.asarray(ds[dims.y].values, np.float64)
    flip_y = y.size > 1 and bool(y[1] > y[0])
    if flip_y:
        log.info("%s: its y coordinate ascends (south-up); its rows are read north-up.", where)
    grid = Grid.from_coords(ds[dims.x].values, y[::-1] if flip_y else y, crs, name=where)
    if crs is None:
        log.warning("%s: no CRS found (no CF grid mapping, crs or epsg attribute); aligned by coordinates only.", where)
    times = None
    if not static and dims.time is not None:
        times = np.asarray(ds[dims.time].values).astype("datetime64[s]")
    return CubeVariable(path, ds, var, dims, grid, times, flip_y)


class DatacubeSeries(ModalitySeries):
    """One modality of a scene read from datacube variables.

    Args:
        modality: Modality name.
        bands: Band (variable) names, in channel order.
        pieces: Band -> its variables in the files (several: concatenated in time).
        quality: The quality variable's pieces, or None.
        rule: Valid/invalid values of the quality variable.
        radiometry: How stored values become physical units.

    Raises:
        ValueError: If bands have different dates (naming both), or dates repeat.
    """

    def __init__(
        self,
        modality: str,
        bands: Sequence[str],
        pieces: Mapping[str, Sequence[CubeVariable]],
        quality: Sequence[CubeVariable] | None,
        rule: QualityRule | None,
        radiometry: Radiometry,
    ) -> None:
        self.modality = modality
        self.bands = tuple(bands)
        self.pieces = {b: sorted(pieces[b], key=lambda p: p.times[0] if p.times is not None else 0) for b in bands}
        self.quality = None if quality is None else sorted(quality, key=lambda p: p.times[0])  # type: ignore[index]
        self.rule = rule
        self.radiometry = radiometry
        self.sources = tuple(sorted({str(p.path.resolve()) for ps in self.pieces.values() for p in ps}))
        first = self.bands[0]
        self.dates = self._dates(first, self.pieces[first])
        for b in self.bands[1:]:
            self._same_dates(b, self._dates(b, self.pieces[b]), first)
        if self.quality is not None:
            self._same_dates(self.quality[0].var, self._dates(self.quality[0].var, self.quality), first)

    def _dates(self, band: str, pieces: Sequence[CubeVariable]) -> np.ndarray:
        dates: np.ndarray = np.concatenate([p.times for p in pieces if p.times is not None])
        check_increasing(dates, f"{self.modality} band {band} ({', '.join(p.where for p in pieces)})")
        return dates

    def _same_dates(self, band: str, dates: np.ndarray, first: str) -> None:
        if dates.shape != self.dates.shape or not np.array_equal(dates, self.dates):
            only_a = np.setdiff1d(self.dates, dates)[:3]
            only_b = np.setdiff1d(dates, self.dates)[:3]
            raise ValueError(
                f"{self.modality}: band {band} has {len(dates)} dates but {first} has {len(self.dates)} (only in "
                f"{first}: {[str(d) for d in only_a]}; only in {band}: {[str(d) for d in only_b]}). Every band and "
                "the quality band of a modality need the same acquisitions; select them in the files."
            )

    def grids(self) -> list[Grid]:
        """Grids of every band and quality piece."""
        out = [p.grid for ps in self.pieces.values() for p in ps]
        if self.quality is not None:
            out += [p.grid for p in self.quality]
        return out

    @staticmethod
    def _read(pieces: Sequence[CubeVariable], target: Grid, window: Window) -> np.ndarray:
        parts = [read_aligned(p.read_slab, p.grid, target, window) for p in pieces]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def read_stored(self, target: Grid, window: Window) -> np.ndarray:
        """``(T, C, h, w)`` raw values (the bands' common dtype)."""
        arrays = [self._read(self.pieces[b], target, window) for b in self.bands]
        dtype = np.result_type(*arrays)
        return np.stack([a.astype(dtype, copy=False) for a in arrays], axis=1)

    @property
    def has_quality(self) -> bool:
        """Whether a quality variable is read."""
        return self.quality is not None

    def read_invalid(self, target: Grid, window: Window) -> np.ndarray | None:
        """``(T, h, w)`` observations the quality variable flags (None without one).

        Raises:
            ValueError: On values that are neither valid nor invalid.
        """
        if self.quality is None or self.rule is None:
            return None
        codes = self._read(self.quality, target, window)
        return self.rule.invalid_mask(codes, ", ".join(p.where for p in self.quality))


class DatacubeLayer(RasterLayer):
    """A 2-D datacube variable (label codes, parcel ids) read on a scene's grid."""

    def __init__(self, variable: CubeVariable) -> None:
        self.variable = variable
        self.grid = variable.grid
        self.name = variable.where
        self.fill = variable.cf()["fill"]

    def read_slab(self, rows: slice, cols: slice) -> np.ndarray:
        """``(rows, cols)`` raw values."""
        return self.variable.read_slab(rows, cols)


def cf_radiometry(modality: str, pieces: Mapping[str, Sequence[CubeVariable]]) -> dict[str, Any]:
    """``{scale, offset, nodata}`` from the bands' CF attributes (keys only when present).

    Raises:
        ValueError: If the bands of one modality have different encodings (the reader
            applies one scale per modality; set it in ``data.radiometry``).
    """
    encodings = {b: ps[0].cf() for b, ps in pieces.items()}
    # NaN fills (xarray's default for float variables) compare equal here: NaN != NaN otherwise.
    distinct = {
        tuple(sorted((k, "NaN" if isinstance(v, float) and np.isnan(v) else v) for k, v in e.items()))
        for e in encodings.values()
    }
    if len(distinct) > 1:
        listed = "; ".join(f"{b}: {e}" for b, e in encodings.items())
        raise ValueError(
            f"The {modality} bands have different CF encodings ({listed}); one scale/offset/fill applies to a "
            f"modality, so set data.radiometry.{modality}.scale / offset / nodata explicitly."
        )
    e = next(iter(encodings.values()))
    out: dict[str, Any] = {}
    if e["scale"] is not None:
        out["scale"] = e["scale"]
    if e["offset"] is not None and e["offset"] != 0:
        out["offset"] = e["offset"]
    if e["fill"] is not None and np.isfinite(e["fill"]):
        out["nodata"] = [e["fill"]]
    return out


__all__ = [
    "CubeVariable",
    "DatacubeLayer",
    "DatacubeSeries",
    "Dims",
    "cf_radiometry",
    "crs_of",
    "cube_variable",
    "find_dims",
    "open_cube",
]
