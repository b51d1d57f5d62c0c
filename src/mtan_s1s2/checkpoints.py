"""A training run's checkpoint, read back: its config, its model and the inputs it expects.

``eval.py`` and ``predict.py`` rebuild what ``train.py`` trained from two files of the run
directory (``logs/train/runs/<run>/``):

* ``config.yaml``, the resolved training config (:func:`load_run_config`), which names the
  model class and the data;
* ``checkpoints/*.ckpt`` (Lightning) or ``checkpoints/random_forest.joblib`` (the
  RandomForest baseline), the weights.

Lightning checkpoints of ``train.py`` hold tensors and plain containers only, so they are
read with PyTorch's safe ``torch.load(weights_only=True)`` (:func:`read_checkpoint`); a
file holding other Python objects is refused with the way to convert it. The
``data_contract`` stored with the weights (training normalisation statistics, bands,
classes; :func:`load_contract`) feeds other files exactly as in training.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.lit_module import SITSClassifierModule


def load_run_config(ckpt_path: str | Path, train_config: str | Path | None = None) -> DictConfig:
    """The resolved config of the training run that wrote ``ckpt_path``.

    Args:
        ckpt_path: A checkpoint, normally ``<run dir>/checkpoints/*.ckpt`` (or
            ``random_forest.joblib``).
        train_config: The run's ``config.yaml``; ``None`` = ``<run dir>/config.yaml``.

    Raises:
        ValueError: If the checkpoint or the config file does not exist (the message
            names the path and the key to set).
    """
    ckpt = Path(ckpt_path).expanduser().absolute()
    if not ckpt.is_file():
        raise ValueError(f"Checkpoint not found: ckpt_path={str(ckpt)!r}; give the path of a .ckpt file.")
    path = Path(train_config).expanduser().absolute() if train_config else ckpt.resolve().parent.parent / "config.yaml"
    if not path.is_file():
        raise ValueError(
            f"Training config not found at {path}: the model is rebuilt from the run's config.yaml. "
            "Set train_config=/path/to/run/config.yaml (written by train.py in the run directory)."
        )
    return OmegaConf.load(path)  # type: ignore[return-value]


def read_checkpoint(ckpt_path: str | Path) -> dict[str, Any]:
    """The content of a Lightning checkpoint, read with ``torch.load(weights_only=True)`` on CPU.

    Raises:
        ValueError: If the file holds Python objects the safe loader refuses (the message
            says how to re-save its weights).
    """
    try:
        checkpoint: dict[str, Any] = torch.load(str(ckpt_path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"{Path(ckpt_path).absolute()} holds Python objects that torch.load(weights_only=True) refuses "
            f"({str(err).splitlines()[-1][:200]}); checkpoints of older mtan-s1s2 versions stored Hydra objects. "
            "If you trust the file, re-save its weights with torch.load(path, weights_only=False) and "
            "torch.save({'state_dict': ckpt['state_dict']}, new_path), then evaluate new_path."
        ) from None
    return checkpoint


def load_classifier(run_cfg: DictConfig, ckpt_path: str | Path, mlp: DictConfig | None = None) -> SITSClassifierModule:
    """Rebuild the run's ``SITSClassifierModule`` and load the checkpoint's weights.

    Args:
        run_cfg: The run's resolved config (:func:`load_run_config`).
        ckpt_path: Checkpoint (read by :func:`read_checkpoint`).
        mlp: Optional ``mlp`` config (backend) replacing the run's; weights convert.

    Returns:
        The module in eval mode, on CPU.

    Raises:
        ValueError: If the checkpoint holds Python objects the safe loader refuses, or
            its weights do not fit the run's model.
    """
    model_cfg = OmegaConf.create(OmegaConf.to_container(run_cfg.model, resolve=True))
    if mlp is not None:
        with open_dict(model_cfg):
            model_cfg.net.mlp = mlp
    model: SITSClassifierModule = hydra.utils.instantiate(model_cfg)
    checkpoint = read_checkpoint(ckpt_path)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        raise ValueError(
            f"The weights of {ckpt_path} do not fit the model of its training config ({err}). "
            "Check train_config= points at the run that wrote this checkpoint."
        ) from None
    return model.eval()


def check_classes(model: SITSClassifierModule, datamodule: SITSDataModule) -> None:
    """Fail before reading data if the data's classes do not fit the checkpoint's model.

    Raises:
        ValueError: On a different class count or ignored label.
    """
    if int(datamodule.num_classes) != int(model.num_classes):
        raise ValueError(
            f"The data have {datamodule.num_classes} classes but the checkpoint was trained with "
            f"{model.num_classes}; evaluate with the data config it was trained on (drop data=...)."
        )
    if int(datamodule.ignore_index) != int(model.ignore_index):
        raise ValueError(
            f"The data ignore label {datamodule.ignore_index} but the checkpoint was trained ignoring "
            f"{model.ignore_index}; set data.ignore_labels/data.ignore_index as in training."
        )


def check_inputs(model: SITSClassifierModule, batch: dict[str, Any]) -> None:
    """Fail before running if a batch does not fit the model (modalities, bands).

    Raises:
        ValueError: Naming the modality, the expected shape and the config key.
    """
    model.net.check_inputs({m: batch[m] for m in model.net.modalities if m in batch})


def load_contract(ckpt_path: str | Path) -> dict[str, Any] | None:
    """The ``data_contract`` a checkpoint stores (training statistics, bands, classes), or None.

    Raises:
        ValueError: As :func:`read_checkpoint`.
    """
    contract = (read_checkpoint(ckpt_path).get("hyper_parameters") or {}).get("data_contract")
    return dict(contract) if contract else None


__all__ = ["check_classes", "check_inputs", "load_classifier", "load_contract", "load_run_config", "read_checkpoint"]
