"""Clear errors for sweeps and launchers whose optional Hydra plugin is not installed.

Without the plugin, Hydra stops with "Could not find 'hydra/sweeper/optuna'" or "Could
not override 'hydra/launcher'", which names neither the package nor the extra to install.
:func:`require_sweep_plugins` checks the command line first and names both.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SweepPlugin:
    """An optional Hydra plugin and how to install it.

    Attributes:
        module: Import name of the plugin (under the ``hydra_plugins`` namespace).
        package: Its PyPI name.
        extra: The ``mtan-s1s2`` extra that installs it.
    """

    module: str
    package: str
    extra: str

    def install_hint(self) -> str:
        """The pip command that installs the plugin."""
        return f'pip install "mtan-s1s2[{self.extra}]"  (or: pip install {self.package})'


OPTUNA = SweepPlugin("hydra_plugins.hydra_optuna_sweeper", "hydra-optuna-sweeper", "optuna")
JOBLIB = SweepPlugin("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher", "joblib")
SUBMITIT = SweepPlugin("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher", "slurm")

PLUGIN_OPTIONS: dict[str, SweepPlugin] = {
    "hparams_search=optuna": OPTUNA,
    "hydra/sweeper=optuna": OPTUNA,
    "hydra/launcher=joblib": JOBLIB,
    "hydra/launcher=slurm": SUBMITIT,
    "hydra/launcher=submitit_slurm": SUBMITIT,
    "hydra/launcher=submitit_local": SUBMITIT,
}
"""Command-line choices (``group=option``) that need a plugin."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_plugin_message(argv: Sequence[str], is_installed: Callable[[str], bool] = _installed) -> str | None:
    """Explain which optional plugin the command line needs and lacks, if any.

    Args:
        argv: Command-line arguments (without the program name).
        is_installed: Whether a module can be imported (injectable for tests).

    Returns:
        An error message naming the option, the package and the install command, or None
        when every plugin the command line asks for is installed.
    """
    problems = []
    for arg in argv:
        choice = arg.lstrip("+~").replace("override ", "").strip()
        plugin = PLUGIN_OPTIONS.get(choice)
        if plugin is not None and not is_installed(plugin.module):
            problems.append(
                f"`{choice}` needs Hydra's {plugin.package} plugin, which is not installed. "
                f"Install it with: {plugin.install_hint()}"
            )
    return "\n".join(problems) or None


def require_sweep_plugins(main: F) -> F:
    """Decorate a ``@hydra.main`` entry point: stop early, and clearly, on a missing plugin.

    Args:
        main: The Hydra entry point (already wrapped by ``hydra.main``).

    Returns:
        The entry point, which first checks ``sys.argv`` and exits with status 2 and a
        message naming the package to install when a needed plugin is missing.
    """

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        message = missing_plugin_message(sys.argv[1:])
        if message:
            print(f"Error: {message}", file=sys.stderr)
            raise SystemExit(2)
        return main(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["PLUGIN_OPTIONS", "SweepPlugin", "missing_plugin_message", "require_sweep_plugins"]
