"""Constant fan-in masks (SRigL): every live output row of a layer holds the same number of active
weights, and neurons whose incoming weights are no longer salient are ablated whole.

A *neuron* is an output row of a `(out, in)` weight; its *fan-in* the active weights in that row. A
layer of budget `B` (its allotment) with `L` live rows holds `k = B // L` weights in each of them
and none in the others, so it holds `k * L <= B` weights (short by `B mod L`, fewer than one per
live row). Row-wise selections break ties by a seeded random column order, so the seed fixes them.
"""

from __future__ import annotations

import torch

from dstbench.dst.masked.scorers import select_top


def fan_in(budget: int, live_rows: int, columns: int) -> int:
    """`budget // live_rows`: the weights each live row holds; at least 1 and at most `columns`."""
    if live_rows <= 0:
        raise ValueError("a layer needs at least one live neuron")
    k = budget // live_rows
    if not 1 <= k <= columns:
        raise ValueError(
            f"a budget of {budget} weights over {live_rows} live rows of {columns} inputs gives a fan-in of {k}: "
            "constant fan-in needs between 1 and the row width per live row"
        )
    return k


def random_fan_in_mask(shape: tuple[int, int], k: int, generator: torch.Generator) -> torch.Tensor:
    """A CPU bool mask of `shape` with exactly `k` active positions in every row, drawn uniformly
    at random per row from `generator`."""
    rows, columns = shape
    if not 0 <= k <= columns:
        raise ValueError(f"cannot make {k} of {columns} positions per row active")
    order = torch.rand(rows, columns, generator=generator).argsort(dim=1)
    mask = torch.zeros(rows, columns, dtype=torch.bool)
    mask.scatter_(1, order[:, :k], True)
    return mask


def top_per_row(
    scores: torch.Tensor, candidates: torch.Tensor, per_row: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Bool mask of the `per_row[r]` highest-scoring candidates of each row `r` of a 2-D tensor.

    NaN scores rank lowest. Ties are broken by one seeded random column order (drawn from
    `generator`, shared by the rows). A row with fewer candidates than asked gets all of them.
    """
    rows, columns = scores.shape
    per_row = per_row.to(device=scores.device, dtype=torch.long).clamp(min=0)
    order = torch.randperm(columns, generator=generator).to(scores.device)
    # Stable sorts: among equal scores the random column order decides; then candidates before the
    # others, so a NaN (or -inf) candidate still ranks above every non-candidate.
    by_score = torch.sort(scores.nan_to_num(nan=-torch.inf)[:, order], dim=1, descending=True, stable=True).indices
    is_candidate = candidates[:, order].gather(1, by_score).to(torch.int8)
    ranked = by_score.gather(1, torch.sort(is_candidate, dim=1, descending=True, stable=True).indices)
    rank = torch.empty_like(ranked)
    rank.scatter_(1, ranked, torch.arange(columns, device=scores.device).expand(rows, columns))
    chosen = torch.empty(rows, columns, dtype=torch.bool, device=scores.device)
    chosen[:, order] = rank < per_row[:, None]
    return chosen & candidates


def live_neurons(
    active: torch.Tensor,
    magnitude: torch.Tensor,
    gradient: torch.Tensor,
    n_keep: int,
    n_grow: int,
    budget: int,
    gamma_sal: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Bool per row: the neurons that stay live after this update (SRigL's neuron ablation, as in
    calgaryml/condensed-sparsity's `_get_neurons_to_ablate`).

    A weight is *salient* when it is among the `n_keep` active weights of largest magnitude (the
    ones the prune keeps) or among the `n_grow` positions of largest gradient in the whole layer
    (the ones a grow would pick). A row with fewer salient weights than the threshold is ablated:
    `max(1, int(gamma_sal * k0))` for `gamma_sal` below 1 (`k0 = budget // rows`, the fan-in without
    ablation), `gamma_sal` itself, an absolute count, from 1 up (as the reference reads its
    `min_salient_weights_per_neuron`). The threshold is lowered when needed so that at least
    `ceil(n / columns) + 1` rows stay live, `n = n_keep + n_grow` the layer's active weights (the
    reference's `min_neurons`), and never fewer than `budget // columns + 1`, which keeps the fan-in
    within the row width. `gamma_sal` 0 ablates nothing.
    """
    rows, columns = active.shape
    if gamma_sal <= 0:
        return torch.ones(rows, dtype=torch.bool, device=active.device)
    salient = torch.zeros(rows * columns, dtype=torch.bool, device=active.device)
    salient[select_top(magnitude, active, n_keep, generator)] = True
    salient[select_top(gradient, torch.ones_like(active), n_grow, generator)] = True
    counts = salient.view(rows, columns).sum(dim=1)
    least = gamma_sal if gamma_sal >= 1 else max(1, int(gamma_sal * (budget // rows)))
    threshold = torch.tensor(least, device=active.device, dtype=torch.float32)
    n_active = n_keep + n_grow
    fewest_live = max(-(-n_active // columns), budget // columns)  # ceil(n / columns), as the reference
    if fewest_live < rows:
        threshold = torch.minimum(threshold, counts.sort(descending=True).values[fewest_live].to(threshold.dtype))
    return counts >= threshold
