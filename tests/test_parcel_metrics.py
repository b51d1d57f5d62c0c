"""Parcel-level results: probabilities averaged per parcel, parcel metrics in the test, parcel maps, tables.

The scenes are hand-built datacubes (xarray NetCDF files in ``tmp_path``) whose two bands are
the logits of the two classes, read by :class:`BandLogits`, a network without weights: the
probabilities of every pixel are known, so the parcel metrics are known exactly.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import rasterio
import torch
from torch import nn

from fixtures.scene_files import times, write_cube
from mtan_s1s2.callbacks.classification_report import ClassificationReport
from mtan_s1s2.data.batch import collate_sits
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.parcels import ParcelSpec, connected_components
from mtan_s1s2.data.table import TableDataModule
from mtan_s1s2.inference.parcels import PARCEL_CLASS_MAP, PARCELS_CSV
from mtan_s1s2.inference.scene import PredictOptions, predict_scene
from mtan_s1s2.inference.table import PixelTableWriter, parcel_table_path
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.parcel_metrics import (
    PARCEL_PER_CLASS_FILE,
    PARCELS_FILE,
    aggregate_parcels,
    parcel_metrics,
)

CLASSES = ["unlabelled", "a", "b"]


class BandLogits(nn.Module):
    """Logits ``(B, 3, H, W)``: 0 for ``unlabelled``, then the first date's two S2 bands (class a, class b)."""

    modalities = ("s2",)

    def forward(self, inputs: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
        x = inputs["s2"]["x"][:, 0]  # (B, 2, H, W)
        return torch.cat([torch.zeros_like(x[:, :1]), x], dim=1)


def p_a(la: float, lb: float) -> float:
    """Probability of class a over {a, b} (``unlabelled`` is left out of the softmax)."""
    return 1.0 / (1.0 + math.exp(lb - la))


# An 8 x 8 scene of four 4 x 4 fields: top-left a (code 1), top-right b (2), bottom-left b, bottom-right a.
# The logits (a, b) of each field's pixels; the parcel rule decides differently from most pixels in TL and BR.
LABEL = np.array([[1, 2], [2, 1]]).repeat(4, 0).repeat(4, 1).astype(np.uint16)
FIELDS = {
    "TL": (slice(0, 4), slice(0, 4)),
    "TR": (slice(0, 4), slice(4, 8)),
    "BL": (slice(4, 8), slice(0, 4)),
    "BR": (slice(4, 8), slice(4, 8)),
}


def logits() -> np.ndarray:
    """``(2, 8, 8)`` float32 logits of class a and class b."""
    out = np.zeros((2, 8, 8), np.float32)
    tl = np.zeros((4, 4, 2), np.float32)
    tl[...] = (2.0, 0.0)  # 10 pixels clearly a ...
    tl.reshape(16, 2)[10:] = (0.0, 0.5)  # ... 6 pixels a little b: pixels 10/16 right, the parcel a (right)
    tr = np.broadcast_to(np.float32([0.0, 0.2]), (4, 4, 2))  # all a little b: right
    bl = np.broadcast_to(np.float32([0.0, 3.0]), (4, 4, 2))  # all clearly b: right
    br = np.zeros((4, 4, 2), np.float32)
    br[...] = (0.0, 1.0)  # 12 pixels b (wrong) ...
    br.reshape(16, 2)[:4] = (3.0, 0.0)  # ... 4 clearly a: the parcel is b (wrong)
    for name, block in zip(FIELDS, (tl, tr, bl, br), strict=True):
        rows, cols = FIELDS[name]
        out[:, rows, cols] = np.moveaxis(block, -1, 0)
    return out


def write_scene(folder: Path) -> None:
    t = times(2)
    values = np.repeat(logits()[:, None], 2, axis=1)  # (2 bands, T, H, W)
    write_cube(folder / "S2.nc", {"LA": values[0], "LB": values[1]}, t, scale=None, fill=-9999)
    write_cube(folder / "label.nc", {"CT": LABEL}, None, scale=None, fill=None)


def datamodule(root: Path, connectivity: int = 4) -> DatacubeDataModule:
    for i in range(3):  # three copies: whichever is the test scene, the expected metrics are the same
        write_scene(root / f"scene{i}")
    return DatacubeDataModule(
        str(root), modalities=["s2"], sources={"s2": {"files": ["S2.nc"], "bands": ["LA", "LB"]}},
        labels={"file": "label.nc", "variable": "CT", "classes": {"a": [1], "b": [2]}},
        split={"by": "scenes", "n_folds": 3, "fold": 1, "buffer": 0,
               "parcels": {"source": "components", "connectivity": connectivity}},
        reference_date="2020-03-01", norm_stats=None, batch_size=2,
    )  # fmt: skip


def module() -> SITSClassifierModule:
    return SITSClassifierModule(net=BandLogits(), num_classes=3, ignore_index=0, class_names=CLASSES)


def run_test(dm: DatacubeDataModule, out: Path) -> dict[str, float]:
    trainer = L.Trainer(
        accelerator="cpu", logger=False, callbacks=[ClassificationReport(str(out))], enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(out),
    )  # fmt: skip
    trainer.test(module(), datamodule=dm, verbose=False)
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_aggregate_parcels_averages_probabilities_of_labelled_pixels_and_takes_the_majority_label():
    parcel = np.array([5, 5, 5, 7, 7, -1, 7])
    proba = np.array([[0, 0.9, 0.1], [0, 0.2, 0.8], [0, 0.3, 0.7], [0, 0.6, 0.4], [0, 0.6, 0.4], [0, 1, 0], [0, 0, 1]])
    label = np.array([1, 1, 2, 2, 2, 1, 0])  # the last pixel is unlabelled (left out), -1 has no parcel
    r = aggregate_parcels(parcel, proba, label, ignore_index=0)
    assert r.parcel.tolist() == [5, 7]
    assert r.n_pixels.tolist() == [3, 2]
    np.testing.assert_allclose(r.proba, [[0, 1.4 / 3, 1.6 / 3], [0, 0.6, 0.4]])
    assert r.predicted.tolist() == [2, 1]  # parcel 5: its pixels vote a twice, but the mean says b
    np.testing.assert_allclose(r.confidence, [1.6 / 3, 0.6])
    assert r.reference.tolist() == [1, 2]
    np.testing.assert_allclose(r.reference_share, [2 / 3, 1.0])
    metrics, confmat = parcel_metrics(r, 3, 0)
    assert metrics["test_parcel/OA"] == 0.0 and metrics["test_parcel/n_parcels"] == 2.0
    assert confmat.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0]]


