"""Ways to zero the gradients at masked positions, on the smoke model's prunable weights: the one
masking op of a masked method's step (`dstbench.dst.masked.masks`). `dstbench` is what `MaskSet`
does (bool masks viewed as uint8, one `_foreach_mul_`); the others are the alternatives it was
chosen over, with the mask each needs. Compare their medians in one run:

    python -m pytest tests/benchmarks/test_mask_ops.py --benchmark-enable --benchmark-only
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.masked.masks import MaskSet, random_mask
from dstbench.models.timm_models import prunable_weights
from tests.benchmarks.conftest import OPTIMIZER, pedantic

Grads = list[torch.Tensor]


def _float_foreach_mul(grads: Grads, active: Grads) -> Callable[[], None]:
    masks = [m.float() for m in active]  # 4 bytes per weight (dstbench's CPU masks before bool)
    return lambda: torch._foreach_mul_(grads, masks)


def _bool_foreach_mul(grads: Grads, active: Grads) -> Callable[[], None]:
    return lambda: torch._foreach_mul_(grads, active)


def _masked_fill_inverted(grads: Grads, active: Grads) -> Callable[[], None]:
    inactive = [~m for m in active]  # the inverted mask kept instead of the mask

    def run() -> None:
        for grad, mask in zip(grads, inactive):
            grad.masked_fill_(mask, 0.0)

    return run


def _where_out(grads: Grads, active: Grads) -> Callable[[], None]:
    zero = torch.zeros(())

    def run() -> None:
        for grad, mask in zip(grads, active):
            torch.where(mask, grad, zero, out=grad)

    return run


STRATEGIES = {
    "float_foreach_mul": _float_foreach_mul,
    "bool_foreach_mul": _bool_foreach_mul,
    "masked_fill_inverted": _masked_fill_inverted,
    "where_out": _where_out,
}


@pytest.mark.parametrize("density", [0.1, 0.5])
@pytest.mark.parametrize("strategy", ["dstbench", *STRATEGIES])
def test_mask_gradients(benchmark: Any, vit: torch.nn.Module, strategy: str, density: float) -> None:
    weights = prunable_weights(vit)
    engine = MaskSet(weights, build_optimizer(OPTIMIZER, vit))
    generator = torch.Generator().manual_seed(0)
    for name, weight in weights.items():
        engine.set_mask(name, random_mask(weight.shape, int(weight.numel() * density), generator))
    for weight in weights.values():
        weight.grad = torch.randn(weight.shape, generator=generator)
    grads = [w.grad for w in weights.values()]
    active = [engine.active(n) for n in weights]
    kept = [g[m].clone() for g, m in zip(grads, active)]
    run = engine.mask_grads if strategy == "dstbench" else STRATEGIES[strategy](grads, active)
    benchmark.group = f"mask gradients, density {density:g}"
    benchmark.extra_info.update(strategy=strategy, density=density, weights=engine.numel(), tensors=len(grads))
    pedantic(benchmark, run)
    for grad, mask, values in zip(grads, active, kept):
        assert torch.all(grad[~mask] == 0) and torch.equal(grad[mask], values)
