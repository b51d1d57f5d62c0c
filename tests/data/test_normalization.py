"""Tests of the normalisation statistics: check, compute, apply, cache, and the script."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import Subset

from mtan_s1s2.data.normalization import (
    ChannelStats,
    NormalizedDataset,
    check_norm_stats,
    compute_norm_stats,
    load_or_compute_norm_stats,
    norm_stats_to_yaml,
    normalize_sample,
)
from mtan_s1s2.data.synthetic import GENERATOR_KEYS, PRESETS, SyntheticSITSDataset

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compute_norm_stats.py"


def tiny_dataset(n: int = 6, **kwargs) -> SyntheticSITSDataset:
    tiny = PRESETS["tiny"]
    return SyntheticSITSDataset(n_samples=n, **{k: tiny[k] for k in ("patch_size", *GENERATOR_KEYS)}, **kwargs)


def _garbage_samples() -> list[dict]:
    """S1-like samples whose invalid observations hold NaN or 1e6 (must never count)."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5, generator=g) * 2 + torch.tensor([1.0, -10.0, 5.0])[:, None, None]
        mask = torch.rand(4, 5, 5, generator=g) > 0.4
        garbage = torch.where(torch.rand(4, 1, 5, 5, generator=g) > 0.5, float("nan"), 1e6)
        x = torch.where(mask[:, None], x, garbage)
        samples.append({"s1_asc": {"x": x, "doy": torch.arange(4.0), "mask": mask}, "label": torch.zeros(5, 5)})
    return samples


