"""A training run's checkpoint, read back: its config, its model and the inputs it expects.

``eval.py`` and ``predict.py`` rebuild what ``train.py`` trained from two files of the run
directory (``logs/train/runs/<run>/``):

* ``config.yaml``, the resolved training config (:func:`load_run_config`), which names the
  model class and the data;
* ``checkpoints/*.ckpt`` (Lightning) or ``checkpoints/<backend>.joblib`` (a feature
  baseline: ``random_forest``, ``lightgbm``, ``minirocket``, ``multirocket_hydra``), the
  weights or the fitted model (:func:`load_predictor` reads either).

Lightning checkpoints of ``train.py`` hold tensors and plain containers only, so they are
read with PyTorch's safe ``torch.load(weights_only=True)`` (:func:`read_checkpoint`); a
file holding other Python objects is refused with the way to convert it. The
``data_contract`` stored with the weights (training normalisation statistics, bands,
classes; :func:`load_contract`) feeds other files exactly as in training.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from mtan_s1s2.baselines.base import load_baseline
from mtan_s1s2.baselines.module import BaselineModule
from mtan_s1s2.callbacks.auto_backend import trained_backend
from mtan_s1s2.data.datamodule import SITSDataModule
from mtan_s1s2.data.radiometry import Radiometry
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.models.layers.mlp import AUTO_BACKEND
from mtan_s1s2.utils.configs import typed_overrides

log = logging.getLogger(__name__)

Classifier: TypeAlias = SITSClassifierModule | BaselineModule
"""A model ``eval.py`` / ``predict.py`` run: a trained network or a fitted baseline."""


def load_run_config(ckpt_path: str | Path, train_config: str | Path | None = None) -> DictConfig:
    """The resolved config of the training run that wrote ``ckpt_path``.

    The data config of a run saved with older key names (``data.fold``, ``data.label``, ...)
    is read in today's names (:func:`~mtan_s1s2.cli.validate.upgrade_data_config`), saying so.

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
    from mtan_s1s2.cli.validate import upgrade_data_config

    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    if isinstance(cfg.get("data"), DictConfig):
        data, moved = upgrade_data_config(OmegaConf.to_container(cfg.data, resolve=False))  # type: ignore[arg-type]
        if moved:
            log.info("%s uses older data key names, read as today's: %s", path, ", ".join(moved))
            cfg.data = OmegaConf.create(data)
    return cfg


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
            Without it, a run trained with ``mlp=auto`` gets the backend it chose (saved
            in the checkpoint; linear for checkpoints that did not save it).

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
    net = getattr(model, "net", None)
    if mlp is None and getattr(net, "requested_backend", None) == AUTO_BACKEND:
        trained = trained_backend(checkpoint)  # an mlp=auto run: the backend it chose and trained with
        if trained is not None and trained != net.backend:  # type: ignore[union-attr]
            net.set_backend(trained)  # type: ignore[union-attr]
    return model.eval()


def is_lightning_run(run_cfg: DictConfig) -> bool:
    """Whether the run's model is a LightningModule (``.ckpt``), not a feature baseline (``.joblib``)."""
    return issubclass(hydra.utils.get_class(str(run_cfg.model._target_)), L.LightningModule)


def load_predictor(
    run_cfg: DictConfig, ckpt_path: str | Path, mlp: DictConfig | None = None
) -> tuple[Classifier, dict[str, Any] | None]:
    """The run's model, ready to predict, and its ``data_contract``.

    A Lightning checkpoint gives the :class:`~mtan_s1s2.lit_module.SITSClassifierModule`
    (:func:`load_classifier`) and the contract stored with its weights
    (:func:`load_contract`); a baseline's ``<backend>.joblib`` gives a
    :class:`~mtan_s1s2.baselines.module.BaselineModule` and the contract saved with the
    fitted model (None for models saved before it was).

    Args:
        run_cfg: The run's resolved config (:func:`load_run_config`).
        ckpt_path: The ``.ckpt`` or ``.joblib`` file.
        mlp: An ``mlp`` backend for a Lightning checkpoint (not for a baseline).

    Raises:
        ValueError: If the file does not hold the run's model, or ``mlp`` is given for a
            baseline.
    """
    if is_lightning_run(run_cfg):
        return load_classifier(run_cfg, ckpt_path, mlp), load_contract(ckpt_path)
    if mlp is not None:
        raise ValueError(
            f"mlp= selects the MLP backend of an mTAN checkpoint; {ckpt_path} is a {run_cfg.model._target_} model "
            "file. Drop mlp=."
        )
    baseline = load_baseline(ckpt_path)
    return BaselineModule(baseline).eval(), baseline.contract


def check_classes(model: Classifier, datamodule: SITSDataModule) -> None:
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
            f"{model.ignore_index}; set data.labels.ignore_codes as in training."
        )


def check_inputs(model: Classifier, batch: dict[str, Any]) -> None:
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


