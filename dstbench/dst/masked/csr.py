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

`CsrMaskSet` is the mask set of the masked methods (`dstbench.dst.masked.masks.MaskSet`'s interface)
over these layers: masks are the structures themselves, the per-step masking is a no-op, and the
topology update reads dense copies (`weights`) made at update time only. `set_mask` rebuilds a
layer: positions active before and after keep their value and optimizer state, grown ones start
at 0 with zero state, pruned ones' state disappears (the values tensor is resized when the count
changes: soft budgets). A layer refuses to change its structure while a forward of it awaits its
backward (a live autograd graph): that backward would describe the old positions, and after a
resize its gradient would not even fit `values`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from dstbench.dst.masked.sparse_linear import LiveGraphs, kernel_linear, owning_linear, replace_module
from dstbench.dst.masked.masks import MaskSet


DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}

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


class CsrLinear(torch.nn.Module):
    """An `nn.Linear` whose weight is stored as CSR: `values` (trained) and index buffers.

    The index buffers are not persistent (a checkpoint stores the structure in the method's extra
    state, which is loaded first and resizes `values`), and they are not saved for backward, so
    they count as method buffers, not as activations.
    """

    def __init__(self, linear: torch.nn.Linear, active: torch.Tensor) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # the same Parameter: its optimizer state and name stay
        weight = linear.weight.detach()
        self.values = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype, device=weight.device))
        self.want_dense_grad = False
        self.dense_grad: torch.Tensor | None = None
        self.live_graphs = LiveGraphs()
        self._set_structure(active.to(weight.device, torch.bool).flatten().nonzero().flatten())
        with torch.no_grad():
            self.values.data = weight.flatten()[self.flat_index()].clone()

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

    @property
    def nnz(self) -> int:
        return self.col.numel()

    def flat_index(self) -> torch.Tensor:
        """Row-major positions of the stored values in the dense weight (int64, made on demand)."""
        rows = torch.repeat_interleave(
            torch.arange(self.out_features, device=self.col.device), torch.diff(self.crow).to(torch.int64)
        )
        return rows * self.in_features + self.col.to(torch.int64)

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """A dense (out, in) tensor holding `values` (in CSR order) at the active positions, 0 elsewhere."""
        dense = values.new_zeros(self.out_features * self.in_features)
        dense[self.flat_index()] = values
        return dense.view(self.out_features, self.in_features)

    def active(self) -> torch.Tensor:
        return self.scatter(torch.ones(self.nnz, dtype=torch.bool, device=self.col.device))

    def index_buffers(self) -> dict[str, torch.Tensor]:
        return {"crow": self.crow, "col": self.col, "crow_t": self.crow_t, "col_t": self.col_t, "perm": self.perm}

    @torch.no_grad()
    def set_active(self, new: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Rebuild the structure for the bool mask `new`; values and element-wise optimizer state
        follow their positions (kept where active before and after, 0 where grown). Refused while a
        forward of this layer awaits its backward (see the module docstring)."""
        if self.live_graphs:
            raise RuntimeError(
                "csr: cannot change a layer's active positions while a forward of it awaits its backward "
                "(a live autograd graph saved its values); run that backward or drop its outputs first"
            )
        values = self.values
        state = optimizer.state.get(values) or {}
        old = {key: self.scatter(t) for key, t in state.items() if isinstance(t, torch.Tensor) and t.shape == values.shape}
        dense_values = self.scatter(values)
        self._set_structure(new.to(values.device, torch.bool).flatten().nonzero().flatten())
        flat = self.flat_index()
        fresh = dense_values.flatten()[flat]
        if fresh.shape == values.shape:
            values.copy_(fresh)
            for key, dense in old.items():
                state[key].copy_(dense.flatten()[flat])
        else:  # a soft budget changed the count: same Parameter (the optimizer keeps it), new size
            values.data = fresh
            for key, dense in old.items():
                state[key] = dense.flatten()[flat]
        values.grad = None  # it described the old positions
        self.dense_grad = None

    # -- LinearKernels ------------------------------------------------------------------------------
    def prepare(self, values: torch.Tensor, cast: torch.dtype | None) -> None:
        return None  # each product reads the structure buffers, which stay as they are under a graph

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

    # -- module -------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernel_linear(self, x, self.values, self.bias)

    def norm_linear(self, x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
        """`self(norm(x))` keeping only `x` for backward (`dstbench.models.fused_norms.norm_linear` calls this)."""
        return kernel_linear(self, x, self.values, self.bias, norm)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nnz={self.nnz}, bias={self.bias is not None}"


class _DenseViews(Mapping):
    """Dense copies of the layers' weights, each with `.grad` set to its dense gradient (the one kept
    by a flagged backward, else the active gradients scattered, else None). Made afresh at every
    access, so an update that walks the layers holds one layer's copies at a time."""

    def __init__(self, layers: dict[str, CsrLinear]) -> None:
        self._layers = layers

    def __getitem__(self, name: str) -> torch.Tensor:
        layer = self._layers[name]
        values = layer.values.detach()
        weight = layer.scatter(values)
        if layer.dense_grad is not None:
            weight.grad = layer.dense_grad
        elif layer.values.grad is not None and layer.values.grad.shape == values.shape:
            weight.grad = layer.scatter(layer.values.grad)
        return weight

    def __iter__(self) -> Iterator[str]:
        return iter(self._layers)

    def __len__(self) -> int:
        return len(self._layers)


