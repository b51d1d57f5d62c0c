"""Config mistakes stop the run at start-up with one clear line; the Trainer keys users reach for need no '+'."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compose_train
from mtan_s1s2.cli.train import train
from mtan_s1s2.cli.validate import ConfigError, config_errors

REPO = Path(__file__).resolve().parents[2]


def _train_cli(*overrides: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "train.py", *overrides, f"paths.log_dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_type_gives_one_line_naming_key_value_and_type(tmp_path):
    out = _train_cli("data.batch_size=abc", tmp_path=tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [
        "Config error: data.batch_size='abc' is str; SyntheticSITSDataModule expects int for batch_size (default: 8)."
    ], out.stderr
    assert not (tmp_path / "train").exists()  # stopped before Hydra created a run directory


def test_unknown_key_gives_one_line_with_the_closest_key():
    from mtan_s1s2.cli.validate import command_line_error  # what train.py runs before Hydra starts

    message = command_line_error(["data=synthetic_tiny", "data.batchsize=8"], "train")
    assert message is not None and len(message.splitlines()) == 1, message
    assert message.startswith("Unknown config key in `data.batchsize=8`: 'data' has no key 'batchsize'")
    assert "did you mean data.batch_size?" in message
    assert "+data.batchsize=8" in message  # how to add a new key on purpose


def test_plus_on_an_existing_key_says_drop_the_plus():
    from mtan_s1s2.cli.validate import command_line_error

    message = command_line_error(["+trainer.fast_dev_run=true"], "train")
    assert message == (
        "`+trainer.fast_dev_run=true`: trainer.fast_dev_run is already in the config; "
        "drop the '+': trainer.fast_dev_run=true."
    )


def test_trainer_keys_users_reach_for_need_no_plus(tmp_path):
    cfg = compose_train(
        [
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=0.5",
            "trainer.limit_test_batches=1",
            "trainer.fast_dev_run=true",
            "trainer.deterministic=true",
            "trainer.gradient_clip_val=1.0",
        ],
        output_dir=tmp_path,
    )
    assert cfg.trainer.limit_train_batches == 2 and cfg.trainer.fast_dev_run is True
    assert config_errors(cfg) == []
    # the '+' form of older commands still composes (the default is null)
    assert compose_train(["+trainer.limit_train_batches=2"], output_dir=tmp_path).trainer.limit_train_batches == 2


@pytest.mark.parametrize(
    "override,expected",
    [
        ("model.net.d_model=abc", "model.net.d_model='abc' is str; MTANClassifier expects int for d_model"),
        ("trainer.min_epochs=2.5", "trainer.min_epochs=2.5 is float; Trainer expects int or null for min_epochs"),
        ("data.preset=3", "data.preset=3 is int; SyntheticSITSDataModule expects str for preset"),
        ("data.modalities=s2", "data.modalities='s2' is str; SyntheticSITSDataModule expects a list of str"),
        ("seed=abc", "seed='abc' is str; expected int or null."),
        ("callbacks.epoch_timer.warmup_epochs=x", "EpochTimer expects int for warmup_epochs (default: 1)"),
    ],
)
def test_type_errors_are_found_before_anything_is_built(override, expected, tmp_path):
    cfg = compose_train(["data=synthetic_tiny", override], output_dir=tmp_path)
    errors = config_errors(cfg)
    assert len(errors) == 1 and expected in errors[0], errors
    with pytest.raises(ConfigError, match=re.escape(expected)):
        train(cfg)
    assert not (tmp_path / "checkpoints").exists()


def test_unknown_argument_in_a_target_node(tmp_path):
    cfg = compose_train(["data=synthetic_tiny", "+callbacks.epoch_timer.warmup=1"], output_dir=tmp_path)
    (error,) = config_errors(cfg)
    assert error.startswith("callbacks.epoch_timer.warmup=1: EpochTimer has no argument 'warmup'")
    assert "did you mean callbacks.epoch_timer.warmup_epochs?" in error


def test_every_config_option_passes_the_check(tmp_path, config_dir):
    for group in ("data", "model", "mlp", "trainer", "callbacks", "logger", "debug", "experiment"):
        for option in sorted(p.stem for p in (config_dir / group).glob("*.yaml")):
            cfg = compose_train([f"{group}={option}"], output_dir=tmp_path)
            assert config_errors(cfg) == [], (group, option)


def test_exit_config_error_prints_one_line_per_mistake_and_exits_2(capsys):
    from mtan_s1s2.cli.validate import CONFIG_ERROR_STATUS, exit_config_error

    with pytest.raises(SystemExit) as exc:
        exit_config_error(ConfigError("data.batch_size='abc' is str\nmodel.lr=x is str"))
    assert exc.value.code == CONFIG_ERROR_STATUS == 2
    assert capsys.readouterr().err.splitlines() == [
        "Config error: data.batch_size='abc' is str",
        "Config error: model.lr=x is str",
    ]


@pytest.mark.parametrize(
    "overrides,parent,unknown",
    [
        (["data=datacube", "data.grid={resolution:10,extra:1}"], "data.grid", "extra"),
        (["data=datacube", "data.radiometry={s2: {scale: 1}}"], "data.radiometry", "s2"),  # {} in the preset
        (["data=geotiff", "data.radiometry={s2: {scale: 1, nodat: 3}}"], "data.radiometry.s2", "nodat"),
        (["data=geotiff", "data.radiometry={s1_asc: {units: db}}"], "data.radiometry", "s1_asc"),
    ],
)
def test_unknown_key_inside_a_mapping_value_is_named_with_its_siblings(overrides, parent, unknown, tmp_path):
    from omegaconf import OmegaConf

    from mtan_s1s2.cli.validate import command_line_error

    message = command_line_error(overrides, "train")
    assert message is not None and f": '{parent}' has no key '{unknown}'." in message
    assert "did you mean" not in message  # the key the user typed is not offered back
    siblings = [str(k) for k in OmegaConf.select(compose_train(overrides[:1], output_dir=tmp_path), parent)]
    assert (f"Its keys are: {', '.join(siblings)}." if siblings else "It has no keys yet.") in message
    assert message.endswith(f"To add new keys on purpose, write ++{overrides[1]}.")
