"""The PASTIS-R file layout: paths, acquisition dates, ``metadata.geojson``, file checks.

Layout under ``root`` (Garnot et al., "Multi-modal temporal attention models for crop
mapping from satellite time series", ISPRS 2022; the PASTIS-R dataset)::

    root/
      metadata.geojson            one feature per patch: ID_PATCH, Fold, dates-S2,
                                  dates-S1A, dates-S1D (acquisition dates, YYYYMMDD)
      DATA_S2/S2_{id}.npy         (T, 10, H, W) Sentinel-2 surface reflectance
      DATA_S1A/S1A_{id}.npy       (T, 3, H, W) Sentinel-1 ascending orbit backscatter
      DATA_S1D/S1D_{id}.npy       (T, 3, H, W) Sentinel-1 descending orbit backscatter
      ANNOTATIONS/TARGET_{id}.npy (3, H, W) or (H, W); channel 0 = semantic class
      NORM_S1S2_folds_1-2-3.json  normalisation statistics cache (written by data=pastis)

Only the folders of the requested modalities need to exist. In the real PASTIS-R
``metadata.geojson`` the dates are JSON objects ``{"0": 20180924, "1": 20180929, ...}``
(sometimes serialised as a string); plain lists ``[20180924, ...]`` work too. Dates
become ``doy``: days since a reference date (PASTIS: 2018-09-01), which may exceed 365
(the PASTIS season spans Sep 2018 - Nov 2019) and never wraps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.batch import ORBIT_MODALITIES, check_modalities
from mtan_s1s2.data.dates import as_datetimes, check_increasing, days_since

PASTIS_MODALITIES: dict[str, tuple[str, str, str]] = {
    "s2": ("DATA_S2", "S2", "dates-S2"),
    "s1_asc": ("DATA_S1A", "S1A", "dates-S1A"),
    "s1_desc": ("DATA_S1D", "S1D", "dates-S1D"),
}
"""Our modality name -> (folder, file prefix, metadata date key) in the PASTIS-R layout."""

PASTIS_NAMES: dict[str, str] = {"S2": "s2", "S1A": "s1_asc", "S1D": "s1_desc"}
"""PASTIS-R modality names accepted in ``data.modalities``, and ours they map to."""

PASTIS_REFERENCE_DATE = "2018-09-01"
"""Start of the PASTIS season, the default reference date."""

METADATA_FILE = "metadata.geojson"
LABEL_FOLDER, LABEL_PREFIX = "ANNOTATIONS", "TARGET"


def modality_path(root: Path, modality: str, patch_id: int) -> Path:
    """``root/DATA_S2/S2_{id}.npy`` (or the S1A/S1D equivalent) of one patch."""
    folder, prefix, _ = PASTIS_MODALITIES[modality]
    return Path(root) / folder / f"{prefix}_{patch_id}.npy"


def label_path(root: Path, patch_id: int) -> Path:
    """``root/ANNOTATIONS/TARGET_{id}.npy`` of one patch."""
    return Path(root) / LABEL_FOLDER / f"{LABEL_PREFIX}_{patch_id}.npy"


def parse_date_list(value: Any) -> np.ndarray:
    """Acquisition dates of one modality from a ``metadata.geojson`` property.

    Accepts the PASTIS-R form, a JSON object ``{"0": 20180924, "1": 20180929, ...}``
    (ordered by its integer keys), the same object serialised as a string, or a plain list
    ``[20180924, ...]``. Each date is read by :func:`~mtan_s1s2.data.dates.parse_datetime`
    (``YYYYMMDD``, ``YYYY-MM-DD``, optionally with a time of day) and the series must be
    strictly increasing (:func:`~mtan_s1s2.data.dates.check_increasing`).

    Returns:
        ``(T,) datetime64[s]``.

    Raises:
        ValueError: If the value has none of these forms, holds an invalid date, or repeats
            a date or is out of order (naming the index keys and the dates).
    """
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, Mapping):
        try:
            items = sorted(value.items(), key=lambda kv: int(kv[0]))
        except ValueError:
            raise ValueError(f"date keys must be integer indices like '0', '1', ...; got {list(value)[:3]}") from None
        value = [v for _, v in items]
    if not isinstance(value, Sequence):
        raise ValueError(f"expected a list or an index->date object of YYYYMMDD dates, got {type(value).__name__}")
    dates = as_datetimes(list(value), "dates")
    check_increasing(dates, "dates", name=lambda i: f"index {i}")
    return dates


@dataclass(frozen=True)
class PatchRecord:
    """One patch of ``metadata.geojson``.

    Attributes:
        patch_id: ``ID_PATCH``.
        fold: ``Fold``.
        doy: Per modality, ``(T,) float32`` days since the reference date.
        dates: Per modality, ``(T,) datetime64[s]`` acquisition dates.
    """

    patch_id: int
    fold: int
    doy: dict[str, np.ndarray]
    dates: dict[str, np.ndarray]


def read_metadata(root: Path, modalities: Sequence[str], reference_date: np.datetime64) -> list[PatchRecord]:
    """Read ``metadata.geojson``: patch ids, folds and the dates of ``modalities``.

    Args:
        root: Dataset folder.
        modalities: Our modality names (``"s2"``, ``"s1_asc"``, ``"s1_desc"``).
        reference_date: Day 0 of ``doy``.

    Returns:
        The patches in file order.

    Raises:
        ValueError: If a feature lacks ``ID_PATCH``, ``Fold`` or a date key, or holds an
            invalid date; the message names the patch and the key.
    """
    path = Path(root) / METADATA_FILE
    with open(path) as f:
        meta = json.load(f)
    features = meta.get("features") if isinstance(meta, Mapping) else None
    if not isinstance(features, list):
        raise ValueError(f"{path} is not a GeoJSON FeatureCollection (no 'features' list).")
    records: list[PatchRecord] = []
    seen: set[int] = set()
    for n, feature in enumerate(features):
        props = feature.get("properties") or {}
        for key in ("ID_PATCH", "Fold"):
            if key not in props:
                raise ValueError(f"Feature {n} of {path} has no {key!r} property; every patch needs ID_PATCH and Fold.")
        try:
            patch_id, fold = int(props["ID_PATCH"]), int(props["Fold"])
        except (TypeError, ValueError):
            raise ValueError(
                f"Feature {n} of {path}: ID_PATCH={props['ID_PATCH']!r} and Fold={props['Fold']!r} must be integers."
            ) from None
        if patch_id in seen:
            raise ValueError(f"ID_PATCH={patch_id} appears twice in {path}.")
        seen.add(patch_id)
        doy: dict[str, np.ndarray] = {}
        days: dict[str, np.ndarray] = {}
        for m in modalities:
            key = PASTIS_MODALITIES[m][2]
            if key not in props:
                raise ValueError(
                    f"Patch {patch_id} in {path} has no {key!r} property (dates of modality {m!r}); "
                    f"it has {sorted(props)}. Remove {m!r} from data.modalities or add its dates."
                )
            try:
                dates = parse_date_list(props[key])
            except (ValueError, json.JSONDecodeError) as err:
                raise ValueError(f"Patch {patch_id} in {path}, {key!r}: {err}") from None
            doy[m] = days_since(dates, reference_date)
            days[m] = dates
        records.append(PatchRecord(patch_id, fold, doy, days))
    return records


def read_footprints(root: Path) -> tuple[str | None, dict[int, tuple[float, float, float, float]]]:
    """The CRS and the footprint bounds of every patch in ``metadata.geojson``.

    Returns:
        ``(crs, bounds)``: the collection's CRS (e.g. ``urn:ogc:def:crs:EPSG::2154`` or
        None) and ``ID_PATCH -> (left, bottom, right, top)`` of each feature's geometry
        (patches without a geometry are left out).
    """
    with open(Path(root) / METADATA_FILE) as f:
        meta = json.load(f)
    crs = ((meta.get("crs") or {}).get("properties") or {}).get("name")
    out: dict[int, tuple[float, float, float, float]] = {}
    for feature in meta.get("features") or []:
        geom = feature.get("geometry") or {}
        pid = (feature.get("properties") or {}).get("ID_PATCH")
        coords = np.asarray(_flatten(geom.get("coordinates")), np.float64).reshape(-1, 2)
        if pid is None or coords.size == 0:
            continue
        out[int(pid)] = (coords[:, 0].min(), coords[:, 1].min(), coords[:, 0].max(), coords[:, 1].max())
    return crs, out


def _flatten(value: Any) -> list[float]:
    if value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    out: list[float] = []
    for v in value:
        out += _flatten(v)
    return out


def resolve_modalities(modalities: Sequence[str]) -> list[str]:
    """Map PASTIS-R names (``S2``, ``S1A``, ``S1D``) to ours and validate (order kept).

    Raises:
        ValueError: On a string, an empty list, duplicates or an unknown name.
    """
    return check_modalities(modalities, aliases=PASTIS_NAMES, valid=ORBIT_MODALITIES)


def check_root(root: str | Path | None, modalities: Sequence[str], labels: bool = True) -> Path:
    """Validate the dataset folder before anything is read.

    Args:
        root: The dataset folder.
        modalities: Modalities to read.
        labels: Whether ``ANNOTATIONS/`` is needed (training, evaluation).

    Raises:
        ValueError: If ``root`` is unset, has no ``metadata.geojson`` (or ``ANNOTATIONS``
            when ``labels``), or lacks the folder of a requested modality (torchgeo
            ``DatasetNotFoundError`` style: what is missing, where, and the fix).
    """
    if root is None or str(root) in ("", "???"):
        raise ValueError(
            "data.root is not set: give the folder of a PASTIS-R-format dataset, e.g. "
            "`python train.py data=pastis data.root=/data/PASTIS-R`, or set the PASTIS_ROOT "
            "environment variable. To make a small one: `python scripts/make_pastis_dataset.py /tmp/pastis_synth`."
        )
    path = Path(root).expanduser().absolute()
    if not (path / METADATA_FILE).is_file():
        raise ValueError(
            f"PASTIS-R dataset not found in data.root={str(path)!r}: there is no {METADATA_FILE} "
            f"(expected {METADATA_FILE}, {LABEL_FOLDER}/ and DATA_S2/, DATA_S1A/, DATA_S1D/). Either "
            "specify a different data.root or write a small dataset with "
            "`python scripts/make_pastis_dataset.py <folder>`."
        )
    needed = [*([LABEL_FOLDER] if labels else []), *(PASTIS_MODALITIES[m][0] for m in modalities)]
    missing = [f for f in needed if not (path / f).is_dir()]
    if missing:
        present = sorted(p.name for p in path.iterdir() if p.is_dir())
        raise ValueError(
            f"Folder {missing[0]}/ not found in data.root={str(path)!r} (it has {present}); it is needed "
            f"for data.modalities={list(modalities)}. Set data.modalities to the modalities you have "
            "(e.g. data.modalities=[s2]) or fix data.root."
        )
    return path


def npy_shape(path: Path) -> tuple[int, ...]:
    """Shape of a ``.npy`` file; memory-mapped, so no pixel is read."""
    try:
        return tuple(int(n) for n in np.load(path, mmap_mode="r").shape)
    except (ValueError, OSError) as err:
        raise ValueError(f"{path} is not a readable .npy array ({err}).") from None


def scan_patches(
    root: Path, records: Sequence[PatchRecord], modalities: Sequence[str], labels: bool = True
) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """Check every file of ``records`` from its header: presence, shape, dates, bands.

    With ``labels=False`` the label files are not looked at (prediction) and each patch's
    size is that of its first modality's array.

    Returns:
        ``(in_channels, sizes)``: channels per modality (from the files) and each patch's
        ``(H, W)``.

    Raises:
        ValueError: On a missing file, a wrong number of dimensions, a patch whose date
            count disagrees with its array, band counts that differ between patches, or
            modalities and labels of different sizes; the message names the file.
    """
    in_channels: dict[str, int] = {}
    sizes: list[tuple[int, int]] = []
    for rec in records:
        if labels:
            lpath = label_path(root, rec.patch_id)
            if not lpath.is_file():
                raise ValueError(f"Label file {lpath} of patch {rec.patch_id} (listed in {METADATA_FILE}) is missing.")
            lshape = npy_shape(lpath)
            if len(lshape) not in (2, 3):
                raise ValueError(
                    f"{lpath} has shape {lshape}; expected (H, W) or (C, H, W) with the semantic class first."
                )
            hw = lshape[-2:]
        else:
            hw = npy_shape(modality_path(root, modalities[0], rec.patch_id))[-2:]
        for m in modalities:
            path = modality_path(root, m, rec.patch_id)
            if not path.is_file():
                raise ValueError(
                    f"{path} of patch {rec.patch_id} (listed in {METADATA_FILE}) is missing; every patch "
                    f"needs a file per modality of data.modalities={list(modalities)}."
                )
            shape = npy_shape(path)
            if len(shape) != 4:
                raise ValueError(f"{path} has shape {shape}; expected (T, C, H, W).")
            t, c = shape[0], shape[1]
            n_dates = rec.doy[m].shape[0]
            if t != n_dates:
                raise ValueError(
                    f"Patch {rec.patch_id}: {path.name} has T={t} acquisitions but {METADATA_FILE} lists "
                    f"{n_dates} dates in {PASTIS_MODALITIES[m][2]!r}; the array and its dates must agree."
                )
            if in_channels.setdefault(m, c) != c:
                raise ValueError(
                    f"Patch {rec.patch_id}: {path.name} has C={c} bands but earlier {m} patches have "
                    f"{in_channels[m]}; every patch of a modality needs the same bands."
                )
            if shape[2:] != hw:
                what = "its label" if labels else f"its {modalities[0]} array"
                raise ValueError(f"Patch {rec.patch_id}: {path.name} is {shape[2:]} pixels but {what} is {hw}.")
        sizes.append((int(hw[0]), int(hw[1])))
    return in_channels, sizes


def describe(records: Sequence[PatchRecord], sizes: Sequence[tuple[int, int]], in_channels: Mapping[str, int]) -> str:
    """Patches, sizes, bands and date ranges per fold, as text."""
    lines = []
    for fold in sorted({r.fold for r in records}):
        idx = [i for i, r in enumerate(records) if r.fold == fold]
        lines.append(f"  fold {fold}: {len(idx)} patches, sizes {sorted({sizes[i] for i in idx})}")
        for m, c in in_channels.items():
            counts = [records[i].doy[m].shape[0] for i in idx]
            days = np.concatenate([records[i].doy[m] for i in idx])
            span = f"days {days.min():g} to {days.max():g}" if days.size else "no dates"
            lines.append(f"    {m:7s}: C={c}, T={min(counts)}-{max(counts)}, {span}")
    return "\n".join(lines)


__all__ = [
    "LABEL_FOLDER",
    "LABEL_PREFIX",
    "METADATA_FILE",
    "PASTIS_MODALITIES",
    "PASTIS_NAMES",
    "PASTIS_REFERENCE_DATE",
    "PatchRecord",
    "check_root",
    "describe",
    "label_path",
    "modality_path",
    "npy_shape",
    "parse_date_list",
    "read_footprints",
    "read_metadata",
    "resolve_modalities",
    "scan_patches",
]
