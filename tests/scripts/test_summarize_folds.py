"""scripts/summarize_folds.py: the sweep summary's rows of several sweeps in one table, per-class F1 pooled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _sweep(root: Path, task: str, test_oa: dict[int, float], f1: dict[int, dict[str, float]]) -> Path:
    """``logs/<task>/multiruns/<dir>`` with one completed job per fold (summary.json, test_per_class.csv)."""
    sweep = root / task / "multiruns" / "2026-01-01_00-00-00"
    for num, (fold, oa) in enumerate(test_oa.items()):
        job = sweep / str(num)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- data.split.fold={fold}\n- seed=1\n")
        metrics = {"test/OA": oa, "test/F1": oa - 0.1, "test/kappa": oa - 0.2, "test/mIoU": oa - 0.3}
        (job / "summary.json").write_text(json.dumps({"status": "completed", "metrics": metrics, "seed": 1}))
        rows = "".join(f"{c},{v}\n" for c, v in f1[fold].items())
        (job / "test_per_class.csv").write_text("class_name,F1\n" + rows)
    return sweep


def test_two_sweeps_side_by_side_with_the_sweep_summary_figures(tmp_path: Path) -> None:
    mtan = _sweep(tmp_path, "worldcereal", {1: 0.80, 2: 0.90}, {1: {"maize": 0.7, "wheat": 0.5}, 2: {"maize": 0.9}})
    rf = _sweep(tmp_path, "worldcereal_rf", {1: 0.70}, {1: {"maize": 0.6, "wheat": 0.4}})
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "summarize_folds.py"), str(mtan), str(rf)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # mean ± sample std over the two folds: OA 0.85 ± 0.0707, F1 0.75, kappa 0.65, mIoU 0.55
    assert "| worldcereal | 2 | 0.850 ± 0.071 | 0.750 ± 0.071 | 0.650 ± 0.071 | 0.550 ± 0.071 | 0.800, 0.900 |" in lines
    assert "| worldcereal_rf | 1 | 0.700 ± 0.000 | 0.600 ± 0.000 | 0.500 ± 0.000 | 0.400 ± 0.000 | 0.700 |" in lines
    assert "| maize | 0.800 ± 0.141 | 0.600 ± 0.000 |" in lines
    assert "| wheat | 0.500 ± 0.000 | 0.400 ± 0.000 |" in lines
