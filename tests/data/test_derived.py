"""data.derived: spectral indices and the S1 cross-ratio as extra channels, for every source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fixtures.scene_files import LABELS, SOURCES, make_scene
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.derived import INDICES, MIN_DENOMINATOR, DerivedInputs, band_key
from mtan_s1s2.data.pastis.datamodule import PASTISDataModule
from mtan_s1s2.data.pastis.writer import write_pastis_dataset
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule
from mtan_s1s2.data.table.datamodule import TableDataModule

S2_BANDS = ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]


def reflectance_sample(values: dict[str, list[float]], mask: list[bool]) -> dict:
    """A (T, 10, 1, 1) S2 sample of the given reflectances per band (other bands 0.1)."""
    T = len(mask)
    x = torch.full((T, len(S2_BANDS), 1, 1), 0.1)
    for band, v in values.items():
        x[:, S2_BANDS.index(band), 0, 0] = torch.tensor(v)
    return {"s2": {"x": x, "doy": torch.arange(T, dtype=torch.float32), "mask": torch.tensor(mask)[:, None, None]}}


def test_indices_equal_a_hand_computation() -> None:
    derived = DerivedInputs.resolve(["ndvi", "ndwi", "ndre1", "ndmi", "nbr"], {"s2": S2_BANDS})
    red, nir, green = [0.05, 0.08], [0.40, 0.20], [0.07, 0.06]
    b05, b8a, b11, b12 = [0.10, 0.12], [0.42, 0.25], [0.22, 0.18], [0.12, 0.15]
    sample = reflectance_sample(
        {"B04": red, "B08": nir, "B03": green, "B05": b05, "B8A": b8a, "B11": b11, "B12": b12}, [True, True]
    )
    out = derived.apply(sample)["s2"]["x"][:, 10:, 0, 0]
    expected = [
        [(n - r) / (n + r) for n, r in zip(nir, red, strict=True)],  # NDVI: 0.35 / 0.45 = 0.7778, 0.12 / 0.28
        [(g - n) / (g + n) for g, n in zip(green, nir, strict=True)],  # NDWI (McFeeters): -0.7021, -0.5385
        [(a - b) / (a + b) for a, b in zip(b8a, b05, strict=True)],  # NDRE1
        [(n - s) / (n + s) for n, s in zip(nir, b11, strict=True)],  # NDMI
        [(n - s) / (n + s) for n, s in zip(nir, b12, strict=True)],  # NBR
    ]
    np.testing.assert_allclose(out.numpy(), np.asarray(expected).T, rtol=1e-6)
    assert out[0, 0] == pytest.approx(0.35 / 0.45, rel=1e-6)
    s1 = DerivedInputs.resolve(["vh_vv"], {"s1_asc": ["VV", "VH"]})
    x = torch.tensor([[-10.0, -17.5], [-8.0, -14.0]])[:, :, None, None]
    ratio = s1.apply({"s1_asc": {"x": x, "mask": torch.ones(2, 1, 1, dtype=torch.bool)}})["s1_asc"]["x"]
    assert ratio[:, 2, 0, 0].tolist() == [-7.5, -6.0]  # VH_dB - VV_dB


def test_masked_padded_and_zero_denominator_observations_give_no_nan() -> None:
    derived = DerivedInputs.resolve(["ndvi"], {"s2": S2_BANDS})
    # date 0: valid; 1: masked with NaN values (a cloud); 2: valid but red = NIR = 0 (0/0);
    # 3: valid, red + NIR below one DN; 4: slightly negative red (atmospheric correction): clipped to 1.
    sample = reflectance_sample(
        {"B04": [0.05, float("nan"), 0.0, 0.00004, -0.03], "B08": [0.30, float("nan"), 0.0, 0.00005, 0.0302]},
        [True, False, True, True, True],
    )
    sample["s2"]["x"][1] = float("nan")
    out = derived.apply(sample)["s2"]
    ndvi = out["x"][:, 10, 0, 0]
    assert torch.isfinite(ndvi).all()
    assert ndvi.tolist() == pytest.approx([0.25 / 0.35, 0.0, 0.0, 0.0, 1.0], rel=1e-6)
    assert out["mask"] is sample["s2"]["mask"]  # masks unchanged: the cloud stays masked, the rest valid
    assert 0.00009 < MIN_DENOMINATOR * 1.0001  # the 1e-4 guard covers that observation
    # A padded batch (collate_sits pads x = 0, mask False) keeps its padding at 0.
    batch = {"s2": {"x": torch.zeros(2, 3, 10, 2, 2), "mask": torch.zeros(2, 3, 2, 2, dtype=torch.bool)}}
    assert derived.apply(batch)["s2"]["x"].shape == (2, 3, 11, 2, 2)
    assert (derived.apply(batch)["s2"]["x"][:, :, 10] == 0).all()


def test_bands_are_found_by_name_in_any_order_and_spelling() -> None:
    assert band_key("b8") == band_key("B08") == "B8" and band_key("B8A") == "B8A" and band_key("vh") == "VH"
    derived = DerivedInputs.resolve(["ndvi"], {"s2": ["B8", "B11", "B4"]})
    (channel,) = derived.channels["s2"]
    assert (channel.a, channel.b) == (0, 2)  # NIR first, red second
    assert derived.names_of("s2") == ("ndvi",) and derived.count("s1") == 0
    both = DerivedInputs.resolve(["vh_vv"], {"s1_asc": ["VV", "VH"], "s1_desc": ["VH", "VV"]})
    assert both.names_of("s1_asc") == both.names_of("s1_desc") == ("vh_vv",)
    assert [(c.a, c.b) for m in ("s1_asc", "s1_desc") for c in both.channels[m]] == [(1, 0), (0, 1)]


def test_s2_indices_go_to_the_s2_modality_holding_their_bands() -> None:
    """WorldCereal's S2 split over a 20 m modality (s2) and a 10 m one (s2_10m)."""
    bands = {"s2": ["B05", "B06", "B07", "B8A", "B11", "B12"], "s2_10m": ["B02", "B03", "B04", "B08"]}
    derived = DerivedInputs.resolve(["ndvi", "ndre1", "ndwi"], bands)
    assert derived.names_of("s2_10m") == ("ndvi", "ndwi") and derived.names_of("s2") == ("ndre1",)
    assert [(c.a, c.b) for c in derived.channels["s2_10m"]] == [(3, 2), (1, 3)]
    # NDMI needs B08 (10 m) and B11 (20 m): neither modality holds both.
    with pytest.raises(ValueError, match=r"ndmi .* needs s2 band\(s\) \['B08', 'B11'\], but \['B08'\] is not among"):
        DerivedInputs.resolve(["ndmi"], bands)


