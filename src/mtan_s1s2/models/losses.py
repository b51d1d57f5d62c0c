"""Losses of the per-pixel classifier: masked cross-entropy and class weights."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


def masked_cross_entropy_terms(
    logits: Tensor, target: Tensor, ignore_index: int, weight: Tensor | None = None, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Numerator and denominator of the cross-entropy over labelled pixels.

    The loss of a batch is ``total / denominator``; summing both over the batches of an
    epoch gives the epoch loss over all its labelled pixels (not a mean of batch means).

    Args:
        logits: ``(B, K, H, W)`` float logits.
        target: ``(B, H, W)`` int64 labels; ``ignore_index`` pixels are excluded.
        ignore_index: Label value excluded from the loss.
        weight: Optional ``(K,)`` class weights.
        label_smoothing: Label smoothing in ``[0, 1)`` (``F.cross_entropy``'s; 0 = off).

    Returns:
        ``(total, denominator)``: float32 scalars, the (weighted) sum of the per-pixel
        losses and the number of labelled pixels (their total class weight with
        ``weight``).
    """
    ce = F.cross_entropy(
        logits.float(),
        target,
        weight=weight,
        ignore_index=ignore_index,
        reduction="none",
        label_smoothing=label_smoothing,
    )
    valid = target != ignore_index
    if weight is None:
        denom = valid.sum().to(ce.dtype)
    else:
        denom = (weight[target.clamp(0, weight.numel() - 1)] * valid).sum()
    return ce.sum(), denom


def masked_cross_entropy(
    logits: Tensor, target: Tensor, ignore_index: int, weight: Tensor | None = None, label_smoothing: float = 0.0
) -> Tensor:
    """Cross-entropy over labelled pixels, finite (0) when no pixel is labelled.

    ``F.cross_entropy(reduction="mean")`` divides by the number (or weight) of labelled
    pixels and returns NaN when that is 0; this divides by ``max(total weight, eps)``.

    Args:
        logits: ``(B, K, H, W)`` float logits.
        target: ``(B, H, W)`` int64 labels; ``ignore_index`` pixels are excluded.
        ignore_index: Label value excluded from the loss.
        weight: Optional ``(K,)`` class weights.
        label_smoothing: Share of the target mass spread uniformly over the ``K`` classes
            (Szegedy et al., 2016), in ``[0, 1)``; 0 = plain cross-entropy.

    Returns:
        Scalar float32 loss.
    """
    total, denom = masked_cross_entropy_terms(logits, target, ignore_index, weight, label_smoothing)
    return total / denom.clamp_min(1e-12)


def inverse_frequency_weights(counts: Tensor, ignore_index: int | None = None) -> Tensor:
    """Class weights ``1 / frequency``, normalised to mean 1 over present classes.

    Classes absent from ``counts`` get weight 0 (they cannot be in the loss anyway), so the
    weights stay finite.

    Args:
        counts: ``(K,)`` pixel counts per class.
        ignore_index: Class whose weight is forced to 0.

    Returns:
        ``(K,)`` float32 weights.
    """
    counts = counts.double()
    if ignore_index is not None and 0 <= ignore_index < counts.numel():
        counts = counts.clone()
        counts[ignore_index] = 0
    present = counts > 0
    w = torch.zeros_like(counts)
    w[present] = counts[present].sum() / counts[present]
    if present.any():
        w = w / w[present].mean()
    return w.float()


class _CountsLabels(Protocol):
    def class_counts(self, num_classes: int) -> Tensor: ...


def training_class_weights(
    datamodule: _CountsLabels, num_classes: int, ignore_index: int, class_names: Sequence[str]
) -> Tensor:
    """``model.class_weights=inverse_frequency``: weights of the labelled pixels of the whole training split.

    Args:
        datamodule: Gives ``class_counts(K)``, the ``(K,)`` labelled pixels per class of
            its training split (:meth:`~mtan_s1s2.data.datamodule.SITSDataModule.class_counts`).
        num_classes: ``K``, including the ``ignore_index`` class.
        ignore_index: The unlabelled class (weight 0).
        class_names: Class names, index = label (for the warning).

    Returns:
        ``(K,)`` float32 weights (:func:`inverse_frequency_weights`). Classes without a
        labelled training pixel get weight 0 and cannot be learned: a warning names them.
    """
    counts = datamodule.class_counts(num_classes)
    weights = inverse_frequency_weights(counts, ignore_index)
    absent = [f"{class_names[k]} ({k})" for k in range(num_classes) if k != ignore_index and not counts[k]]
    if absent:
        warnings.warn(
            f"model.class_weights=inverse_frequency: {len(absent)} class(es) have no labelled pixel in the "
            f"training split, get weight 0 and cannot be learned: {', '.join(absent)}. Check data.labels "
            "and the training split (data.split, data.n_train), or give model.class_weights as a list.",
            stacklevel=2,
        )
    return weights


__all__ = ["inverse_frequency_weights", "masked_cross_entropy", "masked_cross_entropy_terms", "training_class_weights"]
