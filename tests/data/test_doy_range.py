"""Every source gives the date range of the data it read (``SITSDataModule.doy_range``).

The reference times of ``model.net.ref_range=auto`` come from it, and training warns when a
model's reference times do not cover it; the cubes, stacks and tables here span 2.5 years.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
import pytest
from affine import Affine
from omegaconf import open_dict

from conftest import compose_train
from fixtures.scene_files import S2_ALL, times, write_cube, write_tif
from mtan_s1s2.cli.runners import fill_from_data
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule
from mtan_s1s2.models.layers.spatial import NeighbourhoodMean
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.reference_times import (
    DEFAULT_NUM_REF_TIMES,
    MAX_AUTO_REF_TIMES,
    REF_SPACING_DAYS,
    auto_num_ref_times,
    auto_ref_range,
)

T_S2, STEP_S2 = 31, 30  # S2 every 30 days from 2020-03-01T10:30: doy 0.4375 .. 900.4375
T_S1, STEP_S1 = 16, 60  # S1 every 60 days from 2020-03-02T17:40: doy 1.736 .. 901.736
H = W = 8


def _labels(rng: np.random.Generator) -> np.ndarray:
    return rng.choice([0, 1, 2], size=(H, W)).astype(np.uint16)


def write_long_cube(root: Path) -> Path:
    """One datacube scene (``configs/data/datacube.yaml`` layout) with 2.5 years of S2 and S1 dates."""
    folder = root / "scene1"
    rng = np.random.default_rng(0)
    t2, t1 = times(T_S2, step_days=STEP_S2), times(T_S1, "2020-03-02T17:40:00", STEP_S1)
    bands = {b: rng.integers(100, 3000, (T_S2, H, W)).astype(np.uint16) for b in S2_ALL}
    write_cube(folder / "S2.nc", {**bands, "SCL": np.full((T_S2, H, W), 4, np.uint8)}, t2)
    s1 = {b: (rng.normal(-12, 2, (T_S1, H, W)) * 1e4).astype(np.int32) for b in ("VV", "VH")}
    write_cube(folder / "S1.nc", s1, t1)
    write_cube(folder / "label.nc", {"label": _labels(rng)}, None, scale=None)
    return root


def write_long_geotiffs(root: Path) -> Path:
    """One GeoTIFF scene (``configs/data/geotiff.yaml`` layout) with the same 2.5 years of dates."""
    folder = root / "scene1"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    ul = Affine(10, 0, 500000, 0, -10, 5600000)
    write_tif(folder / "S2_stack.tif", rng.integers(100, 3000, (T_S2 * 10, H, W)).astype(np.uint16), ul)
    days = times(T_S2, step_days=STEP_S2)
    (folder / "S2_dates.txt").write_text("".join(f"{str(d)[:10].replace('-', '')}\n" for d in days))
    for t in times(T_S1, "2020-03-02T17:40:00", STEP_S1):
        stamp = str(t).replace("-", "").replace(":", "")
        write_tif(folder / f"S1_{stamp}.tif", rng.normal(-12, 2, (2, H, W)).astype(np.float32), ul)
    write_tif(folder / "label.tif", _labels(rng).astype(np.int32), ul)
    return root


def write_long_table(path: Path) -> Path:
    """A wide CSV of 30 pixels in 10 fields, 10 S2 bands at 31 dates every 30 days (900 days)."""
    rng = np.random.default_rng(0)
    n = 30
    data = {f"{b}-ts{t}": rng.uniform(0.01, 0.4, n).round(4) for b in S2_ALL for t in range(T_S2)}  # reflectance
    frame = pd.DataFrame({**data, "label": ["a", "b", "c"] * (n // 3), "field": np.arange(n) // 3})
    frame.to_csv(path, index=False)
    return path


SCENE_OVERRIDES = ["data.reference_date=2020-03-01", "+data.labels.classes={a: [1], b: [2]}",
                   "data.split.block_size=2", "data.split.n_folds=3"]  # fmt: skip


def source_overrides(source: str, tmp_path: Path) -> list[str]:
    """The command line of ``data=<source>`` on 2.5-year data written into ``tmp_path``."""
    if source == "datacube":
        return ["data=datacube", f"data.root={write_long_cube(tmp_path / 'cube')}", *SCENE_OVERRIDES]
    if source == "geotiff":
        return ["data=geotiff", f"data.root={write_long_geotiffs(tmp_path / 'tif')}", *SCENE_OVERRIDES]
    if source == "table":
        path = write_long_table(tmp_path / "pixels.csv")
        return ["data=table", f"data.path={path}", "data.date_start=2020-03-01", "data.date_step=30D",
                "data.split.group_column=field", "data.split.n_folds=3"]  # fmt: skip
    raise AssertionError(source)


def sample_doy_range(dm: SITSDataModule) -> tuple[float, float]:
    """``(first, last)`` doy over every sample of every split, read one by one."""
    doys = []
    for split in SPLITS:
        dataset = dm.raw_dataset(split)
        for i in range(len(dataset)):  # type: ignore[arg-type]
            sample = dataset[i]
            doys += [np.asarray(sample[m]["doy"], np.float64) for m in dm.modalities]
    values = np.concatenate(doys)
    return float(values.min()), float(values.max())


@pytest.mark.parametrize(
    "source,expected",
    [
        ("datacube", (10.5 / 24, 901 + (17 * 60 + 40) / 1440)),  # S2 at 10:30 on day 0 .. S1 at 17:40 on day 901
        ("geotiff", (0.0, 901 + (17 * 60 + 40) / 1440)),  # S2 dates files hold days: 0 .. S1 on day 901 at 17:40
        ("table", (0.0, 900.0)),  # reference_date: the table's first date
    ],
)
def test_raster_and_table_sources_give_the_span_of_their_dates(source, expected, tmp_path):
    cfg = compose_train(source_overrides(source, tmp_path), output_dir=tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    assert dm.doy_range == pytest.approx(expected, abs=1e-3)
    assert dm.doy_range == pytest.approx(sample_doy_range(dm), abs=1e-3)  # what the samples carry


def test_pastis_and_synthetic_sources_give_their_span(tmp_path):
    from mtan_s1s2.data.pastis.writer import write_pastis_dataset

    root = write_pastis_dataset(tmp_path / "pastis", n_train=3, n_val=1, n_test=1, patch_size=8)
    cfg = compose_train(["data=pastis_synthetic", f"data.root={root}", "data.crop_size=null"], output_dir=tmp_path)
    pastis = hydra.utils.instantiate(cfg.data)
    assert pastis.doy_range == sample_doy_range(pastis)
    assert 0 <= pastis.doy_range[0] < 30 and 330 < pastis.doy_range[1] < 366
    synthetic = hydra.utils.instantiate(compose_train(["data=synthetic_tiny"], output_dir=tmp_path).data)
    lo, hi = sample_doy_range(synthetic)
    assert synthetic.doy_range == (0.0, 365.0) and 0 <= lo and hi < 365  # the generator's year


class _NoRangeGiven(SITSDataModule):
    """A source that says nothing about its dates: the base class reads them from its samples."""

    def __init__(self, inner: SITSDataModule) -> None:
        super().__init__(batch_size=2)
        self.inner = inner
        self.modalities = inner.modalities

    def build_dataset(self, split: str, whole: bool = False):
        return self.inner.raw_dataset(split)


def test_a_source_without_its_own_range_gets_it_from_its_samples(tmp_path):
    cfg = compose_train(source_overrides("table", tmp_path), output_dir=tmp_path)
    table = hydra.utils.instantiate(cfg.data)
    assert _NoRangeGiven(table).doy_range == (0.0, 900.0)


@pytest.mark.parametrize("source", ["datacube", "geotiff", "table"])
def test_small_real_recipe_spreads_reference_times_over_every_source(source, tmp_path, caplog):
    cfg = compose_train(["model=mtan_small_real", *source_overrides(source, tmp_path)], output_dir=tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    with open_dict(cfg), caplog.at_level(logging.WARNING):
        fill_from_data(cfg.model.net, dm)
    lo, hi = dm.doy_range
    assert list(cfg.model.net.ref_range) == pytest.approx([lo / 365.0, hi / 365.0])
    assert hi >= 900
    assert "reference times cover" not in caplog.text  # auto covers the data


@pytest.mark.parametrize("source", ["datacube", "table"])
def test_default_one_year_reference_times_on_2_5_years_warn_once(source, tmp_path, caplog):
    cfg = compose_train(source_overrides(source, tmp_path), output_dir=tmp_path)  # model=mtan: ref_range [0, 1]
    dm = hydra.utils.instantiate(cfg.data)
    with open_dict(cfg), caplog.at_level(logging.WARNING):
        fill_from_data(cfg.model.net, dm)
    warnings = [r.getMessage() for r in caplog.records if "reference times cover" in r.getMessage()]
    assert len(warnings) == 1
    message = warnings[0]
    span = dm.doy_range[1] - dm.doy_range[0]
    assert f"({span:.0f} days)" in message and "doy 0..365 (365 days" in message
    assert "model.net.ref_range=[0, 1]" in message and "after doy 365" in message
    assert "model.net.ref_range=auto" in message
    assert list(cfg.model.net.ref_range) == [0.0, 1.0]  # a warning, not a change


def filled_recipe(override, source, tmp_path, caplog):
    """``model=mtan_real`` with ``override`` on ``source``, its data-dependent keys filled as train.py fills them.

    Returns:
        ``(cfg, datamodule)``; ``caplog`` holds the INFO lines of the filling.
    """
    cfg = compose_train(["model=mtan_real", override, *source_overrides(source, tmp_path)], output_dir=tmp_path)
    dm = hydra.utils.instantiate(cfg.data)
    with open_dict(cfg), caplog.at_level(logging.INFO):
        fill_from_data(cfg.model.net, dm)
        cfg.model.net.in_channels = dict(dm.in_channels)
        cfg.model.num_classes = dm.num_classes
    return cfg, dm


@pytest.mark.parametrize("source", ["datacube", "geotiff", "table"])
def test_auto_reference_times_follow_the_dates_of_every_source(source, tmp_path, caplog):
    cfg, dm = filled_recipe("model.net.num_ref_times=auto", source, tmp_path, caplog)
    # the table's pixels share one grid of T_S2 = 31 dates; the scenes' dates differ per pixel and
    # modality, so their 2.5 years (~901 days) get one reference time per 30 days: 30
    lo, hi = dm.doy_range
    expected = T_S2 if source == "table" else round((hi - lo) / REF_SPACING_DAYS)
    assert getattr(dm, "seq_len", None) == ({"s2": T_S2} if source == "table" else None)
    assert expected == (31 if source == "table" else 30) and cfg.model.net.num_ref_times == expected
    assert f"model.net.num_ref_times=auto: {expected} reference times" in caplog.text
    net = hydra.utils.instantiate(cfg.model).net
    assert net.get_buffer("ref_times").shape == (expected,)
    assert "reference times cover" not in caplog.text


def test_auto_reference_times_are_at_least_16_one_per_date_and_one_per_30_days() -> None:
    assert auto_num_ref_times({"s2": 12}, (0.0, 335.0)) == DEFAULT_NUM_REF_TIMES == 16  # 12 monthly dates
    assert auto_num_ref_times({"s2": 23}, (1.0, 353.0)) == 23  # 16-day composites of one year
    assert auto_num_ref_times({"s2": 12, "s1": 23}) == 23  # the longest series
    assert auto_num_ref_times(None, (0.0, 485.0)) == 16  # irregular dates over 16 months (the datacube)
    assert auto_num_ref_times(None, (20.0, 728.0)) == 24  # two years (data=worldcereal_tza)
    assert auto_num_ref_times(None, (0.0, 912.0)) == 30  # 2.5 years: about one per 30 days
    assert auto_num_ref_times({"s2": 365}, (0.0, 364.0)) == MAX_AUTO_REF_TIMES == 64
    assert auto_num_ref_times(None, (0.0, 3650.0)) == 64
    assert auto_num_ref_times(None) == auto_num_ref_times({}) == 16


def test_auto_ref_range_with_num_ref_times_puts_the_reference_times_on_a_regular_series_dates() -> None:
    # ref_range=auto: the dates' span, the 12 reference times at the centres of 12 steps of it
    centred = MTANClassifier({"s2": 4}, 3, ref_range=auto_ref_range((0.0, 335.0), 365.0), num_ref_times=12)
    assert centred.get_buffer("ref_times").numpy() * 365.0 == pytest.approx(13.958 + 27.917 * np.arange(12), abs=1e-2)
    # widened by half a step each side: the first and last reference times on the first and last dates
    aligned = MTANClassifier({"s2": 4}, 3, ref_range=auto_ref_range((0.0, 335.0), 365.0, 12), num_ref_times=12)
    assert aligned.get_buffer("ref_times").numpy() * 365.0 == pytest.approx(np.linspace(0.0, 335.0, 12), abs=1e-3)
    assert auto_ref_range((0.0, 335.0), 365.0, 12) == pytest.approx([-15.227 / 365.0, 350.227 / 365.0], abs=1e-5)
    assert auto_ref_range((10.0, 10.0), 365.0, 1) == pytest.approx([10.0 / 365.0, 11.0 / 365.0])  # one day at least


@pytest.mark.parametrize("source", ["datacube", "geotiff", "table"])
def test_auto_spatial_context_reads_neighbours_on_rasters_only(source, tmp_path, caplog):
    cfg, dm = filled_recipe("model.net.spatial_context=auto", source, tmp_path, caplog)
    expected = 1 if source == "table" else 3
    assert dm.rasters is (source != "table") and cfg.model.net.spatial_context == expected
    told = "per pixel" if source == "table" else "the 3 x 3 px around each pixel, pooled (mean)"
    assert f"model.net.spatial_context=auto: {told}" in caplog.text
    net = hydra.utils.instantiate(cfg.model).net
    assert (net.spatial is None) is (source == "table")
    if source != "table":  # the recipe's pool on rasters
        assert type(net.spatial) is NeighbourhoodMean and net.spatial.kernel_size == 3


def test_unresolved_auto_spatial_context_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"model.net.spatial_context must be a neighbourhood side .* got 'auto'"):
        MTANClassifier({"s2": 3}, 4, spatial_context="auto")
