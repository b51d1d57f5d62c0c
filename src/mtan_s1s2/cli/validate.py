"""Check the command line and the composed config before anything is built: one line per mistake.

Without this, a value of the wrong type (``data.batch_size=abc``) fails deep inside the
datamodule with a 40-line traceback, and a misspelt key (``data.batchsize=8``) gets
Hydra's advice to append it with ``+``. Here:

* :func:`config_errors` checks every value of the composed config against the signature
  of the class its node instantiates (``_target_``): unknown arguments (with the closest
  valid name) and values whose type does not fit the argument's annotation (``int``,
  ``float``, ``bool``, ``str``, ``None``, ``Literal``, sequences and mappings of those).
  Top-level keys of ``train.yaml``/``eval.yaml``/``predict.yaml`` and the keys they share
  (``configs/shared.yaml``: ``seed``, ``cpu_malloc``, ``matmul_precision``, ``monitor``)
  have their own types (:data:`TOP_LEVEL_TYPES`). :func:`check_config` raises :class:`ConfigError` with them.
* :func:`command_line_error` composes the config of a command line once, before Hydra
  starts the run, and turns Hydra's composition errors for unknown or doubly added keys
  into one line that names the key, the value and the fix (``did you mean
  data.batch_size?``). :func:`validate_command_line` wraps a ``@hydra.main`` entry point
  with it and exits with status 2 on a mistake.
* A key of an older spelling (:data:`RENAMED_KEYS`, e.g. ``data.fold``), on the command
  line or in a config file, gets one line naming its new key (``data.split.fold``). The data
  config a training run saved before the renaming is read in today's names by
  :func:`upgrade_data_config` (``eval.py`` and ``predict.py`` of an older run).
"""

from __future__ import annotations

import collections.abc
import copy
import difflib
import functools
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, NoReturn, TypeVar, Union

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

F = TypeVar("F", bound=Callable[..., Any])

META_KEYS = frozenset({"_target_", "_partial_", "_recursive_", "_convert_", "_args_"})
"""Hydra's instantiation keys, never arguments."""

TOP_LEVEL_TYPES: dict[str, Any] = {
    "task_name": str,
    "train": bool,
    "test": bool,
    "ckpt_path": str | list[str] | None,
    "train_config": str | None,
    "seed": int | None,
    "matmul_precision": Literal["highest", "high", "medium"] | None,
    "cpu_malloc": Literal["tuned", "default"],
    "monitor.metric": str,
    "monitor.mode": Literal["max", "min"],
    "optimized_metric": str | None,
    "batch_size": int | None,
    "num_workers": int | None,
    "split": Literal["train", "val", "test"],
    "probabilities": bool,
    "radiometry_override": bool,
    "table_file": str,
    "precision": Literal["32-true", "bf16-mixed", "16-mixed", "auto"],
    "compile": bool | Literal["auto"],
    "tune_min_run_s": float,
    "skip_empty": bool,
    "chunk_pixels": int | None,
    "prefetch": int,
    "decision_cache": str | None,
}
"""Types of the top-level keys of the entry points' configs (``train.yaml``, ...) and of
``configs/shared.yaml`` (dotted keys: inside a top-level mapping)."""

RESOLVED_BEFORE_USE: dict[str, frozenset[Any]] = {
    "trainer.precision": frozenset({"auto"}),
    "model.net.ref_range": frozenset({"auto"}),
    "model.net.num_ref_times": frozenset({"auto"}),
}
"""Values the entry points replace before instantiation (``precision: auto`` by
:func:`~mtan_s1s2.cli.config.resolve_trainer_precision`, ``ref_range: auto`` and
``num_ref_times: auto`` by :func:`~mtan_s1s2.cli.runners.fill_from_data`), valid whatever the target expects."""

