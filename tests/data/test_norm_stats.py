"""Tests of compute_norm_stats and the compute_norm_stats script."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from mtan_s1s2.data.norm_stats import compute_norm_stats, norm_stats_to_yaml
from mtan_s1s2.data.synthetic import GENERATOR_KEYS, PRESETS, SyntheticSITSDataset

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compute_norm_stats.py"


def tiny_dataset(n: int = 6, **kwargs) -> SyntheticSITSDataset:
    tiny = PRESETS["tiny"]
    return SyntheticSITSDataset(n_samples=n, **{k: tiny[k] for k in ("patch_size", *GENERATOR_KEYS)}, **kwargs)


def test_stats_use_valid_observations_only() -> None:
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(3):
        x = torch.randn(4, 3, 5, 5, generator=g) * 2 + torch.tensor([1.0, -10.0, 5.0])[:, None, None]
        mask = torch.rand(4, 5, 5, generator=g) > 0.4
        garbage = torch.where(torch.rand(4, 1, 5, 5, generator=g) > 0.5, float("nan"), 1e6)
        x = torch.where(mask[:, None], x, garbage)
        samples.append({"s1_asc": {"x": x, "doy": torch.arange(4.0), "mask": mask}, "label": torch.zeros(5, 5)})
    stats = compute_norm_stats(samples, n_samples=None, decimals=6)
    valid = torch.cat([s["s1_asc"]["x"].permute(0, 2, 3, 1)[s["s1_asc"]["mask"]] for s in samples]).double()
    np.testing.assert_allclose(stats["s1_asc"]["mean"], valid.mean(0).numpy(), atol=1e-6)
    np.testing.assert_allclose(stats["s1_asc"]["std"], valid.std(0, unbiased=False).numpy(), atol=1e-6)
    assert list(stats) == ["s1_asc"]


def test_synthetic_stats_standardise_the_data() -> None:
    stats = compute_norm_stats(tiny_dataset(), n_samples=6)
    assert set(stats) == {"s2", "s1_asc", "s1_desc"}
    assert all(isinstance(v, float) and round(v, 4) == v for s in stats.values() for v in s["mean"] + s["std"])
    again = compute_norm_stats(tiny_dataset(norm_stats=stats), n_samples=6)
    for m, s in again.items():  # normalised data: zero mean, unit std (up to the rounding)
        np.testing.assert_allclose(s["mean"], 0, atol=0.01, err_msg=m)
        np.testing.assert_allclose(s["std"], 1, atol=0.01, err_msg=m)


def test_yaml_round_trip() -> None:
    stats = {"s2": {"mean": [0.1, 0.25], "std": [0.01, 0.5]}, "s1_asc": {"mean": [-10.5], "std": [4.0]}}
    assert yaml.safe_load(norm_stats_to_yaml(stats)) == {"norm_stats": stats}


def test_no_samples_raises() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        compute_norm_stats(tiny_dataset(), n_samples=0)


def test_script_prints_yaml(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--preset", "tiny", "--n-samples", "2", "--seed", "1"])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    stats = yaml.safe_load(capsys.readouterr().out)["norm_stats"]
    assert len(stats["s2"]["mean"]) == 10 and len(stats["s1_desc"]["std"]) == 3
