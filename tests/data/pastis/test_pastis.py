"""Tests of the PASTIS-R-format reader, its datamodule, statistics cache and writer."""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import open_dict

from conftest import compose_train
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.batch import CLASS_NAMES
from mtan_s1s2.data.dates import days_since
from mtan_s1s2.data.normalization import compute_norm_stats
from mtan_s1s2.data.pastis.__main__ import main as pastis_main
from mtan_s1s2.data.pastis.datamodule import PASTISDataModule, utae_folds
from mtan_s1s2.data.pastis.dataset import PASTIS_CLASS_NAMES
from mtan_s1s2.data.pastis.layout import parse_date_list
from mtan_s1s2.data.pastis.writer import FIRST_PATCH_ID, write_pastis_dataset
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "make_pastis_dataset.py"
SIZES = {"n_train": 6, "n_val": 2, "n_test": 2}
MODS = ["s2", "s1_asc", "s1_desc"]
# How data=pastis_synthetic reads a generated folder, without normalisation or crops.
SYNTHETIC_READ = {
    "labels": {"names": "synthetic", "ignore_codes": [0]},
    "reference_date": "2021-01-01",
    "crop_size": None,
    "radiometry": {"s2": {"nodata": []}, "s1_asc": {"nodata": []}, "s1_desc": {"nodata": []}},  # NaN = invalid
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PASTIS-R-format dataset of synthetic patches (6 train, 2 val, 2 test)."""
    return write_pastis_dataset(tmp_path_factory.mktemp("pastis") / "data", preset="tiny", **SIZES)


@pytest.fixture
def copy_of(generated: Path, tmp_path: Path) -> Path:
    """A private copy of the generated dataset, free to corrupt."""
    return Path(shutil.copytree(generated, tmp_path / "copy", ignore=shutil.ignore_patterns("NORM_*")))


def datamodule(root: Path, **kwargs) -> PASTISDataModule:
    return PASTISDataModule(root=str(root), **{**SYNTHETIC_READ, "norm_stats": None, **kwargs})


def edit_metadata(root: Path, patch_id: int, key: str, value) -> None:
    path = root / "metadata.geojson"
    meta = json.loads(path.read_text())
    for f in meta["features"]:
        if f["properties"]["ID_PATCH"] == patch_id:
            f["properties"][key] = value
    path.write_text(json.dumps(meta))


# --- same content as the synthetic generator ------------------------------------------


@pytest.mark.parametrize("invalid_as_nan", [True, False])
def test_same_arrays_and_dates_as_synthetic_generator(tmp_path: Path, invalid_as_nan: bool) -> None:
    root = write_pastis_dataset(tmp_path, preset="tiny", invalid_as_nan=invalid_as_nan, dates_format="list", **SIZES)
    dm = datamodule(root)
    syn = SyntheticSITSDataModule(preset="tiny", norm_stats=None, **SIZES)
    assert dm.in_channels == syn.in_channels == {"s2": 10, "s1_asc": 3, "s1_desc": 3}
    assert dm.class_names == CLASS_NAMES and dm.num_classes == 11 and dm.ignore_index == 0
    patch_id = FIRST_PATCH_ID
    for split in ("train", "val", "test"):
        ours, theirs = dm.dataset(split), syn.raw_dataset(split)
        assert len(ours) == len(theirs) == SIZES[f"n_{split}"]
        for i in range(len(ours)):
            a, b = ours[i], theirs[i]
            assert a["patch_id"] == patch_id
            patch_id += 1
            assert torch.equal(a["label"], b["label"])
            for m in MODS:
                x, mask, ref_mask = a[m]["x"].numpy(), a[m]["mask"].numpy(), b[m]["mask"].numpy()
                # PASTIS dates are whole days: the synthetic overpass time of day is dropped.
                np.testing.assert_array_equal(a[m]["doy"].numpy(), np.floor(b[m]["doy"].numpy()))
                if invalid_as_nan:  # the mask survives as NaN; valid values are identical
                    np.testing.assert_array_equal(mask, ref_mask)
                    np.testing.assert_array_equal(
                        x[np.broadcast_to(mask[:, None], x.shape)],
                        b[m]["x"].numpy()[np.broadcast_to(mask[:, None], x.shape)],
                    )
                else:  # values as generated (clouds included); only no-data (NaN) is masked
                    np.testing.assert_array_equal(x, b[m]["x"].numpy())
                    np.testing.assert_array_equal(mask, np.isfinite(x).all(axis=1))
                    assert (mask | ~ref_mask).all()


def test_auto_stats_match_synthetic_stats(copy_of: Path) -> None:
    dm = datamodule(copy_of, norm_stats="auto")
    dm.setup("fit")
    syn = SyntheticSITSDataModule(preset="tiny", norm_stats=None, **SIZES)
    expected = compute_norm_stats(syn.raw_dataset("train"))
    for m in MODS:
        np.testing.assert_allclose(dm.norm_stats[m].mean, expected[m].mean, rtol=1e-5, atol=1e-6, err_msg=m)
        np.testing.assert_allclose(dm.norm_stats[m].std, expected[m].std, rtol=1e-5, atol=1e-6, err_msg=m)
    whole_train = PASTISDataModule(root=str(copy_of), **{**SYNTHETIC_READ, "norm_stats": "auto"}).dataset("train")
    again = compute_norm_stats(whole_train)  # normalised training folds
    for m in MODS:
        np.testing.assert_allclose(again[m].mean, 0.0, atol=1e-4, err_msg=m)
        np.testing.assert_allclose(again[m].std, 1.0, atol=1e-4, err_msg=m)


# --- dates, labels, masks, crops -------------------------------------------------------


def test_dates_forms_and_reference_date() -> None:
    as_dict = {"1": 20190103, "0": 20180924, "2": 20191101}
    expected = np.array(["2018-09-24", "2019-01-03", "2019-11-01"], "datetime64[s]")
    np.testing.assert_array_equal(parse_date_list(as_dict), expected)  # PASTIS-R forms
    np.testing.assert_array_equal(parse_date_list(json.dumps(as_dict)), expected)
    np.testing.assert_array_equal(parse_date_list([20180924, "2019-01-03", "20191101"]), expected)
    ref = np.datetime64("2018-09-01", "s")
    np.testing.assert_array_equal(days_since(expected, ref), [23, 124, 426])  # past 365: never wraps
    with pytest.raises(ValueError, match="20181332"):
        parse_date_list([20181332])
    # The date rule of every reader: a repeated or out-of-order date is refused, naming the index keys.
    with pytest.raises(ValueError, match=r"date 2018-09-29 repeats at index 1 and index 2"):
        parse_date_list({"0": 20180924, "1": 20180929, "2": 20180929})
    with pytest.raises(ValueError, match=r"index 1 \(2018-09-20\) comes after index 0 \(2018-09-24\)"):
        parse_date_list([20180924, 20180920])


def test_metadata_with_a_repeated_date_is_refused(copy_of: Path) -> None:
    path = copy_of / "metadata.geojson"
    meta = json.loads(path.read_text())
    props = meta["features"][0]["properties"]
    dates = json.loads(props["dates-S2"]) if isinstance(props["dates-S2"], str) else props["dates-S2"]
    dates["1"] = dates["0"]
    props["dates-S2"] = dates
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"Patch {props['ID_PATCH']} in .*'dates-S2'.*repeats at index 0 and index 1"):
        datamodule(copy_of).dataset("val")


def test_reference_date_shifts_doy(copy_of: Path) -> None:
    a = datamodule(copy_of).dataset("val")[0]["s2"]["doy"]
    b = datamodule(copy_of, reference_date="2020-12-31").dataset("val")[0]["s2"]["doy"]
    assert torch.equal(b, a + 1)


def test_pastis_label_conventions(copy_of: Path) -> None:
    pid = FIRST_PATCH_ID + SIZES["n_train"]  # the first val patch
    target = np.load(copy_of / "ANNOTATIONS" / f"TARGET_{pid}.npy")
    raw = np.zeros(target.shape[1:], np.uint8)
    raw[:, 4:8], raw[:, 8:], raw[0, 0] = 5, 19, 255  # background, a crop (5), void and a 255 fill
    target[0] = raw
    np.save(copy_of / "ANNOTATIONS" / f"TARGET_{pid}.npy", target)
    split = {"folds": {"train": [1, 2, 3], "val": [4], "test": [5]}}

    def labels(ignore_codes: list[int], names: str | list[str] = "pastis") -> dict:
        return {"names": names, "ignore_codes": ignore_codes}

    dm = datamodule(copy_of, split=split, labels=labels([19, 255]))  # U-TAE benchmark: void ignored
    assert dm.num_classes == 20 and dm.ignore_index == 19 and dm.class_names == PASTIS_CLASS_NAMES
    assert np.array_equal(dm.dataset("val")[0]["label"].numpy(), np.where(raw == 255, 19, raw))
    dm = datamodule(copy_of, split=split, labels=labels([0, 19, 255]))  # crop mapping: background and void ignored
    assert dm.ignore_index == 0
    assert np.array_equal(dm.dataset("val")[0]["label"].numpy(), np.where(raw >= 19, 0, raw))
    with pytest.raises(ValueError, match=r"label 255 .*data\.labels\.ignore_codes"):
        datamodule(copy_of, split=split, labels=labels([19])).dataset("val")[0]
    with pytest.raises(ValueError, match=r"label 5 .*data.labels.names"):
        datamodule(copy_of, labels=labels([0, 255], ["a", "b", "c"])).dataset("val")[0]
    with pytest.raises(ValueError, match=r"data.labels.ignore_codes\[0\]=19 is the ignore_index and must be a class "
                       r"index in \[0, 11\)"):  # fmt: skip
        datamodule(copy_of, labels=labels([19], "synthetic"))
    with pytest.raises(
        ValueError,
        match=r"data.labels has no key 'class_names' \(did you mean data.labels.names\?\); its keys are: names",
    ):
        datamodule(copy_of, labels={"class_names": "pastis"})


def test_nan_and_nodata_become_invalid(copy_of: Path) -> None:
    pid = FIRST_PATCH_ID
    path = copy_of / "DATA_S1D" / f"S1D_{pid}.npy"
    x = np.load(path)
    x[0] = 0.0
    x[0, :, 2, :] = -7.0  # a row of valid values on date 0
    x[1, 1, 3, 3] = np.nan  # NaN in one channel only
    np.save(path, x)
    mask = datamodule(copy_of, modalities=["s1_desc"]).dataset("train")[0]["s1_desc"]["mask"]
    assert not mask[1, 3, 3] and mask[0].all()  # 0 is a value when no fill value is declared
    # The S1 default: 0 dB stored as a float is a value, not no data (PASTIS-R's name S1D works too).
    dm = datamodule(copy_of, modalities=["s1_desc"], radiometry={"S1D": {}})
    assert dm.dataset("train")[0]["s1_desc"]["mask"][0].all()
    # An explicit fill value: an all-zero observation (S1's nodata_rule all) is no data.
    dm = datamodule(copy_of, modalities=["s1_desc"], radiometry={"S1D": {"nodata": [0]}})
    mask = dm.dataset("train")[0]["s1_desc"]["mask"]
    assert mask[0, 2].all() and not mask[0, :2].any() and not mask[0, 3:].any()


def test_radiometry_scales_and_converts_and_reports_masked_observations(copy_of: Path, caplog) -> None:
    pid = FIRST_PATCH_ID
    s2 = np.load(copy_of / "DATA_S2" / f"S2_{pid}.npy")
    np.save(copy_of / "DATA_S2" / f"S2_{pid}.npy", np.where(np.isfinite(s2), np.round(s2 * 1e4), 0).astype(np.int16))
    s1 = np.load(copy_of / "DATA_S1A" / f"S1A_{pid}.npy")
    np.save(copy_of / "DATA_S1A" / f"S1A_{pid}.npy", (10 ** (s1 / 10)).astype(np.float32))  # linear power
    radiometry = {"s2": {"scale": 1e-4}, "s1_asc": {"units": "linear", "nodata": []}}
    dm = datamodule(copy_of, modalities=["s2", "s1_asc"], radiometry=radiometry)
    sample = dm.dataset("train")[0]
    ok = np.isfinite(s2).all(axis=1)
    np.testing.assert_allclose(sample["s2"]["x"].numpy()[np.broadcast_to(ok[:, None], s2.shape)],
                               s2[np.broadcast_to(ok[:, None], s2.shape)], atol=6e-5)  # fmt: skip
    assert np.array_equal(sample["s2"]["mask"].numpy(), ok)  # DN 0 written where invalid: masked
    ok1 = np.isfinite(s1).all(axis=1)
    np.testing.assert_allclose(sample["s1_asc"]["x"].numpy()[:, :2][np.broadcast_to(ok1[:, None], s1[:, :2].shape)],
                               s1[:, :2][np.broadcast_to(ok1[:, None], s1[:, :2].shape)], atol=1e-3)  # fmt: skip
    with caplog.at_level("INFO"):
        datamodule(copy_of, modalities=["s2"], radiometry=radiometry, norm_stats="auto").setup("fit")
    assert "s2:" in caplog.text and "invalid" in caplog.text and "nodata" in caplog.text
    with caplog.at_level("WARNING"):  # DN declared as reflectance: the median gives it away
        datamodule(copy_of, modalities=["s2"], radiometry={"s2": {}}, norm_stats="auto").setup("fit")
    assert "looks like digital numbers" in caplog.text


def test_crops_share_one_window_across_modalities_and_labels(copy_of: Path) -> None:
    n = 16
    grid = np.arange(n * n, dtype=np.float32).reshape(n, n)  # pixel code = 16 y + x
    for pid in range(FIRST_PATCH_ID, FIRST_PATCH_ID + 10):
        for folder, prefix in (("DATA_S2", "S2"), ("DATA_S1A", "S1A")):
            path = copy_of / folder / f"{prefix}_{pid}.npy"
            np.save(path, np.broadcast_to(grid, np.load(path, mmap_mode="r").shape).copy())
        np.save(copy_of / "ANNOTATIONS" / f"TARGET_{pid}.npy", (grid % 11).astype(np.uint8)[None])
    dm = datamodule(copy_of, modalities=["S2", "S1A"], crop_size=6, eval_crop="center")
    assert dm.modalities == ["s2", "s1_asc"]
    dm.setup("fit")
    torch.manual_seed(0)
    corners = set()
    for _ in range(8):
        s = dm.datasets["train"][0]
        code = s["s2"]["x"][0, 0]
        assert code.shape == (6, 6) and torch.equal(code, s["s1_asc"]["x"][0, 2])
        y0, x0 = divmod(int(code[0, 0]), n)
        assert torch.equal(code, torch.from_numpy(grid[y0 : y0 + 6, x0 : x0 + 6]))
        assert torch.equal(s["label"], torch.from_numpy(grid[y0 : y0 + 6, x0 : x0 + 6] % 11).long())
        corners.add((y0, x0))
    assert len(corners) > 1  # random
    centre = dm.dataset("test")[0]["s2"]["x"][0, 0]
    assert torch.equal(centre, torch.from_numpy(grid[5:11, 5:11]))
    batch = next(iter(dm.predict_dataloader()))  # predictions: whole patches
    assert batch["s2"]["x"].shape[-2:] == (16, 16) and batch["label"].shape[-2:] == (16, 16)


# --- normalisation statistics cache ------------------------------------------------------


def test_stats_cached_beside_data_and_recomputed_by_command(copy_of: Path, monkeypatch, capsys) -> None:
    dm = datamodule(copy_of, norm_stats="auto", modalities=["s2"])
    dm.setup("fit")
    cache = copy_of / "NORM_S1S2_folds_1-2-3.json"
    content = json.loads(cache.read_text())
    assert content["train_folds"] == [1, 2, 3] and content["n_patches"] == SIZES["n_train"]
    assert set(content["stats"]) == {"s2"}

    def fail(*args, **kwargs):
        raise AssertionError("statistics recomputed although cached")

    with monkeypatch.context() as mp:  # a second run reads the cache
        mp.setattr(PASTISDataModule, "compute_norm_stats", fail)
        again = datamodule(copy_of, norm_stats="auto", modalities=["s2"])
        again.setup("fit")
        np.testing.assert_array_equal(again.norm_stats["s2"].mean, dm.norm_stats["s2"].mean)

    content["stats"]["s2"]["mean"][0] = 123.0  # stale cache: the command rewrites it
    cache.write_text(json.dumps(content))
    radiometry = json.dumps(SYNTHETIC_READ["radiometry"])
    pastis_main(
        ["--root", str(copy_of), "--modalities", "s2", "s1_asc", "--radiometry", radiometry, "--recompute-stats"]
    )
    out = capsys.readouterr().out
    assert "norm_stats:" in out and "s1_asc" in out and "fold 4: 2 patches" in out
    fresh = json.loads(cache.read_text())["stats"]
    assert fresh["s2"]["mean"][0] == pytest.approx(float(dm.norm_stats["s2"].mean[0]), rel=1e-6)
    assert set(fresh) == {"s2", "s1_asc"}


# --- clear errors ------------------------------------------------------------------------


def test_missing_root_named_before_anything_is_built(tmp_path: Path) -> None:
    cfg = compose_train(["data=pastis", "data.root=null", "trainer=cpu"], output_dir=tmp_path)
    with pytest.raises(Exception, match=r"data\.root is not set.*PASTIS_ROOT") as info:
        train(cfg)  # Hydra's instantiate wraps the ValueError, keeping its message
    assert isinstance(info.value, ValueError) or isinstance(info.value.__cause__, ValueError)
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "checkpoints").exists()
    with pytest.raises(ValueError, match=r"not found in data\.root='.*nowhere'.*make_pastis_dataset"):
        PASTISDataModule(root=str(tmp_path / "nowhere"))


def test_missing_modality_folder(copy_of: Path) -> None:
    shutil.rmtree(copy_of / "DATA_S1A")
    with pytest.raises(ValueError, match=r"DATA_S1A/ not found in data\.root=.*data\.modalities=\[s2\]"):
        datamodule(copy_of)
    assert datamodule(copy_of, modalities=["s2", "s1_desc"]).in_channels == {"s2": 10, "s1_desc": 3}


def test_date_count_disagreeing_with_array(copy_of: Path) -> None:
    pid = FIRST_PATCH_ID + 7
    meta = json.loads((copy_of / "metadata.geojson").read_text())
    dates = next(f for f in meta["features"] if f["properties"]["ID_PATCH"] == pid)["properties"]["dates-S1D"]
    t = len(dates)
    edit_metadata(copy_of, pid, "dates-S1D", list(dates.values())[:-1])
    with pytest.raises(
        ValueError, match=rf"Patch {pid}: S1D_{pid}\.npy has T={t} .* lists {t - 1} dates in 'dates-S1D'"
    ):
        datamodule(copy_of)


def test_cross_validation_folds_of_utae(copy_of: Path) -> None:
    assert utae_folds(5) == {"train": [1, 2, 3], "val": [4], "test": [5]}  # the default folds
    assert utae_folds(1) == {"train": [2, 3, 4], "val": [5], "test": [1]}
    dm = datamodule(copy_of, split={"fold": 1})
    assert dm.folds == utae_folds(1) and {r.fold for r in dm.records["test"]} == {1}
    assert {r.fold for r in dm.records["train"]} <= {2, 3, 4}
    with pytest.raises(ValueError, match=r"data.split.fold must be in 1..5"):
        datamodule(copy_of, split={"fold": 6})
    with pytest.raises(ValueError, match=r"data.split.by must be 'folds' for PASTIS"):
        datamodule(copy_of, split={"by": "blocks"})


def test_fold_selecting_no_patch(copy_of: Path) -> None:
    with pytest.raises(ValueError, match=r"data\.split\.folds\.test=\[9\] selects no patch.*\[1, 2, 3, 4, 5\]"):
        datamodule(copy_of, split={"folds": {"train": [1, 2, 3], "val": [4], "test": [9]}})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"modalities": ["s2", "landsat"]}, "'landsat'"),
        ({"labels": {"names": "corine"}}, r"'corine'.*\['pastis', 'synthetic'\]"),
        ({"eval_crop": "center"}, "crop_size"),
        ({"crop_size": 32}, "smaller than data.crop_size=32"),
        ({"norm_stats": "yes"}, "'yes'"),
    ],
)
def test_invalid_settings_raise_clear_errors(generated: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        datamodule(generated, **kwargs)


def test_missing_date_key_and_label_file(copy_of: Path) -> None:
    meta = json.loads((copy_of / "metadata.geojson").read_text())
    del meta["features"][0]["properties"]["dates-S2"]
    (copy_of / "metadata.geojson").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"Patch {FIRST_PATCH_ID} .* no 'dates-S2'"):
        datamodule(copy_of)
    (copy_of / "ANNOTATIONS" / f"TARGET_{FIRST_PATCH_ID + 1}.npy").unlink()
    with pytest.raises(ValueError, match=rf"TARGET_{FIRST_PATCH_ID + 1}\.npy of patch"):
        datamodule(copy_of, modalities=["s1_asc"])


# --- configs, training, writer script -----------------------------------------------------


def test_pastis_config_instantiates(generated: Path, tmp_path: Path) -> None:
    cfg = compose_train(["data=pastis", f"data.root={generated}", "data.crop_size=8"], output_dir=tmp_path)
    dm = instantiate(cfg.data)
    assert isinstance(dm, PASTISDataModule)
    assert dm.modalities == MODS and dm.in_channels == {"s2": 10, "s1_asc": 3, "s1_desc": 3}
    assert dm.num_classes == 20 and dm.ignore_index == 19 and dm.class_names == PASTIS_CLASS_NAMES
    assert dm.train_dataloader().collate_fn.__name__ == "collate_sits"
    cfg = compose_train(["data=pastis_synthetic", f"data.root={generated}"], output_dir=tmp_path)
    dm = instantiate(cfg.data)
    assert dm.class_names == CLASS_NAMES and dm.ignore_index == 0 and dm.crop_size is None


@pytest.mark.parametrize("modalities", [MODS, ["s2"]], ids=["s2+s1a+s1d", "s2"])
def test_train_one_epoch_on_pastis_format(generated: Path, cfg_tiny, modalities: list[str]) -> None:
    with open_dict(cfg_tiny):
        cfg_tiny.data = compose_train(["data=pastis_synthetic"]).data
        cfg_tiny.data.root = str(generated)
        cfg_tiny.data.modalities = modalities
        cfg_tiny.data.batch_size = 3
        cfg_tiny.data.crop_size = 8
        cfg_tiny.test = False
    metrics, objs = train(cfg_tiny)
    assert objs["model"].net.in_channels == {m: {"s2": 10}.get(m, 3) for m in modalities}
    assert objs["trainer"].current_epoch == 1 and np.isfinite(metrics["train/loss"]) and "val/OA" in metrics


def test_writer_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    argv = [str(SCRIPT), str(tmp_path / "out"), "--n-train", "2", "--n-val", "1", "--n-test", "1",
            "--patch-size", "8", "--modalities", "s2", "--dates-format", "list"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    assert "data=pastis_synthetic" in capsys.readouterr().out
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["ANNOTATIONS", "DATA_S2", "metadata.geojson"]
    props = [f["properties"] for f in json.loads((out / "metadata.geojson").read_text())["features"]]
    assert [p["Fold"] for p in props] == [1, 2, 4, 5] and isinstance(props[0]["dates-S2"], list)
    assert np.load(out / "DATA_S2" / f"S2_{FIRST_PATCH_ID}.npy").shape[1:] == (10, 8, 8)
    assert np.load(out / "ANNOTATIONS" / f"TARGET_{FIRST_PATCH_ID}.npy").shape == (3, 8, 8)
    with pytest.raises(ValueError, match="already holds a dataset"):
        write_pastis_dataset(out)
