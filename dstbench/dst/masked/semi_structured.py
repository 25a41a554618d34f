"""`execution: semi_structured`: 2:4 sparsity on CUDA through torch's semi-structured tensors on
cuSPARSELt (`torch.sparse.SparseSemiStructuredTensorCUSPARSELT`; torch's CUTLASS 2:4 backend is
not used: torch picks it only when forced, and it runs on sm8x only).

Masks are *transposable* 2:4: in every 4x4 tile of a weight each row and each column holds exactly
two active weights, so both W (forward, x W^T) and W^T (input gradient, dy W) are 2:4 along their
rows and both products run on the 2:4 kernels. The weight gradient stays a dense product, masked
like the masked execution's (as in published 2:4 training recipes). Each layer is at density 0.5
exactly, whatever the distribution says.

Projection (`transposable.project_transposable_2to4`): at the initial masks and at every
`set_mask` (every update), the proposed mask is replaced by a transposable 2:4 mask nearest to it
(per tile, a pattern keeping the most proposed positions). At an update, the nearest patterns
chosen turn on as many of the positions the proposal grows as they can without turning on more
positions in all than the proposal does: they never exceed the count asked (unless nearest masks
alone need more) and may fall short of it (nearest masks cannot carry out every proposed change,
most at small fractions; figures in `transposable`'s module docstring). Every update records what
was asked and what was done (`exchange_extras`, the result line's `method_extras`).

What runs: the weights stay full-size (the masked execution's `MaskSet`, with its masks and
per-step masking). Each forward compresses W and W^T once, together (`compress_pair`; torch's
tile kernel makes both in one pass where the shape allows it), and its backward reuses W^T: one
compression per training step, since the optimizer changes the weights between steps. The pair
lives with the graph, from a layer's forward to its backward (about 1.1x the layer's fp16/bf16
weight bytes: half the values plus metadata, twice), and is freed there. Inputs run
in the autocast dtype (cuSPARSELt takes fp16/bf16), so the suite's precision must be one of them,
and cuSPARSELt's fp16/bf16 kernels take W (and so W^T) with both dimensions multiples of 16:
suite validation refuses other shapes (`problem`), as the case process does at install.

Untested on hardware here: the machine dstbench was built on has no GPU. The projection, the
validations and the layer's autograd (with a dense stand-in for the compression) are tested on
the CPU; the CUDA test (`pytest -m cuda`) and `scripts/gpu_check.sh` run the real kernels where a
GPU with 2:4 support (sm80+) and cuSPARSELt are present.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch.sparse import SparseSemiStructuredTensorCUSPARSELT as CuSparseLtTensor

from dstbench.dst.masked.masks import MaskSet
from dstbench.dst.masked.sparse_linear import LiveGraphs, kernel_linear, owning_linear, replace_module
from dstbench.dst.masked.transposable import PATTERNS, exchange_counts, is_transposable_2to4, project_transposable_2to4

# The projection lives in `transposable`; PATTERNS, is_transposable_2to4 and
# project_transposable_2to4 are named here too, beside the execution that uses them.
__all__ = [
    "DENSITY", "PATTERNS", "PRECISIONS", "SHAPE_MULTIPLE", "SemiStructuredLinear", "SemiStructuredMaskSet",
    "check_device", "compress_pair", "half_allotment", "is_transposable_2to4", "pair_kernel_checks",
    "problem", "project_transposable_2to4", "shape_problem", "swap_linears",
]

DENSITY = 0.5
PRECISIONS = ("bf16", "fp16")
# cuSPARSELt's smallest fp16/bf16 sparse operand: rows and columns multiples of 16 (torch's
# `_DTYPE_SHAPE_CONSTRAINTS`). Both W and W^T are compressed, so both dimensions of W must be.
SHAPE_MULTIPLE = 16
# torch's tile kernel (`_sparse_semi_structured_tile`), which makes W and W^T in one pass, lays out
# cuSPARSELt metadata for multiples of 128 only; other shapes compress W and W^T separately.
PAIR_KERNEL_MULTIPLE = 128
# The tile kernel keeps, per 4x4 tile, the largest |values| that fit two per row and column: every
# nonzero of a transposable 2:4 weight (its default ranks signed values, which would drop negatives).
PAIR_KERNEL_ALGORITHM = "largest_abs_values_greedy"


def shape_problem(shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """Why these prunable weights cannot run on cuSPARSELt's fp16/bf16 2:4 kernels, or None."""
    bad = [(name, shape) for name, shape in shapes.items() if len(shape) != 2 or any(d % SHAPE_MULTIPLE for d in shape)]
    if not bad:
        return None
    listed = ", ".join(f"{name} ({'x'.join(str(d) for d in shape)})" for name, shape in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (
        f"execution semi_structured compresses W and W^T for cuSPARSELt, whose fp16/bf16 2:4 kernels need both "
        f"dimensions multiples of {SHAPE_MULTIPLE}; not {listed}{more}"
    )


def problem(device: str, densities: list[float], precision: str, shapes: Mapping[str, tuple[int, ...]] | None = None) -> str | None:
    """Why semi_structured cannot run with these settings (and, when given, these prunable weight
    shapes), or None. Suite validation calls it, so a run never starts a case that cannot run."""
    if device != "cuda":
        return f"execution semi_structured runs on CUDA only (2:4 sparse kernels); the device is {device} (set device: cuda)"
    others = sorted({d for d in densities if abs(d - DENSITY) > 1e-9})
    if others:
        listed = ", ".join(f"{d:g}" for d in others)
        return f"execution semi_structured holds density 0.5 exactly (2:4), not {listed}; restrict the method with `densities: [0.5]`"
    if precision not in PRECISIONS:
        return f"execution semi_structured computes in fp16 or bf16 (cuSPARSELt); set precision to one of {list(PRECISIONS)}, not {precision}"
    return shape_problem(shapes) if shapes is not None else None


def check_device(device: torch.device, density: float, precision: str) -> None:
    """Raise unless this process can train at `density` and `precision` on cuSPARSELt's 2:4 kernels."""
    found = problem(device.type, [density], precision)
    if found:
        raise ValueError(found)
    if not torch.backends.cusparselt.is_available():
        raise ValueError(
            "execution semi_structured runs on cuSPARSELt, which this torch build lacks "
            "(torch.backends.cusparselt.is_available() is False); use a CUDA build of torch that ships it"
        )
    if torch.cuda.get_device_capability(device) < (8, 0):
        raise ValueError("execution semi_structured needs a GPU with 2:4 sparse tensor cores (compute capability 8.0 or newer)")


# -- compression (CUDA only) ------------------------------------------------------------------------
# Whether torch's tile kernel gave products equal to the dense ones, per (shape, dtype, device):
# its cuSPARSELt metadata layout is torch's own, so each is checked once against the dense product
# and, should it ever disagree, that shape compresses W and W^T separately (with a warning).
_PAIR_KERNEL_AGREES: dict[tuple[Any, ...], bool] = {}


def _products_agree(weight: torch.Tensor, pair: tuple[torch.Tensor, torch.Tensor]) -> bool:
    generator = torch.Generator(device=weight.device).manual_seed(0)  # not the training's RNG
    rows, cols = weight.shape
    x = torch.randn(64, cols, generator=generator, device=weight.device, dtype=weight.dtype)
    dy = torch.randn(64, rows, generator=generator, device=weight.device, dtype=weight.dtype)
    checks = ((F.linear(x, pair[0]), x @ weight.t()), (F.linear(dy, pair[1]), dy @ weight))
    return all(float((got.float() - want.float()).norm()) <= 1e-2 * float(want.float().norm()) + 1e-6 for got, want in checks)


def compress_pair(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """W and W^T compressed for cuSPARSELt, as `F.linear` operands: `F.linear(x, pair[0])` is
    x W^T and `F.linear(dy, pair[1])` is dy W. `weight`: 2-D, contiguous, fp16/bf16, CUDA, zero off
    a transposable 2:4 mask. One kernel makes both where its shapes allow (`PAIR_KERNEL_MULTIPLE`),
    else W and W^T are compressed one after the other."""
    rows, cols = weight.shape
    key = (rows, cols, weight.dtype, weight.device)
    if rows % PAIR_KERNEL_MULTIPLE == 0 and cols % PAIR_KERNEL_MULTIPLE == 0 and _PAIR_KERNEL_AGREES.get(key, True):
        both = CuSparseLtTensor.prune_dense_static_sort(weight, algorithm=PAIR_KERNEL_ALGORITHM)
        pair = (both, both.t())  # .t() swaps the two compressed copies; nothing is recomputed
        if key not in _PAIR_KERNEL_AGREES:
            _PAIR_KERNEL_AGREES[key] = _products_agree(weight, pair)
            if not _PAIR_KERNEL_AGREES[key]:
                warnings.warn(
                    f"semi_structured: torch's one-kernel W/W^T compression disagrees with the dense product at "
                    f"{rows}x{cols} {weight.dtype}; compressing W and W^T separately for that shape",
                    RuntimeWarning, stacklevel=2,
                )
        if _PAIR_KERNEL_AGREES[key]:
            return pair
    # Explicitly cuSPARSELt: `to_sparse_semi_structured` would follow a global CUTLASS flag.
    return CuSparseLtTensor.from_dense(weight), CuSparseLtTensor.from_dense(weight.t().contiguous())


def pair_kernel_checks() -> dict[str, bool]:
    """For a GPU check's log: each shape the one-kernel compression was checked at, and whether it agreed."""
    return {f"{rows}x{cols} {str(dtype).removeprefix('torch.')}": ok for (rows, cols, dtype, _), ok in _PAIR_KERNEL_AGREES.items()}


class SemiStructuredLinear(torch.nn.Module):
    """An `nn.Linear` (the same `weight` and `bias` Parameters, so names, masks and optimizer are
    unchanged) whose forward and input-gradient products run on 2:4 compressed copies of W and W^T,
    made once per forward by the module's `compress_pair` (which the CPU tests replace by a dense
    stand-in) and kept with the graph for the backward."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.live_graphs = LiveGraphs()

    def _compute_dtype(self, cast: torch.dtype | None) -> torch.dtype:
        return cast or self.weight.dtype

    def prepare(self, weight: torch.Tensor, cast: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
        return compress_pair(weight.detach().to(self._compute_dtype(cast)).contiguous())

    def output(self, weight: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None, prepared: Any) -> torch.Tensor:
        return F.linear(x2d.to(self._compute_dtype(cast)), prepared[0])

    def input_grad(self, weight: torch.Tensor, grad2d: torch.Tensor, cast: torch.dtype | None, prepared: Any) -> torch.Tensor:
        # dy W = dy (W^T)^T: a linear by the compressed transpose the forward made.
        return F.linear(grad2d.to(self._compute_dtype(cast)), prepared[1])

    def weight_grad(self, weight: torch.Tensor, grad2d: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None) -> torch.Tensor:
        dtype = self._compute_dtype(cast)
        return grad2d.to(dtype).t() @ x2d.to(dtype)  # dense; masked before the step like the masked execution's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernel_linear(self, x, self.weight, self.bias)

    def norm_linear(self, x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
        """`self(norm(x))` keeping only `x` for backward (`dstbench.models.fused_norms.norm_linear` calls this)."""
        return kernel_linear(self, x, self.weight, self.bias, norm)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, 2:4"


# The key under which `SemiStructuredMaskSet.state_dict` keeps the exchange records beside the
# masks (no parameter name holds a colon), so a resumed run reports every update.
EXCHANGE_KEY = "exchange:updates"
EXCHANGE_FIELDS = (
    "active", "requested", "achieved", "as_proposed",
    "removed", "removed_unrequested", "removed_unrequested_above_median", "turned_on_unrequested",
)


class SemiStructuredMaskSet(MaskSet):
    """A `MaskSet` whose every new mask is projected to transposable 2:4 first, recording what each
    update asked and what the projection did.

    Recording starts at `begin_recording` (the execution's install, after the initial masks). An
    update is the `set_mask` calls between two training steps: `close_update` (called by the
    execution before each forward, and before the records are read) sums them into one record of
    counts, kept on the device, so recording costs no host synchronisation. Per update: `active`
    (active positions of the layers it changed), `requested` (positions the proposal turns on),
    `achieved` (positions the projected mask turns on; as many turn off) and `as_proposed` (of
    those, the ones the proposal turned on); and what the projection did unasked: `removed`
    (positions it turns off), `removed_unrequested` (of them, the ones the proposal kept),
    `removed_unrequested_above_median` (of those, the ones above the layer's median |w| of active
    weights) and `turned_on_unrequested` (positions it turns on that the proposal did not)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recording = False
        self._exchange_pending: list[torch.Tensor] = []
        self._exchange_updates: list[torch.Tensor] = []

    def set_mask(self, name: str, new: torch.Tensor) -> None:
        proposed = new.to(device=self._masks[name].device, dtype=torch.bool)
        previous = self._masks[name] if self._recording else None
        projected = project_transposable_2to4(proposed, self.weights[name], previous)
        if previous is not None:
            self._exchange_pending.append(exchange_counts(previous, proposed, projected, self.weights[name]))
        super().set_mask(name, projected)

    # -- exchange records ---------------------------------------------------------------------------
    def begin_recording(self) -> None:
        """From now on every new mask is an update's: projected towards its exchange and recorded.
        (The initial masks replace all-ones placeholders: nothing to exchange, nothing to record.)"""
        self._recording = True

    def close_update(self) -> None:
        """End the update the pending records belong to (one device-side sum, no host sync)."""
        if self._exchange_pending:
            self._exchange_updates.append(torch.stack(self._exchange_pending).sum(dim=0))
            self._exchange_pending = []

    def exchange_records(self) -> list[dict[str, int | None]]:
        """Per update, in order: its counts (see the class docstring; None for a count a checkpoint
        from before it was recorded lacks)."""
        self.close_update()
        if not self._exchange_updates:
            return []
        rows = torch.stack([u.cpu() for u in self._exchange_updates]).tolist()
        return [dict(zip(EXCHANGE_FIELDS, (int(v) if v >= 0 else None for v in row))) for row in rows]

    def exchange_extras(self) -> dict[str, Any]:
        """The result line's exchange fields: per update (`exchange_updates`) the fractions of the
        changed layers' active positions the proposal asked to change (`requested`), that changed
        (`achieved`) and that changed as the proposal asked (`as_proposed`), and what changed unasked:
        `unrequested_removals` (count) and its share of the removals (`unrequested_removal_share`),
        the share of those above the layer's median |w| (`unrequested_above_median`), and
        `unrequested_turn_ons` (count); `exchange_<field>`: each fraction's mean over the updates
        that have it. Empty before the first update."""
        per_update = []
        for index, counts in enumerate(self.exchange_records(), 1):
            active = max(counts["active"] or 0, 1)
            update: dict[str, Any] = {"update": index, **{f: round(counts[f] / active, 6) for f in EXCHANGE_FIELDS[1:4]}}
            if counts["removed"] is not None:
                unrequested = counts["removed_unrequested"]
                update.update({
                    "unrequested_removals": unrequested,
                    "unrequested_removal_share": round(unrequested / counts["removed"], 6) if counts["removed"] else 0.0,
                    "unrequested_above_median": (
                        round(counts["removed_unrequested_above_median"] / unrequested, 6) if unrequested else None),
                    "unrequested_turn_ons": counts["turned_on_unrequested"],
                })
            per_update.append(update)
        if not per_update:
            return {}
        means = {}
        for field in (*EXCHANGE_FIELDS[1:4], "unrequested_removal_share", "unrequested_above_median"):
            values = [u[field] for u in per_update if u.get(field) is not None]
            if values:
                means[f"exchange_{field}"] = round(sum(values) / len(values), 6)
        return {**means, "exchange_updates": per_update}

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        state = super().state_dict()
        rows = [[record[f] for f in EXCHANGE_FIELDS] for record in self.exchange_records()]
        state[EXCHANGE_KEY] = torch.tensor(rows, dtype=torch.int64).reshape(-1, len(EXCHANGE_FIELDS))
        return state

    def load_state_dict(self, masks: Mapping[str, torch.Tensor]) -> None:
        bad = sorted(name for name in self.weights if name in masks and not is_transposable_2to4(masks[name].to(torch.bool)))
        if bad:
            raise ValueError(f"checkpoint masks are not transposable 2:4: {bad}")
        super().load_state_dict(masks)
        device = next(iter(self._masks.values())).device
        saved = masks.get(EXCHANGE_KEY)
        if saved is not None and saved.shape[-1] < len(EXCHANGE_FIELDS):  # saved before the unrequested counts: unknown
            saved = torch.cat([saved, saved.new_full((saved.shape[0], len(EXCHANGE_FIELDS) - saved.shape[-1]), -1)], dim=1)
        self._exchange_pending = []
        self._exchange_updates = [row.to(device) for row in saved] if saved is not None else []


def swap_linears(model: torch.nn.Module, masks: MaskSet) -> None:
    """Swap each masked `nn.Linear` of `masks` for a `SemiStructuredLinear` around its Parameters."""
    found = shape_problem({name: tuple(weight.shape) for name, weight in masks.weights.items()})
    if found:
        raise ValueError(found)
    for name in masks.weights:
        path, linear = owning_linear(model, name, "semi_structured")
        replace_module(model, path, SemiStructuredLinear(linear))


def half_allotment(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """What 2:4 holds per layer: half of it."""
    return {name: shape[0] * shape[1] // 2 for name, shape in shapes.items()}

