"""`execution: condensed`: SRigL's own representation. A layer whose live neurons (output rows) all
hold the same fan-in `k` stores its active weights as a dense `[live, k]` tensor of values beside a
`[live, k]` tensor of the inputs each one reads, as the SRigL authors' condensed layer does
(calgaryml/condensed-sparsity, `src/condensed_sparsity/v2/condensed_linear.py`, `CondensedLinear`:
`condensed_weight` and `input_mask` of shape (active neurons, k), built from a trained masked layer,
and `fine_grained_forward`, `sum(condensed_weight * x[:, input_mask], axis=2) + bias`; for inference
only, with no backward). Here it trains: the backward and the topology updates are dstbench's.

A `CondensedLinear` stands in for an `nn.Linear` (`dstbench.dst.masked.active_values`): `values`
(the trained Parameter, so the optimizer's state is `[live, k]` too) and the int64 buffers `rows`
(the live rows, `[live]`) and `index` (each live row's inputs, ascending, `[live, k]`). Per step,
with `T` tokens (`dstbench.dst.masked.sparse_linear.kernel_linear` carries the autograd):

    forward        y[:, rows] = gather(x)[T, live, k] . values        2 * T * live * k FLOPs
    input grad     dx = scatter-add of dy[:, rows] * values over index   2 * T * live * k
    weight grad    d values = dy[:, rows] . gather(x), gathered again    2 * T * live * k

The gathered inputs are never saved for backward: the backward gathers them again from `x`, which
the layer keeps as any linear does (a saved gather would hold `T x live x k` values, about 2 GB for
ViT-Small's fc1 at batch 128 and density 0.1). Each product runs over blocks of live rows so that
no temporary exceeds a block's values (`CPU_BLOCK_ELEMENTS` on the CPU, `BLOCK_ELEMENTS`
elsewhere). Products run in the autocast dtype under autocast (bf16 on a GPU), else in the values'
dtype. An ablated row holds nothing and outputs its bias.

On an update step that grows by the dense gradient (SRigL), the backward computes the full `dy^T x`
instead, keeps it for the update and gathers the values' gradient from it, as csr does. The
products are operators of their own (`torch.ops.dstbench_condensed.*`) with FLOP formulas for
`torch.utils.flop_counter` (which would not count a gather or a scatter-add): a condensed case's
`flops_per_step` is what these kernels execute.

Only a mask with the same fan-in in every live row can be held (`set_mask` refuses any other):
suite validation lets only methods that keep a constant fan-in (srigl) take `execution: condensed`,
and only on linear weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from dstbench.dst.masked.active_values import ActiveValuesLinear, ActiveValuesMaskSet

# The most values one block's temporaries hold. On the CPU about an L2 cache (1 MiB in fp32), so a
# block's gathered inputs are still cached when its product reads them (3-5x faster per layer than
# one 64 MiB block on this project's CPU); on a GPU 2^26 (256 MiB in fp32): bounded memory, few
# kernel launches.
CPU_BLOCK_ELEMENTS = 2**18
BLOCK_ELEMENTS = 2**26

_LIB = torch.library.Library("dstbench_condensed", "DEF")
_LIB.define("output(Tensor xt, Tensor index, Tensor values) -> Tensor")
_LIB.define("input_grad(Tensor gt, Tensor index, Tensor values, int columns) -> Tensor")
_LIB.define("weight_grad(Tensor xt, Tensor index, Tensor gt) -> Tensor")


def _blocks(live: int, k: int, tokens: int, device: torch.device) -> list[slice]:
    """Blocks of live rows whose gathered inputs (`rows x k x tokens`) stay within the device's block size."""
    limit = CPU_BLOCK_ELEMENTS if device.type == "cpu" else BLOCK_ELEMENTS
    step = max(1, limit // max(1, k * tokens))
    return [slice(start, min(start + step, live)) for start in range(0, live, step)]


def _output(xt: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Each live row's product: `xt` (in, T) gathered by `index` (live, k) times `values` (live, k),
    as a batched dense product; (live, T)."""
    live, k = index.shape
    tokens = xt.shape[1]
    out = xt.new_empty(live, tokens)
    for block in _blocks(live, k, tokens, index.device):
        rows = index[block]
        gathered = xt.index_select(0, rows.flatten()).view(rows.shape[0], k, tokens)  # (b, k, T)
        out[block] = torch.bmm(values[block].unsqueeze(1), gathered).squeeze(1)
    return out


def _input_grad(gt: torch.Tensor, index: torch.Tensor, values: torch.Tensor, columns: int) -> torch.Tensor:
    """The inputs' gradient (in, T): each live row's `gt` (live, T) times its values, added at its inputs."""
    live, k = index.shape
    tokens = gt.shape[1]
    # Summed in fp32 under half precision, as a dense product accumulates.
    wide = torch.float32 if gt.dtype in (torch.bfloat16, torch.float16) else gt.dtype
    grad = gt.new_zeros(columns, tokens, dtype=wide)
    for block in _blocks(live, k, tokens, index.device):
        parts = values[block].unsqueeze(2) * gt[block].unsqueeze(1)  # (b, k, T)
        grad.index_add_(0, index[block].flatten(), parts.view(-1, tokens).to(wide))
    return grad.to(gt.dtype)


def _weight_grad(xt: torch.Tensor, index: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """The values' gradient (live, k): the inputs gathered again, times each live row's `gt` (live, T)."""
    live, k = index.shape
    tokens = xt.shape[1]
    grad = gt.new_empty(live, k)
    for block in _blocks(live, k, tokens, index.device):
        rows = index[block]
        gathered = xt.index_select(0, rows.flatten()).view(rows.shape[0], k, tokens)
        grad[block] = torch.bmm(gathered, gt[block].unsqueeze(2)).squeeze(2)
    return grad


for _key in ("CPU", "CUDA"):
    _LIB.impl("output", _output, _key)
    _LIB.impl("input_grad", _input_grad, _key)
    _LIB.impl("weight_grad", _weight_grad, _key)


@register_flop_formula(torch.ops.dstbench_condensed.output)
def _output_flops(xt, index, values, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * index[0] * index[1] * xt[1]


@register_flop_formula(torch.ops.dstbench_condensed.input_grad)
def _input_grad_flops(gt, index, values, columns, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * index[0] * index[1] * gt[1]


@register_flop_formula(torch.ops.dstbench_condensed.weight_grad)
def _weight_grad_flops(xt, index, gt, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * index[0] * index[1] * xt[1]


class CondensedLinear(ActiveValuesLinear):
    """An `nn.Linear` stored condensed: `values` and `index` of shape `[live, k]`, `rows` `[live]`
    (module docstring)."""

    execution = "condensed"

    # -- structure ----------------------------------------------------------------------------------
    def check_mask(self, new: torch.Tensor) -> None:
        per_row = new.reshape(self.out_features, -1).sum(dim=1)
        fan_ins = per_row[per_row > 0].unique()
        if fan_ins.numel() > 1:
            shown = ", ".join(str(int(f)) for f in fan_ins[:5])
            raise ValueError(
                f"execution condensed holds the same fan-in in every live neuron; this mask's rows hold {shown}"
                + (", ..." if fan_ins.numel() > 5 else "") + " (only a constant fan-in method, srigl, keeps one)"
            )

    def _set_structure(self, flat: torch.Tensor) -> None:
        rows, cols = flat // self.in_features, flat % self.in_features
        per_row = torch.bincount(rows, minlength=self.out_features)
        live = per_row.nonzero().flatten()
        k = int(per_row[live[0]]) if live.numel() else 0
        # `flat` is sorted, so each live row's inputs come together and ascending.
        self.register_buffer("rows", live, persistent=False)
        self.register_buffer("index", cols.view(live.numel(), k), persistent=False)

    def values_shape(self) -> tuple[int, ...]:
        return tuple(self.index.shape)

    def flat_index(self) -> torch.Tensor:
        return (self.rows.unsqueeze(1) * self.in_features + self.index).flatten()

    @property
    def fan_in(self) -> int:
        return int(self.index.shape[1])

    def index_buffers(self) -> dict[str, torch.Tensor]:
        return {"rows": self.rows, "index": self.index}

    def structure_state(self) -> dict[str, torch.Tensor]:
        return {"rows": self.rows.cpu(), "index": self.index.cpu()}

    def mask_of(self, saved: Mapping[str, Any]) -> torch.Tensor:
        if "rows" not in saved or "index" not in saved:
            raise ValueError("the checkpoint holds no condensed structure (was it saved by another execution?)")
        rows, index = saved["rows"].to(torch.int64), saved["index"].to(torch.int64)
        mask = torch.zeros(self.out_features, self.in_features, dtype=torch.bool)
        mask[rows.unsqueeze(1).expand_as(index), index] = True
        return mask

    # -- LinearKernels ------------------------------------------------------------------------------
    def _dtype(self, values: torch.Tensor, cast: torch.dtype | None) -> torch.dtype:
        return cast or values.dtype

    def output(self, values: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None, prepared: None) -> torch.Tensor:
        dtype = self._dtype(values, cast)
        xt = x2d.to(dtype).t().contiguous()  # (in, T): a gather by input reads whole rows
        live = torch.ops.dstbench_condensed.output(xt, self.index, values.to(dtype))  # (live, T)
        if live.shape[0] == self.out_features:
            return live.t()
        out = live.new_zeros(self.out_features, live.shape[1])
        out[self.rows] = live
        return out.t()

    def _live_grad(self, grad2d: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The output gradient of the live rows, (live, T)."""
        gt = grad2d.to(dtype).t()
        return (gt if self.rows.numel() == self.out_features else gt.index_select(0, self.rows)).contiguous()

    def input_grad(self, values: torch.Tensor, grad2d: torch.Tensor, cast: torch.dtype | None, prepared: None) -> torch.Tensor:
        dtype = self._dtype(values, cast)
        grad = torch.ops.dstbench_condensed.input_grad(self._live_grad(grad2d, dtype), self.index, values.to(dtype), self.in_features)
        return grad.t()

    def weight_grad(
        self, values: torch.Tensor, grad2d: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None
    ) -> torch.Tensor:
        dtype = self._dtype(values, cast)
        if self.want_dense_grad:
            # An update step that grows by the dense gradient: the full product, kept for it.
            self.dense_grad = (grad2d.to(dtype).t() @ x2d.to(dtype)).to(values.dtype)
            return self.dense_grad[self.rows.unsqueeze(1), self.index]
        xt = x2d.to(dtype).t().contiguous()
        return torch.ops.dstbench_condensed.weight_grad(xt, self.index, self._live_grad(grad2d, dtype))


class CondensedMaskSet(ActiveValuesMaskSet):
    """`MaskSet`'s interface over `CondensedLinear` layers (`dstbench.dst.masked.active_values`)."""

    layer_class = CondensedLinear