def _swap_parameter(optimizer: torch.optim.Optimizer, old: torch.nn.Parameter, new: torch.nn.Parameter) -> None:
    for group in optimizer.param_groups:
        for index, param in enumerate(group["params"]):
            if param is old:
                group["params"][index] = new
                state = optimizer.state.pop(old, None)
                if state:
                    raise ValueError("csr: the optimizer already holds state for a prunable weight")
                return
    raise ValueError("csr: a prunable weight is not in the optimizer")


class CsrMaskSet:
    """`MaskSet`'s interface over `CsrLinear` layers (see the module docstring)."""

    def __init__(self, layers: dict[str, CsrLinear], optimizer: torch.optim.Optimizer) -> None:
        self.layers = layers
        self.optimizer = optimizer

    @classmethod
    def convert(cls, model: torch.nn.Module, masks: MaskSet) -> "CsrMaskSet":
        """Replace each masked `nn.Linear` weight of `masks` by a `CsrLinear` holding its active
        weights, in the model and in the optimizer (the values take the weight's place in its
        parameter group, so weight decay and checkpoint order follow)."""
        layers: dict[str, CsrLinear] = {}
        for name, weight in masks.weights.items():
            path, linear = owning_linear(model, name, "csr")
            layer = CsrLinear(linear, masks.active(name))
            _swap_parameter(masks.optimizer, weight, layer.values)
            replace_module(model, path, layer)
            layers[name] = layer
        return cls(layers, masks.optimizer)

    # -- inspection ---------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.layers)

    @property
    def kernel_precision(self) -> str:
        """The dtype the sparse products run in: the values' (fp32), autocast or not."""
        dtype = next(iter(self.layers.values())).values.dtype
        return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))

    @property
    def weights(self) -> Mapping[str, torch.Tensor]:
        """Dense copies for a topology update (never per step)."""
        return _DenseViews(self.layers)

    @property
    def counts(self) -> dict[str, int]:
        return {name: layer.nnz for name, layer in self.layers.items()}

    def numel(self, name: str | None = None) -> int:
        layers = [self.layers[name]] if name is not None else self.layers.values()
        return sum(layer.out_features * layer.in_features for layer in layers)

    def active(self, name: str) -> torch.Tensor:
        return self.layers[name].active()

    def bool_masks(self) -> dict[str, torch.Tensor]:
        return {name: self.active(name) for name in self.layers}

    def buffers(self) -> dict[str, torch.Tensor]:
        """The index buffers: what replaces the masks (counted in the training-state bytes)."""
        return {f"csr:{name}.{key}": t for name, layer in self.layers.items() for key, t in layer.index_buffers().items()}

    def recount(self) -> dict[str, int]:
        return self.counts

    def total_active(self) -> int:
        return sum(self.counts.values())

    # -- every step: the structure is the mask, nothing to apply --------------------------------------
    def before_forward(self, dense_grad: bool) -> None:
        for layer in self.layers.values():
            layer.want_dense_grad = dense_grad
            layer.dense_grad = None  # the last update's, if any

    def mask_grads(self) -> None:
        pass

    def enforce(self) -> None:
        pass

    # -- topology changes ---------------------------------------------------------------------------
    def set_mask(self, name: str, new: torch.Tensor) -> None:
        self.layers[name].set_active(new, self.optimizer)

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {name: {"crow": layer.crow.cpu(), "col": layer.col.cpu()} for name, layer in self.layers.items()}

    def load_state_dict(self, structures: Mapping[str, Any]) -> None:
        missing = sorted(set(self.layers) - set(structures))
        if missing:
            raise KeyError(f"checkpoint lacks csr structures for {missing}")
        for name, layer in self.layers.items():
            saved = structures[name]
            if not isinstance(saved, Mapping) or "crow" not in saved:
                raise ValueError(f"{name}: the checkpoint holds no csr structure (was it saved by another execution?)")
            crow, col = saved["crow"].to(torch.int64), saved["col"].to(torch.int64)
            rows = torch.repeat_interleave(torch.arange(layer.out_features), torch.diff(crow))
            mask = torch.zeros(layer.out_features * layer.in_features, dtype=torch.bool)
            mask[rows * layer.in_features + col] = True
            # Values and state are overwritten by the model and optimizer state loaded next.
            layer.set_active(mask.view(layer.out_features, layer.in_features), self.optimizer)
