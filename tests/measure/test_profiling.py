"""Profiling on the CPU: a profiled micro-suite, its trace, its phase accounting and memory breakdown,
the window planning, and the trace analysis on a hand-made CUDA-like trace."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
import torch
import yaml
from rich.console import Console

from dstbench.dst import phases
from dstbench.dst.method_base import Method
from dstbench.measure.profiling import analysis, plan_window
from dstbench.dst.registry import register_method
from dstbench.results.record import iter_results
from tests.conftest import micro_suite

UPDATE_EVERY = 4


class ProfilingToy(Method):
    """A method defined by a test (not in methods/): masks, an update every 4 steps, all sub-phases."""

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.masks = {name: torch.rand(w.shape, generator=self.generator) < self.target_density
                      for name, w in self.prunable().items()}
        self.after_optimizer_step(0)

    def method_buffers(self) -> dict[str, torch.Tensor]:
        return dict(self.masks)

    def before_optimizer_step(self, step: int) -> None:
        for name, w in self.prunable().items():
            if w.grad is not None:
                w.grad.mul_(self.masks[name])

    def after_optimizer_step(self, step: int) -> None:
        with torch.no_grad():
            for name, w in self.prunable().items():
                w.mul_(self.masks[name])

    def update_due(self, step: int) -> bool:
        return step % UPDATE_EVERY == 0

    def update_topology(self, step: int) -> None:
        with self.update_phase(phases.SCORING):
            scores = {n: w.abs() for n, w in self.prunable().items()}
        with self.update_phase(phases.PRUNE_GROW):
            for name, score in scores.items():
                k = int(self.masks[name].sum())
                flat = torch.zeros(score.numel(), dtype=torch.bool)
                flat[score.flatten().topk(k).indices] = True
                self.masks[name] = flat.view_as(score)
        with self.update_phase(phases.RESIZE):
            pass  # a masked method keeps its shapes; the label must still show up
        with self.update_phase(phases.STATE_REMAP):
            self.after_optimizer_step(step)


@pytest.fixture(scope="module", autouse=True)
def toy_registered() -> Iterator[None]:
    """Registered like any third-party method, and only while this module runs, so that tests
    which enumerate the registry elsewhere never meet it."""
    from dstbench.dst import registry
    register_method("profiling_toy", kind="masked")(ProfilingToy)
    yield
    registry._REGISTRY.pop("profiling_toy", None)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`dstbench profile` on a micro-suite of the test's method, run in-process (dense is profiled by
    `test_a_suite_with_profile_true_profiles_after_the_timed_segments`)."""
    from dstbench.cli.profile import main

    tmp = tmp_path_factory.mktemp("profile")
    suite = micro_suite(
        methods=["profiling_toy"],
        reference="profiling_toy",
        timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2, "total_steps": 100},
        profile={"steps": 3, "top_ops": 8},  # `dstbench profile` switches it on
    )
    suite_path = tmp / "micro.yaml"
    suite_path.write_text(yaml.safe_dump(suite))
    out = io.StringIO()
    args = SimpleNamespace(suite=str(suite_path), only=None, density=None, out=str(tmp / "runs"), device=None)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)  # type: ignore[arg-type]
    (run_dir,) = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
    lines = {line["method"]: line for line in iter_results(run_dir)}
    return {"code": code, "stdout": out.getvalue(), "run_dir": run_dir, "lines": lines}


def load_trace(run_dir: Path, line: dict[str, Any]) -> dict[str, Any]:
    with gzip.open(run_dir / line["profile"]["trace"], "rt", encoding="utf-8") as handle:
        return json.load(handle)


def test_the_profile_command_succeeds_and_prints_where_the_time_goes(profiled: dict[str, Any]) -> None:
    assert profiled["code"] == 0, profiled["stdout"]
    text = profiled["stdout"]
    assert "profiling_toy@0.5" in text
    for name in ("data", "forward", "backward", "optimizer_step", "masking", "topology_update", "scoring",
                 "prune_grow", "profiled wall time", "other (unlabelled)"):
        assert name in text
    assert "energy: not measured" in text


