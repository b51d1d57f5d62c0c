"""Per-channel normalisation statistics: check, compute, apply and cache.

Every datamodule normalises its samples with :class:`NormStats`: per modality and channel,
the mean and (population) standard deviation over the *valid* observations only (``mask``
True), so clouds, shadows, no-data and padding never bias them. ``x`` becomes
``(x - mean) / std``; values under a False mask may become anything (the model never reads
them).

The statistics come from the data config (``data.norm_stats``: ``null``, ``auto`` or
``{modality: {mean: [C], std: [C]}}``). ``auto`` computes them over the training split with
:func:`compute_norm_stats` (float64 per sample, merged with Chan et al.'s parallel update,
so reflectance stored as large digital numbers loses no precision) and, where the reader
gives a cache path, keeps them in a JSON file (:func:`load_or_compute_norm_stats`) that is
recomputed whenever its key (training samples, no-data settings, ...) changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample, modalities_of
from mtan_s1s2.utils.io import write_json_atomic

log = logging.getLogger(__name__)

STATS_FORMAT = 1
"""Version of the cache file layout (part of its key)."""


@dataclass(frozen=True)
class ChannelStats:
    """Statistics of one modality.

    Attributes:
        mean: ``(C,) float32`` per-channel mean, in the units of the data.
        std: ``(C,) float32`` per-channel population standard deviation (> 0).
        n_valid: Valid observations (pixel-dates) they were computed from, if known.
    """

    mean: np.ndarray
    std: np.ndarray
    n_valid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain-float form, as in the data configs and the cache files."""
        out: dict[str, Any] = {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]}
        if self.n_valid is not None:
            out["n_valid"] = int(self.n_valid)
        return out


NormStats = dict[str, ChannelStats]
"""Modality name -> :class:`ChannelStats`."""


def check_norm_stats(
    norm_stats: Mapping[str, Mapping[str, Any]], in_channels: Mapping[str, int], key: str = "data.norm_stats"
) -> NormStats:
    """Validate ``{modality: {"mean": [C], "std": [C]}}`` against the data's channels.

    Args:
        norm_stats: Statistics from a config or a cache file (extra modalities are ignored).
        in_channels: Channels per modality of the data, e.g. ``{"s2": 10, "s1_asc": 3}``.
        key: Config key named in error messages.

    Returns:
        The statistics of the modalities of ``in_channels``.

    Raises:
        ValueError: If a modality is missing, lacks ``mean``/``std``, has the wrong number
            of values, a non-finite mean or a non-positive std; the message names the
            modality, the values and the fix.
    """
    out: NormStats = {}
    for m, c in in_channels.items():
        if m not in norm_stats:
            raise ValueError(
                f"{key} has no entry for modality {m!r} (it has {list(norm_stats)}); give mean and std for "
                f"every modality of data.modalities, or set {key}=auto to compute them from the training split."
            )
        stats = norm_stats[m]
        if "mean" not in stats or "std" not in stats:
            raise ValueError(f"{key}.{m} must have keys 'mean' and 'std', got {list(stats)}.")
        mean = np.asarray([float(v) for v in stats["mean"]], np.float32)
        std = np.asarray([float(v) for v in stats["std"]], np.float32)
        if mean.shape != (c,) or std.shape != (c,):
            raise ValueError(
                f"{key}.{m} needs {c} means and stds (the data have C={c} channels); got {mean.size} and {std.size}."
            )
        if not (np.isfinite(mean).all() and (std > 0).all()):
            raise ValueError(f"{key}.{m} must have finite means and positive stds, got {dict(stats)}.")
        n_valid = stats.get("n_valid")
        out[m] = ChannelStats(mean, std, None if n_valid is None else int(n_valid))
    return out


