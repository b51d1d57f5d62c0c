"""Scene folders -> :class:`~mtan_s1s2.data.scene.scene.Scene`: the steps every raster reader shares.

A raster source (``data=datacube``, ``data=geotiff``) is one folder per scene. What is the
same for every reader lives here:

* :func:`scene_folders`: the scene folders of ``data.root`` / ``data.scenes``;
* :func:`find_files` / :func:`one_file`: the files of a scene folder matching a config glob;
* :class:`SceneSources`: the ``data.*`` keys that say what to read from each folder
  (modalities, ``sources``, ``label``, ``split.parcels``, ``reference_date``,
  ``radiometry``, ``grid.resolution``);
* :func:`check_keys`: unknown keys of a ``data.sources`` / layer entry;
* :func:`open_scene_folder`: checks the folder and each modality's ``data.sources`` entry,
  then asks a :class:`FolderReader` (what differs between readers: how a modality's series
  and a single-band layer are opened from its files) for the series and the label and
  parcel layers, and assembles the scene. A modality marked ``optional: true`` in
  ``data.sources`` whose file patterns match nothing in a scene folder is an
  :class:`~mtan_s1s2.data.scene.scene.AbsentSeries` there (no observation of it), not an error.
"""

from __future__ import annotations

import glob
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mtan_s1s2.data.dates import resolve_reference_date
from mtan_s1s2.data.parcels import ComponentsLayer, ParcelSpec
from mtan_s1s2.data.radiometry import RADIOMETRY_KEYS
from mtan_s1s2.data.scene.scene import AbsentSeries, ModalitySeries, RasterLayer, Scene

log = logging.getLogger(__name__)

UNSET_ROOT = (None, "", "???")
"""Values of ``data.root`` that mean it is not set (``???``: Hydra's mandatory marker)."""


def scene_folders(root: str | Path | None, scenes: Sequence[str] | str | None, scene_glob: str = "*") -> list[Path]:
    """The scene folders: ``scenes`` (names under ``root``, or paths), else ``root``'s subfolders.

    Args:
        root: Folder of the scenes (``data.root``).
        scenes: Scene folder names (relative to ``root``) or paths; None = every
            subfolder of ``root`` matching ``scene_glob`` (``root`` itself if it has none).
        scene_glob: Pattern of the scene folders under ``root``.

    Raises:
        ValueError: If neither is set, or a folder is missing (naming where it looked, and
            the subfolder of ``root`` that holds it, if one does).
    """
    if isinstance(scenes, str):
        scenes = [scenes]
    if scenes:
        base = Path(root).expanduser() if root not in UNSET_ROOT else None
        out = []
        for s in scenes:
            p = Path(str(s)).expanduser()
            if not p.is_absolute() and base is not None:
                p = base / p
            if not p.is_dir():
                # a root one level too high (the folder above the scenes' folder) is the usual slip
                below = sorted(q for q in base.iterdir() if (q / p.name).is_dir()) if base and base.is_dir() else []
                raise ValueError(
                    f"Scene folder not found: {p.resolve()} (data.scenes entry {s!r}"
                    + (f", under data.root={str(root)!r}" if base is not None else "")
                    + ")."
                    + (
                        f" It is in {below[0]}: set data.root={below[0]} (or the variable "
                        "the data preset reads it from, e.g. WORLDCEREAL_ROOT)."
                        if below
                        else ""
                    )
                )
            out.append(p)
        return out
    if root in UNSET_ROOT:
        raise ValueError(
            "data.root is not set: give the folder holding one subfolder per scene (or a scene's own folder), "
            "or list the scene folders in data.scenes."
        )
    base = Path(str(root)).expanduser()
    if not base.is_dir():
        raise ValueError(f"data.root={str(root)!r} is not a folder ({base.resolve()} does not exist).")
    subs = sorted(p for p in base.glob(scene_glob) if p.is_dir() and not p.name.startswith("."))
    return subs or [base]


def matching(root: Path, pattern: str) -> list[Path]:
    """The files matching one glob ``pattern`` (relative to ``root`` or absolute), sorted."""
    full = pattern if Path(pattern).is_absolute() else str(root / pattern)
    return sorted(Path(p) for p in glob.glob(full))


def find_files(root: Path, patterns: str | Sequence[str], what: str) -> list[Path]:
    """Files matching glob ``patterns`` (relative to ``root`` or absolute), sorted.

    Raises:
        ValueError: If a pattern matches nothing (naming the folder and what it holds).
    """
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    if not pats:
        raise ValueError(f"{what}: no file pattern given.")
    out: list[Path] = []
    for pat in pats:
        found = matching(root, pat)
        if not found:
            held = sorted(p.name for p in root.iterdir())[:12] if root.is_dir() else []
            raise ValueError(
                f"{what}: no file matches {pat!r} in {root.resolve()} (it holds {held}). Fix the pattern "
                "or the scene folder."
            )
        out += [p for p in found if p not in out]
    return out


