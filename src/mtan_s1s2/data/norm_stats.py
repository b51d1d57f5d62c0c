"""Per-channel normalisation statistics over valid observations.

The statistics feed ``norm_stats`` of :class:`~mtan_s1s2.data.synthetic.SyntheticSITSDataset`
(and the data config): ``{modality: {"mean": [C], "std": [C]}}``, computed only where
``mask`` is True, so clouds, shadows, no-data (NaN) and padding never bias them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from mtan_s1s2.data.batch import MODALITY_CHANNELS, modalities_of


def compute_norm_stats(
    dataset: Sequence[Mapping[str, Any]], n_samples: int | None = 64, decimals: int = 4
) -> dict[str, dict[str, list[float]]]:
    """Mean and standard deviation per channel over the valid observations of a dataset.

    Args:
        dataset: Un-normalised samples following :mod:`mtan_s1s2.data.batch` (each
            modality ``x (T, C, H, W)`` and ``mask (T, H, W)``, True = valid).
        n_samples: Number of samples to use, from the start; ``None`` = all.
        decimals: Rounding of the returned values.

    Returns:
        ``{modality: {"mean": [C floats], "std": [C floats]}}`` (population std), plain
        Python floats, for the modalities of the first sample.

    Raises:
        ValueError: If ``n_samples`` is not positive, or a modality has no valid
            observation in the samples used.
    """
    n = len(dataset) if n_samples is None else min(int(n_samples), len(dataset))
    if n <= 0:
        raise ValueError(f"compute_norm_stats needs at least one sample, got n_samples={n_samples} "
                         f"for a dataset of {len(dataset)}.")
    first = dataset[0]
    mods = modalities_of(first)
    count = {m: 0 for m in mods}
    total = {m: np.zeros(len(MODALITY_CHANNELS[m])) for m in mods}
    total_sq = {m: np.zeros(len(MODALITY_CHANNELS[m])) for m in mods}
    for i in range(n):
        sample = first if i == 0 else dataset[i]
        for m in mods:
            x = torch.as_tensor(sample[m]["x"]).double()  # (T, C, H, W)
            mask = torch.as_tensor(sample[m]["mask"]).bool()  # (T, H, W)
            valid = x.permute(1, 0, 2, 3)[:, mask]  # (C, N_valid)
            count[m] += valid.shape[1]
            total[m] += valid.sum(1).numpy()
            total_sq[m] += (valid * valid).sum(1).numpy()
    stats = {}
    for m in mods:
        if count[m] == 0:
            raise ValueError(f"Modality {m!r} has no valid observation in the first {n} samples; "
                             "use more samples.")
        mean = total[m] / count[m]
        std = np.sqrt(np.maximum(total_sq[m] / count[m] - mean**2, 0.0))
        stats[m] = {
            "mean": [round(float(v), decimals) for v in mean],
            "std": [round(float(v), decimals) for v in std],
        }
    return stats


def norm_stats_to_yaml(stats: Mapping[str, Mapping[str, Sequence[float]]], key: str = "norm_stats") -> str:
    """Format statistics as a YAML block (flow-style lists) to paste in a data config.

    Args:
        stats: Output of :func:`compute_norm_stats`.
        key: Top-level key of the block.

    Returns:
        The YAML text, e.g. ``norm_stats:\\n  s2:\\n    mean: [0.1, ...]\\n    std: [...]``.
    """
    lines = [f"{key}:"]
    for m, s in stats.items():
        lines.append(f"  {m}:")
        for k in ("mean", "std"):
            lines.append(f"    {k}: [{', '.join(repr(float(v)) for v in s[k])}]")
    return "\n".join(lines) + "\n"
