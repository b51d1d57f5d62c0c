"""Synthetic Sentinel-1/Sentinel-2 satellite image time series (SITS) patches.

Each patch is a small agricultural landscape generated on the fly and deterministically
from ``(seed, split, index)`` (``docs/model.md``, "Synthetic data"):

* **Parcels**: a Voronoi partition of 8-24 random seeds; each parcel draws a class from
  an unbalanced prior over the 10 classes of :data:`~mtan_s1s2.data.batch.CLASS_NAMES`;
  some parcel-boundary pixels (and a few whole parcels) are unlabelled (class 0).
* **Dates**: each modality has its own acquisition dates, as days of year (DOY) since
  1 January, in ``[0, 365)``. S2 every ``s2_revisit_days`` from a random offset, each
  acquisition dropped with probability ``s2_drop_prob``; S1 ascending and descending
  orbits each every 6 or 12 days (one of ``s1_revisit_days``, drawn per patch and orbit)
  from independent offsets.
  Dates carry the overpass time of day, so S1 and S2 never share a date.
* **Phenology**: every class is a double-logistic NDVI curve (start/end of season,
  amplitude, winter and post-harvest baselines) with per-parcel and per-pixel jitter of
  timing and amplitude. Winter barley is winter wheat ~3 weeks earlier (separable only by
  timing); sunflower has exactly the NDVI curve of maize but a different radar signature
  (separable only by S1). Rapeseed flowers yellow in April, meadows are mown 2-3 times.
* **S2**: surface reflectance of 10 bands from the NDVI-implied vegetation cover by
  linear mixing of a vegetation spectrum with a background (soil, urban or water)
  spectrum, with a per-date gain, noise, seasonal clouds, shifted cloud shadows and
  occasional no-data (NaN) stripes.
* **S1**: VV and VH backscatter (dB) from a water-cloud model (canopy + attenuated soil),
  soil-moisture events, an orbit/incidence-angle offset and gamma speckle; the third
  channel is the VH/VV ratio in dB. Occasional no-data (NaN) borders.

``mask`` is False on clouds, shadows, stripes and borders; NaN only ever appears under a
False mask, and values under a True mask are always finite.

Speed: everything is vectorised over pixels and dates. The per-observation reflectance
noise and speckle are windows at random offsets in fixed banks of exact Gaussian / gamma
draws, since drawing them afresh dominated the generation time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from mtan_s1s2.data.batch import CLASS_NAMES, ORBIT_MODALITIES

DAYS_PER_YEAR = 365

# ----------------------------------------------------------------------------------------
# Presets
# ----------------------------------------------------------------------------------------

PRESETS: dict[str, dict[str, Any]] = {
    # Unit tests: tiny patches, few dates.
    "tiny": {
        "patch_size": 16,
        "n_train": 16,
        "n_val": 8,
        "n_test": 8,
        "s2_revisit_days": 20.0,
        "s2_drop_prob": 0.15,
        "s1_revisit_days": (24,),
        "cloud_prob": 0.3,
    },
    # CPU: trains in minutes (~31 S2 dates, ~30 S1 dates per orbit).
    "default": {
        "patch_size": 32,
        "n_train": 256,
        "n_val": 64,
        "n_test": 64,
        "s2_revisit_days": 10.0,
        "s2_drop_prob": 0.15,
        "s1_revisit_days": (12,),
        "cloud_prob": 0.3,
    },
    # GPU: realistic sizes (~62 S2 dates, 30-61 S1 dates per orbit).
    "bench": {
        "patch_size": 64,
        "n_train": 1024,
        "n_val": 128,
        "n_test": 128,
        "s2_revisit_days": 5.0,
        "s2_drop_prob": 0.2,  # ~58 S2 dates
        "s1_revisit_days": (6, 12),
        "cloud_prob": 0.3,
    },
}
"""Named presets: dataset sizes per split plus generator keyword arguments."""

GENERATOR_KEYS: tuple[str, ...] = ("s2_revisit_days", "s2_drop_prob", "s1_revisit_days", "cloud_prob")
"""Generator keyword arguments other than ``patch_size`` (the dates and clouds)."""

# ----------------------------------------------------------------------------------------
# Class signatures
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassSignature:
    """Nominal phenology and radar signature of one class.

    The NDVI curve is a double logistic::

        ndvi(t) = winter + (peak - winter) * s((t - sos) / rise)
                         - (peak - after) * s((t - eos) / fall),   s = logistic

    Attributes:
        prior: Probability that a parcel has this class.
        ndvi_winter: NDVI before the season (1 January).
        ndvi_peak: NDVI at the height of the season.
        ndvi_after: NDVI after the season (stubble, bare soil, dormant canopy).
        sos: Start of season (green-up inflection), DOY.
        rise: Green-up time scale, days.
        eos: End of season (senescence inflection), DOY.
        fall: Senescence time scale, days.
        background: Spectrum under the canopy: ``"soil"``, ``"urban"`` or ``"water"``.
        arable: Ploughed field: may be re-sown in autumn; wet soil darkens in S2.
        canopy_vv_db: Backscatter of the full canopy (or buildings, water surface), VV, dB.
        canopy_vh_db: Same for VH, dB.
        extinction: Water-cloud attenuation of the soil term per unit cover.
        radar_cover_min: Minimum cover seen by the radar (branches, buildings, water).
    """

    prior: float
    ndvi_winter: float
    ndvi_peak: float
    ndvi_after: float
    sos: float
    rise: float
    eos: float
    fall: float
    background: Literal["soil", "urban", "water"]
    arable: bool
    canopy_vv_db: float
    canopy_vh_db: float
    extinction: float
    radar_cover_min: float


# Wheat and barley differ only in timing; maize and sunflower only in their radar terms.
CLASS_SIGNATURES: dict[str, ClassSignature] = {
    "winter_wheat": ClassSignature(0.22, 0.30, 0.82, 0.18, 85, 10, 180, 8, "soil", True, -10.5, -16.5, 1.5, 0.0),
    "winter_barley": ClassSignature(0.10, 0.30, 0.82, 0.18, 64, 10, 159, 8, "soil", True, -10.5, -16.5, 1.5, 0.0),
    "maize": ClassSignature(0.16, 0.15, 0.82, 0.20, 165, 9, 255, 9, "soil", True, -9.0, -14.0, 1.8, 0.0),
    "sunflower": ClassSignature(0.08, 0.15, 0.82, 0.20, 165, 9, 255, 9, "soil", True, -7.0, -17.5, 1.0, 0.0),
    "rapeseed": ClassSignature(0.07, 0.55, 0.82, 0.18, 60, 12, 160, 8, "soil", True, -8.5, -13.5, 1.6, 0.0),
    "meadow": ClassSignature(0.14, 0.45, 0.78, 0.50, 80, 15, 290, 20, "soil", False, -11.0, -18.0, 1.2, 0.0),
    "deciduous_forest": ClassSignature(0.08, 0.40, 0.84, 0.40, 115, 7, 290, 10, "soil", False, -8.0, -13.5, 1.0, 0.7),
    "coniferous_forest": ClassSignature(0.05, 0.68, 0.78, 0.68, 105, 15, 275, 20, "soil", False, -7.5, -12.5, 1.5, 1.0),
    "urban": ClassSignature(0.06, 0.15, 0.22, 0.15, 120, 15, 270, 15, "urban", False, -2.0, -9.5, 5.0, 1.0),
    "water": ClassSignature(0.04, -0.35, -0.30, -0.35, 150, 15, 250, 15, "water", False, -22.0, -28.0, 5.0, 1.0),
}
"""Signature of every labelled class, keyed by its name in ``CLASS_NAMES``."""

assert tuple(CLASS_SIGNATURES) == CLASS_NAMES[1:], "signatures must follow CLASS_NAMES"

# Reflectance spectra over B02, B03, B04, B05, B06, B07, B08, B8A, B11, B12.
VEGETATION_SPECTRUM = np.array([0.030, 0.060, 0.030, 0.100, 0.280, 0.360, 0.420, 0.440, 0.220, 0.110], np.float32)
BACKGROUND_SPECTRA: dict[str, np.ndarray] = {
    "soil": np.array([0.070, 0.100, 0.150, 0.170, 0.190, 0.200, 0.210, 0.220, 0.300, 0.260], np.float32),
    "urban": np.array([0.100, 0.110, 0.120, 0.130, 0.140, 0.150, 0.155, 0.160, 0.190, 0.170], np.float32),
    "water": np.array([0.060, 0.050, 0.030, 0.025, 0.020, 0.015, 0.012, 0.011, 0.005, 0.003], np.float32),
}
FLOWER_SPECTRUM = np.array([0.040, 0.150, 0.150, 0.220, 0.300, 0.340, 0.370, 0.390, 0.240, 0.120], np.float32)
CLOUD_SPECTRUM = np.array([0.450, 0.460, 0.470, 0.480, 0.480, 0.490, 0.500, 0.500, 0.400, 0.300], np.float32)
_RED, _NIR = 2, 6  # B04, B08
_LN10 = math.log(10.0)

# Overpass time of day (fraction of a day, local solar time): S2 ~10:30, S1 descending
# ~06:00, S1 ascending ~18:00. Keeps the modalities' dates distinct.
OVERPASS_FRACTION: dict[str, float] = {"s2": 0.44, "s1_asc": 0.75, "s1_desc": 0.25}

# Noise and artefact levels.
S2_NOISE_STD = 0.006  # additive reflectance noise
S2_GAIN_STD = 0.03  # per-date multiplicative gain (residual atmospheric correction)
S2_NODATA_PROB = 0.03  # per date: a NaN no-data stripe
CLOUD_SEASONALITY = 0.6  # cloud probability = cloud_prob * (1 + 0.6 cos(season))
CLOUD_CELL_PX = 8.0  # spatial scale of the cloud field, pixels
S1_ENL = 4.4  # equivalent number of looks of the gamma speckle (S1 GRD IW)
NOISE_BANK_SIZE = 1 << 20  # draws per noise bank (see _apply_noise)
NOISE_BANK_SEED = 20210101
S1_BORDER_PROB = 0.05  # per date: NaN no-data border
S1_ORBIT_BIAS_DB = {"s1_asc": 0.4, "s1_desc": -0.4}
MOISTURE_GAIN_DB = 3.0  # soil backscatter increase at soil moisture 1

_CLASS_INDEX = {name: i for i, name in enumerate(CLASS_NAMES)}
_MEADOW = _CLASS_INDEX["meadow"]
_RAPESEED = _CLASS_INDEX["rapeseed"]
_WATER = _CLASS_INDEX["water"]


def _class_table() -> dict[str, np.ndarray]:
    """Class signatures as arrays indexed by class (row 0 = unlabelled, a dummy)."""
    fields = [f for f in ClassSignature.__dataclass_fields__ if f != "background"]
    sigs = list(CLASS_SIGNATURES.values())
    table = {f: np.array([0.0] + [float(getattr(s, f)) for s in sigs], np.float32) for f in fields}
    bg = np.stack([BACKGROUND_SPECTRA["soil"]] + [BACKGROUND_SPECTRA[s.background] for s in sigs])
    table["background_spectrum"] = bg  # (K, 10)
    table["prior"] = table["prior"].astype(np.float64) / table["prior"].sum()
    return table


_TABLE = _class_table()

# ----------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticConfig:
    """Generator settings (validated).

    Attributes:
        patch_size: Patch height and width, pixels (10 m).
        s2_revisit_days: S2 revisit interval, days.
        s2_drop_prob: Probability that an S2 acquisition is missing.
        s1_revisit_days: Choices of S1 revisit interval (days), drawn per patch and orbit.
        cloud_prob: Mean probability that an S2 date is (partly) cloudy; higher in winter.
    """

    patch_size: int = 32
    s2_revisit_days: float = 5.0
    s2_drop_prob: float = 0.15
    s1_revisit_days: tuple[int, ...] = (6, 12)
    cloud_prob: float = 0.3

    def __post_init__(self) -> None:
        if isinstance(self.patch_size, bool) or not isinstance(self.patch_size, (int, np.integer)):
            raise ValueError(f"patch_size must be an int, got {self.patch_size!r}.")
        if self.patch_size < 4:
            raise ValueError(f"patch_size={self.patch_size} is too small; use at least 4 pixels.")
        if not 0 < float(self.s2_revisit_days) <= DAYS_PER_YEAR:
            raise ValueError(f"s2_revisit_days={self.s2_revisit_days} must be in (0, {DAYS_PER_YEAR}].")
        if not 0 <= float(self.s2_drop_prob) < 1:
            raise ValueError(f"s2_drop_prob={self.s2_drop_prob} must be in [0, 1).")
        if len(self.s1_revisit_days) == 0 or any(
            int(r) != r or not 1 <= r <= DAYS_PER_YEAR for r in self.s1_revisit_days
        ):
            raise ValueError(
                f"s1_revisit_days={self.s1_revisit_days} must be a non-empty sequence of whole "
                f"days in [1, {DAYS_PER_YEAR}], e.g. (6, 12)."
            )
        if not 0 <= float(self.cloud_prob) <= 1:
            raise ValueError(f"cloud_prob={self.cloud_prob} must be in [0, 1].")


# ----------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------


def acquisition_dates(rng: np.random.Generator, revisit_days: float, drop_prob: float, overpass: float) -> np.ndarray:
    """Regular acquisition dates over one year from a random offset, some dropped.

    Args:
        rng: Random generator.
        revisit_days: Revisit interval, days.
        drop_prob: Probability that an acquisition is missing.
        overpass: Overpass time as a fraction of the day.

    Returns:
        ``(T,) float32`` sorted DOY in ``[0, 365)``.
    """
    offset = rng.integers(0, max(1, math.ceil(revisit_days)))
    n = math.ceil((DAYS_PER_YEAR - offset) / revisit_days)
    days = np.floor(offset + revisit_days * np.arange(n))
    days = days[days < DAYS_PER_YEAR]
    keep = rng.random(days.shape[0]) >= drop_prob
    return cast(np.ndarray, (days[keep] + overpass).astype(np.float32))


@dataclass
class _Scene:
    """Per-pixel state of one patch, flattened over the ``P = H * W`` pixels."""

    label: np.ndarray  # (H, W) int64
    cls: np.ndarray  # (P,) int class driving the signal (also for unlabelled parcels)
    pheno: dict[str, np.ndarray]  # per-pixel phenology parameters, each (P,) float32
    mowing: tuple[np.ndarray, np.ndarray, np.ndarray]  # meadow pixel idx, cut DOY, depth
    flowering: tuple[np.ndarray, np.ndarray, np.ndarray]  # rapeseed idx, peak DOY, strength
    brightness: np.ndarray  # (P,) background brightness factor
    soil_vv: np.ndarray  # (P,) linear soil backscatter, VV
    soil_vh: np.ndarray  # (P,) linear soil backscatter, VH
    canopy_vv: np.ndarray  # (P,) linear canopy backscatter, VV
    canopy_vh: np.ndarray  # (P,) linear canopy backscatter, VH
    moisture_events: np.ndarray  # (E, 3) event DOY, amplitude, decay (days)
    incidence: dict[str, float]  # incidence angle per S1 orbit, degrees


def _make_scene(rng: np.random.Generator, size: int) -> _Scene:
    """Draw parcels, classes and per-pixel signal parameters of a ``size x size`` patch."""
    n_pix = size * size
    f32 = np.float32

    # Parcels: Voronoi partition by nearest seed.
    n_parcels = int(rng.integers(8, 25))
    seeds = rng.random((n_parcels, 2)) * size
    yy, xx = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")
    d2 = (yy.reshape(-1, 1) - seeds[:, 0]) ** 2 + (xx.reshape(-1, 1) - seeds[:, 1]) ** 2
    pid = d2.argmin(axis=1)  # (P,)
    parcel_cls = rng.choice(len(CLASS_NAMES), size=n_parcels, p=_TABLE["prior"])
    parcel_unlabelled = rng.random(n_parcels) < 0.05

    grid = pid.reshape(size, size)
    boundary = np.zeros((size, size), dtype=bool)  # pixels whose lower or right neighbour differs
    boundary[:-1] |= grid[1:] != grid[:-1]
    boundary[:, :-1] |= grid[:, 1:] != grid[:, :-1]
    cls = parcel_cls[pid]
    label = np.where(parcel_unlabelled[pid] | (boundary.reshape(-1) & (rng.random(n_pix) < 0.5)), 0, cls)

    def parcel(values: np.ndarray) -> np.ndarray:  # (n_parcels,) -> (P,) float32
        return cast(np.ndarray, values[pid].astype(f32))

    def pixel(std: float) -> np.ndarray:
        return cast(np.ndarray, rng.standard_normal(n_pix, dtype=f32) * f32(std))

    sig = {k: v[cls] for k, v in _TABLE.items() if v.ndim == 1}  # class signature per pixel
    shift = parcel(rng.normal(0.0, 5.0, n_parcels)) + pixel(2.5)  # timing, days
    amp = parcel(rng.uniform(0.85, 1.05, n_parcels)) * (1 + pixel(0.03))
    winter = sig["ndvi_winter"] + parcel(rng.normal(0, 0.02, n_parcels))
    after = sig["ndvi_after"] + parcel(rng.normal(0, 0.02, n_parcels))
    autumn_on = sig["arable"] * parcel(rng.random(n_parcels) < 0.5)
    pheno = {
        "winter": winter,
        "peak": winter + (sig["ndvi_peak"] - sig["ndvi_winter"]) * amp,
        "after": after,
        "sos": sig["sos"] + shift,
        "rise": sig["rise"] * parcel(rng.uniform(0.8, 1.25, n_parcels)),
        "eos": sig["eos"] + shift + parcel(rng.normal(0, 4.0, n_parcels)),
        "fall": sig["fall"] * parcel(rng.uniform(0.8, 1.25, n_parcels)),
        # Autumn sowing of the next (winter) crop on half of the arable parcels.
        "autumn_amp": autumn_on * parcel(rng.uniform(0.1, 0.35, n_parcels)),
        "autumn_doy": parcel(rng.uniform(275, 315, n_parcels)),
        "offset": pixel(0.01),
    }

    # Meadow mowing: 2-3 cuts, the first in mid-May to early June, then every 40-60 days.
    first = rng.uniform(130, 160, n_parcels)
    cuts = first[:, None] + np.concatenate([np.zeros((n_parcels, 1)), rng.uniform(40, 60, (n_parcels, 2))], 1).cumsum(1)
    depth = rng.uniform(0.4, 0.75, (n_parcels, 3)) * (np.arange(3) < rng.integers(2, 4, n_parcels)[:, None])
    meadow = np.flatnonzero(cls == _MEADOW)
    mowing = (meadow, cuts[pid[meadow]].astype(f32), depth[pid[meadow]].astype(f32))

    # Rapeseed flowering (yellow), around mid-April, follows the parcel's timing.
    rape = np.flatnonzero(cls == _RAPESEED)
    bloom = (108 + shift[rape]).astype(f32)
    flowering = (rape, bloom, parcel(rng.uniform(0.35, 0.6, n_parcels))[rape])

    # Radar: soil roughness (parcel), canopy backscatter (parcel jitter), all linear.
    soil_vv_db = parcel(rng.normal(-13.0, 1.5, n_parcels))
    soil_vh_db = soil_vv_db + parcel(rng.normal(-7.0, 1.0, n_parcels))
    canopy_jitter = parcel(rng.normal(0, 0.7, n_parcels))

    # Soil-moisture (rain) events, shared by the whole patch.
    n_events = int(rng.poisson(10))
    events = np.stack(
        [rng.uniform(-20, DAYS_PER_YEAR, n_events), rng.uniform(0.4, 1.0, n_events), rng.uniform(3, 8, n_events)], 1
    )
    return _Scene(
        label=label.reshape(size, size).astype(np.int64),
        cls=cls,
        pheno=pheno,
        mowing=mowing,
        flowering=flowering,
        brightness=parcel(rng.uniform(0.8, 1.2, n_parcels)) * (1 + pixel(0.02)),
        soil_vv=_db_to_linear(soil_vv_db),
        soil_vh=_db_to_linear(soil_vh_db),
        canopy_vv=_db_to_linear(sig["canopy_vv_db"] + canopy_jitter),
        canopy_vh=_db_to_linear(sig["canopy_vh_db"] + canopy_jitter),
        moisture_events=events.astype(f32),
        incidence={"s1_asc": float(rng.uniform(31, 44)), "s1_desc": float(rng.uniform(31, 44))},
    )


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function, in place on float32 ``z`` (via tanh: no overflow)."""
    z *= np.float32(0.5)
    np.tanh(z, out=z)
    z += np.float32(1)
    z *= np.float32(0.5)
    return z


