"""The job side of a sweep: failed jobs leave a record, DDP jobs re-launch as one run.

:func:`mtan_s1s2.cli.train.main` runs every Hydra job through these helpers:

* :func:`raise_if_loss_not_finite`: a run whose training loss ended NaN/inf has failed,
  even when Lightning finished it.
* :func:`record_failure`: writes ``summary.json`` with ``status: failed`` and the error
  (keeping the timings :class:`~mtan_s1s2.callbacks.run_summary.RunSummary` already
  recorded), and says whether the failure is tolerated: inside a multirun it is, so the
  other jobs still run and the sweep summary lists the failed row (the sweep then exits
  non-zero from :class:`~mtan_s1s2.sweep.callback.SweepSummary`); a single run re-raises.
* :func:`single_run_for_ddp`: inside a multirun, Lightning's DDP launcher would start the
  extra ranks with the whole sweep command line (``-m`` and every swept value); this makes
  them start exactly this job, in this job's directory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf, read_write

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
"""Per-job record written by :class:`~mtan_s1s2.callbacks.run_summary.RunSummary`."""

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


def in_multirun() -> bool:
    """True inside a job of ``python train.py -m ...`` (any sweeper or launcher)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def raise_if_loss_not_finite(metrics: Mapping[str, float], key: str = "train/loss") -> None:
    """Fail a run whose last epoch-mean training loss is NaN or infinite.

    Args:
        metrics: Logged metrics of the run (``train()``'s first return value).
        key: The loss key; absent (no training) means nothing to check.

    Raises:
        FloatingPointError: ``metrics[key]`` is NaN or +-inf.
    """
    value = metrics.get(key)
    if value is not None and not math.isfinite(value):
        raise FloatingPointError(
            f"{key} is {value} at the end of training: the run diverged. Lower "
            "model.optimizer.lr, set trainer.gradient_clip_val=1.0, or check the inputs for "
            "NaN outside their masks."
        )


def _backend_of(cfg: DictConfig) -> str | None:
    target = str(cfg.get("mlp", {}).get("_target_", "")) if cfg.get("mlp") is not None else ""
    name = target.rsplit(".", 1)[-1]
    if not name:
        return None
    return name[: -len("Mlp")].lower() if name.endswith("Mlp") else name.lower()


def failure_record(error: BaseException, cfg: DictConfig | None = None) -> dict[str, Any]:
    """The fields that mark a run as failed in ``summary.json``.

    Args:
        error: The exception that ended the run.
        cfg: The job's config (for ``backend``, ``seed`` and ``task_name`` when the run
            failed before ``RunSummary`` wrote anything).

    Returns:
        ``status`` (``"interrupted"`` for Ctrl-C, else ``"failed"``), ``error``
        (``"Type: message"``, one line) and ``error_traceback`` (the last frames).
    """
    message = " ".join(str(error).split()) or "(no message)"
    record: dict[str, Any] = {
        "status": "interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
        "error": f"{type(error).__name__}: {message}",
        "error_traceback": "".join(traceback.format_exception(error, limit=-8))[-4000:],
    }
    if cfg is not None:
        record["backend"] = _backend_of(cfg)
        record["seed"] = cfg.get("seed")
        record["task_name"] = cfg.get("task_name")
    return record


def write_failed_summary(output_dir: str | Path, error: BaseException, cfg: DictConfig | None = None) -> Path:
    """Mark ``output_dir/summary.json`` as failed, keeping what the run recorded so far.

    An existing ``summary.json`` (written after fit, or by ``RunSummary.on_exception``
    with the epochs timed before the failure) keeps its fields; ``status`` and ``error``
    are set. Without one, a minimal record is written.

    Args:
        output_dir: The job's output directory.
        error: The exception that ended the run.
        cfg: The job's config.

    Returns:
        The path of ``summary.json``.
    """
    path = Path(output_dir) / SUMMARY_FILE
    summary: dict[str, Any] = {}
    if path.exists():
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            summary = {}
    record = failure_record(error, cfg)
    for key in ("backend", "seed", "task_name"):  # keep what the run itself recorded
        if summary.get(key) is not None:
            record.pop(key, None)
    summary.update(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return path


def record_failure(cfg: DictConfig, error: BaseException) -> bool:
    """Record a failed job and decide whether the caller may carry on.

    Writes the failed ``summary.json`` (rank 0 only) into ``cfg.paths.output_dir`` and
    logs the traceback.

    Args:
        cfg: The job's config.
        error: The exception that ended the job.

    Returns:
        True inside a multirun (the sweep goes on; its summary lists the failure and the
        sweep exits non-zero at the end), False for a single run (re-raise).
    """
    output_dir = cfg.get("paths", {}).get("output_dir") if cfg.get("paths") is not None else None
    if rank_zero_only.rank == 0 and output_dir:
        try:
            path = write_failed_summary(output_dir, error, cfg)
            log.error("Job failed (%s: %s); recorded in %s", type(error).__name__, error, path, exc_info=error)
        except Exception as write_error:  # never hide the original error behind this one
            log.error("Job failed (%s) and its summary.json could not be written: %s", error, write_error)
    return in_multirun()


def _uses_subprocess_ddp(cfg: DictConfig) -> bool:
    strategy = cfg.get("trainer", {}).get("strategy") if cfg.get("trainer") is not None else None
    name = str(strategy.get("_target_", "") if isinstance(strategy, Mapping) else strategy or "").lower()
    return "ddp" in name and not any(s in name for s in ("spawn", "fork", "notebook"))


def _job_command() -> list[str]:
    hc = HydraConfig.get()
    hydra_overrides = [o for o in hc.overrides.hydra if not str(o).lstrip("+~").startswith(_SWEEP_ONLY_HYDRA_OVERRIDES)]
    return [sys.argv[0], *map(str, hc.overrides.task), *map(str, hydra_overrides)]


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

    hc = HydraConfig.get()
    saved_argv = list(sys.argv)
    saved_run_dir = OmegaConf.to_container(hc.run, resolve=False)["dir"]  # keep interpolations
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


__all__ = [
    "failure_record",
    "in_multirun",
    "raise_if_loss_not_finite",
    "record_failure",
    "single_run_for_ddp",
    "write_failed_summary",
]
