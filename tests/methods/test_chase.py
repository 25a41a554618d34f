"""Chase: channel removal on its cubic schedule with floors, global prune/grow, soft budget."""

from __future__ import annotations

import pytest
import torch

from dstbench.methods import method_info
from dstbench.dst.masked.channels import cubic_sparsity
from dstbench.dst.masked.distributions import target_active
from dstbench.dst.update_schedule import round_half_up
from tests.conftest import ADAMW, micro_batches
from tests.dst.masked.helpers import micro_method

SLOW_SGD = {"name": "sgd", "lr": 1e-4, "momentum": 0.9}


def test_defaults_follow_the_reference() -> None:
    params = method_info("chase").cls.Params()
    assert (params.delta_t, params.t_end, params.distribution) == (100, 0.75, "erk")
    assert (params.death_rate, params.channel_sparsity, params.channel_floor) == (0.05, 0.5, 0.2)


def test_channel_sparsity_follows_the_cubic_schedule_and_respects_floors() -> None:
    method = micro_method("chase", ADAMW, density=0.2)
    batches = micro_batches()
    for step in range(1, 13):
        method.train_segment(batches, 1)
        if not method.update_due(step):
            continue
        target = cubic_sparsity(step, 0.5, 9)  # T: the last update (steps 3, 6, 9)
        assert target > 0
        assert method.channels.sparsity("ffn") == pytest.approx(1 - round((1 - target) * 512) / 512)
        assert method.channels.sparsity("head") == pytest.approx(1 - round((1 - target) * 8) / 8)
        for group in method.channels.groups:
            assert int(group.keep.sum()) >= group.floor
    assert method.result_extras()["channel_sparsity"]["ffn"] > 0.45


def test_a_weak_block_is_cut_to_its_floor_and_the_rest_comes_from_the_others() -> None:
    method = micro_method("chase", SLOW_SGD, density=0.2, channel_floor=0.5)
    with torch.no_grad():
        method.model.blocks[0].mlp.fc1.weight.mul_(1e-3)  # every unit of block 0 scores lowest
    method.train_segment(micro_batches(), 12)
    ffn = [g for g in method.channels.groups if g.kind == "ffn"]
    floor = int(256 * 0.5 * 0.5)
    assert [g.floor for g in ffn] == [floor, floor]
    removed = 512 - round((1 - cubic_sparsity(9, 0.5, 9)) * 512)
    assert int(ffn[0].keep.sum()) == floor
    assert int(ffn[1].keep.sum()) == 256 - (removed - (256 - floor))


def test_removed_channels_are_masked_rows_and_columns_and_never_regrown() -> None:
    method = micro_method("chase", ADAMW, density=0.2)
    method.train_segment(micro_batches(), 12)
    masks = method.masks()
    params = dict(method.model.named_parameters())
    for group in method.channels.groups:
        dead = ~group.keep
        assert dead.any()
        rows, cols = ~group.row_keep(), ~group.column_keep()
        assert not masks[group.producer][rows].any() and not masks[group.consumer][:, cols].any()
        assert torch.all(params[group.producer][rows] == 0) and torch.all(params[group.consumer][:, cols] == 0)
        assert torch.all(params[group.producer_bias][rows] == 0)


@pytest.mark.parametrize("death_rate", [0.05, 0.0])
def test_budget_after_every_update(death_rate: float) -> None:
    method = micro_method("chase", ADAMW, density=0.2, death_rate=death_rate)
    total = sum(w.numel() for w in method.prunable().values())
    batches = micro_batches()
    for step in range(1, 13):
        method.train_segment(batches, 1)
        if method.update_due(step):
            extra = 0.0 if step == 9 else death_rate * (1 + torch.cos(torch.tensor(torch.pi * step / 11)).item()) / 2
            soft = target_active(total, 0.2 + extra)  # the last update (step 9) ends on the hard budget
            assert sum(int(m.sum()) for m in method.masks().values()) == soft
    if death_rate == 0.0:
        assert method.density() == target_active(total, 0.2) / total


def test_grows_by_global_dense_gradient_inside_live_channels() -> None:
    method = micro_method("chase", ADAMW, density=0.2)
    batches = micro_batches()
    method.train_segment(batches, 5)
    seen = {}
    update = method.update_topology

    def spy(step: int) -> None:
        seen.update(grads={n: w.grad.clone() for n, w in method.mask_set.weights.items()}, before=method.masks())
        update(step)

    method.update_topology = spy  # type: ignore[method-assign]
    method.train_segment(batches, 1)
    after, before, grads = method.masks(), seen["before"], seen["grads"]
    live = method.channels.live_masks()
    assert any(torch.any(grads[n][~before[n]] != 0) for n in grads), "the update saw a masked gradient"
    grown_min = min(grads[n][after[n] & ~before[n]].abs().min() for n in after if (after[n] & ~before[n]).any())
    passed_over = max(grads[n][~after[n] & live[n].expand_as(after[n])].abs().max() for n in after)
    assert grown_min >= passed_over


def test_channel_sparsity_is_capped_so_the_soft_budget_fits() -> None:
    assert micro_method("chase", ADAMW, density=0.1).channel_sparsity == 0.5
    assert micro_method("chase", ADAMW, density=0.5).channel_sparsity == pytest.approx(0.45)


