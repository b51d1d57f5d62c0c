"""Predicting a pixel table writes one table (CSV or Parquet), not one 1x1 file per pixel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES, compose_train
from mtan_s1s2.checkpoints import load_contract
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.predict import predict
from mtan_s1s2.cli.train import train

TABLE = Path(__file__).resolve().parents[1] / "fixtures" / "worldcereal" / "tables" / "public_extractions_wide.parquet"


def compose_predict(overrides: list[str], output_dir: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="predict", overrides=["trainer=cpu", "progress=false", *overrides])
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.paths.log_dir = str(output_dir)
    return cfg


@pytest.fixture(scope="module")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("table_run")
    cfg = compose_train(
        ["data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3", "trainer=cpu", "trainer.max_epochs=1",
         "mlp=linear", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES],
        output_dir=base / "train",
    )  # fmt: skip
    _, objs = train(cfg)
    GlobalHydra.instance().clear()
    return {"ckpt": objs["trainer"].checkpoint_callback.best_model_path, "dm": objs["datamodule"]}


@pytest.mark.parametrize("table_file", ["predictions.csv", "pixels.parquet"])
def test_one_table_of_predictions(table_run: dict, tmp_path: Path, table_file: str) -> None:
    dm = table_run["dm"]
    out = predict(compose_predict([f"ckpt_path={table_run['ckpt']}", f"table_file={table_file}"], tmp_path), [])
    assert not (tmp_path / "predictions").exists()  # no PRED_{id}.npy per pixel
    path = tmp_path / table_file
    assert out["table"] == str(path)
    frame = pd.read_parquet(path) if table_file.endswith(".parquet") else pd.read_csv(path)
    test = np.flatnonzero(dm.split == "test")
    assert out["n_pixels"] == len(frame) == len(test)
    assert frame["id"].astype(str).tolist() == [str(i) for i in dm.table.ids[test]]
    assert frame["label"].tolist() == dm.labels[test].tolist()
    names = list(dm.class_names)
    proba = frame[[f"proba_{n}" for n in names[1:]]].to_numpy()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert frame["predicted"].tolist() == (proba.argmax(axis=1) + 1).tolist()  # class 0 is never predicted
    assert frame["predicted_name"].tolist() == [names[k] for k in frame["predicted"]]
    assert frame["label_name"].tolist() == [names[k] for k in frame["label"]]


def test_a_table_preset_without_radiometry_uses_the_checkpoint_scale(table_run: dict, tmp_path: Path) -> None:
    contract = load_contract(table_run["ckpt"])
    assert contract is not None and contract["radiometry"]["s2"]["scale"] == pytest.approx(1e-4)
    run = predict(compose_predict([f"ckpt_path={table_run['ckpt']}"], tmp_path / "run"), [])
    bare = compose_predict(
        [f"ckpt_path={table_run['ckpt']}", "data=worldcereal_table", f"data.path={TABLE}", "data.split.n_folds=3",
         "data.radiometry=null"],
        tmp_path / "bare",
    )  # fmt: skip
    out = predict(bare, [])
    pd.testing.assert_frame_equal(pd.read_csv(out["table"]), pd.read_csv(run["table"]))
    with pytest.raises(
        ValueError, match=r"table_file='p\.txt' must end in one of \['\.csv', '\.csv\.gz', '\.parquet'\]"
    ):
        predict(compose_predict([f"ckpt_path={table_run['ckpt']}", "table_file=p.txt"], tmp_path / "bad"), [])
