"""The run folder: what `dstbench run` writes and every other command reads.

    RUN_DIR/suite.yaml      the suite as validated, every default filled in
    RUN_DIR/run.json        when, where and from which commit the run started
    RUN_DIR/results.jsonl   one line per finished case
    RUN_DIR/.lock           held (flock) by the one `dstbench run` writing the folder

The file names and the checks on them live here only. Nothing here imports torch, so commands that
only read results (report, compare, export) stay light.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import Any, Iterable, TextIO

import yaml

SUITE_FILE = "suite.yaml"
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
LOCK_FILE = ".lock"
RUN_FILES = (RESULTS_FILE, SUITE_FILE, RUN_FILE)


class RunDirError(Exception):
    """A folder that is not a usable run folder (exit code 2)."""


def slug(text: str, default: str = "run") -> str:
    """`text` as a file or folder name: runs of other characters become "-", no leading or trailing
    "-" or "." (so never "." or ".."). Case ids keep their "@" (`rigl@0.1`)."""
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "-", text).strip("-.") or default


def load_run_meta(run_dir: str | Path, *, required: bool = False) -> dict[str, Any]:
    """`run.json` of a run folder. Missing or unreadable: `{}`, or `RunDirError` when `required`."""
    path = Path(run_dir) / RUN_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise RunDirError(f"{run_dir}: missing {RUN_FILE}") from None
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        if required:
            raise RunDirError(f"{path}: unreadable ({exc})") from None
        return {}
    if not isinstance(meta, dict):
        if required:
            raise RunDirError(f"{path}: not a JSON object")
        return {}
    return meta


def require_results(run_dirs: Iterable[str | Path]) -> list[Path]:
    """The folders as paths; `RunDirError` naming every one without a `results.jsonl`."""
    paths = [Path(d) for d in run_dirs]
    missing = [str(p) for p in paths if not (p / RESULTS_FILE).is_file()]
    if missing:
        raise RunDirError(f"no {RESULTS_FILE} in: {', '.join(missing)}")
    return paths


def is_stored_suite(path: str | Path) -> bool:
    """Whether `path` is the `suite.yaml` a run folder keeps (a `run.json` beside it), as opposed to
    a suite file someone wrote."""
    path = Path(path)
    return path.name == SUITE_FILE and (path.parent / RUN_FILE).exists()


def run_reference(run_dir: str | Path) -> str | None:
    """The `reference:` of the suite a run was made from. The stored suite was validated with every
    default filled in, so its `reference` key is the one the run used; reading it needs neither
    validation nor torch."""
    try:
        data = yaml.safe_load((Path(run_dir) / SUITE_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    reference = data.get("reference") if isinstance(data, dict) else None
    return str(reference) if reference else None


def write_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file beside it and a rename: readers see the old
    file or the whole new one, and a failed write (disk full) leaves no empty or partial file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a published page from a web server
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def make_unique_dir(parent: Path, base: str) -> Path:
    """Create and return `parent/base`, or `parent/base-2`, `-3`, ... when taken. Creation itself
    claims the name (mkdir fails on an existing folder), so concurrent runs never share one."""
    parent.mkdir(parents=True, exist_ok=True)
    suffix = 1
    while True:
        path = parent / (base if suffix == 1 else f"{base}-{suffix}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            suffix += 1


class RunLock:
    """The one writer of a run folder: an exclusive `flock` on `RUN_DIR/.lock`, which also records
    who holds it (pid, host, start). The kernel drops the lock when its holder dies however it
    dies, so a lock file left by a dead process is simply taken over. `RunDirError` (exit 2) names
    the holder when another process has it."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.path = Path(run_dir) / LOCK_FILE if run_dir is not None else None
        self._handle: TextIO | None = None

    def acquire(self, run_dir: str | Path | None = None) -> "RunLock":
        """Take the lock of `run_dir` (default: the folder given at construction)."""
        import fcntl

        if run_dir is not None:
            self.path = Path(run_dir) / LOCK_FILE
        if self.path is None:
            raise ValueError("RunLock.acquire: no run folder given")
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(500).strip() or "unknown"
            handle.close()
            raise RunDirError(
                f"{self.path.parent} is being written by another dstbench run ({_describe_holder(holder)}); "
                "wait for it to finish or stop it, then resume"
            ) from None
        except OSError:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}) + "\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing drops the flock; the file stays, free for the next run
            self._handle = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _describe_holder(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']}, since {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return text[:200]


def output_file_problem(path: str | Path, option: str) -> str | None:
    """Why `path` cannot be written as an output file (it is a folder, or a file stands where a
    folder of it would be created), checked before a run so that its report is not lost after it."""
    path = Path(path)
    if path.is_dir():
        return f"{option}: {path} is a folder; name a file"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{option}: {parent} is a file, not a folder"
    return None
