"""A fitted baseline behind the interface of a trained network, so ``predict.py`` maps with it.

``predict.py`` classifies scenes tile by tile, patches and table rows by calling a model
on batches of the batch contract (:mod:`mtan_s1s2.data.batch`) and reading ``(B, K, H, W)``
logits. :class:`BaselineModule` gives a fitted
:class:`~mtan_s1s2.baselines.base.FeatureBaseline` that interface: every pixel of the batch
becomes the features the baseline was fitted on (the same date grid, layout and
normalisation: :func:`~mtan_s1s2.baselines.features.sample_features`), and its class
probabilities are returned as log-probabilities, whose softmax is the probabilities again
(a class the baseline gives 0 gets ``-inf``). Nothing is trained: the module has no
parameters and runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor

from mtan_s1s2.baselines.base import FeatureBaseline, spatial_context_of
from mtan_s1s2.baselines.features import sample_features


class BaselineNet(torch.nn.Module):
    """Batch -> ``(B, K, H, W)`` log-probabilities of a fitted baseline.

    Args:
        baseline: The fitted baseline (with its date grid).
        num_classes: ``K``.
        in_channels: Channels per modality the baseline was fitted on (checked by
            :meth:`check_inputs`); None = not checked.

    Raises:
        ValueError: If the baseline has no date grid (not fitted by the harness).
    """

    def __init__(self, baseline: FeatureBaseline, num_classes: int, in_channels: Mapping[str, int] | None) -> None:
        super().__init__()
        if baseline.grid is None:
            raise ValueError(f"{baseline!r} has no date grid: fit it with train.py model={baseline.backend} first.")
        self.baseline = baseline
        self.num_classes = int(num_classes)
        self.modalities = list(baseline.grid.doy)
        self.in_channels = dict(in_channels) if in_channels else None
        self.backend = baseline.backend

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Fail before predicting if a batch lacks a modality or has other band counts.

        Raises:
            ValueError: Naming the modality, the expected and the given shape.
        """
        for m in self.modalities:
            if m not in inputs:
                raise ValueError(
                    f"The {self.backend} model was fitted on modalities {self.modalities} but the data have no {m!r}; "
                    "set data.modalities to match."
                )
            x = inputs[m]["x"]
            c = None if self.in_channels is None else self.in_channels.get(m)
            if x.ndim != 5 or (c is not None and x.shape[2] != c):
                raise ValueError(
                    f"{m}.x must have shape (B, T, C={c}, H, W) (the bands the {self.backend} model was fitted on); "
                    f"got {tuple(x.shape)}."
                )

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """``(B, K, H, W) float32`` log-probabilities of every pixel of the batch."""
        self.check_inputs(inputs)
        grid = self.baseline.grid
        assert grid is not None
        arrays = {m: {k: inputs[m][k].detach().cpu().numpy() for k in ("x", "doy", "mask")} for m in self.modalities}
        B, _, _, H, W = inputs[self.modalities[0]]["x"].shape
        k = spatial_context_of(self.baseline)
        features = np.concatenate([sample_features(arrays, b, grid, self.baseline.layout, k) for b in range(B)])
        proba = self.baseline.predict_proba(features, self.num_classes)  # (B*H*W, K)
        logp = torch.log(torch.from_numpy(proba)).reshape(B, H, W, self.num_classes).permute(0, 3, 1, 2)
        return logp.contiguous().to(inputs[self.modalities[0]]["x"].device)


class BaselineModule(L.LightningModule):
    """A fitted baseline as a prediction-only LightningModule (``trainer.predict``, scene tiles).

    Attributes mirror :class:`~mtan_s1s2.lit_module.SITSClassifierModule` where
    ``predict.py`` reads them: ``net`` (with ``check_inputs``, ``backend``,
    ``modalities``), ``num_classes``, ``ignore_index``, ``class_names``.

    Args:
        baseline: The fitted baseline; its data contract names the classes.
        num_classes: ``K``; None = from the contract's class names.
        ignore_index: The unlabelled class; None = from the contract (else 0).
        class_names: None = from the contract.

    Raises:
        ValueError: If the class count is neither given nor in the contract.
    """

    def __init__(
        self,
        baseline: FeatureBaseline,
        num_classes: int | None = None,
        ignore_index: int | None = None,
        class_names: list[str] | None = None,
    ) -> None:
        super().__init__()
        contract = baseline.contract or {}
        names = list(class_names or contract.get("class_names") or [])
        if num_classes is None:
            if not names:
                raise ValueError(
                    f"The {baseline.backend} model file records no classes (fitted by an older version); retrain it."
                )
            num_classes = len(names)
        self.num_classes = int(num_classes)
        self.ignore_index = int(contract.get("ignore_index", 0) if ignore_index is None else ignore_index)
        self.class_names = names or [str(k) for k in range(self.num_classes)]
        channels = baseline.in_channels or {m: len(b) for m, b in (contract.get("bands") or {}).items() if b}
        self.net = BaselineNet(baseline, self.num_classes, channels or None)

    def forward(self, batch: Mapping[str, Any]) -> Tensor:
        """``(B, K, H, W)`` log-probabilities (:class:`BaselineNet`)."""
        out: Tensor = self.net(batch)
        return out

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int = 0, dataloader_idx: int = 0) -> Tensor:
        """The log-probabilities of a batch."""
        out: Tensor = self(batch)
        return out


__all__ = ["BaselineModule", "BaselineNet"]
