"""The masking engine of the full-tensor DST methods: one bool mask per prunable weight.

Masks are bool on every device: 1 byte per prunable weight (rigl-torch keeps bool masks too).

The invariant: weights, and their optimizer state (SGD `momentum_buffer`, Adam/AdamW `exp_avg`,
`exp_avg_sq`, `max_exp_avg_sq`), are exactly zero at masked positions. `set_mask` establishes it
whenever a mask changes (grown positions start at 0 with zero state). Between updates a step only
has to mask the gradient (`mask_grads`), in place, before the optimizer step: with a zero gradient,
weight and state at a masked position, SGD (momentum, nesterov, coupled weight decay: `g + wd * 0`)
and AdamW (decoupled decay `w * (1 - lr * wd)`, moments `b * 0 + (1 - b) * 0`, update
`0 / (sqrt(0) + eps)`) compute exactly 0 again, so multiplying weights and both moments by the mask
every step (as the public implementations do) would only rewrite zeros. Where a step does take an
unmasked gradient (a method whose update follows the step and reads the dense gradient, e.g.
Chase), the caller restores the invariant after that step with `enforce` (and a checkpoint load
does too); `tests/dst/masked/test_masks.py` checks the arithmetic for every optimizer.

How the gradient is masked, measured on the CPU smoke model's shapes
(`tests/benchmarks/test_mask_ops.py`): `torch._foreach_mul_` with each bool mask viewed as uint8
(same storage, no copy kept). torch's CPU kernels promote the uint8 operand to the gradient's dtype
in a transient copy, one layer at a time, and that conversion is vectorised; with the bool mask
itself the same promotion runs an unvectorised bool conversion, and `masked_fill_` / `torch.where`
with a bool mask take a per-element branch, each several times slower at random masks. On CUDA
the kernels cast the operand on the fly (no copy); `_foreach_mul_` takes its per-tensor path there
(its fused kernel needs one dtype across both lists).

Active counts are kept per layer; a mask change records its count on the device and all pending
counts are read in one synchronisation when `counts` is next read (not one per layer).

Distributed: every new mask goes through `set_mask`, which applies rank 0's copy on every rank.
Each rank computes the same decision anyway (same averaged gradients, same weights, same seeded
generator), so this costs one broadcast per layer and update and changes nothing; it makes
identical masks a guarantee rather than a consequence of bitwise-equal arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from dstbench.util import distributed
from dstbench.dst.optimizer import STATE_KEYS, zero_state


class MaskSet:
    """Masks of named weights, applied in place to gradients, weights and optimizer state.

    `reset_keys`: the element-wise optimizer state zeroed where a mask is off or turns on (all of it
    by default, which the invariant above needs). A method that follows a reference resetting less
    (SRigL's `reset_state: momentum`: SGD's momentum only, Adam's moments kept) narrows it, and must
    then zero the weights at masked positions after every step itself, as that reference does: with
    moments left at a masked position the optimizer moves its weight off zero."""

    reset_keys: tuple[str, ...] = STATE_KEYS

    def __init__(
        self,
        weights: Mapping[str, torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        sync_ranks: bool | None = None,
    ) -> None:
        if not weights:
            raise ValueError("no prunable weights: the pattern matched no parameter")
        self.weights = dict(weights)
        self.optimizer = optimizer
        # None: whenever torch.distributed is initialised (see the module docstring).
        self.sync_ranks = distributed.is_distributed() if sync_ranks is None else bool(sync_ranks)
        self._masks = {name: torch.ones_like(w, dtype=torch.bool) for name, w in self.weights.items()}
        # The hot path walks lists, not dicts; its multiplier is each mask viewed as uint8 (same
        # storage, see the module docstring).
        self._pairs = [(self.weights[name], self._masks[name].view(torch.uint8)) for name in self.weights]
        self._counts = {name: w.numel() for name, w in self.weights.items()}
        self._pending: dict[str, torch.Tensor] = {}  # device-side counts of changed masks

    # -- inspection ---------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.weights)

    @property
    def counts(self) -> dict[str, int]:
        """Active weights per layer (pending counts of changed masks are read in one sync)."""
        if self._pending:
            names = list(self._pending)
            values = torch.stack([self._pending[name] for name in names]).tolist()
            self._counts.update(zip(names, values))
            self._pending.clear()
        return self._counts

    def numel(self, name: str | None = None) -> int:
        if name is not None:
            return self.weights[name].numel()
        return sum(w.numel() for w in self.weights.values())

    def active(self, name: str) -> torch.Tensor:
        """A fresh bool tensor: True where the weight is active."""
        return self._masks[name].clone()

    def bool_masks(self) -> dict[str, torch.Tensor]:
        return {name: self.active(name) for name in self.weights}

    def buffers(self) -> dict[str, torch.Tensor]:
        """The stored masks, as they are held in memory (counted in the training-state bytes)."""
        return {f"mask:{name}": m for name, m in self._masks.items()}

    def recount(self) -> dict[str, int]:
        """Active counts from the tensors, all layers in one host sync (for updates and checks)."""
        self._pending = {name: torch.count_nonzero(m) for name, m in self._masks.items()}
        return self.counts

    def total_active(self) -> int:
        return sum(self.counts.values())

    # -- every step ---------------------------------------------------------------------------------
    @torch.no_grad()
    def mask_grads(self) -> None:
        """Zero the gradients at masked positions, in place: all a step needs (module docstring)."""
        grads, masks = [], []
        for weight, mask in self._pairs:
            if weight.grad is not None:
                grads.append(weight.grad)
                masks.append(mask)
        if grads:
            torch._foreach_mul_(grads, masks)

    # -- after a step that took an unmasked gradient, or a load -------------------------------------
    @torch.no_grad()
    def mask_weights(self) -> None:
        for name, weight in self.weights.items():
            weight.masked_fill_(~self._masks[name], 0.0)

    @torch.no_grad()
    def mask_state(self) -> None:
        for name, weight in self.weights.items():
            zero_state(self.optimizer, weight, ~self._masks[name], self.reset_keys)

    def enforce(self) -> None:
        """Restore the invariant: weights and optimizer state exactly zero at masked positions
        (`masked_fill_`, so even a non-finite value there becomes 0). Not needed after an ordinary
        step; see the module docstring for when it is."""
        self.mask_weights()
        self.mask_state()

    # -- topology changes ---------------------------------------------------------------------------
    @torch.no_grad()
    def set_mask(self, name: str, new: torch.Tensor) -> None:
        """Replace a mask. Weights and optimizer state become zero wherever the new mask is off and
        wherever it turns on (grown weights start at 0 with zero state); positions active in both
        keep their values. The layer's count is taken from `new` itself. Distributed, rank 0's
        `new` is the one every rank applies."""
        weight, mask = self.weights[name], self._masks[name]
        new = new.to(device=mask.device, dtype=torch.bool)
        if self.sync_ranks:
            new = distributed.broadcast_(new.contiguous())
        reset = ~(new & mask)
        weight.masked_fill_(reset, 0.0)
        zero_state(self.optimizer, weight, reset, self.reset_keys)
        mask.copy_(new)
        self._pending[name] = torch.count_nonzero(new)

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: self.active(name).cpu() for name in self.weights}

    @torch.no_grad()
    def load_state_dict(self, masks: Mapping[str, torch.Tensor]) -> None:
        missing = sorted(set(self.weights) - set(masks))
        if missing:
            raise KeyError(f"checkpoint lacks masks for {missing}")
        for name, mask in self._masks.items():
            mask.copy_(masks[name].to(device=mask.device, dtype=torch.bool))
        self.recount()


def random_mask(shape: torch.Size | tuple[int, ...], active: int, generator: torch.Generator) -> torch.Tensor:
    """A CPU bool mask of `shape` with exactly `active` positions on, drawn uniformly at random from
    `generator` (one `randperm` of the tensor's size: the draw every masked method starts from)."""
    numel = 1
    for size in shape:
        numel *= int(size)
    if not 0 <= active <= numel:
        raise ValueError(f"cannot make {active} of {numel} positions active")
    flat = torch.zeros(numel, dtype=torch.bool)
    flat[torch.randperm(numel, generator=generator)[:active]] = True
    return flat.view(tuple(shape))
