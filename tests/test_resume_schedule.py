"""A resumed fit follows a changed optimiser and schedule, as a fresh run of the new config would."""

from __future__ import annotations

import math

import pytest
import torch

from mtan_s1s2.resume_schedule import apply_new_optimization, config_differences, describe_changes

ADAMW = {"_target_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 1e-2}
COSINE = {"_target_": "torch.optim.lr_scheduler.CosineAnnealingLR", "T_max": 2}
PLATEAU = {"_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau", "mode": "max", "factor": 0.5, "patience": 3}


def _checkpoint(optimizer_cfg: dict, scheduler_cfg: dict | None, epochs: int) -> dict:
    """A checkpoint as Lightning writes it after ``epochs`` epochs of one AdamW step each."""
    param = torch.nn.Parameter(torch.ones(3))
    kwargs = {k: v for k, v in optimizer_cfg.items() if k != "_target_"}
    optimizer = torch.optim.AdamW([param], **kwargs)
    scheduler = None
    if scheduler_cfg is not None and scheduler_cfg["_target_"].endswith("CosineAnnealingLR"):
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=scheduler_cfg["T_max"])
    elif scheduler_cfg is not None:
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=3)
    for _ in range(epochs):
        param.grad = torch.full_like(param, 0.1)
        optimizer.step()
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(0.5)
        elif scheduler is not None:
            scheduler.step()
    return {
        "epoch": epochs,
        "hyper_parameters": {"optimizer": optimizer_cfg, "scheduler": scheduler_cfg},
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()] if scheduler is not None else [],
    }


def test_new_lr_and_schedule_apply_as_a_fresh_run_of_the_new_config() -> None:
    checkpoint = _checkpoint(ADAMW, COSINE, epochs=2)
    moments = checkpoint["optimizer_states"][0]["state"][0]["exp_avg"].clone()
    new_opt, new_sched = {**ADAMW, "lr": 1e-4}, {**COSINE, "T_max": 4}
    changed = apply_new_optimization(checkpoint, new_opt, new_sched)
    assert changed == {
        "model.optimizer.lr": [1e-3, 1e-4],
        "model.scheduler.T_max": [2, 4],
        "lr": [pytest.approx(0.0, abs=1e-12), pytest.approx(5e-5)],  # cosine over 4 epochs from 1e-4, at epoch 2
    }
    group = checkpoint["optimizer_states"][0]["param_groups"][0]
    assert group["lr"] == pytest.approx(1e-4 * (1 + math.cos(math.pi * 2 / 4)) / 2)
    assert group["initial_lr"] == 1e-4 and group["weight_decay"] == 1e-2
    sched = checkpoint["lr_schedulers"][0]
    assert sched["T_max"] == 4 and sched["base_lrs"] == [1e-4] and sched["last_epoch"] == 2
    assert torch.equal(checkpoint["optimizer_states"][0]["state"][0]["exp_avg"], moments)  # moments kept
    message = describe_changes(changed, "a/last.ckpt")
    assert (
        "model.optimizer.lr 0.001 -> 0.0001, model.scheduler.T_max 2 -> 4" in message and "(lr 0 -> 5e-05)" in message
    )


def test_the_same_config_leaves_the_checkpoint_untouched() -> None:
    checkpoint = _checkpoint(ADAMW, COSINE, epochs=1)
    before = checkpoint["lr_schedulers"][0].copy()
    assert apply_new_optimization(checkpoint, dict(ADAMW), dict(COSINE)) == {}
    assert checkpoint["lr_schedulers"][0] == before


def test_plateau_keeps_its_counters_and_restarts_from_the_new_lr() -> None:
    checkpoint = _checkpoint(ADAMW, PLATEAU, epochs=3)
    old = checkpoint["lr_schedulers"][0]
    changed = apply_new_optimization(checkpoint, {**ADAMW, "lr": 2e-4}, {**PLATEAU, "patience": 5})
    assert changed["model.scheduler.patience"] == [3, 5] and changed["lr"] == [1e-3, 2e-4]
    new = checkpoint["lr_schedulers"][0]
    assert new["patience"] == 5 and (new["best"], new["num_bad_epochs"]) == (old["best"], old["num_bad_epochs"])


def test_another_optimizer_class_is_refused_with_the_fix() -> None:
    checkpoint = _checkpoint(ADAMW, None, epochs=1)
    with pytest.raises(ValueError, match=r"model.optimizer._target_=torch.optim.AdamW.*drop ckpt_path"):
        apply_new_optimization(checkpoint, {"_target_": "torch.optim.SGD", "lr": 0.1}, None)


def test_config_differences_name_every_changed_leaf() -> None:
    assert config_differences("model.optimizer", ADAMW, {**ADAMW, "lr": 0.1, "betas": [0.9, 0.99]}) == {
        "model.optimizer.betas": [None, [0.9, 0.99]],
        "model.optimizer.lr": [1e-3, 0.1],
    }