def test_the_trace_parses_and_holds_every_phase_label(profiled: dict[str, Any]) -> None:
    line = profiled["lines"]["profiling_toy"]
    assert line["profile"]["trace"] == "traces/profiling_toy@0.5.trace.json.gz"
    trace = load_trace(profiled["run_dir"], line)
    names = {e.get("name") for e in trace["traceEvents"]}
    missing = [p for p in phases.ALL_PHASES if phases.PREFIX + p not in names]
    assert not missing, f"phase labels missing from the trace: {missing}"


def test_phase_times_add_up_to_the_profiled_wall_time(profiled: dict[str, Any]) -> None:
    """Recomputed from the trace file itself: the outermost phase annotations cover the window's
    wall time to within 10%, and the result line's figures are those of the trace."""
    for line in profiled["lines"].values():
        profile = line["profile"]
        events = load_trace(profiled["run_dir"], line)["traceEvents"]
        (window,) = [e for e in events if e.get("name") == analysis.WINDOW and e.get("cat") == "user_annotation"]
        top = [e for e in events if e.get("cat") == "user_annotation"
               and e["name"].startswith(phases.PREFIX) and "/" not in e["name"]]
        labelled_us = sum(e["dur"] for e in top)
        assert 0.9 <= labelled_us / window["dur"] <= 1.0 + 1e-9
        assert profile["wall_ms"] == pytest.approx(window["dur"] / 1e3)
        labelled_ms = sum(v["ms"] for k, v in profile["phases"].items() if k != analysis.OTHER)
        assert labelled_ms == pytest.approx(labelled_us / 1e3)
        assert sum(v["share"] for v in profile["phases"].values()) == pytest.approx(1.0)


def test_the_profiled_steps_end_in_a_scheduled_update_after_the_timed_ones(profiled: dict[str, Any]) -> None:
    line = profiled["lines"]["profiling_toy"]
    update = line["profile"]["update"]
    timed_and_warmup = line["method_extras"]["steps_total"]  # recorded before profiling began
    # The last process set's steps: 2 warm-up, 1 round trained untimed (the first set's), 1 settling
    # segment, its 1 timed round, of 3 steps each.
    assert len(line["segment_ms"]) == 2 and timed_and_warmup == 2 + (1 + 1 + 1) * 3
    assert update["how"] == "scheduled" and update["step"] % UPDATE_EVERY == 0
    assert update["step"] - line["profile"]["steps"] > timed_and_warmup
    assert update["updates_in_window"] == 1
    subs = line["profile"]["update_phases"]
    assert list(subs) == list(phases.UPDATE_PHASES)
    parent = line["profile"]["phases"][phases.TOPOLOGY_UPDATE]["ms"]
    assert sum(s["ms"] for s in subs.values()) <= parent + 1e-6


def test_the_memory_breakdown_sums_to_state_plus_activations(profiled: dict[str, Any]) -> None:
    for line in profiled["lines"].values():
        memory = line["profile"]["memory"]
        parts = {k: v for k, v in memory.items() if k != "total"}
        assert set(parts) == {"parameters", "gradients", "optimizer_state", "method_buffers", "activations"}
        assert sum(parts.values()) == memory["total"]
        assert memory["total"] == line["state_bytes"] + line["activation_bytes"]
        assert memory["activations"] == line["activation_bytes"] > 0
    toy = profiled["lines"]["profiling_toy"]["profile"]["memory"]
    assert toy["method_buffers"] == profiled["lines"]["profiling_toy"]["state_breakdown"]["method_buffers"] > 0


