"""Self-supervised reconstruction: held-out dates, the masked MSE, the decoder, the pretraining module."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import random_batch, small_net_kwargs
from mtan_s1s2.models.mtan import ENCODER_MODULES, MTANClassifier
from mtan_s1s2.models.reconstruction import (
    MTANReconstructor,
    encoder_parameters,
    encoder_state_dict,
    held_out_dates,
    masked_mse_terms,
)
from mtan_s1s2.pretrain_module import SITSPretrainModule


def test_masked_mse_scores_only_the_masked_observations_on_a_hand_made_batch() -> None:
    # B=1, T=3, C=2, H=1, W=2: pixel 0 has dates 0 and 2 scored, pixel 1 only date 1.
    target = torch.tensor(
        [[[[1.0, 5.0]], [[2.0, 6.0]]], [[[float("nan"), 7.0]], [[float("nan"), 8.0]]], [[[3.0, 0.0]], [[4.0, 0.0]]]]
    )[None]  # (1, 3, 2, 1, 2)
    pred = torch.zeros_like(target.nan_to_num())
    pred[0, 1, :, 0, 0] = 100.0  # under a False mask: never scored
    mask = torch.tensor([[[[True, False]], [[False, True]], [[True, False]]]])  # (1, 3, 1, 2)
    total, count = masked_mse_terms(pred, target, mask)
    # scored: (t0, px0) 1, 2; (t1, px1) 7, 8; (t2, px0) 3, 4 -> squares 1+4+49+64+9+16
    assert float(total) == pytest.approx(143.0)
    assert float(count) == 6.0
    assert math.isfinite(float(total))


def test_masked_mse_of_nothing_scored_is_zero_not_nan() -> None:
    target = torch.full((2, 3, 4, 2, 2), float("nan"))
    total, count = masked_mse_terms(torch.zeros_like(target), target, torch.zeros(2, 3, 2, 2, dtype=torch.bool))
    assert float(total) == 0.0 and float(count) == 0.0


def test_held_out_dates_only_valid_dates_and_always_one_kept() -> None:
    mask = torch.zeros(3, 6, 2, 2, dtype=torch.bool)
    mask[0, :4, 0, 0] = True  # 4 valid dates, 2 padding
    mask[1, 2, 1, 1] = True  # a single valid date: never held out
    mask[2] = True  # 6 valid dates
    held = held_out_dates(mask, 0.5, torch.Generator().manual_seed(0))
    assert held[0, 4:].sum() == 0 and int(held[0].sum()) == 2
    assert int(held[1].sum()) == 0
    assert int(held[2].sum()) == 3
    with pytest.raises(ValueError, match=r"model.mask_ratio must be in \(0, 1\)"):
        held_out_dates(mask, 1.0)


def test_reconstruction_loss_ignores_values_under_masked_and_padded_observations() -> None:
    net = MTANClassifier({"s2": 10, "s1_asc": 3}, 5, **small_net_kwargs())
    rec = MTANReconstructor(net, mask_ratio=0.4)
    batch = random_batch(T={"s2": 7, "s1_asc": 5}, seed=1)  # NaN under every False mask
    inputs = {m: batch[m] for m in ("s2", "s1_asc")}
    held = {m: held_out_dates(inputs[m]["mask"], 0.4, torch.Generator().manual_seed(2)) for m in inputs}
    total, count, _ = rec(inputs, held)
    assert torch.isfinite(total) and count > 0
    garbage = {m: {**v, "x": torch.where(v["mask"][:, :, None], v["x"], torch.tensor(1e6))} for m, v in inputs.items()}
    total2, count2, _ = rec(garbage, held)
    assert torch.equal(total, total2) and torch.equal(count, count2)
    expected = sum(int((inputs[m]["mask"] & held[m][:, :, None, None]).sum()) * inputs[m]["x"].shape[2] for m in held)
    assert int(count) == expected
    total.backward()
    grads = [p.grad for p in encoder_parameters(net)]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_encoder_state_dict_holds_the_encoder_only() -> None:
    net = MTANClassifier({"s2": 10}, 5, **small_net_kwargs())
    keys = set(encoder_state_dict(net))
    assert keys and {k.split(".", 1)[0] for k in keys} == set(ENCODER_MODULES)
    assert not any(k.startswith(("head.", "head_norm.")) for k in keys)


def seasonal_batch(B: int = 2, T: int = 12, C: int = 3, H: int = 4, W: int = 4, seed: int = 0) -> dict:
    """Series that other dates predict: per pixel, a seasonal curve of its own phase and level."""
    g = torch.Generator().manual_seed(seed)
    doy = torch.sort(torch.rand(B, T, generator=g) * 365.0, dim=1).values
    phase = torch.rand(B, 1, 1, H, W, generator=g) * 6.28
    level = torch.randn(B, 1, C, H, W, generator=g)
    tau = (doy / 365.0)[:, :, None, None, None]
    x = level + torch.sin(6.28 * tau + phase) * torch.linspace(0.5, 1.5, C)[None, None, :, None, None]
    mask = torch.rand(B, T, H, W, generator=g) < 0.8
    return {"s2": {"x": x.masked_fill(~mask[:, :, None], float("nan")), "doy": doy, "mask": mask}}


def test_pretraining_loss_decreases_over_a_few_steps() -> None:
    torch.manual_seed(0)
    net = MTANClassifier({"s2": 3}, 5, **small_net_kwargs())
    module = SITSPretrainModule(net=net, mask_ratio=0.3)
    inputs = seasonal_batch()
    held = {"s2": held_out_dates(inputs["s2"]["mask"], 0.3, torch.Generator().manual_seed(4))}
    opt = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(40):
        total, count, _ = module.reconstructor(inputs, held)
        loss = total / count
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(p.grad is None for p in net.head.parameters())  # the head is not trained


def test_pretraining_refuses_a_network_that_is_not_an_mtan() -> None:
    from mtan_s1s2.models.tempcnn import TempCNN

    with pytest.raises(ValueError, match=r"task=pretrain pretrains the mTAN encoder, but model.net is TempCNN"):
        SITSPretrainModule(net=TempCNN({"s2": 10}, 5, {"s2": 6}))
