"""Planning an exchange: lowest pruned, highest cloned, budget and dense widths always kept."""

from __future__ import annotations

import torch

from dstbench.dst.compact.surgery import NEW
from dstbench.dst.compact.unit_exchange import assign_slots, exchange_counts, made_by, plan_exchange


def _flat(plan: list[list[int]], counts: list[int]) -> list[int]:
    """Global old indices of the new units, block after block."""
    starts = [sum(counts[:b]) for b in range(len(counts))]
    return [starts[b] + u for b, sources in enumerate(plan) for u in sources]


def test_lowest_are_pruned_and_highest_cloned_in_their_own_block() -> None:
    scores = torch.tensor([5.0, 0.1, 3.0, 9.0, 0.2, 4.0, 0.3])
    counts, caps = [3, 4], [8, 8]
    plan = plan_exchange(scores, counts, caps, k=2)
    # Pruned: 0.1 (block 0, unit 1) and 0.2 (block 1, unit 1). Cloned: 9.0 (block 1, unit 0), 5.0.
    assert plan == [[0, 2, 0], [0, 2, 3, 0]]
    assert sum(len(p) for p in plan) == sum(counts)


def test_clones_skip_full_blocks_and_wrap_around_survivors() -> None:
    scores = torch.tensor([9.0, 8.0, 1.0, 2.0])
    plan = plan_exchange(scores, [2, 2], [2, 6], k=1)
    # 1.0 (block 1) is pruned; 9.0 and 8.0 sit in full block 0, so 2.0 is cloned instead.
    assert plan == [[0, 1], [1, 1]]
    # Pruning frees room in the pruned unit's own block: 5.0 is cloned there, 6.0's block is full.
    assert plan_exchange(torch.tensor([1.0, 5.0, 2.0, 6.0]), [2, 2], [2, 2], k=1) == [[1, 1], [0, 1]]
    plan = plan_exchange(torch.tensor([1.0, 2.0, 3.0]), [3], [9], k=2)
    assert plan == [[2, 2, 2]]  # k = n - 1: the one survivor cloned twice
    # The freed block has no survivor to clone and the others are full: no exchange at all.
    assert plan_exchange(torch.tensor([1.0, 5.0, 6.0]), [1, 2], [1, 2], k=1) == [[0], [0, 1]]


def test_budget_and_caps_hold_on_random_cases() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        blocks = int(torch.randint(1, 6, (1,), generator=g))
        caps = torch.randint(1, 9, (blocks,), generator=g).tolist()
        counts = [int(torch.randint(0, c + 1, (1,), generator=g)) for c in caps]
        n = sum(counts)
        scores = torch.rand(n, generator=g).round(decimals=1)  # plenty of ties
        k = int(torch.randint(0, n + 2, (1,), generator=g))
        plan = plan_exchange(scores, counts, caps, k, generator=torch.Generator().manual_seed(1))
        assert sum(len(p) for p in plan) == n
        assert all(len(p) <= cap for p, cap in zip(plan, caps))
        assert all(all(0 <= u < c for u in p) for p, c in zip(plan, counts))
        flat = _flat(plan, counts)
        pruned = sorted(set(range(n)) - set(flat))
        if pruned:  # every pruned unit scores no higher than every kept one
            assert float(scores[pruned].max()) <= float(scores[sorted(set(flat))].min())
        assert len(pruned) == len(flat) - len(set(flat))  # as many clones as pruned units


def test_ties_follow_the_seed() -> None:
    scores = torch.zeros(12)
    plans = [plan_exchange(scores, [6, 6], [8, 8], 3, torch.Generator().manual_seed(s)) for s in (0, 0, 1)]
    assert plans[0] == plans[1] and plans[0] != plans[2]


def test_slots_survivors_keep_theirs_and_clones_take_free_ones() -> None:
    assert assign_slots([4, 0, 2], [2, 0, 2, 2], cap=6) == [2, 4, 0, 1]  # slot 0 freed by the pruned unit
    assert assign_slots([1], [], cap=3) == []


