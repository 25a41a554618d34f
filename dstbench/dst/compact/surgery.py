"""Tensor surgery: remove and clone whole units of a network, and carry the optimizer state along.

A *unit* (an FFN channel, an attention head) owns a slice of several tensors. Tensors that
*produce* the unit (fc1 rows and bias; a head's q, k and v rows and biases) have role ``"in"``;
tensors that *consume* it (fc2 columns; a head's proj columns) have role ``"out"``. A `UnitAxis`
says where the unit's slice lies: along `axis` the tensor is laid out as (groups, units, unit_size),
e.g. timm's qkv weight is (3, heads, head_dim) along dim 0.

A resize is described by `sources`: for every unit of the new tensor, the index of the old unit it
comes from. A source listed once survives; a source left out is removed; a source listed k times
is cloned into k copies (Net2WiderNet, Chen et al. 2016): each copy keeps the incoming weights and
gets 1/k of the outgoing weights, so the network computes the same function. Optional noise
perturbs the outgoing shares element-wise with zero sum over the copies: the function is still the
same (only the split changes) while the copies' incoming gradients now differ, which breaks their
symmetry.

Optimizer-state rule ("as if the network had always had this shape"). Take the wider network that
holds the k copies, each with 1/k of the outgoing weights, at every past step. It computes the same
function as the narrow one, so it saw the same upstream gradients, and:

* a copy's activation equals the source's, so the gradient of every *outgoing* weight of a copy
  equals the source's outgoing gradient: ``out`` state is copied unchanged to every copy;
* the gradient reaching a copy's activation is ``sum_o W_out[o, copy] * g_o``, 1/k of the source's,
  and every *incoming* weight gradient (rows, biases; for a head also through the softmax, which is
  linear in dL/d(head output)) is linear in it, so it is 1/k of the source's: SGD's momentum
  buffer and Adam's ``exp_avg`` (linear in past gradients) scale by 1/k, ``exp_avg_sq`` and
  ``max_exp_avg_sq`` (quadratic) by 1/k**2;
* every parameter outside the units sees the same gradients as before: its state is untouched,
  and so is the ``step`` count.

This is exact for Adam/AdamW (decoupled weight decay never enters the state) and for SGD without
weight decay. SGD's coupled weight decay adds ``wd * p`` to the buffer, which does not scale with
the share: there the rule is first order. With noise the shares of the copies are 1/k up to the
noise, and the rule is first order in the noise. A removed unit's state is dropped; surviving
units keep their rows.

A source of `NEW` (-1) makes a *new* unit: its producing slices take the values the caller gives
(zeros if none), its consuming slices are zero, so the network still computes the same function
(as RigL grows a connection at zero), and its optimizer state starts at zero, as a grown
connection's does. The step count is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from dstbench.dst.optimizer import STATE_POWERS

NEW = -1  # the source of a new unit (see the module docstring)


@dataclasses.dataclass(frozen=True)
class UnitAxis:
    """Where the units lie in one parameter: `getattr(module, name)`, laid out along `axis` as
    (groups, units, unit_size)."""

    module: nn.Module
    name: str
    axis: int
    role: Literal["in", "out"]
    groups: int = 1
    unit_size: int = 1

    @property
    def param(self) -> nn.Parameter:
        return getattr(self.module, self.name)

    def units(self, tensor: torch.Tensor | None = None) -> int:
        tensor = self.param if tensor is None else tensor
        return tensor.shape[self.axis] // (self.groups * self.unit_size)


@dataclasses.dataclass
class Swap:
    """One parameter replaced by a resize: what the optimizer remap needs."""

    axis: UnitAxis
    old: nn.Parameter
    new: nn.Parameter
    sources: torch.Tensor | None  # None: a blank resize (no state carried)
    share: torch.Tensor | None  # per new unit, the fraction of its source's outgoing weights
    fresh: torch.Tensor | None = None  # indices of units with source NEW (zero state); None: none


def unit_shape(tensor: torch.Tensor, axis: UnitAxis, units: int) -> list[int]:
    """`tensor`'s shape with its unit axis split as (groups, units, unit_size), for `units` units."""
    shape = list(tensor.shape)
    return shape[: axis.axis] + [axis.groups, units, axis.unit_size] + shape[axis.axis + 1 :]


