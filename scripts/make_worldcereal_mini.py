"""Crop three WorldCereal patches to a few dates and pixels, for the test suite (tests/fixtures/worldcereal_mini/).

    python scripts/make_worldcereal_mini.py /path/to/worldcereal/patches tests/fixtures/worldcereal_mini

Keeps the files' variables, attributes, CF encodings, CRS and real timestamps; crops every
file to the same 240 m x 240 m (24 x 24 px at 10 m, 12 x 12 at 20 m) and the first dates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import xarray as xr

PATCHES = {  # patch -> (row0, col0) at 10 m
    "0000280849BAC91C": (20, 16),
    "00002806639B424A": (8, 24),
    "2021_TZA_COPERNICUS-GEOGLAM_POLY_1101950": (40, 10),  # S1 only; all three crop types
}
SIZE_10M = 24
N_S2, N_S1 = 16, 20


def crop(src: Path, out: Path, row0: int, col0: int) -> None:
    ds = xr.open_dataset(src, mask_and_scale=False)
    res = int(ds.attrs.get("resolution", 10))
    f = res // 10
    sel = {"y": slice(row0 // f, (row0 + SIZE_10M) // f), "x": slice(col0 // f, (col0 + SIZE_10M) // f)}
    if "timestamp" in ds.dims:
        sel["timestamp"] = slice(0, N_S2 if src.name.startswith("S2") else N_S1)
    small = ds.isel(sel).load()
    encoding = {}
    for v in small.variables:
        if "bounds" in small[v].attrs:  # an array here; CF reads a variable attribute "bounds" as a name
            small[v].attrs["bounds"] = str(list(small[v].attrs["bounds"]))
        fill = small[v].attrs.pop("_FillValue", None)
        encoding[v] = {"_FillValue": fill, "zlib": True, "complevel": 4} if fill is not None else {"_FillValue": None}
    small.to_netcdf(out, encoding=encoding)


def main(root: str, out_dir: str) -> None:
    for patch, (r0, c0) in PATCHES.items():
        (Path(out_dir) / patch).mkdir(parents=True, exist_ok=True)
        for f in sorted((Path(root) / patch).glob("*.nc")):
            crop(f, Path(out_dir) / patch / f.name, r0, c0)


if __name__ == "__main__":
    main(*sys.argv[1:3])
