"""Failed runs leave a record: the NaN-loss check, the failed ``summary.json`` and ``predict_summary.json``.

:func:`mtan_s1s2.cli.train.main` runs every Hydra job through these helpers:

* :func:`raise_if_loss_not_finite`: a run whose training loss ended NaN/inf has failed,
  even when Lightning finished it.
* :func:`record_failure`: writes ``summary.json`` with ``status: failed`` and the error
  (keeping the timings :class:`~mtan_s1s2.callbacks.run_summary.RunSummary` already
  recorded), and says whether the failure is tolerated: inside a multirun it is, so the
  other jobs still run and the sweep summary lists the failed row (the sweep then exits
  non-zero from :class:`~mtan_s1s2.sweep.callback.SweepSummaryCallback`); a single run
  exits with status 1. Either way the error is shown once: an error about the input in
  one line, any other with its traceback.

:func:`mtan_s1s2.cli.predict.main` records a failed prediction job with
:func:`record_prediction_failure` (``predict_summary.json`` with ``status: failed``, read
by :mod:`mtan_s1s2.inference.sweep`), under the same rule.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from mtan_s1s2.cli.config import in_multirun
from mtan_s1s2.models.layers.mlp import backend_name
from mtan_s1s2.run_record import SUMMARY_FILE, RunRecord
from mtan_s1s2.utils.io import write_json_atomic

log = logging.getLogger(__name__)


def _config_backend(cfg: DictConfig) -> str | None:
    """Backend name of the job's ``mlp`` config (None when it has none or an unknown one)."""
    mlp = cfg.get("mlp")
    if mlp is None:
        return None
    try:
        return backend_name(mlp)
    except ValueError:
        return None


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


def failure_record(error: BaseException, cfg: DictConfig | None = None) -> dict[str, Any]:
    """The fields of a :class:`~mtan_s1s2.run_record.RunRecord` that mark a run as failed.

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
        record["backend"] = _config_backend(cfg)
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
    summary = RunRecord()
    if path.exists():
        try:
            summary = RunRecord.read(path)
        except (OSError, ValueError):
            summary = RunRecord()
    for key, value in failure_record(error, cfg).items():
        if key in ("backend", "seed", "task_name") and getattr(summary, key) is not None:
            continue  # keep what the run itself recorded
        setattr(summary, key, value)
    return summary.write(path)


def input_error(error: BaseException) -> BaseException | None:
    """The error about the run's input behind ``error``, or None for any other error.

    Readers and checks raise ``ValueError`` / ``FileNotFoundError`` with a message that
    names the problem and the fix; Hydra wraps those raised while instantiating a config
    node in an ``InstantiationException`` (whose text repeats the message with the node).

    Args:
        error: The exception that ended the job.

    Returns:
        The ``ValueError`` or ``FileNotFoundError`` (unwrapped), or None.
    """
    from hydra.errors import InstantiationException

    cause: BaseException | None = error
    while isinstance(cause, InstantiationException) and cause.__cause__ is not None:
        cause = cause.__cause__
    return cause if isinstance(cause, (ValueError, FileNotFoundError)) else None


def record_failure(cfg: DictConfig, error: BaseException) -> bool:
    """Record a failed job, say why once, and decide whether the caller may carry on.

    Writes the failed ``summary.json`` (rank 0 only) into ``cfg.paths.output_dir`` and
    logs the error once: an error about the input (:func:`input_error`) as one line (its
    traceback is kept in ``summary.json``), any other error with its traceback.

    Args:
        cfg: The job's config.
        error: The exception that ended the job.

    Returns:
        True inside a multirun (the sweep goes on; its summary lists the failure and the
        sweep exits non-zero at the end), False for a single run (the caller exits with
        status 1 without printing the error again).
    """
    if rank_zero_only.rank != 0:  # type: ignore[attr-defined]  # set on import by Lightning
        return in_multirun()
    output_dir = cfg.get("paths", {}).get("output_dir") if cfg.get("paths") is not None else None
    where = ""
    if output_dir:
        try:
            where = f"; recorded in {write_failed_summary(output_dir, error, cfg)}"
        except Exception as write_error:  # never hide the original error behind this one
            where = f"; its {SUMMARY_FILE} could not be written: {write_error}"
    cause = input_error(error)
    if cause is not None:
        log.error("Job failed: %s: %s%s", type(cause).__name__, cause, where)
    else:
        log.error("Job failed (%s: %s)%s", type(error).__name__, error, where, exc_info=error)
    return in_multirun()


def record_prediction_failure(cfg: DictConfig, error: BaseException, summary_file: str) -> bool:
    """Record a failed prediction job and decide whether the caller may carry on.

    Writes ``cfg.paths.output_dir / summary_file`` (rank 0 only) with ``status``
    (``failed``), ``scene`` (``cfg.scene``), ``error`` and ``error_traceback``
    (:func:`failure_record`) and logs the error.

    Args:
        cfg: The job's config (``configs/predict.yaml``).
        error: The exception that ended the job.
        summary_file: File name of the job's summary (``predict_summary.json``).

    Returns:
        True inside a multirun (the other scenes are still predicted; the sweep summary
        lists the failure), False for a single run (re-raise).
    """
    output_dir = cfg.get("paths", {}).get("output_dir") if cfg.get("paths") is not None else None
    if rank_zero_only.rank == 0 and output_dir:  # type: ignore[attr-defined]  # set on import by Lightning
        record = {**failure_record(error), "scene": cfg.get("scene")}
        try:
            write_json_atomic(Path(output_dir) / summary_file, record)
            log.error("Prediction failed: %s", record["error"])
        except Exception as write_error:  # never hide the original error behind this one
            log.error("Prediction failed (%s) and its %s could not be written: %s", error, summary_file, write_error)
    return in_multirun()


__all__ = [
    "failure_record",
    "input_error",
    "raise_if_loss_not_finite",
    "record_failure",
    "record_prediction_failure",
    "write_failed_summary",
]
