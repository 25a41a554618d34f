"""Each fault becomes its status in a fresh process, and the launcher outlives it."""

from __future__ import annotations

import pytest

from dstbench.suite.plan import expand_cases
from dstbench.execution.launchers.subprocess.launcher import SubprocessLauncher
from dstbench.execution.case_session import CaseTask
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite
from tests.execution.launchers.fault_methods import PLUGIN


def task_for(method: str, tmp_path) -> CaseTask:  # type: ignore[no-untyped-def]
    suite = parse_suite(micro_suite(plugins=[PLUGIN], methods=[method], densities=[0.5]))
    [case] = expand_cases(suite)
    return CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), str(tmp_path))


@pytest.mark.parametrize(
    "method, status, fragment",
    [
        ("fault_oom", "oom", "OutOfMemoryError"),
        ("fault_error", "error", "ValueError: injected failure"),
        ("fault_crash", "crash", "killed by signal SIGKILL"),
        ("fault_hang", "timeout", "exceeded its timeout of 3 s"),
    ],
)
@pytest.mark.slow
def test_fault_statuses(method: str, status: str, fragment: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Only the hanging case may time out; the others get time for the fork server's first start.
    timeout = 3 if status == "timeout" else 300
    result = SubprocessLauncher(timeout_s=timeout).run(task_for(method, tmp_path), lambda *a: None)
    assert result.status == status
    assert fragment in result.error
    assert result.case_id == f"{method}@0.5" and result.method == method


def test_a_healthy_case_reports_progress_from_its_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seen = []
    result = SubprocessLauncher(timeout_s=120).run(task_for("dense", tmp_path), lambda *a: seen.append(a))
    assert result.status == "ok" and result.median_ms > 0
    assert ("segment", 3, 3) in seen and ("warmup", 2, 2) in seen
