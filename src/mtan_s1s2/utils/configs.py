"""Hydra configs as plain data, so that checkpoints load with ``torch.load(weights_only=True)``.

The training module records its optimiser, scheduler and network as Hydra configs (a
``_target_`` and keyword arguments) made of dicts, lists, strings and numbers only:

* :func:`plain`: OmegaConf containers and tuples turned into plain dicts and lists.
* :func:`factory_config`: the config of an optimiser or scheduler factory (a config, a
  class or a ``functools.partial`` of one).
* :func:`build_from_config`: the object such a config describes, called with the
  arguments only known at run time (``params=``, ``optimizer=``).
* :func:`typed_overrides`: a list of Hydra overrides as typed on the command line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


def plain(value: Any) -> Any:
    """``value`` with OmegaConf containers and tuples turned into plain dicts and lists.

    Checkpoints hold only such containers (and tensors), so they load with PyTorch's safe
    ``torch.load(weights_only=True)``.
    """
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def typed_overrides(overrides: Any) -> list[str]:
    """Hydra overrides (``hydra.overrides.task``, ``.hydra/overrides.yaml``) as typed, never resolved.

    An override's value may hold an interpolation (``'x=${paths.output_dir}'``) that only
    resolves in the job's full config; iterating a ``ListConfig`` would resolve it against
    the list's own root and fail, or bake in a value the command did not type.

    Args:
        overrides: A ``ListConfig``, a plain sequence of strings, or None.

    Returns:
        The overrides as strings (``[]`` for None).
    """
    if overrides is None:
        return []
    values = OmegaConf.to_container(overrides, resolve=False) if OmegaConf.is_config(overrides) else overrides
    return [str(o) for o in values or []]


def factory_config(factory: Mapping[str, Any] | Callable[..., Any] | None, key: str) -> dict[str, Any] | None:
    """The plain Hydra config (``_target_`` and keyword arguments) of an optimiser or scheduler factory.

    Args:
        factory: A config with ``_target_`` (``_partial_`` is implied), a class, a
            ``functools.partial`` of one (Hydra's ``_partial_: true`` objects are), or None.
        key: Config key, for the error message (``model.optimizer``).

    Returns:
        E.g. ``{"_target_": "torch.optim.adamw.AdamW", "lr": 0.001}``; None for None and for a
        callable that is neither a class nor a partial of one (it is used, not recorded).

    Raises:
        ValueError: On a mapping without ``_target_``.
    """
    if factory is None:
        return None
    if isinstance(factory, Mapping):
        cfg = plain(factory)
        if "_target_" not in cfg:
            raise ValueError(
                f"{key} must name its class with `_target_` (e.g. {key}._target_=torch.optim.AdamW); got {cfg}."
            )
        cfg.pop("_partial_", None)
        return dict(cfg)
    func: Any = factory
    keywords: dict[str, Any] = {}
    if isinstance(factory, functools.partial) and not factory.args:
        func, keywords = factory.func, dict(factory.keywords)
    if isinstance(func, type):
        return {"_target_": f"{func.__module__}.{func.__qualname__}", **plain(keywords)}
    return None


def build_from_config(cfg: Mapping[str, Any], **kwargs: Any) -> Any:
    """Instantiate a :func:`factory_config` config, calling it with ``kwargs`` (e.g. ``params=``)."""
    import hydra

    factory = hydra.utils.instantiate({**cfg, "_partial_": True})
    return factory(**kwargs)


__all__ = ["build_from_config", "factory_config", "plain"]
