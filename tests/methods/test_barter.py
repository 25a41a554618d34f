"""BARTER as a method: exact budgets, live objects, a remapped step equal to the masked full-size
step, checkpoints of a compact model, mixed precision, and learning on real (digits) data."""

from __future__ import annotations

import gc
import io
import json
import weakref
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import dstbench
from dstbench.dst.compact.compact_vit import compact_blocks, full_state_dict, scatter_units, unit_activation_bias
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.update_schedule import UpdateSchedule, carried_count
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit


def _barter(seed: int = 0, density: float = 0.3, optimizer: dict | None = None, **params: Any) -> dstbench.Method:
    params = {"delta_t": 2, "drop_fraction": 0.5, **params}
    return dstbench.create_method(
        "barter", micro_vit(seed), density=density, total_steps=40, optimizer=optimizer or ADAMW, **params
    )


def _check_live_objects(method: dstbench.Method) -> None:
    """Optimizer params are exactly the model's; state only for live params, at their shapes."""
    params = list(method.model.parameters())
    grouped = [p for group in method.optimizer.param_groups for p in group["params"]]
    assert len(grouped) == len(params) and {id(p) for p in grouped} == {id(p) for p in params}
    for param, state in method.optimizer.state.items():
        assert any(param is p for p in params)
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step":
                assert value.shape == param.shape, key


def test_registered_as_compact_and_sized_at_construction() -> None:
    assert "barter" in dstbench.list_methods() and dstbench.method_info("barter").kind == "compact"
    method = _barter(density=0.3)  # 8 heads -> 2; the channels bring the weights closest to 0.3: 166
    assert method.topology() == [{"heads": 1, "hidden": 83}, {"heads": 1, "hidden": 83}]
    assert method.budgets() == {"heads": 2, "hidden": 166}
    full = 2 * (4 * 64 * 64 + 2 * 64 * 256)
    assert method.density() == pytest.approx((2 * 4 * 64 * 16 + 166 * 2 * 64) / full)
    assert set(method.method_buffers()) == {"head_importance", "channel_importance"}
    with pytest.raises(TypeError):
        _barter(bogus=1)


def test_budgets_exact_and_nothing_stale_after_every_update() -> None:
    method = _barter(density=0.4, delta_t=1, t_end=1.0, drop_fraction=0.6)
    budgets = method.budgets()
    caps = [(b.attn.max_heads, b.mlp.max_hidden) for b in compact_blocks(method.model)]
    batches = micro_batches()
    for step in range(12):
        before = [weakref.ref(p) for p in method.model.parameters()]
        stats = method.train_segment(batches, 1)
        assert stats.topology_updates == 1
        topo = method.topology()
        assert sum(t["heads"] for t in topo) == budgets["heads"]
        assert sum(t["hidden"] for t in topo) == budgets["hidden"]
        for t, (max_heads, max_hidden), b in zip(topo, caps, compact_blocks(method.model)):
            assert 0 <= t["heads"] <= max_heads and 0 <= t["hidden"] <= max_hidden
            assert sorted(set(b.attn.slots)) == sorted(b.attn.slots) and len(b.mlp.slots) == t["hidden"]
        _check_live_objects(method)
        gc.collect()
        live = {id(p) for p in method.model.parameters()}
        assert all(ref() is None or id(ref()) in live for ref in before)  # replaced ones are gone
    history = method.result_extras()["topology_history"]
    assert [h["step"] for h in history] == list(range(13))
    assert sum(h.get("cloned_hidden", 0) for h in history) > 0 and sum(h.get("cloned_heads", 0) for h in history) > 0
    json.dumps(method.result_extras())
    assert {"scoring", "prune_grow", "resize", "state_remap"} <= set(method.topology_detail_ms)
    assert method.topology_updates == 12


