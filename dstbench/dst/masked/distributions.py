"""Layer densities of a sparse network, and the exact number of active weights each layer gets.

`uniform` puts every layer at the target density. `erk` (Erdos-Renyi-Kernel, Evci et al. 2020) makes
a layer's density proportional to `sum(shape) / prod(shape)`, so small and narrow layers are denser;
a layer that would exceed 1.0 is made dense and the scale is solved again for the others.

`allot` turns densities into integer counts whose total is exactly `target_active(total, density)`;
`distribute` spreads an integer amount over layers in proportion to weights under per-layer caps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dstbench.dst.update_schedule import round_half_up

Shapes = Mapping[str, Sequence[int]]

DISTRIBUTIONS = ("erk", "uniform")


def target_active(total: int, density: float) -> int:
    """round(density * total), half up (`round_half_up`, the rule every count follows)."""
    return round_half_up(density * total)


def uniform_densities(shapes: Shapes, density: float) -> dict[str, float]:
    return {name: float(density) for name in shapes}


def erk_densities(shapes: Shapes, density: float, power: float = 1.0) -> dict[str, float]:
    """ERK densities: `eps * (sum(shape) / prod(shape)) ** power`, capped at 1.0.

    `eps` is solved so that the active weights of all layers sum to `density * total`; each time
    a layer would exceed 1.0 it becomes dense and `eps` is solved again for the remaining layers.
    """
    _check_density(density)
    numel = {name: math.prod(shape) for name, shape in shapes.items()}
    raw = {name: (sum(shape) / numel[name]) ** power for name, shape in shapes.items()}
    dense: set[str] = set()
    while True:
        sparse = [name for name in shapes if name not in dense]
        if not sparse:
            return {name: 1.0 for name in shapes}
        # Active weights the sparse layers must hold once the dense ones are paid in full.
        budget = density * sum(numel.values()) - sum(numel[name] for name in dense)
        eps = budget / sum(raw[name] * numel[name] for name in sparse)
        over = [name for name in sparse if eps * raw[name] > 1.0]
        if not over:
            return {name: 1.0 if name in dense else eps * raw[name] for name in shapes}
        # Only the layers with the largest raw density are capped per round, as RigL does: capping
        # one layer lowers eps, which may bring the next-largest back under 1.0.
        top = max(raw[name] for name in over)
        dense.update(name for name in over if raw[name] == top)


def allot(shapes: Shapes, densities: Mapping[str, float], density: float) -> dict[str, int]:
    """Integer active counts per layer, close to `densities` and summing to `target_active`.

    Largest-remainder rounding: every layer gets `floor(d * n)`, and the weights still missing go
    one each to the layers with the largest fractional parts (layer order breaks ties).
    """
    numel = {name: math.prod(shape) for name, shape in shapes.items()}
    total = sum(numel.values())
    want = target_active(total, density)
    exact = {name: min(1.0, max(0.0, densities[name])) * numel[name] for name in shapes}
    counts = {name: min(numel[name], int(math.floor(value))) for name, value in exact.items()}
    missing = want - sum(counts.values())
    order = sorted(shapes, key=lambda name: exact[name] - counts[name], reverse=True)
    while missing > 0:
        progressed = False
        for name in order:
            if missing == 0:
                break
            if counts[name] < numel[name]:
                counts[name] += 1
                missing -= 1
                progressed = True
        if not progressed:
            raise ValueError(f"cannot place {want} active weights in {total}")
    # Densities that over-ask (e.g. all 1.0 at a lower target) are trimmed from the smallest parts.
    for name in reversed(order):
        if missing >= 0:
            break
        take = min(counts[name], -missing)
        counts[name] -= take
        missing += take
    return counts


def distribute(amount: int, weights: Mapping[str, float], caps: Mapping[str, int]) -> dict[str, int]:
    """`amount` units over the layers in proportion to `weights`, none above its cap, summing to
    exactly `amount`. A layer whose share would exceed its cap takes the cap and the others share
    what it could not take (solved again, as `erk_densities` does); rounding is largest remainder
    (layer order breaks ties), and a layer of weight 0 takes units only when no other has room."""
    names = list(weights)
    if not 0 <= amount <= sum(caps[n] for n in names):
        raise ValueError(f"cannot place {amount} units under caps totalling {sum(caps[n] for n in names)}")
    out = dict.fromkeys(names, 0)
    exact: dict[str, float] = {}
    free = [n for n in names if caps[n] > 0 and weights[n] > 0]
    left = amount
    while free and left > 0:
        scale = left / sum(weights[n] for n in free)
        full = [n for n in free if weights[n] * scale >= caps[n]]
        if not full:
            exact = {n: weights[n] * scale for n in free}
            for n in free:
                out[n] = int(exact[n])
            left -= sum(out[n] for n in free)
            break
        for n in full:
            out[n] = caps[n]
            left -= caps[n]
        free = [n for n in free if n not in full]
    order = sorted(names, key=lambda n: exact.get(n, 0.0) - out[n], reverse=True)
    while left > 0:
        for n in order:
            if left and out[n] < caps[n]:
                out[n] += 1
                left -= 1
    return out


def layer_allotment(shapes: Shapes, density: float, distribution: str = "erk") -> dict[str, int]:
    """Active weights per layer for `distribution` ("erk" or "uniform") at `density`."""
    _check_density(density)
    if distribution == "erk":
        densities = erk_densities(shapes, density)
    elif distribution == "uniform":
        densities = uniform_densities(shapes, density)
    else:
        raise ValueError(f"unknown distribution {distribution!r} (allowed: {', '.join(DISTRIBUTIONS)})")
    return allot(shapes, densities, density)


def _check_density(density: float) -> None:
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
