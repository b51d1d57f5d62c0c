"""The members of an ensemble: which checkpoints, loaded once each, checked to fit together.

``ckpt_path`` of ``eval.py`` and ``predict.py`` names one checkpoint or several
(:func:`resolve_checkpoints`):

* a list, ``ckpt_path=[a.ckpt,b.ckpt,c.ckpt]``;
* a glob, ``ckpt_path='logs/train/multiruns/<sweep>/*/checkpoints/epoch_*.ckpt'``;
* a run directory (the checkpoint its test used: the best one, or with
  ``model.checkpoint_ensemble`` > 1 its kept best ones) or a sweep directory (those of each
  of its jobs), ``ckpt_path=logs/train/multiruns/<sweep>``.

Members are averaged on the same inputs, so they must agree (:func:`check_members_agree`)
on their classes (names, ``ignore_index``), their input record (the checkpoint's
``data_contract``: modalities, bands, radiometry, normalisation statistics, and any derived
inputs it lists) and their data (the run's ``data`` config, loader settings aside): the
error names the member and the key that differs. Their networks, MLP backends and
compilation may differ.
"""

from __future__ import annotations

import glob
import json
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from mtan_s1s2.checkpoints import load_classifier, load_contract, load_run_config
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.run_record import SUMMARY_FILE

log = logging.getLogger(__name__)

LOADER_KEYS: frozenset[str] = frozenset(
    {"batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor"}
)
"""Data-config keys that change how samples are loaded, not which: members may differ in them."""

NORM_RTOL = 1e-5
"""Relative tolerance of the comparison of members' normalisation statistics (float32 rounding)."""


def is_ensemble(ckpt_path: Any) -> bool:
    """Whether ``ckpt_path`` names more than one checkpoint (a list, a glob or a directory)."""
    if isinstance(ckpt_path, (ListConfig, list, tuple)):
        return True
    text = str(ckpt_path)
    return glob.has_magic(text) or Path(text).expanduser().is_dir()


