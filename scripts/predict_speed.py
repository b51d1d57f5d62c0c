"""Prediction speed of ``predict.py`` on a whole synthetic GeoTIFF scene: today's flags against the default.

Writes, under ``OUT``:

* ``train/scene``: a small scene (``--train-size`` px) with a label raster, on which a checkpoint
  of the default model (``mlp=linear``) is trained for one short epoch (speed does not
  depend on how well it is trained);
* ``big/scene``: a ``--size`` x ``--size`` px scene in the same layout (S2 date-major stack of
  10 bands, uint16 DN with nodata 0, a cloud-mask stack; S1 ascending one GeoTIFF per date,
  VV/VH dB float32 with nodata -9999), with realistic no-data: clouds on about a third of the
  S2 observations, and a strip outside the orbit swath with no S2 or S1 data at all;

then predicts the big scene (with ``radiometry_override=true``, as measured in
``docs/results.md``; the checkpoint's normalisation statistics are used either way) in fresh
processes, one after the other, with the flags that
reproduce the former default (``precision=32-true mlp=linear compile=false skip_empty=false
chunk_pixels=null prefetch=0``) and with the new default (no flags; an empty decision cache,
so it pays its timing like a first run on the machine), and reports pixels/s of the tiles
(``predict_summary.json``), the wall time of each command, and how far the two maps are
apart (class agreement, max confidence difference in percent). ``results.json`` holds all.

    nice -n 5 python scripts/predict_speed.py /tmp/predict_speed [--size 1000] [--s2-dates 30] [--s1-dates 25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.crs import CRS

REPO = Path(__file__).resolve().parents[1]
S2_BANDS = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
OLD_FLAGS = ["precision=32-true", "mlp=linear", "compile=false", "skip_empty=false", "chunk_pixels=null", "prefetch=0"]
"""The flags that reproduce the former default of ``predict.py`` (fp32, the run's backend, eager,
every pixel of a 256 px tile in one forward pass, tiles read between forward passes)."""


def _profile(count: int, size: int, dtype: str, nodata: float | None) -> dict:
    profile = {
        "driver": "GTiff", "count": count, "height": size, "width": size, "dtype": dtype, "tiled": True,
        "blockxsize": 256, "blockysize": 256, "compress": "deflate", "interleave": "band",
        "transform": Affine(10, 0, 500000, 0, -10, 5600000), "crs": CRS.from_epsg(32631),
    }  # fmt: skip
    if nodata is not None:
        profile["nodata"] = nodata
    return profile


def _blocks(rng: np.random.Generator, size: int, block: int, values: int) -> np.ndarray:
    coarse = rng.integers(0, values, (size // block + 1, size // block + 1))
    return np.kron(coarse, np.ones((block, block), int))[:size, :size]


def write_scene(folder: Path, size: int, s2_dates: int, s1_dates: int, seed: int = 0, swath: bool = True) -> dict:
    """One scene of ``size`` x ``size`` px (see the module docstring); returns its no-data shares."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    classes = 1 + _blocks(rng, size, 25, 3)  # 250 m fields of 3 classes
    rows, cols = np.mgrid[0:size, 0:size]
    outside = (cols > 0.88 * size + 0.1 * rows) if swath else np.zeros((size, size), bool)  # no data at all
    doy2 = np.linspace(5, 360, s2_dates)
    (folder / "S2_dates.txt").write_text(
        "\n".join(str(np.datetime64("2020-01-01") + int(d)).replace("-", "") for d in doy2) + "\n"
    )
    phase = {1: 120.0, 2: 180.0, 3: 240.0}
    cloudy = 0
    with (
        rasterio.open(folder / "S2_stack.tif", "w", **_profile(s2_dates * 10, size, "uint16", 0)) as dst,
        rasterio.open(folder / "S2_mask.tif", "w", **_profile(s2_dates, size, "uint8", None)) as msk,
    ):
        for t, d in enumerate(doy2):
            green = np.zeros((size, size), np.float32)
            for k, p in phase.items():
                green[classes == k] = np.exp(-(((d - p) / 45.0) ** 2))
            clouds = _blocks(rng, size, 50, 100) < 33
            cloudy += int(clouds.sum())
            msk.write(clouds.astype(np.uint8), t + 1)
            for c in range(10):
                refl = 0.05 + 0.03 * c + (0.3 if c >= 6 else -0.02) * green
                dn = np.clip(refl * 1e4 + rng.normal(0, 80, (size, size)), 1, 12000).astype(np.uint16)
                dn[outside] = 0
                dst.write(dn, t * 10 + c + 1)
    start = np.datetime64("2020-01-03T17:40:00")
    for t in range(s1_dates):
        when = start + np.timedelta64(int(t * 360 / max(s1_dates, 1)), "D")
        stamp = str(when).replace("-", "").replace(":", "")[:15]
        vv = (-12 + 3 * (classes == 2) + rng.normal(0, 1.5, (size, size))).astype(np.float32)
        vh = (vv - 7 + rng.normal(0, 1.0, (size, size))).astype(np.float32)
        vv[outside], vh[outside] = -9999, -9999
        with rasterio.open(folder / f"S1_{stamp}.tif", "w", **_profile(2, size, "float32", -9999)) as dst:
            dst.write(np.stack([vv, vh]))
    with rasterio.open(folder / "label.tif", "w", **_profile(1, size, "int32", None)) as dst:
        dst.write(np.where(outside, 0, classes).astype(np.int32), 1)
    return {"no_valid_observation": float(outside.mean()), "s2_cloudy": cloudy / (s2_dates * size * size)}


