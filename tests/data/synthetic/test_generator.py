"""Tests of the synthetic S1/S2 generator and dataset (mtan_s1s2.data.synthetic)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mtan_s1s2.data.batch import CLASS_NAMES, MODALITY_CHANNELS, S2_BANDS
from mtan_s1s2.data.synthetic.dataset import SyntheticSITSDataset
from mtan_s1s2.data.synthetic.generator import GENERATOR_KEYS, PRESETS, SyntheticConfig, generate_patch

MODS = ("s2", "s1_asc", "s1_desc")
TINY = {k: PRESETS["tiny"][k] for k in ("patch_size", *GENERATOR_KEYS)}
WHEAT, BARLEY, MAIZE, SUNFLOWER = (
    CLASS_NAMES.index(c) for c in ("winter_wheat", "winter_barley", "maize", "sunflower")
)


def tiny_dataset(n: int = 8, **kwargs) -> SyntheticSITSDataset:
    return SyntheticSITSDataset(n_samples=n, **{**TINY, **kwargs})


@pytest.fixture(scope="module")
def patches() -> list[dict]:
    """80 raw tiny patches (numpy), shared by the statistical tests."""
    config = SyntheticConfig(**TINY)
    return [generate_patch(config, (0, 0, i)) for i in range(80)]


def s2_ndvi(x: np.ndarray) -> np.ndarray:
    """NDVI ``(B08 - B04) / (B08 + B04)`` of ``(T, 10, H, W)`` reflectance -> ``(T, H, W)``."""
    red, nir = x[:, S2_BANDS.index("B04")], x[:, S2_BANDS.index("B08")]
    return (nir - red) / (nir + red + 1e-6)


def pooled_curve(patches: list[dict], cls: int, modality: str, channel: int | None, edges: np.ndarray) -> np.ndarray:
    """Mean over valid observations of pixels labelled ``cls``, per DOY bin (NaN if empty).

    ``channel=None`` on S2 means NDVI.
    """
    total, count = np.zeros(len(edges) - 1), np.zeros(len(edges) - 1)
    for p in patches:
        d = p[modality]
        values = s2_ndvi(d["x"]) if channel is None else d["x"][:, channel]  # (T, H, W)
        keep = d["mask"] & (p["label"] == cls)[None]
        bins = np.digitize(d["doy"], edges) - 1
        inside = (bins >= 0) & (bins < len(edges) - 1)
        np.add.at(total, bins[inside], np.where(keep, values, 0).sum((1, 2))[inside])
        np.add.at(count, bins[inside], keep.sum((1, 2))[inside])
    with np.errstate(invalid="ignore"):
        return total / count


def test_sample_follows_batch_contract() -> None:
    ds = tiny_dataset()
    sample = ds[2]
    size = TINY["patch_size"]
    assert set(sample) == {*MODS, "label", "patch_id"}
    assert sample["patch_id"] == 2
    for m in MODS:
        x, doy, mask = sample[m]["x"], sample[m]["doy"], sample[m]["mask"]
        t = doy.shape[0]
        assert x.shape == (t, len(MODALITY_CHANNELS[m]), size, size) and x.dtype == torch.float32
        assert doy.shape == (t,) and doy.dtype == torch.float32
        assert mask.shape == (t, size, size) and mask.dtype == torch.bool
    label = sample["label"]
    assert label.shape == (size, size) and label.dtype == torch.int64
    assert 0 <= int(label.min()) and int(label.max()) < len(CLASS_NAMES)
    assert ds.in_channels == {"s2": 10, "s1_asc": 3, "s1_desc": 3}


def _assert_same(a: dict, b: dict) -> None:
    for m in MODS:
        for k in ("x", "doy", "mask"):
            np.testing.assert_array_equal(a[m][k].numpy(), b[m][k].numpy())  # NaN == NaN here
    assert torch.equal(a["label"], b["label"])


def test_deterministic_by_seed_and_index() -> None:
    a, b = tiny_dataset(seed=7), tiny_dataset(seed=7)
    _assert_same(a[3], b[3])
    _assert_same(a[3], a[3])
    assert not torch.equal(a[3]["label"], a[4]["label"])
    assert not torch.equal(a[3]["label"], tiny_dataset(seed=8)[3]["label"])
    assert not torch.equal(a[3]["label"], tiny_dataset(seed=7, split="val")[3]["label"])
    assert a[-1]["patch_id"] == len(a) - 1
    with pytest.raises(IndexError):
        a[len(a)]


def test_modality_subset_gives_same_arrays() -> None:
    full, s2_only = tiny_dataset()[5], tiny_dataset(modalities=["s2"])[5]
    assert set(s2_only) == {"s2", "label", "patch_id"}
    np.testing.assert_array_equal(full["s2"]["x"].numpy(), s2_only["s2"]["x"].numpy())
    assert torch.equal(full["label"], s2_only["label"])


def test_mask_semantics(patches: list[dict]) -> None:
    n_invalid, n_nan = dict.fromkeys(MODS, 0), dict.fromkeys(MODS, 0)
    for p in patches:
        for m in MODS:
            x, mask = p[m]["x"], p[m]["mask"]
            nan = np.isnan(x)  # (T, C, H, W)
            assert not (nan & mask[:, None]).any(), f"{m}: NaN under a True mask"
            assert np.isfinite(x[np.broadcast_to(mask[:, None], x.shape)]).all(), f"{m}: non-finite valid value"
            assert (nan.any(1) == nan.all(1)).all(), f"{m}: NaN in some channels only"
            n_invalid[m] += int((~mask).sum())
            n_nan[m] += int(nan.any(1).sum())
    for m in MODS:  # clouds/shadows and no-data actually occur
        assert n_invalid[m] > 0 and n_nan[m] > 0, m
    assert n_invalid["s2"] > n_nan["s2"]  # clouds and shadows are masked but finite


def test_value_ranges(patches: list[dict]) -> None:
    def valid(m: str) -> np.ndarray:  # (N, C) valid observations
        return np.concatenate([p[m]["x"].transpose(0, 2, 3, 1)[p[m]["mask"]] for p in patches])

    s2 = valid("s2")
    assert 0 <= s2.min() and s2.max() <= 1 and 0.05 < np.median(s2) < 0.4  # reflectance
    s1 = valid("s1_asc")
    assert -40 < np.percentile(s1[:, :2], 0.1) and np.percentile(s1[:, :2], 99.9) < 10  # backscatter, dB
    np.testing.assert_allclose(s1[:, 2], s1[:, 1] - s1[:, 0], atol=1e-5)  # VH/VV ratio in dB


def test_dates_sorted_in_year_and_unaligned(patches: list[dict]) -> None:
    for p in patches[:20]:
        for m in MODS:
            doy = p[m]["doy"]
            assert doy.dtype == np.float32
            assert (np.diff(doy) > 0).all() and doy.min() >= 0 and doy.max() < 365
        assert not np.intersect1d(p["s2"]["doy"], p["s1_asc"]["doy"]).size
        assert not np.intersect1d(p["s2"]["doy"], p["s1_desc"]["doy"]).size
        assert not np.intersect1d(p["s1_asc"]["doy"], p["s1_desc"]["doy"]).size


@pytest.mark.parametrize("preset", ["tiny", "default", "bench"])
def test_date_counts_match_preset(preset: str) -> None:
    cfg = PRESETS[preset]
    config = SyntheticConfig(**{k: cfg[k] for k in ("patch_size", *GENERATOR_KEYS)})
    r2 = cfg["s2_revisit_days"]
    for i in range(6 if preset == "tiny" else 2):  # larger presets are slower to generate
        patch = generate_patch(config, (0, 0, i))
        n_s2 = patch["s2"]["doy"].shape[0]
        assert 0.6 * math.floor(365 / r2) <= n_s2 <= math.ceil(365 / r2), (preset, n_s2)
        for orbit in ("s1_asc", "s1_desc"):
            n_s1 = patch[orbit]["doy"].shape[0]
            assert any(math.floor(365 / r) <= n_s1 <= math.ceil(365 / r) for r in cfg["s1_revisit_days"])


def test_class_distribution_unbalanced_and_complete(patches: list[dict]) -> None:
    counts = np.bincount(np.concatenate([p["label"].ravel() for p in patches[:50]]), minlength=len(CLASS_NAMES))
    labelled = counts[1:]
    assert (labelled > 0).all(), f"missing classes: {counts}"
    assert labelled.max() / labelled.min() > 3, f"not unbalanced enough: {counts}"
    assert 0 < counts[0] / counts.sum() < 0.35, f"unlabelled share: {counts}"


def test_wheat_and_barley_differ_by_timing(patches: list[dict]) -> None:
    edges = np.arange(0, 366, 5.0)
    wheat = pooled_curve(patches, WHEAT, "s2", None, edges)
    barley = pooled_curve(patches, BARLEY, "s2", None, edges)
    assert abs(np.nanmax(wheat) - np.nanmax(barley)) < 0.06  # same shape...

    def mismatch(shift: int) -> float:  # compare wheat(t) with barley(t - shift bins)
        d = wheat[shift:] - barley[: len(barley) - shift]
        return float(np.nanmean(d**2))

    best = min(range(0, 9), key=mismatch)
    assert 10 <= best * 5 <= 30, f"barley leads wheat by {best * 5} days"  # ...about 3 weeks earlier
    assert mismatch(best) < 0.25 * mismatch(0)


def test_maize_and_sunflower_differ_only_in_s1(patches: list[dict]) -> None:
    edges = np.arange(0, 366, 30.5)
    ndvi_maize = pooled_curve(patches, MAIZE, "s2", None, edges)
    ndvi_sun = pooled_curve(patches, SUNFLOWER, "s2", None, edges)
    assert np.nanmax(np.abs(ndvi_maize - ndvi_sun)) < 0.06, f"{ndvi_maize} vs {ndvi_sun}"
    summer = np.array([180.0, 250.0])  # one DOY bin
    ratio_maize = pooled_curve(patches, MAIZE, "s1_asc", 2, summer)[0]
    ratio_sun = pooled_curve(patches, SUNFLOWER, "s1_asc", 2, summer)[0]
    assert abs(ratio_maize - ratio_sun) > 2.0, f"VH/VV in summer: maize {ratio_maize} dB, sunflower {ratio_sun} dB"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"modalities": ["s2", "s3"]}, r"'s3'.*valid modalities are \['s2', 's1_asc', 's1_desc'\]"),
        ({"modalities": "s2"}, "list of names"),
        ({"modalities": []}, "empty"),
        ({"n_samples": -1}, "n_samples"),
        ({"patch_size": 2}, "patch_size=2"),
        ({"s2_revisit_days": 0}, "s2_revisit_days=0"),
        ({"s2_drop_prob": 1.0}, "s2_drop_prob=1.0"),
        ({"s1_revisit_days": (6.5,)}, "s1_revisit_days"),
        ({"s1_revisit_days": 6}, "s1_revisit_days"),
        ({"cloud_prob": 1.5}, "cloud_prob=1.5"),
        ({"split": "holdout"}, r"'holdout'.*\['train', 'val', 'test'\]"),
    ],
)
def test_invalid_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SyntheticSITSDataset(**{"n_samples": 2, **kwargs})
