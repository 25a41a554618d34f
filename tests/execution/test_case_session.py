"""A case run end to end: every result field holds a real measured value."""

from __future__ import annotations

import json

import pytest

from dstbench.suite.plan import expand_cases
from dstbench.execution.case_session import CaseTask, resolve_device, run_case
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite

REQUIRED = [
    "suite", "method", "kind", "density", "density_achieved", "status", "device", "segment_ms",
    "median_ms", "iqr_ms", "images_per_s", "peak_memory_bytes", "reserved_memory_bytes",
    "rss_peak_bytes", "state_bytes", "activation_bytes", "flops_per_step", "topology_updates",
    "topology_ms", "loss", "env", "error", "segment_group", "segment_round", "segment_start_s", "groups", "noise",
    "warnings",
]


@pytest.fixture(scope="module")
def dense_result():  # type: ignore[no-untyped-def]
    suite = parse_suite(micro_suite())
    [case] = expand_cases(suite)
    progress = []
    result = run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), "."), lambda *a: progress.append(a))
    return result, progress


def test_result_has_every_field_with_real_values(dense_result) -> None:  # type: ignore[no-untyped-def]
    result, _ = dense_result
    line = json.loads(json.dumps(result.to_dict()))
    assert set(REQUIRED) <= set(line)
    assert line["status"] == "ok" and line["error"] is None and line["device"] == "cpu"
    assert len(line["segment_ms"]) == 3 and all(ms > 0 for ms in line["segment_ms"])
    assert line["median_ms"] == sorted(line["segment_ms"])[1]
    assert line["images_per_s"] == pytest.approx(8 * 3 / (line["median_ms"] / 1e3))
    assert line["peak_memory_bytes"] is None and line["reserved_memory_bytes"] is None  # CPU
    # RSS growth is clamped at 0: earlier tests in this process may have freed more than the case needs.
    assert line["rss_peak_bytes"] >= 0 and line["activation_bytes"] > 0
    assert line["state_bytes"] == line["state_breakdown"]["total"] > 0
    assert line["flops_per_step"] > 0
    assert line["density_achieved"] == 1.0 and line["topology_updates"] == 0
    assert line["data_loading"] == "synthetic, device-resident"
    assert line["suite_hash"] == parse_suite(micro_suite()).setup_hash()
    # A case run alone is a group of one: its samples carry that group, rounds 0..n-1, rising starts.
    assert line["segment_group"] == line["groups"] * 3 and line["segment_round"] == [0, 1, 2]
    assert line["segment_start_s"] == sorted(line["segment_start_s"])
    assert len(line["noise"]["cpu_share"]) == 3 and line["env"]["threads"] == 1


def test_environment_record(dense_result) -> None:  # type: ignore[no-untyped-def]
    env = dense_result[0].env
    for key in ("torch", "timm", "python", "cpu_model", "cpu_threads", "commit", "dirty", "gpu_before", "gpu_after"):
        assert key in env
    assert env["device_type"] == "cpu" and env["gpu_before"] is None


def test_progress_reports_warmup_and_every_segment(dense_result) -> None:  # type: ignore[no-untyped-def]
    assert dense_result[1] == [("warmup", 2, 2), ("segment", 1, 3), ("segment", 2, 3), ("segment", 3, 3)]


def test_flops_follow_the_model_size() -> None:
    results = []
    for embed in (32, 64):
        suite = parse_suite(micro_suite(model={**micro_suite()["model"], "embed_dim": embed}))
        [case] = expand_cases(suite)
        results.append(run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), ".")))
    # Block matmuls are quadratic in the width: doubling it more than doubles the FLOPs.
    assert results[1].flops_per_step > 2 * results[0].flops_per_step


def test_device_resolution() -> None:
    assert resolve_device("cpu").type == "cpu"
    if not __import__("torch").cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_device("cuda")
        assert resolve_device("auto").type in ("cpu", "mps")


def test_a_csr_case_carries_its_execution_and_counts_what_it_stores() -> None:
    methods = [{"name": "rigl", "params": {"delta_t": 3}},
               {"name": "rigl", "label": "rigl_csr", "params": {"delta_t": 3, "execution": "csr"}}]
    suite = parse_suite(micro_suite(methods=methods, densities=[0.1]))
    masked, csr = (run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), ".")) for case in expand_cases(suite))
    assert (masked.execution, csr.execution) == ("masked", "csr")
    assert csr.status == "ok" and csr.topology_updates == masked.topology_updates > 0
    assert csr.density_achieved == masked.density_achieved
    assert csr.method_extras["execution"] == "csr"
    # Exact counts: a tenth of the prunable weights held, and executed, instead of all of them.
    assert csr.state_bytes < 0.5 * masked.state_bytes
    assert csr.flops_per_step < 0.5 * masked.flops_per_step
    assert csr.activation_bytes == masked.activation_bytes


def test_a_condensed_srigl_case_counts_what_it_stores() -> None:
    methods = [{"name": "srigl", "params": {"delta_t": 3}},
               {"name": "srigl", "label": "srigl_condensed", "params": {"delta_t": 3, "execution": "condensed"}}]
    suite = parse_suite(micro_suite(methods=methods, densities=[0.1]))
    masked, condensed = (run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), ".")) for case in expand_cases(suite))
    assert (masked.execution, condensed.execution) == ("masked", "condensed")
    assert condensed.status == "ok" and condensed.topology_updates == masked.topology_updates > 0
    assert condensed.density_achieved == masked.density_achieved
    assert condensed.state_bytes < 0.5 * masked.state_bytes
    assert condensed.flops_per_step < 0.5 * masked.flops_per_step  # the gathers' products, counted as executed
    assert condensed.activation_bytes == masked.activation_bytes  # the layer keeps its input, as a linear does
