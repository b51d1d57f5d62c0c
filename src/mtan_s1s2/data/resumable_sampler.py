"""The training sampler: one shuffled order per (seed, epoch), resumable in the middle of an epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import RandomSampler


class ResumableRandomSampler(RandomSampler):
    """Shuffled indices whose order is a function of ``(seed, epoch)`` only.

    Unlike ``RandomSampler`` without a generator, which draws each epoch's order from the
    global torch generator, the order does not depend on what else the process did, so a
    run resumed from a checkpoint sees the same batches as one that never stopped.
    Lightning calls :meth:`set_epoch` at the start of every epoch (as for a
    ``DistributedSampler``, which Lightning puts in its place under DDP: it subclasses
    ``RandomSampler`` for that reason).

    Args:
        data_source: The dataset (only its length is used).
        seed: Seed of the orders.
        epoch: Epoch of the first order.
        skip: Indices of the first order to skip: the samples that the run being
            resumed had already trained on in that epoch. Later epochs skip nothing.

    Raises:
        ValueError: On a negative ``skip``.
    """

    def __init__(self, data_source: Sized, seed: int = 0, epoch: int = 0, skip: int = 0) -> None:
        super().__init__(data_source)
        if skip < 0:
            raise ValueError(f"skip must be >= 0 samples, got {skip}.")
        self.seed = int(seed)
        self.epoch = int(epoch)
        self._skip_epoch, self._skip = int(epoch), int(skip)

    def set_epoch(self, epoch: int) -> None:
        """Select the order of ``epoch``."""
        self.epoch = int(epoch)

    def order(self, epoch: int) -> torch.Tensor:
        """The full shuffled order of ``epoch``, ``(N,)`` int64."""
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % (2**63 - 1))
        return torch.randperm(len(self.data_source), generator=generator)

    def __iter__(self) -> Iterator[int]:
        order = self.order(self.epoch)
        if self._skip and self.epoch == self._skip_epoch:
            order = order[self._skip :]
        self._skip = 0  # only the epoch that was interrupted is resumed
        return iter(order.tolist())

    def __len__(self) -> int:
        # Lightning counts the batches of an epoch from this, the skipped ones included.
        return len(self.data_source)


__all__ = ["ResumableRandomSampler"]
