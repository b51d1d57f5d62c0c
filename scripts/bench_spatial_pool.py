"""Time the recipe's training step with each neighbourhood pool (``model.net.spatial_pool``), side by side.

One step (forward, cross-entropy, backward, AdamW) of ``experiment=real``'s network on a
datacube-shaped batch, built from the configs as ``train.py`` builds it, for
each ``spatial_pool`` (``mean``, ``attention``, ``similarity``) in turn, ``--rounds`` times
interleaved (``torch.utils.benchmark``, median of each round). The defaults are the
WorldCereal datacube's: 8 windows of 16 x 16 px, S2 6 bands and S1 2 bands, 16 reference
times over 1.33 years, 5 classes (``--dates`` per modality, random values, 70 % valid).

Usage::

    python scripts/bench_spatial_pool.py                  # CPU, one thread
    python scripts/bench_spatial_pool.py --threads 2 --dates 60

Prints each pool's median step time, its parameter count, and its ratio to the mean's.
"""

from __future__ import annotations

import argparse

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import open_dict
from torch.utils import benchmark

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers
from mtan_s1s2.models.layers.spatial import SPATIAL_POOLS as POOLS


def build(pool: str, ref_range: float) -> torch.nn.Module:
    """The recipe's network (``experiment=real``) with the 3 x 3 px neighbourhood pooled by ``pool``."""
    with initialize_config_dir(str(CONFIG_DIR), version_base=None):
        cfg = compose("train", overrides=["experiment=real", f"model.net.spatial_pool={pool}"])
    with open_dict(cfg):
        net = cfg.model.net
        net.in_channels = {"s2": 6, "s1_asc": 2}
        net.num_ref_times = 16
        net.ref_range = [0.0, ref_range]
        net.spatial_context = 3
        net.mlp = "channels_last"
        cfg.model.num_classes = 5
    module: torch.nn.Module = instantiate(cfg.model.net)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="windows per batch")
    parser.add_argument("--side", type=int, default=16, help="window side, px")
    parser.add_argument("--dates", type=int, default=40, help="dates per modality")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args(argv)
    register_resolvers()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    nets = {pool: build(pool, 1.33) for pool in POOLS}
    B, T, S = args.batch, args.dates, args.side
    batch = {
        m: {
            "x": torch.randn(B, T, c, S, S),
            "doy": torch.linspace(0.0, 485.0, T).expand(B, T),
            "mask": torch.rand(B, T, S, S) < 0.7,
        }
        for m, c in (("s2", 6), ("s1_asc", 2))
    }
    target = torch.randint(0, 5, (B, S, S))

    def step(net: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(batch), target).backward()
        opt.step()

    times: dict[str, list[float]] = {pool: [] for pool in POOLS}
    for _ in range(args.rounds):
        for pool, net in nets.items():
            opt = torch.optim.AdamW(net.parameters())
            timer = benchmark.Timer("step(net, opt)", globals={"step": step, "net": net, "opt": opt})
            times[pool].append(timer.blocked_autorange(min_run_time=3).median * 1e3)
    median = {pool: sorted(v)[len(v) // 2] for pool, v in times.items()}
    for pool in POOLS:
        n = sum(p.numel() for p in nets[pool].parameters())
        print(f"{pool}: {median[pool]:.0f} ms per step (rounds {[round(t) for t in times[pool]]}), {n} parameters")
    for pool in POOLS[1:]:
        print(f"ratio {pool} / mean: {median[pool] / median['mean']:.2f}")


if __name__ == "__main__":
    main()
