"""Normalisation statistics of a PASTIS-R-format dataset, cached beside the data.

Per modality and channel: mean and (population) standard deviation over the *valid*
observations (``mask`` True: no NaN, no no-data fill) of the whole patches of the training
folds. They are computed once and written to ``<root>/NORM_S1S2_folds_<folds>.json`` (e.g.
``NORM_S1S2_folds_1-2-3.json``); later runs read that file. The file records the training
patch ids, the no-data settings and ``max_patches``: when any of them changes, or a
modality is missing, the statistics are recomputed. To recompute by hand::

    python -m mtan_s1s2.data.pastis --root /data/PASTIS-R --recompute-stats

Means and variances are accumulated per patch in float64 and merged with Chan et al.'s
parallel update, so large reflectance values (PASTIS S2 is stored as int16 digital numbers)
lose no precision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.pastis import PASTISDataset

log = logging.getLogger(__name__)

STATS_FORMAT = 1


def stats_filename(train_folds: Sequence[int]) -> str:
    """``NORM_S1S2_folds_1-2-3.json`` for training folds 1, 2, 3."""
    return f"NORM_S1S2_folds_{'-'.join(str(int(f)) for f in sorted(train_folds))}.json"


def _patch_ids_digest(dataset: PASTISDataset) -> str:
    ids = ",".join(str(r.patch_id) for r in dataset.records)
    return hashlib.sha1(ids.encode()).hexdigest()


def _subset(n: int, max_patches: int | None) -> list[int]:
    """Evenly spaced indices of at most ``max_patches`` of ``n`` patches."""
    if max_patches is None or max_patches >= n:
        return list(range(n))
    if max_patches < 1:
        raise ValueError(f"data.stats_max_patches must be >= 1 or null, got {max_patches}.")
    return sorted({int(i) for i in np.linspace(0, n - 1, max_patches)})


def compute_pastis_norm_stats(
    dataset: PASTISDataset, modalities: Sequence[str], max_patches: int | None = None
) -> dict[str, dict[str, Any]]:
    """Per-channel mean and std over the valid observations of un-normalised patches.

    Args:
        dataset: Whole, un-normalised patches (``PASTISDataModule.raw_dataset("train")``).
        modalities: Modalities to compute.
        max_patches: Use at most this many evenly spaced patches; ``None`` = all.

    Returns:
        ``{modality: {"mean": [C], "std": [C], "n_valid": int}}`` (plain floats, in the
        units of the files: reflectance or digital numbers, backscatter dB).

    Raises:
        ValueError: If a modality has no valid observation.
    """
    out: dict[str, dict[str, Any]] = {}
    indices = _subset(len(dataset), max_patches)
    for m in modalities:
        n_tot, mean_tot, m2_tot = 0, None, None
        for i in indices:
            d = dataset.read_modality(i, m)
            valid = d["x"].transpose(1, 0, 2, 3)[:, d["mask"]].astype(np.float64)  # (C, N)
            n = valid.shape[1]
            if n == 0:
                continue
            mean = valid.mean(axis=1)
            m2 = ((valid - mean[:, None]) ** 2).sum(axis=1)
            if mean_tot is None:
                n_tot, mean_tot, m2_tot = n, mean, m2
                continue
            delta = mean - mean_tot  # Chan et al. parallel update
            total = n_tot + n
            mean_tot = mean_tot + delta * (n / total)
            m2_tot = m2_tot + m2 + delta**2 * (n_tot * n / total)
            n_tot = total
        if mean_tot is None:
            raise ValueError(
                f"Modality {m!r} has no valid observation in the {len(indices)} training patches used for "
                "its normalisation statistics; check data.nodata, or give data.norm_stats explicitly."
            )
        std = np.sqrt(m2_tot / n_tot)
        if (std <= 0).any():
            constant = np.flatnonzero(std <= 0).tolist()
            log.warning("%s: channel(s) %s are constant in the training folds; their std is set to 1.", m, constant)
            std = np.where(std > 0, std, 1.0)
        out[m] = {"mean": [float(v) for v in mean_tot], "std": [float(v) for v in std], "n_valid": int(n_tot)}
    return out


def _write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write through a temporary file and rename, so concurrent readers never see half a file."""
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_compute_norm_stats(
    root: Path,
    dataset: PASTISDataset,
    train_folds: Sequence[int],
    nodata: Mapping[str, float | None],
    max_patches: int | None = None,
    stats_file: str | Path | None = None,
    recompute: bool = False,
) -> dict[str, dict[str, Any]]:
    """Statistics of ``dataset``'s modalities from the cache, computing what is missing.

    Args:
        root: Dataset folder (default location of the cache).
        dataset: Whole, un-normalised training patches.
        train_folds: The training folds (name and key of the cache).
        nodata: Per modality no-data fill value (part of the cache key).
        max_patches: Patch limit (part of the cache key).
        stats_file: Cache path; ``None`` = ``root / stats_filename(train_folds)``.
        recompute: Ignore the cache and overwrite it.

    Returns:
        ``{modality: {"mean": [C], "std": [C], "n_valid": int, "nodata": float | None}}``
        for the modalities of ``dataset``.
    """
    path = Path(stats_file) if stats_file else Path(root) / stats_filename(train_folds)
    key = {
        "format": STATS_FORMAT,
        "train_folds": sorted(int(f) for f in train_folds),
        "n_patches": len(dataset),
        "patch_ids_sha1": _patch_ids_digest(dataset),
        "max_patches": max_patches,
    }
    cached: dict[str, Any] = {}
    if path.is_file() and not recompute:
        try:
            content = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("Ignoring unreadable normalisation statistics %s (%s); recomputing.", path, err)
            content = {}
        if all(content.get(k) == v for k, v in key.items()):
            cached = dict(content.get("stats", {}))
        elif content:
            log.warning("%s was computed for other training patches or settings; recomputing.", path)
    wanted = list(dataset.modalities)
    stale = [m for m in wanted if m not in cached or cached[m].get("nodata") != nodata.get(m)]
    if not stale:
        log.info("Normalisation statistics from %s", path)
        return {m: cached[m] for m in wanted}
    log.info(
        "Computing normalisation statistics of %s over %d training patches (folds %s); cached in %s",
        stale, len(dataset), key["train_folds"], path,
    )  # fmt: skip
    fresh = compute_pastis_norm_stats(dataset, stale, max_patches)
    for m in stale:
        cached[m] = {**fresh[m], "nodata": nodata.get(m)}
    payload = {
        **key,
        "description": "Per-channel mean and population std over valid observations of the training "
        "folds (mtan_s1s2.data.pastis_stats); recompute with "
        "`python -m mtan_s1s2.data.pastis --root ROOT --recompute-stats`.",
        "stats": cached,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(path, payload)
    except OSError as err:
        log.warning(
            "Could not cache the normalisation statistics in %s (%s); they will be recomputed next time. "
            "Set data.stats_file to a writable path.", path, err,
        )  # fmt: skip
    return {m: cached[m] for m in wanted}


__all__ = ["compute_pastis_norm_stats", "load_or_compute_norm_stats", "stats_filename"]
