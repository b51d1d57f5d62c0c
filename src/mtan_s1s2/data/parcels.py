"""Parcel ids of the pixels: where they come from (``data.split.parcels``) and their index.

Crop maps are delivered per parcel (field). Where parcel ids exist, the test reports parcel
metrics beside the pixel metrics and prediction writes parcel maps
(:mod:`mtan_s1s2.parcel_metrics`); a scene split by parcels (``data.split.by=parcels``)
keeps every parcel in one split. One config key says where the ids are,
``data.split.parcels`` (null = no parcels), a mapping with ``source``:

* ``raster`` (scenes; the default when ``file`` is given): a parcel-id raster in the scene
  folder, ``{file, variable}`` (datacube) or ``{file, band}`` (GeoTIFF). 0, NaN and the
  raster's no-data value mean "no parcel".
* ``components`` (scenes): parcels are the connected regions of equal value of a raster,
  by default the label raster (``data.labels.file``; or ``file`` + ``variable`` / ``band``),
  ``connectivity`` 4 (default: fields touching at a corner stay apart) or 8. 0, NaN and
  no-data are no parcel. Adjacent fields of the same code become one parcel.
* ``column`` (tables): ``column``, a column of parcel ids (or a list of columns whose
  combination is the parcel, e.g. ``[tile, parcel_id]``).

:func:`scene_parcel_index` numbers the parcels of a scene; parcel ids are per scene (id 17
of two scenes are two parcels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from mtan_s1s2.data.scene.scene import RasterLayer, Scene

ParcelSource = Literal["raster", "components", "column"]
PARCEL_SOURCES: tuple[str, ...] = ("raster", "components", "column")
SCENE_SOURCES: tuple[str, ...] = ("raster", "components")
CONNECTIVITY: tuple[int, ...] = (4, 8)
NO_PARCEL = -1
"""Parcel index of a pixel without a parcel (in samples and batches: ``parcel`` entries)."""


@dataclass(frozen=True)
class ParcelSpec:
    """Where the parcel ids are (config ``data.split.parcels``; see the module docstring).

    Args:
        source: ``raster``, ``components`` or ``column``.
        layer: The raster's entry (``{file, variable}`` / ``{file, band}``; its keys are
            checked by the reader); empty for ``components`` of the label raster and for
            ``column``.
        connectivity: ``components``: 4 or 8 (neighbours that join a region).
        column: ``column``: the parcel-id column(s) of a table.

    Raises:
        ValueError: On an unknown source, a bad connectivity, or keys that do not go with
            the source (naming the value and the fix).
    """

    source: str
    layer: Mapping[str, Any] = field(default_factory=dict)
    connectivity: int = 4
    column: str | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.source not in PARCEL_SOURCES:
            raise ValueError(f"data.split.parcels.source must be one of {list(PARCEL_SOURCES)}, got {self.source!r}.")
        if self.connectivity not in CONNECTIVITY:
            raise ValueError(
                f"data.split.parcels.connectivity must be 4 (edge neighbours) or 8 (also diagonal ones), got "
                f"{self.connectivity!r}."
            )
        if self.source == "raster" and not self.layer.get("file"):
            raise ValueError(
                "data.split.parcels.source=raster needs data.split.parcels.file (with variable for a datacube, band "
                "for a GeoTIFF); for parcels as connected regions of the label raster set "
                "data.split.parcels={source: components}."
            )
        if self.source == "column" and not self.column:
            raise ValueError("data.split.parcels.source=column needs data.split.parcels.column (the parcel-id column).")
        if self.source != "column" and self.column:
            raise ValueError(
                f"data.split.parcels.column is read by source=column (tables) only, but source={self.source}."
            )

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, kind: Literal["scenes", "tables"]) -> ParcelSpec | None:
        """From ``data.split.parcels`` (None or empty: no parcels).

        Args:
            cfg: The mapping.
            kind: ``scenes`` (sources ``raster``, ``components``) or ``tables`` (``column``).

        Raises:
            ValueError: If ``cfg`` is not a mapping, or its source does not fit ``kind``.
        """
        if not cfg:
            return None
        if not isinstance(cfg, Mapping):
            raise ValueError(
                f"data.split.parcels must be a mapping ({{source: components}}, {{file, variable|band}} of a parcel "
                f"raster, or {{column: parcel_id}} of a table), got {cfg!r}."
            )
        values = {str(k): v for k, v in cfg.items()}
        default = "column" if "column" in values else "raster" if values.get("file") else None
        source = values.pop("source", None) or default
        if source is None:
            raise ValueError(
                f"data.split.parcels={values} names no source: set source: components (connected regions of the "
                "label raster), a parcel raster {file, variable|band}, or a table's {column: parcel_id}."
            )
        valid = SCENE_SOURCES if kind == "scenes" else ("column",)
        if source not in PARCEL_SOURCES:
            raise ValueError(f"data.split.parcels.source must be one of {list(PARCEL_SOURCES)}, got {source!r}.")
        if source not in valid:
            raise ValueError(f"data.split.parcels.source={source!r} does not apply to {kind} (valid: {list(valid)}).")
        connectivity = int(values.pop("connectivity", 4))
        column = values.pop("column", None)
        if kind == "tables" and values:
            raise ValueError(
                f"data.split.parcels of a table has unknown key(s) {sorted(values)}; its keys are source, column."
            )
        if isinstance(column, str) or column is None:
            col: str | tuple[str, ...] | None = column
        else:
            col = tuple(str(c) for c in column)
        layer = {k: v for k, v in values.items() if v is not None}
        return cls(str(source), layer, connectivity, col)

    def columns(self) -> list[str]:
        """The parcel-id column(s) of ``source=column``."""
        if self.column is None:
            return []
        return [self.column] if isinstance(self.column, str) else list(self.column)


def no_parcel(values: np.ndarray, fill: float | None) -> np.ndarray:
    """``(H, W) bool``: pixels without a parcel (0, NaN, or the raster's no-data ``fill``)."""
    out = values == 0
    if values.dtype.kind == "f":
        out |= ~np.isfinite(values)
    if fill is not None:
        out |= values == fill
    return np.asarray(out)


def connected_components(values: np.ndarray, fill: float | None = None, connectivity: int = 4) -> np.ndarray:
    """Number the connected regions of equal value of a raster.

    Args:
        values: ``(H, W)`` codes (a label raster: one code per crop type).
        fill: The raster's no-data value (no parcel), or None.
        connectivity: 4 (edge neighbours) or 8 (also diagonal neighbours).

    Returns:
        ``(H, W) int64`` region ids ``1..n`` (0 = no parcel: 0, NaN or ``fill``), numbered
        by code (ascending) and, within a code, in row-major order of their first pixel.

    Raises:
        ValueError: On a connectivity other than 4 or 8.
    """
    from scipy import ndimage

    if connectivity not in CONNECTIVITY:
        raise ValueError(f"connectivity must be 4 or 8, got {connectivity!r}.")
    structure = ndimage.generate_binary_structure(2, 1 if connectivity == 4 else 2)
    values = np.asarray(values)
    valid = ~no_parcel(values, fill)
    out = np.zeros(values.shape, np.int64)
    offset = 0
    for code in np.unique(values[valid]).tolist():
        regions, n = ndimage.label(valid & (values == code), structure=structure)
        where = regions > 0
        out[where] = regions[where] + offset
        offset += int(n)
    return out


class ComponentsLayer(RasterLayer):
    """Parcel ids as the connected regions of equal value of another layer (``source: components``).

    The regions are found once over the whole raster (a window would cut parcels) on the
    first read and kept.

    Args:
        base: The layer (the label raster, usually).
        connectivity: 4 or 8.
    """

    def __init__(self, base: RasterLayer, connectivity: int = 4) -> None:
        self.base = base
        self.connectivity = int(connectivity)
        self.grid = base.grid
        self.name = f"connected regions ({self.connectivity}-connected) of {base.name}"
        self.fill = None
        self._ids: np.ndarray | None = None

    def read_slab(self, rows: slice, cols: slice) -> np.ndarray:
        """``(rows, cols)`` region ids (0 = no parcel)."""
        if self._ids is None:
            whole = self.base.read_slab(slice(0, self.grid.height), slice(0, self.grid.width))
            self._ids = connected_components(whole, self.base.fill, self.connectivity)
        return self._ids[rows, cols]


def scene_parcel_index(scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """The parcel of every pixel of a scene, as an index.

    Returns:
        ``(index, values)``: ``(H, W) int64`` position of each pixel's parcel in ``values``
        (:data:`NO_PARCEL` = none) and the parcel ids, ascending.

    Raises:
        ValueError: If the scene has no parcel layer.
    """
    parcels = scene.read_parcels()
    if parcels is None or scene.parcels is None:
        raise ValueError(
            f"Scene {scene.name} has no parcel ids: set data.split.parcels ({{source: components}} for the connected "
            "regions of the label raster, or {file, variable|band} of a parcel raster)."
        )
    valid = ~no_parcel(parcels, scene.parcels.fill)
    values, inverse = np.unique(parcels[valid], return_inverse=True)
    index = np.full(parcels.shape, NO_PARCEL, np.int64)
    index[valid] = inverse
    return index, values


def parcel_name(scene: str, value: Any) -> str:
    """The name of parcel ``value`` of scene ``scene`` (``scene <name> parcel <id>``)."""
    return f"scene {scene} parcel {value:g}" if isinstance(value, (int, float)) else f"scene {scene} parcel {value}"


def global_parcel_index(scenes: Sequence[Scene]) -> tuple[list[np.ndarray], list[str]]:
    """Parcels of several scenes numbered together (a parcel id is a parcel of one scene).

    Returns:
        ``(index, names)``: per scene ``(H, W) int64`` global parcel index
        (:data:`NO_PARCEL` = none) and the name of every index.
    """
    out: list[np.ndarray] = []
    names: list[str] = []
    for scene in scenes:
        index, values = scene_parcel_index(scene)
        out.append(np.where(index >= 0, index + len(names), NO_PARCEL))
        names += [parcel_name(scene.name, v) for v in values.tolist()]
    return out, names


__all__ = [
    "CONNECTIVITY",
    "NO_PARCEL",
    "PARCEL_SOURCES",
    "ComponentsLayer",
    "ParcelSpec",
    "connected_components",
    "global_parcel_index",
    "no_parcel",
    "parcel_name",
    "scene_parcel_index",
]
