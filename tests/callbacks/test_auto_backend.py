"""``mlp=auto``: the AutoBackend callback chooses, records and caches the fastest backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.callbacks.auto_backend import AutoBackend
from mtan_s1s2.cli.train import train

SHORT = [
    "data=synthetic_tiny", "trainer=cpu", "trainer.max_epochs=1", "+trainer.limit_train_batches=1",
    "+trainer.limit_val_batches=1", "test=false", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES,
]  # fmt: skip


def _train_auto(tmp_path: Path, cache: Path, *overrides: str) -> tuple[dict, dict]:
    cfg = compose_train(["mlp=auto", *SHORT, "callbacks.auto_backend.repeats=1", *overrides], output_dir=tmp_path)
    with open_dict(cfg):
        cfg.callbacks.auto_backend.cache_file = str(cache)
    try:
        _, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    return json.loads((tmp_path / "summary.json").read_text()), objs


def test_auto_backend_is_chosen_recorded_and_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "auto.json"
    summary, objs = _train_auto(tmp_path / "run1", cache)
    auto = summary["auto_backend"]
    assert summary["requested_backend"] == "auto" and not auto["cached"]
    assert summary["backend"] == auto["choice"] == objs["model"].net.backend
    assert set(auto["timings_ms"]) == set(auto["samples_ms"]) == {"linear", "conv", "channels_last"}
    assert all(len(s) == 1 for s in auto["samples_ms"].values())  # repeats=1
    assert json.loads(cache.read_text())[auto["key"]]["choice"] == auto["choice"]
    assert not list(cache.parent.glob(".*.tmp")), "the cache is written atomically"
    again, _ = _train_auto(tmp_path / "run2", cache)
    assert again["auto_backend"]["cached"] and again["backend"] == auto["choice"]


def test_concrete_backends_are_left_alone(tmp_path: Path) -> None:
    """The callback times nothing for a model built with a concrete backend."""
    cfg = compose_train(["mlp=conv", *SHORT], output_dir=tmp_path)
    assert "auto_backend" not in cfg.callbacks  # only mlp=auto adds the callback
    with open_dict(cfg):
        cfg.callbacks.auto_backend = {
            "_target_": "mtan_s1s2.callbacks.auto_backend.AutoBackend",
            "cache_file": str(tmp_path / "never.json"),
        }
    try:
        _, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    callback = next(c for c in objs["trainer"].callbacks if isinstance(c, AutoBackend))
    assert callback.decision is None and objs["model"].net.backend == "conv"
    assert not (tmp_path / "never.json").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["auto_backend"] is None


@pytest.mark.parametrize(("kwargs", "match"), [({"repeats": 0}, "repeats"), ({"prune_ratio": 0.5}, "prune_ratio")])
def test_bad_options_raise_before_any_timing(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AutoBackend(**kwargs)


def test_auto_model_without_the_callback_warns(tmp_path: Path) -> None:
    cfg = compose_train(["mlp=auto", *SHORT, "callbacks.auto_backend=null"], output_dir=tmp_path)
    try:
        with pytest.warns(UserWarning, match="no AutoBackend callback"):
            _, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    assert objs["model"].net.backend == "linear"
