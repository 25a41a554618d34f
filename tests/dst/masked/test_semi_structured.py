"""`execution: semi_structured`: the projection to transposable 2:4 and the layer's autograd on the
CPU (with a dense stand-in for the compression), its refusals, and the real kernels under
`-m cuda` where a GPU with 2:4 support is present."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from dstbench.dst.masked import semi_structured
from dstbench.dst.masked.semi_structured import (
    PATTERNS,
    SemiStructuredLinear,
    SemiStructuredMaskSet,
    is_transposable_2to4,
    project_transposable_2to4,
)
from tests.conftest import ADAMW, micro_batches
from tests.dst.masked.helpers import dense_2to4_stand_in as _dense_stand_in
from tests.dst.masked.helpers import micro_method


def _tiles(t: torch.Tensor) -> list[torch.Tensor]:
    return [t[r : r + 4, c : c + 4] for r in range(0, t.shape[0], 4) for c in range(0, t.shape[1], 4)]


def test_the_patterns_are_every_tile_with_two_per_row_and_column() -> None:
    brute = [p for p in itertools.product((0, 1), repeat=16) if all(
        sum(p[4 * r : 4 * r + 4]) == 2 and sum(p[c::4]) == 2 for r in range(4) for c in range(4))]
    assert PATTERNS.shape == (90, 16)
    assert {tuple(int(v) for v in row) for row in PATTERNS} == set(brute)


@pytest.mark.parametrize("density", [0.1, 0.5, 0.9])
def test_projection_is_transposable_2to4_and_keeps_the_most_proposed(density: float) -> None:
    generator = torch.Generator().manual_seed(0)
    proposed = torch.rand(8, 12, generator=generator) < density
    magnitude = torch.rand(8, 12, generator=generator)
    projected = project_transposable_2to4(proposed, magnitude)
    assert is_transposable_2to4(projected) and projected.sum() == projected.numel() // 2
    patterns = PATTERNS.view(-1, 4, 4) > 0
    for tile, kept in zip(_tiles(proposed), _tiles(projected)):
        best = max(int((tile & p).sum()) for p in patterns)
        assert int((tile & kept).sum()) == best


def test_projection_breaks_ties_by_magnitude_and_keeps_a_2to4_mask() -> None:
    magnitude = torch.rand(4, 4, generator=torch.Generator().manual_seed(1))
    everything = torch.ones(4, 4, dtype=torch.bool)
    projected = project_transposable_2to4(everything, magnitude)
    best = max(float((magnitude * p).sum()) for p in PATTERNS.view(-1, 4, 4))
    assert float(magnitude[projected].sum()) == pytest.approx(best)
    assert torch.equal(project_transposable_2to4(projected, torch.rand(4, 4)), projected)


def test_shapes_that_do_not_tile_are_refused() -> None:
    with pytest.raises(ValueError, match="divisible by 4"):
        project_transposable_2to4(torch.ones(6, 8, dtype=torch.bool), torch.ones(6, 8))


@pytest.mark.parametrize("normed", [False, True])
def test_layer_autograd_matches_the_dense_linear(monkeypatch: pytest.MonkeyPatch, normed: bool) -> None:
    _dense_stand_in(monkeypatch)
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 12)
    reference = torch.nn.Linear(8, 12)
    reference.load_state_dict(linear.state_dict())
    layer, norm = SemiStructuredLinear(linear), torch.nn.LayerNorm(8)
    assert layer.weight is linear.weight and layer.bias is linear.bias
    x = torch.randn(3, 5, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out = layer.norm_linear(x, norm) if normed else layer(x)
    ref = reference(norm(x_ref) if normed else x_ref)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(linear.weight.grad, reference.weight.grad)  # dense: masked before the step
    torch.testing.assert_close(linear.bias.grad, reference.bias.grad)


def test_mask_set_projects_every_new_mask() -> None:
    linear = torch.nn.Linear(8, 8, bias=False)
    optimizer = torch.optim.SGD(linear.parameters(), lr=0.1)
    masks = SemiStructuredMaskSet({"weight": linear.weight}, optimizer)
    masks.set_mask("weight", torch.rand(8, 8) < 0.3)
    assert is_transposable_2to4(masks.active("weight"))
    assert torch.all(linear.weight[~masks.active("weight")] == 0)
    assert masks.counts["weight"] == 32


def test_rigl_keeps_transposable_2to4_through_its_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    _dense_stand_in(monkeypatch)
    method = micro_method("rigl", ADAMW, density=0.5, precision="bf16", execution="semi_structured")
    assert isinstance(method.model.blocks[0].attn.qkv, SemiStructuredLinear)
    assert set(method.allotment.values()) == {n // 2 for n in (method.mask_set.numel(k) for k in method.allotment)}
    batches = micro_batches()
    for _ in range(7):  # updates at steps 3 and 6
        method.train_segment(batches, 1)
        for name, mask in method.masks().items():
            assert is_transposable_2to4(mask), name
            assert torch.all(method.mask_set.weights[name][~mask] == 0)
        assert method.density() == 0.5
    assert method.topology_updates == 2
    assert method.result_extras()["flops_basis"] == "dense_equivalent"


def test_semi_structured_is_refused_off_cuda() -> None:
    with pytest.raises(ValueError, match="CUDA only"):
        micro_method("rigl", ADAMW, density=0.5, precision="bf16", execution="semi_structured")


@pytest.mark.parametrize(
    "device, densities, precision, fragment",
    [("cpu", [0.5], "bf16", "CUDA only"), ("cuda", [0.5, 0.1], "bf16", "not 0.1"), ("cuda", [0.5], "fp32", "fp16 or bf16")],
)
def test_problem_names_what_to_change(device: str, densities: list[float], precision: str, fragment: str) -> None:
    assert fragment in semi_structured.problem(device, densities, precision)
    assert semi_structured.problem("cuda", [0.5], "bf16") is None


def _cuda_2to4() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0) and torch.backends.cusparselt.is_available()


NEEDS_2TO4 = "needs a CUDA GPU with 2:4 sparse tensor cores (sm80+) and a torch with cuSPARSELt"


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_2to4(), reason=NEEDS_2TO4)
def test_cuda_layer_matches_the_dense_masked_linear() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 256, device="cuda")
    mask = project_transposable_2to4(torch.rand(256, 128, device="cuda") < 0.5, linear.weight)
    with torch.no_grad():
        linear.weight.mul_(mask)
    reference = torch.nn.Linear(128, 256, device="cuda")
    reference.load_state_dict(linear.state_dict())
    layer = SemiStructuredLinear(linear)
    x = torch.randn(64, 128, device="cuda", requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, ref = layer(x), reference(x_ref)
    torch.testing.assert_close(out.float(), ref.float(), atol=5e-2, rtol=5e-2)
    out.float().sum().backward()
    ref.float().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=5e-2, rtol=5e-2)


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_2to4(), reason=NEEDS_2TO4)
def test_cuda_rigl_trains_on_2to4_kernels() -> None:
    import dstbench
    from tests.conftest import micro_vit

    model = micro_vit(embed_dim=128, num_heads=4).cuda()
    method = dstbench.create_method(
        "rigl", model, density=0.5, total_steps=12, optimizer=ADAMW, precision="bf16",
        delta_t=3, t_end=11, execution="semi_structured",
    )
    batches = ((x.cuda(), y.cuda()) for x, y in micro_batches())
    stats = method.train_segment(batches, 7)
    assert stats.topology_updates == 2 and torch.isfinite(torch.tensor(stats.loss))
    assert all(is_transposable_2to4(m) for m in method.masks().values())
    assert method.density() == 0.5
