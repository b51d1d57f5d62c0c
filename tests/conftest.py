"""Shared fixtures: random batches following the batch contract, composed Hydra configs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers

register_resolvers()

CHANNELS = {"s2": 10, "s1_asc": 3, "s1_desc": 3}


def random_batch(
    B: int = 2,
    H: int = 6,
    W: int = 5,
    T: dict[str, int] | None = None,
    p_valid: float = 0.7,
    seed: int = 0,
    nan_under_mask: bool = True,
) -> dict:
    """A batch with random values, sorted random DOYs and random per-pixel masks.

    Values under a False mask are NaN (when ``nan_under_mask``), so any leak shows.
    """
    g = torch.Generator().manual_seed(seed)
    T = T or {"s2": 7, "s1_asc": 5, "s1_desc": 6}
    batch: dict = {}
    for m, t in T.items():
        x = torch.randn(B, t, CHANNELS[m], H, W, generator=g)
        mask = torch.rand(B, t, H, W, generator=g) < p_valid
        doy = torch.sort(torch.rand(B, t, generator=g) * 365.0, dim=1).values
        if nan_under_mask:
            x = x.masked_fill(~mask[:, :, None], float("nan"))
        batch[m] = {"x": x, "doy": doy, "mask": mask}
    batch["label"] = torch.randint(0, 11, (B, H, W), generator=g)
    return batch


TINY_MODEL_OVERRIDES = [
    "model.net.d_model=8",
    "model.net.embed_time=8",
    "model.net.num_ref_times=4",
    "model.net.input_hidden=8",
    "model.net.fusion_hidden=16",
    "model.net.head_hidden=[16,16]",
]
"""Hydra overrides shrinking the classifier for tests (see :func:`small_net_kwargs`)."""

QUIET_OVERRIDES = ["trainer.enable_progress_bar=false", "callbacks.progress_bar=null"]
"""Hydra overrides silencing the progress bar in tests."""


def small_net_kwargs() -> dict:
    return dict(
        d_model=8, embed_time=8, num_heads=2, num_ref_times=4, input_hidden=8, fusion_hidden=16, head_hidden=(16, 16)
    )


@pytest.fixture(scope="session", autouse=True)
def decision_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One decision cache for the whole test session, in a temporary folder, never the user's.

    ``callbacks.auto_backend.cache_file`` follows ``$XDG_CACHE_HOME``: the tiny runs of the
    tests time the backends of their shape once, and every later run reads the decision.
    """
    import os

    root = tmp_path_factory.mktemp("xdg_cache")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(root)
    yield root / "mtan_s1s2" / "auto_backend.json"
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def make_batch():
    return random_batch


@pytest.fixture(scope="session")
def config_dir() -> Path:
    return CONFIG_DIR


def compose_train(overrides: list[str] | None = None, output_dir: Path | None = None) -> DictConfig:
    """Compose configs/train.yaml with overrides, outside a Hydra run (``paths.output_dir`` set)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides or [], return_hydra_config=False)
    with open_dict(cfg):
        if output_dir is not None:
            cfg.paths.output_dir = str(output_dir)
            cfg.paths.log_dir = str(output_dir)
    return cfg


def train_composed(overrides: list[str], output_dir: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """Compose configs/train.yaml with ``overrides`` (:func:`compose_train`), run ``train()`` on it.

    Returns ``train()``'s ``(metrics, objects)``; Hydra's global state is cleared afterwards,
    whether training succeeded or raised.
    """
    from mtan_s1s2.cli.train import train

    cfg = compose_train(overrides, output_dir=output_dir)
    try:
        return train(cfg)
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture
def cfg_tiny(tmp_path: Path) -> Iterator[DictConfig]:
    """The real train config shrunk for tests: tiny data, tiny model, 1 epoch, CPU, the linear backend.

    An explicit backend: the tests that train pay no backend timing (``mlp=auto`` is tested
    in ``tests/callbacks/test_auto_backend.py``).
    """
    cfg = compose_train(
        [
            "data=synthetic_tiny",
            "trainer=cpu",
            "mlp=linear",
            "trainer.max_epochs=1",
            *QUIET_OVERRIDES,
            *TINY_MODEL_OVERRIDES,
        ],
        output_dir=tmp_path,
    )
    yield cfg
    GlobalHydra.instance().clear()