def test_exchange_size_follows_the_cosine_schedule() -> None:
    """Each update exchanges fraction x budget plus the remainder carried from the updates before,
    rounded down: 4 heads at fractions 0.26, 0.15, 0.04 ask 1.02, 0.60, 0.18 and get 1, 0, 0."""
    method = _barter(density=0.5, delta_t=3, t_end=12, drop_fraction=0.3)
    method.train_segment(micro_batches(), 12)
    assert [h["step"] for h in method.history] == [0, 3, 6, 9]  # t_end (step 12) is exclusive
    for kind, budget in method.budgets().items():
        carried, asked_total, pruned_total = 0.0, 0.0, 0
        for entry in method.history[1:]:
            asked = method.schedule.fraction(entry["step"]) * budget
            k, carried = carried_count(asked, carried)
            record = entry["exchange"][kind]
            assert record["asked"] == pytest.approx(asked) and record["pruned"] == k
            asked_total, pruned_total = asked_total + asked, pruned_total + record["pruned"]
        assert asked_total - 1 < pruned_total <= asked_total
    assert [entry["exchange"]["heads"]["pruned"] for entry in method.history[1:]] == [1, 0, 0]
    assert method.carried["heads"] == pytest.approx(0.8)


def test_a_carried_remainder_keeps_the_exchanges_to_what_the_schedule_asked() -> None:
    schedule = UpdateSchedule(delta_t=10, t_end=0.75, drop_fraction=0.3, total_steps=1000)
    for units in (1, 2, 3, 7, 166):
        carried, asked, exchanged = 0.0, 0.0, 0
        for step in schedule.update_steps():
            k, carried = carried_count(schedule.fraction(step) * units, carried)
            asked, exchanged = asked + schedule.fraction(step) * units, exchanged + k
            assert 0.0 <= carried < 1.0
        assert asked - 1 < exchanged <= asked + 1e-9, units
    # 2 heads at a fraction of 0.3: 0.6 asked each time, a head at 6 of 10 updates (rounding each
    # alone would move one at all 10, truncating at none).
    counts, carried = [], 0.0
    for _ in range(10):
        k, carried = carried_count(0.6, carried)
        counts.append(k)
    assert counts == [0, 1, 0, 1, 1, 0, 1, 0, 1, 1]


def _full_twin(method: dstbench.Method, seed: int, spec: dict) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict]:
    """The full-size model holding the compact units at their slots, and an optimizer of the same
    spec whose state is the compact state written at the same places (zero elsewhere)."""
    compact = method.model
    full = micro_vit(seed)
    full.load_state_dict(full_state_dict(compact))
    expand: dict[str, Any] = {}
    for i, block in enumerate(compact_blocks(compact)):
        for part, module, units in (("attn", block.attn, block.attn.max_heads), ("mlp", block.mlp, block.mlp.max_hidden)):
            names = {id(m): n for n, m in module.named_children()}
            for axis in module.unit_axes():
                key = f"blocks.{i}.{part}.{names[id(axis.module)]}.{axis.name}"
                expand[key] = lambda t, axis=axis, module=module, units=units: scatter_units(t, axis, module.slots, units)
    optimizer = build_optimizer(spec, full)
    full_params = dict(full.named_parameters())
    for name, param in compact.named_parameters():
        state = method.optimizer.state.get(param)
        if state:
            grow = expand.get(name, lambda t: t.clone())
            optimizer.state[full_params[name]] = {
                k: (grow(v) if k != "step" else v.clone()) if isinstance(v, torch.Tensor) else v for k, v in state.items()
            }
    return full, optimizer, expand


@pytest.mark.parametrize("spec", [SGD, ADAMW], ids=["sgd_momentum", "adamw"])
def test_step_after_remap_equals_the_masked_full_step(spec: dict) -> None:
    method = _barter(seed=5, density=0.3, optimizer=spec, delta_t=2, t_end=4, drop_fraction=1.0)
    batches = micro_batches(seed=1)
    method.train_segment(batches, 2)  # the update at step 2 prunes and clones
    assert method.history[-1]["cloned_heads"] > 0 and method.history[-1]["cloned_hidden"] > 0
    full, optimizer, expand = _full_twin(method, 5, spec)
    x, y = next(batches)
    method.train_step(x, y)  # step 3: no update
    F.cross_entropy(full(x), y).backward()
    compact_params = dict(method.model.named_parameters())
    for name, param in full.named_parameters():
        mine = compact_params[name]
        if name in expand:  # mask: inactive units get no gradient (it is exactly zero anyway)
            mask = expand[name](torch.ones_like(mine))
            assert float((param.grad * (1 - mask)).abs().max()) == 0.0
            param.grad.mul_(mask)
    # What the compact model does not use at all (an empty unit kind, the norm in front of it) is
    # masked whole: no gradient, so the optimizer leaves it (and its step count) alone.
    unused = {n for n in compact_params if compact_params[n].numel() == 0 or not _used(method, n)}
    for name in unused:
        full.get_parameter(name).grad = None
    optimizer.step()
    full_params = dict(full.named_parameters())
    for name, mine in method.model.named_parameters():
        grow = expand.get(name, lambda t: t)
        ours, theirs = grow(mine.detach()), full_params[name].detach()
        if name.endswith("qkv.bias"):
            # The key bias has an exactly-zero true gradient (softmax ignores a shift shared by all
            # keys); Adam normalises the rounding noise both sides see into steps of up to lr.
            ours, theirs = ours.view(3, -1).clone(), theirs.view(3, -1).clone()
            torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=2 * spec["lr"], msg=name)
            ours[1] = theirs[1] = 0
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=name)
        for key, value in method.optimizer.state[mine].items():
            theirs = optimizer.state[full_params[name]][key]
            torch.testing.assert_close(grow(value) if key != "step" else value, theirs, rtol=1e-5, atol=1e-7, msg=f"{name} {key}")