def test_operators_matmul_share_and_allocation_peak(profiled: dict[str, Any]) -> None:
    profile = profiled["lines"]["profiling_toy"]["profile"]
    ops = profile["top_ops"]
    assert 0 < len(ops) <= 8
    assert [op["self_ms"] for op in ops] == sorted((op["self_ms"] for op in ops), reverse=True)
    matmuls = [op for op in ops if op["category"] == "matmul"]
    assert matmuls and all(op["flops"] and op["flops"] > 0 for op in matmuls)
    assert 0 < profile["matmul_share"] < 1
    assert sum(profile["split_ms"].values()) == pytest.approx(profile["op_ms"])
    peak = profile["allocator_peak"]
    assert peak["bytes"] > 0
    assert peak["phase"] in set(phases.ALL_PHASES) | {analysis.OTHER}
    assert profile["memory_snapshot"] is None and "cuda" in profile["memory_snapshot_reason"].lower()


def test_without_nvml_the_energy_fields_say_not_measured(profiled: dict[str, Any]) -> None:
    for line in profiled["lines"].values():
        assert line["energy"]["measured"] is False
        assert line["energy"]["reason"]


def test_a_suite_with_profile_true_profiles_dense_after_the_timed_segments(tmp_path: Path) -> None:
    from dstbench.execution.orchestrator import run_suite

    suite = micro_suite(profile=True, timing={"warmup_steps": 1, "segment_steps": 2, "segments": 1})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(suite))
    run_dir = run_suite(path, out=tmp_path / "runs", console=Console(file=io.StringIO()))
    (line,) = iter_results(run_dir)
    assert line["status"] == "ok" and "error" not in line["profile"]
    names = {e.get("name") for e in load_trace(run_dir, line)["traceEvents"]}
    for name in (phases.DATA, phases.FORWARD, phases.BACKWARD, phases.MASKING, phases.OPTIMIZER_STEP):
        assert phases.PREFIX + name in names
    assert phases.PREFIX + phases.TOPOLOGY_UPDATE not in names
    assert line["profile"]["update"]["how"] == "none"  # dense has no update to force
    assert line["profile"]["memory"]["total"] == line["state_bytes"] + line["activation_bytes"]


class StubSchedule:
    def __init__(self, step: int, total_steps: int, every: int) -> None:
        self.step, self.total_steps, self.every = step, total_steps, every

    def update_due(self, step: int) -> bool:
        return step % self.every == 0


@pytest.mark.parametrize(
    ("step", "total", "every", "max_advance", "has_updates", "expected"),
    [
        (105, 1000, 100, 500, True, {"step": 200, "how": "scheduled"}),
        (198, 1000, 100, 500, True, {"step": 300, "how": "scheduled"}),  # 200 leaves no room for 3 steps
        (105, 1000, 100, 50, True, {"step": 109, "how": "forced"}),  # next update too far
        (105, 150, 100, 500, True, {"step": 109, "how": "forced"}),  # schedule ends first
        (5, 1000, 10**9, 500, False, {"step": 9, "how": "none"}),
    ],
)
def test_plan_window(step: int, total: int, every: int, max_advance: int, has_updates: bool, expected: dict) -> None:
    stub = StubSchedule(step, total, every)
    assert plan_window(stub, 3, max_advance, has_updates) == expected  # type: ignore[arg-type]


