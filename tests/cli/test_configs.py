"""Every option of every config group composes and instantiates (tamrfsits-style)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import hydra
import lightning as L
import pytest
from omegaconf import open_dict

from conftest import compose_train
from mtan_s1s2.cli.config import CONFIG_DIR, resolve_trainer_precision
from mtan_s1s2.cli.runners import fill_from_data

GROUPS = ["data", "model", "mlp", "trainer", "callbacks", "logger", "paths", "debug", "experiment"]
REPO = Path(__file__).resolve().parents[2]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def test_every_group_has_options():
    for group in [*GROUPS, "hydra"]:
        assert _options(group), group


def _modis_table(option: str, tmp_path: Path) -> list[str]:
    """Write a small table in the format of ``data=cawa`` / ``data=sits_mt9`` and point the preset at it."""
    from fixtures.modis_tables import write_cawa_wide, write_sits_mt9_wide

    (write_cawa_wide if option == "cawa" else write_sits_mt9_wide)(tmp_path / f"{option}.parquet")
    return [f"data.path={tmp_path / option}.parquet", "data.split.n_folds=3"]


def _data_files(option: str, tmp_path: Path) -> list[str]:
    """Overrides pointing a data preset that reads files at small real or written ones."""
    out: list[str] = []
    if option.startswith("pastis"):  # reads files: a tiny generated dataset
        from mtan_s1s2.data.pastis.writer import write_pastis_dataset

        root = write_pastis_dataset(tmp_path / "pastis", n_train=3, n_val=1, n_test=1, patch_size=8)
        out += [f"data.root={root}", "data.crop_size=null"]
    if option in ("datacube", "geotiff"):  # reads files: one small generated scene
        from fixtures.scene_files import write_default_scenes

        root = write_default_scenes(tmp_path / option, option)
        out += [f"data.root={root}", "data.reference_date=2020-03-01", "+data.labels.classes={a: [1], b: [2]}",
                "data.split.block_size=2", "data.split.n_folds=3"]  # fmt: skip
    if option == "worldcereal":  # the real patches, cropped copies in tests/fixtures
        from fixtures.scene_files import MINI, MINI_SCENES

        out += [f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]", "data.split.block_size=8",
                "data.split.n_folds=3"]  # fmt: skip
    if option == "worldcereal_tza":  # its one patch, cropped in tests/fixtures
        from fixtures.scene_files import MINI

        out += [f"data.root={MINI}", "data.split.n_folds=3"]
    if option in ("worldcereal_table", "worldcereal_long"):  # small extracts of the real tables
        name = "flanders_long" if option.endswith("long") else "public_extractions_wide"
        out.append(f"data.path={REPO / 'tests' / 'fixtures' / 'worldcereal' / 'tables' / name}.parquet")
    if option in ("cawa", "sits_mt9"):  # tables in the real files' format, written here
        out += _modis_table(option, tmp_path)
    if option == "table":  # the generic template: a table written here
        _write_table(tmp_path / "pixels.csv")
        out += [f"data.path={tmp_path / 'pixels.csv'}", "data.date_start=2021-01-01", "data.date_step=10D"]
        out += ["data.split.n_folds=3"]
    return out


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_option_composes_and_instantiates(group, option, tmp_path):
    overrides = [f"{group}={option}"]
    if group != "data" and group not in ("debug",):
        overrides.append("data=synthetic_tiny")
    if group == "data":
        overrides += _data_files(option, tmp_path)
    cfg = compose_train(overrides, output_dir=tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    assert isinstance(dm, L.LightningDataModule)
    if "net" in cfg.model:  # mTAN or TempCNN; baselines (model=random_forest) take no network
        with open_dict(cfg):
            cfg.model.net.in_channels = dict(dm.in_channels)
            cfg.model.num_classes = dm.num_classes
            if "mlp" in cfg.model.net:
                cfg.model.net.d_model = 8
                cfg.model.net.num_ref_times = 4
                fill_from_data(cfg.model.net, dm)  # ref_range=auto (experiment=small_real)
            else:  # TempCNN: a fixed number of dates (the synthetic data's vary; any number builds)
                cfg.model.net.seq_len = 6
        model = hydra.utils.instantiate(cfg.model)
        assert model.num_classes == model.net.num_classes == dm.num_classes  # model.net.num_classes follows
        expected = hydra.utils.get_class(cfg.mlp._target_).backend if "mlp" in cfg.model.net else option
        assert model.net.requested_backend == expected
    else:
        assert hydra.utils.instantiate(cfg.model).backend == hydra.utils.get_class(cfg.model._target_).backend
    callbacks = [hydra.utils.instantiate(c) for c in (cfg.callbacks or {}).values() if c]
    loggers = [hydra.utils.instantiate(c) for c in (cfg.logger or {}).values() if c]
    with open_dict(cfg):
        cfg.trainer.accelerator = "cpu"  # "gpu" options compose here; they cannot run without one
    resolve_trainer_precision(cfg)  # precision: auto, as train.py resolves it
    trainer_cfg = dict(cfg.trainer)
    trainer = hydra.utils.instantiate(trainer_cfg, callbacks=callbacks, logger=loggers or False)
    assert isinstance(trainer, L.Trainer)


def _write_table(path: Path) -> None:
    """A wide CSV matching configs/data/table.yaml: 12 pixels in 6 fields, S2 bands at 3 dates."""
    import numpy as np
    import pandas as pd

    bands = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]
    rng = np.random.default_rng(0)
    data = {f"{b}-ts{t}": rng.integers(100, 4000, 12) for b in bands for t in range(3)}
    pd.DataFrame({**data, "label": ["a", "b"] * 6}).to_csv(path, index=False)


def test_cfg_job_shows_composed_config():
    out = subprocess.run(
        [sys.executable, "train.py", "mlp=conv", "--cfg", "job"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "mtan_s1s2.models.layers.mlp.ConvMlp" in out.stdout


def test_wrong_mlp_option_lists_valid_options():
    out = subprocess.run(
        [sys.executable, "train.py", "mlp=convv"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    msg = out.stderr + out.stdout
    assert "convv" in msg and "linear" in msg and "conv" in msg, msg


def test_hydra_run_dir_is_unique_and_no_chdir():
    text = (CONFIG_DIR / "hydra" / "default.yaml").read_text()
    assert "chdir: false" in text and "${run_id:}" in text


MODEL_CONFIGS = {
    "mtan": {
        "_recursive_": False,
        "_target_": "mtan_s1s2.lit_module.SITSClassifierModule",
        "augment": None,
        "class_names": None,
        "class_weights": None,
        "compile": "auto",
        "early_stopping": None,
        "freeze_encoder_epochs": 0,
        "checkpoint_ensemble": 1,
        "ignore_index": 0,
        "label_smoothing": 0.0,
        "monitor": "val/OA",
        "net": {
            "_target_": "mtan_s1s2.models.mtan.MTANClassifier",
            "attention": "learned",
            "attention_init": "default",
            "conv_filters": 64,
            "conv_kernel": 3,
            "conv_layers": 2,
            "gru_hidden": 64,
            "ref_values": False,
            "d_model": 32,
            "dropout": 0.1,
            "embed_time": 64,
            "fusion_hidden": 128,
            "head": "flatten",
            "head_hidden": [256, 256],
            "head_norm": False,
            "in_channels": "???",
            "input_hidden": 64,
            "intensity": False,
            "spatial_context": 1,
            "spatial_pool": "mean",
            "kernel_width": 1.0,
            "mlp": {"_partial_": True, "_target_": "mtan_s1s2.models.layers.mlp.AutoMlp"},
            "num_classes": "???",
            "num_heads": 2,
            "num_ref_times": 16,
            "ref_range": [0.0, 1.0],
            "time_max_cycles": 12.0,
            "time_min_cycles": 0.5,
            "time_scale": 365.0,
        },
        "num_classes": "???",
        "optimizer": {"_partial_": True, "_target_": "torch.optim.AdamW", "lr": 0.001, "weight_decay": 0.01},
        "pretrained": None,
        "scheduler": {"T_max": 4, "_partial_": True, "_target_": "torch.optim.lr_scheduler.CosineAnnealingLR"},
    },
    "mtan_plateau": {
        "_recursive_": False,
        "_target_": "mtan_s1s2.lit_module.SITSClassifierModule",
        "augment": None,
        "class_names": None,
        "class_weights": None,
        "compile": "auto",
        "early_stopping": None,
        "freeze_encoder_epochs": 0,
        "checkpoint_ensemble": 1,
        "ignore_index": 0,
        "label_smoothing": 0.0,
        "monitor": "val/OA",
        "net": {
            "_target_": "mtan_s1s2.models.mtan.MTANClassifier",
            "attention": "learned",
            "attention_init": "default",
            "conv_filters": 64,
            "conv_kernel": 3,
            "conv_layers": 2,
            "gru_hidden": 64,
            "ref_values": False,
            "d_model": 32,
            "dropout": 0.1,
            "embed_time": 64,
            "fusion_hidden": 128,
            "head": "flatten",
            "head_hidden": [256, 256],
            "head_norm": False,
            "in_channels": "???",
            "input_hidden": 64,
            "intensity": False,
            "spatial_context": 1,
            "spatial_pool": "mean",
            "kernel_width": 1.0,
            "mlp": {"_partial_": True, "_target_": "mtan_s1s2.models.layers.mlp.AutoMlp"},
            "num_classes": "???",
            "num_heads": 2,
            "num_ref_times": 16,
            "ref_range": [0.0, 1.0],
            "time_max_cycles": 12.0,
            "time_min_cycles": 0.5,
            "time_scale": 365.0,
        },
        "num_classes": "???",
        "optimizer": {"_partial_": True, "_target_": "torch.optim.AdamW", "lr": 0.001, "weight_decay": 0.01},
        "scheduler": {
            "_partial_": True,
            "_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau",
            "factor": 0.5,
            "mode": "max",
            "patience": 3,
        },
        "pretrained": None,
    },
    "mtan_small_real": {
        "_recursive_": False,
        "_target_": "mtan_s1s2.lit_module.SITSClassifierModule",
        "augment": {"date_shift_days": 10, "noise_std": 0.05, "temporal_dropout": 0.2},
        "class_names": None,
        "class_weights": None,
        "compile": "auto",
        "early_stopping": {"mode": "max", "monitor": "val/OA", "patience": 30},  # the checkpoint's metric
        "freeze_encoder_epochs": 0,
        "checkpoint_ensemble": 1,
        "ignore_index": 0,
        "label_smoothing": 0.0,
        "monitor": "val/OA",
        "net": {
            "_target_": "mtan_s1s2.models.mtan.MTANClassifier",
            "attention": "learned",
            "attention_init": "identity",
            "conv_filters": 64,
            "conv_kernel": 3,
            "conv_layers": 2,
            "gru_hidden": 64,
            "ref_values": False,
            "d_model": 32,
            "dropout": 0.1,
            "embed_time": 64,
            "fusion_hidden": 128,
            "head": "flatten",
            "head_hidden": [256, 256],
            "head_norm": True,
            "in_channels": "???",
            "input_hidden": 64,
            "intensity": False,
            "spatial_context": 1,
            "spatial_pool": "mean",
            "kernel_width": 1.0,
            "mlp": {"_partial_": True, "_target_": "mtan_s1s2.models.layers.mlp.AutoMlp"},
            "num_classes": "???",
            "num_heads": 2,
            "num_ref_times": 16,
            "ref_range": "auto",
            "time_max_cycles": 12.0,
            "time_min_cycles": 0.5,
            "time_scale": 365.0,
        },
        "num_classes": "???",
        "optimizer": {"_partial_": True, "_target_": "torch.optim.AdamW", "lr": 0.001, "weight_decay": 0.01},
        "pretrained": None,
        "scheduler": {"T_max": 4, "_partial_": True, "_target_": "torch.optim.lr_scheduler.CosineAnnealingLR"},
    },
    "lightgbm": {
        "_target_": "mtan_s1s2.baselines.lightgbm.LightGBMBaseline",
        "class_weight": None,
        "colsample_bytree": 0.5,
        "early_stopping_rounds": 100,
        "features": "auto",
        "learning_rate": 0.05,
        "min_child_samples": 10,
        "n_estimators": 2000,
        "n_jobs": -1,
        "num_leaves": 31,
        "reg_lambda": 1.0,
        "seed": 42,
        "spatial_context": 1,
        "step_days": 10.0,
        "subsample": 0.8,
    },
    "minirocket": {
        "_target_": "mtan_s1s2.baselines.rocket.MiniRocketBaseline",
        "class_weight": None,
        "features": "auto",
        "max_dilations_per_kernel": 32,
        "n_jobs": -1,
        "n_kernels": 10000,
        "seed": 42,
        "step_days": 10.0,
    },
    "multirocket_hydra": {
        "_target_": "mtan_s1s2.baselines.rocket.MultiRocketHydraBaseline",
        "class_weight": None,
        "features": "auto",
        "n_groups": 64,
        "n_jobs": -1,
        "n_kernels": 8,
        "seed": 42,
        "step_days": 10.0,
    },
    "random_forest": {
        "_target_": "mtan_s1s2.baselines.random_forest.RandomForestBaseline",
        "class_weight": None,
        "features": "auto",
        "max_features": "sqrt",
        "min_samples_leaf": 1,
        "n_estimators": 500,
        "n_jobs": -1,
        "seed": 42,
        "spatial_context": 1,
        "step_days": 10.0,
    },
    "tempcnn": {
        "_target_": "mtan_s1s2.lit_module.SITSClassifierModule",
        "augment": None,
        "class_names": None,
        "class_weights": None,
        "compile": "auto",
        "early_stopping": None,
        "freeze_encoder_epochs": 0,
        "checkpoint_ensemble": 1,
        "ignore_index": 0,
        "label_smoothing": 0.0,
        "monitor": "val/OA",
        "net": {
            "_target_": "mtan_s1s2.models.tempcnn.TempCNN",
            "date_range": None,
            "date_step_days": 10.0,
            "dropout": 0.2,
            "filters": 64,
            "hidden": 256,
            "in_channels": "???",
            "kernel_size": 5,
            "mask_channels": True,
            "num_classes": "???",
            "num_layers": 3,
            "seq_len": "???",
            "spatial_context": 1,
        },
        "num_classes": "???",
        "optimizer": {"_partial_": True, "_target_": "torch.optim.AdamW", "lr": 0.001, "weight_decay": 0.01},
        "pretrained": None,
        "scheduler": {"T_max": 4, "_partial_": True, "_target_": "torch.optim.lr_scheduler.CosineAnnealingLR"},
    },
}
MODEL_CONFIGS["mtan_real"] = {
    **MODEL_CONFIGS["mtan_small_real"],
    # the recommended recipe: a conv head, linear per-date blocks, reference times from the dates,
    # the interpolated series beside the attention
    "net": {
        **MODEL_CONFIGS["mtan_small_real"]["net"],
        "head": "conv",
        "input_hidden": 0,
        "fusion_hidden": 0,
        "num_ref_times": "auto",
        "ref_values": True,
        "spatial_context": "auto",
        "spatial_pool": "mean",
    },
}
"""``cfg.model`` of every model option (``data=synthetic_tiny``, resolved) as composed when
each model file held all its keys: the shared task keys now live in ``model/task/classifier.yaml``.
``num_classes`` (``???``, filled by train.py) is left out: ``model.net.num_classes`` follows
``model.num_classes``, checked apart."""


@pytest.mark.parametrize("option", sorted(MODEL_CONFIGS))
def test_model_options_compose_to_the_recorded_values(option):
    from omegaconf import OmegaConf

    cfg = compose_train([f"model={option}", "data=synthetic_tiny"])
    if "net" in cfg.model:
        assert OmegaConf.is_missing(cfg.model, "num_classes") and cfg.model.net._get_node("num_classes")._value() == (
            "${..num_classes}"
        )
        cfg.model.num_classes = 11  # as train.py fills it from the data
    composed = OmegaConf.to_container(cfg.model, resolve=True)
    if "net" in cfg.model:
        assert composed["num_classes"] == composed["net"]["num_classes"] == 11
        recorded = MODEL_CONFIGS[option]
        assert recorded["num_classes"] == recorded["net"]["num_classes"] == "???"
        composed["num_classes"] = composed["net"]["num_classes"] = "???"
    assert composed == MODEL_CONFIGS[option]


def test_lightning_models_share_one_task_config():
    """The task keys are written once: a model file holds only its own keys."""
    import yaml

    task = yaml.safe_load((CONFIG_DIR / "model" / "task" / "classifier.yaml").read_text())
    for name in ("mtan", "tempcnn"):
        own = yaml.safe_load((CONFIG_DIR / "model" / f"{name}.yaml").read_text())
        assert {"task@_here_": "classifier"} in own["defaults"], name
        assert not set(own) & set(task), (name, set(own) & set(task))


@pytest.mark.parametrize(
    "overrides,monitor,mode",
    [
        (["model=mtan_small_real"], "val/OA", "max"),
        (["experiment=small_real"], "val/OA", "max"),
        (["experiment=real"], "val/OA", "max"),  # the recommended recipe
        (["model=mtan_small_real", "callbacks.model_checkpoint.monitor=val/F1"], "val/F1", "max"),
        (["model=mtan_small_real", "callbacks.model_checkpoint.monitor=val/loss",
          "callbacks.model_checkpoint.mode=min"], "val/loss", "min"),
        (["model=mtan_small_real", "callbacks=none"], "val/OA", "max"),  # no checkpoint callback: val/OA
    ],
)  # fmt: skip
def test_small_real_recipe_stops_early_on_the_metric_that_selects_the_checkpoint(overrides, monitor, mode, tmp_path):
    from omegaconf import OmegaConf

    cfg = compose_train(["data=synthetic_tiny", *overrides], output_dir=tmp_path)
    early = OmegaConf.to_container(cfg.model.early_stopping, resolve=True)
    assert early == {"monitor": monitor, "mode": mode, "patience": 30}
    if cfg.callbacks and cfg.callbacks.get("model_checkpoint"):
        checkpoint = cfg.callbacks.model_checkpoint
        assert (early["monitor"], early["mode"]) == (checkpoint.monitor, checkpoint.mode)


SHARED_KEYS = ("seed", "cpu_malloc", "matmul_precision", "monitor")


def test_shared_keys_are_written_once_and_reach_every_entry_point(tmp_path):
    """seed, cpu_malloc, matmul_precision and monitor live in configs/shared.yaml only."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    shared = OmegaConf.load(CONFIG_DIR / "shared.yaml")
    assert sorted(shared) == sorted(SHARED_KEYS)
    for path in sorted(CONFIG_DIR.rglob("*.yaml")):
        text = path.read_text()
        if path.name == "shared.yaml" or (path.parent != CONFIG_DIR and "@package _global_" not in text):
            continue  # a group's own keys live under its name (data.seed is the generator's)
        top = [line.split(":")[0] for line in text.splitlines() if line and line[0].isalpha()]
        defined = set(top) & set(SHARED_KEYS)
        # bench seeds 0; task=pretrain ranks its epochs by val/loss (min)
        allowed = {"seed"} if path.name == "bench.yaml" else {"monitor"} if path.parent.name == "task" else set()
        assert defined <= allowed, (path, defined)
    for name, overrides in (("train", []), ("eval", ["ckpt_path=x"]), ("predict", ["ckpt_path=x"]), ("bench", [])):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name=name, overrides=overrides)
        assert cfg.cpu_malloc == "tuned" and cfg.matmul_precision == "highest", name
        assert cfg.seed == (0 if name == "bench" else 42), name
    GlobalHydra.instance().clear()


