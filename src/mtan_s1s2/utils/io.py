"""Atomic file writes for records that other processes read while they are written."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` through a temporary file in the same folder, then rename it.

    A reader (another run, a sweep summary, a requeued job) sees either the old file or the
    whole new one, never half of it. The parent folder is created if needed.

    Args:
        path: Destination file.
        text: Its new content.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: If the folder cannot be created or written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """:func:`write_text_atomic` of ``payload`` as indented JSON (non-JSON values as ``str``)."""
    return write_text_atomic(path, json.dumps(payload, indent=2, default=str) + "\n")


__all__ = ["write_json_atomic", "write_text_atomic"]
