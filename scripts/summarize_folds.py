"""Mean and spread of the test metrics of a sweep's jobs (one per fold or seed), per model.

    python scripts/summarize_folds.py logs/worldcereal/multiruns/<dir> logs/worldcereal_rf/multiruns/<dir>

Reads every job's ``summary.json`` (``test/OA``, ``test/F1``, ``test/kappa``, ``test/mIoU``)
and ``test_per_class.csv`` (per-class F1) and prints Markdown tables: one row per sweep
(mean ± sample std over its jobs, and the per-job values), then per-class F1.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

METRICS = ("test/OA", "test/F1", "test/kappa", "test/mIoU")


def jobs(sweep: Path) -> list[Path]:
    return sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def main(sweeps: list[str]) -> None:
    print("| run | jobs | " + " | ".join(m.split("/")[1] for m in METRICS) + " | OA per job |")
    print("|---|---|" + "---|" * len(METRICS) + "---|")
    per_class: dict[str, dict[str, list[float]]] = {}
    for s in sweeps:
        sweep = Path(s)
        values: dict[str, list[float]] = {m: [] for m in METRICS}
        name = sweep.parent.parent.name
        for job in jobs(sweep):
            if not (job / "test_per_class.csv").is_file():  # still running, or failed
                continue
            summary = json.loads((job / "summary.json").read_text())
            for m in METRICS:
                if m in summary["metrics"]:
                    values[m].append(float(summary["metrics"][m]))
            with open(job / "test_per_class.csv") as f:
                for row in csv.DictReader(f):
                    per_class.setdefault(row["class_name"], {}).setdefault(name, []).append(float(row["F1"]))
        oa = ", ".join(f"{v:.3f}" for v in values["test/OA"])
        print(f"| {name} | {len(values['test/OA'])} | " + " | ".join(fmt(values[m]) for m in METRICS) + f" | {oa} |")
    names = [Path(s).parent.parent.name for s in sweeps]
    print("\n| class | " + " | ".join(f"F1 {n}" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for cls, by_run in per_class.items():
        print(f"| {cls} | " + " | ".join(fmt(by_run.get(n, [])) for n in names) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