class _Accumulator:
    """Mean and sum of squared deviations of ``(C, N)`` chunks, merged with Chan et al.'s update."""

    def __init__(self) -> None:
        self.n = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None

    def add(self, valid: np.ndarray) -> None:
        n = valid.shape[1]
        if n == 0:
            return
        mean = valid.mean(axis=1)
        m2 = ((valid - mean[:, None]) ** 2).sum(axis=1)
        if self.mean is None or self.m2 is None:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        delta = mean - self.mean
        total = self.n + n
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * n / total)
        self.n = total


def _each_sample(samples: Iterable[Sample] | Dataset[Sample]) -> Iterator[Sample]:
    """Map-style datasets by index (their ``__getitem__`` need not raise ``IndexError`` at the end)."""
    if isinstance(samples, Dataset):
        dataset = samples
        return (dataset[i] for i in range(len(dataset)))  # type: ignore[arg-type]
    return iter(samples)


def compute_norm_stats(
    samples: Iterable[Sample] | Dataset[Sample],
    modalities: Sequence[str] | None = None,
    what: str = "the training samples",
) -> NormStats:
    """Per-channel mean and std over the valid observations of un-normalised samples.

    Args:
        samples: Samples of :mod:`mtan_s1s2.data.batch` (per modality ``x (T, C, H, W)``
            and ``mask (T, H, W)``, True = valid): a map-style dataset (read by index, e.g.
            a raw dataset or a ``Subset`` of it) or any iterable.
        modalities: Modalities to compute (default: those of the first sample).
        what: How the samples are named in error messages.

    Returns:
        :class:`ChannelStats` per modality, in the units of the data. A channel that is
        constant over the valid observations gets std 1 (with a warning).

    Raises:
        ValueError: If there is no sample, or a modality has no valid observation.
    """
    acc: dict[str, _Accumulator] = {}
    n_samples = 0
    for sample in _each_sample(samples):
        if not acc:
            for m in modalities or modalities_of(sample):
                acc[m] = _Accumulator()
        n_samples += 1
        for m, a in acc.items():
            x = np.asarray(sample[m]["x"], dtype=np.float64)  # (T, C, H, W)
            mask = np.asarray(sample[m]["mask"], dtype=bool)  # (T, H, W)
            a.add(x.transpose(1, 0, 2, 3)[:, mask])  # (C, N_valid)
    if n_samples == 0:
        raise ValueError(f"Cannot compute normalisation statistics: {what} are empty.")
    out: NormStats = {}
    for m, a in acc.items():
        if a.mean is None or a.m2 is None:
            raise ValueError(
                f"Modality {m!r} has no valid observation in {what} ({n_samples} samples); check its "
                "no-data and mask settings, or give data.norm_stats explicitly."
            )
        std = np.sqrt(a.m2 / a.n)
        if (std <= 0).any():
            constant = np.flatnonzero(std <= 0).tolist()
            log.warning("%s: channel(s) %s are constant in %s; their std is set to 1.", m, constant, what)
            std = np.where(std > 0, std, 1.0)
        out[m] = ChannelStats(a.mean.astype(np.float32), std.astype(np.float32), a.n)
    return out


def normalize_sample(sample: Sample, stats: NormStats) -> Sample:
    """``x = (x - mean) / std`` per channel, for every modality of ``stats``.

    Args:
        sample: A sample of :mod:`mtan_s1s2.data.batch` (``x (T, C, H, W)`` float32
            tensors); it is not modified.
        stats: Statistics per modality.

    Returns:
        A new sample whose ``x`` are normalised float32 tensors (other entries shared).
    """
    out = dict(sample)
    for m, s in stats.items():
        if m in sample:
            x: Tensor = sample[m]["x"]
            mean = torch.from_numpy(s.mean).to(x.device)[:, None, None]
            std = torch.from_numpy(s.std).to(x.device)[:, None, None]
            out[m] = {**sample[m], "x": (x - mean) / std}
    return out