def test_stats_use_valid_observations_only() -> None:
    samples = _garbage_samples()
    stats = compute_norm_stats(samples)
    valid = torch.cat([s["s1_asc"]["x"].permute(0, 2, 3, 1)[s["s1_asc"]["mask"]] for s in samples]).double()
    np.testing.assert_allclose(stats["s1_asc"].mean, valid.mean(0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(stats["s1_asc"].std, valid.std(0, unbiased=False).numpy(), rtol=1e-6)
    assert list(stats) == ["s1_asc"] and stats["s1_asc"].n_valid == valid.shape[0]


def test_chan_merge_keeps_precision_of_large_digital_numbers() -> None:
    """Reflectance stored as DN around 1e4 with a tiny spread: float64 per sample, merged exactly."""
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(5):
        x = (10000 + rng.normal(0, 0.5, (3, 1, 4, 4))).astype(np.float32)
        samples.append({"s2": {"x": torch.from_numpy(x), "mask": torch.ones(3, 4, 4, dtype=torch.bool)}})
    stats = compute_norm_stats(samples)
    pooled = np.concatenate([s["s2"]["x"].numpy().ravel() for s in samples]).astype(np.float64)
    np.testing.assert_allclose(stats["s2"].std, [pooled.std()], rtol=1e-5)


def test_synthetic_stats_standardise_the_data() -> None:
    stats = compute_norm_stats(tiny_dataset())
    assert set(stats) == {"s2", "s1_asc", "s1_desc"}
    again = compute_norm_stats(NormalizedDataset(tiny_dataset(), stats))
    for m, s in again.items():  # normalised data: zero mean, unit std
        np.testing.assert_allclose(s.mean, 0, atol=1e-4, err_msg=m)
        np.testing.assert_allclose(s.std, 1, atol=1e-4, err_msg=m)


def test_normalize_sample_per_channel_and_leaves_the_rest() -> None:
    stats = check_norm_stats(
        {
            "s2": {"mean": [0.1] * 10, "std": [0.05] * 10},
            "s1_asc": {"mean": [-10.0, -17.0, -7.0], "std": [4.0, 4.0, 3.0]},
            "s1_desc": {"mean": [-11.0, -18.0, -7.0], "std": [4.0, 4.0, 3.0]},
            "unused": {"mean": [0.0], "std": [1.0]},  # extra modalities are ignored
        },
        {"s2": 10, "s1_asc": 3, "s1_desc": 3},
    )
    raw = tiny_dataset()[1]
    norm = normalize_sample(raw, stats)
    for m in ("s2", "s1_asc", "s1_desc"):
        mean = torch.from_numpy(stats[m].mean)[:, None, None]
        std = torch.from_numpy(stats[m].std)[:, None, None]
        np.testing.assert_allclose(norm[m]["x"].numpy(), ((raw[m]["x"] - mean) / std).numpy(), rtol=1e-6)
        assert norm[m]["mask"] is raw[m]["mask"] and norm[m]["doy"] is raw[m]["doy"]
    assert norm["label"] is raw["label"]
    assert NormalizedDataset(tiny_dataset(), None)[1]["s2"]["x"].equal(raw["s2"]["x"])


@pytest.mark.parametrize(
    ("stats", "match"),
    [
        ({"s2": {"mean": [0.0] * 10, "std": [1.0] * 10}}, "no entry for modality 's1_asc'"),
        ({"s2": {"mean": [0.0] * 10}, "s1_asc": {"mean": [0.0] * 3, "std": [1.0] * 3}}, "'mean' and 'std'"),
        ({"s2": {"mean": [0.0], "std": [1.0]}, "s1_asc": {"mean": [0.0] * 3, "std": [1.0] * 3}}, "needs 10"),
        ({"s2": {"mean": [0.0] * 10, "std": [0.0] * 10}, "s1_asc": {"mean": [0] * 3, "std": [1] * 3}}, "positive"),
    ],
)
def test_bad_stats_raise_clear_errors(stats: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_norm_stats(stats, {"s2": 10, "s1_asc": 3})


def test_yaml_round_trip() -> None:
    stats = {"s2": {"mean": [0.1, 0.25], "std": [0.01, 0.5]}, "s1_asc": {"mean": [-10.5], "std": [4.0]}}
    parsed = {m: ChannelStats(np.asarray(s["mean"]), np.asarray(s["std"])) for m, s in stats.items()}
    assert yaml.safe_load(norm_stats_to_yaml(parsed)) == {"norm_stats": stats}


def test_empty_samples_and_no_valid_observation_raise() -> None:
    with pytest.raises(ValueError, match="empty"):
        compute_norm_stats(Subset(tiny_dataset(), []), what="the training split")
    sample = {"s2": {"x": torch.zeros(2, 10, 3, 3), "mask": torch.zeros(2, 3, 3, dtype=torch.bool)}}
    with pytest.raises(ValueError, match="no valid observation"):
        compute_norm_stats([sample])


def test_cache_is_reused_extended_and_recomputed_when_its_key_changes(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    samples = _garbage_samples()
    calls: list[list[str]] = []

    def compute(mods):
        calls.append(list(mods))
        return compute_norm_stats(samples, list(mods))

    first = load_or_compute_norm_stats(path, {"ids": [1, 2]}, ["s1_asc"], compute)
    again = load_or_compute_norm_stats(path, {"ids": [1, 2]}, ["s1_asc"], compute)
    assert calls == [["s1_asc"]] and np.array_equal(first["s1_asc"].mean, again["s1_asc"].mean)
    content = json.loads(path.read_text())
    assert content["ids"] == [1, 2] and content["stats"]["s1_asc"]["n_valid"] == first["s1_asc"].n_valid
    load_or_compute_norm_stats(path, {"ids": [1, 3]}, ["s1_asc"], compute)  # other training samples
    load_or_compute_norm_stats(path, {"ids": [1, 3]}, ["s1_asc"], compute, recompute=True)
    assert calls == [["s1_asc"]] * 3
    path.write_text("{ half a file")
    load_or_compute_norm_stats(path, {"ids": [1, 3]}, ["s1_asc"], compute)  # unreadable: recomputed
    assert len(calls) == 4 and json.loads(path.read_text())["ids"] == [1, 3]
    assert not list(tmp_path.glob(".*.tmp")), "atomic writes leave no temporary file"


def test_script_prints_yaml(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--preset", "tiny", "--n-samples", "2", "--seed", "1"])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    stats = yaml.safe_load(capsys.readouterr().out)["norm_stats"]
    assert len(stats["s2"]["mean"]) == 10 and len(stats["s1_desc"]["std"]) == 3
    assert all(round(v, 4) == v for s in stats.values() for v in s["mean"] + s["std"])
