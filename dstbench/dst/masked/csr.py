"""`execution: csr`: the prunable linears hold only their active weights and train through sparse
kernels (torch.sparse CSR: MKL on the CPU, cuSPARSE on CUDA).

A `CsrLinear` stands in for an `nn.Linear`: its Parameter `values` holds the active weights in
row-major (CSR) order, beside int32 index buffers of the structure and of its transpose. Per step:

    forward        y = x W^T          CSR x dense                    2 * nnz * tokens FLOPs
    input grad     dx = dy W          transposed CSR x dense         2 * nnz * tokens
    weight grad    dW at active only  sampled dense-dense product    2 * nnz * tokens
                                      (`torch.sparse.sampled_addmm`)

so the optimizer, which holds `values`, keeps state for active weights only. On a step whose
update grows by the dense gradient (RigL, Chase), the layer is flagged before the forward and its
backward computes the full `dy^T x` instead, keeps it for the update and takes the active entries
from it: the dense gradient costs a dense product at update steps only.

The products are operators of their own (`torch.ops.dstbench_sparse.*`) with FLOP formulas
registered with `torch.utils.flop_counter`, which does not count torch's sparse operators (it
counts 0 for them): a csr case's `flops_per_step` is the work the sparse kernels execute, not
what the dense equivalent would do.

Sparse products run in the parameters' dtype (fp32) even under bf16/fp16 autocast, whose output
dtype the layer still returns: torch's CSR kernels lack half-precision support on some backends.
The result line says so: `method_extras.kernel_precision` (`kernel_precision` below) is "fp32"
for a csr case whatever the suite's precision.
Indices are int32, as MKL and cuSPARSE take them (int64 ones would be converted at every call).

`CsrMaskSet` is the mask set of the masked methods over these layers; what it shares with the
condensed execution (values and optimizer state following their positions at `set_mask`, resized
for soft budgets; no structure change under a live graph) is `dstbench.dst.masked.active_values`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from dstbench.dst.masked.active_values import DTYPE_NAMES, ActiveValuesLinear, ActiveValuesMaskSet

__all__ = ["DTYPE_NAMES", "CsrLinear", "CsrMaskSet"]

_LIB = torch.library.Library("dstbench_sparse", "DEF")
_LIB.define("csr_mm(Tensor crow, Tensor col, Tensor values, int columns, Tensor dense) -> Tensor")
_LIB.define("csr_sampled_mm(Tensor crow, Tensor col, int columns, Tensor left, Tensor right) -> Tensor")


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, columns: int) -> torch.Tensor:
    return torch.sparse_csr_tensor(crow, col, values, (crow.numel() - 1, columns), check_invariants=False)


def _csr_mm(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, columns: int, dense: torch.Tensor) -> torch.Tensor:
    """The CSR matrix (crow, col, values) of `columns` columns times `dense`."""
    return torch.sparse.mm(_csr(crow, col, values, columns), dense)


def _csr_sampled_mm(crow: torch.Tensor, col: torch.Tensor, columns: int, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """`(left @ right)` at the structure's positions only, in its (CSR) order."""
    pattern = _csr(crow, col, left.new_zeros(col.numel()), columns)  # finite values: beta=0 still reads them
    return torch.sparse.sampled_addmm(pattern, left, right, beta=0.0).values()


# torch warns once per process that CSR support is "in beta": consumed here, where it is expected.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _csr(torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), torch.ones(1), 1)

for _key in ("CPU", "CUDA"):
    _LIB.impl("csr_mm", _csr_mm, _key)
    _LIB.impl("csr_sampled_mm", _csr_sampled_mm, _key)