RENAMED_KEYS: dict[str, tuple[str, str]] = {
    "data.fold": ("data.split.fold", ""),
    "data.n_folds": ("data.split.n_folds", ""),
    "data.split_seed": ("data.split.seed", ""),
    "data.folds": ("data.split.folds", ""),
    "data.group_column": ("data.split.group_column", ""),
    "data.group_blocks": ("data.split.blocks", ""),
    "data.split_column": ("data.split.column", "with data.split.by=column"),
    "data.split_names": ("data.split.names", "with data.split.by=column"),
    "data.val_fraction": ("data.split.val_fraction", "with data.split.by=files or column"),
    "data.label_column": ("data.labels.column", ""),
    "data.label.file": ("data.labels.file", ""),
    "data.label.variable": ("data.labels.variable", ""),
    "data.label.band": ("data.labels.band", ""),
    "data.label": ("data.labels.file", "with data.labels.variable (datacube) or data.labels.band (GeoTIFF)"),
    "data.class_names": ("data.labels.names", ""),
    "data.ignore_labels": ("data.labels.ignore_codes", ""),
    "data.ignore_index": ("data.labels.ignore_codes", "its first code is the ignore_index"),
    "callbacks.auto_backend.compile": ("model.compile", "auto | true | false, for every backend"),
    "callbacks.auto_backend.compile_min_run_s": (
        "callbacks.auto_backend.compile_cost_steps",
        "the projected-run rule: a compilation is measured only when steps x compile_max_gain exceeds it",
    ),
}  # fmt: skip
"""Keys of an older spelling: ``old -> (new, note)``. The key and everything under it
moved (``data.group_blocks.size`` -> ``data.split.blocks.size``); the note, if any, says
what else to know when the old key itself is set. ``docs/configuration.md`` lists them."""

RENAMED_VALUES: dict[tuple[str, str], str] = {
    ("data.labels", "true"): "data.labels.read=true",
    ("data.labels", "false"): "data.labels.read=false",
}
"""``(key, value) -> key=value`` of an older spelling whose key still exists with another meaning
(PASTIS's ``data.labels=false``, read no annotations, is now ``data.labels.read=false``)."""

FOLLOWING_KEYS: dict[str, str] = {
    "model.net.num_classes": "model.num_classes",
}
"""Keys that follow another by interpolation (``${..num_classes}``): setting them breaks the
link, so the command line may not (``key -> the key it follows``)."""

_UNKNOWN = object()  # an annotation this module cannot check: any value passes


