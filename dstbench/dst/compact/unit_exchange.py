"""Which units to prune and which to clone at a topology update (host-side planning, no tensors moved).

One unit kind at a time (heads, or FFN channels), over all blocks at once:

* the `k` lowest-scoring units are pruned (ties in a seeded random order);
* the `k` highest-scoring survivors are cloned, each into its own block. When a block is at its
  dense width (`caps`) the clone goes to the next survivor down; when `k` exceeds the survivors the
  walk starts over from the top, so a unit may get several clones;
* if fewer than `k` clones fit (e.g. every block is full), fewer units are pruned, so the budget,
  the total number of units, never changes.

Options (see `plan_exchange`): units that may not be pruned (BARTER's `fresh_units: exempt`), and
growth ranked on its own scores, with new units (`NEW`) as candidates in blocks with room (BARTER's
`grow: clone_or_new`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dstbench.dst.compact.surgery import NEW


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
    *,
    protected: torch.Tensor | None = None,
    grow_scores: torch.Tensor | None = None,
    new_scores: torch.Tensor | None = None,
) -> list[list[int]]:
    """Per block, the `sources` of its new units (old local indices): survivors in their old order,
    then the grown units, best first: clones (their source's index) and new units (`NEW`). A block
    whose list is `range(counts[b])` is unchanged.

    `scores` is flat (block after block, each block's units in order), on the host; the lowest are
    pruned. `protected` (bool per unit): never pruned. `grow_scores` (per unit): ranks the survivors
    as clone sources (default: `scores`). `new_scores` (per block; NaN where none may be made): a new
    unit in that block competes with the clones on `grow_scores`' scale, and may be chosen as often
    as the block has room.
    """
    counts = [int(c) for c in counts]
    n = sum(counts)
    if len(scores) != n:
        raise ValueError(f"{len(scores)} scores for {n} units")
    if any(c > cap for c, cap in zip(counts, caps)):
        raise ValueError("a block holds more units than its cap")
    if new_scores is not None and (grow_scores is None or len(new_scores) != len(counts)):
        raise ValueError("new_scores needs grow_scores and one score per block")
    for name, values in (("protected", protected), ("grow_scores", grow_scores)):
        if values is not None and len(values) != n:
            raise ValueError(f"{len(values)} {name} for {n} units")
    unchanged = [list(range(c)) for c in counts]
    prunable = torch.ones(n, dtype=torch.bool) if protected is None else ~protected.to("cpu", torch.bool)
    # Clones need a survivor to copy; new units do not.
    k = min(int(k), n - 1 if new_scores is None else n, int(prunable.sum()))
    if k <= 0:
        return unchanged
    scores = scores.detach().to("cpu", torch.float64)
    blocks = len(counts)
    block_of = torch.repeat_interleave(torch.arange(blocks), torch.tensor(counts, dtype=torch.long))
    # Ascending score; equal scores in a seeded random order.
    perm = torch.randperm(n, generator=generator)
    order = perm[torch.argsort(scores[perm], stable=True)]
    prune_order = order[prunable[order]]
    # Growth candidates, best first: unit u (a clone of it) and, with new_scores, n + b (a new unit
    # in block b).
    candidate_block = block_of
    if grow_scores is None:
        desc = order.flip(0)
    else:
        grow = grow_scores.detach().to("cpu", torch.float64)
        ids = torch.arange(n)
        if new_scores is not None:
            new = new_scores.detach().to("cpu", torch.float64)
            open_blocks = torch.nonzero(~torch.isnan(new)).flatten()
            grow, ids = torch.cat([grow, new[open_blocks]]), torch.cat([ids, n + open_blocks])
            candidate_block = torch.cat([block_of, torch.arange(blocks)])
            ties = torch.randperm(len(ids), generator=generator)
        else:
            ties = perm
        desc = ids[ties][torch.argsort(grow[ties], descending=True, stable=True)]
    caps_t = torch.tensor(list(caps), dtype=torch.long)
    counts_t = torch.tensor(counts, dtype=torch.long)
    while k > 0:
        pruned = prune_order[:k]
        gone = torch.zeros(len(candidate_block), dtype=torch.bool)
        gone[pruned] = True
        free = caps_t - (counts_t - torch.bincount(block_of[pruned], minlength=blocks))
        grown = _clone_sources(desc[~gone[desc]], candidate_block, free, k)
        if len(grown) == k:
            break
        k = len(grown)  # fewer fit: prune fewer (monotone, so this ends)
    if k == 0:
        return unchanged
    starts = torch.cumsum(counts_t, 0) - counts_t
    keep = torch.ones(n, dtype=torch.bool)
    keep[prune_order[:k]] = False
    grown_blocks = candidate_block[grown]
    plan = []
    for b in range(blocks):
        lo, hi = int(starts[b]), int(starts[b]) + counts[b]
        survivors = torch.nonzero(keep[lo:hi]).flatten().tolist()
        added = [c - lo if c < n else NEW for c in grown[grown_blocks == b].tolist()]  # best first
        plan.append(survivors + added)
    return plan


def exchange_counts(plan: Sequence[Sequence[int]], counts: Sequence[int]) -> dict[str, int]:
    """What a plan does: units `pruned`, extra copies `cloned`, `new` units, and units `moved`
    between blocks (the capacity some blocks gained: a pruned unit whose place went elsewhere)."""
    pruned = sum(c - len({s for s in p if s != NEW}) for p, c in zip(plan, counts))
    new = sum(1 for p in plan for s in p if s == NEW)
    cloned = sum(len(p) for p in plan) - new - sum(len({s for s in p if s != NEW}) for p in plan)
    moved = sum(max(0, len(p) - c) for p, c in zip(plan, counts))
    return {"pruned": pruned, "cloned": cloned, "new": new, "moved": moved}


def made_by(plan: Sequence[Sequence[int]]) -> list[int]:
    """Flat over the new units, the number of copies its source was split into at this exchange
    (every copy, the source's first included), 1 for a new unit, 0 for a unit left as it was."""
    out = []
    for sources in plan:
        copies = {s: sum(1 for t in sources if t == s) for s in set(sources)}
        out += [1 if s == NEW else (copies[s] if copies[s] > 1 else 0) for s in sources]
    return out


def assign_slots(slots: Sequence[int], sources: Sequence[int], cap: int) -> list[int]:
    """Full-size slots of the new units: a source's first copy keeps its slot, further copies and
    new units take the lowest free slots."""
    taken: set[int] = set()
    out: list[int | None] = []
    for source in sources:
        if source == NEW:
            out.append(None)
            continue
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
