"""Transposable 2:4 masks: the 90 tile patterns, the projection of a proposed mask onto them, and
the counts that say how much of a proposed exchange a projection carried out.

A mask is transposable 2:4 when every 4x4 tile holds exactly two active positions in each row and
each column (so W and W^T are both 2:4 along their rows). Pure tensor code, on any device.

Projection of an update's proposal (`project_transposable_2to4` with `previous`, the mask before
the update). A layer's drop-and-grow proposal is not 2:4: RigL drops and grows per layer, so a
tile may gain a grown position without losing one. Per tile, the projection keeps the most
proposed positions (a nearest transposable mask: every pattern has 8 positions, so that is the
fewest positions differing from the proposal). Several patterns often tie; they differ in what
they turn on (positions active in the pattern, not in `previous`): *proposed* turn-ons (positions
the proposal grows) and turn-ons nobody asked for. Two of the tied patterns per tile matter:

    stay  the fewest turn-ons; among those, the most proposed ones
    move  the most proposed turn-ons; among those, the fewest turn-ons in all

Among tied patterns with the same proposed turn-ons, one that turns off one more position the
proposal dropped also turns on one more position nobody proposed (both have 8 positions and keep
as many proposed ones), so `move` keeps a dropped position rather than turn on an unasked one.
A proposed turn-on may cost a position the proposal kept rather than one it dropped: every tied
pattern differs from the proposal in as many positions, and the |w| tie-break keeps the larger
weights, which are the ones RigL keeps.

Breaking every tie towards the previous mask (as a tie-break by |w| alone does: grown weights are
0 and dropped ones keep small values) undoes most of the exchange. Taking `move` in every tile
makes the most proposed turn-ons a nearest mask can, but also turns on positions nobody asked for,
past the count asked (asked 0.30 on a random 384x384 mask: 22,118 turn-ons requested, 24,262 made,
18,536 of them proposed; preferring, among equal proposed turn-ons, to turn off dropped positions:
27,727 made). So every tile starts at `stay`, and tiles switch to `move` while the layer's
turn-ons stay within the count the proposal asks for: those adding the most proposed turn-ons per
turn-on first, then those giving up the least |w| per turn-on, then in tile order. A switch that
adds no proposed turn-on is never made. Every switch keeps the tile nearest to the proposal.
Within a choice, ties go to the larger sum of |w|.

What holds, per layer (`exchange_counts` records the counts): the projection is transposable and
nearest; it turns on at most as many positions as the proposal does (unless the `stay` patterns
alone turn on more, which nearest masks cannot avoid; not seen on RigL proposals); it falls short
of that count by 8 positions or more (a switch turns on at most 8) only where every tile already
makes the most proposed turn-ons a nearest pattern can. On a random 384x384 mask (requested, made,
of them proposed): asked 0.30, 22,118, 22,118, 17,475 (the count binds; nearest masks make at most
17,487 proposed turn-ons within it, by a Lagrangian bound); asked 0.15, 11,059, 10,161, 7,193 and
asked 0.05, 3,686, 1,636, 1,085 (every proposed turn-on a nearest mask can make: the rest fit no
nearest pattern).
"""

from __future__ import annotations

import itertools

import torch

TILE = 4


def _tile_patterns() -> torch.Tensor:
    """The 90 4x4 bool patterns with exactly two ones in each row and each column, flattened (90, 16)."""
    rows = [r for r in itertools.product((0, 1), repeat=TILE) if sum(r) == 2]
    patterns = [p for p in itertools.product(rows, repeat=TILE) if all(sum(col) == 2 for col in zip(*p))]
    return torch.tensor(patterns, dtype=torch.float32).reshape(len(patterns), TILE * TILE)


PATTERNS = _tile_patterns()


def check_tiles(name: str, shape: tuple[int, ...]) -> None:
    if len(shape) != 2 or shape[0] % TILE or shape[1] % TILE:
        raise ValueError(f"execution semi_structured: {name} has shape {tuple(shape)}; 2:4 tiles need both dimensions divisible by {TILE}")


