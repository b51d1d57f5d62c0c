"""``data=cawa`` and ``data=sits_mt9`` read tables in the real files' format (written here)."""

from __future__ import annotations

from pathlib import Path

import hydra
import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra

from conftest import compose_train
from fixtures.modis_tables import CAWA_CODES, SITS_BANDS, SITS_LABELS, write_cawa_wide, write_sits_mt9_wide


def _instantiate(preset: str, tmp_path: Path, env: str, monkeypatch: pytest.MonkeyPatch, *extra: str):
    monkeypatch.setenv(env, str(tmp_path))  # the presets find their file under $CAWA_ROOT / $SITS_MT9_ROOT
    cfg = compose_train([f"data={preset}", "data.split.n_folds=3", *extra], output_dir=tmp_path)
    try:
        return hydra.utils.instantiate(cfg.data)
    finally:
        GlobalHydra.instance().clear()


def test_cawa_preset_classes_gaps_dates_and_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = write_cawa_wide(tmp_path / "cawa_croptypes_wide.parquet").set_index("sample_id")
    dm = _instantiate("cawa", tmp_path, "CAWA_ROOT", monkeypatch)
    assert dm.in_channels == {"s2": 1} and dm.seq_len == {"s2": 23}
    assert dm.class_names == ("unlabelled", "cotton", "wheat", "orchard", "rice", "fallow", "maize", "alfalfa",
                              "vineyard")  # fmt: skip
    # 6 rows per code; the multi-crop (wheat-other) and rare (vegetables) rows have no class
    assert sum(dm.split_sizes().values()) == 6 * (len(CAWA_CODES) - 2)
    assert dm.doy_range == (0.0, 352.0)  # doy 1, 17, ..., 353 of the survey year, day 0 = 1 January
    sample = dm.raw_dataset("train")[0]
    row = frame.loc[dm.table.ids[sample["patch_id"]]]
    assert sample["s2"]["doy"][:3].tolist() == [0.0, 16.0, 32.0]
    stored = row[[f"ndvi_{t:02d}" for t in range(23)]].to_numpy(dtype="f4")
    mask = sample["s2"]["mask"][:, 0, 0].numpy()
    np.testing.assert_array_equal(mask, np.isfinite(stored))  # NaN gaps are the only invalid observations
    np.testing.assert_allclose(sample["s2"]["x"][mask, 0, 0, 0], stored[mask], rtol=1e-6)
    assert dm.table.report.invalid["s2"].get("non_finite", 0) == int(np.isnan(frame.filter(like="ndvi_")).sum().sum())
    blocks: dict[int, set[int]] = {}
    for g, s in zip(dm.table.groups.tolist(), dm.split.tolist(), strict=True):
        blocks.setdefault(g, set()).add(s)
    assert len(blocks) == 3 * 8 and all(len(v) == 1 for v in blocks.values())  # one split per 0.1-degree block


def test_sits_mt9_preset_bands_season_and_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = write_sits_mt9_wide(tmp_path / "sits_mt9_wide.parquet").set_index("sample_id")
    dm = _instantiate("sits_mt9", tmp_path, "SITS_MT9_ROOT", monkeypatch)
    assert dm.in_channels == {"s2": 6} and dm.seq_len == {"s2": 23}
    assert sorted(dm.class_names[1:]) == sorted(SITS_LABELS) and sum(dm.split_sizes().values()) == 6 * 9
    # one nominal season from 14 September: 16-day steps, 13 days across New Year (12-19 -> 01-01)
    assert dm.doy_range == (0.0, 349.0)
    sample = dm.raw_dataset("train")[0]
    assert np.diff(sample["s2"]["doy"].numpy()).tolist() == [16.0] * 6 + [13.0] + [16.0] * 15
    row = frame.loc[dm.table.ids[sample["patch_id"]]]
    expected = row[[f"{b}_{t:02d}" for t in range(23) for b in SITS_BANDS]].to_numpy(dtype="f4").reshape(23, 6)
    np.testing.assert_allclose(sample["s2"]["x"][:, :, 0, 0].numpy(), expected, rtol=1e-6)  # date-major columns
    assert bool(sample["s2"]["mask"].all())
    groups: dict[int, set[int]] = {}
    for g, s in zip(dm.table.groups.tolist(), dm.split.tolist(), strict=True):
        groups.setdefault(g, set()).add(s)
    assert all(len(v) == 1 for v in groups.values())


@pytest.mark.parametrize(
    "preset,env,name",
    [("cawa", "CAWA_ROOT", "cawa_croptypes_wide.parquet"), ("sits_mt9", "SITS_MT9_ROOT", "sits_mt9_wide.parquet")],
)
def test_presets_read_their_root_from_the_environment(
    preset: str, env: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env, str(tmp_path / "elsewhere"))
    cfg = compose_train([f"data={preset}"], output_dir=tmp_path)
    GlobalHydra.instance().clear()
    assert cfg.data.path == str(tmp_path / "elsewhere" / name)
    monkeypatch.delenv(env)
    cfg = compose_train([f"data={preset}"], output_dir=tmp_path)
    GlobalHydra.instance().clear()
    assert cfg.data.path.endswith(f"data/{Path(name).stem.rsplit('_', 1)[0]}/{name}")  # data/<set>/ by default
