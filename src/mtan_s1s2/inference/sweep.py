"""The summary of a prediction multirun: which scene went where, and which failed.

``python predict.py -m ckpt_path=... data=... scene=a,b,c`` runs one job per scene (with
``hydra/launcher=joblib`` on the cores of one machine, ``hydra/launcher=slurm`` on the nodes
of a cluster); each job writes its maps to ``<sweep dir>/<job>/<scene>/`` and a
``predict_summary.json``. At the end, :class:`PredictSweepSummary` writes at the sweep root:

* ``scenes.csv``: one row per scene: job, status, output folder, class map, pixels, no-data
  pixels, seconds, pixels/s (or the error of a failed job);
* ``predict_summary.json``: the same, with each job's full record.

It also pins the sweep directory for the launchers exactly as the training sweeps do
(:class:`~mtan_s1s2.sweep.callback.SweepSummaryCallback`), and exits with status 1 if a job
failed. ``python -m mtan_s1s2.inference.sweep <sweep dir>`` rebuilds the summary.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mtan_s1s2.sweep.callback import SweepSummaryCallback
from mtan_s1s2.utils.io import write_json_atomic

log = logging.getLogger(__name__)

SCENES_FILE = "scenes.csv"
COLUMNS = (
    "job",
    "scene",
    "status",
    "output_dir",
    "class_map",
    "n_pixels",
    "n_nodata",
    "predict_s",
    "pixels_per_s",
    "error",
)


def summarize_predictions(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Read every job's ``predict_summary.json`` under ``sweep_dir``; write ``scenes.csv`` and the summary.

    Returns:
        One row per scene (failed jobs: one row with the error).
    """
    sweep_dir = Path(sweep_dir)
    rows: list[dict[str, Any]] = []
    jobs: dict[str, Any] = {}
    for job in sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        path = job / "predict_summary.json"
        if not path.is_file():
            rows.append({"job": job.name, "status": "incomplete", "error": f"no {path.name} in {job}"})
            continue
        record = json.loads(path.read_text())
        jobs[job.name] = record
        if record.get("status") != "completed":
            rows.append(
                {"job": job.name, "scene": record.get("scene"), "status": "failed", "error": record.get("error")}
            )
            continue
        for sc in record.get("scenes") or []:
            rows.append(
                {
                    "job": job.name,
                    "scene": sc["scene"],
                    "status": "completed",
                    "output_dir": sc["output_dir"],
                    "class_map": sc["files"].get("class_map"),
                    "n_pixels": sc["n_pixels"],
                    "n_nodata": sc["n_nodata"],
                    "predict_s": round(float(sc["predict_s"]), 3),
                    "pixels_per_s": round(float(sc["pixels_per_s"] or 0), 1),
                }
            )
    with open(sweep_dir / SCENES_FILE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows([{k: r.get(k, "") for k in COLUMNS} for r in rows])
    write_json_atomic(sweep_dir / "predict_summary.json", {"sweep_dir": str(sweep_dir), "scenes": rows, "jobs": jobs})
    return rows


class PredictSweepSummary(SweepSummaryCallback):
    """Hydra callback of ``predict.py -m``: pin the sweep dir, then list the scenes' outputs.

    Args:
        fail_on_failed_jobs: Exit with status 1 when a job failed (default True).
    """

    def __init__(self, plot: bool = False, fail_on_failed_jobs: bool = True) -> None:
        super().__init__(plot=False, fail_on_failed_jobs=fail_on_failed_jobs)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write ``scenes.csv`` and ``predict_summary.json`` at the sweep root."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        rows = summarize_predictions(sweep_dir)
        done = [r for r in rows if r["status"] == "completed"]
        log.info("Predicted %d scene(s); outputs listed in %s", len(done), sweep_dir / SCENES_FILE)
        for r in rows:
            log.info("  job %s %s: %s %s", r["job"], r.get("scene"), r["status"], r.get("output_dir") or r.get("error"))
        bad = [r for r in rows if r["status"] != "completed"]
        if bad and self.fail_on_failed_jobs:
            raise SystemExit(f"{len(bad)} prediction job(s) did not complete; see {sweep_dir / SCENES_FILE}.")


if __name__ == "__main__":
    for row in summarize_predictions(sys.argv[1]):
        print(row)


__all__ = ["PredictSweepSummary", "summarize_predictions"]