def _cnn_chase(name: str, removals: list | None = None, **params: object):  # type: ignore[no-untyped-def]
    """Chase on a timm CNN after 24 SGD steps; `removals` (if given) receives, for every channel
    removal, its step and each group's (UMM scores it used, keep before, keep after)."""
    import dstbench
    from dstbench.models.timm_models import create_model

    torch.manual_seed(0)
    params = {"delta_t": 3, "t_end": 20, "channel_sparsity": 0.5, **params}
    method = dstbench.create_method("chase", create_model(name, num_classes=7), density=0.1, total_steps=24,
                                    optimizer={"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.0}, **params)
    if removals is not None:
        remove = method.channels.remove

        def recorded(step: int, weights, generator):  # type: ignore[no-untyped-def]
            before = {g.producer: (g.umm(weights[g.producer]), g.keep.clone()) for g in method.channels.groups}
            removed = remove(step, weights, generator)
            removals.append((step, {g.producer: (*before[g.producer], g.keep.clone()) for g in method.channels.groups}))
            return removed

        method.channels.remove = recorded
    batches = [(torch.randn(4, 3, 32, 32), torch.randint(0, 7, (4,))) for _ in range(24)]
    method.train_segment(batches, 24)
    return method


def test_a_resnets_inner_channels_go_with_their_batch_norm_and_the_residual_stream_stays() -> None:
    removals: list[tuple[int, dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]] = []
    method = _cnn_chase("resnet18", removals=removals)
    groups = {g.producer: g for g in method.channels.groups}
    # Each basic block's conv1 -> bn1 -> conv2 channel; a block's conv2 feeds the residual sum: never a producer.
    assert set(groups) == {f"layer{s}.{b}.conv1.weight" for s in (1, 2, 3, 4) for b in (0, 1)}
    assert method.channels.sparsity("channel") == pytest.approx(0.5, abs=0.01)
    assert abs(method.density() - 0.1) <= 0.01
    params, masks = dict(method.model.named_parameters()), method.masks()
    outputs: dict[str, torch.Tensor] = {}
    hooks = [method.model.get_submodule(g.norm[0].rsplit(".", 1)[0]).register_forward_hook(
        lambda module, args, out, key=g.producer: outputs.__setitem__(key, out.detach())) for g in groups.values()]
    method.model(torch.randn(2, 3, 32, 32))
    for hook in hooks:
        hook.remove()
    # One threshold over every block's channels, checked on the scores each update used (how many
    # blocks lose a channel depends on the trajectory, which another CPU's rounding changes).
    assert any(bool((before & ~after).any()) for _, call in removals for _, before, after in call.values())
    for step, call in removals:
        _assert_one_threshold_under_floors(method.channels, step, call)
    for name, group in groups.items():
        dead = ~group.keep
        # Shapes agree along the group, and a dead channel is zero in every layer of it: the conv's
        # rows (weights and mask), its batch norm, the next conv's columns, and the norm's output.
        assert params[group.producer].shape[0] == params[group.consumer].shape[1] == len(group.keep)
        assert not params[group.producer][dead].any() and not masks[group.producer][dead].any()
        assert not params[group.consumer][:, dead].any() and not masks[group.consumer][:, dead].any()
        assert all(not params[n][dead].any() for n in group.norm) and len(group.norm) == 2
        assert not outputs[name][:, dead].any()
        assert params[group.producer][~dead].any()
    assert method.result_extras()["channel_sparsity"] == {"channel": method.channels.sparsity("channel")}


def test_a_bottleneck_has_two_inner_channels_and_a_convnext_its_mlp() -> None:
    from dstbench.dst.masked.channels import channel_pairs
    from dstbench.models.timm_models import create_model

    pairs = {(kind, prefix + producer, prefix + consumer, norm) for kind, prefix, producer, consumer, norm, _ in
             channel_pairs(create_model("resnet50", device="meta"))}
    assert ("channel", "layer1.0.conv1", "layer1.0.conv2", "bn1") in pairs and ("channel", "layer1.0.conv2", "layer1.0.conv3", "bn2") in pairs
    assert not any(producer.endswith("conv3") for _, producer, _, _ in pairs)  # feeds the residual sum
    method = _cnn_chase("convnext_atto")
    assert {g.kind for g in method.channels.groups} == {"ffn"} and method.channels.groups[0].dims == 4
    masks = method.masks()
    for group in method.channels.groups:
        dead = ~group.keep
        assert not masks[group.producer][dead].any() and not masks[group.consumer][:, dead].any()


def _assert_one_threshold_under_floors(channels, step: int, call: dict) -> None:  # type: ignore[no-untyped-def]
    """What Chase's removal guarantees, whatever the trajectory: removed channels never return; the
    update removes as many as its cubic target asks (floors permitting); every removed channel scores
    no higher than any channel its block kept, and no higher than any channel of a block left above
    its floor (one global threshold)."""
    floors = {g.producer: g.floor for g in channels.groups}
    for kind in {g.kind for g in channels.groups}:
        names = [g.producer for g in channels.groups if g.kind == kind]
        total = sum(len(call[n][1]) for n in names)
        live = sum(int(call[n][1].sum()) for n in names)
        capacity = sum(max(0, int(call[n][1].sum()) - floors[n]) for n in names)
        asked = max(0, live - round_half_up((1.0 - channels.target(step)) * total))
        removed = {n: call[n][1] & ~call[n][2] for n in names}
        assert not any(bool((call[n][2] & ~call[n][1]).any()) for n in names), "a removed channel came back"
        assert sum(int(r.sum()) for r in removed.values()) == min(asked, capacity)
        removed_scores = [call[n][0][removed[n]] for n in names if removed[n].any()]
        if not removed_scores:
            continue
        threshold = torch.cat(removed_scores).max()
        for n in names:
            scores, _, after = call[n]
            assert int(after.sum()) >= floors[n]
            if removed[n].any():
                assert scores[removed[n]].max() <= scores[after].min()
            if int(after.sum()) > floors[n]:
                assert threshold <= scores[after].min(), f"{n} kept a channel scoring under the global threshold"