def _used(method: dstbench.Method, name: str) -> bool:
    for i, block in enumerate(compact_blocks(method.model)):
        if name.startswith(f"blocks.{i}.norm1.") and block.attn.num_heads == 0:
            return False
        if name.startswith(f"blocks.{i}.norm2.") and block.mlp.hidden == 0:
            return False
    return True


@pytest.mark.parametrize("options", [{}, {"fresh_units": "exempt", "grow": "clone_or_new"}], ids=["default", "exempt_new"])
def test_checkpoint_round_trips_a_compact_model(options: dict) -> None:
    first = _barter(seed=0, density=0.3, **options)
    data = [next(iter(micro_batches(seed=s))) for s in range(9)]
    first.train_segment(iter(data[:5]), 5)  # updates at 2 and 4 reshape the blocks
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = _barter(seed=1, density=0.3, **options)  # other initial weights, the initial shapes
    assert second.topology() != first.topology()
    second.load_state_dict(torch.load(buffer))
    assert second.topology() == first.topology()
    assert all(torch.equal(second.made[k], first.made[k]) for k in first.made)
    assert second.carried == first.carried and any(first.carried.values())  # the remainder goes on, too
    for a, b in zip(first.model.parameters(), second.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    _check_live_objects(second)
    stats = [m.train_segment(iter(data[5:]), 4) for m in (first, second)]  # updates at 6 and 8
    assert stats[0].loss == stats[1].loss and first.topology() == second.topology()
    for a, b in zip(first.model.parameters(), second.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_and_updates(precision: str) -> None:
    method = _barter(density=0.3, precision=precision)
    stats = method.train_segment(micro_batches(), 6)
    assert stats.topology_updates == 3 and torch.isfinite(torch.tensor(stats.loss))
    assert sum(t["hidden"] for t in method.topology()) == method.budgets()["hidden"]
    scores = torch.cat([method.importance.heads, method.importance.channels])
    assert bool(torch.isfinite(scores).all()) and float(scores.min()) >= 0.0
    _check_live_objects(method)


def _units(tensor: torch.Tensor, axis: Any) -> list[torch.Tensor]:
    """The slices of `tensor` that belong to each unit of `axis`, one flat tensor per unit."""
    shape = list(tensor.shape)
    n = axis.units(tensor)
    view = tensor.reshape(shape[: axis.axis] + [axis.groups, n, axis.unit_size] + shape[axis.axis + 1 :])
    return [view.select(axis.axis + 1, u).flatten() for u in range(n)]


def test_update_carries_the_optimizer_state_by_the_clone_rule() -> None:
    """Through the method: survivors keep their state; a unit in k copies gives each copy 1/k of its
    incoming exp_avg, 1/k**2 of exp_avg_sq and all of its outgoing state."""
    method = _barter(seed=6, density=0.3, delta_t=2, t_end=4, drop_fraction=1.0, clone_noise=0.0)
    snapshots: list[list[dict]] = []
    update = method.update_topology

    def recording_update(step: int) -> None:
        snapshots.append(_unit_state(method))
        update(step)

    method.update_topology = recording_update  # type: ignore[method-assign]
    method.train_segment(micro_batches(seed=3), 2)
    assert method.history[-1]["cloned_heads"] > 0 and method.history[-1]["cloned_hidden"] > 0
    before, after = snapshots[0], _unit_state(method)
    extra_copies = 0
    for old_block, new_block in zip(before, after):
        for kind in ("heads", "hidden"):
            old, new = old_block[kind], new_block[kind]
            copies: dict[int, list[int]] = {}
            for j, unit in enumerate(new):  # a copy keeps its source's incoming weights exactly
                source = next(i for i, o in enumerate(old) if torch.equal(o["in"], unit["in"]))
                copies.setdefault(source, []).append(j)
            for source, js in copies.items():
                k, o = len(js), old[source]
                extra_copies += k - 1
                torch.testing.assert_close(sum(new[j]["out"] for j in js), o["out"])
                for j in js:
                    torch.testing.assert_close(new[j]["in_avg"], o["in_avg"] / k, rtol=1e-6, atol=0)
                    torch.testing.assert_close(new[j]["in_sq"], o["in_sq"] / k**2, rtol=1e-6, atol=0)
                    torch.testing.assert_close(new[j]["out_avg"], o["out_avg"], rtol=0, atol=0)
    assert extra_copies == method.history[-1]["cloned_heads"] + method.history[-1]["cloned_hidden"]


def _unit_state(method: dstbench.Method) -> list[dict]:
    state = method.optimizer.state
    out = []
    for block in compact_blocks(method.model):
        entry = {}
        for kind, module in (("heads", block.attn), ("hidden", block.mlp)):
            weight_in, out_axis = module.unit_axes()[0], module.unit_axes()[-1]
            w_in, w_out = weight_in.param.detach(), out_axis.param.detach()
            s_in, s_out = state[weight_in.param], state[out_axis.param]
            entry[kind] = [
                {"in": a, "out": b, "in_avg": c, "in_sq": d, "out_avg": e}
                for a, b, c, d, e in zip(
                    _units(w_in, weight_in), _units(w_out, out_axis), _units(s_in["exp_avg"], weight_in),
                    _units(s_in["exp_avg_sq"], weight_in), _units(s_out["exp_avg"], out_axis),
                )
            ]
        out.append(entry)
    return out


def test_keeps_learning_digits_across_updates() -> None:
    """scikit-learn's offline 8x8 digits: a micro ViT at density 0.5 learns through five updates,
    and no update costs more held-out loss than the interval before it gained."""
    from sklearn.datasets import load_digits

    from dstbench.models.timm_models import create_vit

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    labels = torch.tensor(digits.target)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    images, labels = images[order], labels[order]
    train_x, train_y, test_x, test_y = images[:1400], labels[:1400], images[1400:], labels[1400:]
    torch.manual_seed(0)
    model = create_vit(
        "vit_tiny_patch16_224", img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=64, depth=2, num_heads=4
    )
    method = dstbench.create_method(
        "barter", model, density=0.5, total_steps=200, delta_t=25,
        optimizer={"name": "adamw", "lr": 4e-3, "weight_decay": 0.05},
    )

    def evaluate() -> tuple[float, float]:
        method.model.eval()
        with torch.no_grad():
            logits = method.model(test_x)
        method.model.train()
        return F.cross_entropy(logits, test_y).item(), (logits.argmax(1) == test_y).float().mean().item()

    around_updates: list[tuple[tuple[float, float], tuple[float, float]]] = []
    update = method.update_topology

    def measured_update(step: int) -> None:
        before = evaluate()
        update(step)
        around_updates.append((before, evaluate()))

    method.update_topology = measured_update  # type: ignore[method-assign]

    def batches():
        g = torch.Generator().manual_seed(1)
        while True:
            index = torch.randint(0, len(train_y), (64,), generator=g)
            yield train_x[index], train_y[index]

    start_loss, _ = evaluate()
    method.train_segment(batches(), 200)
    final_loss, final_accuracy = evaluate()
    assert len(around_updates) == 5 and sum(h["cloned_hidden"] for h in method.history[1:]) > 0
    # An update may cost some loss (a head is a quarter of a block's attention here), but it never
    # undoes the interval before it, and the next interval makes it up.
    before = [b for (b, _), _ in around_updates]
    after = [a for _, (a, _) in around_updates]
    for start, loss_after, loss_before, next_before in zip([start_loss] + after[:-1], after, before, before[1:] + [final_loss]):
        assert loss_after < start and next_before < loss_before
    assert final_loss < 0.5 * around_updates[0][1][0]  # learning went on after the updates
    assert final_accuracy > around_updates[-1][1][1] and final_accuracy > 0.6  # chance: 0.1


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_no_host_sync_between_updates_on_cuda() -> None:
    """Only update steps may synchronise with the host (bf16; fp16's GradScaler syncs by itself)."""
    model = micro_vit(0).cuda()
    method = dstbench.create_method(
        "barter", model, density=0.3, total_steps=40, optimizer=ADAMW, precision="bf16", delta_t=4
    )
    x, y = (t.cuda() for t in next(micro_batches()))
    method.train_step(x, y)  # first step: lazy optimizer state and kernels
    for step in range(2, 10):
        mode = "default" if method.update_due(step) else "error"
        torch.cuda.set_sync_debug_mode(mode)
        try:
            method.train_step(x, y)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert method.topology_updates == 2 and next(method.model.parameters()).is_cuda


def test_an_update_with_a_non_finite_score_keeps_the_topology() -> None:
    method = _barter()
    method.train_segment(micro_batches(), 1)  # scores accumulate; the update falls due at step 2
    before = method.topology()
    method.importance.channels[0] = float("nan")  # as a diverged step would leave it
    method.train_segment(micro_batches(), 1)
    assert method.topology() == before and method.updates_skipped == 1
    assert method.history[-1] == {**method._snapshot(2), "skipped": True}
    method.train_segment(micro_batches(), 2)  # the scores were reset: the next update runs
    assert method.updates_skipped == 1 and "skipped" not in method.history[-1]


def test_the_update_prunes_the_lowest_and_clones_the_highest_accumulated_scores() -> None:
    """The plan reads the scores accumulated since the last update (not the reset accumulators):
    with block 0's FFN channels scored far below block 1's, block 0 loses channels to block 1."""
    method = _barter()
    method.train_segment(micro_batches(), 1)
    before = method.topology()
    hidden0 = before[0]["hidden"]
    with torch.no_grad():
        method.importance.channels[:hidden0] = 0.0
        method.importance.channels[hidden0:] = 1e3
    method.train_segment(micro_batches(), 1)  # the update at step 2
    after = method.topology()
    assert after[0]["hidden"] < hidden0 and after[1]["hidden"] > before[1]["hidden"]
    assert sum(t["hidden"] for t in after) == sum(t["hidden"] for t in before)


def test_exchange_options_are_checked() -> None:
    with pytest.raises(ValueError, match="fresh_units"):
        _barter(fresh_units="bogus")
    with pytest.raises(ValueError, match="grow"):
        _barter(grow="bogus")


def _rigged_update(method: dstbench.Method, step: int, heads: torch.Tensor, channels: torch.Tensor) -> dict:
    """Run the update at `step` on the given accumulated scores; returns its exchange record."""
    with torch.no_grad():
        method.importance.heads.copy_(heads)
        method.importance.channels.copy_(channels)
        method.update_topology(step)
    return method.history[-1]["exchange"]


@pytest.mark.parametrize("rule", ["split", "rescale", "exempt"])
def test_fresh_units_rule_decides_whether_last_updates_copies_go_first(rule: str) -> None:
    """After an exchange, the copies it made score 1.0 and every other unit 1.5. Split scores prune
    the copies first; scores at their source's scale (2.0) or exemption spare them."""
    method = _barter(density=0.3, delta_t=2, t_end=1.0, drop_fraction=0.2, fresh_units=rule)
    method.train_segment(micro_batches(), 2)
    made = method.made["hidden"]
    first = method.history[-1]["exchange"]["hidden"]
    assert int((made == 2).sum()) == 2 * first["cloned"] > 0 and int((made > 2).sum()) == 0
    record = _rigged_update(method, 4, torch.ones(2), torch.where(made > 0, 1.0, 1.5))["hidden"]
    assert record["population"] == 166 and record["clone_population"] == int((made > 0).sum())
    assert record["pruned"] > 0
    assert record["pruned_clones"] == (record["pruned"] if rule == "split" else 0)


def test_clone_or_new_grows_a_new_head_where_the_output_bias_gradient_is_largest() -> None:
    """Block 1's head scores lowest and goes; no clone has any outgoing gradient, while block 0's
    attention output bias has one: a new head is made in block 0. It has zero outgoing weights and
    state, and its outgoing gradient is exactly the output-bias gradient times its value bias."""
    # 0.6 x 2 heads asks 1.2 (less the schedule's decay by step 2): one head, none carried over 1.
    method = _barter(density=0.3, delta_t=100, t_end=1.0, drop_fraction=0.6, grow="clone_or_new")
    method.train_segment(micro_batches(), 1)  # optimizer state exists; no update yet
    blocks = compact_blocks(method.model)
    for param in method.model.parameters():
        param.grad = torch.zeros_like(param)
    blocks[0].attn.proj.bias.grad.fill_(1.0)
    record = _rigged_update(method, 2, torch.tensor([1.0, 0.0]), torch.ones(166))["heads"]
    assert record.pop("asked") == pytest.approx(method.schedule.fraction(2) * 2)
    assert record == {"pruned": 1, "cloned": 0, "new": 1, "moved": 1, "population": 2, "clone_population": 0, "pruned_clones": 0}
    assert method.topology()[0]["heads"] == 2 and method.topology()[1]["heads"] == 0
    assert method.made["heads"].tolist() == [0, 1]
    attn, state = blocks[0].attn, method.optimizer.state
    qkv_w, qkv_b = attn.qkv.weight.detach().view(3, 2, 16, 64), attn.qkv.bias.detach().view(3, 2, 16)
    assert float(qkv_w[2, 1].abs().max()) == 0.0 and float(qkv_w[0, 1].abs().max()) > 0.0
    value_bias = qkv_b[2, 1]
    torch.testing.assert_close(value_bias.norm(), torch.tensor(1.0))
    assert float(attn.proj.weight.detach()[:, 16:].abs().max()) == 0.0
    for param, rows in ((attn.qkv.weight, lambda t: t.view(3, 2, 16, 64)[:, 1]), (attn.proj.weight, lambda t: t[:, 16:])):
        assert float(rows(state[param]["exp_avg"]).abs().max()) == 0.0
        assert float(rows(state[param]["exp_avg_sq"]).abs().max()) == 0.0
    method.optimizer.zero_grad()
    x, y = next(micro_batches(seed=4))
    F.cross_entropy(method.model(x), y).backward()
    expected = torch.outer(attn.proj.bias.grad, value_bias)
    torch.testing.assert_close(attn.proj.weight.grad[:, 16:], expected, rtol=1e-4, atol=1e-7)


def test_a_new_channels_outgoing_gradient_is_the_output_bias_gradient_to_first_order() -> None:
    method = _barter(density=0.3, delta_t=100, t_end=1.0, drop_fraction=0.5, grow="clone_or_new")
    method.train_segment(micro_batches(), 1)
    blocks = compact_blocks(method.model)
    for param in method.model.parameters():
        param.grad = torch.zeros_like(param)
    blocks[1].mlp.fc2.bias.grad.fill_(1.0)  # block 1's new channel outranks every clone
    channels = torch.ones(166)
    channels[:83] = 0.5  # block 0 loses the exchanged channels
    record = _rigged_update(method, 2, torch.ones(2), channels)["hidden"]
    # Each candidate (a survivor, or a block's new unit) grows one unit per round: block 1's new
    # channel comes first, the rest are clones and new units of score 0 in a seeded order.
    k = int(method.schedule.fraction(2) * 166)  # just under half the budget: block 0 keeps 1 of its 83
    assert record["pruned"] == k and record["new"] >= 1 and record["new"] + record["cloned"] == k
    mlp = blocks[1].mlp
    assert int(method.made["hidden"][method.topology()[0]["hidden"] + 83]) == 1  # flat: block 0, then block 1
    column = mlp.fc2.weight.detach()[:, 83]
    assert float(column.abs().max()) == 0.0
    torch.testing.assert_close(mlp.fc1.bias.detach()[83], torch.tensor(unit_activation_bias(mlp.act)))
    x, y = next(micro_batches(seed=4))
    method.optimizer.zero_grad()
    F.cross_entropy(method.model(x), y).backward()
    grad, bias_grad = mlp.fc2.weight.grad[:, 83], mlp.fc2.bias.grad
    assert float(F.cosine_similarity(grad, bias_grad, dim=0)) > 0.99
    torch.testing.assert_close(grad.norm(), bias_grad.norm(), rtol=0.2, atol=0)
