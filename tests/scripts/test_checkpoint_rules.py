"""scripts/checkpoint_rules.py: per-epoch probabilities of a real training run, and the rules scored on them."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from torch.utils.data import DataLoader, TensorDataset

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.callbacks.checkpoint import BestCheckpoint
from mtan_s1s2.cli.train import train
from mtan_s1s2.ensemble.probabilities import PixelProbabilities

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "tests" / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"
sys.path.insert(0, str(REPO / "scripts"))
import checkpoint_rules  # noqa: E402


def _run(out: Path, extra: list[str]) -> dict[str, float]:
    data = ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3", "seed=2"]
    overrides = ["trainer=cpu", "trainer.max_epochs=4", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES, *data, *extra]
    cfg = compose_train(overrides, out)
    try:
        return train(cfg)[0]
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float], dict[str, float]]:
    base = tmp_path_factory.mktemp("checkpoint_rules")
    callback = [
        "+callbacks.epoch_probs._target_=checkpoint_rules.EpochProbabilities",
        f"+callbacks.epoch_probs.output_dir={base / 'with'}",
    ]
    return base / "with", _run(base / "with", callback), _run(base / "without", [])


def test_the_callback_changes_nothing_in_the_run(runs: tuple[Path, dict[str, float], dict[str, float]]) -> None:
    _, with_callback, without = runs
    for key in ("val/OA", "val/loss", "test/OA", "test/loss", "train/loss"):
        assert with_callback[key] == pytest.approx(without[key], abs=1e-6), key


def test_the_rules_reproduce_the_tested_checkpoint(runs: tuple[Path, dict[str, float], dict[str, float]]) -> None:
    run, metrics, _ = runs
    files = sorted((run / "epoch_probs").glob("epoch_*.npz"))
    assert [f.name for f in files] == [f"epoch_{e:03d}.npz" for e in range(4)]
    Pv, yv, blocks = checkpoint_rules.load_split(files, "val")
    Pt, yt, _ = checkpoint_rules.load_split(files, "test")
    assert Pv.shape[:2] == (4, len(yv)) and len(np.unique(blocks)) == len(yv)  # a table: one pixel per sample
    # the epochs' validation OA are those train.py logged; the last one is the run's last val/OA
    assert checkpoint_rules.epoch_oa(Pv, yv, np.arange(len(yv)))[-1] == pytest.approx(metrics["val/OA"], abs=1e-6)
    scores = checkpoint_rules.score_run(run)
    best = json.loads((run / "summary.json").read_text())["best"]
    assert scores["best_oa"]["val"] == pytest.approx(best["score"], abs=1e-6)
    # the test pixels of the best epoch are the run's own test (test_probabilities.npz)
    assert scores["best_oa"]["test"] == pytest.approx(metrics["test/OA"], abs=1e-6)
    assert PixelProbabilities.read(run / "test_probabilities.npz").metrics()["OA"] == pytest.approx(
        scores["best_oa"]["test"], abs=0.02
    )
    # rules that do not choose score the same on the whole split and (on average) on its halves
    assert scores["last"]["val"] == pytest.approx(metrics["val/OA"], abs=1e-6)
    every_epoch = checkpoint_rules.mean_oa(Pt, yt, [0, 1, 2, 3], np.arange(len(yt)))
    assert scores["top20_oa"]["test"] == pytest.approx(every_epoch)
    assert checkpoint_rules.chosen_epochs("best+last", Pv, yv, np.arange(len(yv))) == sorted(
        {int(np.argmax(checkpoint_rules.epoch_oa(Pv, yv, np.arange(len(yv))))), 3}
    )
    with pytest.raises(ValueError, match="unknown rule 'median'"):
        checkpoint_rules.chosen_epochs("median", Pv, yv, np.arange(len(yv)))


def test_a_mixed_ensemble_of_a_run_with_itself_scores_as_the_run(
    runs: tuple[Path, dict[str, float], dict[str, float]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _, _ = runs
    assert checkpoint_rules.run_key(run) == (2, 1)  # seed=2, data.split.fold=1
    single = checkpoint_rules.score_run(run)["top10_oa"]
    mixed = checkpoint_rules.score_mix(run, run)
    for member in ("a", "b", "a+b"):
        for column in ("split_half", "val", "test"):
            assert mixed[member][column] == pytest.approx(single[column], abs=1e-9), (member, column)
    checkpoint_rules.main(["--mix", str(run), str(run), "--json", str(tmp_path / "mix.json")])
    assert "1 runs paired by seed and fold, rule top10_oa" in capsys.readouterr().out
    assert json.loads((tmp_path / "mix.json").read_text())["seed=2,fold=1"]["a+b"]["test"] == pytest.approx(
        single["test"]
    )
    # a run of other pixels (here: other labels) cannot be paired
    other = tmp_path / "other"
    shutil.copytree(run, other)
    for f in (other / "epoch_probs").glob("epoch_*.npz"):
        arrays = dict(np.load(f))
        arrays["val_label"] = arrays["val_label"] + 1
        np.savez(f, **arrays)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="do not share their validation and test pixels"):
        checkpoint_rules.score_mix(run, other)
    with pytest.raises(SystemExit):
        checkpoint_rules.main(["--mix", str(run)])


class _ScriptedScore(L.LightningModule):
    """Logs a given ``val/OA`` at each epoch (one parameter, one batch)."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.scores = scores

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return (self.w * batch[0]).sum()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/OA", self.scores[self.current_epoch])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("scores", "k"),
    [
        ([0.5, 0.5, 0.5, 0.6], 2),  # the earliest of the tied lowest is evicted: epochs 1 and 3 stay
        ([0.7, 0.5, 0.6, 0.5, 0.5, 0.6, 0.7, 0.5, 0.6, 0.6, 0.5, 0.7], 3),
        ([0.7, 0.5, 0.6, 0.5, 0.5, 0.6, 0.7, 0.5, 0.6, 0.6, 0.5, 0.7], 5),
    ],
)
def test_top_k_keeps_the_epochs_lightning_keeps(tmp_path: Path, scores: list[float], k: int) -> None:
    checkpoint = BestCheckpoint(
        dirpath=tmp_path, filename="epoch_{epoch:03d}", monitor="val/OA", mode="max", save_top_k=k
    )
    data = DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1)
    trainer = L.Trainer(
        max_epochs=len(scores),
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
    )
    trainer.fit(_ScriptedScore(scores), data, data)
    kept = sorted(int(re.findall(r"\d+", p.stem)[-1]) for p in tmp_path.glob("*.ckpt"))
    assert len(kept) == k
    assert checkpoint_rules.kept_top_k(scores, k) == kept
    if k == 2:
        assert kept == [1, 3]  # a stable sort by score would keep 0 and 3
