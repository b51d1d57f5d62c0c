"""Compiled vs eager training step per MLP backend and precision: finite, and close to eager.

``python -m mtan_s1s2.bench.compile_parity [--device cuda] [--precisions fp32 bf16] [--out DIR]``
runs one forward + backward of the classifier per backend, eager and through
``torch.compile`` (inductor, the inputs a compiled training run gets:
:func:`~mtan_s1s2.models.compiling.compiled_inputs`), under the precision's autocast, and
compares the loss and the gradient norm. It writes ``compile_parity.json`` (one row per
backend and precision) and exits 1 when a row is not finite or not within
:data:`PARITY_RTOL` of eager. ``scripts/gpu_check.sh`` runs it on CUDA; the tests run it on
the CPU (:mod:`tests.models.test_compile`).

Dropout is off, so eager and compiled draw no random numbers and must agree up to
rounding; bf16 keeps about 3 significant digits and compiled kernels round in another
order, hence the bf16 tolerance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mtan_s1s2.models.compiling import compiled_inputs
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.losses import masked_cross_entropy
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.utils.precision import autocast

PARITY_RTOL: dict[str, float] = {"fp32": 1e-4, "bf16": 5e-2}
"""Relative tolerance of the compiled loss and gradient norm against eager, per precision."""


def random_inputs(
    in_channels: Mapping[str, int], batch: int, dates: Mapping[str, int], patch: int, device: torch.device, seed: int
) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
    """Model inputs and labels with random values, sorted DOYs and 70 % valid observations.

    Returns:
        ``({modality: {"x": (B, T, C, P, P), "doy": (B, T), "mask": (B, T, P, P)}}, labels (B, P, P))``
        with labels in 0..10 (0 = ignored).
    """
    g = torch.Generator().manual_seed(seed)
    inputs = {}
    for m, c in in_channels.items():
        t = dates[m]
        inputs[m] = {
            "x": torch.randn(batch, t, c, patch, patch, generator=g).to(device),
            "doy": torch.sort(torch.rand(batch, t, generator=g) * 365.0, dim=1).values.to(device),
            "mask": (torch.rand(batch, t, patch, patch, generator=g) < 0.7).to(device),
        }
    return inputs, torch.randint(0, 11, (batch, patch, patch), generator=g).to(device)


def compiled_step_parity(
    backend: str,
    precision: str = "bf16",
    device: str | torch.device = "cpu",
    net_kwargs: Mapping[str, Any] | None = None,
    in_channels: Mapping[str, int] | None = None,
    dates: Mapping[str, int] | None = None,
    batch: int = 2,
    patch: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """One training step of ``backend``, eager and compiled, under ``precision``.

    Args:
        backend: MLP backend (``linear``, ``conv``, ``channels_last``).
        precision: ``fp32``, ``bf16`` or ``fp16`` (CUDA) autocast.
        device: Where to run.
        net_kwargs: Widths of :class:`~mtan_s1s2.models.mtan.MTANClassifier` (default: its own).
        in_channels: Modality -> bands (default S2 with 10 bands).
        dates: Modality -> dates per sample (default 7: padded to 8 when compiled).
        batch: Samples ``B``.
        patch: Patch side ``P`` in pixels.
        seed: Weights and inputs.

    Returns:
        ``{"backend", "precision", "device", "eager_loss", "compiled_loss",
        "eager_grad_norm", "compiled_grad_norm", "loss_rel_diff", "grad_rel_diff",
        "rtol", "finite", "ok"}``.

    Raises:
        ValueError: On an unknown backend or precision.
    """
    if backend not in MLP_BACKENDS:
        raise ValueError(f"backend must be one of {list(MLP_BACKENDS)}, got {backend!r}.")
    if precision not in PARITY_RTOL and precision != "fp16":
        raise ValueError(f"precision must be one of fp32, bf16, fp16, got {precision!r}.")
    dev = torch.device(device)
    channels = dict(in_channels or {"s2": 10})
    torch._dynamo.reset()
    torch.manual_seed(seed)
    net = MTANClassifier(channels, 11, mlp=backend, **{**dict(net_kwargs or {}), "dropout": 0.0}).to(dev).train()
    inputs, labels = random_inputs(channels, batch, dates or dict.fromkeys(channels, 7), patch, dev, seed)
    ctx = autocast(precision, dev)

    def step(fn: Any, x: Any) -> tuple[float, float]:
        net.zero_grad(set_to_none=True)
        with ctx:
            logits = fn(x)
        loss = masked_cross_entropy(logits.float(), labels, 0)
        loss.backward()  # type: ignore[no-untyped-call]
        grads = [p.grad.float().square().sum() for p in net.parameters() if p.grad is not None]
        return float(loss.detach()), float(torch.stack(grads).sum().sqrt())

    eager = step(net, inputs)
    compiled = step(torch.compile(net), compiled_inputs(inputs))
    rtol = PARITY_RTOL.get(precision, PARITY_RTOL["bf16"])
    diffs = [abs(c - e) / max(abs(e), 1e-12) for c, e in zip(compiled, eager, strict=True)]
    finite = all(math.isfinite(v) for v in (*eager, *compiled))
    return {
        "backend": backend,
        "precision": precision,
        "device": str(dev),
        "eager_loss": eager[0],
        "compiled_loss": compiled[0],
        "eager_grad_norm": eager[1],
        "compiled_grad_norm": compiled[1],
        "loss_rel_diff": diffs[0],
        "grad_rel_diff": diffs[1],
        "rtol": rtol,
        "finite": finite,
        "ok": finite and max(diffs) <= rtol,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: one row per backend and precision into ``OUT/compile_parity.json``; 1 if any is off."""
    parser = argparse.ArgumentParser(
        prog="python -m mtan_s1s2.bench.compile_parity",
        description="Compiled vs eager training step per MLP backend and precision.",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--backends", nargs="+", default=list(MLP_BACKENDS), choices=list(MLP_BACKENDS))
    parser.add_argument("--tiny", action="store_true", help="tiny widths and shapes (CPU smoke runs)")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    tiny = {"d_model": 8, "embed_time": 8, "num_ref_times": 4, "input_hidden": 8, "fusion_hidden": 16}
    shapes: dict[str, Any] = {"batch": 2, "patch": 4} if args.tiny else {"batch": 8, "patch": 16}
    rows = []
    for precision in args.precisions:
        for backend in args.backends:
            row = compiled_step_parity(
                backend,
                precision,
                args.device,
                net_kwargs={**tiny, "head_hidden": (16, 16)} if args.tiny else None,
                **shapes,
            )
            rows.append(row)
            print(
                f"{backend:14s} {precision:5s} loss eager {row['eager_loss']:.5f} compiled {row['compiled_loss']:.5f} "
                f"grad norm {row['eager_grad_norm']:.5f} / {row['compiled_grad_norm']:.5f} "
                f"(rel. diff {max(row['loss_rel_diff'], row['grad_rel_diff']):.1e}, rtol {row['rtol']:g}): "
                + ("ok" if row["ok"] else "MISMATCH" if row["finite"] else "NOT FINITE"),
                flush=True,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_parity.json").write_text(json.dumps({"rows": rows}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["PARITY_RTOL", "compiled_step_parity", "main", "random_inputs"]