def test_a_forced_update_is_undone_afterwards(vit: torch.nn.Module) -> None:
    from dstbench.measure.profiling.capture import _ForcedUpdate
    from tests.conftest import ADAMW

    method = ProfilingToy(vit, density=0.5, total_steps=100, optimizer=ADAMW)
    with _ForcedUpdate(method, 7):
        assert method.update_due(7) and method.update_due(8) and not method.update_due(9)
    assert not method.update_due(7) and method.update_due(8)


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def cuda_like_trace() -> dict[str, Any]:
    """A hand-made trace shaped like a CUDA one: backward launches from the autograd thread, a kernel
    from the profiler's start-up, and memory events of both devices."""
    p = phases.PREFIX
    events = [
        _x(analysis.WINDOW, 0, 1000),
        _x(p + "forward", 10, 290),
        _x(p + "backward", 300, 500),
        _x(p + "masking", 820, 5),  # nested in the update: counted once, in the update
        _x(p + "topology_update", 810, 150),
        _x(p + "topology_update/scoring", 815, 40),
        _x(p + "forward", 10, 290, cat="gpu_user_annotation", tid=7),  # device copy: ignored
        _x("cudaLaunchKernel", 100, 5, cat="cuda_runtime", correlation=1),
        _x("cudaLaunchKernel", 500, 5, cat="cuda_runtime", tid=2, correlation=2),
        _x("cudaLaunchKernel", 830, 5, cat="cuda_runtime", correlation=3),
        _x("cudaLaunchKernel", 970, 5, cat="cuda_runtime", correlation=4),
        _x("cudaLaunchKernel", -50, 5, cat="cuda_runtime", correlation=5),
        _x("gemm", 120, 200, cat="kernel", tid=7, correlation=1),
        _x("gemm_bwd", 510, 400, cat="kernel", tid=7, correlation=2),
        _x("topk", 900, 30, cat="kernel", tid=7, correlation=3),
        _x("memset", 980, 10, cat="gpu_memset", tid=7, correlation=4),
        _x("warmup", -40, 99, cat="kernel", tid=7, correlation=5),
    ]
    for ts, total, device_type in ((50, 100, 1), (600, 900, 1), (700, 5000, 0), (840, 400, 1), (-10, 10**9, 1)):
        events.append({"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 2,
                       "args": {"Device Type": device_type, "Total Allocated": total}})
    return {"traceEvents": events}


def test_device_time_goes_to_the_phase_that_launched_it() -> None:
    trace = cuda_like_trace()
    layout = analysis.phase_layout(trace)
    host = analysis.host_phase_times(layout)
    assert host["wall_ms"] == pytest.approx(1.0)
    assert "masking" not in host["phases"]
    assert host["phases"]["other"]["ms"] == pytest.approx((1000 - 290 - 500 - 150) / 1e3)
    device = analysis.device_phase_times(trace, layout)
    assert device["busy_ms"] == pytest.approx((200 + 400 + 30 + 10) / 1e3)
    assert {k: round(v["ms"] * 1e3) for k, v in device["phases"].items()} == {
        "forward": 200, "backward": 400, "topology_update": 30, "other": 10}
    assert device["update_phases"]["topology_update/scoring"]["ms"] == pytest.approx(0.03)


def test_the_allocation_peak_is_placed_in_its_phase() -> None:
    trace = cuda_like_trace()
    layout = analysis.phase_layout(trace)
    assert analysis.allocation_peak(trace, layout, 1) == {"bytes": 900, "phase": "backward", "at_ms": 0.6}
    assert analysis.allocation_peak(trace, layout, 0)["phase"] == "backward"
    assert analysis.device_phase_times({"traceEvents": []}, layout) is None


def test_operator_split_keeps_attention_apart_from_matmuls() -> None:
    def avg(key: str, self_us: float, flops: int = 0) -> SimpleNamespace:
        return SimpleNamespace(key=key, self_cpu_time_total=self_us, count=2, flops=flops, self_device_time_total=0)

    averages = [avg("aten::addmm", 600, 10**6), avg("aten::_scaled_dot_product_flash_attention_for_cpu", 100),
                avg("aten::gelu", 300), avg(phases.PREFIX + "forward", 5000), avg(analysis.WINDOW, 9000)]
    table = analysis.operator_table(averages, on_device=False, top=2)
    assert table["op_ms"] == pytest.approx(1.0)
    assert table["matmul_share"] == pytest.approx(0.6) and table["attention_share"] == pytest.approx(0.1)
    assert [op["name"] for op in table["top_ops"]] == ["aten::addmm", "aten::gelu"]
    assert table["top_ops"][0]["flops"] == 10**6 and table["top_ops"][1]["flops"] is None


def _case_and_suite(**overrides: Any) -> tuple[Any, Any]:
    from dstbench.suite.plan import expand_cases
    from dstbench.suite.loading import parse_suite

    suite = parse_suite(micro_suite(methods=["dense", "profiling_toy"], profile={"steps": 2}, **overrides))
    (case,) = expand_cases(suite, only=["profiling_toy"])
    return suite, case


