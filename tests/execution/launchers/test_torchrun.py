"""The torchrun launcher: a suite through `dstbench run` on 2 CPU ranks (gloo), and the rules that
merge the ranks' results into the case's line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dstbench.suite.plan import expand_cases
from dstbench.cli import main
from dstbench.execution.launchers.torchrun.config import TorchrunConfig
from dstbench.execution.launchers.torchrun.launcher import GATHERED, TorchrunLauncher, first_failure, rank_file, write_json_atomic
from dstbench.results.merge import merge_ranks
from dstbench.results.record import CaseResult, iter_results
from dstbench.execution.case_session import CaseTask
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite
from tests.execution.launchers.rank_faults import PLUGIN

TORCHRUN = {"name": "torchrun", "nproc_per_node": 2, "timeout_s": 300}


@pytest.fixture(scope="module")
def run_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One `dstbench run` on 2 ranks: a case whose rank 1 raises, then a healthy SET case."""
    tmp = tmp_path_factory.mktemp("torchrun")
    suite = micro_suite(
        plugins=[PLUGIN],
        methods=["fault_rank", {"name": "set", "params": {"delta_t": 1}}],  # updates at steps 1-5 (t_end: 6)
        densities=[0.5],
        launcher=TORCHRUN,
        timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2},
        profile={"enabled": True, "steps": 2, "memory_snapshot": False},
    )
    path = tmp / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert main(["run", str(path), "--out", str(tmp / "runs")]) == 1  # fault_rank fails on purpose
    [run_dir] = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
    return {"run_dir": run_dir, **{line["case_id"]: line for line in iter_results(run_dir)}}  # type: ignore[dict-item]


@pytest.mark.slow
def test_a_suite_on_two_ranks_reports_world_size_and_every_rank(run_lines: dict) -> None:
    line = run_lines["set@0.5"]
    assert line["status"] == "ok" and line["world_size"] == 2
    ranks = line["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["device"] == "cpu" for r in ranks)
    # The case's segment is its slowest rank's; its memory the larger rank's.
    assert line["segment_ms"] == [max(a, b) for a, b in zip(ranks[0]["segment_ms"], ranks[1]["segment_ms"])]
    assert line["rss_peak_bytes"] == max(r["rss_peak_bytes"] for r in ranks)
    assert line["images_per_s"] == pytest.approx(2 * 8 * 3 / (line["median_ms"] / 1e3))
    # The ranks trained one model: same density, and updates happened within the timed segments.
    assert ranks[0]["density_achieved"] == ranks[1]["density_achieved"]
    assert line["topology_updates"] >= 2
    assert line["profile"] and "error" not in line["profile"]
    assert (run_lines["run_dir"] / line["profile"]["trace"]).exists()  # rank 0's; rank 1's beside it
    assert (run_lines["run_dir"] / "ranks" / "rank1" / line["profile"]["trace"]).exists()


@pytest.mark.slow
def test_a_failed_rank_fails_its_case_with_its_traceback_and_the_suite_goes_on(run_lines: dict) -> None:
    line = run_lines["fault_rank@0.5"]
    assert line["status"] == "error" and line["world_size"] == 2
    assert line["error"].startswith("rank 1 of 2 failed:")
    assert "Traceback" in line["error"] and "ValueError: injected failure on rank 1" in line["error"]
    assert run_lines["set@0.5"]["status"] == "ok"  # the next case ran


def result(rank: int, segment_ms: list[float], **fields) -> CaseResult:  # type: ignore[no-untyped-def]
    base = dict(suite="s", suite_hash="h", case_id="m@0.5", method="m", method_name="m", kind="masked",
                density=0.5, params={}, batch_size=8, segment_steps=3, loss=1.0 + rank)
    return CaseResult(**{**base, "segment_ms": segment_ms, "env": {"rank": rank}, **fields})


def test_merge_takes_the_slowest_rank_per_segment_and_the_largest_memory() -> None:
    merged = merge_ranks([
        result(1, [10.0, 30.0, 20.0], peak_memory_bytes=5, rss_peak_bytes=None),
        result(0, [20.0, 10.0, 25.0], peak_memory_bytes=7, rss_peak_bytes=3),
    ])
    assert merged.segment_ms == [20.0, 30.0, 25.0] and merged.median_ms == 25.0
    assert merged.peak_memory_bytes == 7 and merged.rss_peak_bytes == 3
    assert merged.loss == pytest.approx(1.5)  # the mean over ranks: the global batch's loss
    assert merged.world_size == 2 and [r["rank"] for r in merged.ranks] == [0, 1]
    assert merged.ranks[1]["segment_ms"] == [10.0, 30.0, 20.0]
    assert merged.images_per_s == pytest.approx(2 * 8 * 3 / 0.025)


def test_merge_sums_energy_only_when_every_rank_measured_it() -> None:
    energy = {"measured": True, "nvml_index": 0, "joules": 3.0, "seconds": 2.0, "steps": 6, "images": 48}
    both = merge_ranks([result(0, [1.0], energy=energy), result(1, [1.0], energy={**energy, "nvml_index": 1, "seconds": 3.0})])
    assert both.energy["joules"] == 6.0 and both.energy["images"] == 96 and both.energy["nvml_index"] == [0, 1]
    assert both.energy["mean_power_w"] == pytest.approx(2.0)
    one = merge_ranks([result(0, [1.0], energy=energy), result(1, [1.0], energy={"measured": False, "reason": "r"})])
    assert one.energy == energy


def test_the_first_failure_is_the_cause_whatever_the_rank_order() -> None:
    cause = result(1, [], status="error", error="ValueError: boom", env={"rank": 1, "finished_at": 5.0})
    echo = result(0, [], status="error", error="RuntimeError: Connection closed by peer", env={"rank": 0, "finished_at": 6.0})
    failed = first_failure([echo, cause], world_size=2)
    assert failed.error.startswith("rank 1 of 2 failed:\nValueError: boom") and "rank 0: error" in failed.error


def test_ranks_that_die_without_a_word_make_the_case_a_crash(tmp_path: Path) -> None:
    suite = parse_suite(micro_suite(launcher=TORCHRUN))
    [case] = expand_cases(suite)
    task = CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), str(tmp_path))
    (tmp_path / "torchrun.log").write_text("worker 1 received signal SIGKILL\n")
    write_json_atomic(rank_file(tmp_path, 0), result(0, [1.0]).to_dict())
    crashed = TorchrunLauncher(TorchrunConfig(**TORCHRUN)).collect(task, tmp_path, returncode=1)
    assert crashed.status == "crash" and "SIGKILL" in crashed.error and crashed.world_size == 2
    write_json_atomic(tmp_path / GATHERED, [result(r, [1.0]).to_dict() for r in (0, 1)])
    assert TorchrunLauncher(TorchrunConfig(**TORCHRUN)).collect(task, tmp_path, returncode=0).status == "ok"


def test_multi_node_command_takes_the_node_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = TorchrunConfig(nproc_per_node=4, nnodes=2, master_addr="a", master_port=1234)
    monkeypatch.setenv("DSTBENCH_NODE_RANK", "1")
    monkeypatch.setenv("DSTBENCH_MASTER_ADDR", "node-a")
    command = TorchrunLauncher(config).command(Path("t.json"), Path("w"))
    assert "--nnodes=2" in command and "--node_rank=1" in command and "--master_addr=node-a" in command
    assert "--master_port=1234" in command and "--nproc_per_node=4" in command
    assert "--standalone" in TorchrunLauncher(TorchrunConfig(nproc_per_node=2)).command(Path("t"), Path("w"))
