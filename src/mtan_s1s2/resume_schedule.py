"""Resuming with a changed optimiser or learning-rate schedule: the new config applies.

A checkpoint holds the optimiser's state (its param groups carry ``lr``, ``weight_decay``,
...) and the scheduler's (``base_lrs``, ``T_max``, ``last_epoch``, ...). Restored as they
are, they silently override a resumed run's config (``model.optimizer.lr=1e-4
trainer.max_epochs=4`` would keep the old cosine over 2 epochs from 1e-3), while the
config and the hyperparameters claim the new values.

:func:`apply_new_optimization` rewrites those states in the loaded checkpoint, before
Lightning restores them, to what a fresh run of the new config would hold at the same
epoch: the param groups get the new hyperparameters, and the new scheduler is stepped
from epoch 0 to the checkpoint's epoch (``ReduceLROnPlateau``, which depends on the
metrics seen, keeps its counters and restarts from the new learning rate). The moments of
the optimiser (Adam's running averages) are kept. It returns every difference, which the
training module warns about and records (``summary.json``: ``resumes[].changed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import ReduceLROnPlateau

PLATEAU_COUNTERS: tuple[str, ...] = ("best", "num_bad_epochs", "cooldown_counter", "last_epoch")
"""State of a ``ReduceLROnPlateau`` that depends on the metrics seen, kept on resume."""


def config_differences(prefix: str, old: Any, new: Any) -> dict[str, list[Any]]:
    """``{"model.optimizer.lr": [old, new], ...}`` for every leaf that differs between two plain configs."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: dict[str, list[Any]] = {}
        for key in sorted({*old, *new}, key=str):
            out.update(config_differences(f"{prefix}.{key}", old.get(key), new.get(key)))
        return out
    return {} if old == new else {prefix: [old, new]}


def _build(cfg: Mapping[str, Any] | None, **kwargs: Any) -> Any:
    from mtan_s1s2.utils.configs import build_from_config

    return build_from_config(cfg, **kwargs) if cfg is not None else None


def apply_new_optimization(
    checkpoint: dict[str, Any],
    optimizer_cfg: Mapping[str, Any] | None,
    scheduler_cfg: Mapping[str, Any] | None,
) -> dict[str, list[Any]]:
    """Make a checkpoint's optimiser and scheduler states follow the resumed run's config.

    Args:
        checkpoint: The loaded checkpoint (Lightning's dict: ``hyper_parameters``,
            ``optimizer_states``, ``lr_schedulers``), edited in place.
        optimizer_cfg: The resumed run's ``model.optimizer`` (plain config with
            ``_target_``; None = the module's default AdamW, lr 1e-3).
        scheduler_cfg: The resumed run's ``model.scheduler`` (None = no scheduler).

    Returns:
        ``{"model.optimizer.lr": [old, new], "model.scheduler.T_max": [old, new], ...,
        "lr": [lr the checkpoint would have resumed with, lr applied]}``; empty when the
        configs are the same (the checkpoint is left untouched) or the checkpoint has no
        optimiser state.

    Raises:
        ValueError: If the optimiser's class changed (its state cannot be converted).
    """
    hparams = checkpoint.get("hyper_parameters") or {}
    old_opt, old_sched = hparams.get("optimizer"), hparams.get("scheduler")
    changed = {
        **config_differences("model.optimizer", old_opt, optimizer_cfg),
        **config_differences("model.scheduler", old_sched, scheduler_cfg),
    }
    states = checkpoint.get("optimizer_states") or []
    if not changed or not states:
        return {}
    old_target = (old_opt or {}).get("_target_", "torch.optim.AdamW")
    new_target = (optimizer_cfg or {}).get("_target_", "torch.optim.AdamW")
    if old_target.rsplit(".", 1)[-1] != new_target.rsplit(".", 1)[-1]:
        raise ValueError(
            f"The checkpoint was trained with model.optimizer._target_={old_target} but this run asks for "
            f"{new_target}; a resumed fit cannot convert the optimiser's state. Resume with "
            f"model.optimizer._target_={old_target}, or start a new run from its weights (drop ckpt_path)."
        )
    state = states[0]
    groups = [nn.Parameter(torch.zeros(1)) for _ in state["param_groups"]]
    param_groups = [{"params": [p]} for p in groups]
    optimizer = _build(optimizer_cfg, params=param_groups) or torch.optim.AdamW(param_groups, lr=1e-3)
    scheduler = _build(scheduler_cfg, optimizer=optimizer)
    old_states = checkpoint.get("lr_schedulers") or []
    old_state = old_states[0] if old_states else {}
    epochs = int(old_state.get("last_epoch", checkpoint.get("epoch", 0)))
    new_state: dict[str, Any] = {}
    if isinstance(scheduler, ReduceLROnPlateau):
        new_state = scheduler.state_dict()
        new_state.update({k: old_state[k] for k in PLATEAU_COUNTERS if k in old_state})
    elif scheduler is not None:
        for _ in range(epochs):  # as a fresh run of the new config would have stepped
            optimizer.step()
            scheduler.step()
        new_state = scheduler.state_dict()
    old_lr = state["param_groups"][0].get("lr")
    for saved, fresh in zip(state["param_groups"], optimizer.param_groups, strict=True):
        saved.update({k: v for k, v in fresh.items() if k != "params"})
    checkpoint["lr_schedulers"] = [new_state] if scheduler is not None else []
    changed["lr"] = [old_lr, optimizer.param_groups[0]["lr"]]
    return changed


def describe_changes(changed: Mapping[str, list[Any]], ckpt_path: str | Path | None) -> str:
    """One line: the differences applied to a resumed fit, old -> new."""

    def text(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    keys = ", ".join(f"{k} {text(old)} -> {text(new)}" for k, (old, new) in changed.items() if k != "lr")
    old_lr, new_lr = (text(v) for v in changed.get("lr", [None, None]))
    return (
        f"Resuming {ckpt_path or 'a checkpoint'} with a changed optimiser/schedule: {keys}. Applied: the optimiser's "
        f"parameter groups and the scheduler follow the new config as a fresh run of it would at this epoch "
        f"(lr {old_lr} -> {new_lr}); the optimiser's moments are kept."
    )


__all__ = ["PLATEAU_COUNTERS", "apply_new_optimization", "config_differences", "describe_changes"]
