"""Linears that store only their active weights, and the mask set over them: what the `csr` and
`condensed` executions share (`dstbench.dst.masked.csr`, `dstbench.dst.masked.condensed`).

An `ActiveValuesLinear` stands in for an `nn.Linear`: its Parameter `values` holds the active
weights, in the layer's row-major order of positions (`flat_index`), beside index buffers that
say where they sit; the products come from the subclass's kernels through `kernel_linear` (its
`LinearKernels`). The optimizer holds `values`, so it keeps state for active weights only. On a step
whose update grows by the dense gradient (RigL, SRigL, Chase), the layer is flagged before the
forward (`want_dense_grad`) and its backward computes the full `dy^T x` instead, keeps it for the
update (`dense_grad`) and takes the active entries from it.

`ActiveValuesMaskSet` is the masked methods' mask set (`dstbench.dst.masked.masks.MaskSet`'s
interface) over these layers: masks are the structures themselves, the per-step masking is a no-op,
and the topology update reads dense copies (`weights`) made at update time only. `set_mask`
rebuilds a layer: positions active before and after keep their value and optimizer state, grown
ones start at 0 with zero state, pruned ones' state disappears (`values` is resized when the count
changes: soft budgets, SRigL's ablation). A layer refuses to change its structure while a forward
of it awaits its backward (a live autograd graph): that backward would describe the old positions,
and after a resize its gradient would not even fit `values`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch

from dstbench.dst.masked.masks import MaskSet
from dstbench.dst.masked.sparse_linear import LiveGraphs, kernel_linear, owning_linear, replace_module

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


class ActiveValuesLinear(torch.nn.Module):
    """An `nn.Linear` whose weight is stored as its active values and index buffers (base class).

    A subclass sets `execution` and defines the structure (`_set_structure` from the sorted flat
    positions, `flat_index`, `index_buffers`, `values_shape`, `structure_state`, `mask_of`) and the
    kernels (`prepare`, `output`, `input_grad`, `weight_grad`). The index buffers are not
    persistent (a checkpoint stores the structure in the method's extra state, which is loaded first
    and resizes `values`), and they are not saved for backward, so they count as method buffers, not
    as activations.
    """

    execution: ClassVar[str]

    def __init__(self, linear: torch.nn.Linear, active: torch.Tensor) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias  # the same Parameter: its optimizer state and name stay
        weight = linear.weight.detach()
        self.values = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype, device=weight.device))
        self.want_dense_grad = False
        self.dense_grad: torch.Tensor | None = None
        self.live_graphs = LiveGraphs()
        active = active.to(weight.device, torch.bool)
        self.check_mask(active)
        self._set_structure(active.flatten().nonzero().flatten())
        with torch.no_grad():
            self.values.data = weight.flatten()[self.flat_index()].clone().view(self.values_shape())

    # -- what a subclass defines ---------------------------------------------------------------------
    def _set_structure(self, flat: torch.Tensor) -> None:
        raise NotImplementedError

    def flat_index(self) -> torch.Tensor:
        """Row-major positions of the stored values in the dense weight (int64), in `values`' order."""
        raise NotImplementedError

    def values_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def index_buffers(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def structure_state(self) -> dict[str, torch.Tensor]:
        """The structure as a checkpoint stores it (CPU tensors)."""
        raise NotImplementedError

    def mask_of(self, saved: Mapping[str, Any]) -> torch.Tensor:
        """The bool (out, in) mask a `structure_state` describes; ValueError when it is not one."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return self.values.numel()

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """A dense (out, in) tensor holding `values` (in `values`' order) at the active positions, 0 elsewhere."""
        dense = values.new_zeros(self.out_features * self.in_features)
        dense[self.flat_index()] = values.flatten()
        return dense.view(self.out_features, self.in_features)

    def active(self) -> torch.Tensor:
        return self.scatter(torch.ones(self.values_shape(), dtype=torch.bool, device=self.values.device))

    def check_mask(self, new: torch.Tensor) -> None:
        """Raise ValueError when this execution cannot hold the bool mask `new` (default: any)."""

    @torch.no_grad()
    def set_active(self, new: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Rebuild the structure for the bool mask `new`; values and element-wise optimizer state
        follow their positions (kept where active before and after, 0 where grown). Refused while a
        forward of this layer awaits its backward (see the module docstring)."""
        if self.live_graphs:
            raise RuntimeError(
                f"{self.execution}: cannot change a layer's active positions while a forward of it awaits its backward "
                "(a live autograd graph saved its values); run that backward or drop its outputs first"
            )
        new = new.to(self.values.device, torch.bool)
        self.check_mask(new)
        values = self.values
        state = optimizer.state.get(values) or {}
        old = {key: self.scatter(t) for key, t in state.items() if isinstance(t, torch.Tensor) and t.shape == values.shape}
        dense_values = self.scatter(values)
        self._set_structure(new.flatten().nonzero().flatten())
        flat, shape = self.flat_index(), self.values_shape()
        fresh = dense_values.flatten()[flat].view(shape)
        if fresh.shape == values.shape:
            values.copy_(fresh)
            for key, dense in old.items():
                state[key].copy_(dense.flatten()[flat].view(shape))
        else:  # the count changed (a soft budget, an ablated neuron): same Parameter, new size
            values.data = fresh
            for key, dense in old.items():
                state[key] = dense.flatten()[flat].view(shape)
        values.grad = None  # it described the old positions
        self.dense_grad = None

    def prepare(self, values: torch.Tensor, cast: torch.dtype | None) -> None:
        return None  # each product reads the structure buffers, which stay as they are under a graph

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

    def __init__(self, layers: Mapping[str, ActiveValuesLinear]) -> None:
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


def swap_parameter(optimizer: torch.optim.Optimizer, old: torch.nn.Parameter, new: torch.nn.Parameter, execution: str) -> None:
    """Put `new` in `old`'s place in its parameter group (weight decay and checkpoint order follow)."""
    for group in optimizer.param_groups:
        for index, param in enumerate(group["params"]):
            if param is old:
                group["params"][index] = new
                state = optimizer.state.pop(old, None)
                if state:
                    raise ValueError(f"{execution}: the optimizer already holds state for a prunable weight")
                return
    raise ValueError(f"{execution}: a prunable weight is not in the optimizer")


class ActiveValuesMaskSet:
    """`MaskSet`'s interface over `ActiveValuesLinear` layers (see the module docstring); a subclass
    names its `layer_class`."""

    layer_class: ClassVar[type[ActiveValuesLinear]]

    def __init__(self, layers: dict[str, ActiveValuesLinear], optimizer: torch.optim.Optimizer) -> None:
        self.layers = layers
        self.optimizer = optimizer

    @classmethod
    def convert(cls, model: torch.nn.Module, masks: MaskSet) -> "ActiveValuesMaskSet":
        """Replace each masked `nn.Linear` weight of `masks` by a `layer_class` holding its active
        weights, in the model and in the optimizer (the values take the weight's place in its
        parameter group, so weight decay and checkpoint order follow)."""
        execution = cls.layer_class.execution
        layers: dict[str, ActiveValuesLinear] = {}
        for name, weight in masks.weights.items():
            path, linear = owning_linear(model, name, execution)
            layer = cls.layer_class(linear, masks.active(name))
            swap_parameter(masks.optimizer, weight, layer.values, execution)
            replace_module(model, path, layer)
            layers[name] = layer
        return cls(layers, masks.optimizer)

    # -- inspection ---------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.layers)

    @property
    def kernel_precision(self) -> str:
        """The dtype the products run in where it is the values' whatever the autocast (csr)."""
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
        execution = self.layer_class.execution
        return {f"{execution}:{name}.{key}": t for name, layer in self.layers.items() for key, t in layer.index_buffers().items()}

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
        return {name: layer.structure_state() for name, layer in self.layers.items()}

    def load_state_dict(self, structures: Mapping[str, Any]) -> None:
        execution = self.layer_class.execution
        missing = sorted(set(self.layers) - set(structures))
        if missing:
            raise KeyError(f"checkpoint lacks {execution} structures for {missing}")
        for name, layer in self.layers.items():
            saved = structures[name]
            if not isinstance(saved, Mapping):
                raise ValueError(f"{name}: the checkpoint holds no {execution} structure (was it saved by another execution?)")
            # Values and state are overwritten by the model and optimizer state loaded next.
            layer.set_active(layer.mask_of(saved), self.optimizer)
