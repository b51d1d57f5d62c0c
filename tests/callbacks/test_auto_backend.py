"""The AutoBackend callback: backend (``mlp=auto``), compilation (``model.compile``), one log line, the cache."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.callbacks.auto_backend import AutoBackend, compile_mode, saved_choices, trained_backend
from mtan_s1s2.checkpoints import load_classifier, load_run_config
from mtan_s1s2.cli.train import train

SHORT = [
    "data=synthetic_tiny", "trainer=cpu", "trainer.max_epochs=1", "+trainer.limit_train_batches=2",
    "+trainer.limit_val_batches=1", "test=false", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES,
]  # fmt: skip

LOGGER = "mtan_s1s2.callbacks.auto_backend"
LINEAR = "mtan_s1s2.models.layers.mlp.LinearMlp"


def _train(tmp_path: Path, cache: Path, *overrides: str) -> tuple[dict, dict]:
    cfg = compose_train([*SHORT, "callbacks.auto_backend.repeats=1", *overrides], output_dir=tmp_path)
    with open_dict(cfg):
        cfg.callbacks.auto_backend.cache_file = str(cache)
    try:
        _, objs = train(cfg)
    finally:
        GlobalHydra.instance().clear()
    return json.loads((tmp_path / "summary.json").read_text()), objs


def test_the_default_is_auto_chosen_recorded_and_cached(tmp_path: Path) -> None:
    """``python train.py`` (no mlp given) times the backends once; a second run reads the decision."""
    assert compose_train([])["mlp"]["_target_"].endswith("AutoMlp")
    GlobalHydra.instance().clear()
    cache = tmp_path / "cache" / "auto.json"
    summary, objs = _train(tmp_path / "run1", cache)
    auto = summary["auto_backend"]
    assert summary["requested_backend"] == "auto" and not auto["cached"] and auto["cost_s"] > 0
    assert summary["backend"] == auto["choice"] == objs["model"].net.backend == summary["choices"]["backend"]
    assert set(auto["timings_ms"]) == set(auto["samples_ms"]) == {"linear", "conv", "channels_last"}
    assert all(len(s) == 1 for s in auto["samples_ms"].values())  # repeats=1
    assert json.loads(cache.read_text())[auto["key"]]["choice"] == auto["choice"]
    assert not list(cache.parent.glob(".*.tmp")), "the cache is written atomically"
    assert "timed in" in summary["choices"]["backend_why"]
    again, objs_again = _train(tmp_path / "run2", cache)
    assert again["auto_backend"]["cached"] and again["auto_backend"]["cost_s"] == 0.0
    assert again["backend"] == auto["choice"] and again["choices"]["backend_why"] == "mlp=auto, cached decision"
    # the timed steps draw dropout masks, and the generators are restored after them: the timed
    # run and the cached one train the same weights
    timed, cached = objs["model"].state_dict(), objs_again["model"].state_dict()
    assert timed.keys() == cached.keys()
    for key in timed:
        assert torch.equal(timed[key], cached[key]), key
    assert summary["metrics"]["train/loss"] == again["metrics"]["train/loss"]


def test_one_log_line_says_backend_precision_and_compile(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line of the callback names the three choices and why; summary.json holds the same."""
    with caplog.at_level(logging.INFO, logger=LOGGER):
        summary, _ = _train(tmp_path, tmp_path / "cache.json")
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]
    assert len(lines) == 1, lines
    choices = summary["choices"]
    assert lines[0] == choices["line"]
    assert lines[0].startswith(f"Training with backend {summary['backend']} (mlp=auto, the fastest of 3 timed in ")
    assert f"precision {summary['precision']} ({summary['precision_reason']})" in lines[0]
    assert summary["precision_reason"].startswith("auto: ")  # trainer.precision: auto
    # 2 steps: no compilation can pay off, so none is measured
    assert "compile no (2 steps x 0.30 max gain = 1 eager steps saved at most, under the ~60" in lines[0]
    assert choices["compile"] is False and choices["compile_measurement"]["projected_steps"] == 2
    assert summary["compile"] == "off" and summary["compile_s"] is None


def test_an_explicit_backend_is_never_overridden(tmp_path: Path) -> None:
    """``mlp=conv`` trains conv whatever the cache holds; no backend is timed."""
    cache = tmp_path / "cache.json"
    _train(tmp_path / "auto", cache, "mlp=conv", "callbacks.auto_backend.compile_cost_steps=1e9")
    assert not cache.exists(), "an explicit backend with a short run writes nothing"
    summary, objs = _train(tmp_path / "auto2", cache)  # an mlp=auto decision in the cache
    data = json.loads(cache.read_text())
    for entry in data.values():
        entry["choice"] = "channels_last"
    cache.write_text(json.dumps(data))
    summary, objs = _train(tmp_path / "explicit", cache, "mlp=conv")
    callback = next(c for c in objs["trainer"].callbacks if isinstance(c, AutoBackend))
    assert callback.decision is None and summary["auto_backend"] is None
    assert objs["model"].net.backend == summary["backend"] == summary["choices"]["backend"] == "conv"
    assert summary["requested_backend"] == "conv" and summary["choices"]["backend_why"] == "mlp=conv"
    assert json.loads(cache.read_text()) == data


