"""Every shell command and Python snippet in README.md and docs/ runs, so the manual cannot rot.

The rules (also in docs/testing.md, for readers of the manual):

- One test per page. Its blocks run in order in a fresh workspace holding copies of `suites/` and
  `reports/`, so a page reads committed runs by the paths it names and writes nothing into the
  checkout; what a block leaves (a run folder, a Python name) is there for the next.
- `bash` blocks: `dstbench ...` and `python -m dstbench ...` run in this process through
  `dstbench.cli.main(argv)` (importing torch once, not per command), with globs expanded and
  `VAR=value` prefixes set; each must exit 0, or the code an `exit N` marker names. `mv`, `cp`,
  `rm`, `rmdir`, `mkdir` and `pytest-benchmark` run as programs. Anything else needs a skip marker.
- `python` blocks run with `exec`; a page's blocks share one namespace. Methods, trackers, launcher
  configs and report sections they register are unregistered after the page. A block whose one line is
  `--8<-- "PATH"` runs the repository's file PATH (the site shows it there).
- `yaml` blocks parse, and a whole suite among them (`name` and `methods`) passes the schema;
  `toml` blocks parse; `text` blocks are not run.
- Speed-up: `dstbench run` / `dstbench profile` of a suite and `dstbench.run_suite` get SPEED_UP
  (1 warm-up step, 2 one-step segments, 1 process set, 1 epoch, 1 thread, the inprocess launcher
  unless the command sets a launcher key, no `expect:` gates); `dry-run` markers replace it with
  `--dry-run` (suites that need a GPU or a cluster); `append` markers add arguments after it.
- Skips need a reason from `doc_blocks.SKIP_REASONS` (installs packages, needs a GPU, ...).
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.docs.doc_blocks import (
    PARSED, PYTHON, ROOT, SHELL, Block, Command, DocsRuleError, doc_pages, page_blocks, shell_commands,
)

# Suite keys set on every suite run from the docs: the run still builds, trains, times, counts and
# reports every case it selects, in seconds instead of minutes.
SPEED_UP: dict[str, Any] = {
    "timing.warmup_steps": 1,
    "timing.segment_steps": 1,
    "timing.segments": 2,
    "timing.processes": 1,
    "timing.settle_segments": 0,
    "accuracy.epochs": 1,
    "accuracy.warmup_epochs": 0,
    "threads": 1,
    # A speedup over two one-step segments gates nothing; the gates are tested with real runs.
    "expect": [],
}
PROFILE_SPEED_UP = {"profile.steps": 1, "profile.max_advance_steps": 0}
IN_PROCESS = {"launcher.name": "inprocess"}
PROGRAMS = ("mv", "cp", "rm", "rmdir", "mkdir", "pytest-benchmark")
PAGES = doc_pages()
# A block that trains a suite or renders an HTML report or site takes seconds (a page of them up to
# 30 s on 2 cores): its page runs under `-m slow`, the others in the default selection.
TRAINS_OR_RENDERS = re.compile(r"\bdstbench\s+(run|profile|publish)\s|--html\b|\brun_suite\(|\breport\(\s*html")


def trains_or_renders(page: Path) -> bool:
    """Whether a block of `page` that runs (not skipped, not a dry run) trains or renders."""
    try:
        blocks = page_blocks(page)
    except DocsRuleError:
        return False  # the page's own test says what is wrong with it
    return any(TRAINS_OR_RENDERS.search(b.code) for b in blocks if not (b.marker and b.marker.kind in ("skip", "dry-run")))


def speed_up(command: str, sets_launcher: bool) -> dict[str, Any]:
    """The overrides a suite run from the docs gets (`command`: run or profile)."""
    overrides = dict(SPEED_UP)
    if command == "profile":
        overrides.update(PROFILE_SPEED_UP)
    if not sets_launcher:
        overrides.update(IN_PROCESS)
    return overrides


def _as_set_arguments(overrides: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in overrides.items():
        out += ["--set", f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"]
    return out


def dstbench_argv(command: Command, block: Block) -> list[str] | None:
    """The arguments `dstbench.cli.main` gets for a command of the docs, None when it is no
    dstbench command."""
    argv = list(command.argv)
    if argv[:1] == ["dstbench"]:
        argv = argv[1:]
    elif argv[:3] in (["python", "-m", "dstbench"], ["python3", "-m", "dstbench"]):
        argv = argv[3:]
    else:
        return None
    argv = [match for arg in argv for match in _expand(arg)]
    if argv[:1] in (["run"], ["profile"]) and "--help" not in argv:
        marker = block.marker
        if marker is not None and marker.kind == "dry-run":
            return argv + ["--dry-run"] if argv[0] == "run" else argv
        if "--dry-run" not in argv:
            sets_launcher = any(arg.startswith("launcher") for arg in argv)
            argv += _as_set_arguments(speed_up(argv[0], sets_launcher))
        if marker is not None and marker.kind == "append":
            argv += list(marker.append)
    return argv


def _expand(arg: str) -> list[str]:
    """An argument as the shell would pass it: glob matches, sorted, or the argument itself."""
    if not any(ch in arg for ch in "*?["):
        return [arg]
    return sorted(glob.glob(arg)) or [arg]


def run_dstbench(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`dstbench.cli.main(argv)` in this process, with `env` set; its exit code and output."""
    from dstbench.cli import main

    output = io.StringIO()
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: --help (0), a usage error (2)
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return code, output.getvalue()


