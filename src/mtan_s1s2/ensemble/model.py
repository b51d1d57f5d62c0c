"""An ensemble of trained classifiers as one model: the mean of their probabilities.

:class:`EnsembleNet` runs every member on the same inputs and returns the logarithm of the
mean of their softmax probabilities over the classes other than ``ignore_index``
(:func:`~mtan_s1s2.ensemble.probabilities.probabilities_from_logits`). Its output is a
valid logit tensor: its argmax is the argmax of the mean probabilities, and its softmax
*is* the mean probabilities (the ``ignore_index`` class gets ``log 0 = -inf``, probability
0). So everything that consumes logits (the test step's metrics and loss, the scene, patch
and table writers of ``predict.py``) works unchanged on an ensemble, and its loss is the
cross-entropy of the averaged probabilities.

Members may differ in their network (mTAN, TempCNN), MLP backend and compilation: each
runs its own forward (:meth:`~mtan_s1s2.lit_module.SITSClassifierModule.forward`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from mtan_s1s2.ensemble.probabilities import probabilities_from_logits
from mtan_s1s2.lit_module import SITSClassifierModule


class EnsembleNet(nn.Module):
    """The members' mean probabilities, as log-probabilities ``(B, K, H, W)`` (see the module docstring).

    Args:
        members: Trained modules (eval mode) sharing their classes and ``ignore_index``.

    Raises:
        ValueError: On no member, or members with different class counts or ignored class.
    """

    def __init__(self, members: Sequence[SITSClassifierModule]) -> None:
        super().__init__()
        if not members:
            raise ValueError("An ensemble needs at least one checkpoint in ckpt_path.")
        classes = {(int(m.num_classes), int(m.ignore_index)) for m in members}
        if len(classes) != 1:
            raise ValueError(f"The members have different (num_classes, ignore_index): {sorted(classes)}.")
        self.members = nn.ModuleList(members)
        self.num_classes, self.ignore_index = classes.pop()

    @property
    def modalities(self) -> list[str]:
        """The modalities any member reads, in the first member's order."""
        out: list[str] = []
        for m in self.members:
            out += [x for x in m.net.modalities if x not in out]  # type: ignore[union-attr]
        return out

    @property
    def backend(self) -> str:
        """The members' MLP backends, ``"+"``-joined (``ensemble(linear+conv)``)."""
        return "ensemble(" + "+".join(str(m.net.backend) for m in self.members) + ")"  # type: ignore[union-attr]

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Every member's check of a batch (modalities, bands).

        Raises:
            ValueError: As the first member that does not fit.
        """
        for m in self.members:
            m.net.check_inputs({k: inputs[k] for k in m.net.modalities if k in inputs})  # type: ignore[union-attr,operator]

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """``log`` of the mean member probability, ``(B, K, H, W)`` float32 (``-inf`` for ``ignore_index``)."""
        total: Tensor | None = None
        for m in self.members:
            p = probabilities_from_logits(m(inputs), self.ignore_index)
            total = p if total is None else total + p
        assert total is not None
        return torch.log(total / len(self.members))


class EnsembleModule(SITSClassifierModule):
    """A :class:`~mtan_s1s2.lit_module.SITSClassifierModule` whose network is an :class:`EnsembleNet`.

    Tested and predicted by a Lightning ``Trainer`` as one checkpoint is (same metrics,
    loss, confusion matrix and writers). Its ``setup`` runs each member's, so a member
    trained with ``model.compile=true`` is compiled as when it is tested alone.

    Args:
        members: The trained members (:func:`~mtan_s1s2.ensemble.members.load_members`).
    """

    def __init__(self, members: Sequence[SITSClassifierModule]) -> None:
        first = members[0] if members else None
        super().__init__(
            net=EnsembleNet(members),  # type: ignore[arg-type]  # any module mapping a batch to logits
            num_classes=int(first.num_classes) if first is not None else 0,
            ignore_index=int(first.ignore_index) if first is not None else 0,
            class_names=list(first.class_names) if first is not None else None,
        )
        self.eval()

    @property
    def members(self) -> list[SITSClassifierModule]:
        """The member modules."""
        return list(self.net.members)  # type: ignore[arg-type]

    def setup(self, stage: str) -> None:
        """Each member's ``setup`` (compilation when it was trained compiled)."""
        for m in self.members:
            m.setup(stage)


__all__ = ["EnsembleModule", "EnsembleNet"]
