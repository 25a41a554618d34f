"""A method's DistributedDataParallel wrapper, kept in step with a model whose parameters change.

The base `Method` wraps its model at the first segment; a compact method's resize installs new
Parameter objects, after which the wrapper is stale and rebuilt (the rebuild counts as part of the
update). Staleness is asked only at a segment's start and after an update, never per step.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from dstbench.util import distributed


class DDPSync:
    """The wrapper (None until the first sync) and the parameters it synchronises."""

    def __init__(self) -> None:
        self.wrapper: torch.nn.Module | None = None
        self._params: tuple[torch.nn.Parameter, ...] = ()

    @staticmethod
    def _synced(model: torch.nn.Module, ignored: Collection[str]) -> tuple[torch.nn.Parameter, ...]:
        return tuple(p for name, p in model.named_parameters() if p.requires_grad and name not in ignored)

    def stale(self, model: torch.nn.Module, ignored: Collection[str]) -> bool:
        """Whether the wrapper no longer synchronises exactly the model's parameters (by identity:
        a resize installs new Parameter objects)."""
        if self.wrapper is None or self.wrapper.module is not model:
            return True
        params = self._synced(model, ignored)
        return len(params) != len(self._params) or any(a is not b for a, b in zip(params, self._params))

    def sync(self, model: torch.nn.Module, device: torch.device, ignored: Collection[str]) -> None:
        """(Re)build the wrapper around the model's current parameters when it is stale."""
        if not self.stale(model, ignored):
            return
        params = self._synced(model, ignored)
        # Drop the old wrapper first: its reducer holds gradient buckets of its own, freed with it.
        self.wrapper, self._params = None, ()
        self.wrapper = distributed.wrap_ddp(model, device, set(ignored))
        self._params = params
