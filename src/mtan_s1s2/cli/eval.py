"""``python eval.py ckpt_path=...``: test metrics of a trained checkpoint.

The model is rebuilt from the training run's ``config.yaml`` (next to its
``checkpoints/`` folder, or ``train_config=...``) and loaded with the checkpoint's weights;
the data are the run's data config (same split, crop and normalisation, so the metrics
are those the run logged) unless ``data=...`` is given. A checkpoint of any MLP backend
loads into any other (``mlp=conv``); by default the run's own backend is used.

Outputs in the run directory (``logs/eval/runs/<date>_<time>_<host>-<pid>/``):
``metrics.json`` (OA, macro-F1, mIoU, kappa, loss), ``test_per_class.csv`` (support, F1,
IoU per class), ``test_confusion_matrix.csv`` and ``.png`` (rows = reference class,
columns = predicted class), ``config.yaml``.

``main`` carries ``@hydra.main``; :func:`evaluate` does the work so tests can call it.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.cli.config import CONFIG_DIR, prepare_run, register_resolvers

log = logging.getLogger(__name__)

register_resolvers()


def load_run_config(ckpt_path: str | Path, train_config: str | Path | None = None) -> DictConfig:
    """The resolved config of the training run that wrote ``ckpt_path``.

    Args:
        ckpt_path: A checkpoint, normally ``<run dir>/checkpoints/*.ckpt``.
        train_config: The run's ``config.yaml``; ``None`` = ``<run dir>/config.yaml``.

    Raises:
        ValueError: If the checkpoint or the config file does not exist (the message
            names the path and the key to set).
    """
    ckpt = Path(ckpt_path).expanduser()
    if not ckpt.is_file():
        raise ValueError(f"Checkpoint not found: ckpt_path={str(ckpt_path)!r}; give the path of a .ckpt file.")
    path = Path(train_config).expanduser() if train_config else ckpt.resolve().parent.parent / "config.yaml"
    if not path.is_file():
        raise ValueError(
            f"Training config not found at {path}: the model is rebuilt from the run's config.yaml. "
            "Set train_config=/path/to/run/config.yaml (written by train.py in the run directory)."
        )
    return OmegaConf.load(path)  # type: ignore[return-value]


def load_classifier(
    run_cfg: DictConfig, ckpt_path: str | Path, output_dir: str | Path, mlp: DictConfig | None = None
) -> L.LightningModule:
    """Rebuild the run's ``SITSClassifierModule`` and load the checkpoint's weights.

    Args:
        run_cfg: The run's resolved config (:func:`load_run_config`).
        ckpt_path: Checkpoint (a trusted file: Lightning checkpoints are pickles).
        output_dir: Where the module writes its test CSVs.
        mlp: Optional ``mlp`` config (backend) replacing the run's; weights convert.

    Returns:
        The module in eval mode, on CPU.
    """
    model_cfg = OmegaConf.create(OmegaConf.to_container(run_cfg.model, resolve=True))
    with open_dict(model_cfg):
        model_cfg.output_dir = str(output_dir)
        if mlp is not None:
            model_cfg.net.mlp = mlp
    model: L.LightningModule = hydra.utils.instantiate(model_cfg)
    checkpoint = torch.load(str(ckpt_path), map_location="cpu", weights_only=False)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        raise ValueError(
            f"The weights of {ckpt_path} do not fit the model of its training config ({err}). "
            "Check train_config= points at the run that wrote this checkpoint."
        ) from None
    return model.eval()


def build_datamodule(cfg: DictConfig, run_cfg: DictConfig) -> L.LightningDataModule:
    """The datamodule of ``cfg.data`` if given, else the run's (same split and crop)."""
    data_cfg = cfg.get("data") or run_cfg.data
    data_cfg = OmegaConf.create(OmegaConf.to_container(data_cfg, resolve=True))
    overrides = {k: cfg.get(k) for k in ("batch_size", "num_workers") if cfg.get(k) is not None}
    with open_dict(data_cfg):
        data_cfg.update(overrides)
    log.info("Instantiating datamodule <%s>", data_cfg._target_)
    return hydra.utils.instantiate(data_cfg)


def check_classes(model: L.LightningModule, datamodule: L.LightningDataModule) -> None:
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


def check_inputs(model: L.LightningModule, batch: dict[str, Any]) -> None:
    """Fail before running if a batch does not fit the model (modalities, bands).

    Raises:
        ValueError: Naming the modality, the expected shape and the config key.
    """
    model.net.check_inputs({m: batch[m] for m in model.net.modalities if m in batch})


def read_confusion_csv(path: Path) -> tuple[list[str], np.ndarray]:
    """Class names and the ``(K, K)`` matrix of a ``test_confusion_matrix.csv``."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    names = rows[0][1:]
    matrix = np.array([[int(v) for v in row[1:]] for row in rows[1:]], dtype=np.int64)
    return names, matrix


def plot_confusion_matrix(
    matrix: np.ndarray, class_names: list[str], path: Path, ignore_index: int | None = None
) -> None:
    """Save the confusion matrix as a PNG: colours = share of each reference class (row),
    numbers = pixel counts. The ``ignore_index`` class is left out when it is empty."""
    from matplotlib.figure import Figure

    keep = np.ones(len(class_names), dtype=bool)
    if ignore_index is not None and 0 <= ignore_index < len(class_names):
        if matrix[ignore_index].sum() == 0 and matrix[:, ignore_index].sum() == 0:
            keep[ignore_index] = False
    m = matrix[np.ix_(keep, keep)]
    names = [n for n, k in zip(class_names, keep) if k]
    share = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    k = len(names)
    fig = Figure(figsize=(max(5.0, 0.55 * k + 2.5), max(4.5, 0.5 * k + 2.0)))
    ax = fig.subplots()
    image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="share of the reference class")
    ax.set_xticks(range(k), names, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(k), names, fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("reference class")
    if k <= 25:
        for i in range(k):
            for j in range(k):
                if m[i, j]:
                    ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize=6,
                            color="white" if share[i, j] > 0.5 else "black")  # fmt: skip
    oa = np.trace(m) / max(m.sum(), 1)
    ax.set_title(f"Confusion matrix (pixels), OA = {oa:.4f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def evaluate(cfg: DictConfig) -> tuple[dict[str, float], dict[str, Any]]:
    """Test metrics of ``cfg.ckpt_path`` (see the module docstring).

    Args:
        cfg: The composed ``configs/eval.yaml``.

    Returns:
        ``(metrics, objects)``: the test metrics (``test/OA``, ``test/F1``, ``test/mIoU``,
        ``test/kappa``, ``test/loss``) and the ``datamodule``, ``model``, ``trainer``.
    """
    run_cfg = load_run_config(cfg.ckpt_path, cfg.get("train_config"))
    output_dir = prepare_run(cfg)

    datamodule = build_datamodule(cfg, run_cfg)
    model = load_classifier(run_cfg, cfg.ckpt_path, output_dir, cfg.get("mlp"))
    check_classes(model, datamodule)
    datamodule.setup("test")
    check_inputs(model, next(iter(datamodule.test_dataloader())))
    log.info("Evaluating %s (backend %s) on the test split", cfg.ckpt_path, model.net.backend)

    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, logger=False, callbacks=[], default_root_dir=str(output_dir)
    )
    (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    trainer.test(model=model, datamodule=datamodule)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}

    names, matrix = read_confusion_csv(output_dir / "test_confusion_matrix.csv")
    plot_confusion_matrix(matrix, names, output_dir / "test_confusion_matrix.png", int(model.ignore_index))
    record = {
        "ckpt_path": str(Path(cfg.ckpt_path).resolve()),
        "backend": model.net.backend,
        "split": "test",
        "n_patches": len(datamodule.test_dataloader().dataset),
        "metrics": dict(sorted(metrics.items())),
    }
    (output_dir / "metrics.json").write_text(json.dumps(record, indent=2))
    log.info("Test metrics: %s", {k: round(v, 4) for k, v in sorted(metrics.items())})
    log.info("Outputs in %s", output_dir)
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="eval")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns the test overall accuracy."""
    metrics, _ = evaluate(cfg)
    return metrics.get("test/OA")


__all__ = [
    "build_datamodule",
    "check_classes",
    "check_inputs",
    "evaluate",
    "load_classifier",
    "load_run_config",
    "main",
    "plot_confusion_matrix",
]
