"""The wheel carries the configs: an installed package trains from an empty directory.

Builds the wheel of this checkout, installs it (without its dependencies) into a fresh
virtual environment whose dependencies come from this interpreter's site-packages (no
network), and runs the installed ``mtan-train`` console script with the tiny preset from an
empty directory, far from any checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_wheel_install_trains_from_an_empty_directory(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-w", str(dist)], REPO)
    (wheel,) = dist.glob("mtan_s1s2-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    configs = sorted(n for n in names if n.startswith("mtan_s1s2/configs/") and n.endswith(".yaml"))
    assert len(configs) == len(list((REPO / "configs").rglob("*.yaml")))
    assert "mtan_s1s2/configs/train.yaml" in names and "mtan_s1s2/py.typed" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Dependencies (torch, lightning, hydra, ...) are borrowed from this interpreter; an
    # editable install of the checkout there is not (a .pth line adds a path, its own .pth
    # files are not processed).
    purelib = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path).strip()
    )
    here = {sysconfig.get_path("purelib"), *site.getsitepackages()}
    (purelib / "borrowed_dependencies.pth").write_text("\n".join(sorted(here)) + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], tmp_path)
    located = _run([str(python), "-c", "import mtan_s1s2; print(mtan_s1s2.__file__)"], tmp_path)
    assert str(purelib) in located, f"mtan_s1s2 imported from {located}, not from the wheel"

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MTAN_S1S2_CONFIG_DIR", "MTAN_S1S2_LOG_DIR")}
    _run(
        [
            str(env_dir / "bin" / "mtan-train"), "data=synthetic_tiny", "trainer=cpu", "trainer.max_epochs=1",
            "trainer.enable_progress_bar=false", "callbacks.progress_bar=null", "model.net.d_model=8",
            "model.net.embed_time=8", "model.net.num_ref_times=4", "model.net.head_hidden=[16,16]",
        ],
        empty,
        env=env,
    )  # fmt: skip
    (summary_path,) = empty.glob("logs/train/runs/*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "completed" and summary["metrics"]["test/OA"] is not None
