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
    label: {file: OUTPUT_POLY-*.nc, variable: CT}    # null: no labels (prediction)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mtan_s1s2.data.datacube.reader import (
    CubeVariable,
    DatacubeLayer,
    DatacubeSeries,
    cf_radiometry,
    cube_variable,
    open_cube,
)
from mtan_s1s2.data.dates import resolve_reference_date
from mtan_s1s2.data.quality import SCL_RULE, QualityRule
from mtan_s1s2.data.radiometry import file_radiometry
from mtan_s1s2.data.scene.scene import Scene, find_files, scene_attrs

SOURCE_KEYS = ("files", "bands", "quality")
LAYER_KEYS = ("file", "variable")


def _check_keys(cfg: Mapping[str, Any], allowed: Sequence[str], key: str) -> None:
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise ValueError(f"{key} has unknown key(s) {unknown}; valid keys are {list(allowed)}.")


class _Files:
    """Opened datacubes of one scene, each opened once."""

    def __init__(self, engine: str | None) -> None:
        self.engine = engine
        self.opened: dict[Path, Any] = {}

    def get(self, path: Path) -> Any:
        if path not in self.opened:
            self.opened[path] = open_cube(path, self.engine)
        return self.opened[path]


def _layer(
    folder: Path, files: _Files, spec: Mapping[str, Any] | None, key: str, dims: Mapping[str, str | None] | None
) -> DatacubeLayer | None:
    if not spec:
        return None
    _check_keys(spec, LAYER_KEYS, key)
    if not spec.get("file") or not spec.get("variable"):
        raise ValueError(f"{key} needs file (a glob in the scene folder) and variable, got {dict(spec)}.")
    paths = find_files(folder, str(spec["file"]), key)
    if len(paths) > 1:
        raise ValueError(f"{key}.file={spec['file']!r} matches {len(paths)} files in {folder.resolve()}; match one.")
    ds = files.get(paths[0])
    var = str(spec["variable"])
    if var not in ds.data_vars:
        raise ValueError(
            f"{key}.variable={var!r} is not in {paths[0].resolve()} (its variables: {sorted(ds.data_vars)})."
        )
    return DatacubeLayer(cube_variable(paths[0], ds, var, dims, static=True))


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
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"Scene folder not found: {folder.resolve()}; set data.root / data.scenes.")
    files = _Files(engine)
    radiometry = dict(radiometry or {})
    series: dict[str, DatacubeSeries] = {}
    attrs: dict[str, Any] = {}
    for m in modalities:
        if m not in sources:
            raise ValueError(
                f"data.modalities has {m!r} but data.sources has no entry for it (it has {sorted(sources)})."
            )
        spec = dict(sources[m])
        key = f"data.sources.{m}"
        _check_keys(spec, SOURCE_KEYS, key)
        if not spec.get("bands"):
            raise ValueError(f"{key}.bands is empty: list the variables of the modality's bands, e.g. [VV, VH].")
        paths = find_files(folder, spec.get("files") or [], f"{key}.files")
        opened = [(p, files.get(p)) for p in paths]
        if not attrs:
            attrs = scene_attrs(opened[0][1].attrs)
        pieces: dict[str, list[CubeVariable]] = {}
        for band in [str(b) for b in spec["bands"]]:
            found = [cube_variable(p, ds, band, dims) for p, ds in opened if band in ds.data_vars]
            if not found:
                held = sorted({str(v) for _, ds in opened for v in ds.data_vars})
                raise ValueError(
                    f"{key}: band {band!r} is in none of {[str(p.resolve()) for p in paths]} (their variables: "
                    f"{held}); fix {key}.bands or {key}.files."
                )
            pieces[band] = found
        quality = None
        rule = None
        qspec = spec.get("quality")
        if qspec:
            qvar = str(qspec.get("variable") or "")
            if not qvar:
                raise ValueError(f"{key}.quality needs a variable (e.g. SCL), got {dict(qspec)}.")
            quality = [cube_variable(p, ds, qvar, dims) for p, ds in opened if qvar in ds.data_vars]
            if not quality:
                raise ValueError(f"{key}.quality.variable={qvar!r} is in none of {[str(p) for p in paths]}.")
            default = SCL_RULE if qvar.upper() == "SCL" else QualityRule((), (1,), qvar)
            rule = QualityRule.from_config(qspec, default=default, name=f"{qvar} quality band")
        cf = cf_radiometry(m, pieces)
        series[m] = DatacubeSeries(m, list(pieces), pieces, quality, rule, file_radiometry(m, cf, radiometry.get(m)))
        series[m].declared = cf
    label_layer = _layer(folder, files, label, "data.label", dims)
    parcel_layer = _layer(folder, files, parcels, "data.split.parcels", dims)
    ref = resolve_reference_date(reference_date, attrs, where=f"scene {folder.name} ({folder.resolve()})")
    return Scene(
        name=folder.name, series=dict(series), reference_date=ref, label=label_layer, parcels=parcel_layer,
        resolution=resolution, snap=snap, root=folder.resolve(), attrs=attrs,
    )  # fmt: skip


__all__ = ["open_scene"]
