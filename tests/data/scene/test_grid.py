"""Grids: the common grid of a scene, alignment by coordinates, clear errors, tiles."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from affine import Affine
from rasterio.crs import CRS
from rasterio.windows import Window

from mtan_s1s2.data.scene.grid import Grid, common_grid, index_map, lattice_offset, lattice_origin, read_aligned, tiles

UTM = CRS.from_epsg(32631)


def grid(x0: float, y0: float, res: float, h: int, w: int, crs: CRS | None = UTM, name: str = "") -> Grid:
    return Grid(Affine(res, 0, x0, 0, -res, y0), h, w, crs, name)


def test_20m_bands_upsampled_on_the_10m_lattice_by_coordinates() -> None:
    g10 = grid(1000, 2000, 10, 8, 8, name="B02")
    g20 = grid(990, 2010, 20, 6, 6, name="B11")  # a lattice shifted by half a 20 m pixel, covering more
    target = common_grid([g10, g20])
    assert target.transform == g10.transform and target.shape == (8, 8)
    rows, cols = index_map(g20, target, target.full_window())
    # 10 m pixel centre y = 1995 lies in the 20 m row 0 (2010..1990), 1985 and 1975 in row 1 ...
    assert rows.tolist() == [0, 1, 1, 2, 2, 3, 3, 4] and cols.tolist() == [0, 1, 1, 2, 2, 3, 3, 4]
    src = np.arange(36).reshape(6, 6)
    out = read_aligned(lambda r, c: src[r, c], g20, target, Window(2, 1, 3, 2))
    np.testing.assert_array_equal(out, src[np.ix_(rows[1:3], cols[2:5])])


def test_common_area_and_coarser_target_resolution() -> None:
    a = grid(0, 100, 10, 10, 10)
    b = grid(20, 80, 10, 10, 10)
    g = common_grid([a, b])
    assert g.bounds == (20, 0, 100, 80) and g.shape == (8, 8)
    g20 = common_grid([a, grid(0, 100, 20, 5, 5)], resolution=20)
    assert g20.res == (20, 20) and g20.shape == (5, 5)


def test_rasters_that_do_not_overlap_name_both_grids() -> None:
    s2 = grid(501360, 5629680, 10, 64, 64, name="S2 B02 of a.nc")
    s1 = grid(574680, 5622440, 20, 32, 32, name="S1 VV of b.nc")
    with pytest.raises(ValueError, match=r"do not overlap.*S2 B02 of a\.nc: EPSG:32631.*S1 VV of b\.nc: EPSG:32631"):
        common_grid([s2, s1])


def test_different_crs_and_unreferenced_shapes_are_errors() -> None:
    with pytest.raises(ValueError, match=r"share one CRS.*EPSG:32631.*EPSG:32737.*gdalwarp"):
        common_grid([grid(0, 100, 10, 4, 4), grid(0, 100, 10, 4, 4, CRS.from_epsg(32737))])
    plain = Grid(Affine.identity(), 4, 5)
    assert not plain.georeferenced and common_grid([plain, Grid(Affine.identity(), 4, 5)]).shape == (4, 5)
    with pytest.raises(ValueError, match=r"without georeferencing .* one shape"):
        common_grid([plain, Grid(Affine.identity(), 4, 6)])
    with pytest.raises(ValueError, match="georeferenced raster with one that is not"):
        common_grid([plain, grid(0, 100, 10, 4, 5)])


def test_tiles_cover_the_grid_once_and_follow_a_lattice() -> None:
    g = grid(0, 100, 10, 13, 7)
    for size, origin in ((5, (0, 0)), (4, (3, 1)), (100, (0, 0))):
        count = np.zeros(g.shape, int)
        for w in tiles(g, size, origin):
            count[w.row_off : w.row_off + w.height, w.col_off : w.col_off + w.width] += 1
        assert (count == 1).all(), (size, origin)
    first = tiles(g, 4, (3, 1))[0]
    assert (first.height, first.width) == (1, 3)  # partial: rows 3..3 and cols 1..3 of the lattice
    assert lattice_origin(grid(501360, 5629680, 10, 2, 2)) == (-562968, 50136)


def test_a_band_off_the_grid_by_a_fraction_of_a_pixel_is_warned_or_refused() -> None:
    crs = CRS.from_epsg(32631)
    g10 = Grid(Affine(10, 0, 500000, 0, -10, 5000160), 16, 16, crs, "B04")
    aligned = Grid(Affine(20, 0, 500020, 0, -20, 5000160), 8, 8, crs, "B11")  # whole 10 m pixels: silent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        common_grid([g10, aligned])
    half = Grid(Affine(20, 0, 500005, 0, -20, 5000155), 8, 8, crs, "B11 of S2_20m.nc")  # 5 m = 0.5 px off
    with pytest.raises(ValueError, match=r"B11 of S2_20m\.nc \(20 m pixels\) lies -5 m in x and \+5 m in y off the "
                                         r"scene grid .*: 0\.5 and 0\.5 px of 10 m, more than the 0\.25 px.*"
                                         r"data\.grid\.snap=true"):  # fmt: skip
        common_grid([g10, half])
    with pytest.warns(UserWarning, match=r"lies -5 m in x and \+5 m in y .*read by nearest centre"):
        target = common_grid([g10, half], snap=True)
    assert target.transform.c == 500010 and target.transform.f == 5000150
    quarter = Grid(Affine(20, 0, 500002, 0, -20, 5000160), 8, 8, crs, "VV")  # 2 m = 0.2 px: read, with a warning
    with pytest.warns(UserWarning, match=r"VV \(20 m pixels\) lies \+2 m in x and \+0 m in y .*0\.2 and 0 px of 10 m"):
        common_grid([g10, quarter])
    assert lattice_offset(quarter, g10) == pytest.approx((2.0, 0.0))


def test_data_grid_snap_reaches_the_datacube_reader(tmp_path) -> None:
    import xarray as xr

    from mtan_s1s2.data.datacube.datamodule import DatacubeDataModule

    folder = tmp_path / "s1"
    folder.mkdir()
    spatial_ref = ((), 0, {"crs_wkt": CRS.from_epsg(32631).to_wkt()})
    t = np.asarray(["2021-05-01"], "datetime64[ns]")
    b04 = np.full((1, 16, 16), 1500, np.uint16)
    xr.Dataset({"B04": (("t", "y", "x"), b04, {"grid_mapping": "spatial_ref"}), "spatial_ref": spatial_ref},
               coords={"t": t, "y": 5000155 - 10 * np.arange(16), "x": 500005 + 10 * np.arange(16)},
               ).to_netcdf(folder / "S2_10m.nc")  # fmt: skip
    b11 = np.full((1, 8, 8), 2000, np.uint16)
    xr.Dataset({"B11": (("t", "y", "x"), b11, {"grid_mapping": "spatial_ref"}), "spatial_ref": spatial_ref},
               coords={"t": t, "y": 5000145 - 20 * np.arange(8), "x": 500015 + 20 * np.arange(8)},
               ).to_netcdf(folder / "S2_20m.nc")  # fmt: skip
    kwargs = dict(
        root=str(tmp_path), modalities=["s2"], sources={"s2": {"files": ["S2_*.nc"], "bands": ["B04", "B11"]}},
        labels=None, reference_date="2021-01-01",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"B11 of .*S2_20m\.nc \(20 m pixels\) lies -5 m in x and \+5 m in y"):
        DatacubeDataModule(**kwargs)
    with pytest.warns(UserWarning, match=r"0\.5 and 0\.5 px of 10 m; its pixels are read by nearest centre"):
        dm = DatacubeDataModule(**kwargs, grid={"resolution": None, "snap": True})
    assert dm.scenes[0].grid.shape == (15, 15)
    with pytest.raises(ValueError, match=r"data\.grid has unknown key\(s\) \['snapping'\]; valid keys are "):
        DatacubeDataModule(**kwargs, grid={"snapping": True})
