"""Side by side: the test metrics of several sweeps (one per model, folds and seeds pooled), per-class F1.

    python scripts/summarize_folds.py logs/worldcereal/multiruns/<dir> logs/worldcereal_rf/multiruns/<dir>

The rows are the sweep summary's (:func:`mtan_s1s2.sweep.aggregate.summarize_sweep`: one per
combination of swept values other than the seed and fold, its completed jobs pooled; the
same figures as each sweep's ``summary.md``), printed as one Markdown table across sweeps:
test OA, macro-F1, kappa, mIoU as mean ± sample std over the jobs, and each job's OA. Then
the mean ± std over the jobs of each class's test F1 (``test_per_class.csv``), which the
sweep summary does not pool. Within one sweep ``python -m mtan_s1s2.sweep.summarize DIR`` is
enough.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from mtan_s1s2.metrics import PER_CLASS_FILE
from mtan_s1s2.sweep.aggregate import SweepRow, summarize_sweep

METRICS = ("OA", "F1", "kappa", "mIoU")


def fmt(mean: float | None, std: float | None = None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.3f} ± {std or 0.0:.3f}"


def row_name(sweep: Path, row: SweepRow) -> str:
    task = sweep.parent.parent.name  # logs/<task_name>/multiruns/<dir>
    params = " ".join(f"{k}={v}" for k, v in row.params.items())
    return f"{task} {params}".strip()


def per_class_f1(row: SweepRow) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for job in row.records:
        path = job.path / PER_CLASS_FILE
        if path.is_file():
            with open(path) as f:
                for rec in csv.DictReader(f):
                    out.setdefault(rec["class_name"], []).append(float(rec["F1"]))
    return out


def main(sweeps: list[str]) -> None:
    rows = [(row_name(Path(s), r), r) for s in sweeps for r in summarize_sweep(s).rows if r.status == "completed"]
    print("| run | jobs | " + " | ".join(METRICS) + " | OA per job |")
    print("|---|---|" + "---|" * len(METRICS) + "---|")
    for name, r in rows:
        cells = [fmt(r.test_mean.get(m), r.test_std.get(m)) for m in METRICS]
        oa = ", ".join(f"{j.test['OA']:.3f}" for j in r.records if "OA" in j.test)
        print(f"| {name} | {len(r.records)} | " + " | ".join(cells) + f" | {oa} |")
    f1 = {name: per_class_f1(r) for name, r in rows}
    classes = list(dict.fromkeys(c for by_class in f1.values() for c in by_class))
    print("\n| class | " + " | ".join(f"F1 {name}" for name, _ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for c in classes:
        cells = []
        for name, _ in rows:
            v = f1[name].get(c, [])
            cells.append(fmt(statistics.mean(v), statistics.stdev(v) if len(v) > 1 else None) if v else "-")
        print(f"| {c} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