def one_file(folder: Path, pattern: str, key: str) -> Path:
    """The one file of ``folder`` matching ``pattern`` (config key ``key``).

    Raises:
        ValueError: If the pattern matches no file or several.
    """
    paths = find_files(folder, pattern, key)
    if len(paths) > 1:
        raise ValueError(f"{key}={pattern!r} matches {len(paths)} files in {folder.resolve()}; match one.")
    return paths[0]


def check_keys(cfg: Mapping[str, Any], allowed: Sequence[str], key: str, declared_note: str = "") -> None:
    """Refuse keys of config entry ``key`` that are not in ``allowed``.

    Args:
        cfg: The entry.
        allowed: Its valid keys.
        key: Its config key (``data.sources.s2``, ``data.labels``).
        declared_note: What the files declare themselves, added to the hint when a
            radiometry key (``nodata``, ``scale``, ...) is misplaced in the entry.

    Raises:
        ValueError: Naming the unknown keys and the valid ones (and, for a radiometry
            key, where it belongs: ``data.radiometry.<modality>``).
    """
    unknown = sorted(set(cfg) - set(allowed))
    if not unknown:
        return
    hint = ""
    if set(unknown) & set(RADIOMETRY_KEYS):
        modality = key.rsplit(".", 1)[-1]
        hint = f" No-data values, scale and units are radiometry: data.radiometry.{modality}.nodata=[...]"
        hint += f" ({declared_note})." if declared_note else "."
    raise ValueError(f"{key} has unknown key(s) {unknown}; valid keys are {list(allowed)}.{hint}")


@dataclass(frozen=True)
class SceneSources:
    """What to read from every scene folder: the ``data.*`` keys all raster readers share.

    Args:
        modalities: Modalities to read (keys of ``sources``), in order.
        sources: Per modality, the reader's entry (files or layout, bands, quality/mask).
        reference_date: Day 0 of ``doy`` (a date, or ``attr:<name>`` where the reader has
            scene attributes).
        label: The label layer's entry (``{file, variable}`` or ``{file, band}``), or None
            (prediction only).
        parcels: The parcel-id layer's entry (``data.split.parcels``), or None.
        radiometry: ``data.radiometry``: per modality overrides of the reader's radiometry.
        resolution: Pixel size of the scene grid (None: the finest raster's).
        snap: Read rasters off the scene grid by more than a quarter pixel, snapped
            (``data.grid.snap``), instead of refusing them.
        label_shift: ``(rows, cols)`` the label and parcel rasters are moved south and east
            against the imagery (``data.grid.label_shift``; :attr:`Scene.label_shift`).
    """

    modalities: tuple[str, ...]
    sources: Mapping[str, Mapping[str, Any]]
    reference_date: Any = None
    label: Mapping[str, Any] | None = None
    parcels: Mapping[str, Any] | None = None
    radiometry: Mapping[str, Any] = field(default_factory=dict)
    resolution: float | None = None
    snap: bool = False
    label_shift: tuple[int, int] = (0, 0)


class FolderReader(ABC):
    """How one reader opens the files of one scene folder (what differs between readers).

    Args:
        folder: The scene folder; the config's file patterns are relative to it.

    Attributes:
        source_keys: Valid keys of a ``data.sources.<modality>`` entry.
        layer_keys: Valid keys of the label raster's (``data.labels.file`` + ``variable`` / ``band``) and the
            ``data.split.parcels`` entries.
        declared_note: What the files declare of their radiometry themselves (for the
            hint on a misplaced radiometry key).
    """

    source_keys: ClassVar[tuple[str, ...]]
    layer_keys: ClassVar[tuple[str, ...]]
    file_keys: ClassVar[tuple[str, ...]] = ("files",)
    declared_note: ClassVar[str] = ""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def missing_files(self, spec: Mapping[str, Any]) -> list[str]:
        """The file patterns of a ``data.sources`` entry (its :attr:`file_keys`) that match no file here."""
        out: list[str] = []
        for k in self.file_keys:
            value = spec.get(k)
            if not value:
                continue
            out += [str(p) for p in ([value] if isinstance(value, str) else value) if not matching(self.folder, str(p))]
        return out

    @abstractmethod
    def open_series(
        self, modality: str, spec: Mapping[str, Any], key: str, radiometry: Mapping[str, Any] | None
    ) -> ModalitySeries:
        """The series of ``modality`` from its ``data.sources`` entry ``spec`` (keys checked).

        Args:
            modality: ``s2``, ``s1_asc``, ...
            spec: Its ``data.sources`` entry.
            key: Config key of ``spec``, for messages (``data.sources.<modality>``).
            radiometry: Its ``data.radiometry`` overrides, or None (applied over what the
                files declare with :func:`~mtan_s1s2.data.radiometry.file_radiometry`).
        """

    @abstractmethod
    def open_layer(self, spec: Mapping[str, Any], key: str) -> RasterLayer:
        """A single-band layer (label codes, parcel ids) from a non-empty entry (keys checked)."""

    def attrs(self) -> dict[str, Any]:
        """Attributes of the scene (``attr:<name>`` reference dates); none by default."""
        return {}


