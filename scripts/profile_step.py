"""Profile one training step of the default model: the top operators and their share of the time.

One batch of the default synthetic preset (batch 8, 32 x 32 px, ~33 S2 and ~31 + 31 S1
dates), the default network (``configs/model/mtan.yaml``) with the chosen backend, AdamW;
a few warm-up steps, then ``torch.profiler`` over ``--steps`` steps. Prints the operators
by self time (forward and backward ops as autograd names them) with their share of the
profiled time, and writes the table as CSV when ``--csv`` is given.

Usage::

    python scripts/profile_step.py --backend channels_last [--steps 5] [--top 15] [--csv out.csv]
    python scripts/profile_step.py --backend linear --cpu-malloc default   # glibc left alone
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import hydra
import torch
from omegaconf import OmegaConf

from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.losses import masked_cross_entropy
from mtan_s1s2.utils.allocator import tune_glibc_malloc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="channels_last", choices=sorted(MLP_BACKENDS))
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (after 3 warm-up steps)")
    parser.add_argument("--top", type=int, default=15, help="operators to print")
    parser.add_argument("--cpu-malloc", default="tuned", choices=["tuned", "default"])
    parser.add_argument("--csv", type=Path, default=None, help="write the whole table here")
    args = parser.parse_args()
    if args.cpu_malloc == "tuned":
        tune_glibc_malloc()

    torch.manual_seed(0)
    dm = SyntheticSITSDataModule(preset="default", n_train=8, batch_size=8, num_workers=0, seed=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    net_cfg = OmegaConf.load(CONFIG_DIR / "model" / "mtan.yaml").net
    net_cfg.in_channels = dict(dm.in_channels)
    net_cfg.num_classes = int(dm.num_classes)
    net = hydra.utils.instantiate(net_cfg, mlp=args.backend).train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    inputs = {m: batch[m] for m in net.modalities}

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = masked_cross_entropy(net(inputs), batch["label"], dm.ignore_index)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    for _ in range(3):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    rows = [
        {
            "op": e.key,
            "calls_per_step": e.count / args.steps,
            "self_ms_per_step": e.self_cpu_time_total / 1e3 / args.steps,
            "share": e.self_cpu_time_total / total,
        }
        for e in events
    ]
    ms_per_step = total / 1e3 / args.steps
    print(f"backend {args.backend}, cpu_malloc {args.cpu_malloc}, {ms_per_step:.0f} ms per step (profiled)")
    print(f"{'op':<48} {'calls':>7} {'ms/step':>9} {'share':>7}")
    for r in rows[: args.top]:
        print(f"{r['op'][:48]:<48} {r['calls_per_step']:>7.0f} {r['self_ms_per_step']:>9.1f} {r['share']:>6.1%}")
    if args.csv is not None:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
