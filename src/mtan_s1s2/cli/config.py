"""Where the Hydra configs live, and the resolvers they use."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from omegaconf import OmegaConf


def _find_config_dir() -> Path:
    env = os.environ.get("MTAN_S1S2_CONFIG_DIR")
    if env:
        return Path(env).resolve()
    # Editable install / source checkout: <repo>/src/mtan_s1s2/cli/config.py -> <repo>/configs
    return Path(__file__).resolve().parents[3] / "configs"


CONFIG_DIR: Path = _find_config_dir()
"""The ``configs/`` folder (override with the ``MTAN_S1S2_CONFIG_DIR`` environment variable)."""

_PROCESS_RUN_ID = f"{socket.gethostname().split('.')[0]}-{os.getpid()}"


def run_id() -> str:
    """``host-pid`` of this process: with a timestamp it makes run directories unique,
    even for runs started in the same second on the same or on different machines."""
    return _PROCESS_RUN_ID


def register_resolvers() -> None:
    """Register the ``${run_id:}`` resolver (idempotent)."""
    if not OmegaConf.has_resolver("run_id"):
        OmegaConf.register_new_resolver("run_id", run_id)
