"""The masking engine of the full-tensor DST methods: one mask per prunable weight.

Every training step pays what the public implementations pay (rigl-torch, sparselearning):
the gradient is multiplied by the mask before the optimizer step, the weight and its optimizer
state (SGD `momentum_buffer`, Adam/AdamW `exp_avg`, `exp_avg_sq`) after it, all in place, each as
one `torch._foreach_mul_` over all layers rather than a Python loop of per-layer calls. The
forward pass uses the plain weights, which are exactly zero at masked positions (rigl-torch does
the same; no `w * m` product is formed).

Masks are stored as bool on CUDA, whose kernels cast a bool operand on the fly, and in the weight's
dtype elsewhere: on the CPU an in-place multiply by a bool tensor first allocates a converted copy,
which would make every step allocate (and run about 20x slower on this operation). On CUDA the
bool masks keep a quarter of the memory of float ones (rigl-torch keeps bool masks too); the price
is that `_foreach_mul_` takes its per-tensor path there (its fused multi-tensor kernel needs one
dtype across both lists), so it still launches one kernel per tensor, from C++ instead of Python.

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

from dstbench import distributed
from dstbench.optim import state_tensors, zero_state


def default_mask_dtype(weight: torch.Tensor) -> torch.dtype:
    return torch.bool if weight.device.type == "cuda" else weight.dtype


class MaskSet:
    """Masks of named weights, applied in place to gradients, weights and optimizer state."""

    def __init__(
        self,
        weights: Mapping[str, torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        mask_dtype: torch.dtype | None = None,
        sync_ranks: bool | None = None,
    ) -> None:
        if not weights:
            raise ValueError("no prunable weights: the pattern matched no parameter")
        self.weights = dict(weights)
        self.optimizer = optimizer
        # None: whenever torch.distributed is initialised (see the module docstring).
        self.sync_ranks = distributed.is_distributed() if sync_ranks is None else bool(sync_ranks)
        self._masks = {
            name: torch.ones_like(w, dtype=mask_dtype or default_mask_dtype(w), requires_grad=False)
            for name, w in self.weights.items()
        }
        # The hot path walks lists, not dicts.
        self._pairs = [(self.weights[name], self._masks[name]) for name in self.weights]
        self._weight_list = [w for w, _ in self._pairs]
        self._mask_list = [m for _, m in self._pairs]
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
        return self._masks[name] != 0

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
        grads, masks = [], []
        for weight, mask in self._pairs:
            if weight.grad is not None:
                grads.append(weight.grad)
                masks.append(mask)
        if grads:
            torch._foreach_mul_(grads, masks)

    @torch.no_grad()
    def mask_weights(self) -> None:
        torch._foreach_mul_(self._weight_list, self._mask_list)

    @torch.no_grad()
    def mask_state(self) -> None:
        # Collected every step: a checkpoint load or the optimizer itself may replace state tensors.
        values, masks = [], []
        for weight, mask in self._pairs:
            for value in state_tensors(self.optimizer, weight):
                values.append(value)
                masks.append(mask)
        if values:
            torch._foreach_mul_(values, masks)

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
        reset = ~(new & (mask != 0))
        weight.masked_fill_(reset, 0.0)
        zero_state(self.optimizer, weight, reset)
        mask.copy_(new)
        self._pending[name] = torch.count_nonzero(new)

    @torch.no_grad()
    def init_random(self, allotment: Mapping[str, int], generator: torch.Generator) -> None:
        """Masks with `allotment[name]` active positions drawn uniformly at random per layer (the
        sparse initialisation of SET, RigL's `random` and MEST); weights and state masked to match."""
        for name, mask in self._masks.items():
            k = int(allotment[name])
            flat = torch.zeros(mask.numel(), dtype=torch.bool)
            flat[torch.randperm(mask.numel(), generator=generator)[:k]] = True
            self.set_mask(name, flat.view(mask.shape))

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: self.active(name).cpu() for name in self.weights}

    @torch.no_grad()
    def load_state_dict(self, masks: Mapping[str, torch.Tensor]) -> None:
        missing = sorted(set(self.weights) - set(masks))
        if missing:
            raise KeyError(f"checkpoint lacks masks for {missing}")
        for name, mask in self._masks.items():
            mask.copy_(masks[name].to(mask.device))
        self.recount()
