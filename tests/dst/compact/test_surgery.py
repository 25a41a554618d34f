"""Tensor surgery on its own: a two-layer MLP whose hidden channels are the units, and timm-style
attention heads; the optimizer-state rule against a replayed always-wide history."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dstbench.dst.compact.surgery import NEW, UnitAxis, blank_units, gather_units, remap_optimizer, resize_units, unit_shape
from dstbench.dst.compact.compact_vit import CompactAttention


class TwoLayer(nn.Module):
    def __init__(self, hidden: int = 5) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, hidden), nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))

    def unit_axes(self) -> list[UnitAxis]:
        return [UnitAxis(self.fc1, "weight", 0, "in"), UnitAxis(self.fc1, "bias", 0, "in"), UnitAxis(self.fc2, "weight", 1, "out")]


class Heads(nn.Module):
    """A tiny attention layer (4 heads of size 2) with its own head axes."""

    def __init__(self) -> None:
        super().__init__()
        from timm.models.vision_transformer import Attention

        self.attn = CompactAttention(Attention(8, num_heads=4, qkv_bias=True), 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x)

    def unit_axes(self) -> list[UnitAxis]:
        return self.attn.unit_axes()


def _data(model: nn.Module, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if isinstance(model, Heads):
        return torch.randn(3, 5, 8, generator=g), torch.randn(3, 5, 8, generator=g)
    return torch.randn(16, 6, generator=g), torch.randn(16, 4, generator=g)


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.mse_loss(model(batch[0]), batch[1])


def test_gather_units_reads_the_grouped_layout() -> None:
    # 3 groups x 2 units x 2 rows: unit 1 owns rows 2-3, 6-7 and 10-11.
    weight = nn.Parameter(torch.arange(12.0).view(12, 1))
    axis = UnitAxis(nn.Module(), "weight", 0, "in", groups=3, unit_size=2)
    picked = gather_units(weight.detach(), axis, torch.tensor([1, 1, 0]), torch.tensor([1.0, 2.0, 3.0]))
    expected = [2, 3, 4, 6, 0, 3, 6, 7, 12, 14, 12, 15, 10, 11, 20, 22, 24, 27]
    assert picked.flatten().tolist() == expected


def test_removing_units_equals_zeroing_them() -> None:
    torch.manual_seed(0)
    model = TwoLayer()
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for unit in (1, 3):
            zeroed.fc1.weight[unit] = 0
            zeroed.fc1.bias[unit] = 0
            zeroed.fc2.weight[:, unit] = 0
    resize_units(model.unit_axes(), [4, 0, 2])
    assert (model.fc1.in_features, model.fc1.out_features, model.fc2.in_features) == (6, 3, 3)
    x, _ = _data(model)
    torch.testing.assert_close(model(x), zeroed(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("make", [TwoLayer, Heads])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_clone_preserves_the_function(make: type, noise: float) -> None:
    torch.manual_seed(1)
    model = make()
    x, _ = _data(model)
    before = model(x).detach()
    resize_units(model.unit_axes(), _clone_sources(model), noise=noise, generator=torch.Generator().manual_seed(0))
    assert (model(x) - before).abs().max() <= 1e-5


def test_clone_noise_changes_the_split_but_not_the_sum() -> None:
    torch.manual_seed(2)
    model = TwoLayer()
    column = model.fc2.weight[:, 1].detach().clone()
    resize_units(model.unit_axes(), [1, 1], noise=0.3, generator=torch.Generator().manual_seed(0))
    a, b = model.fc2.weight[:, 0].detach(), model.fc2.weight[:, 1].detach()
    assert not torch.allclose(a, b)  # symmetry broken
    torch.testing.assert_close(a + b, column)
    torch.testing.assert_close(model.fc1.weight[0], model.fc1.weight[1])  # incoming copied as is


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
}


def _clone_sources(model: nn.Module) -> list[int]:
    """Every unit kept (reordered), unit 0 in three copies, unit 2 in two."""
    units = model.unit_axes()[0].units()
    return [2, 0, 3, 1, *range(4, units), 0, 2, 0]


@pytest.mark.parametrize("make", [TwoLayer, Heads])
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_remapped_state_is_the_always_wide_state(make: type, opt_name: str) -> None:
    """Train the narrow model; at every step also evaluate the widened copy at the same point and
    feed its gradients to a second optimizer. The remapped narrow state must equal that state."""
    torch.manual_seed(3)
    narrow = make()
    factory = OPTIMIZERS[opt_name]
    opt = factory(narrow.parameters())
    wide_shadow = copy.deepcopy(narrow)
    resize_units(wide_shadow.unit_axes(), _clone_sources(narrow))
    shadow_opt = factory(wide_shadow.parameters())
    for step in range(4):
        batch = _data(narrow, seed=step)
        wide = copy.deepcopy(narrow)
        resize_units(wide.unit_axes(), _clone_sources(narrow))
        _loss(wide, batch).backward()
        for shadow, current in zip(wide_shadow.parameters(), wide.parameters()):
            shadow.data.copy_(current.data)
            shadow.grad = current.grad
        shadow_opt.step()
        _loss(narrow, batch).backward()
        opt.step()
        opt.zero_grad()
    remap_optimizer(opt, resize_units(narrow.unit_axes(), _clone_sources(narrow)))
    for mine, theirs in zip(narrow.parameters(), wide_shadow.parameters()):
        state, expected = opt.state[mine], shadow_opt.state[theirs]
        assert state.keys() == expected.keys()
        for key in state:
            # atol relative to the tensor: a key bias has an exactly-zero true gradient (softmax
            # ignores a shift shared by all keys), so its state is rounding noise on both sides.
            atol = 1e-5 * float(expected[key].abs().max()) + 1e-12
            torch.testing.assert_close(state[key], expected[key], rtol=1e-4, atol=atol, msg=key)


def test_remap_swaps_in_place_and_leaves_nothing_stale() -> None:
    torch.manual_seed(4)
    model = TwoLayer()
    opt = torch.optim.AdamW([
        {"params": [model.fc1.weight, model.fc2.weight], "weight_decay": 0.1},
        {"params": [model.fc1.bias, model.fc2.bias], "weight_decay": 0.0},
    ])
    _loss(model, _data(model)).backward()
    opt.step()
    untouched_state = opt.state[model.fc2.bias]["exp_avg"]
    old = [weakref.ref(p) for p in (model.fc1.weight, model.fc1.bias, model.fc2.weight)]
    remap_optimizer(opt, resize_units(model.unit_axes(), [3, 3, 1]))
    assert opt.param_groups[0]["params"][0] is model.fc1.weight
    assert opt.param_groups[0]["params"][1] is model.fc2.weight
    assert opt.param_groups[1]["params"][0] is model.fc1.bias
    assert opt.param_groups[0]["weight_decay"] == 0.1
    live = {id(p) for p in model.parameters()}
    assert {id(p) for p in opt.state} <= live and len(opt.state) == 4
    for p in model.parameters():
        for key in ("exp_avg", "exp_avg_sq"):
            assert opt.state[p][key].shape == p.shape
        assert float(opt.state[p]["step"]) == 1.0
    assert opt.state[model.fc2.bias]["exp_avg"] is untouched_state
    gc.collect()
    assert all(ref() is None for ref in old)  # no stale Parameter survives anywhere
    _loss(model, _data(model)).backward()
    opt.step()  # and the optimizer keeps working on the new shapes


def test_blank_units_drop_state_and_keep_positions() -> None:
    model = TwoLayer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _loss(model, _data(model)).backward()
    opt.step()
    remap_optimizer(opt, blank_units(model.unit_axes(), 7))
    assert model.fc1.weight.shape == (7, 6) and model.fc2.weight.shape == (4, 7)
    assert float(model.fc1.weight.detach().abs().sum()) == 0.0
    assert opt.param_groups[0]["params"][0] is model.fc1.weight
    assert model.fc1.weight not in opt.state and model.fc2.bias in opt.state


def test_unknown_state_and_bad_sources_are_refused() -> None:
    model = TwoLayer()
    opt = torch.optim.Adagrad(model.parameters())
    _loss(model, _data(model)).backward()
    opt.step()
    with pytest.raises(ValueError, match="no remap rule"):
        remap_optimizer(opt, resize_units(model.unit_axes(), [0, 1]))
    with pytest.raises(ValueError, match="must lie in"):
        resize_units(model.unit_axes(), [0, 9])


@pytest.mark.parametrize("make", [TwoLayer, Heads])
def test_new_units_preserve_the_function_and_start_with_zero_state(make: type) -> None:
    """NEW sources: the given producing values, zero consuming slices (same function), zero state;
    survivors and clones next to them keep their values and state rules."""
    torch.manual_seed(5)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    _loss(model, _data(model)).backward()
    opt.step()
    x, _ = _data(model, seed=1)
    before = model(x).detach()
    axes = model.unit_axes()
    kept_in = gather_units(axes[0].param.detach(), axes[0], torch.tensor([1]))
    values = [torch.full(unit_shape(a.param, a, 2), 0.5) if a.role == "in" else None for a in axes]
    n = axes[0].units()
    sources = [1, NEW, 0, *range(2, n), 0, NEW]
    fresh_at = torch.tensor([1, n + 2])
    remap_optimizer(opt, resize_units(model.unit_axes(), sources, noise=0.2, generator=torch.Generator().manual_seed(0), new_values=values))
    assert (model(x) - before).abs().max() <= 1e-5
    for axis in model.unit_axes():
        units = axis.param.detach().reshape(unit_shape(axis.param, axis, n + 3))
        fresh = units.index_select(axis.axis + 1, fresh_at)
        assert bool((fresh == (0.5 if axis.role == "in" else 0.0)).all()), axis.name
        state = opt.state[axis.param]
        for key in ("exp_avg", "exp_avg_sq"):
            rows = state[key].reshape(unit_shape(axis.param, axis, n + 3)).index_select(axis.axis + 1, fresh_at)
            assert float(rows.abs().max()) == 0.0 and float(state[key].abs().max()) > 0.0
    torch.testing.assert_close(gather_units(model.unit_axes()[0].param.detach(), axes[0], torch.tensor([0])), kept_in)


def test_new_units_can_fill_an_empty_layer() -> None:
    model = TwoLayer()
    resize_units(model.unit_axes(), [])
    assert model.fc1.out_features == 0
    x, _ = _data(model)
    before = model(x).detach()
    resize_units(model.unit_axes(), [NEW, NEW], new_values=[torch.ones(1, 2, 1, 6), torch.ones(1, 2, 1), None])
    assert model.fc1.weight.shape == (2, 6) and float(model.fc2.weight.detach().abs().sum()) == 0.0
    torch.testing.assert_close(model(x), before)
    with pytest.raises(ValueError, match="new values of weight"):
        resize_units(model.unit_axes(), [0, NEW], new_values=[torch.ones(1, 2, 1, 6), None, None])
