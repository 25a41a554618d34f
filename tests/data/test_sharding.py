"""Each rank's share of the data: disjoint shards of one shuffled order, test splits divided once,
per-rank seeds. No process group is needed: the shard is given explicitly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import transforms as T

from dstbench.inputs.loaders import ArrayDataset, EpochLoader, ShardSampler, epoch_seed, eval_loader
from dstbench.util.distributed import rank_seed


def _numbered(count: int) -> ArrayDataset:
    """Image i is uniformly i and labelled i, so a batch's labels say which images it holds."""
    images = np.repeat(np.arange(count, dtype=np.uint8), 16).reshape(count, 4, 4)
    return ArrayDataset(images, np.arange(count), T.PILToTensor())


def _labels(loader: EpochLoader, epoch: int) -> list[list[int]]:
    return [y.tolist() for _, y in loader.epoch(epoch)]


def test_ranks_read_disjoint_shards_whose_steps_form_one_large_batch() -> None:
    dataset = _numbered(103)
    shards = [EpochLoader(dataset, 8, 0, seed=3, shard=(rank, 3)) for rank in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]  # (103 // 3) // 8 full batches per rank
    epoch = [_labels(s, 1) for s in shards]
    seen = [i for rank in epoch for batch in rank for i in batch]
    assert len(seen) == len(set(seen)) == 3 * 4 * 8  # no image on two ranks
    # Step i of every rank together: 24 consecutive images of the one shuffled order.
    order = ShardSampler(103, 0, 1)
    order.generator.manual_seed(epoch_seed(3, 1))
    whole = list(order)
    for step in range(4):
        together = sorted(i for rank in epoch for i in rank[step])
        assert together == sorted(whole[step * 24 : (step + 1) * 24])
    # Another epoch, another order; the same epoch again, the same batches.
    assert _labels(shards[1], 2) != epoch[1] and _labels(shards[1], 1) == epoch[1]


def test_one_process_keeps_its_own_order() -> None:
    single = EpochLoader(_numbered(50), 8, 0, seed=3)
    assert single.sampler is None
    assert _labels(single, 2) == _labels(EpochLoader(_numbered(50), 8, 0, seed=3, shard=(0, 1)), 2)


def test_a_batch_larger_than_a_rank_share_is_refused() -> None:
    with pytest.raises(ValueError, match=r"a rank's share of the training split \(1/4\) \(12 images\)"):
        EpochLoader(_numbered(50), 16, 0, seed=0, shard=(1, 4))
    with pytest.raises(ValueError, match="outside a world of 2"):
        ShardSampler(10, 2, 2)


def test_the_test_split_is_divided_once_over_the_ranks() -> None:
    dataset = _numbered(11)
    parts = [torch.cat([y for _, y in eval_loader(dataset, 4, 0, shard=(rank, 3))]).tolist() for rank in range(3)]
    assert sorted(i for part in parts for i in part) == list(range(11))
    assert [len(p) for p in parts] == [4, 4, 3]


def test_rank_zero_keeps_the_suite_seed_and_the_others_draw_their_own() -> None:
    assert rank_seed(7, 0) == 7
    assert len({rank_seed(7, r) for r in range(4)}) == 4 and rank_seed(7, 1) == rank_seed(7, 1)
    assert rank_seed(7, 1) != rank_seed(8, 1)