def run_shell_block(block: Block) -> None:
    expected = block.marker.exit_code if block.marker is not None and block.marker.kind == "exit" else 0
    for command in shell_commands(block.code, block.where):
        argv = dstbench_argv(command, block)
        if argv is not None:
            code, output = run_dstbench(argv, command.env)
            if code != expected:
                pytest.fail(f"{block.where}: `{command.text}` exited {code}, not {expected}\n"
                            f"ran: dstbench {' '.join(argv)}\n{output[-4000:]}")
            continue
        if command.argv[0] not in PROGRAMS:
            pytest.fail(f"{block.where}: `{command.text}`: the docs tests run dstbench, python -m dstbench and "
                        f"{', '.join(PROGRAMS)}; mark this block skip with a reason (docs/testing.md)")
        args = [match for arg in command.argv for match in _expand(arg)]
        done = subprocess.run(args, env={**os.environ, **command.env}, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            pytest.fail(f"{block.where}: `{command.text}` exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def run_python_block(block: Block, module: types.ModuleType) -> None:
    try:
        exec(compile(block.code, block.where, "exec"), module.__dict__)
    except Exception as exc:  # the snippet's own error, named with its place in the docs
        raise AssertionError(f"{block.where}: the snippet raised {type(exc).__name__}: {exc}") from exc


def check_parsed_block(block: Block) -> None:
    if block.language == "toml":
        tomllib.loads(block.code)
        return
    data = yaml.safe_load(block.code)
    if isinstance(data, dict) and "name" in data and "methods" in data:
        from dstbench.suite.loading import parse_suite

        parse_suite(data, block.where, check_files=False)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with copies of suites/ and reports/, as the working directory; the method, tracker,
    launcher-config and report-section registries as they were before, once the page is done."""
    from dstbench.dst import registry
    from dstbench.execution.launchers import config as launcher_configs
    from dstbench.measure.trackers import registry as trackers
    from dstbench.methods import ensure_loaded
    from dstbench.report import sections

    for folder in ("suites", "reports"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    # Load what registers itself once per process before taking the copies that are restored.
    ensure_loaded()
    sections.load_section_modules()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(sections, "_SECTIONS", dict(sections._SECTIONS))
    monkeypatch.setattr(trackers, "_REGISTRY", dict(trackers._REGISTRY))
    monkeypatch.setattr(launcher_configs, "_CONFIGS", dict(launcher_configs._CONFIGS))
    yield tmp_path


@pytest.fixture
def fast_run_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dstbench.run_suite` with the speed-up merged into its `overrides`."""
    import dstbench
    import dstbench.api

    original = dstbench.api.run_suite

    def run_suite(suite: Any, out: Any = "runs", *, overrides: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        sets_launcher = any(key.startswith("launcher") for key in overrides or {})
        return original(suite, out, overrides={**(overrides or {}), **speed_up("run", sets_launcher)}, **kwargs)

    # `dstbench.run_suite` is looked up in `dstbench.api` on each use (the package's __getattr__):
    # patching the package too would read the patched function as its old value, and leave it there.
    monkeypatch.setattr(dstbench.api, "run_suite", run_suite)
    assert "run_suite" not in vars(dstbench)


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=[pytest.mark.slow] if trains_or_renders(p) else []) for p in PAGES],
    ids=[str(p.relative_to(ROOT)) for p in PAGES],
)
def test_page_examples_run(page: Path, workspace: Path, fast_run_suite: None) -> None:
    blocks = page_blocks(page)
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    sys.modules[module.__name__] = module  # dataclasses and the registry look classes up by module
    try:
        for block in blocks:
            if block.marker is not None and block.marker.kind == "skip":
                continue
            if block.language in SHELL:
                run_shell_block(block)
            elif block.language in PYTHON:
                run_python_block(block, module)
            elif block.language in PARSED:
                check_parsed_block(block)
    finally:
        sys.modules.pop(module.__name__, None)


