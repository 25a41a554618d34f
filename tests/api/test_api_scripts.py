"""`dstbench.run_suite` where Python users call it: a script with no `if __name__ == "__main__":`
guard, the same code on standard input, `python -c`, and the guarded form. Each starts a Python
process whose run starts case processes (the subprocess launcher), which must never run the
caller's script again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import micro_suite

REPO = Path(__file__).resolve().parents[2]

RUN = """import dstbench

run = dstbench.run_suite({suite!r}, out={out!r})
print("STATUSES", sorted(run.frame()["status"]))
"""


def program(tmp_path: Path, guarded: bool) -> str:
    suite = tmp_path / "micro.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(methods=["dense", "static"], launcher={"name": "subprocess"})))
    code = RUN.format(suite=str(suite), out=str(tmp_path / "runs"))
    if guarded:
        code = 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in code.splitlines())
    return code


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["script", "stdin", "command", "guarded script"])
def test_run_suite_from_a_script_stdin_and_command_runs_every_case_once(tmp_path: Path, entry: str) -> None:
    code = program(tmp_path, guarded=entry == "guarded script")
    script = tmp_path / "bench.py"
    script.write_text(code, encoding="utf-8")
    argv, stdin = {
        "script": ([sys.executable, str(script)], None),
        "guarded script": ([sys.executable, str(script)], None),
        "stdin": ([sys.executable, "-"], code),
        "command": ([sys.executable, "-c", code], None),
    }[entry]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, input=stdin, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    # Only what the script prints, once: a case process that ran the script again would start the
    # run again (and crash); dstbench itself writes nothing to stdout.
    assert done.stdout.splitlines() == ["STATUSES ['ok', 'ok']"], done.stderr[-3000:]
    assert "bootstrapping phase" not in done.stderr  # multiprocessing's "safe importing of main module" error


@pytest.mark.slow
def test_run_suite_in_a_fresh_jupyter_kernel_runs_every_case(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(program(tmp_path, guarded=False))])
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    printed = "".join(out.get("text", "") for out in notebook.cells[0].outputs if out.get("name") == "stdout")
    assert printed.splitlines() == ["STATUSES ['ok', 'ok']"], notebook.cells[0].outputs
