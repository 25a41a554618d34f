"""The environment record: the dstbench source's own git state (never an enclosing repository's),
settings that change numerics, plugin versions, and torch's collect_env report per run folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from dstbench.measure import environment as env


@pytest.fixture(autouse=True)
def fresh_git_state():  # type: ignore[no-untyped-def]
    env.git_state.cache_clear()
    yield
    env.git_state.cache_clear()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_git_state_of_this_checkout_has_branch_and_commit_time(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in env.GIT_ENV.values():
        monkeypatch.delenv(name, raising=False)
    assert (env.SOURCE_ROOT / "dstbench" / "__init__.py").is_file()  # the folder holding the package
    state = env.git_state()
    if not (env.SOURCE_ROOT / ".git").exists():
        assert state["commit"] is None and state["source"] == "not a git checkout"
        pytest.skip("dstbench does not run from a git checkout here")
    assert state["commit"] == _git(env.SOURCE_ROOT, "rev-parse", "HEAD") and state["source"] == "git checkout"
    assert state["commit_time"] == _git(env.SOURCE_ROOT, "show", "-s", "--format=%cI", "HEAD")
    assert isinstance(state["dirty"], bool)


def test_an_enclosing_repository_is_not_dstbench_s_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dstbench installed in a virtual environment inside another project's repository."""
    for name in env.GIT_ENV.values():
        monkeypatch.delenv(name, raising=False)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "other project")
    site = tmp_path / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(env, "SOURCE_ROOT", site)
    assert env.git_state() == {"commit": None, "branch": None, "commit_time": None, "dirty": None, "source": "not a git checkout"}


def test_a_run_records_the_commit_of_its_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A temporary repository holding a `dstbench` folder stands for a checkout: a new run's run.json
    records its commit and whether the tree was dirty."""
    from dstbench.execution.orchestrator import write_run_files
    from dstbench.suite.loading import parse_suite
    from tests.conftest import micro_suite

    for name in env.GIT_ENV.values():
        monkeypatch.delenv(name, raising=False)
    repo = tmp_path / "checkout"
    (repo / "dstbench").mkdir(parents=True)
    (repo / "dstbench" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "dstbench")
    monkeypatch.setattr(env, "SOURCE_ROOT", repo.resolve())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run_files(run_dir, parse_suite(micro_suite(), "s.yaml"), Path("s.yaml"))
    import json

    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["commit"] == _git(repo, "rev-parse", "HEAD") and meta["dirty"] is False and meta["source"] == "git checkout"
    (repo / "dstbench" / "__init__.py").write_text("changed = True\n")
    env.git_state.cache_clear()
    assert env.git_state()["dirty"] is True
    monkeypatch.setattr(env, "SOURCE_ROOT", (tmp_path / "elsewhere").resolve())
    env.git_state.cache_clear()
    assert env.git_state()["source"] == "not a git checkout"


def test_the_environment_variables_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """What docker/Dockerfile sets from its build arguments."""
    monkeypatch.setenv("DSTBENCH_GIT_COMMIT", "f" * 40)
    monkeypatch.setenv("DSTBENCH_GIT_BRANCH", "main")
    monkeypatch.setenv("DSTBENCH_GIT_COMMIT_TIME", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("DSTBENCH_GIT_DIRTY", "0")
    assert env.git_state() == {"commit": "f" * 40, "branch": "main", "commit_time": "2026-01-01T00:00:00+00:00", "dirty": False,
                               "source": "DSTBENCH_GIT_* variables"}


@pytest.mark.parametrize("number, text", [(8902, "8.9.2"), (90100, "9.1.0"), (91002, "9.10.2")])
def test_cudnn_version_is_readable(number: int, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: number)
    assert env.cudnn_version() == text


def test_a_cpu_record_has_numerics_and_memory_but_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    record = env.static_env(torch.device("cpu"))
    assert record["cuda"] is None and record["cudnn"] is None
    assert record["ram_bytes"] > 2**20 and record["gpu_count"] == torch.cuda.device_count()
    assert record["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert {"cuda_matmul_allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark"} <= set(record)
    assert record["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert {"branch", "commit_time"} <= set(record)


def test_plugin_versions_by_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    versions = env.plugin_versions(["tests.execution.launchers.fault_methods", "timm.models"])
    assert versions == {"tests.execution.launchers.fault_methods": None, "timm.models": importlib.metadata.version("timm")}


@pytest.mark.slow
def test_collect_env_report_is_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.COLLECT_ENV_SWITCH, "0")
    assert env.start_collect_env(tmp_path) is None  # switched off (the test suite's runs)
    monkeypatch.delenv(env.COLLECT_ENV_SWITCH)
    process = env.start_collect_env(tmp_path)
    assert process is not None
    env.finish_collect_env(process, timeout_s=120)
    text = (tmp_path / env.COLLECT_ENV_FILE).read_text()
    assert f"PyTorch version: {torch.__version__}" in text
    assert env.start_collect_env(tmp_path) is None  # a resumed run keeps the first report


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_record_names_its_card() -> None:
    record = env.static_env(torch.device("cuda", 0))
    assert record["gpu_uuid"].startswith("GPU-") and len(record["gpu_uuid"]) > 10