def test_protected_units_are_never_pruned() -> None:
    scores = torch.tensor([0.1, 0.2, 5.0, 9.0, 0.3, 4.0])
    protected = torch.tensor([True, False, False, False, True, False])
    plan = plan_exchange(scores, [3, 3], [8, 8], k=2, protected=protected)
    # 0.1 and 0.3 are protected: 0.2 and 4.0 go; 9.0 and 5.0 are cloned.
    assert plan == [[0, 2, 2], [0, 1, 0]]
    # Fewer unprotected units than k: only those are exchanged.
    all_but_one = torch.tensor([True, True, True, True, True, False])
    assert exchange_counts(plan_exchange(scores, [3, 3], [8, 8], k=3, protected=all_but_one), [3, 3])["pruned"] == 1


def test_new_units_compete_with_clones_on_grow_scores() -> None:
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])  # block 0: units 0, 1; block 1: units 2, 3; block 2: empty
    grow = torch.tensor([0.5, 0.1, 0.2, 0.3])
    # Block 2's new unit scores highest, then block 0's; block 1 has no room for one (NaN).
    new = torch.tensor([0.4, float("nan"), 0.9])
    plan = plan_exchange(scores, [2, 2, 0], [4, 4, 2], k=3, grow_scores=grow, new_scores=new)
    # Pruned: 1.0, 2.0, 3.0 (k = n - 1 is no limit when new units may be made). Grown by rank
    # 0.9 (new, block 2), 0.4 (new, block 0), 0.3 (clone of unit 3): each candidate once a round.
    assert plan == [[NEW], [1, 1], [NEW]]
    assert exchange_counts(plan, [2, 2, 0]) == {"pruned": 3, "cloned": 1, "new": 2, "moved": 1}
    assert made_by(plan) == [1, 2, 2, 1]
    # A block's new unit may be chosen again in later rounds, within its room.
    plan = plan_exchange(torch.tensor([1.0, 2.0, 3.0]), [2, 1, 0], [2, 1, 2], k=2, grow_scores=torch.zeros(3),
                         new_scores=torch.tensor([float("nan"), float("nan"), 1.0]))
    assert plan == [[], [0], [NEW, NEW]]  # block 1 is full, so its unit cannot be cloned
    # Grow scores rank the clones when given, instead of the prune scores.
    assert plan_exchange(torch.tensor([1.0, 2.0, 3.0]), [3], [9], k=1, grow_scores=torch.tensor([0.0, 5.0, 1.0])) == [[1, 2, 1]]


def test_budget_holds_with_protection_and_new_units_on_random_cases() -> None:
    g = torch.Generator().manual_seed(2)
    for _ in range(200):
        blocks = int(torch.randint(1, 5, (1,), generator=g))
        caps = torch.randint(1, 7, (blocks,), generator=g).tolist()
        counts = [int(torch.randint(0, c + 1, (1,), generator=g)) for c in caps]
        n = sum(counts)
        scores, grow = torch.rand(n, generator=g), torch.rand(n, generator=g)
        protected = torch.rand(n, generator=g) < 0.3
        new = torch.where(torch.rand(blocks, generator=g) < 0.5, torch.rand(blocks, generator=g), torch.nan)
        k = int(torch.randint(0, n + 2, (1,), generator=g))
        plan = plan_exchange(scores, counts, caps, k, torch.Generator().manual_seed(1), protected=protected,
                             grow_scores=grow, new_scores=new)
        assert sum(len(p) for p in plan) == n and all(len(p) <= cap for p, cap in zip(plan, caps))
        flat = [sum(counts[:b]) + s for b, p in enumerate(plan) for s in p if s != NEW]
        assert not any(bool(protected[u]) for u in set(range(n)) - set(flat))
        assert all(not torch.isnan(new[b]) for b, p in enumerate(plan) if NEW in p)
        stats = exchange_counts(plan, counts)
        assert stats["pruned"] == stats["cloned"] + stats["new"] <= k
        assert len(made_by(plan)) == n


def test_new_units_take_free_slots() -> None:
    assert assign_slots([3, 1], [1, NEW, 1, NEW], cap=5) == [1, 0, 2, 3]  # slot 3 freed by the pruned unit