@functools.cache
def _noise_bank(kind: Literal["s2_noise", "speckle"]) -> np.ndarray:
    """A fixed bank of ``NOISE_BANK_SIZE`` float32 draws, generated once per process.

    ``"s2_noise"``: Gaussian reflectance noise, std ``S2_NOISE_STD``; ``"speckle"``:
    Gamma(``S1_ENL``, 1 / ``S1_ENL``) multiplicative speckle (mean 1, variance 1 / ENL).
    """
    rng = np.random.default_rng(NOISE_BANK_SEED)
    if kind == "s2_noise":
        return cast(np.ndarray, rng.standard_normal(NOISE_BANK_SIZE, dtype=np.float32) * np.float32(S2_NOISE_STD))
    return cast(np.ndarray, rng.standard_gamma(S1_ENL, NOISE_BANK_SIZE, dtype=np.float32) / np.float32(S1_ENL))


def _apply_noise(
    rng: np.random.Generator, x: np.ndarray, kind: Literal["s2_noise", "speckle"], op: Literal["add", "mul"]
) -> None:
    """Add (or multiply by) per-date noise to ``x (T, ...)`` in place.

    Each date takes a window at a random offset in a fixed noise bank: drawing millions of
    Gaussian or gamma variates per patch would dominate the generation time.
    """
    bank = _noise_bank(kind)
    length = math.prod(x.shape[1:])
    if length > NOISE_BANK_SIZE // 4:  # huge patches: gather random bank entries instead
        draws = bank[rng.integers(0, NOISE_BANK_SIZE, x.shape)]
        x[...] = x + draws if op == "add" else x * draws
        return
    ufunc = np.add if op == "add" else np.multiply
    for t, start in enumerate(rng.integers(0, NOISE_BANK_SIZE - length, int(x.shape[0]))):
        ufunc(x[t], bank[start : start + length].reshape(x.shape[1:]), out=x[t])