@pytest.mark.parametrize(
    "backend",
    ["conv", pytest.param("linear", marks=pytest.mark.slow), pytest.param("channels_last", marks=pytest.mark.slow)],
)
def test_compile_auto_for_every_backend_measures_once_then_reads_the_cache(tmp_path: Path, backend: str) -> None:
    """``model.compile=auto`` is valid for every backend; a compilation is measured once, then cached.

    ``compile_cost_steps=0`` makes any run long enough to measure; ``compile_backend=eager``
    captures graphs without generating code, so the test stays short (graph capture still
    takes ~20 s per backend on 2 cores: conv in the default run, the others ``slow``).
    """
    cache = tmp_path / "cache.json"
    opts = ["callbacks.auto_backend.compile_cost_steps=0", "callbacks.auto_backend.compile_backend=eager"]
    first, _ = _train(tmp_path / backend, cache, f"mlp={backend}", *opts)
    choices = first["choices"]
    measured = choices["compile_measurement"]
    assert measured["cached"] is False and measured["compiled_ms"] > 0 and measured["compile_s"] >= 0
    assert measured["eager_ms"] > 0 and measured["projected_steps"] == 2
    assert choices["compile_why"].startswith("compiled ") and " over 2 steps saves " in choices["compile_why"]
    assert first["compile"] == (f"on (auto: {choices['compile_why']})" if choices["compile"] else "off")
    (entry,) = [e for e in json.loads(cache.read_text()).values() if backend in e.get("compile", {})]
    assert entry["compile"][backend] == {
        **{k: measured[k] for k in ("eager_ms", "compiled_ms", "compile_s")},
        "measurement": "side_by_side",
    }
    second, _ = _train(tmp_path / "again", cache, f"mlp={backend}", *opts, "trainer.max_epochs=2")
    again = second["choices"]["compile_measurement"]
    assert again["cached"] is True and again["projected_steps"] == 4
    assert "measured_in_s" not in again, "a cached measurement compiles nothing"
    (entry,) = [e for e in json.loads(cache.read_text()).values() if backend in e.get("compile", {})]
    assert {k: again[k] for k in ("eager_ms", "compiled_ms", "compile_s", "measurement")} == entry["compile"][backend]


@pytest.mark.parametrize(("value", "compiled"), [("true", True), ("false", False)])
def test_compile_true_or_false_forces(tmp_path: Path, value: str, compiled: bool) -> None:
    opts = ["mlp=channels_last", f"model.compile={value}", "callbacks.auto_backend.compile_backend=eager"]
    summary, objs = _train(tmp_path, tmp_path / "cache.json", *opts)
    assert summary["choices"]["compile"] is compiled and summary["choices"]["compile_why"] == f"model.compile={value}"
    assert objs["model"].compile_status == ("on (model.compile=true)" if compiled else "off")
    assert not (tmp_path / "cache.json").exists()


def test_bad_compile_value_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"model.compile must be auto, true or false, got 'yes'"):
        compile_mode("yes")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"repeats": 0}, "repeats"),
        ({"prune_ratio": 0.5}, "prune_ratio"),
        ({"compile_max_gain": 1.5}, "compile_max_gain"),
    ],
)
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


def test_a_resumed_fit_and_eval_keep_the_backend_the_run_chose(tmp_path: Path) -> None:
    """An ``mlp=auto`` run resumed from its checkpoint trains the saved backend without timing again,
    even when the cache now names another; ``load_classifier`` (eval.py) rebuilds it with that backend."""
    cache = tmp_path / "cache.json"
    _train(tmp_path / "seed_cache", cache)  # a decision in the cache, rewritten to channels_last
    data = json.loads(cache.read_text())
    for entry in data.values():
        entry["choice"] = "channels_last"
    cache.write_text(json.dumps(data))
    first, _ = _train(tmp_path / "first", cache)
    assert first["backend"] == "channels_last" and first["choices"]["backend_why"] == "mlp=auto, cached decision"
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(ckpt, weights_only=True)
    assert trained_backend(checkpoint) == "channels_last"
    assert saved_choices(checkpoint)["compile"] is False  # 2 steps: not worth compiling
    for entry in data.values():  # the machine would now choose conv
        entry["choice"] = "conv"
    cache.write_text(json.dumps(data))
    resumed, objs = _train(tmp_path / "resumed", cache, f"ckpt_path={ckpt}", "trainer.max_epochs=2")  # one more
    assert objs["trainer"].current_epoch == 2
    assert objs["model"].net.backend == resumed["backend"] == "channels_last"
    why = "mlp=auto, the choice saved in the checkpoint this fit resumes from"
    assert resumed["choices"]["backend_why"] == why
    assert resumed["choices"]["compile"] is False
    assert resumed["choices"]["compile_why"] == "auto, the choice saved in the checkpoint this fit resumes from"
    assert resumed["auto_backend"] is None, "nothing was timed"
    model = load_classifier(load_run_config(str(ckpt)), ckpt)
    assert model.net.requested_backend == "auto" and model.net.backend == "channels_last"
    linear = OmegaConf.create({"_target_": LINEAR, "_partial_": True})
    assert load_classifier(load_run_config(str(ckpt)), ckpt, linear).net.backend == "linear", "an explicit mlp= wins"


def test_checkpoints_without_saved_choices_load_as_before() -> None:
    """Older checkpoints (no AutoBackend state) give no choices: eval keeps the built backend."""
    assert saved_choices({"state_dict": {}}) is None
    assert trained_backend({"callbacks": {"ModelCheckpoint{'monitor': 'val/OA'}": {"best": 1.0}}}) is None
    assert trained_backend({"callbacks": {"AutoBackend": {"choices": {"backend": "conv"}}}}) == "conv"
