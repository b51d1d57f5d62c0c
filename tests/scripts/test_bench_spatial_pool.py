"""scripts/bench_spatial_pool.py: the pools of the recipe timed side by side on a tiny batch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_times_every_pool_of_the_recipe_network() -> None:
    args = ["--batch", "1", "--side", "4", "--dates", "5", "--rounds", "1"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_spatial_pool.py"), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    counts = dict(re.findall(r"^(mean|attention|similarity): \d+ ms per step .*, (\d+) parameters$", proc.stdout, re.M))
    # the datacube recipe's network; attention adds query and key (1,024 -> 16 each) and 9 offset biases,
    # similarity a temperature and 9 offset biases
    assert counts == {
        "mean": "639845",
        "attention": str(639845 + 2 * (1024 * 16 + 16) + 9),
        "similarity": str(639845 + 1 + 9),
    }
    for pool in ("attention", "similarity"):
        assert re.search(rf"^ratio {pool} / mean: \d+\.\d\d$", proc.stdout, re.M)
