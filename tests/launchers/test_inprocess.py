from __future__ import annotations

from dstbench.launchers import make_launcher
from dstbench.config import LauncherConfig
from dstbench.launchers.inprocess import InProcessLauncher
from dstbench.launchers.subprocess import SubprocessLauncher
from tests.launchers.test_subprocess import task_for


def test_make_launcher_by_name() -> None:
    assert isinstance(make_launcher(LauncherConfig(name="inprocess")), InProcessLauncher)
    launcher = make_launcher(LauncherConfig(name="subprocess", timeout_s=7))
    assert isinstance(launcher, SubprocessLauncher) and launcher.timeout_s == 7


def test_in_process_errors_become_statuses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    launcher = InProcessLauncher()
    assert launcher.run(task_for("fault_oom", tmp_path), lambda *a: None).status == "oom"
    result = launcher.run(task_for("fault_error", tmp_path), lambda *a: None)
    assert result.status == "error" and "Traceback" in result.error
