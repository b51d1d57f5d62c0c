"""Tests of the batch contract and collate_sits (mtan_s1s2.data.batch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtan_s1s2.data.batch import collate_sits, modalities_of
from mtan_s1s2.data.synthetic import GENERATOR_KEYS, PRESETS, SyntheticSITSDataset


def make_sample(t_s2: int, t_s1: int, patch_id: int, size: int = 4) -> dict:
    """A hand-made sample: S2 with ``t_s2`` dates, S1 ascending with ``t_s1`` dates."""
    g = torch.Generator().manual_seed(patch_id)
    return {
        "s2": {
            "x": torch.rand(t_s2, 10, size, size, generator=g),
            "doy": torch.sort(torch.rand(t_s2, generator=g) * 365).values,
            "mask": torch.rand(t_s2, size, size, generator=g) > 0.3,
        },
        "s1_asc": {
            "x": torch.randn(t_s1, 3, size, size, generator=g) - 12,
            "doy": torch.sort(torch.rand(t_s1, generator=g) * 365).values,
            "mask": torch.ones(t_s1, size, size, dtype=torch.bool),
        },
        "label": torch.randint(0, 11, (size, size), generator=g),
        "patch_id": patch_id,
    }


def test_collate_pads_each_modality_to_its_longest_series() -> None:
    samples = [make_sample(3, 5, 0), make_sample(6, 2, 1)]
    batch = collate_sits(samples)
    assert modalities_of(batch) == ["s2", "s1_asc"]
    assert batch["s2"]["x"].shape == (2, 6, 10, 4, 4)
    assert batch["s1_asc"]["x"].shape == (2, 5, 3, 4, 4)
    assert batch["s2"]["doy"].shape == (2, 6) and batch["s2"]["mask"].shape == (2, 6, 4, 4)
    assert batch["label"].shape == (2, 4, 4) and batch["label"].dtype == torch.int64
    assert batch["patch_id"].tolist() == [0, 1]
    for m, b, t in [("s2", 0, 3), ("s1_asc", 1, 2)]:  # (modality, padded sample, its length)
        x, doy, mask = batch[m]["x"][b], batch[m]["doy"][b], batch[m]["mask"][b]
        src = samples[b][m]
        assert torch.equal(x[:t], src["x"]) and torch.equal(mask[:t], src["mask"])
        assert torch.equal(doy[:t], src["doy"])
        assert (x[t:] == 0).all() and not mask[t:].any()
        assert torch.isfinite(doy).all() and (doy[t:] == src["doy"][-1]).all()
        assert (torch.diff(doy) >= 0).all()  # still monotonic


def test_collate_empty_modality_gets_finite_padding() -> None:
    batch = collate_sits([make_sample(0, 2, 0), make_sample(4, 2, 1)])
    assert batch["s2"]["x"].shape[1] == 4
    assert torch.isfinite(batch["s2"]["doy"]).all()
    assert not batch["s2"]["mask"][0].any() and (batch["s2"]["x"][0] == 0).all()


def test_collate_synthetic_samples_pads_with_zero_not_nan() -> None:
    tiny = PRESETS["tiny"]
    ds = SyntheticSITSDataset(n_samples=6, **{k: tiny[k] for k in ("patch_size", *GENERATOR_KEYS)})
    samples = [ds[i] for i in range(len(ds))]
    batch = collate_sits(samples)
    assert batch["patch_id"].tolist() == list(range(6))
    for m in ("s2", "s1_asc", "s1_desc"):
        lengths = [s[m]["doy"].shape[0] for s in samples]
        assert batch[m]["x"].shape[1] == max(lengths)
        for b, t in enumerate(lengths):
            assert (batch[m]["x"][b, t:] == 0).all() and not batch[m]["mask"][b, t:].any()
        x, mask = batch[m]["x"], batch[m]["mask"]
        assert not torch.isnan(x).any(dim=2)[mask].any()  # NaN only under a False mask
        assert torch.isfinite(batch[m]["doy"]).all()
    sanitised = torch.where(batch["s2"]["mask"][:, :, None], batch["s2"]["x"], 0.0)
    assert torch.isfinite(sanitised).all()


def test_collate_rejects_mixed_modalities_and_empty_lists() -> None:
    s2_only = make_sample(2, 2, 1)
    del s2_only["s1_asc"]
    with pytest.raises(ValueError, match="modalities"):
        collate_sits([make_sample(2, 2, 0), s2_only])
    with pytest.raises(ValueError, match="empty"):
        collate_sits([])


def test_modalities_of_uses_canonical_order() -> None:
    item = {"s1_desc": {}, "label": np.zeros(1), "s2": {}}
    assert modalities_of(item) == ["s2", "s1_desc"]