def test_connected_components_follow_the_connectivity():
    regions4 = connected_components(LABEL, connectivity=4)
    assert len(np.unique(regions4)) == 4  # four fields
    assert regions4[0, 0] != regions4[7, 7]  # the two a fields touch at a corner only
    regions8 = connected_components(LABEL, connectivity=8)  # both diagonal pairs join
    assert len(np.unique(regions8)) == 2 and regions8[0, 0] == regions8[7, 7] and regions8[0, 7] == regions8[7, 0]
    with_gap = LABEL.astype(np.float32)
    with_gap[0, 0], with_gap[0, 1] = 0, np.nan
    assert connected_components(with_gap)[0, :2].tolist() == [0, 0]  # 0 and NaN are no parcel


def test_the_test_reports_exact_parcel_metrics_beside_the_pixel_metrics(tmp_path: Path):
    dm = datamodule(tmp_path / "data")
    assert len(dm.parcel_names) == 12  # 4 per scene, numbered per scene
    metrics = run_test(dm, tmp_path / "run")
    # Pixels: TL 10/16, TR 16/16, BL 16/16, BR 4/16 right.
    assert metrics["test/OA"] == pytest.approx(46 / 64)
    # Parcels: TL a->a, TR b->b, BL b->b, BR a->b. OA 3/4; F1 a 2/3, b 0.8; IoU a 1/2, b 2/3; kappa (3/4-1/2)/(1/2).
    assert metrics["test_parcel/n_parcels"] == 4
    assert metrics["test_parcel/OA"] == pytest.approx(0.75)
    assert metrics["test_parcel/F1"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert metrics["test_parcel/mIoU"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert metrics["test_parcel/kappa"] == pytest.approx(0.5)
    rows = {r["class_name"]: r for r in read_csv(tmp_path / "run" / PARCEL_PER_CLASS_FILE)}
    assert rows["a"]["support_parcels"] == "2" and rows["a"]["predicted_parcels"] == "1"
    assert float(rows["a"]["users_accuracy"]) == 1.0 and float(rows["a"]["producers_accuracy"]) == 0.5
    assert float(rows["b"]["users_accuracy"]) == pytest.approx(2 / 3) and float(rows["b"]["producers_accuracy"]) == 1
    parcels = read_csv(tmp_path / "run" / PARCELS_FILE)
    assert sorted(int(r["n_pixels"]) for r in parcels) == [16, 16, 16, 16]
    br_mean_a = (4 * p_a(3, 0) + 12 * p_a(0, 1)) / 16
    br = next(r for r in parcels if r["reference_name"] == "a" and r["predicted_name"] == "b")
    assert float(br["confidence"]) == pytest.approx(1 - br_mean_a, abs=1e-6)


def test_eight_connected_parcels_join_the_fields_that_touch_at_a_corner(tmp_path: Path):
    metrics = run_test(datamodule(tmp_path / "data", connectivity=8), tmp_path / "run")
    # TL + BR are one parcel of 32 px whose mean probability of a is above 1/2, TR + BL one of b: all right.
    assert (10 * p_a(2, 0) + 6 * p_a(0, 0.5) + 4 * p_a(3, 0) + 12 * p_a(0, 1)) / 32 > 0.5
    assert metrics["test_parcel/n_parcels"] == 2
    assert metrics["test_parcel/OA"] == 1.0
    assert metrics["test/OA"] == pytest.approx(46 / 64)


def test_parcel_map_pixels_have_their_parcel_class_on_the_class_map_grid(tmp_path: Path):
    dm = datamodule(tmp_path / "data")
    out = tmp_path / "maps"
    options = PredictOptions(tile_size=3, quicklook=False, device="cpu", progress=False)  # tiles cut the parcels
    record = predict_scene(module().net, dm.scenes[0], out, CLASSES, 0, None, options)
    assert record["n_parcels"] == 4
    with rasterio.open(out / "class_map.tif") as pixels, rasterio.open(out / PARCEL_CLASS_MAP) as parcels:
        assert parcels.crs == pixels.crs and parcels.transform == pixels.transform
        assert parcels.shape == pixels.shape and parcels.nodata == pixels.nodata == 255
        assert parcels.colormap(1) == pixels.colormap(1)
        assert parcels.tags(1)["CLASS_1"] == "a"
        assert parcels.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
        parcel_map, pixel_map = parcels.read(1), pixels.read(1)
    expected = {"TL": 1, "TR": 2, "BL": 2, "BR": 2}  # the parcel rule, BR wrong as in the test
    for name, (rows, cols) in FIELDS.items():
        assert (parcel_map[rows, cols] == expected[name]).all(), name
    assert (pixel_map[FIELDS["BR"]] == 1).sum() == 4  # the pixel map keeps the 4 a pixels of BR
    table = pd.read_csv(out / PARCELS_CSV)
    assert table["n_pixels"].tolist() == [16, 16, 16, 16]
    assert sorted(table["predicted_name"]) == ["a", "b", "b", "b"]
    br = table.loc[table["parcel"] == connected_components(LABEL)[7, 7]].iloc[0]
    assert br["proba_a"] == pytest.approx((4 * p_a(3, 0) + 12 * p_a(0, 1)) / 16, abs=1e-6)
    assert br["confidence"] == pytest.approx(br["proba_b"])


def test_predict_reads_the_label_raster_as_parcels_when_labels_are_not_read(tmp_path: Path):
    from omegaconf import OmegaConf

    from mtan_s1s2.cli.predict import build_predict_datamodule

    for i in range(3):
        write_scene(tmp_path / f"scene{i}")
    data = {
        "_target_": "mtan_s1s2.data.datacube.DatacubeDataModule", "root": str(tmp_path), "modalities": ["s2"],
        "sources": {"s2": {"files": ["S2.nc"], "bands": ["LA", "LB"]}}, "reference_date": "2020-03-01",
        "labels": {"file": "label.nc", "variable": "CT", "classes": {"a": [1], "b": [2]}}, "norm_stats": None,
        "split": {"by": "scenes", "n_folds": 3, "parcels": {"source": "components"}},
    }  # fmt: skip
    cfg = OmegaConf.create({"data": data, "scene": "scene1"})
    dm = build_predict_datamodule(cfg, OmegaConf.create({"data": data}))
    assert dm.split is None and dm.scenes[0].label is None  # prediction reads no labels ...
    assert dm.scenes[0].read_parcels().tolist() == connected_components(LABEL).tolist()  # ... but their regions


def write_table(path: Path) -> None:
    """A wide pixel table of 3 dates x 1 band, 6 parcels of 4 pixels, the parcel in a column."""
    rng = np.random.default_rng(0)
    rows = []
    for parcel in range(6):
        label = "a" if parcel % 2 == 0 else "b"
        for _ in range(4):
            base = 0.3 if label == "a" else 0.6
            rows.append(
                {"field": f"f{parcel}", "label": label, "block": parcel,
                 **{f"B04_{t}": base + rng.normal(0, 0.05) for t in range(3)}}
            )  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)


def table_datamodule(path: Path) -> TableDataModule:
    return TableDataModule(
        str(path), columns={"s2": {"bands": ["B04"], "pattern": "{band}_{t}"}}, dates=["2020-03-01", "2020-04-01",
        "2020-05-01"], labels={"classes": {"a": ["a"], "b": ["b"]}},
        split={"n_folds": 3, "group_column": "block", "parcels": {"column": "field"}}, norm_stats=None, batch_size=5,
    )  # fmt: skip


def test_a_table_with_a_parcel_column_gives_parcel_samples_and_parcel_predictions(tmp_path: Path):
    write_table(tmp_path / "pixels.csv")
    dm = table_datamodule(tmp_path / "pixels.csv")
    assert dm.parcel_names == [f"f{i}" for i in range(6)]
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    fields = [dm.parcel_names[int(p)] for p in batch["parcel"][:, 0, 0]]
    assert fields == [str(f) for f in dm.table.parcels[batch["patch_id"].numpy()]]
    # The predictions table: a parcel column and each pixel's parcel class, one row per parcel beside it.
    ids = np.arange(len(dm.table))
    writer = PixelTableWriter(ids, dm.labels, dm.class_names, 0, dm.table.parcels)
    logits = torch.zeros((len(ids), 3, 1, 1))
    logits[:, 1, 0, 0] = torch.linspace(-1, 1, len(ids))  # class a gains down the table
    writer.write_on_batch_end(None, None, logits, None, {"patch_id": torch.from_numpy(ids)}, 0)  # type: ignore[arg-type]
    frame = writer.frame()
    assert frame["parcel"].tolist() == [f"f{i // 4}" for i in range(24)]
    proba_a = torch.softmax(torch.stack([logits[:, 1, 0, 0], torch.zeros(24)], 1), 1)[:, 0].numpy()
    mean_a = proba_a.reshape(6, 4).mean(1)
    assert frame["parcel_predicted_name"].tolist() == [("a" if m > 0.5 else "b") for m in mean_a for _ in range(4)]
    parcels_path = writer.write_parcels(parcel_table_path(tmp_path / "predictions.csv"))
    assert parcels_path.name == "predictions_parcels.csv"
    parcels = pd.read_csv(parcels_path)
    assert parcels["parcel"].tolist() == [f"f{i}" for i in range(6)]
    assert parcels["n_pixels"].tolist() == [4] * 6
    assert parcels["label_name"].tolist() == ["a", "b"] * 3
    np.testing.assert_allclose(parcels["proba_a"], mean_a, rtol=1e-6)


def test_the_table_test_reports_parcel_metrics(tmp_path: Path):
    write_table(tmp_path / "pixels.csv")
    dm = table_datamodule(tmp_path / "pixels.csv")
    dm.setup("test")
    test = [dm.test_dataloader().dataset[i] for i in range(len(dm.test_dataloader().dataset))]
    batch = collate_sits(test)
    n_fields = len(set(batch["parcel"].ravel().tolist()))
    net = nn.Module()
    net.forward = lambda inputs: torch.cat(  # type: ignore[method-assign]
        [torch.zeros_like(inputs["s2"]["x"][:, 0]), 0.45 - inputs["s2"]["x"][:, 0], inputs["s2"]["x"][:, 0] - 0.45], 1
    )  # class a below 0.45 of B04, b above
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ClassificationReport(str(tmp_path))], default_root_dir=str(tmp_path))  # fmt: skip
    trainer.test(SITSClassifierModule(net=net, num_classes=3, class_names=CLASSES), datamodule=dm, verbose=False)
    metrics = trainer.callback_metrics
    assert float(metrics["test_parcel/n_parcels"]) == n_fields
    assert float(metrics["test_parcel/OA"]) == 1.0  # every field of a (0.3) and b (0.6) on the right side
    assert len(read_csv(tmp_path / PARCELS_FILE)) == n_fields


