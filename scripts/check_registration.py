"""Check that a raster dataset's labels sit on its imagery: the OA of every label-to-imagery offset.

For every offset ``(dy, dx)`` within ``--radius`` px, a RandomForest predicts the label of
each training pixel from the composites (every ``--step-days``, default 30) of the pixel ``dy``
rows south and ``dx`` columns east of it, scored by grouped cross-validation over spatial blocks
(:mod:`mtan_s1s2.data.registration`). Labels on the imagery score best at ``(0, 0)``; an
offset that beats ``(0, 0)`` on every fold is printed as the ``data.grid.label_shift`` that
puts them back. Only the training pixels of ``data.split.fold`` are read.

Usage::

    python scripts/check_registration.py data=worldcereal                 # Hydra overrides as train.py
    python scripts/check_registration.py data=geotiff data.root=/data/tiles --radius 3
    python scripts/check_registration.py data=worldcereal data.grid.label_shift=[1,0]   # after the fix

Prints the OA grid (rows ``dy``, north to south; columns ``dx``, west to east), the best
offset with its OA per fold against ``(0, 0)``, and the override to set.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers
from mtan_s1s2.data.group_splits import SPLIT_NAMES
from mtan_s1s2.data.registration import check_registration
from mtan_s1s2.data.scene.datamodule import SceneDataModule


def main(argv: list[str] | None = None) -> None:
    """Compose ``train``'s config with the overrides, open the raster data and print the check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for train.py (data=..., data.root=...)")
    parser.add_argument("--radius", type=int, default=2, help="largest offset tried, px (default 2)")
    parser.add_argument("--folds", type=int, default=3, help="cross-validation folds over spatial blocks")
    parser.add_argument("--block", type=int, default=16, help="side of the blocks the folds group pixels by, px")
    parser.add_argument("--max-pixels", type=int, default=20000, help="training pixels used at most")
    parser.add_argument("--trees", type=int, default=100, help="trees of each RandomForest")
    parser.add_argument("--step-days", type=float, default=30.0, help="days between the composites' dates (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("train", overrides=list(args.overrides))
    datamodule = instantiate(cfg.data)
    if not isinstance(datamodule, SceneDataModule):
        sys.exit(
            f"check_registration.py needs a raster dataset read as scenes (data=datacube, data=geotiff or their "
            f"presets); data={cfg.data.get('_target_')} has no label raster to check."
        )
    if datamodule.split is None:
        sys.exit("The dataset has no label raster (data.labels.file): nothing to check.")
    train = SPLIT_NAMES.index("train")
    use = [
        (s == train) & (lab != datamodule.ignore_index)
        for s, lab in zip(datamodule.split.splits, datamodule.split.labels, strict=True)
    ]
    check = check_registration(
        datamodule.scenes, datamodule.split.labels, use, args.radius, args.block, args.folds, args.max_pixels,
        args.trees, args.seed, args.step_days,
    )  # fmt: skip
    shift = datamodule.sources.label_shift  # data.grid.label_shift as the datamodule validated it
    print(
        f"Label registration of {len(datamodule.scenes)} scene(s), {check.pixels} training pixels of fold "
        f"{cfg.data.split.fold}, labels as read with data.grid.label_shift={list(shift)}: OA (%) of a RandomForest "
        f"predicting each pixel's label from the imagery dy rows south and dx columns east of it, {args.folds}-fold "
        f"cross-validation over {args.block} px blocks\n"
    )
    print(check.table())
    dy, dx = check.best()
    fmt = " ".join(f"{100 * v:.1f}" for v in check.at(dy, dx))
    zero = " ".join(f"{100 * v:.1f}" for v in check.at(0, 0))
    print(f"\nbest offset (dy, dx) = ({dy:+d}, {dx:+d}): OA per fold {fmt}; at (0, 0): {zero}")
    sy, sx = check.suggested_shift()
    if (sy, sx) == (0, 0):
        print("The labels sit on the imagery: no offset beats (0, 0) on every fold. Keep data.grid.label_shift.")
    else:
        total = [shift[0] + sy, shift[1] + sx]
        gain = 100 * float(np.mean(check.at(sy, sx) - check.at(0, 0)))
        print(
            f"The labels fit the imagery {sy:+d} rows, {sx:+d} columns away (+{gain:.1f} OA points, every fold): set "
            f"data.grid.label_shift=[{total[0]},{total[1]}] and run the check again (it should then find (0, 0))."
        )


if __name__ == "__main__":
    main()
