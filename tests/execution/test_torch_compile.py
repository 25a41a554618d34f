"""Training under torch.compile (`compile:`): a compiled micro ViT trains as eager does (dense, and
BARTER through a topology update that resizes its tensors, which recompiles instead of falling back
to eager), a case that cannot be compiled fails saying so, and a compiled run records its compile
time and recompilations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import dstbench
from dstbench.execution.case_session import CaseTask, failure
from dstbench.execution.orchestrator import run_suite
from dstbench.execution.torch_compile import compile_failure, compile_method
from dstbench.measure.trackers.compile import compile_counters
from dstbench.results.record import iter_results
from dstbench.suite.loading import parse_suite
from tests.conftest import ADAMW, micro_batches, micro_suite, micro_vit

# Losses of the same steps, eager and compiled (inductor, fp32 on the CPU): inductor may fuse and
# reorder float sums, so the two agree to rounding, not bit for bit.
LOSS_RTOL = 1e-4


@pytest.fixture(autouse=True)
def _fresh_dynamo(one_thread: None) -> None:
    torch._dynamo.reset()


def _losses(name: str, compiled: bool, steps: int = 3) -> tuple[list[float], int]:
    """Per-step losses of `steps` steps (BARTER: a topology update at step 2, which resizes its
    tensors), and the graphs torch compiled meanwhile."""
    params = {"delta_t": 2} if name == "barter" else {}
    density = 0.5 if name == "barter" else 1.0
    method = dstbench.create_method(name, micro_vit(), density=density, total_steps=20, optimizer=ADAMW, **params)
    if compiled:
        compile_method(method, {"backend": "inductor", "fullgraph": False, "dynamic": None})
    graphs_before = compile_counters()[0]
    batches = micro_batches()
    losses = [method.train_segment(batches, 1).loss for _ in range(steps)]
    if name == "barter":
        assert method.topology_updates == 1
    return losses, compile_counters()[0] - graphs_before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dense", "barter"])
def test_compiled_training_matches_eager(name: str) -> None:
    eager, eager_graphs = _losses(name, compiled=False)
    compiled, graphs = _losses(name, compiled=True)
    assert eager_graphs == 0
    assert compiled == pytest.approx(eager, rel=LOSS_RTOL)
    # Compiled, not run eagerly: dense once; BARTER again after its resize (step 3 recompiles).
    assert graphs == (2 if name == "barter" else 1)


class GraphBreak(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x * 2


def test_a_model_that_cannot_be_compiled_fails_saying_so() -> None:
    options = {"backend": "eager", "fullgraph": True, "dynamic": None}
    module = GraphBreak()
    module.compile(**options)
    with pytest.raises(Exception) as raised:
        module(torch.ones(2))
    message = compile_failure(raised.value, "toy", options)
    assert message is not None and message.startswith(
        "compile: toy cannot be trained under torch.compile(backend='eager', fullgraph=True, dynamic=None): "
    )
    assert "`compile: false` times it eagerly" in message
    assert compile_failure(raised.value, "toy", None) is None  # an eager case's error is its own
    assert compile_failure(ValueError("density went negative"), "toy", options) is None
    # The case's error ends with that line (the failed-cases table shows the last line).
    suite = micro_suite(compile={"backend": "eager", "fullgraph": True})
    task = CaseTask(parse_suite(suite).model_dump(mode="json"), "<suite>", {
        "method": "toy", "method_name": "dense", "kind": "dense", "density": 1.0, "params": {}}, "unused")
    try:
        raise raised.value
    except Exception as exc:
        result = failure(task, exc)
    assert result.status == "error" and result.error.rstrip().splitlines()[-1].startswith("compile: toy cannot be trained")


@pytest.mark.slow
def test_a_compiled_run_records_compile_time_and_recompilations(tmp_path: Path) -> None:
    # aot_eager traces and partitions as inductor does but generates no code: the harness is what is
    # tested here, quickly.
    suite = micro_suite(
        methods=["dense", {"name": "barter", "params": {"delta_t": 3}}], densities=[0.5],
        compile={"backend": "aot_eager"},
        # Warm-up steps 1-2, settle 3-5, rounds 6-8 and 9-11: updates at 3 (settle), 6 and 9; the steps
        # after them (7 and 10) recompile inside the rounds.
        timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2, "processes": 1, "total_steps": 100},
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(suite))
    lines = {line["method"]: line for line in iter_results(run_suite(path, out=tmp_path / "runs"))}
    assert {line["status"] for line in lines.values()} == {"ok"}
    for line in lines.values():
        assert line["compile"] == {"backend": "aot_eager", "fullgraph": False, "dynamic": None}
        assert line["compile_s"] > 0 and len(line["segment_recompiles"]) == len(line["segment_ms"]) == 2
    assert lines["dense"]["recompiles"] == 0 and lines["dense"]["recompile_ms"] == 0.0
    barter = lines["barter"]
    assert barter["segment_recompiles"] == [1, 1] and barter["recompiles"] == 2
    assert barter["topology_recompile_ms"] == pytest.approx(barter["recompile_ms"]) and barter["recompile_ms"] > 0
    # Said once, as the recompile note: no recompilation came before an update.
    assert [w for w in barter["warnings"] if w.startswith("compile:")] == [
        w for w in barter["warnings"] if w.startswith("compile: recompiled in 2 of 2 timed segments")
    ] and len([w for w in barter["warnings"] if w.startswith("compile:")]) == 1
    # The compile options enter the suite hash: compiled lines never pair with eager ones.
    eager = {k: v for k, v in suite.items() if k != "compile"}
    assert barter["suite_hash"] == parse_suite(suite).setup_hash() != parse_suite(eager).setup_hash()


def test_a_model_left_eager_fails_the_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever keeps the model from being compiled (here: nothing compiles it), the case must not
    # be timed eagerly under a compiled suite's name.
    import dstbench.execution.case_session as session

    monkeypatch.setattr(session, "compile_method", lambda method, options: None)
    suite = micro_suite(compile={"backend": "eager"}, timing={"warmup_steps": 2, "segment_steps": 2, "segments": 2, "processes": 1})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(suite))
    (line,) = iter_results(run_suite(path, out=tmp_path / "runs"))
    assert line["status"] == "error" and "torch compiled no graph of dense's model in its warm-up" in line["error"]


def test_a_torch_without_a_per_model_recompile_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from dstbench.suite.loading import SuiteError

    def old_compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None):  # type: ignore[no-untyped-def]
        return model

    monkeypatch.setattr(torch, "compile", old_compile)
    with pytest.raises(SuiteError, match="no per-model recompile limit"):
        parse_suite(micro_suite(compile=True, timing={"warmup_steps": 2, "segment_steps": 1, "segments": 2}))
    parse_suite(micro_suite())  # eager suites do not care
