"""scripts/gpu_check.sh stays runnable without a GPU: its dry run exercises every step on the CPU."""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dry_run_writes_every_step_into_one_csv(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    env = {**os.environ, "BUDGET_S": "900"}
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (out / "gpu_check.log").read_text()
    with open(out / "all.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    runs = {r["run"] for r in rows}
    assert {"kernels", "kernels_compiled", "kernels_tf32", "kernels_tf32_defaults", "scaling", "epochs_fp32"} <= runs
    defaults = {r["variant"]: r for r in rows if r["run"] == "epochs_defaults"}
    assert set(defaults) == {"fp32_linear", "default", "conv"}, defaults
    assert defaults["conv"]["trained_backend"] == "conv" and defaults["fp32_linear"]["trained_backend"] == "linear"
    assert "Training with backend" in defaults["default"]["choices"]
    assert any(
        r["compile"] == "True" and r["compile_status"] == "compiled" for r in rows if r["run"] == "kernels_compiled"
    )
    assert all(float(r["fraction_of_peak"]) > 0 for r in rows if r["file"] == "bench" and r["fraction_of_peak"])
    parity = [r for r in rows if r["file"] == "compile_parity"]
    assert {(r["backend"], r["precision"]) for r in parity} == {("conv", "fp32"), ("conv", "bf16")}
    assert all(r["ok"] == "True" for r in parity), parity
    assert "all.csv" in (out / "SUMMARY.txt").read_text()


def test_without_a_gpu_it_stops_at_once_with_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "gpu")],
        cwd=REPO, env={**os.environ, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode == 0 or "nvidia-smi" not in proc.stderr + proc.stdout:
        pytest.skip("a GPU is visible here")
    assert proc.returncode == 3 and "no CUDA device found" in proc.stderr
