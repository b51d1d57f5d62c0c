"""The batch contract shared by every datamodule and the model.

A *sample* (one patch) is a dict::

    {
        "s2":      {"x": (T, 10, H, W) float32, "doy": (T,) float32, "mask": (T, H, W) bool},
        "s1_asc":  {"x": (T, 3, H, W) float32,  "doy": (T,) float32, "mask": (T, H, W) bool},
        "s1_desc": {"x": (T, 3, H, W) float32,  "doy": (T,) float32, "mask": (T, H, W) bool},
        "label":   (H, W) int64,
        "parcel":  (H, W) int64,   # optional: parcel index of each pixel, -1 = none
        "patch_id": int,
    }

Each modality has its own dates and its own ``T``; any modality may be absent.
:func:`collate_sits` pads ``T`` per modality to the longest series of the batch, so a
*batch* holds ``x (B, T, C, H, W)``, ``doy (B, T)``, ``mask (B, T, H, W)``,
``label (B, H, W)`` and ``patch_id (B,)``.

Conventions (``docs/model.md``, "Batch contract"; after PASTIS-R, Garnot et al. 2022):

* ``doy``: days since the season's reference date (default 1 January). Monotonic, never
  wraps at 31 December, may be negative or exceed 365.
* ``mask``: True = valid observation. Padding dates, clouds, shadows and no-data are
  False. Values under a False mask are never trusted (they may be NaN).
* ``label``: class index, ``ignore_index`` (default 0) = unlabelled.
* ``parcel`` (sources with parcel ids, ``data.split.parcels``): the parcel index of each
  pixel, ``-1`` = no parcel; the test averages probabilities per parcel
  (:mod:`mtan_s1s2.parcel_metrics`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

S2_BANDS: tuple[str, ...] = ("B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12")
"""Sentinel-2 surface-reflectance bands, in channel order."""

S1_CHANNELS: tuple[str, ...] = ("VV", "VH", "VH/VV")
"""Sentinel-1 backscatter channels (dB), in channel order."""

MODALITY_CHANNELS: dict[str, tuple[str, ...]] = {
    "s2": S2_BANDS,
    "s1_asc": S1_CHANNELS,
    "s1_desc": S1_CHANNELS,
    "s1": ("VV", "VH"),
    "s2_10m": ("B02", "B03", "B04", "B08"),
}
"""Known modalities and their usual channel names: S2, S1 ascending orbit, S1 descending
orbit, S1 of either orbit (``s1``: composites such as WorldCereal's, which mix orbits), and
the S2 10 m bands read at their own resolution apart from the 20 m ones (``s2_10m``: products
that store them in a file of their own, which some scenes lack). Readers of files take the
channel count from the data."""

ORBIT_MODALITIES: tuple[str, ...] = ("s2", "s1_asc", "s1_desc")
"""Modalities of the synthetic generator and of PASTIS-R (S1 split by orbit)."""

CLASS_NAMES: tuple[str, ...] = (
    "unlabelled",
    "winter_wheat",
    "winter_barley",
    "maize",
    "sunflower",
    "rapeseed",
    "meadow",
    "deciduous_forest",
    "coniferous_forest",
    "urban",
    "water",
)
"""Synthetic classes; index 0 is the default ``ignore_index``."""


Sample = dict[str, Any]
"""One patch: per modality ``{"x", "doy", "mask"}``, plus ``label`` and ``patch_id``."""

Batch = dict[str, Any]
"""Collated samples (:func:`collate_sits`): the same keys with a leading batch axis."""


def modalities_of(batch: Mapping[str, Any]) -> list[str]:
    """Names of the modalities present in a sample or batch, in canonical order."""
    return [m for m in MODALITY_CHANNELS if m in batch]


def pixels_with_data(inputs: Mapping[str, Any], modalities: Sequence[str]) -> torch.Tensor:
    """Where a pixel has a valid observation in some modality of a batch.

    Args:
        inputs: A batch: ``inputs[m]["mask"]`` ``(B, T, H, W)`` bool for each of ``modalities``.
        modalities: The modalities to read.

    Returns:
        ``(B, H, W)`` bool.
    """
    return torch.stack([inputs[m]["mask"].any(dim=1) for m in modalities]).any(dim=0)


def check_modalities(
    modalities: Sequence[str], aliases: Mapping[str, str] | None = None, valid: Sequence[str] | None = None
) -> list[str]:
    """Validate a list of modality names (config key ``data.modalities``).

    Args:
        modalities: Names among :data:`MODALITY_CHANNELS` (or ``aliases`` keys).
        aliases: Other accepted names mapped to canonical ones (e.g. PASTIS ``S1A`` ->
            ``s1_asc``).
        valid: The canonical names this source has (default: all of :data:`MODALITY_CHANNELS`).

    Returns:
        The canonical names, in the given order.

    Raises:
        ValueError: If ``modalities`` is a string, empty, has duplicates or unknown names;
            the message lists the valid names.
    """
    aliases = dict(aliases or {})
    canonical = list(MODALITY_CHANNELS if valid is None else valid)
    names = [*canonical, *aliases]
    if isinstance(modalities, str):
        raise ValueError(f"data.modalities must be a list of names, got the string {modalities!r}; e.g. [s2].")
    mods = [aliases.get(str(m), str(m)) for m in modalities]
    if not mods:
        raise ValueError(f"data.modalities is empty; choose at least one of {names}.")
    unknown = [m for m in mods if m not in canonical]
    if unknown:
        raise ValueError(
            f"Unknown modality {unknown[0]!r} in data.modalities={list(modalities)}; valid modalities are {names}."
        )
    if len(set(mods)) != len(mods):
        raise ValueError(f"data.modalities={list(modalities)} names a modality twice.")
    return mods


def pad_dates(inputs: Mapping[str, Mapping[str, torch.Tensor]], multiple: int) -> dict[str, dict[str, torch.Tensor]]:
    """Pad every modality's date axis up to a multiple of ``multiple`` with invalid dates.

    The added dates have ``x = 0``, ``doy = 0`` and ``mask = False``, so they change no
    output (values under a False mask never matter). Used to give a compiled model a few
    static date counts instead of a dynamic axis.

    Args:
        inputs: ``{modality: {"x": (B, T, C, H, W), "doy": (B, T), "mask": (B, T, H, W)}}``.
        multiple: Target granularity of ``T`` (>= 1; 1 returns the inputs unchanged).

    Returns:
        The same structure with ``T`` rounded up to a multiple of ``multiple``.
    """
    if multiple <= 1:
        return {m: dict(v) for m, v in inputs.items()}
    out: dict[str, dict[str, torch.Tensor]] = {}
    for m, v in inputs.items():
        T = int(v["doy"].shape[1])
        extra = -T % multiple
        if extra == 0:
            out[m] = dict(v)
            continue
        x, doy, mask = v["x"], v["doy"], v["mask"]
        out[m] = {
            **v,
            "x": torch.cat([x, x.new_zeros((x.shape[0], extra, *x.shape[2:]))], dim=1),
            "doy": torch.cat([doy, doy.new_zeros((doy.shape[0], extra))], dim=1),
            "mask": torch.cat([mask, mask.new_zeros((mask.shape[0], extra, *mask.shape[2:]))], dim=1),
        }
    return out


def collate_sits(samples: Sequence[Mapping[str, Any]]) -> Batch:
    """Stack samples into a batch, padding each modality's dates to the longest series.

    Padding dates get ``x = 0``, ``mask = False`` and ``doy`` equal to the sample's last
    date (finite, keeps ``doy`` monotonic).

    Args:
        samples: Samples following the contract in this module's docstring.

    Returns:
        The batch dict: per modality ``x (B, T_max, C, H, W) float32``,
        ``doy (B, T_max) float32``, ``mask (B, T_max, H, W) bool``; ``label (B, H, W)
        int64`` (when every sample has one: prediction samples may have none),
        ``parcel (B, H, W) int64`` (when every sample has one) and ``patch_id (B,) int64``.

    Raises:
        ValueError: If the samples do not all hold the same modalities.
    """
    if len(samples) == 0:
        raise ValueError("collate_sits got an empty list of samples.")
    mods = modalities_of(samples[0])
    for i, s in enumerate(samples):
        if modalities_of(s) != mods:
            raise ValueError(
                f"Sample {i} has modalities {modalities_of(s)} but sample 0 has {mods}; "
                "every sample of a batch must hold the same modalities."
            )
    batch: Batch = {}
    for m in mods:
        t_max = max(int(s[m]["x"].shape[0]) for s in samples)
        xs, doys, masks = [], [], []
        for s in samples:
            x, doy, mask = s[m]["x"], s[m]["doy"], s[m]["mask"]
            pad = t_max - x.shape[0]
            if pad > 0:
                x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
                last = doy[-1:] if doy.numel() > 0 else doy.new_zeros(1)
                doy = torch.cat([doy, last.expand(pad)])
                mask = torch.cat([mask, mask.new_zeros((pad, *mask.shape[1:]))])
            xs.append(x)
            doys.append(doy)
            masks.append(mask)
        batch[m] = {"x": torch.stack(xs), "doy": torch.stack(doys), "mask": torch.stack(masks)}
    if all("label" in s for s in samples):  # unlabelled samples (prediction) have none
        batch["label"] = torch.stack([torch.as_tensor(s["label"]) for s in samples])
    if all("parcel" in s for s in samples):  # sources with parcel ids (data.split.parcels)
        batch["parcel"] = torch.stack([torch.as_tensor(s["parcel"]) for s in samples])
    batch["patch_id"] = torch.as_tensor([int(s.get("patch_id", -1)) for s in samples])
    return batch
