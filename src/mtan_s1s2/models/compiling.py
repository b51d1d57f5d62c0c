"""Inputs of a ``torch.compile``d classifier: what is dynamic, what is static.

The batch axis is dynamic; the date axis is padded to a few static lengths. Used by the
training module (``model.compile``) and by the compile decision of ``mlp=auto``, so both
compile the same graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from mtan_s1s2.data.batch import pad_dates

COMPILE_DATE_MULTIPLE = 8
"""A compiled network sees date counts rounded up to this multiple (:func:`compiled_inputs`)."""


def compiled_inputs(inputs: Mapping[str, Any], multiple: int = COMPILE_DATE_MULTIPLE) -> dict[str, Any]:
    """The inputs of a ``torch.compile``d network: a dynamic batch axis, a few static date counts.

    Batches differ in size (the last one) and in their number of dates (padding to the
    longest series of the batch). The batch axis is marked dynamic, so it never
    recompiles. The date axis is padded with invalid dates (:func:`~mtan_s1s2.data.batch.pad_dates`,
    no effect on the outputs) up to a multiple of ``multiple`` and kept static: a dynamic
    date axis makes inductor's backward of the ``conv`` backend assume the strides of its
    first date count (``AssertionError: expected ... stride`` on the next one, torch
    2.13), while static counts compile once per multiple (one graph for the default
    synthetic data, whose S2 and S1 counts stay within one multiple of 8).
    """
    padded = pad_dates(inputs, multiple)
    for value in padded.values():
        for key in ("x", "doy", "mask"):
            tensor = value[key]
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
            torch._dynamo.mark_static(tensor, 1)
    return padded


__all__ = ["COMPILE_DATE_MULTIPLE", "compiled_inputs"]
