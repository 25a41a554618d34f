"""`execution: semi_structured`: 2:4 sparsity on CUDA through torch's semi-structured tensors
(`torch.sparse.to_sparse_semi_structured`: cuSPARSELt, or CUTLASS where it is missing).

Masks are *transposable* 2:4: in every 4x4 tile of a weight each row and each column holds exactly
two active weights, so both W (forward, x W^T) and W^T (input gradient, dy W) are 2:4 along their
rows and both products run on the 2:4 kernels. The weight gradient stays a dense product, masked
like the masked execution's (as in published 2:4 training recipes). Each layer is at density 0.5
exactly, whatever the distribution says.

Projection: at the initial masks and at every `set_mask` (every update), the proposed mask is
replaced by the transposable 2:4 mask nearest to it: per tile, of the 90 patterns with two per row
and column, the one that keeps the most proposed positions, ties going to the larger |w|.

The weights stay full-size (the masked execution's `MaskSet`, with its masks and per-step
masking); the layer compresses W and W^T at every step, since the optimizer changes them. Inputs
run in the autocast dtype (cuSPARSELt takes fp16/bf16), so the suite's precision must be one of them.

Untested on hardware here: the machine dstbench was built on has no GPU. The projection and the
layer's autograd (with a dense stand-in for the compression) are tested on the CPU; the CUDA test
(`pytest -m cuda`) runs the real kernels where a GPU with 2:4 support (sm80+) is present.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from dstbench.dst.masked.sparse_linear import kernel_linear, owning_linear, replace_module
from dstbench.dst.masked.masks import MaskSet

TILE = 4
DENSITY = 0.5
PRECISIONS = ("bf16", "fp16")


def _tile_patterns() -> torch.Tensor:
    """The 90 4x4 bool patterns with exactly two ones in each row and each column, flattened (90, 16)."""
    rows = [r for r in itertools.product((0, 1), repeat=TILE) if sum(r) == 2]
    patterns = [p for p in itertools.product(rows, repeat=TILE) if all(sum(col) == 2 for col in zip(*p))]
    return torch.tensor(patterns, dtype=torch.float32).reshape(len(patterns), TILE * TILE)


PATTERNS = _tile_patterns()


def check_shape(name: str, shape: tuple[int, ...]) -> None:
    if len(shape) != 2 or shape[0] % TILE or shape[1] % TILE:
        raise ValueError(f"execution semi_structured: {name} has shape {tuple(shape)}; 2:4 tiles need both dimensions divisible by {TILE}")


def _tiles(t: torch.Tensor) -> torch.Tensor:
    rows, cols = t.shape
    return t.reshape(rows // TILE, TILE, cols // TILE, TILE).permute(0, 2, 1, 3).reshape(-1, TILE * TILE)


def _untile(tiles: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    rows, cols = shape
    return tiles.reshape(rows // TILE, cols // TILE, TILE, TILE).permute(0, 2, 1, 3).reshape(rows, cols)


def project_transposable_2to4(proposed: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """The transposable 2:4 bool mask nearest to `proposed`: per 4x4 tile, the pattern keeping the
    most proposed positions; among those, the one with the largest sum of `magnitude` (>= 0)."""
    check_shape("the mask", tuple(proposed.shape))
    scale = magnitude.detach().abs().float()
    top = float(scale.max()) if scale.numel() else 0.0
    # Each proposed position is worth more (16) than any tile's magnitudes together (< 8 x 1).
    score = proposed.to(torch.float32) * 16.0 + (scale / (top * 1.001) if top > 0 else scale)
    patterns = PATTERNS.to(score.device)
    choice = (_tiles(score) @ patterns.t()).argmax(dim=1)
    return _untile(patterns[choice], tuple(proposed.shape)) > 0


def is_transposable_2to4(mask: torch.Tensor) -> bool:
    tiles = _tiles(mask.to(torch.int32)).reshape(-1, TILE, TILE)
    return bool((tiles.sum(dim=2) == 2).all() and (tiles.sum(dim=1) == 2).all())


def problem(device: str, densities: list[float], precision: str) -> str | None:
    """Why semi_structured cannot run with these settings, or None."""
    if device != "cuda":
        return f"execution semi_structured runs on CUDA only (2:4 sparse kernels); the device is {device} (set device: cuda)"
    others = sorted({d for d in densities if abs(d - DENSITY) > 1e-9})
    if others:
        listed = ", ".join(f"{d:g}" for d in others)
        return f"execution semi_structured holds density 0.5 exactly (2:4), not {listed}; restrict the method with `densities: [0.5]`"
    if precision not in PRECISIONS:
        return f"execution semi_structured computes in fp16 or bf16 (cuSPARSELt); set precision to one of {list(PRECISIONS)}, not {precision}"
    return None


def check_device(device: torch.device, density: float, precision: str) -> None:
    """Raise unless this process can train at `density` and `precision` on 2:4 kernels."""
    found = problem(device.type, [density], precision)
    if found:
        raise ValueError(found)
    if torch.cuda.get_device_capability(device) < (8, 0):
        raise ValueError("execution semi_structured needs a GPU with 2:4 sparse tensor cores (compute capability 8.0 or newer)")


def compress(weight: torch.Tensor) -> torch.Tensor:
    """The 2:4 compressed form of a 2:4 dense weight (cuSPARSELt/CUTLASS; CUDA only)."""
    return torch.sparse.to_sparse_semi_structured(weight)


class SemiStructuredLinear(torch.nn.Module):
    """An `nn.Linear` (the same `weight` and `bias` Parameters, so names, masks and optimizer are
    unchanged) whose forward and input-gradient products run on 2:4 compressed copies of W and W^T
    (made by the module's `compress`, which the CPU tests replace by a dense stand-in)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias

    def _compute_dtype(self, cast: torch.dtype | None) -> torch.dtype:
        return cast or self.weight.dtype

    def output(self, weight: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None) -> torch.Tensor:
        dtype = self._compute_dtype(cast)
        return F.linear(x2d.to(dtype), compress(weight.detach().to(dtype).contiguous()))

    def input_grad(self, weight: torch.Tensor, grad2d: torch.Tensor, cast: torch.dtype | None) -> torch.Tensor:
        dtype = self._compute_dtype(cast)
        # dy W = dy (W^T)^T: a linear by the compressed transpose.
        return F.linear(grad2d.to(dtype), compress(weight.detach().t().to(dtype).contiguous()))

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


class SemiStructuredMaskSet(MaskSet):
    """A `MaskSet` whose every new mask is projected to transposable 2:4 first."""

    def set_mask(self, name: str, new: torch.Tensor) -> None:
        super().set_mask(name, project_transposable_2to4(new.to(torch.bool), self.weights[name]))

    def load_state_dict(self, masks: Mapping[str, torch.Tensor]) -> None:
        bad = sorted(name for name in self.weights if name in masks and not is_transposable_2to4(masks[name].to(torch.bool)))
        if bad:
            raise ValueError(f"checkpoint masks are not transposable 2:4: {bad}")
        super().load_state_dict(masks)


def swap_linears(model: torch.nn.Module, masks: MaskSet) -> None:
    """Swap each masked `nn.Linear` of `masks` for a `SemiStructuredLinear` around its Parameters."""
    for name, weight in masks.weights.items():
        check_shape(name, tuple(weight.shape))
        path, linear = owning_linear(model, name, "semi_structured")
        replace_module(model, path, SemiStructuredLinear(linear))


def half_allotment(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """What 2:4 holds per layer: half of it."""
    return {name: shape[0] * shape[1] // 2 for name, shape in shapes.items()}