def data_overrides(root: Path) -> list[str]:
    """The ``data=geotiff`` overrides that read the scenes of :func:`write_scene` under ``root``."""
    return [
        "data=geotiff", f"data.root={root}", "data.reference_date=2020-01-01", "data.sources.s2.mask=S2_mask.tif",
        "+data.radiometry.s1_asc={units: db}",
    ]  # fmt: skip


def run(cmd: list[str], log: Path) -> float:
    """Run ``cmd`` from the repository root, its output to ``log``; wall seconds (raises on failure)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}")
    return time.perf_counter() - start


def compare_maps(a: Path, b: Path) -> dict:
    """Class agreement (pixels with a class in either map) and the max confidence difference, percent."""
    with rasterio.open(a / "class_map.tif") as x, rasterio.open(b / "class_map.tif") as y:
        ca, cb = x.read(1), y.read(1)
    with rasterio.open(a / "confidence.tif") as x, rasterio.open(b / "confidence.tif") as y:
        pa, pb = x.read(1).astype(int), y.read(1).astype(int)
    both = (ca != 255) & (cb != 255)
    return {
        "same_nodata": bool(((ca == 255) == (cb == 255)).all()),
        "class_agreement": float((ca[both] == cb[both]).mean()),
        "max_confidence_diff_percent": int(np.abs(pa[both] - pb[both]).max()),
    }


def main() -> None:
    """Write the scenes, train, predict twice, report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--train-size", type=int, default=96)
    parser.add_argument("--s2-dates", type=int, default=30)
    parser.add_argument("--s1-dates", type=int, default=25)
    args = parser.parse_args()
    out: Path = args.out
    py = sys.executable
    results: dict = {"size": args.size, "dates": {"s2": args.s2_dates, "s1_asc": args.s1_dates}}
    if not (out / "big" / "scene" / "label.tif").exists():
        write_scene(out / "train" / "scene", args.train_size, args.s2_dates, args.s1_dates, seed=1, swath=False)
        results["nodata"] = write_scene(out / "big" / "scene", args.size, args.s2_dates, args.s1_dates)
    ckpt = out / "train_run" / "checkpoints" / "last.ckpt"
    if not ckpt.exists():
        train = [
            py, "train.py", *data_overrides(out / "train"), "data.labels.classes={a: [1], b: [2], c: [3]}",
            "data.split.n_folds=3", "data.split.block_size=16", "mlp=linear", "trainer=cpu", "trainer.max_epochs=1",
            "+trainer.limit_train_batches=4", "+trainer.limit_val_batches=2", "test=false", "logger=csv",
            f"hydra.run.dir={out / 'train_run'}", "callbacks.model_checkpoint.save_last=true",
        ]  # fmt: skip
        results["train_s"] = run(train, out / "train.log")
    for name, flags in (("former_default", OLD_FLAGS), ("default", [])):
        folder = out / name
        cmd = [
            py, "predict.py", f"ckpt_path={ckpt}", *data_overrides(out / "big"), "progress=false", "quicklook=false",
            f"decision_cache={out / 'decisions.json'}", f"hydra.run.dir={folder}", "radiometry_override=true", *flags,
        ]  # fmt: skip
        wall = run(cmd, out / f"{name}.log")
        summary = json.loads((folder / "predict_summary.json").read_text())
        results[name] = {"flags": flags, "wall_s": wall, "speed": summary["speed"], "inference": summary["inference"]}
        print(name, f"{summary['speed']['pixels_per_s']:.0f} px/s, command {wall:.0f} s", flush=True)
    results["speedup_px_per_s"] = (
        results["default"]["speed"]["pixels_per_s"] / results["former_default"]["speed"]["pixels_per_s"]
    )
    results["speedup_wall"] = results["former_default"]["wall_s"] / results["default"]["wall_s"]
    results["maps"] = compare_maps(out / "former_default" / "scene", out / "default" / "scene")
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps({k: results[k] for k in ("speedup_px_per_s", "speedup_wall", "maps")}, indent=2))


if __name__ == "__main__":
    main()
