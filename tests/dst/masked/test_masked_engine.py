"""The public masked engine: importable from `dstbench.dst.masked`, the `initial_mask` hook a
dense-to-sparse or structured method starts from, and `density()` counted from the masks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dstbench
import dstbench.dst.masked as masked
from dstbench.dst.masked import DropGrowParams, GradientGrow, Magnitude, MaskedMethod, NoGrow, drop_and_grow, target_active
from dstbench.dst.masked.masks import random_mask
from tests.conftest import ADAMW, micro_batches, micro_vit
from tests.dst.masked.helpers import assert_zero_where_masked, micro_method, run_steps


class DenseStart(MaskedMethod):
    """A plugin-style method: every weight active at the start, RigL's update afterwards."""

    update_replaces_step = True
    prune = Magnitude()
    grow = GradientGrow()

    def initial_mask(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        self.seen = getattr(self, "seen", []) + [(name, tuple(weight.shape), dict(self.allotment))]
        return torch.ones(weight.shape, dtype=torch.bool)


class WithKnob(DenseStart):
    @dataclasses.dataclass
    class Params(DropGrowParams):
        knob: float = 0.5  # a plugin's own parameter


class WrongShape(MaskedMethod):
    def initial_mask(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        return torch.ones(weight.shape[0], dtype=torch.bool)


def _create(cls: type[MaskedMethod], **params: object) -> MaskedMethod:
    return cls(micro_vit(), density=0.2, total_steps=12, optimizer=ADAMW, **{"delta_t": 3, "t_end": 11, **params})


def test_every_public_name_resolves_and_the_top_level_api_names_the_engine() -> None:
    for name in masked.__all__:
        assert getattr(masked, name) is not None, name
    assert set(masked.__all__) <= set(dir(masked))
    assert dstbench.MaskedMethod is MaskedMethod
    assert masked.UpdateSchedule.__module__ == "dstbench.dst.update_schedule"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        masked.nothing  # noqa: B018


def test_every_hook_and_part_of_the_engine_is_documented() -> None:
    for name in ("build_schedule", "initial_mask", "plan_update", "update_topology", "density", "masks",
                 "takes_dense_grad", "before_forward", "before_optimizer_step", "after_optimizer_step",
                 "gradients_finite", "soft_extra", "soft_budget", "result_extras", "method_buffers"):
        doc = getattr(MaskedMethod, name).__doc__
        assert doc and len(doc.split()) >= 5, f"MaskedMethod.{name} has no real docstring"
    for attribute in ("mask_set", "allotment", "execution", "schedule", "updates_skipped"):
        assert f"`{attribute}`" in MaskedMethod.__doc__, attribute


def test_the_default_initial_mask_is_the_random_draw_every_masked_method_shares() -> None:
    method = micro_method("rigl", ADAMW)
    generator = torch.Generator().manual_seed(0)
    for name, mask in method.masks().items():
        assert torch.equal(mask, random_mask(mask.shape, method.allotment[name], generator))


def test_initial_mask_gives_a_dense_start_without_copying_weights() -> None:
    torch.manual_seed(0)
    model = micro_vit()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    method = DenseStart(model, density=0.2, total_steps=12, optimizer=ADAMW, delta_t=3, t_end=11)
    # Called once per prunable weight, in order, with the allotment already set.
    assert [name for name, _, _ in method.seen] == list(method.prunable())
    assert all(allotment == method.allotment for _, _, allotment in method.seen)
    assert all(bool(mask.all()) for mask in method.masks().values())
    assert method.density() == 1.0
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())  # nothing zeroed
    # The first update replaces its share of every (full) layer: the density stays 1.0 and grown
    # positions are the pruned ones regrown, so masks stay all ones; the engine runs unchanged.
    list(run_steps(method, 4))
    assert method.topology_updates == 1 and method.density() == 1.0


def test_initial_mask_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"initial_mask\('blocks.0.attn.qkv.weight'\) gave a torch.bool mask"):
        _create(WrongShape)


def test_density_counts_the_masks_not_the_nonzero_weights() -> None:
    # Right after a RigL update the grown weights are exactly 0 but active: counting nonzeros would
    # report less than the target (0.071 instead of 0.100 in issue 24's example).
    method = micro_method("rigl", ADAMW, density=0.1)
    total = method.mask_set.numel()
    for step, before, after in run_steps(method, 3):
        pass
    assert method.topology_updates == 1
    grown = sum(int((after[n] & ~before[n]).sum()) for n in after)
    assert grown > 0
    nonzero = sum(int(torch.count_nonzero(w)) for w in method.prunable().values())
    assert nonzero <= target_active(total, 0.1) - grown
    assert method.density() == target_active(total, 0.1) / total
    assert dstbench.Method.density(method) == nonzero / total  # the base's count, for contrast


@pytest.mark.parametrize("execution", ["masked", "csr"])
def test_density_is_the_same_count_for_every_execution(execution: str) -> None:
    method = micro_method("rigl", ADAMW, density=0.1, execution=execution)
    method.train_segment(micro_batches(), 4)
    total = method.mask_set.numel()
    assert method.density() == method.mask_set.total_active() / total == target_active(total, 0.1) / total


def test_no_grow_grows_nothing_and_drop_and_grow_refuses_growth_without_scores() -> None:
    active = torch.tensor([[True, True, False, True]])
    scores = torch.tensor([[3.0, 1.0, 5.0, 2.0]])
    generator = torch.Generator().manual_seed(0)
    assert NoGrow()(scores, None, generator) is None
    assert not NoGrow.needs_dense_grad and not NoGrow.reads_grad
    new = drop_and_grow(active, scores, None, 2, 0, generator)
    assert new.tolist() == [[True, False, False, False]]
    with pytest.raises(ValueError, match="without grow scores"):
        drop_and_grow(active, scores, None, 1, 1, generator)


def test_a_subclass_adds_parameters_to_the_engine_parameters() -> None:
    method = _create(WithKnob, knob=0.25)
    assert method.params.knob == 0.25 and method.params.delta_t == 3
    list(run_steps(method, 3))
    assert_zero_where_masked(method, method.masks())
