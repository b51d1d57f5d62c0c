"""C allocator detection, the one-time glibc warning, and its record in summary.json."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from mtan_s1s2.callbacks.run_summary import RunSummary
from mtan_s1s2.utils import allocator
from mtan_s1s2.utils.allocator import detect_allocator, find_allocator_library, warn_if_untuned_allocator
from mtan_s1s2.utils.hardware import hardware, precision_settings

KNOWN = ("tcmalloc", "jemalloc", "mimalloc", "glibc", "unknown")


def _maps(tmp_path: Path, *libs: str) -> str:
    lines = [f"7f0000{i:04x}000-7f0000{i:04x}fff r-xp 00000000 08:01 1234 {lib}" for i, lib in enumerate(libs)]
    path = tmp_path / "maps"
    path.write_text("\n".join([*lines, "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]"]) + "\n")
    return str(path)


def test_this_process_has_a_known_allocator() -> None:
    info = detect_allocator()
    assert info.name in KNOWN
    assert hardware()["allocator"] == info.label()


def test_detection_from_maps_ld_preload_and_tunables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_mallopt_applied", False)  # an earlier in-process train() tuned this process
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    tc = detect_allocator(_maps(tmp_path, libc, "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4.5.10"), environ={})
    assert (tc.name, tc.source, tc.tuned, tc.label()) == ("tcmalloc", "maps", True, "tcmalloc")
    je = detect_allocator(_maps(tmp_path, libc), environ={"LD_PRELOAD": "/opt/lib/libjemalloc.so.2"})
    assert (je.name, je.source, je.path) == ("jemalloc", "ld_preload", "/opt/lib/libjemalloc.so.2")
    default = detect_allocator(_maps(tmp_path, libc), environ={})
    assert (default.name, default.tuned, default.label()) == ("glibc", False, "glibc (default)")
    tuned = detect_allocator(
        _maps(tmp_path, libc), environ={"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.rtld.x=1"}
    )
    assert tuned.tuned and tuned.glibc_tunables == {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"}
    assert detect_allocator(str(tmp_path / "missing"), environ={}).name in ("glibc", "unknown")
    with pytest.raises(ValueError, match="hoard"):
        find_allocator_library("hoard")


def test_warns_once_on_cpu_with_default_glibc(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(allocator, "_warned", False)
    monkeypatch.setattr(
        allocator, "detect_allocator", lambda: allocator.AllocatorInfo("glibc", "default", None, False, {})
    )
    with caplog.at_level(logging.WARNING, logger="mtan_s1s2.utils.allocator"):
        assert not warn_if_untuned_allocator("cuda")
        assert warn_if_untuned_allocator("cpu")
        assert not warn_if_untuned_allocator("cpu")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "\n" not in messages[0]  # one line: the fix and where to read more
    assert f"GLIBC_TUNABLES={allocator.GLIBC_TUNED}" in messages[0] and "docs/benchmarks.md" in messages[0]
    monkeypatch.setattr(allocator, "_warned", False)
    monkeypatch.setattr(
        allocator, "detect_allocator", lambda: allocator.AllocatorInfo("tcmalloc", "maps", "/x", True, {})
    )
    assert not warn_if_untuned_allocator("cpu")


def test_precision_settings_are_recorded() -> None:
    settings = precision_settings()
    assert settings["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert {"cuda_matmul_allow_tf32", "cudnn_allow_tf32"} <= set(settings)


def test_run_summary_records_allocator(tmp_path: Path) -> None:
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    module = L.LightningModule()
    module.layer = torch.nn.Linear(2, 2)
    summary = RunSummary(output_dir=str(tmp_path)).build(trainer, module)
    assert summary.allocator["name"] in KNOWN and "tuned" in summary.allocator
    assert summary.hardware["allocator"] and summary.n_parameters == 6


_FAULTS = """
import resource, sys, torch
from mtan_s1s2.utils import allocator
if sys.argv[1] == "tuned":
    assert allocator.tune_glibc_malloc()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
x = torch.randn(100_000, 64)
def step():
    net.zero_grad(set_to_none=True)
    net(x).square().mean().backward()
step()  # warm-up: the first step faults its memory in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
info = allocator.detect_allocator()
print(faults, info.source, info.tuned)
"""


@pytest.mark.slow  # a measurement (page faults of repeated allocations), about a minute
def test_in_process_tuning_reuses_freed_memory_instead_of_faulting_it_in_again() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}  # glibc's defaults
    runs = {}
    for mode in ("default", "tuned"):
        samples = []  # three processes per mode, the median count: one process can fault more (memory pressure)
        for _ in range(3):
            cmd = [sys.executable, "-c", _FAULTS, mode]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            faults, source, tuned = out.stdout.split()
            samples.append(int(faults))
        runs[mode] = (sorted(samples)[1], source, tuned)
    if runs["default"][1] not in ("default", "mallopt"):
        pytest.skip(f"this Python does not run glibc's malloc ({runs['default'][1]})")
    assert runs["default"][1:] == ("default", "False") and runs["tuned"][1:] == ("mallopt", "True")
    # Default: every large activation of every step is mapped and faulted in afresh.
    assert runs["tuned"][0] < runs["default"][0] / 3, runs
