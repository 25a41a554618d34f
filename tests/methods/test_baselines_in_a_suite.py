"""gmp, srigl and the uniform Small-Dense run through a suite end to end, at the target density,
with their extras on the result line."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from dstbench.execution.orchestrator import run_suite
from tests.conftest import micro_suite


def test_a_suite_runs_gmp_srigl_and_the_uniform_small_dense(tmp_path: Path) -> None:
    methods = [
        # 2 warm-up steps, 2 segments of 3 steps: pruning at steps 2 and 4, reached before the sample.
        {"name": "gmp", "params": {"t_start": 0, "t_end": 4, "delta_t": 2}},
        {"name": "srigl", "params": {"delta_t": 2}},
        {"name": "small_dense", "label": "small_dense_uniform", "params": {"layout": "uniform"}},
    ]
    suite = micro_suite(methods=methods, densities=[0.1], timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2})
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    run_dir = run_suite(path, out=tmp_path / "runs")
    results = {json.loads(line)["method"]: json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()}
    assert set(results) == {"gmp", "srigl", "small_dense_uniform"}
    for result in results.values():
        assert result["status"] == "ok", result["error"]
        assert abs(result["density_achieved"] - 0.1) <= 0.01
    gmp = results["gmp"]["method_extras"]
    assert [step for step, _ in gmp["density_by_update"]] == [0, 2, 4]
    assert gmp["density_by_update"][-1][1] == results["gmp"]["density_achieved"]
    assert gmp["density_by_segment"] and all(s["density_end"] <= 1.0 for s in gmp["density_by_segment"])
    srigl = results["srigl"]["method_extras"]
    assert results["srigl"]["topology_updates"] >= 1 and set(srigl["fan_in"]) == set(srigl["live_neurons"])
    assert results["small_dense_uniform"]["method_extras"]["layout_rule"] == "uniform"
