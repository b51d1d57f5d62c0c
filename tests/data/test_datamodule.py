"""The base SITS datamodule: argument checks, setup by stage, loaders, normalisation applied once."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset

from mtan_s1s2.data.batch import Sample
from mtan_s1s2.data.datamodule import SITSDataModule


class _Constant(Dataset[Sample]):
    """``n`` samples whose S1 values are the sample index; the last date is invalid (NaN)."""

    def __init__(self, n: int, whole: bool) -> None:
        self.n, self.whole = n, whole

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Sample:
        x = torch.full((3, 2, 4, 4), float(i))
        x[-1] = float("nan")
        mask = torch.ones(3, 4, 4, dtype=torch.bool)
        mask[-1] = False
        size = 4 if self.whole else 2
        return {
            "s1_asc": {"x": x[..., :size, :size], "doy": torch.arange(3.0), "mask": mask[..., :size, :size]},
            "label": torch.ones(size, size, dtype=torch.long),
            "patch_id": i,
        }


class _Source(SITSDataModule):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.modalities, self.in_channels = ["s1_asc"], {"s1_asc": 2}
        self.num_classes, self.ignore_index, self.class_names = 3, 0, ("none", "a", "b")
        self.built: list[tuple[str, bool]] = []

    def build_dataset(self, split: str, whole: bool = False) -> _Constant:
        self.built.append((split, whole))
        return _Constant({"train": 4, "val": 2, "test": 3}[split], whole)


def test_setup_by_stage_and_loaders() -> None:
    dm = _Source(batch_size=2)
    dm.setup("fit")
    assert set(dm.datasets) == {"train", "val"}
    dm.setup("test")
    assert set(dm.datasets) == {"train", "val", "test"}
    assert [len(b["label"]) for b in dm.val_dataloader()] == [2]
    assert dm.train_dataloader().dataset is dm.datasets["train"]
    batch = next(iter(dm.predict_dataloader()))  # whole samples of predict_split (test)
    assert batch["label"].shape == (2, 4, 4) and batch["patch_id"].tolist() == [0, 1]
    assert ("test", True) in dm.built


def test_auto_stats_use_the_raw_training_split_and_are_applied_once() -> None:
    dm = _Source(batch_size=4, norm_stats="auto")
    stats = dm.norm_stats
    assert stats is not None and dm.built[0] == ("train", True)  # whole raw samples, valid dates only
    assert stats["s1_asc"].mean.tolist() == [1.5, 1.5] and stats["s1_asc"].n_valid == 4 * 2 * 16
    x = next(iter(dm.test_dataloader()))["s1_asc"]["x"][:, :2]  # the valid dates
    expected = (torch.arange(3.0)[:, None, None, None, None] - 1.5) / stats["s1_asc"].std[0]
    assert torch.allclose(x, expected.expand_as(x))


def test_configured_stats_are_checked() -> None:
    with pytest.raises(ValueError, match="needs 2 means"):
        _ = _Source(norm_stats={"s1_asc": {"mean": [0.0], "std": [1.0]}}).norm_stats
    raw = _Source(norm_stats=None)
    assert raw.norm_stats is None and next(iter(raw.val_dataloader()))["s1_asc"]["x"][1, 0, 0, 0, 0] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"num_workers": -1}, "num_workers"),
        ({"predict_split": "holdout"}, "predict_split"),
        ({"norm_stats": "yes"}, "'yes'"),
    ],
)
def test_bad_arguments_raise_before_any_data_is_read(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _Source(**kwargs)


def test_unknown_split_is_named() -> None:
    with pytest.raises(ValueError, match=r"'holdout'.*\['train', 'val', 'test'\]"):
        _Source().dataset("holdout")


def test_use_norm_stats_replaces_the_configured_statistics() -> None:
    dm = _Source(batch_size=2, norm_stats="auto")
    assert dm.norm_stats_config == "auto" and dm.norm_stats is not None
    dm.setup("fit")
    stats = {"s1_asc": {"mean": [1.0, 1.0], "std": [2.0, 2.0]}}  # e.g. a checkpoint's training statistics
    dm.use_norm_stats(stats)
    assert dm.norm_stats_config == stats and not dm.datasets  # datasets are rebuilt with the new statistics
    x = next(iter(dm.val_dataloader()))["s1_asc"]["x"]  # samples 0 and 1: (i - 1) / 2 on the valid dates
    assert x[0, 0, 0, 0, 0].item() == -0.5 and x[1, 0, 0, 0, 0].item() == 0.0
    dm.use_norm_stats(None)
    assert dm.norm_stats is None and next(iter(dm.val_dataloader()))["s1_asc"]["x"][1, 0, 0, 0, 0] == 1.0