class NormalizedDataset(Dataset[Sample]):
    """A view of a raw dataset whose samples are normalised with :func:`normalize_sample`.

    Args:
        dataset: Raw (un-normalised) samples.
        stats: Statistics per modality; ``None`` returns the samples unchanged.
    """

    def __init__(self, dataset: Dataset[Sample], stats: NormStats | None) -> None:
        self.dataset = dataset
        self.stats = stats

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Sample:
        sample = self.dataset[index]
        return sample if self.stats is None else normalize_sample(sample, self.stats)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, normalised={self.stats is not None})"


def load_or_compute_norm_stats(
    path: str | Path,
    key: Mapping[str, Any],
    modalities: Sequence[str],
    compute: Callable[[Sequence[str]], NormStats],
    recompute: bool = False,
    description: str = "",
) -> NormStats:
    """Statistics from a JSON cache, computing (and caching) the modalities it lacks.

    The file holds ``key`` and ``{"stats": {modality: {mean, std, n_valid}}}``. When its
    key differs from ``key`` (other training samples or settings) every modality is
    recomputed; an unreadable file is ignored with a warning. Writes are atomic, so
    concurrent runs never read half a file; an unwritable path only logs a warning.

    Args:
        path: The cache file.
        key: What the statistics depend on (training sample ids, no-data settings, ...);
            JSON-serialisable.
        modalities: Modalities needed.
        compute: ``modalities -> NormStats`` for the modalities missing from the cache.
        recompute: Ignore the cache and overwrite it.
        description: Written into the file for humans (how to recompute).

    Returns:
        The statistics of ``modalities``.
    """
    path = Path(path)
    full_key = json.loads(json.dumps({"format": STATS_FORMAT, **key}, default=str))  # as it reads back
    cached: dict[str, Any] = {}
    if path.is_file() and not recompute:
        try:
            content = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("Ignoring unreadable normalisation statistics %s (%s); recomputing.", path, err)
            content = {}
        if all(content.get(k) == v for k, v in full_key.items()):
            cached = dict(content.get("stats", {}))
        elif content:
            log.warning("%s was computed for other training samples or settings; recomputing.", path)
    stale = [m for m in modalities if m not in cached]
    if not stale:
        log.info("Normalisation statistics from %s", path)
        return {m: _from_cached(cached[m], m, path) for m in modalities}
    log.info("Computing normalisation statistics of %s; cached in %s", stale, path)
    for m, s in compute(stale).items():
        cached[m] = s.as_dict()
    payload = {**full_key, "description": description, "stats": cached}
    try:
        write_json_atomic(path, payload)
    except OSError as err:
        log.warning(
            "Could not cache the normalisation statistics in %s (%s); they will be recomputed next time. "
            "Set data.stats_file to a writable path.", path, err,
        )  # fmt: skip
    return {m: _from_cached(cached[m], m, path) for m in modalities}


def _from_cached(entry: Mapping[str, Any], modality: str, path: Path) -> ChannelStats:
    mean = np.asarray(entry["mean"], np.float32)
    return check_norm_stats({modality: entry}, {modality: mean.size}, key=str(path))[modality]


def norm_stats_to_yaml(stats: Mapping[str, ChannelStats], key: str = "norm_stats", decimals: int = 4) -> str:
    r"""Format statistics as a YAML block (flow-style lists) to paste in a data config.

    Args:
        stats: Output of :func:`compute_norm_stats`.
        key: Top-level key of the block.
        decimals: Rounding of the printed values.

    Returns:
        The YAML text, e.g. ``norm_stats:\n  s2:\n    mean: [0.1, ...]\n    std: [...]``.
    """
    lines = [f"{key}:"]
    for m, s in stats.items():
        lines.append(f"  {m}:")
        for name, values in (("mean", s.mean), ("std", s.std)):
            lines.append(f"    {name}: [{', '.join(repr(round(float(v), decimals)) for v in values)}]")
    return "\n".join(lines) + "\n"


__all__ = [
    "ChannelStats",
    "NormStats",
    "NormalizedDataset",
    "check_norm_stats",
    "compute_norm_stats",
    "load_or_compute_norm_stats",
    "norm_stats_to_yaml",
    "normalize_sample",
]
