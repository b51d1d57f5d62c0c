"""Derived inputs: spectral indices and the S1 cross-ratio appended as extra channels.

``data.derived`` lists indices by name (e.g. ``[ndvi, ndre1, vh_vv]``); every data source
appends them to the channels of the modality they are computed from: the Sentinel-2
indices to ``s2``, the Sentinel-1 ratio to each of ``s1``, ``s1_asc``, ``s1_desc`` present.

They are computed from the *raw* samples, i.e. in physical units after the radiometry
(S2 surface reflectance ``0..1``, S1 backscatter in dB) and after masking, before the
normalisation statistics (which therefore cover the new channels too):

* a normalised difference ``(a - b) / (a + b)`` of two reflectances is defined where the
  observation is valid (``mask`` True), both values are finite and ``|a + b| >``
  :data:`MIN_DENOMINATOR` (one S2 digital number, 1e-4 reflectance); elsewhere it is 0.
  It is clipped to ``[-1, 1]`` (slightly negative reflectances from the atmospheric
  correction could otherwise give any value);
* the S1 cross-ratio ``VH/VV`` in dB is the difference ``VH_dB - VV_dB`` (a ratio of
  powers is a difference of their logarithms), 0 where the observation is invalid;
* the mask is unchanged: a masked or padded observation stays masked, a valid one stays
  valid (an index that is undefined on a valid observation is 0 there), and the derived
  channels never hold NaN or inf.

Bands are found by name in the data's band list (``B8`` and ``B08`` are the same band;
case is ignored), so a table or a datacube with other bands in another order works; a
missing band stops the datamodule at construction, naming the index, the bands it needs,
the bands present and the fix. The checkpoint's ``data_contract`` records ``data.derived``
so that ``eval.py`` and ``predict.py`` compute the same channels
(:func:`~mtan_s1s2.checkpoints.apply_input_spec`).

Indices (:data:`INDICES`):

========  ===================  ==========================================================
name      bands                what
========  ===================  ==========================================================
ndvi      (B08 - B04) / (+)    vegetation (Rouse et al., 1974)
ndwi      (B03 - B08) / (+)    open water, McFeeters (1996)
ndmi      (B08 - B11) / (+)    leaf water content; Gao's (1996) NDWI
ndre1     (B8A - B05) / (+)    red edge (chlorophyll), Sentinel-2 red-edge band 1
ndre2     (B8A - B06) / (+)    red edge, band 2
ndre3     (B8A - B07) / (+)    red edge, band 3
nbr       (B08 - B12) / (+)    normalised burn ratio (Key & Benson, 2006)
vh_vv     VH_dB - VV_dB        S1 cross-polarisation ratio in dB
========  ===================  ==========================================================
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample

log = logging.getLogger(__name__)

MIN_DENOMINATOR = 1.0e-4
"""``|a + b|`` (reflectance) at or below which a normalised difference is undefined (set to 0)."""

Sensor = Literal["s2", "s1"]

SENSOR_MODALITIES: dict[str, tuple[str, ...]] = {"s2": ("s2", "s2_10m"), "s1": ("s1", "s1_asc", "s1_desc")}
"""The modalities each sensor's indices are appended to: those of them that hold both bands of the
index (e.g. NDVI on ``s2_10m`` where ``s2`` holds the 20 m bands only); a missing band is an error
only when none of them holds both."""


@dataclass(frozen=True)
class Index:
    """One derived channel: ``(a - b) / (a + b)`` (``normalized_difference``) or ``a - b`` (``difference``).

    Attributes:
        name: Its name in ``data.derived`` and in the channel list.
        sensor: ``s2`` (reflectance bands) or ``s1`` (backscatter in dB).
        kind: ``normalized_difference`` or ``difference``.
        a: The first band.
        b: The second band.
        what: What it measures and where it comes from.
    """

    name: str
    sensor: Sensor
    kind: Literal["normalized_difference", "difference"]
    a: str
    b: str
    what: str

    @property
    def bands(self) -> tuple[str, str]:
        """The two bands it needs."""
        return self.a, self.b


INDICES: dict[str, Index] = {
    i.name: i
    for i in (
        Index("ndvi", "s2", "normalized_difference", "B08", "B04", "NDVI, (NIR - red) / (NIR + red)"),
        Index("ndwi", "s2", "normalized_difference", "B03", "B08", "NDWI of McFeeters (1996), open water"),
        Index("ndmi", "s2", "normalized_difference", "B08", "B11", "NDMI, Gao's (1996) NDWI, leaf water"),
        Index("ndre1", "s2", "normalized_difference", "B8A", "B05", "normalised difference red edge (B05)"),
        Index("ndre2", "s2", "normalized_difference", "B8A", "B06", "normalised difference red edge (B06)"),
        Index("ndre3", "s2", "normalized_difference", "B8A", "B07", "normalised difference red edge (B07)"),
        Index("nbr", "s2", "normalized_difference", "B08", "B12", "normalised burn ratio"),
        Index("vh_vv", "s1", "difference", "VH", "VV", "S1 cross-ratio VH/VV in dB, VH_dB - VV_dB"),
    )
}
"""Every index ``data.derived`` may name."""

_S2_BAND = re.compile(r"^B0*(\d+A?)$")


def band_key(name: str) -> str:
    """The name a band is looked up by: upper case, S2 numbers without leading zeros (``b08`` -> ``B8``)."""
    upper = str(name).strip().upper()
    match = _S2_BAND.match(upper)
    return f"B{match.group(1)}" if match else upper


def check_derived_names(names: Sequence[str] | None) -> tuple[str, ...]:
    """Validate ``data.derived`` (names only; the bands are checked by :meth:`DerivedInputs.resolve`).

    Returns:
        The names, lower case, in the given order.

    Raises:
        ValueError: On a string instead of a list, an unknown name (listing the valid ones)
            or a name given twice.
    """
    if names is None:
        return ()
    if isinstance(names, str):
        raise ValueError(f"data.derived must be a list of index names, got the string {names!r}; e.g. [ndvi].")
    out = tuple(str(n).strip().lower() for n in names)
    unknown = [n for n in out if n not in INDICES]
    if unknown:
        raise ValueError(
            f"Unknown derived input {unknown[0]!r} in data.derived={list(names)}; valid names are {list(INDICES)} "
            "(docs/data.md, 'Derived inputs')."
        )
    if len(set(out)) != len(out):
        raise ValueError(f"data.derived={list(names)} names an index twice.")
    return out


@dataclass(frozen=True)
class DerivedChannel:
    """One derived channel of one modality: its index and the positions of its two bands."""

    index: Index
    a: int
    b: int


@dataclass(frozen=True)
class DerivedInputs:
    """The derived channels of each modality, with the band positions they read.

    Build it with :meth:`resolve`; :meth:`apply` appends the channels to a raw sample.

    Attributes:
        names: ``data.derived`` as given (lower case).
        channels: Modality -> its derived channels, in ``names`` order.
    """

    names: tuple[str, ...] = ()
    channels: Mapping[str, tuple[DerivedChannel, ...]] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        names: Sequence[str] | None,
        bands: Mapping[str, Sequence[str] | None],
        bands_key: str = "data.sources.{modality}.bands",
    ) -> DerivedInputs:
        """Find the bands of every index of ``names`` in the data's bands.

        Args:
            names: ``data.derived``.
            bands: Modality -> its band names in channel order (None: not known, e.g.
                PASTIS files with an unusual channel count), for every modality read.
            bands_key: The config key of a modality's bands, named in the fix
                (``{modality}`` is replaced).

        Returns:
            The plan: per modality the derived channels and their band positions.

        Raises:
            ValueError: On an unknown name, an index whose sensor has no modality in the
                data, band names that are not known, or a missing band; the message names
                the index, the bands it needs, the bands present and the fix.
        """
        checked = check_derived_names(names)
        keys = {m: None if b is None else [band_key(n) for n in b] for m, b in bands.items()}
        channels: dict[str, list[DerivedChannel]] = {}
        for name in checked:
            index = INDICES[name]
            targets = [m for m in SENSOR_MODALITIES[index.sensor] if m in bands]
            if not targets:
                raise ValueError(
                    f"data.derived: {name} ({index.what}) is computed from {index.sensor.upper()} bands "
                    f"{list(index.bands)}, but the data have no {index.sensor.upper()} modality "
                    f"(data.modalities={list(bands)}); add one of {list(SENSOR_MODALITIES[index.sensor])} to "
                    f"data.modalities or drop {name} from data.derived."
                )
            holding = [m for m in targets if all(band_key(b) in (keys[m] or ()) for b in index.bands)]
            if holding:  # S2 split over files (s2 + s2_10m): the modalities that hold both bands
                skipped = [m for m in targets if m not in holding]
                if skipped:
                    log.info("data.derived: %s is computed on %s only (%s lack its bands).", name, holding, skipped)
                targets = holding
            for m in targets:
                present = keys[m]
                if present is None:
                    raise ValueError(
                        f"data.derived: {name} needs {m} bands {list(index.bands)}, but the names of the {m} bands "
                        "are not known (a channel count other than the usual one); drop it from data.derived."
                    )
                missing = [b for b in index.bands if band_key(b) not in present]
                if missing:
                    raise ValueError(
                        f"data.derived: {name} ({index.what}) needs {m} band(s) {list(index.bands)}, but "
                        f"{missing} {'is' if len(missing) == 1 else 'are'} not among the {m} bands "
                        f"{list(bands[m] or [])} ({bands_key.format(modality=m)}); add the band(s) to the data or "
                        f"drop {name} from data.derived."
                    )
                a, b = (present.index(band_key(x)) for x in index.bands)
                channels.setdefault(m, []).append(DerivedChannel(index, a, b))
        return cls(checked, {m: tuple(c) for m, c in channels.items()})

    def __bool__(self) -> bool:
        return bool(self.names)

    def names_of(self, modality: str) -> tuple[str, ...]:
        """The derived channel names appended to ``modality`` (in channel order)."""
        return tuple(c.index.name for c in self.channels.get(modality, ()))

    def count(self, modality: str) -> int:
        """How many channels are appended to ``modality``."""
        return len(self.channels.get(modality, ()))

    def compute(self, modality: str, x: Tensor, mask: Tensor) -> Tensor:
        """The derived channels of one modality.

        Args:
            modality: The modality of ``x``.
            x: ``(T, C, H, W)`` (or ``(B, T, C, H, W)``) float physical values: reflectance
                or dB; values under a False mask are not read (they may be NaN).
            mask: ``(T, H, W)`` (or ``(B, T, H, W)``) bool, True = valid observation.

        Returns:
            ``(T, K, H, W)`` (or ``(B, T, K, H, W)``) float32, ``K = count(modality)``;
            finite everywhere, 0 under a False mask.
        """
        c_axis = x.dim() - 3
        valid = mask.unsqueeze(c_axis)
        zero = torch.zeros((), dtype=torch.float32, device=x.device)
        out = []
        for ch in self.channels.get(modality, ()):
            a = x.select(c_axis, ch.a).unsqueeze(c_axis).float()
            b = x.select(c_axis, ch.b).unsqueeze(c_axis).float()
            ok = valid & torch.isfinite(a) & torch.isfinite(b)
            if ch.index.kind == "normalized_difference":
                den = a + b
                ok = ok & (den.abs() > MIN_DENOMINATOR)
                value = ((a - b) / torch.where(ok, den, torch.ones_like(den))).clamp(-1.0, 1.0)
            else:
                value = a - b
            out.append(torch.where(ok, value, zero))
        return torch.cat(out, dim=c_axis)

    def apply(self, sample: Sample) -> Sample:
        """``sample`` with the derived channels appended to the ``x`` of their modalities.

        Args:
            sample: A raw sample (or batch) of :mod:`mtan_s1s2.data.batch` in physical
                units; it is not modified.

        Returns:
            A new sample; ``mask`` and ``doy`` are shared, ``x`` of each modality with
            derived channels is ``(..., C + K, H, W)``.
        """
        if not self.channels:
            return sample
        out = dict(sample)
        for m in self.channels:
            if m not in sample:
                continue
            x, mask = sample[m]["x"], sample[m]["mask"]
            out[m] = {**sample[m], "x": torch.cat([x, self.compute(m, x, mask).to(x.dtype)], dim=x.dim() - 3)}
        return out

    def as_config(self) -> list[str]:
        """``data.derived`` as plain data (the checkpoint's record)."""
        return list(self.names)


class DerivedDataset(Dataset[Sample]):
    """A view of a raw dataset whose samples carry the derived channels (:meth:`DerivedInputs.apply`).

    Args:
        dataset: Raw samples in physical units.
        derived: The derived inputs.
    """

    def __init__(self, dataset: Dataset[Sample], derived: DerivedInputs) -> None:
        self.dataset = dataset
        self.derived = derived

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Sample:
        return self.derived.apply(self.dataset[index])

    def __repr__(self) -> str:
        return f"DerivedDataset({self.dataset!r}, derived={list(self.derived.names)})"


__all__ = [
    "INDICES",
    "MIN_DENOMINATOR",
    "SENSOR_MODALITIES",
    "DerivedChannel",
    "DerivedDataset",
    "DerivedInputs",
    "Index",
    "band_key",
    "check_derived_names",
]
