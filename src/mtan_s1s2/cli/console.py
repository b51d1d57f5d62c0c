"""What a run shows on the console and in ``train.log``.

* Warnings go through ``logging`` as one line each (``UserWarning: ... (file.py:12)``), so
  ``train.log`` holds them too.
* Messages of Lightning a user cannot act on are dropped: the ``litlogger`` tip, the
  advice to raise ``num_workers`` (``data.num_workers`` is a deliberate setting of every
  data config), a deprecation inside Lightning, the logging-interval note (metrics are
  logged per epoch), the model summary's note on mixed precision, and the note that the
  training module's ``on_after_batch_transfer`` (augmentations) is used with a datamodule.
  Real warnings stay.
* Without a terminal (``nohup``, SLURM), where a progress bar shows nothing useful, the
  bar is off and :class:`~mtan_s1s2.callbacks.epoch_log.EpochLog` writes one line per
  epoch instead.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from lightning.pytorch.callbacks import ProgressBar

LIGHTNING_NOISE: tuple[str, ...] = (
    r".*does not have many workers which may be a bottleneck",
    r".*`isinstance\(treespec, LeafSpec\)` is deprecated",
    r".*is smaller than the logging interval Trainer\(log_every_n_steps",
    # the model summary's size estimate under mixed precision (it then counts 32 bits per weight)
    r"Precision \S+ is not supported by the model summary",
    # the training module augments batches in on_after_batch_transfer on purpose; no datamodule
    # overrides that hook
    r"You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a `LightningDataModule`",
)
"""Warnings of Lightning that need no action here (regular expressions on the message)."""

RESUME_NOISE = r".*You're resuming from a checkpoint that ended before the epoch ended"
"""Lightning's warning on a mid-epoch resume; not true here for a single process, whose
datamodule resumes the epoch's order (:class:`~mtan_s1s2.data.datamodule.SITSDataModule`)."""


LIGHTNING_INFO_NOISE: tuple[str, ...] = ("💡 Tip",)
"""Starts of Lightning's info messages that need no action here."""


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_INFO_NOISE)


def _format_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    return f"{category.__name__}: {message} ({Path(filename).name}:{lineno})"


def _showwarning_to_log(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    logging.getLogger("py.warnings").warning(_format_warning(message, category, filename, lineno))


def quiet_lightning() -> None:
    """Drop the Lightning messages listed in :data:`LIGHTNING_NOISE` and :data:`LIGHTNING_INFO_NOISE`."""
    for pattern in LIGHTNING_NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    rank_zero_log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropTips) for f in rank_zero_log.filters):
        rank_zero_log.addFilter(_DropTips())


def warnings_to_log() -> None:
    """Show every warning as one ``WARNING`` log line (console and ``train.log``)."""
    warnings.showwarning = _showwarning_to_log


def stdout_is_terminal() -> bool:
    """Whether stdout is attached to a terminal (not ``nohup``, SLURM or a pipe)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def progress_bar_callbacks_allowed(trainer_cfg: Any, callbacks: Sequence[Any]) -> tuple[list[Any], bool]:
    """The callbacks without progress bars when no bar is wanted, and whether a bar is shown.

    A bar is shown only when ``trainer.enable_progress_bar`` is true and stdout is a
    terminal; otherwise the bar callbacks (e.g. ``callbacks.progress_bar``, a
    ``RichProgressBar``) are removed, so that ``trainer.enable_progress_bar=false`` works
    with the default callbacks.

    Args:
        trainer_cfg: The ``trainer`` config.
        callbacks: Instantiated callbacks.

    Returns:
        ``(callbacks, show_bar)``; pass ``enable_progress_bar=show_bar`` to the trainer.
    """
    show = bool(trainer_cfg.get("enable_progress_bar", True)) and stdout_is_terminal()
    if show:
        return list(callbacks), True
    return [c for c in callbacks if not isinstance(c, ProgressBar)], False


__all__ = [
    "LIGHTNING_INFO_NOISE",
    "LIGHTNING_NOISE",
    "RESUME_NOISE",
    "progress_bar_callbacks_allowed",
    "quiet_lightning",
    "stdout_is_terminal",
    "warnings_to_log",
]
