"""python train.py task=pretrain writes an encoder checkpoint; model.pretrained starts a classifier from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.cli.train import train
from mtan_s1s2.data.synthetic import SyntheticSITSDataModule
from mtan_s1s2.models.mtan import ENCODER_MODULES, MTANClassifier
from mtan_s1s2.pretrained import ENCODER_FORMAT, load_encoder, prepare_fine_tuning, save_encoder

TINY = [
    "data=synthetic_tiny",
    "data.n_train=4",
    "data.n_val=2",
    "data.n_test=2",
    "trainer=cpu",
    *QUIET_OVERRIDES,
    *TINY_MODEL_OVERRIDES,
]
FAST = ["trainer.max_epochs=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """One task=pretrain run on the tiny synthetic data: its encoder checkpoint and metrics."""
    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose_train(["task=pretrain", *TINY, *FAST], output_dir=out)
    metrics, objects = train(cfg)
    GlobalHydra.instance().clear()
    return out / "checkpoints" / "encoder.pt", metrics


def test_pretrain_run_writes_an_encoder_checkpoint_with_its_input_spec(pretrained: tuple[Path, dict]) -> None:
    path, metrics = pretrained
    assert torch.isfinite(torch.tensor(metrics["val/loss"])) and metrics["val/loss"] > 0
    assert "test/OA" not in metrics  # no test under task=pretrain
    record = torch.load(path, weights_only=True)
    assert record["format"] == ENCODER_FORMAT
    assert {k.split(".", 1)[0] for k in record["state_dict"]} == set(ENCODER_MODULES)
    assert record["encoder_config"]["d_model"] == 8 and record["encoder_config"]["num_ref_times"] == 4
    spec = record["input_spec"]
    assert spec["modalities"] == ["s2", "s1_asc", "s1_desc"]
    assert set(spec["norm_stats"]) == set(spec["modalities"]) and len(spec["norm_stats"]["s2"]["mean"]) == 10
    assert spec["ref_range"] == [0.0, 1.0] and spec["time_scale"] == 365.0
    assert record["pretraining"]["mask_ratio"] == 0.3


def same_values(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values; 1x1 weights may be (out, in) in one MLP backend and (out, in, 1, 1) in another."""
    return got.numel() == want.numel() and torch.equal(got.reshape(want.shape), want)


def test_fine_tuning_loads_exactly_the_encoder_tensors_and_the_pretraining_statistics(
    pretrained: tuple[Path, dict], tmp_path: Path
) -> None:
    path, _ = pretrained
    record = load_encoder(path)
    cfg = compose_train(
        [*TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=1", "model.freeze_encoder_epochs=1",
         f"model.pretrained={path}", "data.seed=7", "train=false", "test=false"],
        output_dir=tmp_path,
    )  # fmt: skip
    _, objects = train(cfg)
    GlobalHydra.instance().clear()
    net = objects["model"].net
    state = net.state_dict()
    # mlp=auto may pretrain and fine-tune with different backends: 1x1 weights are then (out, in)
    # on one side and (out, in, 1, 1) on the other, with the same values (any backend loads any)
    for key, tensor in record["state_dict"].items():
        assert same_values(state[key], tensor), key
    fresh = MTANClassifier(dict(net.in_channels), net.num_classes, d_model=8, embed_time=8, num_ref_times=4,
                           input_hidden=8, fusion_hidden=16, head_hidden=(16, 16))  # fmt: skip
    assert not torch.equal(state["time_embedding.periodic.bias"], fresh.state_dict()["time_embedding.periodic.bias"])
    stats = objects["datamodule"].norm_stats
    for m, s in record["input_spec"]["norm_stats"].items():
        assert torch.allclose(torch.as_tensor(stats[m].mean, dtype=torch.float32), torch.tensor(s["mean"])), m
    assert objects["model"].hparams["data_contract"]["norm_stats"] == record["input_spec"]["norm_stats"]


