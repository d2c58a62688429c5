"""The shared batch-at-a-time loaders used by ibmd and sdp."""

import pytest
import torch

from models.common.batches import Rows, random_batches, whole_batch


def test_rows_index_whole_batches_and_reject_ragged_tensors():
    x, y = torch.arange(10.0), torch.arange(10) * 2
    rows = Rows(x, y)
    bx, by = rows[torch.tensor([3, 1])]
    assert bx.tolist() == [3.0, 1.0] and by.tolist() == [6, 2]
    assert Rows(x)[[0, 4]].tolist() == [0.0, 4.0]  # one tensor: the batch itself, not a 1-tuple
    with pytest.raises(ValueError, match="equal length"):
        Rows(x, torch.zeros(9))


def test_random_batches_are_seeded_with_replacement_and_whole_batch_is_ordered():
    rows = Rows(torch.arange(6.0))
    first = [b.tolist() for b in random_batches(rows, batch_size=4, batches=5, seed=3)]
    again = [b.tolist() for b in random_batches(rows, batch_size=4, batches=5, seed=3)]
    other = [b.tolist() for b in random_batches(rows, batch_size=4, batches=5, seed=4)]
    assert first == again and first != other
    assert len(first) == 5 and all(len(b) == 4 for b in first)
    assert len({v for b in first for v in b}) <= 6 and any(len(set(b)) < len(b) for b in first + other)
    assert [b.tolist() for b in whole_batch(rows)] == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]