@pytest.mark.parametrize(
    ("cfg", "kind", "message"),
    [
        ({"source": "pixels"}, "scenes", r"source must be one of \['raster', 'components', 'column'\], got 'pixels'"),
        ({"source": "components", "connectivity": 6}, "scenes", r"connectivity must be 4 .* or 8 .*, got 6"),
        ({"source": "raster"}, "scenes", r"source=raster needs data.split.parcels.file"),
        ({"column": "field"}, "scenes", r"source='column' does not apply to scenes"),
        ({"source": "components"}, "tables", r"source='components' does not apply to tables"),
        ({"variable": "CT"}, "scenes", r"names no source"),
        ("field", "tables", r"must be a mapping"),
    ],
)
def test_bad_parcel_settings_name_the_key_and_the_fix(cfg, kind, message):
    with pytest.raises(ValueError, match=message):
        ParcelSpec.from_config(cfg, kind)


def test_the_random_forest_test_reports_parcel_metrics_of_its_probabilities(tmp_path: Path):
    from mtan_s1s2.baselines.harness import BaselineRunner
    from mtan_s1s2.baselines.random_forest import RandomForestBaseline

    write_table(tmp_path / "pixels.csv")
    dm = table_datamodule(tmp_path / "pixels.csv")
    runner = BaselineRunner(RandomForestBaseline(n_estimators=5, n_jobs=1, seed=0), dm, tmp_path)
    runner.fit()
    metrics = runner.test()
    parcels = read_csv(tmp_path / PARCELS_FILE)
    test_fields = {dm.parcel_names[int(i)] for i in dm.parcel_ids[dm.split == "test"]}
    assert {p["parcel"] for p in parcels} == test_fields
    assert metrics["test_parcel/n_parcels"] == len(test_fields)
    right = sum(p["reference"] == p["predicted"] for p in parcels)
    assert metrics["test_parcel/OA"] == pytest.approx(right / len(parcels))
    assert all(int(p["n_pixels"]) == 4 for p in parcels)  # every pixel of a test field, each field once
