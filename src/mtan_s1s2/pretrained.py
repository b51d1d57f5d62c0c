"""Encoder checkpoints of ``task=pretrain`` and how ``model.pretrained`` starts a classifier from one.

An encoder checkpoint (``<run>/checkpoints/encoder.pt``, written by
:func:`save_encoder`) holds plain containers and tensors only, so ``torch.load(...,
weights_only=True)`` reads it:

* ``state_dict``: the encoder's tensors (:data:`~mtan_s1s2.models.mtan.ENCODER_MODULES`:
  time embedding, per-modality input embedding, attention and projection, fusion);
* ``encoder_config``: the network keys those tensors depend on
  (:data:`~mtan_s1s2.models.mtan.ENCODER_KEYS`) and the rest of ``model.net``;
* ``input_spec``: what turned stored values into the encoder's inputs: modalities, bands,
  radiometry, normalisation statistics, the data's ``doy_range`` and the reference span
  (``ref_range``, ``time_scale``);
* ``pretraining``: mask ratio, epochs, best ``val/loss`` and the run directory.

Fine-tuning (:func:`prepare_fine_tuning`, called by ``train()`` before the model is built)
checks every encoder key and the bands against the new run, failing with the key, both
values and the fix; normalises the new data with the pretraining statistics; and
:func:`load_encoder_weights` copies the tensors into the fresh classifier (head left
as initialised).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.data.datamodule import SITSDataModule, data_contract
from mtan_s1s2.models.mtan import ENCODER_KEYS, ENCODER_MODULES, MTANClassifier
from mtan_s1s2.models.reconstruction import encoder_state_dict
from mtan_s1s2.utils.configs import plain

log = logging.getLogger(__name__)

ENCODER_FORMAT = "mtan_s1s2.encoder/1"
"""The ``format`` entry of an encoder checkpoint."""
ENCODER_FILE = "encoder.pt"
"""File name of the encoder checkpoint in a pretraining run's ``checkpoints/`` folder."""


def input_spec(datamodule: SITSDataModule, net_config: Mapping[str, Any]) -> dict[str, Any]:
    """What the encoder's inputs were: the data contract without labels, the dates and reference span."""
    contract = data_contract(datamodule)
    return {
        "modalities": contract["modalities"],
        "bands": contract["bands"],
        "radiometry": contract["radiometry"],
        "norm_stats": contract["norm_stats"],
        "doy_range": [float(v) for v in datamodule.doy_range],
        "ref_range": [float(v) for v in net_config["ref_range"]],
        "time_scale": float(net_config.get("time_scale", 365.0)),
    }