def test_without_a_speed_method_a_fresh_one_is_built_and_warmed_up(tmp_path: Path) -> None:
    """Accuracy-only runs hand the profiler no method: it builds one and profiles its first update."""
    from dstbench.measure.profiling import profile_case
    from dstbench.execution.case_setup import base_result, build_method

    suite, case = _case_and_suite(timing={"warmup_steps": 2, "segment_steps": 3, "segments": 1, "total_steps": 50})
    result = base_result(suite, case)
    profile_case(suite, case, torch.device("cpu"), result, tmp_path, None, None, lambda *a: None, build_method)
    assert "error" not in result.profile, result.profile.get("error")
    # warm-up ends at step 2; the window (2 steps) needs a counted step first: 8 is the first update in reach
    assert result.profile["update"] == {"step": 8, "how": "scheduled", "advanced_steps": 3, "updates_in_window": 1}
    assert (tmp_path / result.profile["trace"]).exists()


def test_a_failing_profile_is_recorded_and_the_forced_update_undone(tmp_path: Path, vit: torch.nn.Module) -> None:
    from dstbench.measure.profiling import profile_case
    from dstbench.execution.case_session import base_result
    from tests.conftest import ADAMW, micro_batches

    suite, case = _case_and_suite(timing={"warmup_steps": 1, "segment_steps": 1, "segments": 1, "total_steps": 2})
    method = ProfilingToy(vit, density=0.5, total_steps=2, optimizer=ADAMW)

    def broken(step: int) -> None:
        raise RuntimeError("update exploded")

    method.update_topology = broken  # type: ignore[method-assign]
    result = base_result(suite, case)
    profile_case(suite, case, torch.device("cpu"), result, tmp_path, method, micro_batches(), lambda *a: None)
    assert "update exploded" in result.profile["error"]
    assert "update_due" not in vars(method)  # the forced update (past total_steps) was taken back


def test_the_report_gains_phase_and_memory_plots_operator_table_and_trace_links(profiled: dict[str, Any]) -> None:
    from markupsafe import Markup

    from dstbench.report import profile_section as section
    from dstbench.results.derive import derive, load_frame
    from dstbench.report.sections import sections

    keys = {s.key for s in sections()}
    assert {"profile_phases", "profile_memory", "profile_summary", "profile_ops", "profile_traces"} <= keys
    derived = derive(load_frame([profiled["run_dir"]]), "profiling_toy")
    parts = section.phase_frame(section.profiled(derived), on_device=False)
    toy = derived.index[derived["method"] == "profiling_toy"][0]
    steps = profiled["lines"]["profiling_toy"]["profile"]["steps"]
    wall = profiled["lines"]["profiling_toy"]["profile"]["wall_ms"]
    assert parts.loc[toy].sum() == pytest.approx(wall / steps)  # the stacked bar is the whole window
    assert list(parts.columns)[-1] == analysis.OTHER
    for build in (section.phase_plot, section.memory_plot):
        plot = build(derived)
        figure = plot.figure  # its legend sits outside the axes, on the figure
        assert len(figure.axes[0].patches) == len(derived) * len(figure.legends[0].texts)
        assert "profiling_toy @ 0.5: " in plot.alt  # the numbers, for a screen reader
    ops = section.operators_table(derived)
    assert {row[0] for row in ops.rows} == {"profiling_toy @ 0.5"} and len(ops.rows) == section.TOP_OPS_PER_CASE
    links = [row[1] for row in section.traces_table(derived).rows]
    assert all(isinstance(link, Markup) and 'href="file://' in link for link in links)
    for line in profiled["lines"].values():
        uri = (profiled["run_dir"] / line["profile"]["trace"]).resolve().as_uri()
        assert any(f'href="{uri}"' in link for link in links)


def test_report_sections_stay_empty_without_profiles() -> None:
    import pandas as pd

    from dstbench.report import profile_section as section

    frame = pd.DataFrame([{"method": "dense", "density": 1.0, "status": "ok", "profile": None, "run": "r"}])
    for build in (section.phase_plot, section.memory_plot, section.summary_table, section.operators_table,
                  section.traces_table):
        assert build(frame) is None