@register_flop_formula(torch.ops.dstbench_sparse.csr_mm)
def _csr_mm_flops(crow, col, values, columns, dense, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * values[0] * dense[1]


@register_flop_formula(torch.ops.dstbench_sparse.csr_sampled_mm)
def _csr_sampled_mm_flops(crow, col, columns, left, right, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * col[0] * left[1]


class CsrLinear(ActiveValuesLinear):
    """An `nn.Linear` whose weight is stored as CSR: `values` (trained) and int32 index buffers of
    the structure and of its transpose (`dstbench.dst.masked.active_values.ActiveValuesLinear`)."""

    execution = "csr"

    # -- structure ----------------------------------------------------------------------------------
    def _set_structure(self, flat: torch.Tensor) -> None:
        """Index buffers from the sorted flat (row-major) positions of the active weights."""
        rows, cols = flat // self.in_features, flat % self.in_features

        def offsets(counts: torch.Tensor) -> torch.Tensor:
            return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)

        self.register_buffer("crow", offsets(torch.bincount(rows, minlength=self.out_features)), persistent=False)
        self.register_buffer("col", cols.to(torch.int32), persistent=False)
        # The transpose: the same values in column-major order, gathered through `perm` per step.
        perm = torch.argsort(cols * self.out_features + rows)
        self.register_buffer("crow_t", offsets(torch.bincount(cols, minlength=self.in_features)), persistent=False)
        self.register_buffer("col_t", rows[perm].to(torch.int32), persistent=False)
        self.register_buffer("perm", perm.to(torch.int32), persistent=False)

    def values_shape(self) -> tuple[int, ...]:
        return (self.col.numel(),)

    def flat_index(self) -> torch.Tensor:
        """Row-major positions of the stored values in the dense weight (int64, made on demand)."""
        rows = torch.repeat_interleave(
            torch.arange(self.out_features, device=self.col.device), torch.diff(self.crow).to(torch.int64)
        )
        return rows * self.in_features + self.col.to(torch.int64)

    def index_buffers(self) -> dict[str, torch.Tensor]:
        return {"crow": self.crow, "col": self.col, "crow_t": self.crow_t, "col_t": self.col_t, "perm": self.perm}

    def structure_state(self) -> dict[str, torch.Tensor]:
        return {"crow": self.crow.cpu(), "col": self.col.cpu()}

    def mask_of(self, saved: Mapping[str, Any]) -> torch.Tensor:
        if "crow" not in saved:
            raise ValueError("the checkpoint holds no csr structure (was it saved by another execution?)")
        crow, col = saved["crow"].to(torch.int64), saved["col"].to(torch.int64)
        rows = torch.repeat_interleave(torch.arange(self.out_features), torch.diff(crow))
        mask = torch.zeros(self.out_features * self.in_features, dtype=torch.bool)
        mask[rows * self.in_features + col] = True
        return mask.view(self.out_features, self.in_features)

    # -- LinearKernels ------------------------------------------------------------------------------
    def output(self, values: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None, prepared: None) -> torch.Tensor:
        dense = x2d.to(values.dtype).t()
        return torch.ops.dstbench_sparse.csr_mm(self.crow, self.col, values, self.in_features, dense).t()

    def input_grad(self, values: torch.Tensor, grad2d: torch.Tensor, cast: torch.dtype | None, prepared: None) -> torch.Tensor:
        dense = grad2d.to(values.dtype).t()
        transposed = values.index_select(0, self.perm)
        return torch.ops.dstbench_sparse.csr_mm(self.crow_t, self.col_t, transposed, self.out_features, dense).t()

    def weight_grad(
        self, values: torch.Tensor, grad2d: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None
    ) -> torch.Tensor:
        grad2d, x2d = grad2d.to(values.dtype), x2d.to(values.dtype)
        if self.want_dense_grad:
            # An update step that grows by the dense gradient: the full product, kept for it.
            self.dense_grad = grad2d.t() @ x2d
            return self.dense_grad.flatten()[self.flat_index()]
        return torch.ops.dstbench_sparse.csr_sampled_mm(self.crow, self.col, self.in_features, grad2d.t(), x2d)


class CsrMaskSet(ActiveValuesMaskSet):
    """`MaskSet`'s interface over `CsrLinear` layers (`dstbench.dst.masked.active_values`)."""

    layer_class = CsrLinear
