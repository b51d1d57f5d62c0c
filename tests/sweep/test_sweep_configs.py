"""The sweep configs compose (with their Hydra node) and instantiate: the sweep callback, the
backend-speed experiment, the Optuna search, the joblib and SLURM launchers."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import hydra
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers, run_id, sweep_params_ignored
from mtan_s1s2.sweep.callback import SweepSummaryCallback

register_resolvers()


def _needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} not installed (pip install -e '.[dev]')"
    )


@pytest.fixture
def compose_hydra() -> Iterator:
    """compose(train.yaml, overrides) with the hydra node, plus a parser that knows the groups."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):

        def _compose(overrides: list[str]) -> DictConfig:
            return compose(config_name="train", overrides=overrides, return_hydra_config=True)

        loader = GlobalHydra.instance().config_loader()
        _compose.parser = OverridesParser.create(config_loader=loader)  # type: ignore[attr-defined]
        yield _compose
    GlobalHydra.instance().clear()


def _sweep_values(parser: OverridesParser, params: DictConfig) -> dict[str, list[str]]:
    overrides = parser.parse_overrides([f"{k}={v}" for k, v in params.items()])
    return {o.key_or_group: list(o.sweep_string_iterator()) for o in overrides}


def test_every_multirun_gets_the_summary_callback(compose_hydra):
    cfg = compose_hydra([])
    callback = hydra.utils.instantiate(cfg.hydra.callbacks.sweep_summary)
    assert isinstance(callback, SweepSummaryCallback) and callback.fail_on_failed_jobs
    # sweep dirs: <date>_<time>_<host>-<pid>, so two sweeps started in the same second differ
    assert cfg.hydra.sweep.dir.endswith(f"_{run_id()}") and run_id().endswith(f"-{os.getpid()}")
    assert "${run_id:}" in OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"]
    assert OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["subdir"] == "${hydra.job.num}"


def test_callback_pins_the_sweep_dir_for_other_processes(compose_hydra, tmp_path):
    cfg = compose_hydra([f"paths.log_dir={tmp_path}"])
    SweepSummaryCallback().on_multirun_start(cfg)
    pinned = [o for o in cfg.hydra.overrides.hydra if o.startswith("hydra.sweep.dir=")]
    assert len(pinned) == 1 and pinned[0] == f"hydra.sweep.dir={cfg.hydra.sweep.dir}"
    assert Path(cfg.hydra.sweep.dir).is_absolute() and cfg.hydra.sweep.dir.startswith(str(tmp_path))


def test_backend_speed_experiment(compose_hydra):
    cfg = compose_hydra(["experiment=backend_speed"])
    assert cfg.task_name == "backend_speed" and cfg.test is False
    assert (
        isinstance(cfg.trainer.limit_train_batches, int)
        and cfg.trainer.max_epochs > cfg.callbacks.epoch_timer.warmup_epochs
    )
    assert cfg.callbacks.model_checkpoint is None and cfg.callbacks.run_summary is not None
    assert list(cfg.logger) == ["csv"]
    swept = _sweep_values(compose_hydra.parser, cfg.hydra.sweeper.params)
    assert {"linear", "conv"} <= set(swept["mlp"]) and "auto" not in swept["mlp"]
    assert len(swept["seed"]) >= 2


@_needs("hydra_plugins.hydra_optuna_sweeper")
def test_optuna_search_composes(compose_hydra):
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    cfg = compose_hydra(["hparams_search=optuna"])
    assert cfg.hydra.mode.name == "MULTIRUN" and cfg.hydra.runtime.choices["hydra/sweeper"] == "optuna"
    assert cfg.hydra.sweeper.direction == "maximize" and cfg.optimized_metric == "val/OA"
    sampler = hydra.utils.instantiate(cfg.hydra.sweeper.sampler)
    assert type(sampler).__name__ == "TPESampler"
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    distributions, fixed = create_params_from_overrides([f"{k}={v}" for k, v in params.items()])
    assert set(distributions) == set(params) and not fixed
    for key in params:  # every searched key exists in the config (a typo would only fail at run time)
        assert OmegaConf.select(cfg, key, default="MISSING") != "MISSING", key