def tested_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints a training run tested: ``summary.json``'s best, else its one ``epoch_*.ckpt``.

    A run trained with ``model.checkpoint_ensemble`` > 1 tested the mean of its kept best
    checkpoints (``summary.json``: ``best.top_k``): all of them, best first.

    Raises:
        ValueError: If the run has no best checkpoint, or several without a record of which.
    """
    summary = run_dir / SUMMARY_FILE
    if summary.is_file():
        try:
            best = json.loads(summary.read_text()).get("best") or {}
        except json.JSONDecodeError:
            best = {}
        top_k = [Path(entry["path"]) for entry in best.get("top_k") or [] if entry.get("path")]
        if len(top_k) > 1 and all(p.is_file() for p in top_k):
            return top_k
        if best.get("path") and Path(best["path"]).is_file():
            return [Path(best["path"])]
    found = sorted((run_dir / "checkpoints").glob("epoch_*.ckpt"))
    if len(found) == 1:
        return found
    if not found:
        raise ValueError(
            f"{run_dir} has no best checkpoint (checkpoints/epoch_*.ckpt): the run did not finish an epoch, or it is "
            "a baseline (random_forest.joblib, not averaged in ensembles). Name the checkpoints in ckpt_path=[...]."
        )
    raise ValueError(
        f"{run_dir} has {len(found)} checkpoints/epoch_*.ckpt and no summary.json naming the best; name the ones to "
        f"average in ckpt_path=[...] (found: {', '.join(p.name for p in found)})."
    )


def _expand(entry: str) -> list[Path]:
    path = Path(entry).expanduser()
    if glob.has_magic(entry):
        found = sorted(Path(p) for p in glob.glob(str(path)))
        if not found:
            raise ValueError(f"ckpt_path={entry!r} matches no file; check the pattern (quote it on the command line).")
        return [p for f in found for p in (_expand(str(f)) if f.is_dir() else [f])]
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(
            f"Checkpoint not found: ckpt_path={str(path.absolute())!r}; give a .ckpt file or a run folder."
        )
    if (path / "checkpoints").is_dir():
        return tested_checkpoints(path)
    from mtan_s1s2.sweep.jobs import find_job_dirs

    jobs = [j for j in find_job_dirs(path) if (j / "checkpoints").is_dir()]
    if not jobs:
        raise ValueError(
            f"{path.absolute()} is neither a run folder (with checkpoints/) nor a sweep folder with such runs; "
            "give checkpoints, run folders or a sweep folder in ckpt_path."
        )
    return [p for j in jobs for p in tested_checkpoints(j)]


def resolve_checkpoints(ckpt_path: Any) -> list[Path]:
    """The checkpoint files ``ckpt_path`` names (see the module docstring), absolute, each once.

    Every checkpoint gets the same weight in the ensemble; when the runs they come from give
    different numbers of checkpoints (a run folder of ``model.checkpoint_ensemble=10`` beside
    one of a single best checkpoint, in a list or in one sweep folder), a warning gives each
    run's count.

    Raises:
        ValueError: If an entry matches nothing, a run has no best checkpoint, or the list is empty.
    """
    entries = list(ckpt_path) if isinstance(ckpt_path, (ListConfig, list, tuple)) else [ckpt_path]
    paths: list[Path] = []
    for entry in entries:
        paths += [p.absolute() for p in _expand(str(entry)) if p.absolute() not in paths]
    if not paths:
        raise ValueError("ckpt_path=[] names no checkpoint; give one or more .ckpt files.")
    counts = Counter(_run_of(p) for p in paths)
    if len(set(counts.values())) > 1:
        log.warning(
            "The runs of ckpt_path give different numbers of checkpoints (%s); every checkpoint has the same "
            "weight, so a run weighs in proportion to its count. For equal weights per run, train the runs with "
            "the same model.checkpoint_ensemble or name one checkpoint of each.",
            ", ".join(f"{run}: {n}" for run, n in counts.items()),
        )
    return paths


def _run_of(ckpt: Path) -> Path:
    """The run folder of a checkpoint (``<run>/checkpoints/x.ckpt``), else the folder holding it."""
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


@dataclass
class Member:
    """One checkpoint of an ensemble.

    Attributes:
        ckpt_path: The checkpoint file.
        run_cfg: Its run's resolved config.
        contract: Its ``data_contract`` (None for checkpoints older than the record).
        model: The loaded module (eval mode, CPU).
    """

    ckpt_path: Path
    run_cfg: DictConfig
    contract: dict[str, Any] | None
    model: SITSClassifierModule

    @property
    def name(self) -> str:
        """``<run folder>/<checkpoint>``, to tell members apart in messages and file names."""
        return f"{self.ckpt_path.parent.parent.name}/{self.ckpt_path.name}"


def load_members(
    ckpt_paths: Sequence[Path], train_config: str | None = None, mlp: DictConfig | None = None
) -> list[Member]:
    """Load every checkpoint once, with its run's config and input record.

    Args:
        ckpt_paths: The checkpoints (:func:`resolve_checkpoints`).
        train_config: One run config for all (rarely right; None = each run's ``config.yaml``).
        mlp: A backend for all members (None = each run's own).

    Raises:
        ValueError: As :func:`~mtan_s1s2.checkpoints.load_run_config` and
            :func:`~mtan_s1s2.checkpoints.load_classifier`, or for a baseline run.
    """
    import hydra
    import lightning as L

    members = []
    for path in ckpt_paths:
        run_cfg = load_run_config(path, train_config)
        if not issubclass(hydra.utils.get_class(run_cfg.model._target_), L.LightningModule):
            raise ValueError(
                f"{path} is a {run_cfg.model._target_} run: ensembles average Lightning checkpoints (.ckpt) of "
                "train.py; evaluate the baseline on its own (eval.py ckpt_path=<run>/checkpoints/random_forest.joblib)."
            )
        members.append(Member(path, run_cfg, load_contract(path), load_classifier(run_cfg, path, mlp)))
    return members


def _first_difference(a: Any, b: Any, key: str) -> str | None:
    """The first dotted key where two plain structures differ (floats to :data:`NORM_RTOL`), or None."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{key}.{k}"
            if (found := _first_difference(a[k], b[k], f"{key}.{k}")) is not None:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return key
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if (found := _first_difference(x, y, f"{key}[{i}]")) is not None:
                return found
        return None
    numbers = isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool | str)
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        fa, fb = float(a), float(b)
        same = (math.isnan(fa) and math.isnan(fb)) or math.isclose(fa, fb, rel_tol=NORM_RTOL, abs_tol=1e-12)
        return None if same else key
    return None if a == b else key


def _lookup(value: Any, path: str) -> Any:
    """The value at ``path`` (``.s2.mean[3]``, ``[2]``) below ``value``; ``<absent>`` where it has none."""
    for part in [p for p in path.replace("]", "").replace("[", ".").split(".") if p]:
        if isinstance(value, Mapping):
            value = value.get(part, "<absent>")
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return "<absent>"
    return value


def _data_config(member: Member) -> dict[str, Any]:
    data = OmegaConf.to_container(member.run_cfg.data, resolve=True) if "data" in member.run_cfg else {}
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items() if k not in LOADER_KEYS}


def check_members_agree(members: Sequence[Member]) -> None:
    """Fail unless every member has the first member's classes, input record and data.

    Compared: the classes (``num_classes``, ``ignore_index``, ``class_names``), the whole
    checkpoint ``data_contract`` (modalities, bands, radiometry, normalisation statistics to
    a relative :data:`NORM_RTOL`, derived inputs) and the run's ``data`` config except
    :data:`LOADER_KEYS`.

    Raises:
        ValueError: Naming the member, the key and both values.
    """
    first = members[0]
    for m in members[1:]:
        checks: list[tuple[str, Any, Any]] = [
            ("model.num_classes", int(first.model.num_classes), int(m.model.num_classes)),
            ("model.ignore_index", int(first.model.ignore_index), int(m.model.ignore_index)),
            ("model.class_names", list(first.model.class_names), list(m.model.class_names)),
            ("data_contract", first.contract or {}, m.contract or {}),
            ("data", _data_config(first), _data_config(m)),
        ]
        for what, a, b in checks:
            key = _first_difference(a, b, what)
            if key is None:
                continue
            shown_a, shown_b = (_lookup(v, key[len(what) :]) for v in (a, b))
            kind = (
                "input record (checkpoint data_contract)"
                if what == "data_contract"
                else "data config"
                if what == "data"
                else "classes"
            )
            raise ValueError(
                f"Ensemble member {m.name} ({m.ckpt_path}) differs from {first.name} in its {kind}: {key} is "
                f"{str(shown_b)[:200]} against {str(shown_a)[:200]}. An ensemble averages models of the same classes, "
                "inputs and data (e.g. the seeds of one fold); leave that checkpoint out of ckpt_path."
            )


__all__ = [
    "LOADER_KEYS",
    "Member",
    "check_members_agree",
    "is_ensemble",
    "load_members",
    "resolve_checkpoints",
    "tested_checkpoints",
]