def test_unknown_and_misplaced_derived_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"Unknown derived input 'evi'.*valid names are \['ndvi'"):
        DerivedInputs.resolve(["evi"], {"s2": S2_BANDS})
    with pytest.raises(ValueError, match="must be a list"):
        DerivedInputs.resolve("ndvi", {"s2": S2_BANDS})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="names an index twice"):
        DerivedInputs.resolve(["ndvi", "NDVI"], {"s2": S2_BANDS})
    with pytest.raises(ValueError, match=r"vh_vv .* the data have no S1 modality \(data.modalities=\['s2'\]\)"):
        DerivedInputs.resolve(["vh_vv"], {"s2": S2_BANDS})
    assert set(INDICES) == {"ndvi", "ndwi", "ndmi", "ndre1", "ndre2", "ndre3", "nbr", "vh_vv"}


def ndvi_table(tmp_path: Path) -> Path:
    """A wide CSV of 24 pixels in 12 fields, 3 monthly dates of S2 red and NIR as DN, 65535 = no data."""
    rng = np.random.default_rng(0)
    n, t = 24, 3
    data: dict[str, object] = {
        "pixel": range(n),
        "field": [i // 2 for i in range(n)],
        "code": [1 + (i // 2) % 2 for i in range(n)],
    }
    for k in range(t):
        data[f"B04-ts{k}"] = rng.integers(200, 1500, n).astype(np.uint16)
        data[f"B08-ts{k}"] = rng.integers(1500, 5000, n).astype(np.uint16)
    frame = pd.DataFrame(data)
    frame.loc[5, "B08-ts1"] = 65535  # no data: the observation is masked
    frame.to_csv(tmp_path / "ndvi.csv", index=False)
    return tmp_path / "ndvi.csv"


def table_datamodule(path: Path, **kw) -> TableDataModule:
    args = dict(
        path=str(path), columns={"s2": {"bands": ["B04", "B08"], "pattern": "{band}-ts{t}"}}, id_column="pixel",
        date_start="2021-04-01", date_step="1M", labels={"column": "code", "classes": {"a": [1], "b": [2]}},
        split={"group_column": "field", "n_folds": 4}, radiometry={"s2": {"scale": 1.0e-4, "nodata": [65535]}},
        batch_size=4, norm_stats="auto",
    )  # fmt: skip
    return TableDataModule(**{**args, **kw})


def test_table_ndvi_channel_masks_and_statistics(tmp_path: Path) -> None:
    path = ndvi_table(tmp_path)
    frame = pd.read_csv(path)
    dm = table_datamodule(path, derived=["ndvi"])
    assert dm.in_channels == {"s2": 3} and dm.input_channel_names() == {"s2": ["B04", "B08", "ndvi"]}
    samples = [s for split in ("train", "val", "test") for s in dm.raw_dataset(split)]
    for s in samples:
        i = int(s["patch_id"])
        red = frame.loc[i, [f"B04-ts{k}" for k in range(3)]].to_numpy(float) * 1e-4
        nir = frame.loc[i, [f"B08-ts{k}" for k in range(3)]].to_numpy(float) * 1e-4
        expected = np.where(s["s2"]["mask"][:, 0, 0].numpy(), (nir - red) / (nir + red), 0.0)
        np.testing.assert_allclose(s["s2"]["x"][:, 2, 0, 0].numpy(), expected, rtol=1e-5, atol=1e-7)
    masked = next(s for s in samples if int(s["patch_id"]) == 5)
    assert masked["s2"]["mask"][:, 0, 0].tolist() == [True, False, True] and masked["s2"]["x"][1, 2, 0, 0] == 0
    # The statistics cover NDVI, over the valid observations of the training split.
    train = [s for s in dm.raw_dataset("train")]
    valid = np.concatenate([s["s2"]["x"][:, 2, 0, 0].numpy()[s["s2"]["mask"][:, 0, 0].numpy()] for s in train])
    stats = dm.norm_stats
    assert stats is not None and stats["s2"].mean.shape == (3,)
    assert stats["s2"].mean[2] == pytest.approx(valid.mean(), rel=1e-5)
    assert stats["s2"].std[2] == pytest.approx(valid.std(), rel=1e-4)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["s2"]["x"].shape[2] == 3 and torch.isfinite(batch["s2"]["x"]).all()


def test_a_table_without_the_bands_of_an_index_is_refused_before_it_is_read(tmp_path: Path) -> None:
    never_written = tmp_path / "not_read.csv"  # the bands are checked before the table is opened
    with pytest.raises(ValueError) as err:
        table_datamodule(never_written, derived=["ndvi", "ndwi"])
    message = str(err.value)
    assert (
        "ndwi" in message
        and "['B03', 'B08']" in message
        and "['B03'] is not among the s2 bands ['B04', 'B08']" in message
    )
    assert "data.columns.s2.bands" in message and "drop ndwi from data.derived" in message


def test_datacube_scene_derived_channel_under_clouds(tmp_path: Path) -> None:
    make_scene(tmp_path / "scene", clouds=0.3)
    args = dict(
        root=str(tmp_path), modalities=["s2", "s1_asc"], sources=SOURCES, labels=LABELS,
        split={"block_size": 2, "n_folds": 3, "buffer": 0}, reference_date="2020-03-01", norm_stats="auto",
    )  # fmt: skip
    dm = DatacubeDataModule(**args, derived=["ndmi", "vh_vv"])
    assert dm.in_channels == {"s2": 4, "s1_asc": 3}
    plain = DatacubeDataModule(**args)
    n_masked = 0
    for split in ("train", "test"):
        for s, p in zip(dm.raw_dataset(split), plain.raw_dataset(split), strict=True):
            x, mask = p["s2"]["x"].numpy(), p["s2"]["mask"].numpy()
            n_masked += int((~mask).sum())
            nir, swir = x[:, 1], x[:, 2]  # bands B02, B08, B11
            expected = np.where(mask, (nir - swir) / np.where(mask, nir + swir, 1.0), 0.0)
            np.testing.assert_allclose(s["s2"]["x"][:, 3].numpy(), expected, rtol=1e-5, atol=1e-7)
            np.testing.assert_array_equal(s["s2"]["mask"].numpy(), mask)
            s1, m1 = p["s1_asc"]["x"].numpy(), p["s1_asc"]["mask"].numpy()
            np.testing.assert_allclose(s["s1_asc"]["x"][:, 2].numpy(), np.where(m1, s1[:, 1] - s1[:, 0], 0), atol=1e-5)
            assert np.isfinite(s["s2"]["x"][:, 3].numpy()).all()
    assert n_masked > 0  # SCL 9 (clouds) masks observations, whose derived value is 0
    assert dm.norm_stats is not None and dm.norm_stats["s2"].mean.shape == (4,)
    with pytest.raises(ValueError, match=r"ndvi .*\['B04'\] is not among the s2 bands \['B02', 'B08', 'B11'\] "
                                         r"\(data.sources.s2.bands\)"):  # fmt: skip
        DatacubeDataModule(**args, derived=["ndvi"])


def test_synthetic_and_pastis_channels_follow(tmp_path: Path) -> None:
    synthetic = SyntheticSITSDataModule(preset="tiny", n_train=2, n_val=1, n_test=1, derived=["ndvi", "vh_vv"])
    assert synthetic.in_channels == {"s2": 11, "s1_asc": 4, "s1_desc": 4}
    sample = synthetic.raw_dataset("train")[0]
    x, mask = sample["s2"]["x"], sample["s2"]["mask"]
    nir, red = x[:, 6], x[:, 2]
    np.testing.assert_allclose(x[:, 10][mask].numpy(), ((nir - red) / (nir + red))[mask].numpy(), rtol=1e-5, atol=1e-7)
    assert torch.isfinite(x[:, 10]).all() and (x[:, 10][~mask] == 0).all()
    with pytest.raises(
        ValueError, match=r"stored bands only, but data.derived adds \{'s2': \['ndvi'\]\}.*norm_stats=auto"
    ):
        SyntheticSITSDataModule(
            preset="tiny", derived=["ndvi"], modalities=["s2"],
            norm_stats={"s2": {"mean": [0.1] * 10, "std": [0.1] * 10}},
        ).resolve_norm_stats()  # fmt: skip
    root = write_pastis_dataset(tmp_path / "pastis", preset="tiny", n_train=2, n_val=1, n_test=1)
    pastis = PASTISDataModule(
        root=str(root), labels={"names": "synthetic", "ignore_codes": [0]}, reference_date="2021-01-01",
        crop_size=None, norm_stats="auto", modalities=["s2", "s1_asc"], derived=["ndre1", "vh_vv"],
        radiometry={"s2": {"scale": 1.0, "nodata": []}, "s1_asc": {"nodata": []}},
    )  # fmt: skip
    assert pastis.in_channels == {"s2": 11, "s1_asc": 4}
    stats = pastis.norm_stats
    assert stats is not None and stats["s2"].mean.shape == (11,) and -1 < stats["s2"].mean[10] < 1
    patch = pastis.raw_dataset("train")[0]
    assert patch["s2"]["x"].shape[1] == 11 and torch.isfinite(patch["s2"]["x"][:, 10]).all()
