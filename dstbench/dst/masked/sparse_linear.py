"""A linear layer whose three products come from a sparse execution backend (`csr`,
`semi_structured`), with the autograd of `F.linear` and of `dstbench.models.fused_norms.norm_linear`.

A backend's layer module implements `LinearKernels` and calls `kernel_linear(...)` from its forward:

    prepare(weight, cast)                       once per forward: what both products use, kept with
                                                the graph for its backward (2:4: W and W^T
                                                compressed; csr: nothing)
    output(weight, x2d, cast, prepared)         x2d @ W^T                    (tokens, out)
    input_grad(weight, grad2d, cast, prepared)  grad2d @ W                   (tokens, in)
    weight_grad(weight, grad2d, x2d, cast)      the gradient of `weight`, the tensor the layer
                                                trains (for csr its active values only)
    live_graphs                                 a `LiveGraphs`: the forwards whose backward is
                                                still to come (csr changes no structure under one)

`cast` is the autocast dtype when autocast is on, else None; each backend picks its compute dtype
from it. The output is in the autocast dtype under autocast (as `F.linear`'s is), else in the
weight's. With a norm (`fuse_norms`), the layer keeps only the norm's input for backward and
recomputes the norm there, exactly as `dstbench.models.fused_norms._NormLinear` does, so the sparse executions
keep the same activation bytes as the masked one.

One backward per forward: the backward releases what `prepare` made (2:4: the compressed W and
W^T) and leaves `live_graphs`, after which csr may change its structure. A second backward through
the same graph (`backward(retain_graph=True)` and then another) would run on a released or changed
layer, so it raises a RuntimeError instead (`SECOND_BACKWARD`); run the forward again. Keeping both
until the graph is freed would hold the compressed pair, and block csr's updates, for as long as
anything references an output (a training loop's `loss` until the next step), so it is not done.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch


class LiveGraphs:
    """The autograd nodes of a layer's forwards whose backward has not run: a node leaves at its
    backward, or when its graph is freed (weak references), so a forward without grad leaves none."""

    def __init__(self) -> None:
        self._nodes: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, node: Any) -> None:
        self._nodes.add(node)

    def discard(self, node: Any) -> None:
        self._nodes.discard(node)

    def __bool__(self) -> bool:
        return len(self._nodes) > 0


class LinearKernels(Protocol):
    live_graphs: LiveGraphs

    def prepare(self, weight: torch.Tensor, cast: torch.dtype | None) -> Any: ...

    def output(self, weight: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None, prepared: Any) -> torch.Tensor: ...

    def input_grad(self, weight: torch.Tensor, grad2d: torch.Tensor, cast: torch.dtype | None, prepared: Any) -> torch.Tensor: ...

    def weight_grad(
        self, weight: torch.Tensor, grad2d: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None
    ) -> torch.Tensor: ...


SECOND_BACKWARD = (
    "a sparse execution (csr, semi_structured) runs one backward per forward: this graph's backward "
    "already ran and released what its forward prepared (retain_graph=True is not supported); run the forward again"
)


class _KernelLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernels, x, weight, bias, norm_weight, norm_bias, eps, normed):  # type: ignore[override]
        device = x.device.type
        cast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        features = x.shape[-1]
        y = torch.native_layer_norm(x, [features], norm_weight, norm_bias, eps)[0] if normed else x
        with torch.autocast(device, enabled=False):
            prepared = kernels.prepare(weight, cast)
            # Row-major, as F.linear returns it: a transposed product (csr) would otherwise send
            # strided activations downstream (fused attention falls back to its math path on them).
            out = kernels.output(weight, y.reshape(-1, features), cast, prepared)
            out = out.to(cast or weight.dtype).contiguous()
            if bias is not None:
                out += bias.to(out.dtype)
        ctx.kernels, ctx.cast, ctx.eps, ctx.normed, ctx.prepared = kernels, cast, eps, normed, prepared
        ctx.backward_done = False
        ctx.save_for_backward(x, weight, bias, norm_weight, norm_bias)
        kernels.live_graphs.add(ctx)  # ctx is the graph's node: gone with the graph if no backward comes
        return out.reshape(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        if ctx.backward_done:
            raise RuntimeError(SECOND_BACKWARD)
        x, weight, bias, norm_weight, norm_bias = ctx.saved_tensors
        kernels, cast = ctx.kernels, ctx.cast
        shape = [x.shape[-1]]
        needs = ctx.needs_input_grad
        if ctx.normed:
            # The forward's kernel again: bit-identical y, mean and rstd.
            y, mean, rstd = torch.native_layer_norm(x, shape, norm_weight, norm_bias, ctx.eps)
        else:
            y = x
        grad_2d = grad_out.reshape(-1, grad_out.shape[-1])
        y_2d = y.reshape(-1, shape[0])
        grad_weight = grad_bias = grad_x = grad_norm_weight = grad_norm_bias = None
        if needs[2]:
            grad_weight = kernels.weight_grad(weight, grad_2d, y_2d, cast).to(weight.dtype)
        if bias is not None and needs[3]:
            grad_bias = grad_2d.sum(0).to(bias.dtype)
        if needs[1] or needs[4] or needs[5]:
            grad_y = kernels.input_grad(weight, grad_2d, cast, ctx.prepared).to(y.dtype).contiguous()
            grad_y = grad_y.view(y.shape)
            if ctx.normed:
                grad_x, grad_norm_weight, grad_norm_bias = torch.ops.aten.native_layer_norm_backward(
                    grad_y, x, shape, mean, rstd, norm_weight, norm_bias,
                    [needs[1], norm_weight is not None and needs[4], norm_bias is not None and needs[5]],
                )
            else:
                grad_x = grad_y
        ctx.prepared = None  # the backward was its last use (2:4: both compressed copies)
        ctx.backward_done = True  # a second backward raises (module docstring)
        kernels.live_graphs.discard(ctx)
        return None, grad_x, grad_weight, grad_bias, grad_norm_weight, grad_norm_bias, None, None


def kernel_linear(
    kernels: LinearKernels,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    norm: torch.nn.LayerNorm | None = None,
) -> torch.Tensor:
    """`linear(norm(x))` (or `linear(x)` without a norm) through `kernels`' products."""
    if norm is None:
        return _KernelLinear.apply(kernels, x, weight, bias, None, None, 0.0, False)
    return _KernelLinear.apply(kernels, x, weight, bias, norm.weight, norm.bias, norm.eps, True)


def owning_linear(model: torch.nn.Module, name: str, execution: str) -> tuple[str, torch.nn.Linear]:
    """The module path and the `nn.Linear` whose weight is the parameter `name`."""
    path, _, attr = name.rpartition(".")
    linear = model.get_submodule(path) if path else model
    if attr != "weight" or not isinstance(linear, torch.nn.Linear):
        raise ValueError(f"execution {execution}: {name} is not the weight of an nn.Linear")
    return path, linear


def replace_module(model: torch.nn.Module, path: str, module: torch.nn.Module) -> None:
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)
