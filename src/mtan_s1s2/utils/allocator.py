"""Which CPU memory allocator (``malloc``) the process runs with, and a one-time warning.

PyTorch's CPU tensors come from the C allocator. glibc's default ``malloc`` serves every
block above its mmap threshold (at most 32 MiB on 64-bit Linux, usually far less) with a
fresh ``mmap`` and gives it back with ``munmap`` when freed, so the large activations of a
training step are mapped and page-faulted in afresh at every step. tcmalloc and jemalloc
keep such blocks and reuse them, and so does glibc with ``GLIBC_TUNABLES=`` :data:`GLIBC_TUNED`.
docs/benchmarks.md ("CPU memory allocator") gives the commands, docs/results.md the measured effect.

:func:`tune_glibc_malloc` applies the same setting inside a running process with
``mallopt`` (``M_MMAP_MAX = 0``, ``M_TRIM_THRESHOLD`` at its maximum): the entry points call
it at start-up (config key ``cpu_malloc: tuned``, the default; ``default`` leaves glibc
alone), so a CPU run is fast without any environment variable.

Detection looks, in order, at the shared objects mapped into this process
(``/proc/self/maps``: a preloaded or linked tcmalloc/jemalloc/mimalloc shows there) and at
``LD_PRELOAD``; otherwise the allocator is glibc's ``malloc``, "tuned" when glibc malloc
tunables are set in the environment (``GLIBC_TUNABLES=glibc.malloc.*`` or the
``MALLOC_*_`` variables, e.g. ``MALLOC_MMAP_MAX_=0``).
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

log = logging.getLogger(__name__)

AllocatorName = Literal["tcmalloc", "jemalloc", "mimalloc", "glibc", "unknown"]

CACHING_ALLOCATORS: tuple[str, ...] = ("tcmalloc", "jemalloc", "mimalloc")
"""Allocators loaded as a shared object (``LD_PRELOAD``) instead of glibc's ``malloc``."""
_GLIBC_MALLOC_ENV: tuple[str, ...] = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_ARENA_MAX",
)
_LIB_DIRS: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)
_LIB_PATTERNS: dict[str, tuple[str, ...]] = {
    # Full tcmalloc first: tcmalloc_minimal lacks nothing PyTorch needs but is a fallback.
    "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc.so*", "libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so*"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so*"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc.so*"),
}

GLIBC_TUNED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"
"""``GLIBC_TUNABLES`` value that makes glibc keep freed blocks (no ``mmap`` per block, no
trimming below 16 GiB): nothing to install."""