def _layer(reader: FolderReader, spec: Mapping[str, Any] | None, key: str) -> RasterLayer | None:
    if not spec:
        return None
    check_keys(spec, reader.layer_keys, key)
    return reader.open_layer(spec, key)


def _parcel_layer(reader: FolderReader, sources: SceneSources, label: RasterLayer | None) -> RasterLayer | None:
    """The parcel layer of ``data.split.parcels`` (:mod:`mtan_s1s2.data.parcels`), or None.

    Raises:
        ValueError: On a bad entry, or ``source: components`` without a raster to take them from.
    """
    spec = ParcelSpec.from_config(sources.parcels, "scenes")
    if spec is None:
        return None
    key = "data.split.parcels"
    if spec.source == "raster":
        return _layer(reader, spec.layer, key)
    base = _layer(reader, spec.layer, key) if spec.layer else label
    if base is None:
        raise ValueError(
            f"data.split.parcels.source=components takes the parcels from the label raster, but scene "
            f"{reader.folder.name} has none (data.labels.file is null): set data.labels.file, or give the raster "
            "of the regions in data.split.parcels.file (with variable or band)."
        )
    return ComponentsLayer(base, spec.connectivity)


def open_scene_folder(reader: FolderReader, sources: SceneSources) -> Scene:
    """Open one scene folder with ``reader`` (no pixel is read).

    A modality whose entry has ``optional: true`` and one of whose file patterns (the
    reader's :attr:`FolderReader.file_keys`) matches no file in the folder is read as an
    :class:`~mtan_s1s2.data.scene.scene.AbsentSeries`: the scene's pixels have no observation
    of it (the 10 m Sentinel-2 bands of WorldCereal patches, present in some only).

    Raises:
        ValueError: If the folder does not exist, a modality has no ``data.sources`` entry,
            an entry has unknown keys, a scene has the files of no modality, or on any error
            of the reader or of the scene grid (files, bands, dates, CRSs, overlap), each
            naming the files and config key.
    """
    folder = reader.folder
    if not folder.is_dir():
        raise ValueError(f"Scene folder not found: {folder.resolve()}; set data.root / data.scenes.")
    series: dict[str, ModalitySeries] = {}
    for m in sources.modalities:
        if m not in sources.sources:
            raise ValueError(
                f"data.modalities has {m!r} but data.sources has no entry for it (it has {sorted(sources.sources)})."
            )
        spec, key = dict(sources.sources[m]), f"data.sources.{m}"
        optional = spec.pop("optional", False)
        check_keys(spec, (*reader.source_keys, "optional"), key, reader.declared_note)
        if not isinstance(optional, bool):
            raise ValueError(f"{key}.optional must be true or false, got {optional!r}.")
        missing = reader.missing_files(spec) if optional else []
        if missing:
            if not spec.get("bands"):
                raise ValueError(f"{key}.bands is empty: an optional modality needs its bands, e.g. [B02, B03].")
            log.info("Scene %s: optional modality %s is absent (no file matches %s).", folder.name, m, missing)
            series[m] = AbsentSeries(m, tuple(str(b) for b in spec["bands"]), tuple(missing))
        else:
            series[m] = reader.open_series(m, spec, key, sources.radiometry.get(m))
    if series and all(s.absent for s in series.values()):
        raise ValueError(
            f"Scene {folder.name} ({folder.resolve()}) has the files of none of its modalities "
            f"({'; '.join(src for s in series.values() for src in s.sources)}); leave it out of data.scenes."
        )
    label = _layer(reader, sources.label, "data.labels")
    parcels = _parcel_layer(reader, sources, label)
    attrs = reader.attrs()
    ref = resolve_reference_date(sources.reference_date, attrs, where=f"scene {folder.name} ({folder.resolve()})")
    return Scene(
        name=folder.name, series=series, reference_date=ref, label=label, parcels=parcels,
        resolution=sources.resolution, snap=sources.snap, label_shift=sources.label_shift, root=folder.resolve(),
        attrs=attrs,
    )  # fmt: skip


__all__ = [
    "FolderReader",
    "SceneSources",
    "check_keys",
    "find_files",
    "one_file",
    "open_scene_folder",
    "scene_folders",
]
