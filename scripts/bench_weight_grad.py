"""Time ``nn.Linear`` against :class:`~mtan_s1s2.models.layers.mlp.RowLinear`, side by side.

Forward + backward of one pointwise layer on ``(N, C_in)`` rows, as the first layer of an
input embedding (the input needs no gradient, so the weight gradient dominates the
backward). ``nn.Linear`` computes the weight gradient as ``grad^T @ x``, ``RowLinear`` as
``(x^T @ grad)^T``; on CPU BLAS the first is much slower for narrow inputs.

Usage::

    python scripts/bench_weight_grad.py                      # CPU, N = 8*31*32*32 rows
    python scripts/bench_weight_grad.py --device cuda --rows 2000000

Prints one line per input width with the two medians and their ratio.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils import benchmark

from mtan_s1s2.models.layers.mlp import RowLinear


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8 * 31 * 32 * 32, help="rows N (default: one S1 batch)")
    parser.add_argument("--in-features", type=int, nargs="+", default=[3, 10, 32, 64], help="input widths C_in")
    parser.add_argument("--out-features", type=int, default=64, help="output width C_out")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per measurement")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    print(f"device={device} threads={torch.get_num_threads()} torch={torch.__version__} rows={args.rows}")
    print(f"{'C_in':>5} {'nn.Linear ms':>13} {'RowLinear ms':>13} {'speed-up':>9}")
    for c_in in args.in_features:
        x = torch.randn(args.rows, c_in, device=device)
        grad = torch.randn(args.rows, args.out_features, device=device)
        medians = []
        for cls in (nn.Linear, RowLinear):
            torch.manual_seed(0)
            layer = cls(c_in, args.out_features).to(device)

            def step(layer: nn.Module = layer, x: torch.Tensor = x, grad: torch.Tensor = grad) -> None:
                layer.zero_grad(set_to_none=True)
                layer(x).backward(grad)
                if device.type == "cuda":
                    torch.cuda.synchronize()

            step()  # warm-up
            timer = benchmark.Timer("step()", globals={"step": step})
            medians.append(timer.blocked_autorange(min_run_time=args.min_run_time).median * 1e3)
        print(f"{c_in:>5} {medians[0]:>13.2f} {medians[1]:>13.2f} {medians[0] / medians[1]:>8.2f}x")


if __name__ == "__main__":
    main()
