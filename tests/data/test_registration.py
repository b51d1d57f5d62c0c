"""Label registration: the offset between label raster and imagery, measured from training labels."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from fixtures.scene_files import LABELS, MINI, MINI_SCENES, times, write_cube
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.date_grid import regular_dates
from mtan_s1s2.data.registration import check_registration, composite_features

REPO = Path(__file__).resolve().parents[2]
CODES = np.array([1200, 1110, 9120])


def write_offset_scene(folder: Path, dy: int, H: int = 32, W: int = 32, cloudy: bool = False) -> None:
    """Labels in 4 x 4 px parcels; the imagery of a parcel lies ``dy`` rows south of its label.

    ``cloudy``: SCL marks clouds over the western half on the second date and over one 4 x 4 px
    corner on every date (pixels without any valid observation).
    """
    rng = np.random.default_rng(0)
    cls = rng.integers(0, 3, size=(H // 4, W // 4)).repeat(4, 0).repeat(4, 1)
    seen = np.roll(cls, dy, axis=0)  # imagery row y shows the parcel labelled at row y - dy
    seen[:dy] = rng.integers(0, 3, size=(dy, W))
    T = 6
    profile = np.array([[1, 2, 3, 3, 2, 1], [3, 3, 1, 1, 2, 2], [1, 1, 1, 3, 3, 3]], float) * 800 + 400
    b02 = (profile[seen].transpose(2, 0, 1) + rng.normal(0, 60, (T, H, W))).astype(np.uint16)
    b08 = (profile[(seen + 1) % 3].transpose(2, 0, 1) + rng.normal(0, 60, (T, H, W))).astype(np.uint16)
    scl = np.full((T, H, W), 4, np.uint8)
    if cloudy:
        scl[1, :, : W // 2] = 9
        scl[:, -4:, -4:] = 9
    write_cube(folder / "S2.nc", {"B02": b02, "B08": b08, "SCL": scl}, times(T, step_days=30))
    write_cube(folder / "label.nc", {"CT": CODES[cls].astype(np.uint16)}, None, scale=None)


def datamodule(root: Path, shift: list[int]) -> DatacubeDataModule:
    return DatacubeDataModule(
        root=str(root), modalities=["s2"], sources={"s2": {"files": ["S2.nc"], "bands": ["B02", "B08"],
        "quality": {"variable": "SCL"}}}, labels={**LABELS, "file": "label.nc"}, reference_date="2020-02-01",
        split={"by": "blocks", "block_size": 8, "n_folds": 4, "fold": 1, "buffer": 0},
        grid={"resolution": 10, "label_shift": shift},
    )  # fmt: skip


def train_pixels(dm: DatacubeDataModule) -> list[np.ndarray]:
    assert dm.split is not None
    return [(s == 0) & (lab != dm.ignore_index) for s, lab in zip(dm.split.splits, dm.split.labels, strict=True)]


def test_the_check_finds_the_offset_and_the_shift_puts_the_labels_back(tmp_path: Path) -> None:
    write_offset_scene(tmp_path / "a", dy=2)
    dm = datamodule(tmp_path, [0, 0])
    check = check_registration(dm.scenes, dm.split.labels, train_pixels(dm), radius=2, block=8, n_estimators=20)
    assert check.offsets.shape == (25, 2) and check.oa.shape == (25, 3)
    assert check.best() == (2, 0) and check.suggested_shift() == (2, 0)
    assert check.at(2, 0).min() > 0.95 and check.at(0, 0).max() < 0.8  # the labels' own pixels mislead
    table = check.table().splitlines()
    assert table[0] == "| dy \\ dx | -2 | -1 | +0 | +1 | +2 |" and table[-1].startswith("| +2 | ")
    fixed = datamodule(tmp_path, [2, 0])
    use = train_pixels(fixed)
    again = check_registration(fixed.scenes, fixed.split.labels, use, radius=1, block=8, n_estimators=20)
    assert again.best() == (0, 0) and again.suggested_shift() == (0, 0)
    assert again.at(0, 0).min() > 0.95


def test_the_features_are_window_means_and_cloudy_pixels_do_not_break_the_check(tmp_path: Path) -> None:
    x = np.arange(4 * 1 * 1 * 2, dtype=np.float32).reshape(4, 1, 1, 2)  # (T, C, h, w)
    valid = np.ones((4, 1, 2), bool)
    valid[1, 0, 0] = False
    x[1, 0, 0, 0] = np.nan  # a masked value is never read
    grid = regular_dates(0.0, 95.0, 30.0)  # 0, 30, 60, 90: windows [-15, 15), [15, 45), [45, 75), [75, 105)
    out = composite_features({"s2": {"x": x, "doy": np.array([0.0, 10, 40, 95]), "mask": valid}}, grid, 30.0)
    assert out.shape == (4, 1, 2)
    # day 10 masked for the first pixel; the window of day 60 is empty: the line from day 40 to day 95
    np.testing.assert_allclose(out[:, 0, 0], [0.0, 4.0, 4.0 + 2 * 20 / 55, 6.0], rtol=1e-6)
    np.testing.assert_allclose(out[:, 0, 1], [2.0, 5.0, 5.0 + 2 * 20 / 55, 7.0], rtol=1e-6)  # day 0 and 10: (1 + 3) / 2
    write_offset_scene(tmp_path / "a", dy=1, cloudy=True)
    dm = datamodule(tmp_path, [0, 0])
    check = check_registration(dm.scenes, dm.split.labels, train_pixels(dm), radius=1, block=8, n_estimators=20)
    assert check.best() == (1, 0) and np.isfinite(check.oa).all()


def test_the_script_prints_the_grid_and_the_override(tmp_path: Path) -> None:
    overrides = [
        "data=worldcereal", f"data.root={MINI}", f"data.scenes=[{','.join(MINI_SCENES)}]", "data.split.block_size=8",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_registration.py"), *overrides,
         "--radius", "1", "--block", "8", "--folds", "2", "--trees", "10"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert re.search(r"^Label registration of 2 scene\(s\), \d+ training pixels of fold 1", out, re.M)
    assert "| dy \\ dx | -1 | +0 | +1 |" in out
    assert len(re.findall(r"^\| [+-]\d \| (\d+\.\d \| ){2}\d+\.\d \|$", out, re.M)) == 3
    assert re.search(r"^best offset \(dy, dx\) = \([+-]\d, [+-]\d\): OA per fold \d+\.\d \d+\.\d", out, re.M)
    assert "data.grid.label_shift" in out
