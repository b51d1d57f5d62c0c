"""The WorldCereal presets read the real tables (small extracts in tests/fixtures/worldcereal, MIT)."""

from __future__ import annotations

from pathlib import Path

import hydra
import numpy as np
import pandas as pd
from hydra.core.global_hydra import GlobalHydra

from conftest import compose_train

TABLES = Path(__file__).resolve().parents[2] / "fixtures" / "worldcereal" / "tables"


def _instantiate(preset: str, tmp_path: Path):
    cfg = compose_train([f"data={preset}", f"data.path={TABLES / (preset_file[preset])}"], output_dir=tmp_path)
    try:
        return hydra.utils.instantiate(cfg.data)
    finally:
        GlobalHydra.instance().clear()


preset_file = {"worldcereal_table": "public_extractions_wide.parquet", "worldcereal_long": "flanders_long.parquet"}


def test_wide_preset_units_dates_labels_and_groups(tmp_path: Path) -> None:
    dm = _instantiate("worldcereal_table", tmp_path)
    assert dm.in_channels == {"s2": 10, "s1": 2} and dm.seq_len == {"s2": 12, "s1": 12}
    assert dm.class_names[1:3] == ("sorghum", "maize") and dm.num_classes == 8
    assert sum(dm.split_sizes().values()) == 119  # the built_up pixel is ignored
    frame = pd.read_parquet(TABLES / preset_file["worldcereal_table"]).set_index("sample_id")
    sample = dm.raw_dataset("train")[0]
    row = frame.loc[dm.table.ids[sample["patch_id"]]]
    assert sample["s2"]["doy"][:3].tolist() == [0.0, 31.0, 62.0]  # monthly from 2016-12-01
    for t in range(12):
        dn_vv = float(row[f"SAR-VV-ts{t}-20m"])
        if bool(sample["s1"]["mask"][t, 0, 0]):
            np.testing.assert_allclose(sample["s1"]["x"][t, 0, 0, 0], 20 * np.log10(dn_vv) - 83, rtol=1e-5)
        else:
            assert dn_vv == 65535
        dn_b02 = float(row[f"OPTICAL-B02-ts{t}-10m"])
        if bool(sample["s2"]["mask"][t, 0, 0]):
            np.testing.assert_allclose(sample["s2"]["x"][t, 0, 0, 0], dn_b02 * 1e-4, rtol=1e-5)
    # pixels of one 0.1-degree block share a split
    blocks = {}
    for g, s in zip(dm.table.groups.tolist(), dm.split.tolist(), strict=True):
        blocks.setdefault(g, set()).add(s)
    assert all(len(v) == 1 for v in blocks.values())
    assert dm.write_split(tmp_path).exists()


def test_long_preset(tmp_path: Path) -> None:
    dm = _instantiate("worldcereal_long", tmp_path)
    assert dm.in_channels == {"s2": 9, "s1": 2} and dm.seq_len == {"s2": 16, "s1": 16}
    assert dm.doy_range == (0.0, 457.0)  # 2020-08-01 .. 2021-11-01
    assert dm.class_names[1] == "non_cropland" and sum(dm.split_sizes().values()) == 30
    report = dm.table.report
    assert report.invalid["s2"].get("nodata", 0) > 0  # 65535 fills are masked
