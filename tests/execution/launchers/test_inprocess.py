from __future__ import annotations

from dstbench.execution.launchers.factory import make_launcher
from dstbench.execution.launchers.inprocess.config import InProcessConfig
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.execution.launchers.inprocess.launcher import InProcessLauncher
from dstbench.execution.launchers.subprocess.launcher import SubprocessLauncher
from tests.execution.launchers.test_subprocess import task_for


def test_make_launcher_by_name() -> None:
    assert isinstance(make_launcher(InProcessConfig()), InProcessLauncher)
    launcher = make_launcher(SubprocessConfig(timeout_s=7))
    assert isinstance(launcher, SubprocessLauncher) and launcher.timeout_s == 7


def test_in_process_errors_become_statuses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    launcher = InProcessLauncher()
    assert launcher.run(task_for("fault_oom", tmp_path), lambda *a: None).status == "oom"
    result = launcher.run(task_for("fault_error", tmp_path), lambda *a: None)
    assert result.status == "error" and "Traceback" in result.error


def test_cases_side_by_side_in_one_process_leave_their_peaks_unmeasured(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # An interleaved group in one process: each case's RSS peak would be the group's.
    import yaml

    from dstbench.results.record import iter_results
    from dstbench.execution.orchestrator import run_suite
    from tests.conftest import micro_suite

    path = tmp_path / "s.yaml"
    for interleave in (True, False):
        suite = micro_suite(methods=["dense", "rigl"], densities=[0.5], reference="rigl",
                            timing={"warmup_steps": 1, "segment_steps": 2, "segments": 2, "interleave": interleave})
        path.write_text(yaml.safe_dump(suite))
        lines = list(iter_results(run_suite(path, out=tmp_path / f"runs{interleave}")))
        assert len(lines) == 2 and all(line["status"] == "ok" for line in lines)
        if interleave:
            assert all(line["rss_peak_bytes"] is None and any("beside other cases" in w for w in line["warnings"]) for line in lines)
        else:
            assert all(line["rss_peak_bytes"] is not None and not line.get("warnings") for line in lines)
