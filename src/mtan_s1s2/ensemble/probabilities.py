"""Per-pixel test probabilities of a run, written to one compact file and averaged over runs.

Every training run that tests writes ``test_probabilities.npz``
(:class:`~mtan_s1s2.callbacks.test_probabilities.TestProbabilities`, and the baselines'
harness), one entry per labelled test pixel:

* ``patch_id (N,) int64``: the sample (patch, or the row of a pixel table) as tested;
* ``row``, ``col (N,) int32``: the pixel inside the sample as tested (0, 0 for tables);
* ``label (N,) int64``: its reference class;
* ``proba (N, K) float16``: the softmax over the classes other than ``ignore_index``
  (its column is 0);
* ``class_names (K,) str`` and ``ignore_index ()`` int64.

Runs that differ only by seed test the same pixels, so their files align on
``(patch_id, row, col)``; :func:`mean_probabilities` averages them (the ensemble of the runs)
and :meth:`PixelProbabilities.metrics` scores any of them with the metrics of training
(:func:`~mtan_s1s2.metrics.classification_metrics`). A DDP test writes one file per rank
(``test_probabilities_rank{r}.npz``); :func:`read_probabilities` joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from mtan_s1s2.metrics import classification_metrics

PROBABILITIES_FILE = "test_probabilities.npz"
"""The per-pixel test probabilities in a run directory."""

RANK_PATTERN = "test_probabilities_rank*.npz"
"""The files of a test run on several DDP ranks (one each)."""


def probabilities_from_logits(logits: Tensor, ignore_index: int | None) -> Tensor:
    """Softmax over the classes other than ``ignore_index`` (its probability is 0).

    Args:
        logits: ``(B, K, ...)`` float logits.
        ignore_index: The unlabelled class, never predicted (None or out of range: none).

    Returns:
        ``(B, K, ...)`` float32 probabilities summing to 1 over ``K``.
    """
    z = logits.float()
    if ignore_index is not None and 0 <= ignore_index < z.shape[1]:
        z = z.clone()
        z[:, ignore_index] = -torch.inf
    return torch.softmax(z, dim=1)


@dataclass
class PixelProbabilities:
    """Probabilities of the labelled test pixels of one run (or of an ensemble of runs).

    Attributes:
        patch_id: ``(N,)`` int64 sample of each pixel.
        row: ``(N,)`` int32 row inside the sample.
        col: ``(N,)`` int32 column inside the sample.
        label: ``(N,)`` int64 reference class.
        proba: ``(N, K)`` probabilities (float16 on disk, float32 once averaged).
        class_names: ``K`` class names.
        ignore_index: The unlabelled class (no pixel has it as label).
        source: Where it was read from (for messages).
    """

    patch_id: np.ndarray
    row: np.ndarray
    col: np.ndarray
    label: np.ndarray
    proba: np.ndarray
    class_names: list[str]
    ignore_index: int
    source: str = ""

    def __len__(self) -> int:
        return int(self.label.shape[0])

    @property
    def num_classes(self) -> int:
        """``K``, including the ``ignore_index`` class."""
        return len(self.class_names)

    def sorted(self) -> PixelProbabilities:
        """The same pixels in ``(patch_id, row, col)`` order, duplicates dropped (DDP padding repeats samples)."""
        keys = np.stack([self.patch_id.astype(np.int64), self.row.astype(np.int64), self.col.astype(np.int64)], 1)
        _, first = np.unique(keys, axis=0, return_index=True)
        order = first[np.lexsort((self.col[first], self.row[first], self.patch_id[first]))]
        return PixelProbabilities(
            self.patch_id[order], self.row[order], self.col[order], self.label[order], self.proba[order],
            list(self.class_names), self.ignore_index, self.source,
        )  # fmt: skip

    def predicted(self) -> np.ndarray:
        """``(N,)`` int64 argmax class (the ``ignore_index`` class has probability 0, never the argmax)."""
        proba = self.proba.astype(np.float32, copy=True)
        if 0 <= self.ignore_index < proba.shape[1]:
            proba[:, self.ignore_index] = -1.0
        return np.asarray(proba.argmax(axis=1), dtype=np.int64)

    def metrics(self) -> dict[str, float]:
        """``OA``, ``F1`` (macro), ``mIoU``, ``kappa`` of the argmax, as in training (empty without pixels)."""
        if len(self) == 0:
            return {}
        collection = classification_metrics(self.num_classes, self.ignore_index)
        values = collection(torch.from_numpy(self.predicted()), torch.from_numpy(self.label.astype(np.int64)))
        return {str(k): float(v) for k, v in values.items()}

    def write(self, path: str | Path) -> Path:
        """Write the ``.npz`` file (compressed; probabilities as float16).

        Returns:
            ``path``.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(
            path,
            patch_id=self.patch_id.astype(np.int64),
            row=self.row.astype(np.int32),
            col=self.col.astype(np.int32),
            label=self.label.astype(np.int64),
            proba=self.proba.astype(np.float16),
            class_names=np.asarray(self.class_names, dtype=str),
            ignore_index=np.asarray(self.ignore_index, dtype=np.int64),
        )
        return path

    @classmethod
    def read(cls, path: str | Path) -> PixelProbabilities:
        """Read one ``.npz`` file written by :meth:`write`.

        Raises:
            ValueError: If the file lacks one of the arrays or their lengths differ.
        """
        path = Path(path)
        with np.load(path, allow_pickle=False) as f:
            missing = [
                k for k in ("patch_id", "row", "col", "label", "proba", "class_names", "ignore_index") if k not in f
            ]
            if missing:
                raise ValueError(f"{path} is not a test-probabilities file: it has no {missing} array(s).")
            out = cls(
                f["patch_id"], f["row"], f["col"], f["label"], f["proba"],
                [str(n) for n in f["class_names"]], int(f["ignore_index"]), str(path),
            )  # fmt: skip
        lengths = {len(a) for a in (out.patch_id, out.row, out.col, out.label, out.proba)}
        if len(lengths) != 1 or out.proba.ndim != 2 or out.proba.shape[1] != out.num_classes:
            raise ValueError(
                f"{path}: arrays of lengths {sorted(lengths)} and probabilities of shape {out.proba.shape} for "
                f"{out.num_classes} classes; the file is damaged, rerun the test of that run."
            )
        return out


