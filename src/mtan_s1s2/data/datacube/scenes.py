"""Assemble a :class:`~mtan_s1s2.data.scene.scene.Scene` from the datacube files of one scene folder.

Configuration (``configs/data/datacube.yaml``)::

    sources:
      s2:
        files: [S2_L2A_10m_*.nc, S2_L2A_20m_*.nc]      # globs in the scene folder
        bands: [B02, B03, B04, B05, B06, B07, B08, B8A, B11, B12]
        quality: {variable: SCL}                     # default SCL classes (data/quality.py)
      s1_asc:
        files: [S1_GRD-ASCENDING_*.nc]
        bands: [VV, VH]
    labels: {file: OUTPUT_POLY-*.nc, variable: CT}   # file null: no labels (prediction)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.datacube.reader import (
    CubeVariable,
    DatacubeLayer,
    DatacubeSeries,
    cf_radiometry,
    cube_variable,
    open_cube,
)
from mtan_s1s2.data.quality import SCL_RULE, QualityRule
from mtan_s1s2.data.radiometry import file_radiometry
from mtan_s1s2.data.scene.folders import (
    FolderReader,
    SceneSources,
    find_files,
    one_file,
    open_scene_folder,
)
from mtan_s1s2.data.scene.scene import Scene


def scene_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as plain Python values (numpy scalars and arrays converted)."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, np.ndarray):
            out[str(k)] = v.tolist()
        elif isinstance(v, np.generic):
            out[str(k)] = v.item()
        else:
            out[str(k)] = v
    return out


class DatacubeFolder(FolderReader):
    """The datacubes of one scene folder, each file opened once (lazily: no pixel is read).

    Args:
        folder: The scene folder.
        engine: xarray engine (None: xarray's choice).
        dims: ``{time, y, x}`` dimension names (None entries: detected).

    Attributes:
        opened: Path -> opened dataset.
    """

    source_keys = ("files", "bands", "quality")
    layer_keys = ("file", "variable")
    declared_note = "a datacube's CF _FillValue, scale_factor and add_offset are read first"

    def __init__(self, folder: Path, engine: str | None = None, dims: Mapping[str, str | None] | None = None) -> None:
        super().__init__(folder)
        self.engine = engine
        self.dims = dims
        self.opened: dict[Path, Any] = {}
        self._attrs: dict[str, Any] = {}

    def cube(self, path: Path) -> Any:
        """The opened dataset of ``path``."""
        if path not in self.opened:
            self.opened[path] = open_cube(path, self.engine)
        return self.opened[path]

    def attrs(self) -> dict[str, Any]:
        """Global attributes of the first file of the first modality."""
        return self._attrs

    def _bands(
        self, key: str, bands: Sequence[str], opened: Sequence[tuple[Path, Any]]
    ) -> dict[str, list[CubeVariable]]:
        pieces: dict[str, list[CubeVariable]] = {}
        for band in bands:
            found = [cube_variable(p, ds, band, self.dims) for p, ds in opened if band in ds.data_vars]
            if not found:
                held = sorted({str(v) for _, ds in opened for v in ds.data_vars})
                raise ValueError(
                    f"{key}: band {band!r} is in none of {[str(p.resolve()) for p, _ in opened]} (their variables: "
                    f"{held}); fix {key}.bands or {key}.files."
                )
            pieces[band] = found
        return pieces

    def _quality(
        self, key: str, qspec: Mapping[str, Any] | None, opened: Sequence[tuple[Path, Any]]
    ) -> tuple[list[CubeVariable] | None, QualityRule | None]:
        if not qspec:
            return None, None
        qvar = str(qspec.get("variable") or "")
        if not qvar:
            raise ValueError(f"{key}.quality needs a variable (e.g. SCL), got {dict(qspec)}.")
        quality = [cube_variable(p, ds, qvar, self.dims) for p, ds in opened if qvar in ds.data_vars]
        if not quality:
            raise ValueError(f"{key}.quality.variable={qvar!r} is in none of {[str(p) for p, _ in opened]}.")
        default = SCL_RULE if qvar.upper() == "SCL" else QualityRule((), (1,), qvar)
        return quality, QualityRule.from_config(qspec, default=default, name=f"{qvar} quality band")

    def open_series(
        self, modality: str, spec: Mapping[str, Any], key: str, radiometry: Mapping[str, Any] | None
    ) -> DatacubeSeries:
        """The bands (and quality band) of ``modality``; its radiometry from the CF encoding.

        The files' CF attributes (``scale_factor``, ``add_offset``, ``_FillValue``) are
        recorded as ``declared``; ``radiometry`` (``data.radiometry.<modality>``) goes on top.

        Raises:
            ValueError: On empty bands, a band or quality variable in none of the files.
        """
        if not spec.get("bands"):
            raise ValueError(f"{key}.bands is empty: list the variables of the modality's bands, e.g. [VV, VH].")
        paths = find_files(self.folder, spec.get("files") or [], f"{key}.files")
        opened = [(p, self.cube(p)) for p in paths]
        if not self._attrs:
            self._attrs = scene_attrs(opened[0][1].attrs)
        pieces = self._bands(key, [str(b) for b in spec["bands"]], opened)
        quality, rule = self._quality(key, spec.get("quality"), opened)
        cf = cf_radiometry(modality, pieces)
        series = DatacubeSeries(
            modality, list(pieces), pieces, quality, rule, file_radiometry(modality, cf, radiometry)
        )
        series.declared = cf
        return series

    def open_layer(self, spec: Mapping[str, Any], key: str) -> DatacubeLayer:
        """A static variable of one file.

        Raises:
            ValueError: Without file or variable, on a glob matching several files, or a
                variable the file does not hold.
        """
        if not spec.get("file") or not spec.get("variable"):
            raise ValueError(f"{key} needs file (a glob in the scene folder) and variable, got {dict(spec)}.")
        path = one_file(self.folder, str(spec["file"]), f"{key}.file")
        ds = self.cube(path)
        var = str(spec["variable"])
        if var not in ds.data_vars:
            raise ValueError(
                f"{key}.variable={var!r} is not in {path.resolve()} (its variables: {sorted(ds.data_vars)})."
            )
        return DatacubeLayer(cube_variable(path, ds, var, self.dims, static=True))


def open_scene(
    folder: str | Path,
    modalities: Sequence[str],
    sources: Mapping[str, Mapping[str, Any]],
    reference_date: Any,
    label: Mapping[str, Any] | None = None,
    parcels: Mapping[str, Any] | None = None,
    radiometry: Mapping[str, Any] | None = None,
    resolution: float | None = None,
    engine: str | None = None,
    dims: Mapping[str, str | None] | None = None,
    snap: bool = False,
) -> Scene:
    """Open the datacubes of one scene folder (lazily: no pixel is read).

    Args:
        folder: The scene folder; file patterns are relative to it.
        modalities: Modalities to read (keys of ``sources``), in order.
        sources: Per modality ``{files, bands, quality}`` (see the module docstring).
        reference_date: Day 0 of ``doy``: a date or ``attr:<name>`` (a global attribute of
            the first file of the first modality).
        label: ``{file, variable}`` of the label codes, or None.
        parcels: ``{file, variable}`` of parcel ids (splits by parcel), or None.
        radiometry: ``data.radiometry``: per modality overrides of the CF encoding.
        resolution: Pixel size of the scene grid (None: the finest raster's).
        engine: xarray engine (None: xarray's choice).
        dims: ``{time, y, x}`` dimension names (None entries: detected).
        snap: Read bands off the scene grid by more than a quarter pixel, snapped
            (``data.grid.snap``), instead of refusing them.

    Raises:
        ValueError: On a missing file or variable, bands with different dates, rasters in
            different CRSs or that do not overlap, or bad settings; each message names the
            files and the config key.
    """
    spec = SceneSources(
        tuple(modalities), sources, reference_date, label, parcels, dict(radiometry or {}), resolution, snap
    )
    return open_scene_folder(DatacubeFolder(Path(folder), engine, dims), spec)


__all__ = ["DatacubeFolder", "open_scene", "scene_attrs"]
