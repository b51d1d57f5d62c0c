"""Lightning DDP inside a Hydra multirun: re-launch exactly one sweep job on the other ranks.

Lightning starts rank ``k > 0`` of a subprocess DDP run as ``python <sys.argv>
hydra.run.dir=<HydraConfig run.dir> ...``. Inside a multirun, ``sys.argv`` is the whole
sweep, so every rank would run a sweep of its own in a new directory;
:func:`single_run_for_ddp` makes them start exactly this job, in this job's directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, read_write

from mtan_s1s2.cli.config import in_multirun
from mtan_s1s2.utils.configs import typed_overrides

_SWEEP_ONLY_HYDRA_OVERRIDES: tuple[str, ...] = (
    "hydra.mode",
    "hydra.sweep",
    "hydra.sweeper",
    "hydra/sweeper",
    "hydra.launcher",
    "hydra/launcher",
    "hydra.callbacks",
    "hydra/callbacks",
    # set by Lightning's launcher itself:
    "hydra.run",
    "hydra.job.name",
    "hydra.output_subdir",
)
"""Hydra overrides that only make sense for the sweep as a whole, or that Lightning sets."""

_DDP_ENV: tuple[str, ...] = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
"""Environment variables Lightning's DDP launcher sets in the rank-0 process."""


def _uses_subprocess_ddp(cfg: DictConfig) -> bool:
    strategy = cfg.get("trainer", {}).get("strategy") if cfg.get("trainer") is not None else None
    name = str(strategy.get("_target_", "") if isinstance(strategy, Mapping) else strategy or "").lower()
    return "ddp" in name and not any(s in name for s in ("spawn", "fork", "notebook"))


def _job_command() -> list[str]:
    hc = HydraConfig.get()
    hydra_overrides = [
        o for o in typed_overrides(hc.overrides.hydra) if not o.lstrip("+~").startswith(_SWEEP_ONLY_HYDRA_OVERRIDES)
    ]
    return [sys.argv[0], *typed_overrides(hc.overrides.task), *hydra_overrides]


@contextmanager
def single_run_for_ddp(cfg: DictConfig) -> Iterator[None]:
    """Let Lightning's DDP launcher re-start exactly this sweep job on the other ranks.

    Lightning starts rank ``k > 0`` as ``python <sys.argv> hydra.run.dir=<HydraConfig
    run.dir> ...``. In a multirun, ``sys.argv`` is the whole sweep and ``run.dir`` is not
    the job's directory, so every rank would run a sweep of its own in a new directory.
    While the job trains, ``sys.argv`` becomes this job's overrides (no ``-m``) and
    ``hydra.run.dir`` this job's output directory; both are restored afterwards, the
    process group is destroyed and the launcher's environment variables (``LOCAL_RANK``,
    ``MASTER_PORT``, ...) are reset, so the next job starts its own ranks. Outside a
    multirun, or without a subprocess-launched ``ddp`` strategy, nothing changes.

    Args:
        cfg: The job's config (``trainer.strategy`` is checked).
    """
    if not (in_multirun() and _uses_subprocess_ddp(cfg)):
        yield
        return
    import torch.distributed as dist

    hc = cast(DictConfig, HydraConfig.get())  # typed as its HydraConf schema, a DictConfig at runtime
    saved_argv = list(sys.argv)
    saved_run_dir = cast("dict[str, Any]", OmegaConf.to_container(hc.run, resolve=False))["dir"]  # keep interpolations
    saved_env = {k: os.environ.get(k) for k in _DDP_ENV}
    sys.argv = _job_command()
    with read_write(hc.run):
        hc.run.dir = hc.runtime.output_dir
    try:
        yield
    finally:
        sys.argv = saved_argv
        with read_write(hc.run):
            hc.run.dir = saved_run_dir
        # The next job must start its own ranks: Lightning leaves the process group up and
        # LOCAL_RANK etc. set, which would make it believe its ranks already exist.
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


__all__ = ["single_run_for_ddp"]
