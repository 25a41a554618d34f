"""Taylor importance from hooks on the outgoing weights equals |sum a * dL/da| measured on the
activations themselves, costs no saved tensor, and follows the Parameters through a resize."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dstbench.dst.compact.importance import TaylorImportance
from dstbench.dst.compact.surgery import resize_units
from dstbench.dst.compact.compact_vit import compact_blocks, compact_vit
from dstbench.measure.trackers import ActivationCounter
from tests.conftest import micro_vit


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


def _direct_scores(model: torch.nn.Module, batches: list) -> tuple[torch.Tensor, torch.Tensor]:
    """|sum over batch, tokens (and head dims) of a * dL/da|, from the inputs of proj and fc2."""
    blocks = compact_blocks(model)
    heads = [torch.zeros(b.attn.num_heads) for b in blocks]
    channels = [torch.zeros(b.mlp.hidden) for b in blocks]
    for x, y in batches:
        captured = []

        def capture(module, args, store=captured):
            a = args[0]
            a.retain_grad()
            store.append((module, a))

        handles = [b.attn.proj.register_forward_pre_hook(capture) for b in blocks]
        handles += [b.mlp.fc2.register_forward_pre_hook(capture) for b in blocks]
        F.cross_entropy(model(x), y).backward()
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
        for module, a in captured:
            product = (a * a.grad).sum(dim=(0, 1))
            for i, b in enumerate(blocks):
                if module is b.attn.proj:
                    heads[i] += product.view(b.attn.num_heads, -1).sum(1).abs()
                elif module is b.mlp.fc2:
                    channels[i] += product.abs()
    return torch.cat(heads), torch.cat(channels)


def test_scores_equal_the_definition_on_the_activations() -> None:
    model = compact_vit(micro_vit(0), 0.5)
    batches = [_batch(s) for s in range(3)]
    tracker = TaylorImportance(model)
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        tracker.end_step()
        model.zero_grad(set_to_none=True)
    tracker.detach()
    heads, channels = _direct_scores(model, batches)
    assert len(tracker.heads) == 4 and len(tracker.channels) == 256
    assert float(tracker.channels.min()) > 0.0
    torch.testing.assert_close(tracker.heads, heads, rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(tracker.channels, channels, rtol=1e-4, atol=1e-8)


def test_hooks_change_no_gradient_and_keep_no_activation() -> None:
    x, y = _batch(0)
    results = []
    for track in (False, True):
        model = compact_vit(micro_vit(1), 0.5)
        tracker = TaylorImportance(model) if track else None
        counter = ActivationCounter(model)
        with counter:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        results.append((counter.total, [p.grad.clone() for p in model.parameters()]))
        if tracker is not None:
            assert float(tracker.heads.sum()) > 0.0
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_hooks_follow_the_parameters_through_a_resize() -> None:
    model = compact_vit(micro_vit(2), 0.5)
    tracker = TaylorImportance(model)
    b0, b1 = compact_blocks(model)
    old_proj, old_fc2 = b0.attn.proj.weight, b1.mlp.fc2.weight
    resize_units(b0.attn.unit_axes(), [1, 1])  # same head count: the budget holds
    resize_units(b1.mlp.unit_axes(), list(range(100)) + list(range(28)))
    tracker.attach()
    assert not old_proj._post_accumulate_grad_hooks and not old_fc2._post_accumulate_grad_hooks
    x, y = _batch(1)
    F.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    tracker.detach()  # so the reference backward below does not add to it
    direct_heads, direct_channels = _direct_scores(model, [(x, y)])
    torch.testing.assert_close(tracker.heads, direct_heads, rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(tracker.channels, direct_channels, rtol=1e-4, atol=1e-8)
    tracker.reset()
    assert float(tracker.heads.abs().sum() + tracker.channels.abs().sum()) == 0.0
    resize_units(b1.mlp.unit_axes(), list(range(120)))  # a budget change is a bug: refused
    with pytest.raises(RuntimeError, match="budgets"):
        tracker.attach()


def test_loss_scaled_steps_are_unscaled_and_overflowing_steps_dropped() -> None:
    batches = [_batch(s) for s in range(2)]
    plain_model = compact_vit(micro_vit(3), 0.5)
    plain = TaylorImportance(plain_model)
    scaled_model = compact_vit(micro_vit(3), 0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    scaled = TaylorImportance(scaled_model, scaler)
    for x, y in batches:
        F.cross_entropy(plain_model(x), y).backward()
        plain.end_step()
        scaler.scale(F.cross_entropy(scaled_model(x), y)).backward()
        scaled.end_step()
        plain_model.zero_grad(set_to_none=True)
        scaled_model.zero_grad(set_to_none=True)
    torch.testing.assert_close(scaled.heads, plain.heads, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(scaled.channels, plain.channels, rtol=1e-5, atol=1e-9)
    before = scaled.channels.clone()
    x, y = batches[0]
    (scaler.scale(F.cross_entropy(scaled_model(x), y)) * float("inf")).backward()  # an overflow
    scaled.end_step()
    torch.testing.assert_close(scaled.channels, before, rtol=0, atol=0)
