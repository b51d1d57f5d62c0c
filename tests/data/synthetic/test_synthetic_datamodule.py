"""Tests of SyntheticSITSDataModule (mtan_s1s2.data.synthetic.datamodule)."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from mtan_s1s2.data.batch import CLASS_NAMES
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule


def test_attributes_and_train_batch() -> None:
    dm = SyntheticSITSDataModule(preset="tiny", batch_size=3)
    assert dm.modalities == ["s2", "s1_asc", "s1_desc"]
    assert dm.in_channels == {"s2": 10, "s1_asc": 3, "s1_desc": 3}
    assert dm.num_classes == len(CLASS_NAMES) == 11 and dm.ignore_index == 0
    assert dm.class_names == CLASS_NAMES
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert loader.collate_fn.__name__ == "collate_sits"
    batch = next(iter(loader))
    assert batch["s2"]["x"].shape[0] == 3 and batch["s2"]["x"].shape[2:] == (10, 16, 16)
    assert batch["s1_desc"]["mask"].dtype == torch.bool and batch["label"].shape == (3, 16, 16)


def test_sizes_overrides_and_disjoint_splits() -> None:
    dm = SyntheticSITSDataModule(
        preset="tiny",
        n_train=5,
        n_val=3,
        n_test=2,
        patch_size=8,
        modalities=["s2"],
        generator={"s2_revisit_days": 30, "cloud_prob": 0.0},
    )
    dm.setup()
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [5, 3, 2]
    sample = dm.datasets["train"][0]
    assert set(sample) == {"s2", "label", "patch_id"} and sample["label"].shape == (8, 8)
    assert sample["s2"]["doy"].shape[0] <= 13  # 365 / 30 days
    labels = [dm.datasets[s][0]["label"] for s in ("train", "val", "test")]
    assert not torch.equal(labels[0], labels[1]) and not torch.equal(labels[1], labels[2])


def test_worker_settings() -> None:
    dm = SyntheticSITSDataModule(preset="tiny", num_workers=2)
    loader = dm.val_dataloader()
    assert loader.persistent_workers and loader.num_workers == 2
    assert not SyntheticSITSDataModule(preset="tiny").val_dataloader().persistent_workers


def test_hydra_instantiation_with_omegaconf_containers() -> None:
    cfg = OmegaConf.create(
        {
            "_target_": "mtan_s1s2.data.synthetic.datamodule.SyntheticSITSDataModule",
            "preset": "tiny",
            "modalities": ["s2", "s1_asc"],
            "generator": {"s1_revisit_days": [12, 24]},
            "norm_stats": {
                "s2": {"mean": [0.1] * 10, "std": [0.1] * 10},
                "s1_asc": {"mean": [-11.0, -17.0, -6.5], "std": [4.0, 4.0, 3.0]},
            },
        }
    )
    dm = instantiate(cfg)
    assert dm.in_channels == {"s2": 10, "s1_asc": 3}
    batch = next(iter(dm.test_dataloader()))
    assert set(batch) == {"s2", "s1_asc", "label", "patch_id"}
    raw = dm.raw_dataset("test")[0]["s2"]["x"]
    expected = (raw - 0.1) / 0.1  # normalised once, with the configured statistics
    mask = batch["s2"]["mask"][0, : raw.shape[0]]
    assert torch.allclose(
        batch["s2"]["x"][0, : raw.shape[0]][mask[:, None].expand_as(raw)], expected[mask[:, None].expand_as(raw)]
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"preset": "huge"}, r"'huge'.*\['bench', 'default', 'tiny'\]"),
        ({"generator": {"patch_size": 8}}, r"\['patch_size'\].*s2_revisit_days"),
        ({"modalities": ["s2", "landsat"]}, "'landsat'"),
        ({"batch_size": 0}, "batch_size"),
        ({"n_val": -1}, "n_samples"),
    ],
)
def test_invalid_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SyntheticSITSDataModule(**{"preset": "tiny", **kwargs})
