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


# --- keys of an older spelling: one line naming the new key ----------------------------

RENAMED = [
    # (old key, value, data option, new key)
    ("data.fold", "2", "worldcereal_table", "data.split.fold"),
    ("data.n_folds", "3", "worldcereal_table", "data.split.n_folds"),
    ("data.split_seed", "1", "worldcereal_table", "data.split.seed"),
    ("data.folds", "{train: [1], val: [2], test: [3]}", "pastis", "data.split.folds"),
    ("data.group_column", "field", "table", "data.split.group_column"),
    ("data.group_blocks", "{x: lon, y: lat, size: 0.1}", "table", "data.split.blocks"),
    ("data.split_column", "part", "table", "data.split.column"),
    ("data.split_names", "{cal: train}", "table", "data.split.names"),
    ("data.val_fraction", "0.1", "table", "data.split.val_fraction"),
    ("data.label_column", "code", "table", "data.labels.column"),
    ("data.label.file", "x.nc", "datacube", "data.labels.file"),
    ("data.label.variable", "CT", "datacube", "data.labels.variable"),
    ("data.label.band", "2", "geotiff", "data.labels.band"),
    ("data.label", "null", "geotiff", "data.labels.file"),
    ("data.class_names", "synthetic", "pastis", "data.labels.names"),
    ("data.ignore_labels", "[0,19]", "pastis", "data.labels.ignore_codes"),
    ("data.ignore_index", "0", "pastis", "data.labels.ignore_codes"),
    ("callbacks.auto_backend.compile", "true", "synthetic", "model.compile"),
    ("callbacks.auto_backend.compile_min_run_s", "120", "synthetic", "callbacks.auto_backend.compile_cost_steps"),
]


def test_the_table_of_renamed_keys_is_tested_whole():
    from mtan_s1s2.cli.validate import RENAMED_KEYS

    assert sorted(old for old, *_ in RENAMED) == sorted(RENAMED_KEYS)


@pytest.mark.parametrize("old,value,option,new", RENAMED, ids=[r[0] for r in RENAMED])
@pytest.mark.parametrize("plus", ["", "+"])
def test_an_old_key_on_the_command_line_names_the_new_one(old, value, option, new, plus):
    from mtan_s1s2.cli.validate import command_line_error

    message = command_line_error([f"data={option}", f"{plus}{old}={value}"], "train")
    assert message is not None and len(message.splitlines()) == 1, message
    assert message.startswith(f"{old}={value}: {old} is now {new}; write {new}={value}"), message
    assert message.endswith("(renamed keys: docs/configuration.md).")


def test_an_old_key_in_a_sweep_and_with_a_note():
    from mtan_s1s2.cli.validate import command_line_error

    message = command_line_error(["-m", "data=worldcereal_table", "data.fold=1,2,3,4,5", "seed=1,2"], "train")
    assert message == (
        "data.fold=1,2,3,4,5: data.fold is now data.split.fold; write data.split.fold=1,2,3,4,5 "
        "(renamed keys: docs/configuration.md)."
    )
    message = command_line_error(["data=table", "data.split_column=part"], "train")
    assert message is not None and "write data.split.column=part, with data.split.by=column" in message


def test_a_key_that_follows_another_may_not_be_set():
    from mtan_s1s2.cli.validate import command_line_error

    assert command_line_error(["model.net.num_classes=5"], "train") == (
        "model.net.num_classes=5: model.net.num_classes follows model.num_classes, which train.py fills from the "
        "data; drop the override."
    )


def test_an_old_key_in_a_config_file_names_the_new_one(tmp_path):
    from omegaconf import open_dict

    cfg = compose_train(["data=worldcereal_table"], output_dir=tmp_path)
    with open_dict(cfg):
        cfg.data.fold = 3  # as a data config written for an older version
        cfg.data.label_column = "code"
    assert config_errors(cfg) == [
        "data.fold=3: data.fold is now data.split.fold; write data.split.fold=3 (renamed keys: docs/configuration.md).",
        "data.label_column='code': data.label_column is now data.labels.column; write data.labels.column='code' "
        "(renamed keys: docs/configuration.md).",
    ]