def _db_to_linear(db: np.ndarray | float) -> np.ndarray:
    """Decibels to linear power ratio, float32."""
    return cast(np.ndarray, np.exp(np.float32(_LN10 / 10) * np.asarray(db, np.float32)))


def _linear_to_db(lin: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Linear power ratio to decibels (floored at -60 dB), float32."""
    out = np.log(np.maximum(lin, np.float32(1e-6)), out=out)
    out *= np.float32(10 / _LN10)
    return out


def _ndvi(scene: _Scene, doy: np.ndarray) -> np.ndarray:
    """Noise-free NDVI of every pixel at the given dates: ``(T,) -> (T, P) float32``."""
    p = scene.pheno
    t = doy[:, None]
    up = _sigmoid((t - p["sos"]) / p["rise"])  # green-up, 0 -> 1
    up *= p["peak"] - p["winter"]
    down = _sigmoid((t - p["eos"]) / p["fall"])  # senescence, 0 -> 1
    down *= p["peak"] - p["after"]
    up -= down
    ndvi = up
    ndvi += p["winter"] + p["offset"]
    autumn = _sigmoid((t - p["autumn_doy"]) / np.float32(8.0))  # next crop emerging
    autumn *= p["autumn_amp"]
    ndvi += autumn
    idx, cut_doy, depth = scene.mowing
    if idx.size:
        since = t[:, :, None] - cut_doy[None]  # (T, Pm, 3)
        drop = np.where(since >= 0, depth * np.exp(-np.maximum(since, 0) / np.float32(15.0)), 0).sum(-1)
        sub = ndvi[:, idx]
        ndvi[:, idx] = sub - np.minimum(drop, 0.9) * np.maximum(sub - 0.3, 0)
    return ndvi.astype(np.float32)


def _cover(scene: _Scene, ndvi: np.ndarray) -> np.ndarray:
    """Vegetation fraction that gives ``ndvi`` when mixed with the class background.

    Inverts ``ndvi = (N0 + f (Nv - N0)) / (D0 + f (Dv - D0))`` with ``N = nir - red`` and
    ``D = nir + red``. ``(T, P) -> (T, P) float32`` in ``[0, 1]``.
    """
    bg = _TABLE["background_spectrum"][scene.cls]  # (P, 10)
    n0, d0 = bg[:, _NIR] - bg[:, _RED], bg[:, _NIR] + bg[:, _RED]
    v = VEGETATION_SPECTRUM
    nv, dv = v[_NIR] - v[_RED], v[_NIR] + v[_RED]
    f = (ndvi * d0 - n0) / ((nv - n0) - ndvi * (dv - d0))
    return cast(np.ndarray, np.clip(f, 0, 1).astype(np.float32))


def _soil_moisture(scene: _Scene, doy: np.ndarray) -> np.ndarray:
    """Relative surface soil moisture in ``[0, 1.5]`` at the given dates, ``(T,) float32``."""
    ev = scene.moisture_events
    since = doy[:, None] - ev[:, 0]
    m = np.where(since >= 0, ev[:, 1] * np.exp(-np.maximum(since, 0) / ev[:, 2]), 0).sum(1)
    return cast(np.ndarray, np.minimum(m, 1.5).astype(np.float32))


def _smooth_fields(rng: np.random.Generator, n: int, size: int, shifts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smooth Gaussian random fields (sum of Gaussian bumps on a coarse grid).

    Args:
        rng: Random generator.
        n: Number of fields.
        size: Field height and width, pixels.
        shifts: ``(n, 2)`` offsets (pixels) at which the second output is sampled.

    Returns:
        ``(field, shifted)``, each ``(n, size, size) float32``; ``shifted[k, y, x] =
        field[k, y + dy_k, x + dx_k]`` evaluated exactly, also beyond the patch.
    """
    cell = CLOUD_CELL_PX
    reach = float(np.abs(shifts).max(initial=0.0))
    centres = np.arange(-2 * cell, size + reach + 2 * cell, cell, dtype=np.float32)
    coarse = rng.standard_normal((n, centres.size, centres.size), dtype=np.float32)
    pos = np.arange(size, dtype=np.float32) + 0.5

    def basis(p: np.ndarray) -> np.ndarray:  # (..., size) -> (..., size, L)
        return cast(np.ndarray, np.exp(-0.5 * ((p[..., None] - centres) / (0.8 * cell)) ** 2).astype(np.float32))

    # Two small contractions each (plain einsum: no BLAS threads inside DataLoader workers).
    b = basis(pos)  # (size, L)
    field = np.einsum("yi,kix->kyx", b, np.einsum("kij,xj->kix", coarse, b))
    by = basis(pos + shifts[:, :1])  # (n, size, L)
    bx = basis(pos + shifts[:, 1:])
    shifted = np.einsum("kyi,kix->kyx", by, np.einsum("kij,kxj->kix", coarse, bx))
    return field, shifted


def _make_s2(
    rng: np.random.Generator, scene: _Scene, doy: np.ndarray, size: int, cloud_prob: float
) -> dict[str, np.ndarray]:
    """Sentinel-2 surface reflectance with clouds, shadows and no-data stripes.

    Returns:
        ``{"x": (T, 10, H, W) float32 reflectance, "doy": (T,) float32,
        "mask": (T, H, W) bool}``.
    """
    n_t, n_pix = int(doy.shape[0]), size * size
    f32 = np.float32
    fc = _cover(scene, _ndvi(scene, doy))  # (T, P)

    # Linear mixing of the vegetation spectrum with the pixel's background spectrum (soil,
    # urban or water, with the parcel's brightness); wet soil is darker.
    wet = 1 - f32(0.25) * _soil_moisture(scene, doy)[:, None] * _TABLE["arable"][scene.cls]
    bg_weight = (1 - fc) * scene.brightness * wet  # (T, P)
    bg = np.ascontiguousarray(_TABLE["background_spectrum"][scene.cls].T)  # (10, P)
    x = np.empty((n_t, len(VEGETATION_SPECTRUM), n_pix), f32)
    for b, veg in enumerate(VEGETATION_SPECTRUM):
        np.multiply(fc, veg, out=x[:, b])
        x[:, b] += bg_weight * bg[b]
    idx, bloom, strength = scene.flowering
    if idx.size:  # rapeseed: yellow flowers replace part of the canopy
        w = strength * fc[:, idx] * np.exp(-0.5 * ((doy[:, None] - bloom) / f32(8.0)) ** 2)  # (T, Pr)
        x[:, :, idx] = (1 - w)[:, None] * x[:, :, idx] + w[:, None] * FLOWER_SPECTRUM[:, None]
    x *= (1 + rng.normal(0, S2_GAIN_STD, n_t).astype(f32))[:, None, None]
    _apply_noise(rng, x, "s2_noise", "add")

    # Clouds (seasonal: most in winter) and their shadows, shifted to the north-west.
    valid = np.ones((n_t, n_pix), dtype=bool)
    season = np.cos(2 * np.pi * (doy - 15) / DAYS_PER_YEAR)
    cloudy = np.flatnonzero(rng.random(n_t) < np.clip(cloud_prob * (1 + CLOUD_SEASONALITY * season), 0, 1))
    k = cloudy.size
    if k:
        cover = np.minimum(rng.uniform(0.05, 1.3, k), 1.0)
        shifts = (rng.uniform(0.15, 0.5, (k, 1)) * size * rng.uniform(0.6, 1.0, (k, 2))).astype(f32)
        field, shifted = _smooth_fields(rng, k, size, shifts)
        field, shifted = field.reshape(k, n_pix), shifted.reshape(k, n_pix)
        n_cloud = np.round(cover * n_pix).astype(int)
        ranked = np.sort(field, axis=1)
        thr = np.where(n_cloud > 0, ranked[np.arange(k), np.clip(n_pix - n_cloud, 0, n_pix - 1)], np.inf)
        cloud = field >= thr[:, None]
        shadow = (shifted >= thr[:, None]) & ~cloud
        spread = field.std(axis=1, keepdims=True) + f32(1e-6)
        alpha = np.clip(0.6 + 0.4 * (field - thr[:, None]) / spread, 0.6, 1.0).astype(f32)  # opacity
        bright = rng.uniform(0.8, 1.2, k).astype(f32)
        dark = rng.uniform(0.3, 0.55, k).astype(f32)
        # x <- x * keep + veil * cloud spectrum.
        veil = np.where(cloud, alpha, f32(0))  # (k, P)
        keep = np.where(cloud, 1 - alpha, np.where(shadow, dark[:, None], f32(1)))
        for j, t in enumerate(cloudy):
            x[t] *= keep[j]
            x[t] += (bright[j] * CLOUD_SPECTRUM)[:, None] * veil[j]
        valid[cloudy] &= ~(cloud | shadow)
    np.clip(x, 0, 1, out=x)

    # No-data stripes (NaN), e.g. tile or swath edges.
    striped = np.flatnonzero(rng.random(n_t) < S2_NODATA_PROB)
    if striped.size:
        yy, xx = np.divmod(np.arange(n_pix, dtype=f32), f32(size))
        for t in striped:
            theta = rng.uniform(0, np.pi)
            y0, x0 = rng.uniform(0, size, 2)
            half = rng.uniform(1.0, 3.0)
            band = np.abs((yy - y0) * np.cos(theta) + (xx - x0) * np.sin(theta)) < half
            x[t, :, band] = np.nan
            valid[t] &= ~band
    return {
        "x": x.reshape(n_t, len(VEGETATION_SPECTRUM), size, size),
        "doy": doy,
        "mask": valid.reshape(n_t, size, size),
    }


def _make_s1(rng: np.random.Generator, scene: _Scene, doy: np.ndarray, size: int, orbit: str) -> dict[str, np.ndarray]:
    """Sentinel-1 backscatter (VV, VH, VH/VV, all dB) of one orbit direction.

    Water-cloud model per polarisation, in linear scale::

        sigma0 = canopy * (1 - A) + soil * moisture_gain * A,   A = exp(-2 b cover)

    then the orbit/incidence-angle offset, a per-date calibration error and speckle, and
    finally the conversion to dB.

    Returns:
        ``{"x": (T, 3, H, W) float32 backscatter dB, "doy": (T,) float32,
        "mask": (T, H, W) bool}``.
    """
    n_t, n_pix = int(doy.shape[0]), size * size
    f32 = np.float32
    fc = _cover(scene, _ndvi(scene, doy))
    cover = np.maximum(fc, _TABLE["radar_cover_min"][scene.cls])
    att = np.exp(-2 * _TABLE["extinction"][scene.cls] * cover)  # (T, P)
    wet = _db_to_linear(MOISTURE_GAIN_DB * _soil_moisture(scene, doy))[:, None]

    # Orbit offset: incidence angle (steeper = brighter) and a fixed asc/desc bias.
    offset_db = S1_ORBIT_BIAS_DB[orbit] - 0.12 * (scene.incidence[orbit] - 37.5)
    gain = _db_to_linear(offset_db + rng.normal(0, 0.2, n_t))[:, None]  # (T, 1)
    water = scene.cls == _WATER
    wind = _db_to_linear(rng.exponential(2.0, n_t))[:, None]  # wind roughens water surfaces

    x: np.ndarray = np.empty((n_t, 3, n_pix), f32)
    for c, (canopy, soil) in enumerate([(scene.canopy_vv, scene.soil_vv), (scene.canopy_vh, scene.soil_vh)]):
        sigma = soil * wet - canopy  # canopy + A (soil - canopy)
        sigma *= att
        sigma += canopy
        if water.any():
            sigma[:, water] *= wind
        sigma *= gain
        _apply_noise(rng, sigma, "speckle", "mul")
        _linear_to_db(sigma, out=x[:, c])
    np.subtract(x[:, 1], x[:, 0], out=x[:, 2])  # VH/VV ratio, dB

    # No-data borders (NaN) on some dates.
    x = x.reshape(n_t, 3, size, size)
    valid = np.ones((n_t, size, size), dtype=bool)
    for t in np.flatnonzero(rng.random(n_t) < S1_BORDER_PROB):
        width = int(rng.integers(1, max(1, size // 8) + 1))
        side = int(rng.integers(4))
        sl = [slice(None, width), slice(size - width, None)][side % 2]
        region = (sl, slice(None)) if side < 2 else (slice(None), sl)
        valid[t][region] = False
        channels_region = (slice(None), *region)
        x[t][channels_region] = np.nan
    return {"x": x, "doy": doy, "mask": valid}


def generate_patch(
    config: SyntheticConfig,
    key: Sequence[int],
    modalities: Sequence[str] = ORBIT_MODALITIES,
) -> dict[str, Any]:
    """Generate one synthetic patch as numpy arrays.

    Every random stream (scene, dates, and one per modality) derives from ``key``, so a
    patch is identical whatever subset of ``modalities`` is requested.

    Args:
        config: Generator settings.
        key: Entropy of the patch, e.g. ``(seed, split_code, index)``.
        modalities: Modalities to generate, among ``"s2"``, ``"s1_asc"``, ``"s1_desc"``.

    Returns:
        ``{"s2": {"x": (T, 10, H, W) float32 reflectance, "doy": (T,) float32 DOY,
        "mask": (T, H, W) bool}, "s1_asc"/"s1_desc": {"x": (T, 3, H, W) float32
        backscatter dB, ...}, "label": (H, W) int64}`` (only the requested modalities).
    """
    streams = np.random.SeedSequence([int(k) for k in key]).spawn(5)
    rng_scene, rng_dates, *rng_mod = (np.random.default_rng(s) for s in streams)
    size = config.patch_size
    scene = _make_scene(rng_scene, size)
    dates = {"s2": acquisition_dates(rng_dates, config.s2_revisit_days, config.s2_drop_prob, OVERPASS_FRACTION["s2"])}
    for orbit in ("s1_asc", "s1_desc"):
        revisit = float(rng_dates.choice(np.asarray(config.s1_revisit_days)))
        dates[orbit] = acquisition_dates(rng_dates, revisit, 0.0, OVERPASS_FRACTION[orbit])

    out: dict[str, Any] = {}
    for m, rng in zip(("s2", "s1_asc", "s1_desc"), rng_mod, strict=True):
        if m not in modalities:
            continue
        if m == "s2":
            out[m] = _make_s2(rng, scene, dates[m], size, config.cloud_prob)
        else:
            out[m] = _make_s1(rng, scene, dates[m], size, m)
    out["label"] = scene.label
    return out
