"""Write synthetic S1/S2 patches as a small PASTIS-R-format dataset.

The patches are exactly those of :class:`~mtan_s1s2.data.synthetic.datamodule.SyntheticSITSDataModule`
with the same preset, sizes and seed: train patch ``i`` is the synthetic train sample
``i``, and so on. Splits become folds: the train patches are spread over
``train_folds`` (default 1, 2, 3, round robin), val patches get fold 4, test patches
fold 5, so the default ``data.split.folds`` of ``data=pastis`` selects the same splits. Patch ids
are consecutive from 10000, in train, val, test order.

What the format cannot hold:

* **Dates** are whole days (``YYYYMMDD``): synthetic dates carry an overpass time of
  day, so the reader returns ``floor(doy)``. Day 0 is ``start_date`` (default
  2021-01-01, so ``data.reference_date=2021-01-01`` gives back the synthetic DOY).
* **Masks**: PASTIS-R has none. With ``invalid_as_nan=True`` (default) every invalid
  observation (cloud, shadow, no-data) is written as NaN, so the reader's no-data mask is
  exactly the synthetic mask. With ``False`` the cloudy values stay as generated (like real
  PASTIS-R, clouds included) and only the NaN no-data stripes and borders are masked.

Labels are the synthetic classes (0 = unlabelled, 1-10), in ``TARGET`` channel 0;
channels 1 and 2 (PASTIS-R's instance annotations) are zero. Read them with
``data=pastis_synthetic`` (the synthetic class names, label 0 ignored, reference date
2021-01-01).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mtan_s1s2.data.pastis.layout import LABEL_FOLDER, METADATA_FILE, PASTIS_MODALITIES, label_path, modality_path
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule
from mtan_s1s2.data.synthetic.generator import PRESETS

FIRST_PATCH_ID = 10000
SYNTHETIC_START_DATE = dt.date(2021, 1, 1)


def _yyyymmdd(start: dt.date, days: np.ndarray) -> list[int]:
    out = []
    for d in np.floor(days).astype(int):
        day = start + dt.timedelta(days=int(d))
        out.append(day.year * 10000 + day.month * 100 + day.day)
    return out


def _polygon(index: int, size: int) -> dict[str, Any]:
    """A square footprint (10 m pixels) on a grid, in Lambert-93 metres like PASTIS."""
    x0 = 700000.0 + (index % 50) * size * 10.0
    y0 = 6600000.0 + (index // 50) * size * 10.0
    side = size * 10.0
    ring = [[x0, y0], [x0 + side, y0], [x0 + side, y0 + side], [x0, y0 + side], [x0, y0]]
    return {"type": "Polygon", "coordinates": [ring]}


def write_pastis_dataset(
    root: str | Path,
    preset: str = "tiny",
    n_train: int | None = None,
    n_val: int | None = None,
    n_test: int | None = None,
    patch_size: int | None = None,
    seed: int = 0,
    modalities: Sequence[str] = ("s2", "s1_asc", "s1_desc"),
    generator: Mapping[str, Any] | None = None,
    train_folds: Sequence[int] = (1, 2, 3),
    val_fold: int = 4,
    test_fold: int = 5,
    start_date: dt.date = SYNTHETIC_START_DATE,
    invalid_as_nan: bool = True,
    dates_format: Literal["dict", "list"] = "dict",
    overwrite: bool = False,
) -> Path:
    """Write synthetic patches in the PASTIS-R layout (see the module docstring).

    Args:
        root: Output folder (created).
        preset: Synthetic preset (``"tiny"``, ``"default"``, ``"bench"``).
        n_train: Train patches (``None`` = the preset's); likewise ``n_val``, ``n_test``.
        n_val: Val patches.
        n_test: Test patches.
        patch_size: Patch side, pixels (``None`` = the preset's).
        seed: Synthetic data seed (``data.seed`` of ``data=synthetic``).
        modalities: Modalities to write; only their folders are created.
        generator: Generator settings overriding the preset (as ``data.generator``).
        train_folds: Folds the train patches are spread over.
        val_fold: Fold of the val patches.
        test_fold: Fold of the test patches.
        start_date: Calendar date of synthetic DOY 0.
        invalid_as_nan: Write invalid observations as NaN, so the mask survives.
        dates_format: ``"dict"`` (PASTIS-R's ``{"0": 20210103, ...}``) or ``"list"``.
        overwrite: Replace an existing dataset in ``root``.

    Returns:
        ``root`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: If ``root`` already holds a dataset and ``overwrite`` is False, or on
            invalid settings.
    """
    root = Path(root)
    if dates_format not in ("dict", "list"):
        raise ValueError(f"dates_format must be 'dict' or 'list', got {dates_format!r}.")
    if not train_folds or len({*train_folds, val_fold, test_fold}) != len(train_folds) + 2:
        raise ValueError(
            f"train_folds={list(train_folds)}, val_fold={val_fold} and test_fold={test_fold} must be distinct."
        )
    if (root / METADATA_FILE).exists():
        if not overwrite:
            raise ValueError(
                f"{root} already holds a dataset ({METADATA_FILE}); pass overwrite=True (--overwrite) to replace it."
            )
        for folder in [LABEL_FOLDER, *(v[0] for v in PASTIS_MODALITIES.values())]:
            shutil.rmtree(root / folder, ignore_errors=True)
        for stale in root.glob("NORM_*.json"):
            stale.unlink()
    dm = SyntheticSITSDataModule(
        preset=preset, n_train=n_train, n_val=n_val, n_test=n_test, patch_size=patch_size,
        seed=seed, modalities=list(modalities), norm_stats=None, generator=dict(generator or {}),
    )  # fmt: skip
    for m in dm.modalities:
        (root / PASTIS_MODALITIES[m][0]).mkdir(parents=True, exist_ok=True)
    (root / LABEL_FOLDER).mkdir(parents=True, exist_ok=True)

    features: list[dict[str, Any]] = []
    patch_id = FIRST_PATCH_ID
    for split in ("train", "val", "test"):
        dataset = dm.raw_dataset(split)
        for i in range(len(dataset)):  # type: ignore[arg-type]  # a map-style Dataset, sized
            sample = dataset[i]
            fold = {"train": int(train_folds[i % len(train_folds)]), "val": val_fold, "test": test_fold}[split]
            props: dict[str, Any] = {"ID_PATCH": patch_id, "Fold": fold}
            label = sample["label"].numpy()
            for m in dm.modalities:
                x = sample[m]["x"].numpy().copy()  # (T, C, H, W) float32
                if invalid_as_nan:
                    x[np.broadcast_to(~sample[m]["mask"].numpy()[:, None], x.shape)] = np.nan
                np.save(modality_path(root, m, patch_id), x)
                dates = _yyyymmdd(start_date, sample[m]["doy"].numpy())
                as_dict = {str(k): v for k, v in enumerate(dates)}  # PASTIS-R: {"0": 20210103, ...}
                props[PASTIS_MODALITIES[m][2]] = as_dict if dates_format == "dict" else dates
            target = np.zeros((3, *label.shape), dtype=np.uint8)
            target[0] = label
            np.save(label_path(root, patch_id), target)
            props.update(
                {
                    "N_Parcel": len(np.unique(label[label > 0])),
                    "Parcel_Cover": round(float((label > 0).mean()), 4),
                    "TILE": "SYNTHETIC",
                    "split": split,
                    "index_in_split": i,
                }
            )
            geometry = _polygon(len(features), label.shape[0])
            features.append({"type": "Feature", "properties": props, "geometry": geometry})
            patch_id += 1
    collection = {
        "type": "FeatureCollection",
        "name": "metadata",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::2154"}},
        "generator": {
            "source": "mtan_s1s2.data.pastis.writer (synthetic S1/S2)",
            "preset": preset,
            "seed": seed,
            "sizes": dm.sizes,
            "patch_size": dm.dataset_kwargs["patch_size"],
            "start_date": start_date.isoformat(),
            "invalid_as_nan": invalid_as_nan,
            "generator": {k: list(v) if isinstance(v, tuple) else v for k, v in dict(generator or {}).items()},
        },
        "features": features,
    }
    (root / METADATA_FILE).write_text(json.dumps(collection))
    return root


def main(argv: list[str] | None = None) -> Path:
    """Command line of ``scripts/make_pastis_dataset.py``."""
    parser = argparse.ArgumentParser(
        description="Write synthetic S1/S2 patches as a small PASTIS-R-format dataset "
        "(DATA_S2/, DATA_S1A/, DATA_S1D/, ANNOTATIONS/, metadata.geojson).",
    )
    parser.add_argument("root", help="output folder")
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="synthetic preset")
    parser.add_argument("--n-train", type=int, default=None, help="train patches (folds 1-3; default: the preset's)")
    parser.add_argument("--n-val", type=int, default=None, help="val patches (fold 4)")
    parser.add_argument("--n-test", type=int, default=None, help="test patches (fold 5)")
    parser.add_argument("--patch-size", type=int, default=None, help="patch side, pixels")
    parser.add_argument("--seed", type=int, default=0, help="synthetic data seed (data.seed of data=synthetic)")
    parser.add_argument("--modalities", nargs="+", default=["s2", "s1_asc", "s1_desc"], help="modalities to write")
    parser.add_argument("--dates-format", default="dict", choices=["dict", "list"], help="PASTIS-R dict or plain list")
    parser.add_argument(
        "--keep-clouds", action="store_true",
        help="write cloudy observations as generated (like real PASTIS-R) instead of NaN",
    )  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset in root")
    args = parser.parse_args(argv)
    root = write_pastis_dataset(
        args.root, preset=args.preset, n_train=args.n_train, n_val=args.n_val, n_test=args.n_test,
        patch_size=args.patch_size, seed=args.seed, modalities=args.modalities,
        invalid_as_nan=not args.keep_clouds, dates_format=args.dates_format, overwrite=args.overwrite,
    )  # fmt: skip
    n = len(json.loads((root / METADATA_FILE).read_text())["features"])
    print(f"Wrote {n} patches to {root}")
    print(f"Train on it: python train.py data=pastis_synthetic data.root={root}")
    return root


__all__ = ["FIRST_PATCH_ID", "SYNTHETIC_START_DATE", "main", "write_pastis_dataset"]
