"""``python -m mtan_s1s2.data.pastis --root ROOT``: check a PASTIS-R-format folder.

Checks every file of the folder from its header, prints its folds, and prints the
normalisation statistics of the training folds (computed once and cached beside the data,
as ``data=pastis`` does; ``--recompute-stats`` overwrites the cache).
"""

from __future__ import annotations

import argparse
from typing import Any

from omegaconf import OmegaConf

from mtan_s1s2.data.normalization import norm_stats_to_yaml
from mtan_s1s2.data.pastis.datamodule import DEFAULT_FOLDS, PASTISDataModule
from mtan_s1s2.data.pastis.layout import PASTIS_MODALITIES, PASTIS_REFERENCE_DATE, describe, scan_patches


def _mapping(text: str) -> Any:
    """A YAML/JSON mapping given on the command line, as plain data."""
    return OmegaConf.to_container(OmegaConf.create(text))


def main(argv: list[str] | None = None) -> None:
    """Check a PASTIS-R-format folder, and (re)compute its normalisation statistics.

    Raises:
        ValueError: On a missing or inconsistent file, or training folds selecting no patch.
    """
    parser = argparse.ArgumentParser(
        prog="python -m mtan_s1s2.data.pastis",
        description="Check every file of a PASTIS-R-format dataset, print its folds and the normalisation "
        "statistics of its training folds (computed once and cached beside the data).",
    )
    parser.add_argument("--root", required=True, help="dataset folder (holds metadata.geojson)")
    parser.add_argument("--modalities", nargs="+", default=list(PASTIS_MODALITIES), help="e.g. s2 s1_asc (or S2 S1A)")
    parser.add_argument(
        "--train-folds", nargs="+", type=int, default=DEFAULT_FOLDS["train"], help="folds of the statistics"
    )
    parser.add_argument("--reference-date", default=PASTIS_REFERENCE_DATE, help="day 0 of the printed day ranges")
    parser.add_argument(
        "--radiometry",
        type=_mapping,
        default=None,
        help="data.radiometry as YAML/JSON, e.g. '{s2: {scale: 1.0e-4}, s1_asc: {units: linear}}'",
    )
    parser.add_argument("--max-patches", type=int, default=None, help="at most this many training patches")
    parser.add_argument("--stats-file", default=None, help="cache file (default: under --root)")
    parser.add_argument("--recompute-stats", action="store_true", help="recompute and overwrite the cached statistics")
    args = parser.parse_args(argv)

    dm = PASTISDataModule(
        root=args.root, split={"folds": {"train": args.train_folds, "val": [], "test": []}}, modalities=args.modalities,
        reference_date=args.reference_date, radiometry=args.radiometry, norm_stats="auto", stats_file=args.stats_file,
        stats_max_patches=args.max_patches, crop_size=None,
    )  # fmt: skip
    print(f"PASTIS-R-format dataset at {dm.root}: {len(dm.all_records)} patches, days since {args.reference_date}")
    _, sizes = scan_patches(dm.root, dm.all_records, dm.modalities)
    print(describe(dm.all_records, sizes, dm.in_channels))
    stats = dm.resolve_norm_stats(recompute=args.recompute_stats) or {}
    n_train = len(dm.records["train"])
    print(f"# mean/std over valid observations of folds {sorted(args.train_folds)} ({n_train} patches)")
    print(norm_stats_to_yaml(stats, decimals=16), end="")


if __name__ == "__main__":
    main()
