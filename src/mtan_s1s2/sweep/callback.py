"""Hydra callback: pin the sweep directory, keep jobs apart, summarise at the end.

Configured in ``configs/hydra/default.yaml`` (``hydra.callbacks.sweep_summary``), so every
``python train.py -m ...`` ends with ``summary.csv``, ``summary.md`` and
``epoch_times.png`` at the sweep root (:mod:`mtan_s1s2.sweep.summarize`), and exits
non-zero when a job failed.
"""

from __future__ import annotations

import gc
import logging
import re
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from mtan_s1s2.utils.configs import typed_overrides

log = logging.getLogger(__name__)

_PLAIN_VALUE = re.compile(r"[\w./:@%~+\-]+")


def _override_value(text: str) -> str:
    """Quote ``text`` for a Hydra command-line override when it needs it."""
    if _PLAIN_VALUE.fullmatch(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SweepSummaryCallback(Callback):
    """Sweep bookkeeping around the jobs of a multirun.

    * ``on_multirun_start``: resolves ``hydra.sweep.dir`` once, on the submitting process,
      and pins it as an override, so jobs that resolve it again in another process (joblib
      workers, SLURM nodes, requeued jobs) land in the same sweep directory: its
      ``${now:}`` and ``${run_id:}`` parts would otherwise be evaluated there.
    * ``on_job_start`` / ``on_job_end`` (in the job's process): reset CUDA peak-memory
      statistics, so each job's ``peak_memory_mb`` is its own, and free the memory a
      failed job left behind (caches, the traceback's frames) before the next job.
    * ``on_multirun_end``: writes the sweep summary and prints it; if a job did not
      complete (``status`` failed or interrupted in its ``summary.json``), exits with
      status 1 after the summary is written. Jobs without any ``summary.json`` (e.g.
      ``callbacks=none``) are listed as ``incomplete`` but do not fail the sweep.

    Args:
        plot: Write ``epoch_times.png``.
        fail_on_failed_jobs: Exit with status 1 when any job failed (default True).
    """

    def __init__(self, plot: bool = True, fail_on_failed_jobs: bool = True) -> None:
        self.plot = plot
        self.fail_on_failed_jobs = fail_on_failed_jobs

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Pin ``hydra.sweep.dir`` as resolved on the submitting process."""
        sweep_dir = str(Path(str(config.hydra.sweep.dir)).absolute())
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.sweep.dir = sweep_dir
            kept = [o for o in typed_overrides(config.hydra.overrides.hydra) if not o.startswith("hydra.sweep.dir=")]
            config.hydra.overrides.hydra = [*kept, f"hydra.sweep.dir={_override_value(sweep_dir)}"]

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Reset the CUDA peak-memory statistics for this job."""
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Free what the job left behind before the next one."""
        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write and print the sweep summary; exit with status 1 if a job failed."""
        from mtan_s1s2.sweep.render import MD_FILE
        from mtan_s1s2.sweep.summarize import write_summary

        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            summary = write_summary(sweep_dir, plot=self.plot)
        except Exception as err:  # Hydra would only warn; make it visible and fail
            log.exception("Could not summarise the sweep in %s", sweep_dir)
            raise SystemExit(
                f"Could not write the sweep summary ({type(err).__name__}: {err}). Rebuild it with: "
                f"python -m mtan_s1s2.sweep.summarize {sweep_dir}"
            ) from err
        log.info("Sweep summary: %s", sweep_dir / MD_FILE)
        if summary.failed and self.fail_on_failed_jobs:
            jobs = "; ".join(f"{r.label(summary.keys)}: {r.error}" for r in summary.failed)
            # SystemExit passes through Hydra's callback error handling (it catches Exception).
            raise SystemExit(
                f"{len(summary.failed)} of {len(summary.records)} sweep jobs failed: {jobs}. "
                f"Details in {sweep_dir / MD_FILE}."
            )


__all__ = ["SweepSummaryCallback"]
