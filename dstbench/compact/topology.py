"""Which units to prune and which to clone at a topology update (host-side planning, no tensors moved).

One unit kind at a time (heads, or FFN channels), over all blocks at once:

* the `k` lowest-scoring units are pruned (ties in a seeded random order);
* the `k` highest-scoring survivors are cloned, each into its own block. When a block is at its
  dense width (`caps`) the clone goes to the next survivor down; when `k` exceeds the survivors the
  walk starts over from the top, so a unit may get several clones;
* if fewer than `k` clones fit (e.g. every block is full), fewer units are pruned, so the budget,
  the total number of units, never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _ranks_within_blocks(blocks: torch.Tensor) -> torch.Tensor:
    """For each position, how many earlier positions belong to the same block."""
    if len(blocks) == 0:
        return blocks
    order = torch.argsort(blocks, stable=True)
    sorted_blocks = blocks[order]
    counts = torch.bincount(sorted_blocks)
    starts = torch.cumsum(counts, 0) - counts
    ranks = torch.empty_like(blocks)
    ranks[order] = torch.arange(len(blocks)) - starts[sorted_blocks]
    return ranks


def _clone_sources(desc: torch.Tensor, block_of: torch.Tensor, free: torch.Tensor, k: int) -> torch.Tensor:
    """Up to `k` clone sources from survivors `desc` (best first), in rounds, within block room."""
    picks: list[torch.Tensor] = []
    need = k
    free = free.clone()
    while need > 0 and len(desc):
        blocks = block_of[desc]
        eligible = _ranks_within_blocks(blocks) < free[blocks]
        chosen = desc[eligible][:need]
        if len(chosen) == 0:
            break
        picks.append(chosen)
        need -= len(chosen)
        free -= torch.bincount(block_of[chosen], minlength=len(free))
    return torch.cat(picks) if picks else desc[:0]


def plan_exchange(
    scores: torch.Tensor,
    counts: Sequence[int],
    caps: Sequence[int],
    k: int,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Per block, the `sources` of its new units (old local indices): survivors in their old order,
    then the clones, best source first. A block whose list is `range(counts[b])` is unchanged.

    `scores` is flat (block after block, each block's units in order), on the host.
    """
    counts = [int(c) for c in counts]
    n = sum(counts)
    if len(scores) != n:
        raise ValueError(f"{len(scores)} scores for {n} units")
    if any(c > cap for c, cap in zip(counts, caps)):
        raise ValueError("a block holds more units than its cap")
    unchanged = [list(range(c)) for c in counts]
    k = min(int(k), n - 1)
    if k <= 0:
        return unchanged
    scores = scores.detach().to("cpu", torch.float64)
    block_of = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts, dtype=torch.long))
    # Ascending score; equal scores in a seeded random order.
    perm = torch.randperm(n, generator=generator)
    order = perm[torch.argsort(scores[perm], stable=True)]
    caps_t = torch.tensor(list(caps), dtype=torch.long)
    counts_t = torch.tensor(counts, dtype=torch.long)
    while k > 0:
        pruned = order[:k]
        free = caps_t - (counts_t - torch.bincount(block_of[pruned], minlength=len(counts)))
        clones = _clone_sources(order[k:].flip(0), block_of, free, k)
        if len(clones) == k:
            break
        k = len(clones)  # fewer fit: prune fewer (monotone, so this ends)
    if k == 0:
        return unchanged
    starts = torch.cumsum(counts_t, 0) - counts_t
    keep = torch.ones(n, dtype=torch.bool)
    keep[order[:k]] = False
    clone_blocks = block_of[clones]
    plan = []
    for b in range(len(counts)):
        lo, hi = int(starts[b]), int(starts[b]) + counts[b]
        survivors = torch.nonzero(keep[lo:hi]).flatten().tolist()
        cloned = (clones[clone_blocks == b] - lo).tolist()  # best source first
        plan.append(survivors + cloned)
    return plan


def assign_slots(slots: Sequence[int], sources: Sequence[int], cap: int) -> list[int]:
    """Full-size slots of the new units: a source's first copy keeps its slot, further copies take
    the lowest free slots."""
    taken: set[int] = set()
    out: list[int | None] = []
    for source in sources:
        slot = slots[source]
        if slot in taken:
            out.append(None)
        else:
            taken.add(slot)
            out.append(slot)
    if len(out) > cap:
        raise ValueError(f"{len(out)} units do not fit {cap} slots")
    free = iter(s for s in range(cap) if s not in taken)
    return [s if s is not None else next(free) for s in out]