def test_the_monitor_is_written_once_and_interpolated(tmp_path):
    cfg = compose_train(["monitor.metric=val/loss", "monitor.mode=min", "model=mtan_plateau"], output_dir=tmp_path)
    assert cfg.callbacks.model_checkpoint.monitor == cfg.model.monitor == cfg.optimized_metric == "val/loss"
    assert cfg.callbacks.model_checkpoint.mode == cfg.model.scheduler.mode == "min"
    default = compose_train(["model=tempcnn"], output_dir=tmp_path)
    assert default.callbacks.model_checkpoint.monitor == default.model.monitor == default.optimized_metric == "val/OA"
    assert default.callbacks.model_checkpoint.mode == "max"
    for path in sorted(set(CONFIG_DIR.rglob("*.yaml")) - {CONFIG_DIR / "shared.yaml"}):
        text = path.read_text()
        assert "monitor: val/OA" not in text and "optimized_metric: val/OA" not in text, path


@pytest.mark.parametrize(("mode", "direction"), [("max", "maximize"), ("min", "minimize")])
def test_optuna_direction_follows_the_monitor(mode, direction):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            config_name="train", overrides=["hparams_search=optuna", f"monitor.mode={mode}"], return_hydra_config=True
        )
    GlobalHydra.instance().clear()
    assert cfg.hydra.sweeper.direction == direction


def test_synthetic_presets_are_defined_in_python_only():
    """data=synthetic_tiny / synthetic_bench name a preset of PRESETS; its sizes and settings live there."""
    from omegaconf import OmegaConf

    from mtan_s1s2.data.synthetic.generator import GENERATOR_KEYS, PRESETS

    options = sorted((CONFIG_DIR / "data").glob("synthetic*.yaml"))
    assert [p.stem for p in options] == ["synthetic", "synthetic_bench", "synthetic_tiny"]
    for path in options:
        cfg = OmegaConf.load(path)
        assert cfg.preset in PRESETS, path
        sizes = {"n_train", "n_val", "n_test", "patch_size", *GENERATOR_KEYS}
        assert not {k for k in sizes if cfg.get(k) is not None} and cfg.get("generator") is None, path