def upgrade_data_config(data: collections.abc.Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A data config written with the older key names (:data:`RENAMED_KEYS`), in today's names.

    For the ``config.yaml`` a run saved before the renaming, so that ``eval.py`` and
    ``predict.py`` still read its data: every renamed key moves to its new place
    (``fold`` -> ``split.fold``, ``label: {file, variable}`` -> ``labels.file`` and
    ``labels.variable``, PASTIS's ``labels: false`` -> ``labels.read: false``), an explicit
    PASTIS ``ignore_index`` becomes the first of ``labels.ignore_codes``, and a table's fixed
    split gets its ``split.by`` (``column`` with a split column, ``files`` with one file per
    split). A config in today's names comes back unchanged.

    Args:
        data: The ``data`` node of a run's config, as plain containers.

    Returns:
        ``(config, moved)``: the upgraded copy and one ``old -> new`` line per key moved
        (empty when nothing was renamed).
    """
    out: dict[str, Any] = copy.deepcopy(dict(data))
    moved: list[str] = []

    def put(path: str, value: Any) -> None:
        _put(out, path, value)

    if isinstance(out.get("labels"), bool):  # PASTIS: whether to read ANNOTATIONS/
        put("labels", {"read": out.pop("labels")})
        moved.append("data.labels -> data.labels.read")
    if "label" in out:
        label = out.pop("label")
        for key, value in label.items() if isinstance(label, collections.abc.Mapping) else [("file", None)]:
            put(f"labels.{key}", value)
        moved.append("data.label -> data.labels.file")
    ignore_index = out.pop("ignore_index", None)
    for old, (new, _) in RENAMED_KEYS.items():
        key = old.removeprefix("data.")
        if old.startswith("data.") and "." not in key and key in out:
            put(new.removeprefix("data."), out.pop(key))
            moved.append(f"{old} -> {new}")
    if ignore_index is not None:
        codes = list((out.get("labels") or {}).get("ignore_codes") or [])
        put("labels.ignore_codes", [ignore_index, *(c for c in codes if c != ignore_index)])
        moved.append("data.ignore_index -> data.labels.ignore_codes[0]")
    if moved:
        _fixed_split_by(out)
    return out, moved


def _put(node: dict[str, Any], path: str, value: Any) -> None:
    """Set the dotted ``path`` of ``node`` to ``value``, creating mappings (or replacing non-mappings) on the way."""
    *parents, leaf = path.split(".")
    for name in parents:
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
    node[leaf] = value


def _fixed_split_by(data: dict[str, Any]) -> None:
    """``split.by`` of an upgraded table config: ``column`` with a split column, ``files`` with one file per split."""
    split = data.get("split")
    by_files = isinstance(data.get("path"), collections.abc.Mapping)
    if isinstance(split, dict) and "by" not in split:
        if split.get("column"):
            split["by"] = "column"
        elif by_files:
            split["by"] = "files"
    elif by_files and not isinstance(split, dict):
        _put(data, "split.by", "files")


class ConfigError(ValueError):
    """A config value of the wrong type or an unknown key; one line per mistake, each naming the key, value and fix."""


def renamed_key(key: str) -> tuple[str, str] | None:
    """``(new key, note)`` of a key of an older spelling (:data:`RENAMED_KEYS`), else None.

    Args:
        key: A dotted key, e.g. ``data.fold`` or ``data.group_blocks.size`` (a key under a
            renamed one moves with it: ``data.split.blocks.size``).
    """
    for old, (new, note) in RENAMED_KEYS.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old) :], note
    return None


def renamed_key_message(key: str, value: str | None = None) -> str | None:
    """One line telling the new spelling of ``key`` (with ``value``, as the user wrote it), or None.

    ``data.fold=2`` -> ``data.fold=2: data.fold is now data.split.fold; write
    data.split.fold=2 (renamed keys: docs/configuration.md).``
    """
    shown = f"{key}={value}" if value is not None else key
    if value is not None and (key, value.lower()) in RENAMED_VALUES:
        fix = RENAMED_VALUES[(key, value.lower())]
        return f"{shown} is now {fix} (renamed keys: docs/configuration.md)."
    if key in FOLLOWING_KEYS:
        return f"{shown}: {key} follows {FOLLOWING_KEYS[key]}, which train.py fills from the data; drop the override."
    found = renamed_key(key)
    if found is None:
        return None
    new, note = found
    fix = f"{new}={value}" if value is not None else new
    extra = f", {note}" if note and key in RENAMED_KEYS else ""
    return f"{shown}: {key} is now {new}; write {fix}{extra} (renamed keys: docs/configuration.md)."


# ----------------------------------------------------------------------------- types


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _matches(value: Any, tp: Any) -> bool | object:  # noqa: C901  one flat branch per kind of annotation, in one place
    """Whether ``value`` (a composed config value) fits annotation ``tp``; ``_UNKNOWN`` if it cannot be told."""
    if tp is Any or tp is inspect.Parameter.empty or isinstance(tp, (str, TypeVar)):
        return _UNKNOWN
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        results = [_matches(value, a) for a in args]
        return True if any(r is True for r in results) else _UNKNOWN if _UNKNOWN in results else False
    if tp is type(None) or tp is None:
        return value is None
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if isinstance(value, DictConfig) and "_target_" in value:
        return True  # instantiated into whatever it names
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (Path, PurePath, os.PathLike) or origin is os.PathLike:
        return isinstance(value, str)
    sequence_types = (list, tuple, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)
    if tp in sequence_types or origin in sequence_types:
        if not isinstance(value, (list, tuple, ListConfig)):
            return False
        inner = [a for a in args if a is not Ellipsis]
        if origin is tuple and len(inner) > 1:
            if len(inner) != len(value):
                return False
            results = [_matches(v, a) for v, a in zip(value, inner, strict=True)]
        else:
            results = [_matches(v, inner[0]) for v in value] if inner else []
        return False if False in results else True
    mapping_types = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
    if tp in mapping_types or origin in mapping_types:
        if not isinstance(value, (dict, DictConfig)):
            return False
        if len(args) == 2:
            results = [_matches(v, args[1]) for v in _items(value).values()]
            return False if False in results else True
        return True
    return _UNKNOWN


def _items(node: Any) -> dict[str, Any]:
    """The values of a mapping node; interpolations that cannot be resolved here are left out."""
    out: dict[str, Any] = {}
    keys = list(node.keys()) if isinstance(node, (dict, DictConfig)) else []
    for key in keys:
        try:
            if isinstance(node, DictConfig) and OmegaConf.is_missing(node, key):
                continue
            out[str(key)] = node[key]
        except (OmegaConfBaseException, ValueError, KeyError):
            continue  # ${hydra:...} outside a run, a missing env var: checked at run time
    return out


def describe(tp: Any) -> str:
    """A short readable name of an annotation (``int``, ``int or null``, ``one of 'a', 'b'``)."""
    if tp is type(None) or tp is None:
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if tp in (Path, PurePath, os.PathLike) or origin is os.PathLike:
        return "a path"
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable) or tp in (list, tuple):
        inner = [a for a in args if a is not Ellipsis]
        return f"a list of {describe(inner[0])}" if inner else "a list"
    if origin in (dict, collections.abc.Mapping) or tp in (dict, collections.abc.Mapping):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, ListConfig):
        return "list"
    if isinstance(value, DictConfig):
        return "mapping"
    return type(value).__name__


# ------------------------------------------------------------------------- signatures


@functools.lru_cache(maxsize=256)
def _signature(target: str) -> tuple[str, dict[str, inspect.Parameter], dict[str, Any], bool] | None:
    """``(name, parameters, type hints, takes **kwargs)`` of what ``target`` instantiates; None if unknown."""
    from hydra.utils import get_object

    try:
        obj = get_object(target)
    except Exception:
        return None  # Hydra reports an unknown _target_ itself
    func = inspect.unwrap(getattr(obj, "__init__") if isinstance(obj, type) else obj)  # noqa: B009
    try:
        params = dict(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None
    params.pop("self", None)
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # annotations naming what only type checkers import
        hints = {k: p.annotation for k, p in params.items() if not isinstance(p.annotation, str)}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return getattr(obj, "__qualname__", target), params, hints, var_kw


def _value_text(value: Any) -> str:
    if isinstance(value, (DictConfig, ListConfig)):
        return str(OmegaConf.to_container(value, resolve=False))
    return repr(value)


def _argument_error(
    sig: tuple[str, dict[str, inspect.Parameter], dict[str, Any], bool], path: str, key: str, value: Any
) -> str | None:
    """The mistake of one value of a node whose target has signature ``sig``, or None.

    An older spelling gets its new name (:func:`renamed_key_message`); otherwise an unknown
    argument gets the closest valid one and a value of the wrong type the expected one.
    """
    name, params, hints, var_kw = sig
    full = f"{path}.{key}" if path else key
    if not isinstance(value, (DictConfig, ListConfig)) and value in RESOLVED_BEFORE_USE.get(full, ()):
        return None
    if key not in params:
        if (message := renamed_key_message(full, _value_text(value))) is not None or var_kw:
            return message
        close = difflib.get_close_matches(key, list(params), n=1)
        hint = f" (did you mean {path}.{close[0]}?)" if close else ""
        valid = ", ".join(k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL)
        return f"{full}={_value_text(value)}: {name} has no argument {key!r}{hint}; its arguments are: {valid}."
    tp = hints.get(key, params[key].annotation)
    try:
        fits = _matches(value, tp)
    except (OmegaConfBaseException, ValueError, KeyError):
        fits = _UNKNOWN  # an interpolation inside a list that only resolves at run time
    if fits is not False:
        return None
    if (message := renamed_key_message(full, _value_text(value))) is not None:
        return message
    default = params[key].default
    shown = "" if default is inspect.Parameter.empty else f" (default: {default!r})"
    return f"{full}={_value_text(value)} is {_type_name(value)}; {name} expects {describe(tp)} for {key}{shown}."


def _node_errors(node: DictConfig, path: str) -> Iterator[str]:
    target = node.get("_target_") if "_target_" in node else None
    values = _items(node)
    if isinstance(target, str) and (sig := _signature(target)) is not None:
        for key, value in values.items():
            if key not in META_KEYS and (message := _argument_error(sig, path, key, value)) is not None:
                yield message
    for key, value in values.items():
        if isinstance(value, DictConfig) and key not in META_KEYS:
            yield from _node_errors(value, f"{path}.{key}" if path else key)


def config_errors(cfg: DictConfig) -> list[str]:
    """Every type or key mistake of a composed config, one line each (see the module docstring)."""
    from mtan_s1s2.utils.precision import check_precision

    errors: list[str] = []
    top = _items(cfg)
    for key, tp in TOP_LEVEL_TYPES.items():
        parent, _, leaf = key.rpartition(".")
        node = _items(top[parent]) if parent and isinstance(top.get(parent), DictConfig) else top
        if leaf not in node or (parent and parent not in top):
            continue
        value = node[leaf]
        if key == "precision" and isinstance(value, str):
            try:
                check_precision(value, key)  # an older short name (fp32) gets its new name
            except ValueError as err:
                errors.append(str(err))
                continue
        if _matches(value, tp) is False:
            errors.append(f"{key}={_value_text(value)} is {_type_name(value)}; expected {describe(tp)}.")
    if top.get("task_name") == "train" and isinstance(top.get("ckpt_path"), ListConfig):
        errors.append(
            f"ckpt_path={_value_text(top['ckpt_path'])} is a list; train.py resumes one checkpoint (a path or last). "
            "Several checkpoints are averaged by eval.py and predict.py (ckpt_path=[a.ckpt,b.ckpt])."
        )
    for key, value in top.items():
        if isinstance(value, DictConfig) and key != "hydra":
            errors += _node_errors(value, key)
    return list(dict.fromkeys(errors))  # a node reached twice (model.net.mlp is ${mlp}) is reported once


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` on any mistake :func:`config_errors` finds.

    Raises:
        ConfigError: One line per mistake.
    """
    errors = config_errors(cfg)
    if errors:
        raise ConfigError("\n".join(errors))


# ----------------------------------------------------------------------- command line


_SKIP_FLAGS = ("help", "hydra_help", "version", "shell_completion", "info", "config_path", "config_dir",
               "experimental_rerun")  # fmt: skip


def _first_values(overrides: Sequence[str]) -> list[str] | None:
    """The overrides with every sweep replaced by its first value (None if they do not parse)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:
        return None  # Hydra reports its own syntax errors
    out = []
    for override in parsed:
        if override.is_sweep_override():
            try:
                first = next(iter(override.sweep_string_iterator()))
            except Exception:  # glob(), interval(): resolved by the sweeper
                continue
            out.append(f"{override.get_key_element()}={first}")
        else:
            assert override.input_line is not None
            out.append(override.input_line)
    return out


def _compose(config_name: str, overrides: Sequence[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def _unknown_key_message(config_name: str, overrides: list[str], key: str, line: str) -> str:
    """The message for ``line`` setting ``key``, a key the config does not have.

    ``key`` is the unknown key itself: for a mapping given whole (``data.grid={resolution:
    10, extra: 1}``) it is the nested key (``data.grid.extra``), and its valid siblings are
    those of the mapping it was put in.
    """
    rest = [o for o in overrides if o != line]
    parent_path, _, leaf = key.rpartition(".")
    try:
        base = _compose(config_name, rest)
        parent = OmegaConf.select(base, parent_path) if parent_path else base
    except Exception:
        parent = None
    keys = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
    close = difflib.get_close_matches(leaf, keys, n=1)
    where = f"'{parent_path}'" if parent_path else "the config"
    hint = f" (did you mean {parent_path + '.' if parent_path else ''}{close[0]}?)" if close else ""
    valid = f" Its keys are: {', '.join(keys)}." if keys else " It has no keys yet." if parent is not None else ""
    given = line.split("=", 1)[0].lstrip("+~")
    if key != given:  # a new key inside a mapping value: ++ sets the mapping as given
        fix = f"To add new keys on purpose, write ++{line.lstrip('+')}."
    else:
        fix = f"To add a new key on purpose, write +{line.lstrip('+')}."
    return f"Unknown config key in `{line}`: {where} has no key {leaf!r}{hint}.{valid} {fix}"


def command_line_error(argv: Sequence[str], config_name: str) -> str | None:
    """Compose the config of a command line and say what is wrong with it, if anything.

    Args:
        argv: The arguments (without the program name), e.g. ``["data.batchsize=8"]``.
        config_name: The entry point's config (``train``, ``eval``, ``predict``).

    Returns:
        One line per mistake (unknown key, ``+`` on an existing key, wrong type), or None
        when the command line is fine, or for mistakes Hydra explains well itself (an
        unknown config group option lists the valid ones).
    """
    from hydra._internal.utils import get_args_parser
    from hydra.errors import ConfigCompositionException

    args, _ = get_args_parser().parse_known_args(list(argv))
    if any(getattr(args, flag, None) for flag in _SKIP_FLAGS) or args.config_name:
        return None
    renamed = [
        message
        for line in args.overrides
        if (message := renamed_key_message(line.split("=", 1)[0].lstrip("+~"), line.partition("=")[2] or None))
    ]
    if renamed:
        return "\n".join(renamed)
    overrides = _first_values(args.overrides)
    if overrides is None:
        return None
    overrides = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]  # Hydra's own
    try:
        cfg = _compose(config_name, overrides)
    except ConfigCompositionException as err:
        text = str(err)
        if match := re.search(r"Could not override '([^']+)'", text):
            key = match.group(1)
            line = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), key)
            # OmegaConf names the key it refused (full_key), e.g. data.grid.extra in data.grid={...}
            nested = re.search(r"full_key: (\S+)", str(err.__cause__ or ""))
            if nested and nested.group(1).startswith(f"{key}."):
                key = nested.group(1)
            return _unknown_key_message(config_name, overrides, key, line)
        if match := re.search(r"An item is already at '([^']+)'", text):
            key = match.group(1)
            line = next((o for o in overrides if o.split("=", 1)[0].lstrip("+") == key), f"+{key}=...")
            return f"`{line}`: {key} is already in the config; drop the '+': {line.lstrip('+')}."
        return None
    except Exception:
        return None  # Hydra reports the rest (missing group options list the valid ones)
    errors = config_errors(cfg)
    return "\n".join(errors) or None


CONFIG_ERROR_STATUS = 2
"""Exit status of an entry point stopped by a config mistake (argparse's for usage errors)."""


def exit_config_error(error: ConfigError | str) -> NoReturn:
    """Print a config mistake to stderr, one ``Config error: ...`` line per mistake, and exit.

    The one way every entry point (``train.py``, ``eval.py``, ``predict.py`` and the
    command-line check of :func:`validate_command_line`) reports a config mistake.

    Args:
        error: A :class:`ConfigError` or its message (one mistake per line).

    Raises:
        SystemExit: Always, with status :data:`CONFIG_ERROR_STATUS`.
    """
    print("\n".join(f"Config error: {line}" for line in str(error).splitlines()), file=sys.stderr)
    raise SystemExit(CONFIG_ERROR_STATUS) from None


def validate_command_line(config_name: str) -> Callable[[F], F]:
    """Decorate a ``@hydra.main`` entry point: stop at start-up, in one line per mistake.

    Args:
        config_name: The entry point's config name.

    Returns:
        A decorator; the wrapped entry point checks ``sys.argv`` with
        :func:`command_line_error` and exits with status 2 and the message on a mistake.
    """

    def decorate(main: F) -> F:
        @functools.wraps(main)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            message = command_line_error(sys.argv[1:], config_name)
            if message:
                exit_config_error(message)
            return main(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


__all__ = [
    "CONFIG_ERROR_STATUS",
    "FOLLOWING_KEYS",
    "META_KEYS",
    "RENAMED_KEYS",
    "RENAMED_VALUES",
    "TOP_LEVEL_TYPES",
    "ConfigError",
    "check_config",
    "command_line_error",
    "config_errors",
    "describe",
    "exit_config_error",
    "renamed_key",
    "renamed_key_message",
    "upgrade_data_config",
    "validate_command_line",
]