@dataclass(frozen=True)
class AllocatorInfo:
    """The C memory allocator of this process.

    Attributes:
        name: ``"tcmalloc"``, ``"jemalloc"``, ``"mimalloc"``, ``"glibc"`` or ``"unknown"``
            (not Linux, or nothing could be read).
        source: How it was found: ``"maps"`` (mapped into the process), ``"ld_preload"``
            (named in ``LD_PRELOAD`` but not seen mapped), ``"mallopt"`` (glibc, tuned in
            this process by :func:`tune_glibc_malloc`), ``"default"`` (nothing else found,
            glibc assumed) or ``"unavailable"``.
        path: The shared object, when one was found.
        tuned: False only for glibc's ``malloc`` without any malloc tunable set.
        glibc_tunables: The glibc malloc settings found in the environment.
    """

    name: AllocatorName
    source: str
    path: str | None
    tuned: bool
    glibc_tunables: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for ``summary.json``)."""
        return asdict(self)

    def label(self) -> str:
        """Short label for tables and CSV rows, e.g. ``"tcmalloc"`` or ``"glibc (default)"``."""
        if self.name == "glibc":
            return "glibc (tuned)" if self.tuned else "glibc (default)"
        return self.name


def _glibc_tunables(environ: dict[str, str]) -> dict[str, str]:
    found = {k: environ[k] for k in _GLIBC_MALLOC_ENV if environ.get(k)}
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    if tunables:
        found["GLIBC_TUNABLES"] = ":".join(tunables)
    return found


def glibc_malloc_env(environ: dict[str, str], tuned: bool = False) -> dict[str, str]:
    """A copy of ``environ`` with glibc's ``malloc`` settings reset to its defaults.

    Removes the ``MALLOC_*_`` variables and the ``glibc.malloc.*`` entries of
    ``GLIBC_TUNABLES`` (other tunables are kept); with ``tuned=True`` adds
    :data:`GLIBC_TUNED` instead. ``LD_PRELOAD`` is left as it is.
    """
    env = {k: v for k, v in environ.items() if k not in _GLIBC_MALLOC_ENV}
    tunables = [t for t in env.pop("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.malloc.")]
    if tuned:
        tunables.append(GLIBC_TUNED)
    if tunables:
        env["GLIBC_TUNABLES"] = ":".join(tunables)
    return env


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
_mallopt_applied = False


def tune_glibc_malloc() -> bool:
    """Make glibc's ``malloc`` keep freed memory for reuse, from now on, in this process.

    ``mallopt(M_MMAP_MAX, 0)`` serves large blocks from the heap instead of a fresh ``mmap``
    each time, and ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)`` stops returning freed memory to
    the OS, so a training step reuses the memory of the previous one instead of mapping
    and page-faulting its activations afresh. The process keeps its peak memory until it
    exits. Does nothing under another allocator (tcmalloc, jemalloc, ...), when glibc
    tunables are already set, or off Linux.

    Returns:
        True if the setting was applied by this call or an earlier one.
    """
    global _mallopt_applied
    if _mallopt_applied:
        return True
    info = detect_allocator()
    if info.name != "glibc" or info.tuned:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    except (OSError, AttributeError):
        return False
    _mallopt_applied = bool(ok)
    if ok:
        log.debug("glibc malloc tuned in-process (mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=2**31-1)")
    return _mallopt_applied


def _lib_name(path: str) -> str | None:
    base = os.path.basename(path)
    return next((n for n in CACHING_ALLOCATORS if f"lib{n}" in base), None)


def detect_allocator(maps_path: str = "/proc/self/maps", environ: dict[str, str] | None = None) -> AllocatorInfo:
    """Detect the C allocator of this process.

    Args:
        maps_path: The memory map to read (a test may pass a file of its own).
        environ: Environment to read ``LD_PRELOAD`` and glibc tunables from (default
            ``os.environ``).

    Returns:
        The :class:`AllocatorInfo`.
    """
    environ = dict(os.environ if environ is None else environ)
    tunables = _glibc_tunables(environ)
    try:
        with open(maps_path) as f:
            mapped = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        mapped = None
    if mapped:
        for path in sorted(mapped):
            name = _lib_name(path)
            if name:
                return AllocatorInfo(name, "maps", path, True, tunables)  # type: ignore[arg-type]
    for path in environ.get("LD_PRELOAD", "").replace(":", " ").split():
        name = _lib_name(path)
        if name:
            return AllocatorInfo(name, "ld_preload", path, True, tunables)  # type: ignore[arg-type]
    if mapped is None and not sys.platform.startswith("linux"):
        return AllocatorInfo("unknown", "unavailable", None, True, tunables)
    if _mallopt_applied and maps_path == "/proc/self/maps":  # this process, tuned by tune_glibc_malloc
        return AllocatorInfo(
            "glibc", "mallopt", None, True, {**tunables, "mallopt": "M_MMAP_MAX=0,M_TRIM_THRESHOLD=2**31-1"}
        )
    return AllocatorInfo("glibc", "default", None, bool(tunables), tunables)


def allocator_name() -> str:
    """Label of the current allocator (see :meth:`AllocatorInfo.label`)."""
    return detect_allocator().label()


def find_allocator_library(name: str) -> str | None:
    """Path of an installed ``tcmalloc``/``jemalloc``/``mimalloc`` shared object, or None.

    Raises:
        ValueError: If ``name`` is not one of those.
    """
    if name not in _LIB_PATTERNS:
        raise ValueError(f"Unknown allocator {name!r}; choose one of {sorted(_LIB_PATTERNS)}.")
    for pattern in _LIB_PATTERNS[name]:
        for directory in _LIB_DIRS:
            hits = sorted(glob.glob(os.path.join(directory, pattern)))
            if hits:
                return hits[0]
    return None


_warned = False


def warn_if_untuned_allocator(device: torch.device | str | None = "cpu") -> bool:
    """Warn once per process when running on CPU with glibc's untuned default ``malloc``.

    Args:
        device: The device the run computes on; nothing is said for CUDA devices.

    Returns:
        True if the warning was issued by this call.
    """
    global _warned
    if _warned or torch.device(device if device is not None else "cpu").type != "cpu":
        return False
    info = detect_allocator()
    if info.name != "glibc" or info.tuned:
        return False
    _warned = True
    log.warning(
        "CPU run with glibc's default malloc, which maps every large activation afresh at each step: "
        "run with GLIBC_TUNABLES=%s (or tcmalloc); see docs/benchmarks.md, 'CPU memory allocator'.",
        GLIBC_TUNED,
    )
    return True


__all__ = [
    "CACHING_ALLOCATORS",
    "GLIBC_TUNED",
    "AllocatorInfo",
    "allocator_name",
    "detect_allocator",
    "find_allocator_library",
    "glibc_malloc_env",
    "tune_glibc_malloc",
    "warn_if_untuned_allocator",
]
