"""Where the Hydra configs live, and the resolvers they use."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import cast

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict


def _find_config_dir() -> Path:
    env = os.environ.get("MTAN_S1S2_CONFIG_DIR")
    if env:
        return Path(env).expanduser().resolve()
    package = Path(__file__).resolve().parents[1]
    for candidate in (
        package.parents[1] / "configs",  # a checkout (or editable install): <repo>/src/mtan_s1s2 -> <repo>/configs
        package / "configs",  # an installed wheel carries a copy (setup.py)
    ):
        if (candidate / "train.yaml").is_file():
            return candidate
    return package / "configs"


CONFIG_DIR: Path = _find_config_dir()
"""The ``configs/`` folder: ``$MTAN_S1S2_CONFIG_DIR`` if set, else the checkout's top-level
``configs/``, else the copy an installed wheel carries (``mtan_s1s2/configs``)."""

_PROCESS_RUN_ID = f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


def run_id() -> str:
    """``host-pid`` of this process.

    With a timestamp it makes run directories unique, even for runs started in the same
    second on the same or on different machines.
    """
    return _PROCESS_RUN_ID


def in_multirun() -> bool:
    """True inside a job of ``python train.py -m ...`` (any sweeper or launcher)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_params_ignored() -> str | None:
    """What a single run leaves out of its config's sweep, as a warning; None if nothing.

    A config that sets ``hydra.sweeper.params`` (``experiment=real_ensemble``: ``seed:
    1,2,3``; ``experiment=backend_speed``) describes a sweep, which only ``python train.py -m``
    runs: without ``-m`` Hydra ignores those values and trains one run.

    Returns:
        The warning (the swept keys and values, and the fix), or None outside a Hydra run,
        inside a multirun, or when no sweep values are set.
    """
    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    params = OmegaConf.select(cast(DictConfig, hc), "sweeper.params")
    if hc.mode == RunMode.MULTIRUN or not params:
        return None
    swept = ", ".join(f"{key}={value}" for key, value in params.items())
    experiment = hc.runtime.choices.get("experiment")
    source = f"experiment={experiment}" if experiment else "hydra.sweeper.params"
    return (
        f"{source} sweeps {swept}, which only a multirun trains: this single run trains one "
        f"configuration. Add -m to train them all (python train.py -m ...)."
    )


MONITOR_MODES: dict[str, str] = {"max": "maximize", "min": "minimize"}
"""``monitor.mode`` -> the direction of an Optuna study."""


def optuna_direction(mode: str) -> str:
    """``maximize`` for ``monitor.mode: max``, ``minimize`` for ``min`` (``${optuna_direction:...}``).

    Raises:
        ValueError: On any other mode, naming the valid ones.
    """
    if mode not in MONITOR_MODES:
        raise ValueError(f"monitor.mode must be one of {list(MONITOR_MODES)}, got {mode!r}.")
    return MONITOR_MODES[mode]


def register_resolvers() -> None:
    """Register the ``${run_id:}`` and ``${optuna_direction:<mode>}`` resolvers (idempotent)."""
    if not OmegaConf.has_resolver("run_id"):
        OmegaConf.register_new_resolver("run_id", run_id)
    if not OmegaConf.has_resolver("optuna_direction"):
        OmegaConf.register_new_resolver("optuna_direction", optuna_direction)


USER_PATH_KEYS: tuple[str, ...] = ("data.root", "data.stats_file", "ckpt_path", "train_config")
"""Config keys holding paths a user types, relative to the directory the command starts in."""

CKPT_PATH_KEYWORDS: tuple[str, ...] = ("last", "best", "hpc")
"""``ckpt_path`` values that Lightning resolves itself (not paths)."""


def launch_dir() -> Path:
    """The directory the command was started in (Hydra's original working directory)."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.cwd)
    return Path.cwd()


def resolve_user_paths(cfg: DictConfig, keys: tuple[str, ...] = USER_PATH_KEYS) -> None:
    """Make the user's relative paths absolute, against the launch directory, in place.

    With ``hydra.job.chdir=true`` the job runs in its output directory, where a relative
    ``data.root=./data`` no longer points at the data. Every key of ``keys`` present in
    ``cfg`` is resolved against :func:`launch_dir` (``~`` expanded), so error messages
    name absolute paths too. ``ckpt_path=last|best|hpc`` and URLs are left as they are.

    Args:
        cfg: The composed config (updated).
        keys: Dotted keys to resolve.
    """
    base = launch_dir()
    for key in keys:
        try:
            value = OmegaConf.select(cfg, key, default=None)
        except Exception:
            continue  # an unset ``???`` or an interpolation that fails: reported where it is used
        if isinstance(value, ListConfig):  # ckpt_path=[a.ckpt,b.ckpt]: an ensemble
            with open_dict(cfg):
                OmegaConf.update(cfg, key, [_absolute(str(v), base) for v in value], merge=False)
            continue
        if not isinstance(value, str):
            continue
        with open_dict(cfg):
            OmegaConf.update(cfg, key, _absolute(value, base))


def _absolute(value: str, base: Path) -> str:
    """``value`` against ``base`` when it is a relative path (keywords, URLs and ``???`` unchanged)."""
    if value in ("", "???", *CKPT_PATH_KEYWORDS) or "://" in value:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def prepare_run(cfg: DictConfig) -> Path:
    """The common start of every entry point (train, eval, predict).

    Seeds everything when ``cfg.seed`` is set, applies ``cfg.matmul_precision`` to matmuls
    and cuDNN alike, tunes glibc's ``malloc`` unless ``cfg.cpu_malloc`` is ``default``
    (:func:`~mtan_s1s2.utils.allocator.tune_glibc_malloc`), and creates
    ``cfg.paths.output_dir``.

    Returns:
        The output directory.
    """
    import lightning as L

    from mtan_s1s2.utils.precision import set_matmul_precision

    cpu_malloc = cfg.get("cpu_malloc", "tuned")
    if cpu_malloc not in ("tuned", "default"):
        raise ValueError(f"cpu_malloc must be 'tuned' or 'default', got {cpu_malloc!r}.")
    if cpu_malloc == "tuned":
        from mtan_s1s2.utils.allocator import tune_glibc_malloc

        tune_glibc_malloc()
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True)
    if cfg.get("matmul_precision"):
        set_matmul_precision(cfg.matmul_precision)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def resolve_trainer_precision(cfg: DictConfig) -> str:
    """Replace ``cfg.trainer.precision: auto`` by the precision of this machine, in place.

    Returns:
        Why the precision was chosen (recorded in ``summary.json``).
    """
    from mtan_s1s2.utils.precision import resolve_precision

    trainer = cfg.get("trainer")
    if trainer is None or "precision" not in trainer:
        return "no trainer precision in the config"
    precision, reason = resolve_precision(str(trainer.precision), str(trainer.get("accelerator", "auto")))
    with open_dict(cfg):
        cfg.trainer.precision = precision
    return reason