@_needs("hydra_plugins.hydra_joblib_launcher")
def test_joblib_launcher_composes(compose_hydra):
    cfg = compose_hydra(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])
    launcher = hydra.utils.instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "JoblibLauncher" and launcher.joblib["n_jobs"] == 2


@_needs("hydra_plugins.hydra_submitit_launcher")
def test_slurm_launcher_preset_makes_a_valid_sbatch_script(compose_hydra, tmp_path, monkeypatch):
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    cfg = compose_hydra(["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=2"])
    launcher = hydra.utils.instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    # the parameter mapping of SlurmLauncher.launch, without submitting anything
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    params = dict(launcher.params)
    executor = submitit.AutoExecutor(
        cluster="slurm", folder=tmp_path, slurm_max_num_timeout=params.pop("max_num_timeout")
    )
    params.pop("submitit_folder")
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    sbatch = executor._executor._make_submission_file_text("python train.py", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=2", "--time=240", "--requeue", "--signal=USR2@120"):
        assert f"#SBATCH {line}" in sbatch, (line, sbatch)


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONFIG_DIR / "hparams_search").glob("*.yaml")))
def test_every_hparams_search_option_is_covered(option):
    assert option in {"optuna"}, f"add a composition test for hparams_search={option}"


def _in_hydra_run(cfg: DictConfig, mode: RunMode) -> str | None:
    """sweep_params_ignored() as a job of ``cfg`` run in ``mode`` sees it."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.hydra.mode = mode
    HydraConfig.instance().set_config(cfg)
    try:
        return sweep_params_ignored()
    finally:
        HydraConfig.instance().cfg = None


def test_real_ensemble_experiment_sweeps_three_seeds_of_the_recipe(compose_hydra):
    cfg = compose_hydra(["experiment=real_ensemble"])
    recipe = compose_hydra(["experiment=real"])
    assert cfg.task_name == "real_ensemble"
    assert cfg.model == recipe.model and cfg.trainer.max_epochs == recipe.trainer.max_epochs == 100
    assert _sweep_values(compose_hydra.parser, cfg.hydra.sweeper.params) == {"seed": ["1", "2", "3"]}
    # without -m Hydra ignores the sweep: the run says so, and how to train all three seeds
    warning = _in_hydra_run(cfg, RunMode.RUN)
    assert warning is not None and "experiment=real_ensemble sweeps seed=1,2,3" in warning and "-m" in warning
    assert _in_hydra_run(cfg, RunMode.MULTIRUN) is None
    assert _in_hydra_run(compose_hydra([]), RunMode.RUN) is None  # no sweep values, nothing to say


def test_real_with_tempcnn_experiment_sweeps_the_recipe_and_tempcnn(compose_hydra):
    cfg = compose_hydra(["experiment=real_with_tempcnn"])
    recipe = compose_hydra(["experiment=real"])
    assert cfg.task_name == "real_with_tempcnn" and cfg.model == recipe.model
    assert _sweep_values(compose_hydra.parser, cfg.hydra.sweeper.params) == {
        "model": ["mtan_real", "tempcnn"],
        "seed": ["1", "2", "3"],
    }
    tempcnn = compose_hydra(["experiment=real_with_tempcnn", "model=tempcnn"])  # the sweep's TempCNN jobs
    assert tempcnn.model.net._target_ == "mtan_s1s2.models.tempcnn.TempCNN"
    assert tempcnn.model.checkpoint_ensemble == recipe.model.checkpoint_ensemble == 10
    assert tempcnn.trainer.max_epochs == 100
    warning = _in_hydra_run(cfg, RunMode.RUN)
    assert warning is not None and "experiment=real_with_tempcnn sweeps" in warning and "-m" in warning
