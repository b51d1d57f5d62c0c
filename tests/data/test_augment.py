"""Training augmentations: temporal dropout, date shift, Gaussian noise; training batches only."""

from __future__ import annotations

import pytest
import torch

from conftest import random_batch
from mtan_s1s2.data.augment import SITSAugment


def test_off_by_default_and_config_checks() -> None:
    assert SITSAugment.from_config(None) is None
    assert SITSAugment.from_config({"temporal_dropout": 0, "noise_std": 0.0}) is None
    with pytest.raises(ValueError, match=r"Unknown model.augment key\(s\) \['mixup'\]"):
        SITSAugment.from_config({"mixup": 0.2})
    with pytest.raises(ValueError, match=r"temporal_dropout must be in \[0, 1\)"):
        SITSAugment(temporal_dropout=1.0)


def test_temporal_dropout_drops_whole_dates_and_keeps_one() -> None:
    torch.manual_seed(0)
    batch = random_batch(B=64, T={"s2": 6, "s1_asc": 5}, p_valid=1.0, nan_under_mask=False)
    out = SITSAugment(temporal_dropout=0.5)(batch)
    for m in ("s2", "s1_asc"):
        mask = out[m]["mask"]
        per_date = mask.reshape(*mask.shape[:2], -1)
        assert (per_date.all(dim=2) | ~per_date.any(dim=2)).all()  # a date is dropped for every pixel
        assert per_date.any(dim=2).any(dim=1).all()  # every sample keeps a date
        share = 1 - per_date.any(dim=2).float().mean()
        assert 0.35 < float(share) < 0.6
        assert torch.equal(out[m]["x"], batch[m]["x"])  # values untouched
    heavy = SITSAugment(temporal_dropout=0.99)(batch)
    assert heavy["s2"]["mask"].reshape(64, 6, -1).any(dim=2).any(dim=1).all()


def test_date_shift_is_one_offset_per_sample_and_noise_only_on_valid_values() -> None:
    torch.manual_seed(1)
    batch = random_batch(B=8, nan_under_mask=False)
    out = SITSAugment(date_shift_days=10.0, noise_std=0.5)(batch)
    shift = {m: out[m]["doy"] - batch[m]["doy"] for m in ("s2", "s1_asc", "s1_desc")}
    for d in shift.values():
        assert torch.allclose(d, d[:, :1].expand_as(d)) and d.abs().max() <= 10.0
        assert torch.allclose(d[:, 0], shift["s2"][:, 0])  # same offset for every modality
    diff = out["s2"]["x"] - batch["s2"]["x"]
    invalid = ~batch["s2"]["mask"][:, :, None].expand_as(diff)
    assert torch.all(diff[invalid] == 0) and 0.3 < float(diff[~invalid].std()) < 0.7


def test_the_training_module_applies_it_to_training_batches_only() -> None:
    from conftest import small_net_kwargs
    from mtan_s1s2.lit_module import SITSClassifierModule
    from mtan_s1s2.models.mtan import MTANClassifier

    net = MTANClassifier({"s2": 10, "s1_asc": 3, "s1_desc": 3}, 11, **small_net_kwargs())
    module = SITSClassifierModule(net, augment={"noise_std": 1.0})
    assert SITSClassifierModule(net).augment is None  # the default: off
    batch = random_batch(B=2, nan_under_mask=False)

    class Trainer:  # the one attribute the hook reads
        training = False

    module._trainer = Trainer()  # type: ignore[assignment]
    assert module.on_after_batch_transfer(batch, 0) is batch
    Trainer.training = True
    out = module.on_after_batch_transfer(batch, 0)
    assert not torch.equal(out["s2"]["x"], batch["s2"]["x"])
