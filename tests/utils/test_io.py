"""Atomic writes: a reader sees the old file or the whole new one, and a failed write leaves no trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtan_s1s2.utils.io import write_json_atomic, write_text_atomic


def test_writes_create_folders_and_replace_whole_files(tmp_path: Path) -> None:
    path = write_json_atomic(tmp_path / "a" / "b.json", {"x": 1, "path": tmp_path})
    assert json.loads(path.read_text()) == {"x": 1, "path": str(tmp_path)}
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and [p.name for p in path.parent.iterdir()] == ["b.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_text_atomic(tmp_path / "c.json", "old")
    with pytest.raises(TypeError):
        write_text_atomic(path, None)  # type: ignore[arg-type]
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["c.json"]
