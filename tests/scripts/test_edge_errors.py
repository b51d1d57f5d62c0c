"""scripts/edge_errors.py: test errors at class edges and in parcel interiors, from real run files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from mtan_s1s2.ensemble.probabilities import PROBABILITIES_FILE, PixelProbabilities

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import edge_errors  # noqa: E402

# one 3 x 4 sample: columns 0-1 maize (1), columns 2-3 grassland (2); columns 1 and 2 are the
# class edge (6 pixels), columns 0 and 3 the interiors (6 pixels). A second sample holds one
# pixel alone, an interior pixel (no labelled neighbour).
ROWS, COLS = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
PATCH = np.r_[np.zeros(12, int), 1]
ROW = np.r_[ROWS.ravel(), 0]
COL = np.r_[COLS.ravel(), 0]
LABEL = np.r_[np.where(COLS.ravel() < 2, 1, 2), 2]


def _write_run(folder: Path, predicted: np.ndarray, seed: int, fold: int) -> Path:
    proba = np.zeros((len(predicted), 3), dtype=np.float32)
    proba[np.arange(len(predicted)), predicted] = 0.9
    proba[np.arange(len(predicted)), 3 - predicted] = 0.1
    PixelProbabilities(PATCH, ROW, COL, LABEL, proba, ["unlabelled", "maize", "grassland"], 0).write(
        folder / PROBABILITIES_FILE
    )
    OmegaConf.save(OmegaConf.create({"seed": seed, "data": {"split": {"fold": fold}}}), folder / "config.yaml")
    return folder


def test_class_edges_are_the_pixels_with_a_neighbour_of_another_class() -> None:
    edge = edge_errors.class_edges(PATCH, ROW, COL, LABEL)
    assert edge[:12].reshape(3, 4).tolist() == [[False, True, True, False]] * 3
    assert not edge[12]  # alone in its sample
    with pytest.raises(ValueError, match="lengths 13, 13, 12, 13"):
        edge_errors.class_edges(PATCH, ROW, COL[:12], LABEL)


def test_errors_per_part_and_paired_deltas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong_a = LABEL.copy()
    wrong_a[[1, 0]] = 2  # one edge pixel (row 0, col 1) and one interior pixel (row 0, col 0) wrong
    wrong_b = LABEL.copy()
    wrong_b[[1, 2]] = [2, 1]  # two edge pixels wrong
    run_a = _write_run(tmp_path / "a" / "s1_f1", wrong_a, seed=1, fold=1)
    _write_run(tmp_path / "b" / "s1_f1", wrong_b, seed=1, fold=1)
    _write_run(tmp_path / "b" / "s2_f1", LABEL, seed=2, fold=1)  # no partner in A: left out of the pairs

    errors = edge_errors.run_errors(run_a)
    assert errors["pixels"] == 13
    assert errors["edge_share"] == pytest.approx(100 * 6 / 13)
    assert errors["all"] == pytest.approx(100 * 2 / 13)
    assert errors["edge"] == pytest.approx(100 / 6)
    assert errors["interior"] == pytest.approx(100 / 7)

    edge_errors.main(["--paired", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert ": 1 pairs" in out
    assert "| edge | 16.67 % | 33.33 % | -16.67 ± nan (0/1) |" in out
    assert "| interior | 14.29 % | 0.00 % | +14.29 ± nan (1/0) |" in out

    edge_errors.main([str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert "2 runs" in out
    assert "| mean | | 46.2 % | 7.69 % | 16.67 % | 0.00 % |" in out


def test_a_folder_without_test_probabilities_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no test_probabilities\.npz"):
        edge_errors.run_errors(tmp_path)
    with pytest.raises(ValueError, match="holds no run folder"):
        edge_errors.sweep_table(tmp_path)


def test_a_run_tested_on_several_ranks_is_read_from_its_rank_files(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "ddp" / "s1_f1", LABEL, seed=1, fold=1)
    whole = PixelProbabilities.read(run / PROBABILITIES_FILE)
    (run / PROBABILITIES_FILE).unlink()
    for rank, part in enumerate((slice(0, 7), slice(7, 13))):
        PixelProbabilities(
            whole.patch_id[part], whole.row[part], whole.col[part], whole.label[part], whole.proba[part],
            whole.class_names, whole.ignore_index,
        ).write(run / f"test_probabilities_rank{rank}.npz")  # fmt: skip
    assert edge_errors.runs_of(tmp_path) == [run]
    errors = edge_errors.run_errors(run)
    assert errors["pixels"] == 13 and errors["all"] == 0.0 and errors["edge_share"] == pytest.approx(100 * 6 / 13)


def _proba(predicted: np.ndarray) -> np.ndarray:
    proba = np.zeros((len(predicted), 3), dtype=np.float16)
    proba[np.arange(len(predicted)), predicted] = 0.9
    proba[np.arange(len(predicted)), 3 - predicted] = 0.1
    return proba


def _write_epochs(run: Path, val_predictions: list[np.ndarray], seed: int = 1, fold: int = 1) -> Path:
    """EpochProbabilities files: the same 13 pixels for val and test; test always right.

    Each epoch writes its pixels in another order (the files are read by sample, row, column).
    """
    folder = run / "epoch_probs"
    folder.mkdir(parents=True)
    for epoch, predicted in enumerate(val_predictions):
        order = np.random.default_rng(epoch).permutation(len(LABEL))
        arrays = {}
        for split, pred in (("val", predicted), ("test", LABEL)):
            arrays |= {
                f"{split}_patch_id": PATCH[order], f"{split}_row": ROW[order], f"{split}_col": COL[order],
                f"{split}_label": LABEL[order], f"{split}_proba": _proba(pred)[order],
            }  # fmt: skip
        np.savez(folder / f"epoch_{epoch:03d}.npz", **arrays)
    OmegaConf.save(OmegaConf.create({"seed": seed, "data": {"split": {"fold": fold}}}), run / "config.yaml")
    return run


def test_validation_errors_of_the_epochs_a_rule_chooses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # three epochs, two wrong validation pixels each: epoch 0 an edge (index 1) and an
    # interior pixel (index 0), epoch 1 two edge pixels (1 and 2), epoch 2 the pixel alone (12)
    # and an interior pixel (3); only pixel 1 is wrong in a majority of the epochs
    preds = []
    for wrong, to in (([1, 0], [2, 2]), ([1, 2], [2, 1]), ([12, 3], [1, 1])):
        p = LABEL.copy()
        p[wrong] = to
        preds.append(p)
    run = _write_epochs(tmp_path / "sweep" / "s1_f1", preds)

    best = edge_errors.run_errors(run, "val", "best_oa")  # the earliest of the tied best epochs: epoch 0
    assert best["pixels"] == 13 and best["edge_share"] == pytest.approx(100 * 6 / 13)
    assert (best["edge"], best["interior"]) == (pytest.approx(100 / 6), pytest.approx(100 / 7))
    mean3 = edge_errors.run_errors(run, "val", "top10_oa")  # the mean of all three epochs
    assert (mean3["all"], mean3["edge"], mean3["interior"]) == (pytest.approx(100 / 13), pytest.approx(100 / 6), 0.0)
    assert edge_errors.run_errors(run, "test", "top10_oa")["all"] == 0.0

    edge_errors.main(["--split", "val", str(tmp_path / "sweep")])  # top10_oa unless --rule says otherwise
    out = capsys.readouterr().out
    assert "val pixels from epoch_probs (top10_oa" in out
    assert "| mean | | 46.2 % | 7.69 % | 16.67 % | 0.00 % |" in out

    other = _write_epochs(tmp_path / "other" / "s1_f1", [LABEL])
    edge_errors.main(["--split", "val", "--rule", "best_oa", "--paired", str(tmp_path / "sweep"), str(other.parent)])
    assert "| interior | 14.29 % | 0.00 % | +14.29 ± nan (1/0) |" in capsys.readouterr().out


def test_validation_errors_need_epoch_files_and_a_rule(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "s1_f1", LABEL, seed=1, fold=1)
    with pytest.raises(ValueError, match="give a rule"):
        edge_errors.run_errors(run, "val")
    with pytest.raises(ValueError, match="has no epoch_probs"):
        edge_errors.run_errors(run, "val", "top10_oa")
    with pytest.raises(ValueError, match="unknown rule 'top_oa'"):
        edge_errors.run_errors(run, "val", "top_oa")
    with pytest.raises(ValueError, match="split must be one of test, val, got 'train'"):
        edge_errors.run_errors(run, "train")
    with pytest.raises(ValueError, match=r"holds no run folder with epoch_probs \(top10_oa"):
        edge_errors.sweep_table(tmp_path, "val", "top10_oa")
    with pytest.raises(ValueError, match=r"holds no run folder with test_probabilities\.npz"):
        edge_errors.paired_table(run, tmp_path / "elsewhere")