RADIOMETRY_OVERRIDE = "radiometry_override"
"""Top-level key of ``eval.yaml`` / ``predict.yaml`` confirming a radiometry or normalisation
that contradicts the checkpoint's input record."""


def command_line_overrides() -> list[str]:
    """The overrides of the running Hydra job's command line (``[]`` outside a Hydra run)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return typed_overrides(HydraConfig.get().overrides.task)


def _overridden(overrides: Sequence[str], key: str) -> bool:
    """Whether a command-line override sets ``key`` or a key above or below it.

    Choosing a config group's option (``data=geotiff``) sets no value: the option's own
    values are a preset's, replaced by the checkpoint's like those of the run's config file.
    """
    from mtan_s1s2.cli.config import CONFIG_DIR

    for o in overrides:
        name = o.split("=", 1)[0].lstrip("+~")
        if "." not in name and "/" not in name and (CONFIG_DIR / name).is_dir():
            continue  # a group choice
        if name == key or key.startswith(name + ".") or name.startswith(key + "."):
            return True
    return False


def _plain_mapping(node: Any) -> dict[str, Any]:
    """A config mapping (or None) as a plain ``dict``."""
    if node is None:
        return {}
    value: Any = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
    if not isinstance(value, Mapping):
        raise ValueError(f"Expected a mapping of modalities, got {value!r}.")
    return {str(k): v for k, v in value.items()}


def _radiometry_differences(
    data_cfg: DictConfig, trained: Mapping[str, Mapping[str, Any]], overrides: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(conflicts, replaced)``: the data config's radiometry values that differ from the checkpoint's.

    A difference given on the command line is a conflict; one from a config file is
    replaced by the checkpoint's value. Each is one line naming both values.

    Raises:
        ValueError: On a data config radiometry entry that is not valid.
    """
    conflicts: list[str] = []
    replaced: list[str] = []
    if "radiometry" not in data_cfg:
        return conflicts, replaced
    given = _plain_mapping(data_cfg.radiometry)
    for m, t in trained.items():
        mine = dict(given.get(m) or {})
        base = Radiometry.from_config(t)
        try:
            merged = Radiometry.from_config(mine, base=base).as_dict()
        except ValueError as err:
            raise ValueError(f"data.radiometry.{m}: {err}") from None
        for key in mine:
            if merged[key] == base.as_dict()[key]:
                continue
            line = f"data.radiometry.{m}.{key}={merged[key]!r} but the model was trained on {base.as_dict()[key]!r}"
            (conflicts if _overridden(overrides, f"data.radiometry.{m}.{key}") else replaced).append(line)
    return conflicts, replaced


def _derived_difference(data_cfg: DictConfig, contract: Mapping[str, Any], overrides: Sequence[str]) -> str | None:
    """Set ``data.derived`` to the checkpoint's derived inputs; the line refusing a command-line value that differs.

    A checkpoint whose record has no ``derived`` entry was trained before derived inputs
    existed, i.e. on stored bands only (``[]``).

    Returns:
        None, or the conflict (the command line asks for other derived inputs).
    """
    trained = [str(n) for n in (contract.get("derived") or [])]
    node = data_cfg.get("derived")
    value: Any = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
    given = [str(n).lower() for n in (value or [])]
    if given != trained and _overridden(overrides, "data.derived"):
        return f"data.derived={given} but the model was trained with data.derived={trained}"
    if given != trained:
        log.info(
            "Derived inputs from the checkpoint: data.derived=%s (the data config's %s is not used).", trained, given
        )
    with open_dict(data_cfg):
        data_cfg.derived = trained
    return None


def data_config_of(cfg: DictConfig, run_cfg: DictConfig) -> DictConfig:
    """The data config ``eval.py`` and ``predict.py`` use: the command line's ``data``, else the run's.

    A ``cfg.data`` with a ``_target_`` (a preset, ``data=geotiff``) replaces the run's data
    config; one without (keys added with the run's data, e.g.
    ``+data.split.parcels={source:components}``) is merged over it; none gives the run's.

    Args:
        cfg: The composed ``eval.yaml`` / ``predict.yaml``.
        run_cfg: The training run's config (:func:`load_run_config`).
    """
    given = cfg.get("data")
    chosen = OmegaConf.merge(run_cfg.data, given) if given and "_target_" not in given else given or run_cfg.data
    assert isinstance(chosen, DictConfig)
    return chosen


