"""A synthetic datamodule whose training patches are generated once and kept in memory.

On a GPU, generating synthetic patches on the fly on the CPU can be slower than a training
step, so an epoch-throughput comparison of the
MLP backends would time the data generator, not the model. For such comparisons
(``bench.epochs.in_memory=true``, used by ``scripts/gpu_check.sh``) the training split is
cut to exactly the patches one epoch of ``steps_per_epoch`` steps uses, generated once in
parallel at ``setup`` and served from memory, so every timed epoch measures the model.
"""

from __future__ import annotations

import os
from typing import Any, cast

from torch.utils.data import DataLoader, Dataset

from mtan_s1s2.data.batch import Sample, collate_sits
from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule


class InMemoryDataset(Dataset[Sample]):
    """The items of another dataset, generated once.

    Args:
        source: Dataset to copy.
        n_samples: How many leading items to keep.
        workers: Processes generating them (0: this process).
    """

    def __init__(self, source: Dataset[Sample], n_samples: int, workers: int = 0) -> None:
        n = min(int(n_samples), len(source))  # type: ignore[arg-type]
        indices = cast("Dataset[int]", range(n))  # any indexable serves as a map-style dataset
        loader = DataLoader(indices, batch_size=None, num_workers=workers, collate_fn=source.__getitem__)
        self.items: list[Sample] = list(loader)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Sample:
        return self.items[index]


class InMemorySyntheticDataModule(SyntheticSITSDataModule):
    """:class:`SyntheticSITSDataModule` with the training split generated once, in memory.

    Args:
        steps_per_epoch: Training steps per epoch: ``steps_per_epoch * batch_size`` patches
            are kept (match ``trainer.limit_train_batches``).
        materialize_workers: Processes generating them (default: all CPUs).
        **kwargs: Arguments of :class:`SyntheticSITSDataModule`.

    Raises:
        ValueError: If ``steps_per_epoch`` < 1.
    """

    def __init__(self, steps_per_epoch: int = 8, materialize_workers: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if int(steps_per_epoch) < 1:
            raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}.")
        self.steps_per_epoch = int(steps_per_epoch)
        self.materialize_workers = (os.cpu_count() or 1) if materialize_workers is None else int(materialize_workers)

    def setup(self, stage: str | None = None) -> None:
        """Build the splits; the training split is generated once and kept in memory."""
        super().setup(stage)
        train = self.datasets.get("train")
        if train is not None and not isinstance(train, InMemoryDataset):
            self.datasets["train"] = InMemoryDataset(
                train, self.steps_per_epoch * self.batch_size, self.materialize_workers
            )

    def train_dataloader(self) -> DataLoader[Sample]:
        """Shuffled batches of the in-memory training split (no worker processes)."""
        self.setup("fit")
        # Served from memory: worker processes would only add copies.
        return DataLoader(
            self.datasets["train"], batch_size=self.batch_size, shuffle=True, num_workers=0, collate_fn=collate_sits
        )


__all__ = ["InMemoryDataset", "InMemorySyntheticDataModule"]
