"""Child process of ``mlp=auto`` on CPU: times the backends away from the training heap.

``python -m mtan_s1s2.models.timing_worker PAYLOAD RESULT`` loads the network, the batch
and the settings that :func:`mtan_s1s2.models.backend_selection.time_backend_samples_isolated`
saved to ``PAYLOAD`` (``torch.save``), applies the parent's thread count and float32 matmul
precision, runs :func:`~mtan_s1s2.models.backend_selection.time_backend_samples` and writes
``{backend: [ms, ...]}`` as JSON to ``RESULT``. It inherits the parent's environment, so
it runs with the same C allocator (``LD_PRELOAD``, ``GLIBC_TUNABLES``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path

import torch

from mtan_s1s2.models.backend_selection import time_backend_samples
from mtan_s1s2.utils.precision import set_matmul_precision


def main(payload_path: str, result_path: str) -> None:
    """Time the backends described by ``payload_path``; write the samples to ``result_path``."""
    payload = torch.load(payload_path, weights_only=False)  # written by our parent process
    torch.set_num_threads(int(payload["threads"]))
    set_matmul_precision(payload["matmul_precision"])
    dtype = payload["autocast_dtype"]
    autocast = functools.partial(torch.autocast, "cpu", dtype=getattr(torch, dtype)) if dtype else contextlib.nullcontext
    samples = time_backend_samples(
        payload["net"],
        payload["inputs"],
        torch.device("cpu"),
        backends=payload["backends"],
        repeats=payload["repeats"],
        warmup=payload["warmup"],
        autocast=autocast,
        prune_ratio=payload["prune_ratio"],
    )
    Path(result_path).write_text(json.dumps(samples))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m mtan_s1s2.models.timing_worker PAYLOAD RESULT")
    main(sys.argv[1], sys.argv[2])
