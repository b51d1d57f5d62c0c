"""A run's checkpoint read back safely: the config next to it, refused pickles, models that fit the data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mtan_s1s2.checkpoints import load_contract, load_run_config, read_checkpoint


def test_run_config_is_read_next_to_the_checkpoints_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints" / "epoch_000.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"data_contract": {"ignore_index": 0}}}, ckpt)
    with pytest.raises(ValueError, match=r"Training config not found at .*run/config\.yaml.*train_config="):
        load_run_config(ckpt)
    OmegaConf.save(OmegaConf.create({"seed": 7}), run / "config.yaml")
    assert load_run_config(ckpt).seed == 7
    assert load_contract(ckpt) == {"ignore_index": 0}
    with pytest.raises(ValueError, match=r"Checkpoint not found: ckpt_path=.*missing\.ckpt"):
        load_run_config(run / "checkpoints" / "missing.ckpt")


def test_checkpoints_holding_python_objects_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    net_cfg = OmegaConf.create({"_target_": "torch.nn.Identity"})  # a Hydra object, as older versions stored
    torch.save({"state_dict": {}, "hyper_parameters": {"net": net_cfg}}, path)
    with pytest.raises(ValueError, match=r"weights_only=True\) refuses.*re-save its weights"):
        read_checkpoint(path)
    with pytest.raises(ValueError, match="refuses"):
        load_contract(path)
