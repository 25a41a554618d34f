"""`execution: semi_structured` up front and per step, on the CPU: what suite validation and the
device check refuse (cuSPARSELt missing, widths cuSPARSELt cannot take), how W and W^T are
compressed (one kernel where it fits, checked once against the dense product), and that a
training step compresses them once."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.masked import semi_structured
from dstbench.dst.masked.backends import execution_problem, prunable_shapes
from dstbench.dst.masked.semi_structured import SemiStructuredLinear, check_device, compress_pair, problem, shape_problem
from dstbench.dst.masked.transposable import project_transposable_2to4
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import ADAMW, MICRO_MODEL, micro_batches, micro_suite, micro_vit
from tests.dst.masked.helpers import dense_2to4_stand_in, micro_method

SEMI = {"name": "rigl", "params": {"execution": "semi_structured"}}


# -- shapes ---------------------------------------------------------------------------------------
def test_widths_that_are_not_multiples_of_16_are_refused_in_one_line() -> None:
    found = shape_problem({"blocks.0.mlp.fc1.weight": (800, 200), "blocks.0.attn.qkv.weight": (600, 200)})
    assert found is not None and "\n" not in found
    assert "multiples of 16" in found and "blocks.0.mlp.fc1.weight (800x200)" in found
    assert shape_problem({"a": (1152, 384), "b": (768, 192)}) is None  # ViT-S qkv, ViT-Ti fc1


def test_problem_checks_shapes_only_where_the_rest_can_run() -> None:
    assert "multiples of 16" in problem("cuda", [0.5], "bf16", {"w": (200, 384)})
    assert problem("cuda", [0.5], "bf16", {"w": (192, 384)}) is None
    assert "CUDA only" in problem("cpu", [0.5], "bf16", {"w": (200, 384)})


def test_prunable_shapes_come_from_the_suites_model_without_building_it() -> None:
    shapes = prunable_shapes(MICRO_MODEL["name"], {k: v for k, v in MICRO_MODEL.items() if k != "name"}, r"blocks\.0\..*\.weight")
    assert shapes == {
        "blocks.0.norm1.weight": (64,), "blocks.0.attn.qkv.weight": (192, 64), "blocks.0.attn.proj.weight": (64, 64),
        "blocks.0.norm2.weight": (64,), "blocks.0.mlp.fc1.weight": (256, 64), "blocks.0.mlp.fc2.weight": (64, 256),
    }
    assert prunable_shapes(MICRO_MODEL["name"], {}, "blocks.(") is None  # refused as a parameter on its own


def test_execution_problem_reads_the_models_shapes() -> None:
    model = {**MICRO_MODEL, "embed_dim": 200}
    kwargs = {k: v for k, v in model.items() if k != "name"}
    found = execution_problem(SEMI["params"], device="cuda", densities=[0.5], precision="bf16", distributed=False,
                              model_name=model["name"], model_kwargs=kwargs)
    assert found is not None and "blocks.0.attn.qkv.weight (600x200)" in found


def test_suite_validation_refuses_a_width_of_200_before_anything_runs() -> None:
    with pytest.raises(SuiteError) as info:
        parse_suite(micro_suite(methods=[SEMI], device="cuda", precision="bf16", model={**MICRO_MODEL, "embed_dim": 200}), "s.yaml")
    [(_, message)] = info.value.problems
    assert "methods.0.params.execution" in message and "multiples of 16" in message and "\n" not in message
    # The same suite at a width cuSPARSELt takes validates.
    parse_suite(micro_suite(methods=[SEMI], device="cuda", precision="bf16", model={**MICRO_MODEL, "embed_dim": 192}), "s.yaml")


# -- the device check ------------------------------------------------------------------------------
def test_check_device_refuses_a_torch_without_cusparselt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cusparselt, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"cuSPARSELt, which this torch build lacks"):
        check_device(torch.device("cuda"), 0.5, "bf16")


@pytest.mark.parametrize("capability, refused", [((7, 5), True), ((8, 0), False), ((9, 0), False)])
def test_check_device_wants_sm80_with_cusparselt(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], refused: bool) -> None:
    monkeypatch.setattr(torch.backends.cusparselt, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    if refused:
        with pytest.raises(ValueError, match="compute capability 8.0"):
            check_device(torch.device("cuda"), 0.5, "bf16")
    else:
        check_device(torch.device("cuda"), 0.5, "bf16")


def test_install_refuses_widths_cusparselt_cannot_take(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semi_structured, "check_device", lambda device, density, precision: None)
    with pytest.raises(ValueError, match=r"multiples of 16; not blocks\.0\.attn\.qkv\.weight \(600x200\)"):
        dstbench.create_method("rigl", micro_vit(embed_dim=200), density=0.5, total_steps=12, optimizer=ADAMW,
                               precision="bf16", execution="semi_structured")


# -- compression ------------------------------------------------------------------------------------
class _FakeCuSparseLt:
    """Stands in for torch's cuSPARSELt tensor class on the CPU: "compressed" operands are dense,
    so `F.linear` computes what the real ones would; `calls` says which path ran."""

    def __init__(self, pair_kernel_factor: float = 1.0) -> None:
        self.calls: list[str] = []
        self.factor = pair_kernel_factor

    def prune_dense_static_sort(self, weight: torch.Tensor, algorithm: str = "") -> torch.Tensor:
        assert algorithm == "largest_abs_values_greedy"
        self.calls.append("pair")
        return weight * self.factor

    def from_dense(self, weight: torch.Tensor) -> torch.Tensor:
        self.calls.append("single")
        return weight.clone()


def _masked_weight(rows: int, cols: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(rows, cols, generator=generator)
    return weight * project_transposable_2to4(torch.rand(rows, cols, generator=generator) < 0.5, weight)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _FakeCuSparseLt:
    fake = _FakeCuSparseLt()
    monkeypatch.setattr(semi_structured, "CuSparseLtTensor", fake)
    monkeypatch.setattr(semi_structured, "_PAIR_KERNEL_AGREES", {})
    return fake


def test_one_kernel_makes_w_and_its_transpose_where_the_shape_allows(fake: _FakeCuSparseLt) -> None:
    weight = _masked_weight(256, 128)
    forward, transpose = compress_pair(weight)
    assert fake.calls == ["pair"]
    x, dy = torch.randn(5, 128), torch.randn(5, 256)
    torch.testing.assert_close(torch.nn.functional.linear(x, forward), x @ weight.t())
    torch.testing.assert_close(torch.nn.functional.linear(dy, transpose), dy @ weight)
    compress_pair(weight)
    assert fake.calls == ["pair", "pair"] and semi_structured.pair_kernel_checks() == {"256x128 float32": True}


def test_other_multiples_of_16_compress_w_and_its_transpose_separately(fake: _FakeCuSparseLt) -> None:
    weight = _masked_weight(192, 64)  # ViT-Tiny-like: not multiples of 128
    forward, transpose = compress_pair(weight)
    assert fake.calls == ["single", "single"]
    dy = torch.randn(3, 192)
    torch.testing.assert_close(torch.nn.functional.linear(dy, transpose), dy @ weight)


def test_a_pair_kernel_that_disagrees_is_dropped_for_that_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeCuSparseLt(pair_kernel_factor=2.0)  # wrong products
    monkeypatch.setattr(semi_structured, "CuSparseLtTensor", fake)
    monkeypatch.setattr(semi_structured, "_PAIR_KERNEL_AGREES", {})
    weight = _masked_weight(128, 128)
    with pytest.warns(RuntimeWarning, match="disagrees with the dense product"):
        forward, _ = compress_pair(weight)
    torch.testing.assert_close(forward, weight)
    compress_pair(weight)
    assert fake.calls == ["pair", "single", "single", "single", "single"]  # checked once, then never again


# -- once per step -----------------------------------------------------------------------------------
def test_a_training_step_compresses_each_layer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    compressed = dense_2to4_stand_in(monkeypatch)
    method = micro_method("rigl", ADAMW, density=0.5, precision="bf16", execution="semi_structured")
    layers = [m for m in method.model.modules() if isinstance(m, SemiStructuredLinear)]
    batches = micro_batches()
    method.train_segment(batches, 2)
    assert len(compressed) == 2 * len(layers) == 2 * len(method.mask_set.weights)  # forward only; backward reuses
    assert not any(layer.live_graphs for layer in layers)  # each backward released its compressed pair
    compressed.clear()
    with torch.no_grad():
        method.model(next(batches)[0])
    assert len(compressed) == len(layers) and not any(layer.live_graphs for layer in layers)


def test_the_backward_uses_the_transpose_the_forward_made(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[torch.Tensor] = []

    def pair(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        made.append(weight.clone())
        return weight, 2.0 * weight.t()  # a transpose the backward can be told by

    monkeypatch.setattr(semi_structured, "compress_pair", pair)
    layer = SemiStructuredLinear(torch.nn.Linear(16, 32))
    x = torch.randn(4, 16, requires_grad=True)
    out = layer(x)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert len(made) == 1
    torch.testing.assert_close(x.grad, grad @ (2.0 * made[0]))


@pytest.mark.parametrize("norm", [False, True], ids=["linear", "norm_linear"])
def test_a_second_backward_through_a_retained_graph_is_refused_clearly(monkeypatch: pytest.MonkeyPatch, norm: bool) -> None:
    # The first backward released the compressed pair; a second would use it: it raises instead.
    dense_2to4_stand_in(monkeypatch)
    linear = torch.nn.Linear(16, 32)
    layer, layer_norm = SemiStructuredLinear(linear), torch.nn.LayerNorm(16)
    x = torch.randn(4, 16, requires_grad=True)
    out = layer.norm_linear(x, layer_norm) if norm else layer(x)
    out.sum().backward(retain_graph=True)
    expected = torch.autograd.grad(torch.nn.functional.linear(layer_norm(x) if norm else x, linear.weight, linear.bias).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)  # the first backward is the ordinary one
    assert not layer.live_graphs
    with pytest.raises(RuntimeError, match="retain_graph=True is not supported"):
        out.sum().backward()


# -- the real kernels (`pytest -m cuda`) ---------------------------------------------------------------
def _cuda_2to4() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0) and torch.backends.cusparselt.is_available()


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_2to4(), reason="needs a CUDA GPU with 2:4 sparse tensor cores (sm80+) and a torch with cuSPARSELt")
@pytest.mark.parametrize("shape", [(1536, 384), (384, 1536), (768, 192)], ids=["one-kernel", "one-kernel-wide", "separate"])
def test_cuda_compress_pair_gives_the_dense_products(monkeypatch: pytest.MonkeyPatch, shape: tuple[int, int]) -> None:
    monkeypatch.setattr(semi_structured, "_PAIR_KERNEL_AGREES", {})
    rows, cols = shape
    weight = _masked_weight(rows, cols).to("cuda", torch.bfloat16)
    forward, transpose = compress_pair(weight)
    x = torch.randn(100, cols, device="cuda", dtype=torch.bfloat16)  # 100 rows: padded to cuSPARSELt's 8
    dy = torch.randn(100, rows, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(torch.nn.functional.linear(x, forward).float(), (x @ weight.t()).float(), atol=5e-2, rtol=2e-2)
    torch.testing.assert_close(torch.nn.functional.linear(dy, transpose).float(), (dy @ weight).float(), atol=5e-2, rtol=2e-2)
    one_kernel = rows % 128 == 0 and cols % 128 == 0
    # Where torch's one-kernel compression applies, it agreed with the dense product (else it warned).
    assert semi_structured.pair_kernel_checks() == ({f"{rows}x{cols} bfloat16": True} if one_kernel else {})
