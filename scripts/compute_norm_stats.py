"""Print per-channel normalisation statistics of a synthetic preset as YAML.

Usage::

    python scripts/compute_norm_stats.py --preset default --n-samples 256

Paste the output into the data config (``norm_stats:``). Statistics use the train split
and valid (mask True) observations only.
"""

from __future__ import annotations

import argparse

from torch.utils.data import Subset

from mtan_s1s2.data.normalization import compute_norm_stats, norm_stats_to_yaml
from mtan_s1s2.data.synthetic import GENERATOR_KEYS, PRESETS, SyntheticSITSDataset


def main(argv: list[str] | None = None) -> None:
    """Print the statistics of ``--n-samples`` training patches of ``--preset``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS), help="synthetic data preset")
    parser.add_argument("--n-samples", type=int, default=None, help="patches to use (default: the preset's n_train)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (train split)")
    args = parser.parse_args(argv)

    preset = PRESETS[args.preset]
    n = preset["n_train"] if args.n_samples is None else args.n_samples
    dataset = SyntheticSITSDataset(
        n_samples=n,
        patch_size=preset["patch_size"],
        seed=args.seed,
        split="train",
        **{k: preset[k] for k in GENERATOR_KEYS},
    )
    stats = compute_norm_stats(Subset(dataset, range(n)), what=f"{n} training patches")
    print(f"# preset={args.preset} seed={args.seed} n_samples={n} (train split, valid observations only)")
    print(norm_stats_to_yaml(stats), end="")


if __name__ == "__main__":
    main()