def _tiles(t: torch.Tensor) -> torch.Tensor:
    rows, cols = t.shape
    return t.reshape(rows // TILE, TILE, cols // TILE, TILE).permute(0, 2, 1, 3).reshape(-1, TILE * TILE)


def _untile(tiles: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    rows, cols = shape
    return tiles.reshape(rows // TILE, cols // TILE, TILE, TILE).permute(0, 2, 1, 3).reshape(rows, cols)


def _best(allowed: torch.Tensor, *keys: torch.Tensor) -> torch.Tensor:
    """Per tile (row), the allowed pattern with the largest first key, ties to the largest second,
    and so on; remaining ties to the first pattern."""
    chosen = allowed
    for key in keys:
        scores = torch.where(chosen, key, -torch.inf)
        chosen = chosen & (scores == scores.max(dim=1, keepdim=True).values)
    return chosen.to(torch.uint8).argmax(dim=1)


def _pick(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return values.gather(1, index[:, None]).squeeze(1)


def project_transposable_2to4(
    proposed: torch.Tensor, magnitude: torch.Tensor, previous: torch.Tensor | None = None
) -> torch.Tensor:
    """A transposable 2:4 bool mask nearest to `proposed`: per 4x4 tile a pattern keeping the most
    proposed positions. Without `previous` (initial masks), ties go to the largest sum of
    `magnitude` (|w|). With `previous` (the mask before an update), the tied patterns carry out as
    many of the proposal's turn-ons as they can without turning on more positions than the proposal
    does (module docstring)."""
    check_tiles("the mask", tuple(proposed.shape))
    shape = (int(proposed.shape[0]), int(proposed.shape[1]))
    proposed = proposed.to(torch.bool)
    patterns = PATTERNS.to(proposed.device)

    def per_pattern(t: torch.Tensor) -> torch.Tensor:
        return _tiles(t.to(torch.float32)) @ patterns.t()

    # Counts per tile and pattern are small integers, exact in float32; |w| is compared only among
    # patterns equal in every count before it.
    agreement = per_pattern(proposed)
    weight = per_pattern(magnitude.detach().abs())
    nearest = agreement == agreement.max(dim=1, keepdim=True).values
    if previous is None:
        return _untile(patterns[_best(nearest, weight)], shape) > 0
    previous = previous.to(device=proposed.device, dtype=torch.bool)
    turned_on = per_pattern(~previous)  # positions a pattern turns on
    asked = per_pattern(proposed & ~previous)  # of those, the ones the proposal turns on
    stay = _best(nearest, -turned_on, asked, weight)
    move = _best(nearest, asked, -turned_on, weight)
    extra_asked = (_pick(asked, move) - _pick(asked, stay)).to(torch.int64)  # >= 0
    extra_on = (_pick(turned_on, move) - _pick(turned_on, stay)).to(torch.int64)  # >= 0
    lost = _pick(weight, stay) - _pick(weight, move)
    # A switch that adds no proposed turn-on is never made. Order: the most proposed turn-ons per
    # turn-on (a switch adding none first), then the least |w| given up per turn-on, then tile
    # order (two stable sorts, the main key last). Fixed shapes throughout: no host sync.
    useful = extra_asked > 0
    per_on = torch.where(extra_on > 0, extra_asked / extra_on.clamp(min=1), torch.inf)
    order = torch.argsort(lost / extra_on.clamp(min=1), stable=True)
    order = order[torch.argsort(torch.where(useful, -per_on, torch.inf)[order], stable=True)]
    room = (proposed & ~previous).sum() - _pick(turned_on, stay).sum().to(torch.int64)  # turn-ons left to make
    switch = torch.zeros_like(useful)
    switch[order] = (torch.cumsum((extra_on * useful)[order], dim=0) <= room) & useful[order]
    return _untile(patterns[torch.where(switch, move, stay)], shape) > 0


def is_transposable_2to4(mask: torch.Tensor) -> bool:
    tiles = _tiles(mask.to(torch.int32)).reshape(-1, TILE, TILE)
    return bool((tiles.sum(dim=2) == 2).all() and (tiles.sum(dim=1) == 2).all())


def exchange_counts(
    previous: torch.Tensor, proposed: torch.Tensor, projected: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """One layer's exchange, as an int64 tensor on the masks' device (no host sync): active positions
    before, positions the proposal turns on, positions the projection turns on, and of those the
    ones the proposal turned on (with equal counts before and after, as many turn off as on); then
    what the projection changed that the proposal did not ask for: the positions it turns off
    (removals), of them the ones the proposal kept (unrequested removals), of those the ones whose
    |w| (`weight`, before the update) is above the median |w| of the layer's active weights, and
    the positions it turns on that the proposal did not."""
    grown = proposed & ~previous
    turned_on = projected & ~previous
    removed = previous & ~projected
    unrequested = removed & proposed
    magnitude = weight.detach().abs()
    median = torch.where(previous, magnitude, torch.nan).nanmedian()  # of the active weights; no sync
    above = unrequested & (magnitude > median)
    return torch.stack([
        previous.sum(), grown.sum(), turned_on.sum(), (turned_on & grown).sum(),
        removed.sum(), unrequested.sum(), above.sum(), (turned_on & ~proposed).sum(),
    ]).to(torch.int64)
