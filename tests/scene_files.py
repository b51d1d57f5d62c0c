"""Small synthetic datacubes (NetCDF, written with xarray) and GeoTIFFs for the raster readers' tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
import xarray as xr
from rasterio.crs import CRS

MINI = Path(__file__).resolve().parent / "data" / "worldcereal_mini"
"""Two real WorldCereal patches, cropped (tests/data/worldcereal_mini/README.md)."""
MINI_SCENES = ["0000280849BAC91C", "00002806639B424A"]
EPSG = 32631


def times(n: int, start: str = "2020-03-01T10:30:00", step_days: int = 7) -> np.ndarray:
    return np.datetime64(start, "s") + np.arange(n) * np.timedelta64(step_days, "D")


def write_cube(
    path: Path,
    bands: dict[str, np.ndarray],
    t: np.ndarray | None,
    x0: float = 500000.0,
    y0: float = 5600000.0,
    res: float = 10.0,
    epsg: int | None = EPSG,
    scale: float | None = 1e-4,
    fill: int | None = 0,
    attrs: dict | None = None,
) -> Path:
    """A NetCDF with (t, y, x) variables (or (y, x) if ``t`` is None), CF grid mapping, scale and fill."""
    first = next(iter(bands.values()))
    H, W = first.shape[-2:]
    coords = {"y": y0 - res * (np.arange(H) + 0.5), "x": x0 + res * (np.arange(W) + 0.5)}
    dims: tuple[str, ...] = ("y", "x")
    if t is not None:
        coords["t"] = t.astype("datetime64[ns]")
        dims = ("t", "y", "x")
    ds = xr.Dataset(coords=coords, attrs=dict(attrs or {"start_date": "2020-02-01"}))
    encoding = {}
    for name, values in bands.items():
        var_attrs = {}
        if scale is not None and name != "SCL":
            var_attrs["scale_factor"] = scale
        if epsg is not None:
            var_attrs["grid_mapping"] = "spatial_ref"
        ds[name] = xr.DataArray(values, dims=dims, attrs=var_attrs)
        encoding[name] = {"_FillValue": fill} if fill is not None else {}
    if epsg is not None:
        ds["spatial_ref"] = xr.DataArray(0, attrs={"crs_wkt": CRS.from_epsg(epsg).to_wkt()})
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(path, encoding=encoding)
    return path


def make_scene(
    folder: Path,
    H: int = 8,
    W: int = 8,
    t2: int = 5,
    t1: int = 4,
    seed: int = 0,
    s1_offset: tuple[float, float] = (0.0, 0.0),
    clouds: float = 0.2,
    codes: tuple[int, ...] = (0, 1200, 1110, 9120),
) -> Path:
    """One scene: S2 10 m (B02, B08) + 20 m (B11, SCL), S1 20 m (VV, VH), a 10 m label (``CT``)."""
    rng = np.random.default_rng(seed)
    t_s2, t_s1 = times(t2), times(t1, "2020-03-02T17:40:00", 9)
    dn = lambda *shape: rng.integers(200, 4000, size=shape).astype(np.uint16)  # noqa: E731
    write_cube(folder / "S2_10m.nc", {"B02": dn(t2, H, W), "B08": dn(t2, H, W)}, t_s2)
    scl = rng.choice([4, 5, 9], p=[0.5, 0.5 - clouds, clouds], size=(t2, H // 2, W // 2)).astype(np.uint8)
    write_cube(folder / "S2_20m.nc", {"B11": dn(t2, H // 2, W // 2), "SCL": scl}, t_s2, res=20.0)
    db = lambda *shape: (rng.normal(-12, 3, size=shape) * 1e4).astype(np.int32)  # noqa: E731
    write_cube(
        folder / "S1_20m.nc", {"VV": db(t1, H // 2, W // 2), "VH": db(t1, H // 2, W // 2)}, t_s1, res=20.0,
        x0=500000.0 + s1_offset[0], y0=5600000.0 + s1_offset[1],
    )  # fmt: skip
    label = rng.choice(codes, size=(H, W)).astype(np.uint16)
    write_cube(folder / "label.nc", {"CT": label}, None, scale=None)
    return folder


SOURCES = {
    "s2": {"files": ["S2_10m.nc", "S2_20m.nc"], "bands": ["B02", "B08", "B11"], "quality": {"variable": "SCL"}},
    "s1_asc": {"files": ["S1_20m.nc"], "bands": ["VV", "VH"]},
}
LABEL = {"file": "label.nc", "variable": "CT"}
LABELS = {"classes": {"maize": [1200], "wheat": [1110], "grass": [9120]}, "ignore_codes": [0]}


def write_tif(path: Path, data: np.ndarray, transform=None, crs: int | None = EPSG, nodata=None) -> Path:
    """A GeoTIFF of ``(C, H, W)`` (or ``(H, W)``) values; ``transform=None`` and ``crs=None``: not georeferenced."""
    arr = data if data.ndim == 3 else data[None]
    profile = {"driver": "GTiff", "count": arr.shape[0], "height": arr.shape[1], "width": arr.shape[2],
               "dtype": arr.dtype.name}  # fmt: skip
    if transform is not None:
        profile["transform"] = transform
    if crs is not None:
        profile["crs"] = CRS.from_epsg(crs)
    if nodata is not None:
        profile["nodata"] = nodata
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(arr)
    return path


S2_ALL = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]


def write_default_scenes(root: Path, kind: str) -> Path:
    """One scene in the layout the defaults of ``configs/data/<kind>.yaml`` read (datacube or geotiff)."""
    folder = root / "scene1"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    H = W = 8
    t2, t1 = times(3), times(2, "2020-03-02T17:40:00")
    label = rng.choice([0, 1, 2], size=(H, W)).astype(np.uint16)
    if kind == "datacube":
        bands = {b: rng.integers(100, 3000, (3, H, W)).astype(np.uint16) for b in S2_ALL}
        write_cube(folder / "S2.nc", {**bands, "SCL": np.full((3, H, W), 4, np.uint8)}, t2)
        write_cube(
            folder / "S1.nc", {b: (rng.normal(-12, 2, (2, H, W)) * 1e4).astype(np.int32) for b in ("VV", "VH")}, t1
        )
        write_cube(folder / "label.nc", {"label": label}, None, scale=None)
        return root
    from affine import Affine

    ul = Affine(10, 0, 500000, 0, -10, 5600000)
    write_tif(folder / "S2_stack.tif", rng.integers(100, 3000, (3 * 10, H, W)).astype(np.uint16), ul)
    (folder / "S2_dates.txt").write_text("20200301\n20200308\n20200315\n")
    for t in ("20200302T174000", "20200311T174000"):
        write_tif(folder / f"S1_{t}.tif", rng.normal(-12, 2, (2, H, W)).astype(np.float32), ul)
    write_tif(folder / "label.tif", label.astype(np.int32), ul)
    return root
