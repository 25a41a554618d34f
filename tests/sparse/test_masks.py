"""The masking engine: in-place masking of gradients, weights and optimizer state."""

from __future__ import annotations

import pytest
import torch

from dstbench.optim import build_optimizer
from dstbench.sparse.masks import MaskSet
from dstbench.vit import prunable_weights
from tests.conftest import ADAMW, SGD, micro_vit


def _engine(optimizer_spec: dict, mask_dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, torch.optim.Optimizer, MaskSet]:
    model = micro_vit()
    optimizer = build_optimizer(optimizer_spec, model)
    engine = MaskSet(prunable_weights(model), optimizer, mask_dtype=mask_dtype)
    allotment = {name: w.numel() // 4 for name, w in engine.weights.items()}
    engine.init_random(allotment, torch.Generator().manual_seed(0))
    return model, optimizer, engine


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.randn(4, 3, 32, 32)).logsumexp(-1).mean().backward()


def test_init_random_allots_exact_counts_and_zeroes_the_rest() -> None:
    _, _, engine = _engine(ADAMW)
    for name, mask in engine.bool_masks().items():
        assert int(mask.sum()) == engine.weights[name].numel() // 4 == engine.counts[name]
        assert torch.all(engine.weights[name][~mask] == 0)
        assert torch.all(engine.weights[name][mask] != 0)


def test_cpu_masks_are_kept_in_the_weight_dtype() -> None:
    # A bool mask would make every in-place multiply on the CPU allocate a converted copy.
    _, _, engine = _engine(ADAMW)
    assert all(m.dtype == torch.float32 for m in engine.buffers().values())


@pytest.mark.parametrize("mask_dtype", [None, torch.bool])
def test_gradients_are_masked_in_place(mask_dtype: torch.dtype | None) -> None:
    model, optimizer, engine = _engine(ADAMW, mask_dtype)
    _step(model, optimizer)
    pointers = {name: w.grad.data_ptr() for name, w in engine.weights.items()}
    assert any(torch.any(w.grad[~engine.active(n)] != 0) for n, w in engine.weights.items())
    engine.mask_grads()
    for name, weight in engine.weights.items():
        assert weight.grad.data_ptr() == pointers[name]
        assert torch.all(weight.grad[~engine.active(name)] == 0)
        assert torch.any(weight.grad[engine.active(name)] != 0)


@pytest.mark.parametrize("spec,keys", [(ADAMW, ("exp_avg", "exp_avg_sq")), (SGD, ("momentum_buffer",))])
def test_weights_and_optimizer_state_are_masked_in_place(spec: dict, keys: tuple[str, ...]) -> None:
    model, optimizer, engine = _engine(spec)
    _step(model, optimizer)
    optimizer.step()  # unmasked gradient: masked weights and their state become nonzero
    name, weight = next(iter(engine.weights.items()))
    state = optimizer.state[weight]
    assert all(torch.any(state[key][~engine.active(name)] != 0) for key in keys)
    pointers = {key: state[key].data_ptr() for key in keys}
    weight_pointer = weight.data_ptr()
    engine.mask_weights()
    engine.mask_state()
    for name, weight in engine.weights.items():
        mask = engine.active(name)
        assert torch.all(weight[~mask] == 0) and torch.all(weight[mask] != 0)
        for key in keys:
            assert torch.all(optimizer.state[weight][key][~mask] == 0)
    weight = next(iter(engine.weights.values()))
    assert weight.data_ptr() == weight_pointer
    assert all(optimizer.state[weight][key].data_ptr() == pointers[key] for key in keys)


def test_set_mask_zeroes_grown_and_pruned_weights_and_state_and_keeps_the_rest() -> None:
    model, optimizer, engine = _engine(ADAMW)
    _step(model, optimizer)
    optimizer.step()
    name, weight = next(iter(engine.weights.items()))
    old = engine.active(name)
    new = old.clone().flatten()
    on, off = torch.nonzero(~new).flatten()[:5], torch.nonzero(new).flatten()[:5]
    new[on], new[off] = True, False
    new = new.view_as(old)
    weight.data.add_(1.0)  # make every position nonzero, so zeroing is visible
    kept_values = weight[old & new].clone()
    engine.set_mask(name, new)
    changed = old ^ new
    assert torch.all(weight[changed] == 0)
    assert torch.equal(weight[old & new], kept_values)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.all(optimizer.state[weight][key][changed] == 0)
    assert engine.counts[name] == int(old.sum())
    assert torch.equal(engine.active(name), new)


def test_state_dict_round_trip() -> None:
    _, _, engine = _engine(SGD)
    saved = engine.state_dict()
    assert all(m.dtype == torch.bool for m in saved.values())
    _, _, other = _engine(SGD)
    other.init_random({n: 1 for n in other.weights}, torch.Generator().manual_seed(5))
    other.load_state_dict(saved)
    assert all(torch.equal(other.active(n), saved[n]) for n in saved)
    assert other.counts == engine.counts
