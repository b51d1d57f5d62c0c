"""Write a scene as GeoTIFFs, in either layout ``data=geotiff`` reads.

For exporting a datacube scene to the layout another tool expects (Orfeo ToolBox / iota2
date-major stacks, one file per date), for checking that both readers give the same
inputs, and for tests. Values are written as read (physical units, ``float32``), so the
GeoTIFF config needs no scale; validity goes to mask rasters (0 valid, 1 invalid):

* ``layout="stack"``: ``{m}_stack.tif`` (``T x C`` bands, date-major), ``{m}_dates.txt``
  (one ISO date-time per line), ``{m}_masks.tif`` (``T`` bands);
* ``layout="files"``: ``{m}_{YYYYMMDDTHHMMSS}.tif`` (``C`` bands; years 2000-2999) and
  ``{m}_mask_{YYYYMMDDTHHMMSS}.tif`` per date;
* ``label.tif``: the source label codes (``int32``), if the scene has labels.

Written window by window (memory bounded). With ``georeferenced=False`` no CRS and no
transform are written (a plain pixel stack, as some processing chains leave them).

Command line::

    python -m mtan_s1s2.data.geotiff OUT_DIR [--layout stack|files] [--no-georef] -- data=worldcereal data.scenes=[ID]
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import rasterio
from rasterio.errors import NotGeoreferencedWarning

from mtan_s1s2.data.scene.grid import tiles
from mtan_s1s2.data.scene.scene import Scene

Layout = Literal["stack", "files"]


def _stamp(date: np.datetime64) -> str:
    return str(np.asarray(date).astype("datetime64[s]")).replace("-", "").replace(":", "")


def _open(path: Path, scene: Scene, count: int, dtype: str, georeferenced: bool) -> Any:
    profile: dict[str, Any] = {
        "driver": "GTiff", "width": scene.grid.width, "height": scene.grid.height, "count": count, "dtype": dtype,
        "tiled": True, "blockxsize": 256, "blockysize": 256, "compress": "deflate",
    }  # fmt: skip
    if georeferenced and scene.grid.georeferenced:
        profile["transform"] = scene.grid.transform
        if scene.grid.crs is not None:
            profile["crs"] = scene.grid.crs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        return rasterio.open(path, "w", **profile)


def write_scene_geotiffs(
    scene: Scene,
    out_dir: str | Path,
    layout: Layout = "stack",
    georeferenced: bool = True,
    tile: int = 256,
) -> dict[str, Any]:
    """Write every modality of ``scene`` (and its labels) as GeoTIFFs in ``out_dir``.

    A modality the scene lacks (an optional one, :class:`~mtan_s1s2.data.scene.scene.AbsentSeries`)
    gets no file, and an ``optional`` entry that reads it back as absent.

    Args:
        scene: The scene (any reader).
        out_dir: Output folder (a scene folder for ``data=geotiff``).
        layout: ``stack`` (date-major stack + dates file) or ``files`` (one per date).
        georeferenced: Write the scene's CRS and transform (False: neither).
        tile: Window side used while writing.

    Returns:
        The ``data.sources`` / ``data.radiometry`` entries and the label raster
        (``data.labels.file`` / ``data.labels.band``) reading the files back with
        ``data=geotiff`` (``{"sources": ..., "radiometry": ..., "labels": {file, band} or None}``).

    Raises:
        ValueError: On an unknown layout.
    """
    if layout not in ("stack", "files"):
        raise ValueError(f"layout must be 'stack' or 'files', got {layout!r}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources: dict[str, Any] = {}
    for m, s in scene.series.items():
        T, C = len(s.dates), len(s.bands)
        if s.absent:  # no file: read back as the same absent optional modality
            sources[m] = {"files": f"{m}_2*.tif", "bands": list(s.bands), "optional": True}
            continue
        if layout == "stack":
            (out / f"{m}_dates.txt").write_text("".join(f"{d}\n" for d in np.asarray(s.dates, "datetime64[s]")))
            values = [_open(out / f"{m}_stack.tif", scene, T * C, "float32", georeferenced)]
            masks = [_open(out / f"{m}_masks.tif", scene, T, "uint8", georeferenced)]
            sources[m] = {
                "stack": f"{m}_stack.tif", "dates": f"{m}_dates.txt", "mask": f"{m}_masks.tif", "bands": list(s.bands),
            }  # fmt: skip
        else:
            stamps = [_stamp(d) for d in s.dates]
            values = [_open(out / f"{m}_{t}.tif", scene, C, "float32", georeferenced) for t in stamps]
            masks = [_open(out / f"{m}_mask_{t}.tif", scene, 1, "uint8", georeferenced) for t in stamps]
            sources[m] = {"files": f"{m}_2*.tif", "mask": f"{m}_mask_*.tif", "bands": list(s.bands)}
        try:
            for w in tiles(scene.grid, tile):
                d = scene.read(w, count=False)[m]
                x, invalid = d["x"], (~d["mask"]).astype(np.uint8)
                if layout == "stack":
                    values[0].write(x.reshape(T * C, *x.shape[2:]), window=w)
                    masks[0].write(invalid, window=w)
                else:
                    for t in range(T):
                        values[t].write(x[t], window=w)
                        masks[t].write(invalid[t][None], window=w)
        finally:
            for dst in [*values, *masks]:
                dst.close()
    label = None
    if scene.label is not None:
        with _open(out / "label.tif", scene, 1, "int32", georeferenced) as dst:
            for w in tiles(scene.grid, tile):
                codes = scene.read_label(w)
                assert codes is not None
                dst.write(np.nan_to_num(codes, nan=0).astype(np.int32)[None], window=w)
        label = {"file": "label.tif", "band": 1}
    # Physical float32 values: no scale, no fill value (validity is in the masks). Their encoding
    # differs from the source's, so a model trained on the source predicts them with
    # radiometry_override=true and this radiometry.
    radiometry: dict[str, dict[str, Any]] = {
        m: {
            "units": "db" if m.startswith("s1") else "reflectance", "scale": 1.0, "offset": 0.0, "dn_offset": 0.0,
            "nodata": [], "valid_range": None, "dn_zero_nodata": False,
        }
        for m in scene.series
    }  # fmt: skip
    return {"sources": sources, "radiometry": radiometry, "labels": label}


__all__ = ["Layout", "write_scene_geotiffs"]