def flat_shape(tensor: torch.Tensor, axis: UnitAxis, units: int) -> list[int]:
    """`tensor`'s shape with its unit axis holding `units` units."""
    shape = list(tensor.shape)
    shape[axis.axis] = axis.groups * units * axis.unit_size
    return shape


def gather_units(
    tensor: torch.Tensor,
    axis: UnitAxis,
    sources: torch.Tensor,
    scale: torch.Tensor | None = None,
    fresh: torch.Tensor | None = None,
    fresh_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """A new tensor whose units are `tensor`'s units `sources`, each multiplied by `scale[j]`.

    `fresh`: the positions (indices into `sources`) of new units, whose source is `NEW`: they hold
    `fresh_values` (laid out as `unit_shape(tensor, axis, len(fresh))`), or zeros."""
    old_units = axis.units(tensor)
    view = tensor.reshape(unit_shape(tensor, axis, old_units))
    dim = axis.axis + 1
    if fresh is not None:
        # One zero unit after the old ones for NEW to read (the old tensor may hold no unit at all).
        pad = list(view.shape)
        pad[dim] = 1
        view = torch.cat([view, view.new_zeros(pad)], dim)
        sources = torch.where(sources == NEW, old_units, sources)
    out = view.index_select(dim, sources)  # a fresh tensor: safe to scale in place
    if scale is not None:
        shape = [1] * out.dim()
        shape[dim] = -1
        out.mul_(scale.to(out.dtype).view(shape))
    if fresh is not None and fresh_values is not None:
        out.index_copy_(dim, fresh, fresh_values.to(out.device, out.dtype))
    return out.reshape(flat_shape(tensor, axis, len(sources)))


def _split_noise(
    out: torch.Tensor, axis: UnitAxis, sources: torch.Tensor, n_old: int, noise: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Relative noise for the outgoing shares that sums to zero over the copies of each source (new
    units, whose outgoing slices are zero, are grouped apart and stay zero)."""
    sources = torch.where(sources == NEW, n_old, sources)
    n_old += 1
    view = out.reshape(unit_shape(out, axis, len(sources)))
    # Drawn on the CPU from the caller's generator: the same draws on every device.
    xi = torch.randn(view.shape, generator=generator, dtype=torch.float32).to(out.device, out.dtype)
    dim = axis.axis + 1
    sums = torch.zeros(unit_shape(out, axis, n_old), device=out.device, dtype=out.dtype)
    sums.index_add_(dim, sources, xi)
    counts = torch.bincount(sources, minlength=n_old).to(out.dtype)
    shape = [1] * view.dim()
    shape[dim] = -1
    centred = xi - sums.index_select(dim, sources) / counts[sources].view(shape)
    return (view * (1.0 + noise * centred)).reshape(out.shape)


def _install(axis: UnitAxis, data: torch.Tensor) -> tuple[nn.Parameter, nn.Parameter]:
    old = axis.param
    new = nn.Parameter(data, requires_grad=old.requires_grad)
    setattr(axis.module, axis.name, new)
    if isinstance(axis.module, nn.Linear) and axis.name == "weight":
        axis.module.out_features, axis.module.in_features = new.shape
    return old, new


def resize_units(
    axes: Sequence[UnitAxis],
    sources: torch.Tensor | Sequence[int],
    *,
    noise: float = 0.0,
    generator: torch.Generator | None = None,
    new_values: Sequence[torch.Tensor | None] | None = None,
) -> list[Swap]:
    """Replace every parameter of `axes` by a new Parameter holding the units `sources`.

    Survivors are copied, clones split their outgoing weights, a `NEW` source makes a new unit (see
    the module docstring). `new_values`, one entry per axis: the new units' slices of an "in" axis
    (`unit_shape(param, axis, number of new units)`), None for zeros; "out" axes are always zero.
    The new Parameters are set on their modules; pass the result to `remap_optimizer` to move the
    optimizer over to them.
    """
    if not axes:
        return []
    # Checked and counted on the host (the plan is made there), then moved once to the device.
    sources = torch.as_tensor(sources, dtype=torch.long, device="cpu")
    if sources.dim() != 1:
        raise ValueError("sources must be one-dimensional")
    n_old = axes[0].units()
    for axis in axes:
        if axis.units() != n_old:
            raise ValueError(f"{axis.name} holds {axis.units()} units, expected {n_old}")
    if len(sources) and (int(sources.min()) < NEW or int(sources.max()) >= n_old):
        raise ValueError(f"sources must lie in [0, {n_old}), or be NEW ({NEW})")
    is_new = sources == NEW
    n_new = int(is_new.sum())
    if new_values is not None and len(new_values) != len(axes):
        raise ValueError(f"{len(new_values)} new_values for {len(axes)} axes")
    # Counted over existing sources only; a new unit's share is 1 (its state is zero anyway).
    counts = torch.bincount(torch.where(is_new, n_old, sources), minlength=n_old + 1)
    counts[n_old] = 1
    cloned = bool((counts > 1).any())
    device = axes[0].param.device
    share = (1.0 / counts[torch.where(is_new, n_old, sources)].to(torch.float32)).to(device)
    fresh = torch.nonzero(is_new).flatten().to(device) if n_new else None
    sources = sources.to(device)
    swaps = []
    for index, axis in enumerate(axes):
        old_data = axis.param.detach()
        if axis.role == "out":
            data = gather_units(old_data, axis, sources, share, fresh)
            if noise and cloned:
                data = _split_noise(data, axis, sources, n_old, noise, generator)
        elif axis.role == "in":
            values = new_values[index] if new_values is not None and n_new else None
            if values is not None and list(values.shape) != unit_shape(old_data, axis, n_new):
                raise ValueError(f"new values of {axis.name}: shape {list(values.shape)}, expected {unit_shape(old_data, axis, n_new)}")
            data = gather_units(old_data, axis, sources, None, fresh, values)
        else:
            raise ValueError(f"role must be 'in' or 'out', got {axis.role!r}")
        old, new = _install(axis, data)
        swaps.append(Swap(axis, old, new, sources, share, fresh))
    return swaps


def blank_units(axes: Sequence[UnitAxis], units: int) -> list[Swap]:
    """Replace every parameter of `axes` by a zero Parameter of `units` units (their values are about
    to be loaded, e.g. from a checkpoint). `remap_optimizer` then drops their state."""
    swaps = []
    for axis in axes:
        old_data = axis.param.detach()
        data = old_data.new_zeros(flat_shape(old_data, axis, units))
        old, new = _install(axis, data)
        swaps.append(Swap(axis, old, new, None, None))
    return swaps


def _remap_state(state: dict, swap: Swap) -> dict:
    new_state = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and value.shape == swap.old.shape and value.dim() > 0:
            if key not in STATE_POWERS:
                raise ValueError(f"no remap rule for optimizer state {key!r}")
            scale = swap.share ** STATE_POWERS[key] if swap.axis.role == "in" else None
            new_state[key] = gather_units(value, swap.axis, swap.sources, scale, swap.fresh)
        else:  # `step`, or a momentum buffer of None: shape-free, kept as it is
            new_state[key] = value
    return new_state


def remap_optimizer(optimizer: torch.optim.Optimizer | None, swaps: Sequence[Swap]) -> None:
    """Put each swap's new Parameter where the old one was in `optimizer.param_groups` (same group,
    same position) and move its state there, remapped unit by unit. The optimizer object, its
    hyper-parameters and every other parameter's state stay as they are."""
    if optimizer is None or not swaps:
        return
    by_id = {id(swap.old): swap for swap in swaps}
    for group in optimizer.param_groups:
        params = group["params"]
        for index, param in enumerate(params):
            swap = by_id.get(id(param))
            if swap is not None:
                params[index] = swap.new
    for swap in swaps:
        state = optimizer.state.pop(swap.old, None)
        if state and swap.sources is not None:
            optimizer.state[swap.new] = _remap_state(state, swap)
