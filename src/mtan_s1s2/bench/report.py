"""Benchmark rows: the hardware stamp, ratios to ``linear``, a rich table, CSV and JSON.

Every row carries the full stamp (device, versions, threads, float32 matmul/cuDNN
precision flags, memory allocator), so a CSV line pasted anywhere is self-describing.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from mtan_s1s2.models.layers.mlp import REFERENCE_BACKEND
from mtan_s1s2.run_record import speedups
from mtan_s1s2.utils.hardware import hardware, precision_settings, versions

GROUP_KEYS: tuple[str, ...] = ("suite", "case", "pass", "precision", "compile")
"""Rows that differ only in backend are compared with each other."""


def stamp(device: torch.device | str, **extra: Any) -> dict[str, Any]:
    """Flat hardware/software/precision stamp of this process for ``device``.

    Keys: ``timestamp`` (UTC ISO 8601), versions (``python``, ``torch``, ...), hardware
    (``hostname``, ``cpu``, ``cpu_flags`` (the CPU's AVX2/AVX512/bf16/AMX flags, space-separated),
    ``cpu_count``, ``torch_threads``, ``device``, ``gpu``, ``cuda``, ``cudnn``, ``allocator``),
    the precision flags of
    :func:`~mtan_s1s2.utils.hardware.precision_settings`, then ``extra``.
    """
    out: dict[str, Any] = {"timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    out.update(versions())
    out.update(hardware(device))
    out["cpu_flags"] = " ".join(out["cpu_flags"])  # one CSV cell
    out.setdefault("gpu", None)
    out.update(precision_settings())
    out.update(extra)
    return out


def add_ratios(rows: list[dict[str, Any]], value_key: str = "median_ms", reference: str = REFERENCE_BACKEND) -> None:
    """Add ``speedup_vs_<reference>`` = reference time / row time (> 1: faster), in place.

    Rows are matched on :data:`GROUP_KEYS`; rows without a reference get None.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in GROUP_KEYS), []).append(r)
    for members in groups.values():
        ratios = speedups({r["backend"]: r.get(value_key) for r in members}, reference, "time")
        for r in members:
            r[f"speedup_vs_{reference}"] = ratios[r["backend"]]


def blocks_total_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``sum of MLP blocks`` row per backend/pass/precision/compile: summed medians."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["suite"] == "blocks":
            groups.setdefault((r["backend"], r["pass"], r["precision"], r["compile"]), []).append(r)
    out = []
    for members in groups.values():
        first = members[0]
        total = {
            **first,
            "case": "sum of MLP blocks",
            "shape": f"{len(members)} blocks",
            "median_ms": sum(m["median_ms"] for m in members),
            "mean_ms": sum(m["mean_ms"] for m in members),
            "flops": sum(m.get("flops") or 0 for m in members),
        }
        seconds = total["median_ms"] / 1e3
        total["gflop_per_s"] = total["flops"] / seconds / 1e9 if seconds > 0 else None
        peak = first.get(f"gemm_peak_gflop_per_s_{first['precision']}")
        total["fraction_of_peak"] = total["gflop_per_s"] / peak if total["gflop_per_s"] and peak else None
        total["gb_per_s"] = total["fraction_of_bandwidth"] = None
        for k in ("iqr_ms", "p25_ms", "p75_ms", "spread", "n_blocks", "calls_per_block"):
            total[k] = None
        out.append(total)
    return out


def _fmt_ms(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "-"
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def print_table(rows: Sequence[dict[str, Any]], title: str, console: Console | None = None) -> None:
    """Print one line per suite/case/pass/precision/compile.

    Per backend ``median (IQR)`` in ms (fastest in bold) with the fraction of the GEMM peak
    of this device and precision its counted FLOPs reach (``22%``), and, for the others,
    the speedup over ``linear`` (``x1.50`` = 1.5 times faster than linear, ``x0.50`` =
    twice as slow).
    """
    console = console or Console(width=220)
    suite_order = {s: i for i, s in enumerate(dict.fromkeys(r["suite"] for r in rows))}
    rows = sorted(rows, key=lambda r: suite_order[r["suite"]])  # stable: totals follow their suite
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    table = Table(title=title, show_lines=False)
    for col in ("suite", "case", "pass", "prec", "compiled"):
        table.add_column(col)
    for b in backends:
        table.add_column(f"{b} ms (IQR)", justify="right")
        if b != REFERENCE_BACKEND:
            table.add_column(f"{b} vs {REFERENCE_BACKEND}", justify="right")
    grouped: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(tuple(row.get(k) for k in GROUP_KEYS), {})[row["backend"]] = row
    for key, by_backend in grouped.items():
        cells = [str(v) for v in key]
        times = {b: r["median_ms"] for b, r in by_backend.items()}
        fastest = min(times, key=lambda b: times[b]) if times else None
        for b in backends:
            r = by_backend.get(b)
            if r is None:
                cells += ["-"] if b == REFERENCE_BACKEND else ["-", "-"]
                continue
            iqr = r.get("iqr_ms")
            text = _fmt_ms(r["median_ms"]) + (
                f" ({_fmt_ms(iqr)})" if iqr is not None and (r.get("n_blocks") or 0) > 1 else ""
            )
            if r.get("fraction_of_peak"):
                text += f" {r['fraction_of_peak']:.0%}"
            if str(r.get("compile_status", "")).startswith("fallback"):
                text += " [eager]"
            cells.append(f"[bold]{text}[/bold]" if b == fastest and len(times) > 1 else text)
            if b != REFERENCE_BACKEND:
                ratio = r.get(f"speedup_vs_{REFERENCE_BACKEND}")
                cells.append(f"x{ratio:.2f}" if ratio else "-")
        table.add_row(*cells)
    console.print(table)


def _csv_value(v: Any) -> Any:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str)
    return "" if v is None else v


def write_rows(
    rows: Sequence[dict[str, Any]], output_dir: Path, name: str, meta: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """Write ``<name>.csv`` and ``<name>.json`` into ``output_dir``.

    The CSV has one measurement per line, every column stamped; the JSON holds
    ``{"meta": ..., "rows": [...]}``.

    Returns:
        The CSV and JSON paths.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    columns: list[str] = list(dict.fromkeys(k for r in rows for k in r))
    csv_path, json_path = output_dir / f"{name}.csv", output_dir / f"{name}.json"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv_value(r.get(k)) for k in columns})
    json_path.write_text(json.dumps({"meta": meta or {}, "rows": list(rows)}, indent=2, default=str) + "\n")
    return csv_path, json_path


__all__ = ["GROUP_KEYS", "REFERENCE_BACKEND", "add_ratios", "blocks_total_rows", "print_table", "stamp", "write_rows"]