def concatenate(parts: Sequence[PixelProbabilities], source: str = "") -> PixelProbabilities:
    """One record of several (the ranks of one DDP test), sorted, duplicates dropped.

    Raises:
        ValueError: If the parts have different classes.
    """
    first = parts[0]
    for p in parts[1:]:
        if p.class_names != first.class_names or p.ignore_index != first.ignore_index:
            raise ValueError(f"{p.source} and {first.source} have different classes; they are not one test.")

    def joined(key: str) -> np.ndarray:
        return np.concatenate([getattr(p, key) for p in parts])

    merged = PixelProbabilities(
        joined("patch_id"), joined("row"), joined("col"), joined("label"), joined("proba"),
        list(first.class_names), first.ignore_index, source or first.source,
    )  # fmt: skip
    return merged.sorted()


def probability_files(run_dir: str | Path) -> list[Path]:
    """The test-probabilities file(s) of a run directory (``[]`` when the run wrote none)."""
    run_dir = Path(run_dir)
    single = run_dir / PROBABILITIES_FILE
    return [single] if single.is_file() else sorted(run_dir.glob(RANK_PATTERN))


def read_probabilities(run_dir: str | Path) -> PixelProbabilities | None:
    """The test probabilities of a run directory, sorted by pixel; None when it has none.

    Raises:
        ValueError: On a damaged file.
    """
    files = probability_files(run_dir)
    if not files:
        return None
    return concatenate([PixelProbabilities.read(p) for p in files], source=str(run_dir))


def mean_probabilities(members: Sequence[PixelProbabilities]) -> PixelProbabilities:
    """The ensemble of runs: the mean of their probabilities, pixel by pixel.

    Args:
        members: Two or more records of the same test pixels (runs differing by seed).

    Returns:
        The mean probabilities (float32) with the members' pixels and labels.

    Raises:
        ValueError: If members have different classes, pixels or reference labels (the
            message names the member and what differs).
    """
    if not members:
        raise ValueError("An ensemble needs at least one member.")
    ordered = [m.sorted() for m in members]
    first = ordered[0]
    total = first.proba.astype(np.float64)
    for m in ordered[1:]:
        if m.class_names != first.class_names or m.ignore_index != first.ignore_index:
            raise ValueError(
                f"{m.source} has classes {m.class_names} (ignore_index {m.ignore_index}) but {first.source} has "
                f"{first.class_names} (ignore_index {first.ignore_index}); an ensemble's members share their classes."
            )
        same = len(m) == len(first) and all(
            np.array_equal(getattr(m, k), getattr(first, k)) for k in ("patch_id", "row", "col")
        )
        if not same:
            raise ValueError(
                f"{m.source} holds {len(m)} test pixels and {first.source} {len(first)}, not the same ones: an "
                "ensemble's members must be tested on the same split (same data.split.fold and data config)."
            )
        if not np.array_equal(m.label, first.label):
            raise ValueError(f"{m.source} and {first.source} give the same pixels different reference labels.")
        total += m.proba.astype(np.float64)
    mean = (total / len(ordered)).astype(np.float32)
    return PixelProbabilities(
        first.patch_id, first.row, first.col, first.label, mean, list(first.class_names), first.ignore_index,
        f"ensemble of {len(ordered)}",
    )  # fmt: skip


__all__ = [
    "PROBABILITIES_FILE",
    "RANK_PATTERN",
    "PixelProbabilities",
    "concatenate",
    "mean_probabilities",
    "probabilities_from_logits",
    "probability_files",
    "read_probabilities",
]
