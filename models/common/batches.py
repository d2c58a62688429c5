"""Tensor-row datasets with batch-at-a-time loading: one index fetch per batch instead of one per row,
which is what makes small in-memory datasets cheap to feed to Lightning."""

from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler


class Rows(Dataset):
    """Rows of one or more equally long tensors; indexing with a batch of indices returns whole batches."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        if not tensors or any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError(f"Rows needs one or more tensors of equal length, got {[len(t) for t in tensors]}")
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, index):
        rows = tuple(t[index] for t in self.tensors)
        return rows if len(rows) > 1 else rows[0]


def random_batches(dataset: Dataset, batch_size: int, batches: int, seed: int) -> DataLoader:
    """``batches`` batches per epoch drawn with replacement from a seeded generator."""
    sampler = RandomSampler(
        dataset, replacement=True, num_samples=batch_size * batches, generator=torch.Generator().manual_seed(seed)
    )
    return DataLoader(dataset, sampler=BatchSampler(sampler, batch_size, drop_last=True), batch_size=None)


def whole_batch(dataset: Dataset) -> DataLoader:
    """The whole dataset as a single batch, in order (validation on small sets)."""
    n = len(dataset)
    return DataLoader(dataset, sampler=BatchSampler(SequentialSampler(range(n)), n, False), batch_size=None)
