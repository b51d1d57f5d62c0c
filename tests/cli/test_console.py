"""The console keeps real warnings and drops Lightning's notes a user cannot act on."""

from __future__ import annotations

import warnings

import hydra
import lightning as L
from lightning.pytorch.trainer.connectors import data_connector
from lightning.pytorch.utilities.model_summary import ModelSummary
from omegaconf import open_dict

from mtan_s1s2.cli.console import quiet_lightning


def _tiny_module_and_data(cfg_tiny):
    dm = hydra.utils.instantiate(cfg_tiny.data)
    with open_dict(cfg_tiny):
        cfg_tiny.model.net.in_channels = dict(dm.in_channels)
        cfg_tiny.model.net.num_classes = cfg_tiny.model.num_classes = dm.num_classes
    return hydra.utils.instantiate(cfg_tiny.model), dm


def _lightning_warnings(module, dm, quiet: bool) -> list[str]:
    """The warnings Lightning gives on a bf16-mixed model summary and on choosing the batch-transfer hook."""
    data_connector.warning_cache.clear()  # Lightning warns once per process; here every time
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quiet:
            quiet_lightning()
        module.trainer = L.Trainer(accelerator="cpu", precision="bf16-mixed", logger=False, enable_progress_bar=False)
        ModelSummary(module, max_depth=1)
        data_connector._DataHookSelector(module, dm).get_instance("on_after_batch_transfer")
    return [str(w.message) for w in caught]


def test_model_summary_precision_and_batch_transfer_notes_are_dropped(cfg_tiny):
    module, dm = _tiny_module_and_data(cfg_tiny)
    shown = _lightning_warnings(module, dm, quiet=False)
    assert any("Precision bf16-mixed is not supported by the model summary" in m for m in shown), shown
    assert any("You have overridden `on_after_batch_transfer` in `LightningModule`" in m for m in shown), shown
    assert not [m for m in _lightning_warnings(module, dm, quiet=True) if "model summary" in m or "overridden" in m]


def test_real_warnings_still_show():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_lightning()
        warnings.warn("val/OA is NaN: the validation split has no labelled pixel", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["val/OA is NaN: the validation split has no labelled pixel"]