def apply_input_spec(
    data_cfg: DictConfig,
    contract: Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    override: bool = False,
) -> DictConfig:
    """The data config with the checkpoint's radiometry, derived inputs and normalisation statistics.

    The model saw the stored values turned into inputs by the training's
    ``data.radiometry`` (with what its files declared) and normalised by the training
    statistics; both are in the checkpoint's ``data_contract``. By default they replace the
    data config's: a preset's ``data.radiometry`` (``data=geotiff``'s S2 ``scale: 1.0e-4``)
    is not used where the checkpoint says otherwise (logged). A value given on the command
    line (``data.radiometry.s2.scale=...``, ``data.norm_stats=...``) that contradicts the
    checkpoint is refused, unless ``radiometry_override=true`` confirms it: then the data
    config is used as given (warned). A checkpoint without the record (older runs) keeps
    the data config's values, with a warning.

    The derived inputs (``data.derived``, :mod:`mtan_s1s2.data.derived`) are the
    checkpoint's whenever it has an input record: the network has one input channel per
    derived input, so a command-line ``data.derived`` that differs is always refused
    (``radiometry_override`` does not apply to it).

    Args:
        data_cfg: The resolved data config (not modified).
        contract: The checkpoint's ``data_contract`` (:func:`load_contract`), or None.
        overrides: The command line's overrides (:func:`command_line_overrides`).
        override: ``radiometry_override``.

    Returns:
        A new data config.

    Raises:
        ValueError: On a command-line value contradicting the checkpoint without
            ``radiometry_override=true``, or other derived inputs on the command line; the
            message names both values and the fixes.
    """
    out = OmegaConf.create(OmegaConf.to_container(data_cfg, resolve=True))
    assert isinstance(out, DictConfig)
    if contract is not None and "radiometry" in contract:
        derived_conflict = _derived_difference(out, contract, overrides)
        if derived_conflict:
            raise ValueError(
                "The command line contradicts what the model was trained on (the checkpoint's input record): "
                f"{derived_conflict}. The network takes one input channel per derived input: drop the "
                "data.derived override (the checkpoint's derived inputs are computed)."
            )
    if contract is None or "radiometry" not in contract:
        if "radiometry" in out:
            log.warning(
                "The checkpoint records no input radiometry (trained before it was stored): the data config's "
                "data.radiometry is used; check that it matches the training run's."
            )
        return out
    trained: dict[str, dict[str, Any]] = {str(m): dict(r) for m, r in dict(contract["radiometry"]).items()}
    conflicts, replaced = _radiometry_differences(out, trained, overrides)
    stats = contract.get("norm_stats")
    if stats is not None and "norm_stats" in out and _overridden(overrides, "data.norm_stats"):
        value = OmegaConf.to_container(out.norm_stats) if OmegaConf.is_config(out.norm_stats) else out.norm_stats
        conflicts.append(f"data.norm_stats={value!r} but the model was trained with the checkpoint's statistics")
    if override:
        if conflicts or replaced:
            log.warning(
                "radiometry_override=true: the data config's values are used, not the checkpoint's: %s",
                "; ".join(conflicts + replaced),
            )
        return out
    if conflicts:
        raise ValueError(
            "The command line contradicts what the model was trained on (the checkpoint's input record): "
            + "; ".join(conflicts)
            + ". Drop the override to use the checkpoint's values, or confirm that these files are encoded "
            "differently with radiometry_override=true."
        )
    with open_dict(out):
        if "radiometry" in out:
            radiometry = _plain_mapping(out.radiometry)
            radiometry.update(trained)
            out.radiometry = radiometry
        if stats is not None and "norm_stats" in out:
            out.norm_stats = stats
    for line in replaced:
        log.info("Input radiometry from the checkpoint: %s (the data config's value is not used).", line)
    return out


def check_declared_encoding(scenes: Sequence[Any], contract: Mapping[str, Any] | None, override: bool = False) -> None:
    """Refuse files that declare a scale or offset other than the one the model was trained on.

    A datacube's CF ``scale_factor`` / ``add_offset`` describe its own values; the
    checkpoint's radiometry describes the training files'. When they differ, one of them is
    wrong for these files.

    Args:
        scenes: The scenes to predict (:class:`~mtan_s1s2.data.scene.scene.Scene`).
        contract: The checkpoint's ``data_contract``.
        override: ``radiometry_override`` (the data config's values are used: no check).

    Raises:
        ValueError: Naming the files, both values and the fixes.
    """
    trained = dict((contract or {}).get("radiometry") or {})
    if override or not trained:
        return
    for sc in scenes:
        for m, series in sc.series.items():
            if m not in trained:
                continue
            for key in ("scale", "offset"):
                declared = series.declared.get(key)
                if declared is None or float(declared) == float(trained[m].get(key, 0.0)):
                    continue
                raise ValueError(
                    f"{', '.join(series.sources)} declare{'s' if len(series.sources) == 1 else ''} {m} {key} "
                    f"{float(declared)!r} (CF attribute) but the model was trained on {key} {trained[m].get(key)!r}. "
                    f"If these files hold other values than the training's, confirm their encoding with "
                    f"radiometry_override=true (and data.radiometry.{m}.{key} if needed)."
                )


__all__ = [
    "RADIOMETRY_OVERRIDE",
    "Classifier",
    "apply_input_spec",
    "check_classes",
    "check_declared_encoding",
    "check_inputs",
    "command_line_overrides",
    "data_config_of",
    "is_lightning_run",
    "load_classifier",
    "load_contract",
    "load_predictor",
    "load_run_config",
    "read_checkpoint",
]