def test_freeze_encoder_epochs_trains_the_head_only(pretrained: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = pretrained
    record = load_encoder(path)
    cfg = compose_train(
        [*TINY, "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
         "model.freeze_encoder_epochs=1", f"model.pretrained={path}", "test=false"],
        output_dir=tmp_path,
    )  # fmt: skip
    _, objects = train(cfg)
    GlobalHydra.instance().clear()
    state = objects["model"].net.state_dict()
    for key, tensor in record["state_dict"].items():
        assert same_values(state[key], tensor), key  # frozen for the one epoch


def small_datamodule(**kwargs) -> SyntheticSITSDataModule:
    return SyntheticSITSDataModule(preset="tiny", n_train=2, n_val=1, n_test=1, **kwargs)


def encoder_file(tmp_path: Path, dm: SyntheticSITSDataModule, **net_kwargs) -> Path:
    args = dict(d_model=8, embed_time=8, num_ref_times=4, input_hidden=8, fusion_hidden=16, head_hidden=(16, 16))
    args.update(net_kwargs)
    net = MTANClassifier(dict(dm.in_channels), dm.num_classes, **args)  # type: ignore[arg-type]
    cfg = {"_target_": "mtan_s1s2.models.mtan.MTANClassifier", "in_channels": dict(dm.in_channels),
           "ref_range": [0.0, 1.0], "time_scale": 365.0, "num_heads": 2, **args}  # fmt: skip
    return save_encoder(tmp_path / "encoder.pt", net, cfg, dm, {"run_dir": "/runs/pre"})


def fine_tune_cfg(tmp_path: Path, path: Path, *overrides: str):
    cfg = compose_train([*TINY, f"model.pretrained={path}", *overrides], output_dir=tmp_path)
    GlobalHydra.instance().clear()
    return cfg


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.net.d_model=16",
            r"model.net.d_model is 16 here but 8 in the pretrained encoder \(/runs/pre\); "
            r"set model.net.d_model=8",
        ),
        ("model.net.num_ref_times=8", r"model.net.num_ref_times is 8 here but 4 .*set model.net.num_ref_times=4"),
        ("model.net.ref_range=[0.0,2.0]", r"model.net.ref_range is \[0.0, 2.0\] here but \[0.0, 1.0\]"),
        # a key the encoder's record lacks (saved before it existed): the encoder had its default
        ("model.net.intensity=true", r"model.net.intensity is True here but False .*set model.net.intensity=False"),
    ],
)
def test_a_mismatched_encoder_key_fails_before_training_naming_key_values_and_fix(
    tmp_path: Path, override: str, message: str
) -> None:
    dm = small_datamodule()
    path = encoder_file(tmp_path, dm)
    cfg = fine_tune_cfg(tmp_path, path, override)
    with pytest.raises(ValueError, match=message):
        prepare_fine_tuning(cfg, dm)


def test_other_channels_or_modalities_fail_with_the_fix(tmp_path: Path) -> None:
    path = encoder_file(tmp_path, small_datamodule())
    dm = small_datamodule(modalities=["s2"])
    cfg = fine_tune_cfg(tmp_path, path, "data.modalities=[s2]")
    with pytest.raises(ValueError, match=r"model.net.in_channels is \{'s2': 10\} here but \{'s2': 10, 's1_asc': 3, "
                       r"'s1_desc': 3\} .*set data.modalities and data.sources"):  # fmt: skip
        prepare_fine_tuning(cfg, dm)


def test_other_bands_fail_with_the_fix(tmp_path: Path) -> None:
    dm = small_datamodule()
    path = encoder_file(tmp_path, dm)
    record = torch.load(path, weights_only=True)
    record["input_spec"]["bands"] = {"s2": ["B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12"]}
    torch.save(record, path)
    dm.bands = {"s2": ("B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B12", "B11")}  # type: ignore[attr-defined]
    cfg = fine_tune_cfg(tmp_path, path)
    with pytest.raises(ValueError, match=r"the s2 bands are .*'B12', 'B11'\] here but .*'B11', 'B12'\] in the "
                       r"pretraining data .*set data.sources.s2.bands="):  # fmt: skip
        prepare_fine_tuning(cfg, dm)


def test_a_classifier_checkpoint_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    dm = small_datamodule()
    with pytest.raises(FileNotFoundError, match=r"does not exist. `python train.py task=pretrain ...` writes"):
        prepare_fine_tuning(fine_tune_cfg(tmp_path, tmp_path / "nope.pt"), dm)
    torch.save({"state_dict": {}, "hyper_parameters": {}}, tmp_path / "epoch_001.ckpt")
    with pytest.raises(ValueError, match=r"is not an encoder checkpoint .*not a classifier checkpoint"):
        prepare_fine_tuning(fine_tune_cfg(tmp_path, tmp_path / "epoch_001.ckpt"), dm)


def test_ref_range_auto_takes_the_encoders_span(tmp_path: Path) -> None:
    dm = small_datamodule()
    path = encoder_file(tmp_path, dm)
    cfg = fine_tune_cfg(tmp_path, path, "model.net.ref_range=auto")
    prepare_fine_tuning(cfg, dm)
    assert list(cfg.model.net.ref_range) == [0.0, 1.0]
    with open_dict(cfg):
        cfg.model.pretrained = None
    assert prepare_fine_tuning(cfg, dm) is None


def test_num_ref_times_auto_takes_the_encoders_count(tmp_path: Path) -> None:
    dm = small_datamodule()
    path = encoder_file(tmp_path, dm, num_ref_times=5)  # the recipe's auto would give another count
    cfg = fine_tune_cfg(tmp_path, path, "model.net.num_ref_times=auto", "model.net.ref_range=auto")
    prepare_fine_tuning(cfg, dm)
    assert cfg.model.net.num_ref_times == 5 and list(cfg.model.net.ref_range) == [0.0, 1.0]