def test_every_page_follows_the_block_rules() -> None:
    """Markers, languages and shell syntax of every page, without running anything."""
    problems = []
    for page in PAGES:
        try:
            for block in page_blocks(page):
                if block.language in SHELL and not (block.marker and block.marker.kind == "skip"):
                    shell_commands(block.code, block.where)
        except DocsRuleError as exc:
            problems.append(str(exc))
    assert problems == []


def test_readme_keeps_its_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    smoke = "pip install -e . && dstbench run suites/cpu_smoke.yaml --html runs/cpu_smoke.html"
    tests = 'pip install -e ".[dev]" && python -m pytest -q'
    assert smoke in readme and tests in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]"\npython -m pytest -q' in ci


@pytest.mark.parametrize("text, problem", [
    ("<!-- docs-test: skip (because) -->", "skip reason"),
    ("<!-- docs-test: skip -->", "needs a reason"),
    ("<!-- docs-test: exit (why) -->", "needs an exit code"),
    ("<!-- docs-test: later (why) -->", "unknown docs-test marker"),
])
def test_markers_without_an_allowed_reason_are_refused(text: str, problem: str) -> None:
    from tests.docs.doc_blocks import parse_marker

    with pytest.raises(DocsRuleError, match=problem):
        parse_marker(text, "page.md:1")


def test_unsupported_shell_and_unmarked_programs_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\necho hi | cat\n```\n", encoding="utf-8")
    with pytest.raises(DocsRuleError, match="not run"):
        shell_commands("echo hi | cat\n", "page.md:1")
    block = Block("page.md", 1, "bash", "git status\n", None)
    with pytest.raises(pytest.fail.Exception, match="mark this block skip"):
        run_shell_block(block)


def test_a_failing_command_fails_its_page(workspace: Path) -> None:
    block = Block("page.md", 1, "bash", "dstbench check runs/missing\n", None)
    with pytest.raises(pytest.fail.Exception, match="exited 2, not 0"):
        run_shell_block(block)
    block = Block("page.md", 1, "python", "raise ValueError('broken snippet')\n", None)
    with pytest.raises(AssertionError, match="broken snippet"):
        run_python_block(block, types.ModuleType("docs_probe"))


def test_the_speed_up_reaches_every_suite_run() -> None:
    block = Block("page.md", 1, "bash", "", None)
    argv = dstbench_argv(Command({}, ("dstbench", "run", "suites/cpu_smoke.yaml", "--out", "runs"), ""), block)
    assert argv is not None and "timing.segments=2" in argv and "launcher.name=inprocess" in argv and "expect=[]" in argv
    argv = dstbench_argv(Command({}, ("dstbench", "run", "s.yaml", "--set", "launcher.parallel=2"), ""), block)
    assert argv is not None and "launcher.name=inprocess" not in argv
    argv = dstbench_argv(Command({}, ("python", "-m", "dstbench", "profile", "s.yaml"), ""), block)
    assert argv is not None and "profile.max_advance_steps=0" in argv
    assert dstbench_argv(Command({}, ("dstbench", "report", "r"), ""), block) == ["report", "r"]
    assert dstbench_argv(Command({}, ("git", "status"), ""), block) is None
