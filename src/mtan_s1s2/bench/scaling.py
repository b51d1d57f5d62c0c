"""Scaling mode: training-step time and peak memory against dates, patch size and batch size.

``python -m mtan_s1s2.bench bench.mode=scaling`` times one training step (forward + loss +
backward + AdamW) of the configured model per backend while one size varies and the others
stay at their reference (``bench.scaling``: dates per modality, patch side, batch size).
Each case runs in a fresh process (``python -m mtan_s1s2.bench.scaling CASE_JSON``), so its
peak memory is its own: on CPU the growth of the process's peak resident set over the
memory held before the first step, on CUDA ``max_memory_allocated``. The cost of the model
is linear in dates and pixels when the time per ``date x pixel x sample`` stays flat along
an axis; the table reports that normalised cost.
"""

from __future__ import annotations

import functools
import json
import logging
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

CHANNELS = {"s2": 10, "s1_asc": 3, "s1_desc": 3}
"""Modalities and band counts of the scaling batches (as the synthetic and PASTIS-R data)."""


def scaling_cases(
    backends: Sequence[str],
    dates: Sequence[int],
    patch_sizes: Sequence[int],
    batch_sizes: Sequence[int],
    reference: Mapping[str, int],
) -> list[dict[str, Any]]:
    """One case per backend and value of each axis, the other sizes at ``reference``.

    Args:
        backends: MLP backends.
        dates: Dates per modality to try.
        patch_sizes: Patch sides to try.
        batch_sizes: Batch sizes to try.
        reference: ``{"dates", "patch", "batch"}`` held while another axis varies.

    Returns:
        Cases ``{"backend", "axis", "dates", "patch", "batch"}``.
    """
    out = []
    for backend in backends:
        for axis, values in (("dates", dates), ("patch", patch_sizes), ("batch", batch_sizes)):
            for v in values:
                out.append({"backend": backend, "axis": axis, **{**reference, axis: int(v)}})
    return out


def _batch(case: Mapping[str, Any], generator: torch.Generator, device: torch.device) -> dict[str, Any]:
    """A random batch with ``dates`` dates per modality, 80 % of the observations valid."""
    B, T, P = int(case["batch"]), int(case["dates"]), int(case["patch"])
    batch: dict[str, Any] = {}
    for m, c in CHANNELS.items():
        batch[m] = {
            "x": torch.randn(B, T, c, P, P, generator=generator).to(device),
            "doy": torch.sort(torch.rand(B, T, generator=generator) * 365, dim=1).values.to(device),
            "mask": (torch.rand(B, T, P, P, generator=generator) < 0.8).to(device),
        }
    batch["label"] = torch.randint(0, 11, (B, P, P), generator=generator).to(device)
    return batch


def run_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """Time one case in this process (called in a fresh process by :func:`run_scaling`)."""
    import hydra
    from omegaconf import OmegaConf

    from mtan_s1s2.bench.timing import TimerConfig, time_callable
    from mtan_s1s2.models.losses import masked_cross_entropy
    from mtan_s1s2.utils.allocator import tune_glibc_malloc
    from mtan_s1s2.utils.precision import autocast

    if case.get("cpu_malloc", "tuned") == "tuned":
        tune_glibc_malloc()
    device = torch.device(case["device"])
    torch.manual_seed(0)
    net_cfg = OmegaConf.create(case["net"])
    net = hydra.utils.instantiate(net_cfg, in_channels=CHANNELS, num_classes=11, mlp=case["backend"]).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    batch = _batch(case, torch.Generator().manual_seed(0), device)
    inputs = {m: batch[m] for m in CHANNELS}
    ctx = functools.partial(autocast, case["precision"], device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = masked_cross_entropy(net(inputs), batch["label"], 0)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    held_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    stats = time_callable(step, device, TimerConfig(**case["timer"]))
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - held_mb
    pixels = int(case["patch"]) ** 2 * int(case["batch"])
    return {
        **{k: case[k] for k in ("backend", "axis", "dates", "patch", "batch", "precision")},
        "step_ms": stats.median_ms,
        "iqr_ms": stats.iqr_ms,
        "peak_memory_mb": peak_mb,
        "us_per_date_pixel": stats.median_ms * 1e3 / (int(case["dates"]) * pixels),
        "kb_per_date_pixel": peak_mb * 1024 / (int(case["dates"]) * pixels),
    }


def run_scaling(cases: Sequence[Mapping[str, Any]], timeout_s: float = 900.0) -> list[dict[str, Any]]:
    """Run every case in a fresh process; a case that fails gets ``status`` and its error.

    Returns:
        One row per case (:func:`run_case`'s keys, plus ``status``).
    """
    rows = []
    for case in cases:
        log.info("scaling: %s", {k: case[k] for k in ("backend", "axis", "dates", "patch", "batch")})
        proc = subprocess.run(
            [sys.executable, "-m", "mtan_s1s2.bench.scaling", json.dumps(case)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode == 0:
            rows.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "status": "ok"})
        else:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            rows.append({**{k: case[k] for k in ("backend", "axis", "dates", "patch", "batch")}, "status": tail})
            log.error("scaling case failed: %s", tail)
    return rows


def print_scaling(rows: Sequence[Mapping[str, Any]]) -> None:
    """Table: per axis and value, each backend's step time, peak memory and normalised cost."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Training step against dates / patch / batch (normalised cost flat = linear)")
    for col in ("axis", "value", "backend", "step ms", "peak MiB", "us / date-pixel", "KiB / date-pixel"):
        table.add_column(col, justify="left" if col in ("axis", "backend") else "right")
    for r in rows:
        if r.get("status") != "ok":
            table.add_row(str(r["axis"]), str(r[r["axis"]]), str(r["backend"]), "failed", "", "", "")
            continue
        table.add_row(
            str(r["axis"]),
            str(r[r["axis"]]),
            str(r["backend"]),
            f"{r['step_ms']:.1f}",
            f"{r['peak_memory_mb']:.0f}",
            f"{r['us_per_date_pixel']:.3f}",
            f"{r['kb_per_date_pixel']:.2f}",
        )
    Console(width=160).print(table)


def main(argv: Sequence[str] | None = None) -> None:
    """Child process: run the case given as JSON and print its row as JSON."""
    args = list(sys.argv[1:] if argv is None else argv)
    print(json.dumps(run_case(json.loads(args[0]))))


__all__ = ["CHANNELS", "main", "print_scaling", "run_case", "run_scaling", "scaling_cases"]


if __name__ == "__main__":
    main()