def test_an_old_key_stops_train_py_before_the_run(tmp_path):
    out = _train_cli("data=synthetic_tiny", "data.fold=2", tmp_path=tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [
        "Config error: data.fold=2: data.fold is now data.split.fold; write data.split.fold=2 "
        "(renamed keys: docs/configuration.md)."
    ], out.stderr
    assert not (tmp_path / "train").exists()


@pytest.mark.parametrize("old,new", [("fp32", "32-true"), ("bf16", "bf16-mixed"), ("fp16", "16-mixed")])
def test_an_old_precision_of_predict_names_the_new_one(old, new):
    from mtan_s1s2.cli.validate import command_line_error

    assert command_line_error(["ckpt_path=run/last.ckpt", f"precision={old}"], "predict") == (
        f"precision={old} is now precision={new} (precisions: 32-true, bf16-mixed, 16-mixed, auto)."
    )
    assert command_line_error(["ckpt_path=run/last.ckpt", f"precision={new}"], "predict") is None


def test_an_old_value_whose_key_still_exists():
    from mtan_s1s2.cli.validate import command_line_error

    assert command_line_error(["data=pastis", "data.labels=false"], "train") == (
        "data.labels=false is now data.labels.read=false (renamed keys: docs/configuration.md)."
    )


def test_the_monitor_is_typed(tmp_path):
    from mtan_s1s2.cli.validate import command_line_error

    assert command_line_error(["monitor.mode=maximum"], "train") == (
        "monitor.mode='maximum' is str; expected one of 'max', 'min'."
    )
    assert command_line_error(["monitor.metric=val/F1", "monitor.mode=max"], "train") is None


def test_a_run_config_with_older_data_keys_is_read_in_todays_names():
    from mtan_s1s2.cli.validate import upgrade_data_config

    blocks = {"x": "lon", "y": "lat", "size": 0.1}
    table = {"path": "t.csv", "label_column": "code", "labels": None, "group_blocks": blocks, "n_folds": 5, "fold": 2,
             "split_seed": 0}  # fmt: skip
    new, moved = upgrade_data_config(table)
    split = {"blocks": blocks, "n_folds": 5, "fold": 2, "seed": 0}
    assert new == {"path": "t.csv", "labels": {"column": "code"}, "split": split}
    assert moved == [
        "data.fold -> data.split.fold",
        "data.n_folds -> data.split.n_folds",
        "data.split_seed -> data.split.seed",
        "data.group_blocks -> data.split.blocks",
        "data.label_column -> data.labels.column",
    ]
    fixed, _ = upgrade_data_config({"path": "t.csv", "split_column": "part", "split_names": {"cal": "train"}})
    assert fixed["split"] == {"by": "column", "column": "part", "names": {"cal": "train"}}
    files, _ = upgrade_data_config({"path": {"train": "a", "val": "b", "test": "c"}, "label_column": "y"})
    assert files["split"] == {"by": "files"} and files["labels"] == {"column": "y"}
    pastis = {"folds": {"train": [1], "val": [2], "test": [3]}, "fold": None, "n_folds": 5, "class_names": "pastis",
              "ignore_labels": [0, 19], "ignore_index": 19, "labels": False}  # fmt: skip
    new, _ = upgrade_data_config(pastis)
    assert new == {"split": {"folds": {"train": [1], "val": [2], "test": [3]}, "fold": None, "n_folds": 5},
                   "labels": {"read": False, "names": "pastis", "ignore_codes": [19, 0]}}  # fmt: skip
    scene = {"label": {"file": "label*.nc", "variable": "CT"}, "labels": {"classes": {"a": [1]}}, "split": {"fold": 2}}
    new, moved = upgrade_data_config(scene)
    assert new["labels"] == {"classes": {"a": [1]}, "file": "label*.nc", "variable": "CT"}
    assert new["split"] == {"fold": 2}
    assert moved == ["data.label -> data.labels.file"]
    assert upgrade_data_config({"label": None, "labels": {"classes": {"a": [1]}}})[0]["labels"]["file"] is None
    today = {"labels": {"file": "x.tif", "band": 1}, "split": {"by": "blocks", "fold": 1}}
    assert upgrade_data_config(today) == (today, [])


def test_eval_reads_the_data_of_a_run_saved_with_older_keys(tmp_path):
    """The saved config.yaml of an older table run: eval's datamodule has the same split as today's config."""
    import hydra
    from omegaconf import OmegaConf

    from mtan_s1s2.checkpoints import load_run_config

    table = REPO / "tests" / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"
    cfg = compose_train(["data=worldcereal_table", f"data.path={table}", "data.split.fold=2"], output_dir=tmp_path)
    data = OmegaConf.to_container(cfg.data, resolve=True)
    old = {k: v for k, v in data.items() if k not in ("split", "labels")}
    old.update(label_column=data["labels"]["column"], labels={k: v for k, v in data["labels"].items() if k != "column"},
               group_blocks=data["split"]["blocks"], n_folds=5, fold=2, split_seed=0)  # fmt: skip
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    OmegaConf.save(OmegaConf.create({"data": old}), run / "config.yaml")
    upgraded = load_run_config(run / "checkpoints" / "last.ckpt").data
    assert OmegaConf.to_container(upgraded)["split"] == {"blocks": data["split"]["blocks"], "n_folds": 5, "fold": 2,
                                                        "seed": 0}  # fmt: skip
    then, now = hydra.utils.instantiate(upgraded), hydra.utils.instantiate(cfg.data)
    assert (then.split == now.split).all() and then.class_names == now.class_names