def save_encoder(
    path: str | Path,
    net: MTANClassifier,
    net_config: Mapping[str, Any],
    datamodule: SITSDataModule,
    pretraining: Mapping[str, Any] | None = None,
) -> Path:
    """Write the encoder checkpoint of ``net`` (see the module docstring).

    Args:
        path: The file to write.
        net: The pretrained network.
        net_config: Its resolved ``model.net`` (``ref_range`` a list, not ``auto``).
        datamodule: The pretraining data (bands, radiometry, normalisation statistics).
        pretraining: Facts about the run recorded with the weights.

    Returns:
        The file written.
    """
    cfg = plain(net_config)
    encoder_config = {k: v for k, v in cfg.items() if k not in ("_target_", "num_classes", "mlp")}
    record = {
        "format": ENCODER_FORMAT,
        "state_dict": encoder_state_dict(net),
        "encoder_config": encoder_config,
        "input_spec": input_spec(datamodule, cfg),
        "pretraining": plain(dict(pretraining or {})),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(record, tmp)
    tmp.replace(path)
    return path


def load_encoder(path: str | Path) -> dict[str, Any]:
    """Read an encoder checkpoint with ``torch.load(weights_only=True)``.

    Raises:
        FileNotFoundError: If ``path`` does not exist (naming where ``task=pretrain`` writes it).
        ValueError: If the file is not an encoder checkpoint (e.g. a classifier's ``.ckpt``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"model.pretrained={str(path.resolve())!r} does not exist. `python train.py task=pretrain ...` writes "
            f"<run>/checkpoints/{ENCODER_FILE}; pass that file."
        )
    record = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(record, dict) or record.get("format") != ENCODER_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise ValueError(
            f"model.pretrained={str(path.resolve())!r} is not an encoder checkpoint (format {found!r}, expected "
            f"{ENCODER_FORMAT!r}): pass the {ENCODER_FILE} of a task=pretrain run, not a classifier checkpoint "
            "(a classifier's .ckpt is resumed with ckpt_path=...)."
        )
    return record


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    return bool(a == b)


def check_compatible(record: Mapping[str, Any], net_config: Mapping[str, Any], datamodule: SITSDataModule) -> None:
    """Refuse a pretrained encoder that does not fit the classifier or the data.

    Compares every key of :data:`~mtan_s1s2.models.mtan.ENCODER_KEYS` of ``model.net``
    with the encoder's, then the modalities, bands and radiometry of the data with those
    of the pretraining data.

    Raises:
        ValueError: Naming the key, the value here, the encoder's value and the fix.
    """
    enc = record["encoder_config"]
    spec = record["input_spec"]
    where = record.get("pretraining", {}).get("run_dir") or "the pretraining run"
    # an encoder recorded before a key existed was built with that key's default
    defaults = {
        k: p.default
        for k, p in inspect.signature(MTANClassifier).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    for key in ENCODER_KEYS:
        if key not in net_config or (key not in enc and key not in defaults):
            continue
        ours, theirs = plain(net_config[key]), enc.get(key, defaults.get(key))
        if not _same(ours, theirs):
            fix = (
                f"set data.modalities and data.sources to the pretraining data's ({spec['modalities']})"
                if key == "in_channels"
                else f"set model.net.{key}={theirs}"
            )
            raise ValueError(
                f"model.pretrained: model.net.{key} is {ours} here but {theirs} in the pretrained encoder ({where}); "
                f"{fix}, or run task=pretrain again with this model"
            )
    ours_m, theirs_m = list(datamodule.modalities), list(spec["modalities"])
    if ours_m != theirs_m:
        raise ValueError(
            f"model.pretrained: data.modalities is {ours_m} here but {theirs_m} in the pretraining data ({where}); "
            f"set data.modalities={theirs_m}, or pretrain on these modalities."
        )
    bands = {m: list(b) for m, b in getattr(datamodule, "bands", {}).items()}
    for m, theirs_b in spec.get("bands", {}).items():
        if m in bands and bands[m] != list(theirs_b):
            raise ValueError(
                f"model.pretrained: the {m} bands are {bands[m]} here but {list(theirs_b)} in the pretraining data "
                f"({where}); set data.sources.{m}.bands={list(theirs_b)} (same order), or pretrain on these bands."
            )
    radiometry = {m: r.as_dict() for m, r in datamodule.input_radiometry().items()}
    for m, theirs_r in spec.get("radiometry", {}).items():
        ours_r = radiometry.get(m)
        if ours_r is None:
            continue
        for field in sorted(set(ours_r) | set(theirs_r)):
            if not _same(ours_r.get(field), theirs_r.get(field)):
                raise ValueError(
                    f"model.pretrained: the {m} radiometry has {field}={ours_r.get(field)!r} here but "
                    f"{theirs_r.get(field)!r} in the pretraining data ({where}): the encoder saw other units. Set "
                    f"data.radiometry.{m}.{field}={theirs_r.get(field)!r}, or pretrain on data read like this."
                )


def prepare_fine_tuning(cfg: DictConfig, datamodule: SITSDataModule) -> dict[str, Any] | None:
    """Before the classifier is built: check ``model.pretrained`` and adopt its input spec.

    With ``model.pretrained`` set: ``model.net.ref_range: auto`` and ``num_ref_times: auto``
    take the encoder's reference span and count (its reference times are what the weights
    mean), ``model.net.in_channels`` (``???``) the data's; every encoder key and the bands are checked
    (:func:`check_compatible`); the datamodule normalises with the pretraining statistics.

    Args:
        cfg: The composed ``configs/train.yaml`` (``model.net`` filled in place).
        datamodule: The fine-tuning data.

    Returns:
        The encoder checkpoint (:func:`load_encoder`), or None without ``model.pretrained``.

    Raises:
        FileNotFoundError, ValueError: See :func:`load_encoder` and :func:`check_compatible`;
            also when the model is not an mTAN.
    """
    path = cfg.model.get("pretrained")
    if not path:
        return None
    record = load_encoder(path)
    net = cfg.model.net
    if hydra_target(net) != f"{MTANClassifier.__module__}.{MTANClassifier.__name__}":
        raise ValueError(
            f"model.pretrained is an mTAN encoder, but model.net is {net.get('_target_')}; use an mTAN option of the "
            "model group (model=mtan, model=mtan_small_real)."
        )
    spec = record["input_spec"]
    with open_dict(cfg):
        if net.get("ref_range") == "auto":
            net.ref_range = list(spec["ref_range"])
            log.info("model.net.ref_range=auto with model.pretrained: the encoder's reference span %s", net.ref_range)
        if net.get("num_ref_times") == "auto" and "num_ref_times" in record["encoder_config"]:
            net.num_ref_times = int(record["encoder_config"]["num_ref_times"])
            log.info("model.net.num_ref_times=auto with model.pretrained: the encoder's %d", net.num_ref_times)
        if OmegaConf.is_missing(net, "in_channels"):
            net.in_channels = dict(datamodule.in_channels)
    keys = {k: plain(net[k]) for k in ENCODER_KEYS if k in net}  # model.num_classes is still ??? here
    check_compatible(record, keys, datamodule)
    datamodule.use_norm_stats(spec["norm_stats"])
    log.info(
        "model.pretrained=%s: encoder of %d tensors; normalisation statistics of the pretraining data",
        Path(path).resolve(), len(record["state_dict"]),
    )  # fmt: skip
    return record


def hydra_target(node: Any) -> str:
    """The ``_target_`` of a config node ('' when it has none)."""
    return str(node.get("_target_", "")) if isinstance(node, (Mapping, DictConfig)) else ""


def load_encoder_weights(net: MTANClassifier, record: Mapping[str, Any]) -> list[str]:
    """Copy the encoder tensors of ``record`` into ``net``; the head keeps its initialisation.

    Returns:
        The keys loaded.

    Raises:
        ValueError: If a key of the checkpoint is not in ``net`` or a tensor of ``net``'s
            encoder is missing from the checkpoint.
    """
    state = record["state_dict"]
    result = net.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k.split(".", 1)[0] in ENCODER_MODULES]
    if result.unexpected_keys or missing:
        raise ValueError(
            f"model.pretrained: the encoder checkpoint does not match the network: keys not in the network "
            f"{sorted(result.unexpected_keys)[:5]}, encoder keys missing from the checkpoint {sorted(missing)[:5]}. "
            "Pretrain again with this model (python train.py task=pretrain ...)."
        )
    return sorted(state)


__all__ = [
    "ENCODER_FILE",
    "ENCODER_FORMAT",
    "check_compatible",
    "input_spec",
    "load_encoder",
    "load_encoder_weights",
    "prepare_fine_tuning",
    "save_encoder",
]
