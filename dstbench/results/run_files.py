"""A run folder's files at the lowest level (names in `dstbench.util.files`): run.json typed, the
stored suite as plain data, the lock of the folder's one writer. Read through
`dstbench.results.run_folder.RunFolder`; the modules `RunFolder` itself reads through (the line
reader `dstbench.results.record`, seeds and sweep points `replicates`, `coverage`, time to target)
import from here.

Nothing here imports torch, so commands that only read results (report, compare, export) stay light.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import socket
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from dstbench.util.dirlock import FolderLock, held_by_another
from dstbench.util.nesting import too_deep
from dstbench.util.files import (
    LOCK_FILE, RESULTS_FILE, RUN_FILE, RUN_FILES, SUITE_FILE, open_no_follow, read_regular_text, regular_file_problem,
    write_atomic,
)


class RunDirError(Exception):
    """A folder that is not a usable run folder (exit code 2)."""


# The fields of run.json a reader relies on, with the JSON types each may have.
RUN_META_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "suite": (str,), "suite_hash": (str,), "suite_path": (str,), "created": (str,),
    "overrides": (dict,), "setup": (dict,), "cases": (list,), "selected": (list,), "interruptions": (list,),
    "resumes": (list,), "commit": (str, type(None)), "dirty": (bool, type(None)), "source": (str,), "point_hashes": (list,),
}


def _mistyped(meta: dict[str, Any]) -> list[str]:
    """The known fields of `meta` whose value has the wrong JSON type."""
    return [key for key, types in RUN_META_TYPES.items() if key in meta and not isinstance(meta[key], types)]


def load_run_meta(run_dir: str | Path, *, required: bool = False) -> dict[str, Any]:
    """`run.json` of a run folder, typed (`RUN_META_TYPES`). Missing or unreadable: `{}`; a field
    of the wrong type is left out. With `required` either is a `RunDirError` instead (a run that
    will be written to must not lose what its run.json held)."""
    path = Path(run_dir) / RUN_FILE
    try:
        meta = json.loads(read_regular_text(path))
    except FileNotFoundError:
        if required:
            raise RunDirError(f"{run_dir}: missing {RUN_FILE}") from None
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        if required:
            raise RunDirError(f"{path}: unreadable ({'nested too deeply' if isinstance(exc, RecursionError) else exc})") from None
        return {}
    if too_deep(meta):
        if required:
            raise RunDirError(f"{path}: unreadable ({too_deep(meta)})")
        return {}
    if not isinstance(meta, dict):
        if required:
            raise RunDirError(f"{path}: not a JSON object")
        return {}
    wrong = _mistyped(meta)
    if wrong and required:
        problems = "; ".join(
            f"{key} is {json.dumps(meta[key])[:40]}, not {' or '.join(t.__name__ for t in RUN_META_TYPES[key])}" for key in wrong
        )
        raise RunDirError(f"{path}: damaged ({problems}); restore it, or start a new run")
    for key in wrong:
        del meta[key]
    return meta


def write_run_meta(run_dir: str | Path, meta: dict[str, Any]) -> None:
    """Write run.json whole (a run folder's first): a rename, so a link at run.json is replaced,
    never followed."""
    write_atomic(Path(run_dir) / RUN_FILE, json.dumps(meta, indent=2) + "\n")


def update_run_meta(
    run_dir: str | Path, change: Callable[[dict[str, Any]], None], *, required: bool = True
) -> dict[str, Any]:
    """Read run.json, let `change` edit it, write it back (`write_run_meta`): the one way run.json
    changes after it is written. Call it holding the folder's `RunLock` (the one writer). With
    `required`, a missing or damaged run.json is a `RunDirError`, never rewritten with its other
    fields lost. Returns what was written."""
    meta = load_run_meta(run_dir, required=required)
    change(meta)
    write_run_meta(run_dir, meta)
    return meta


def require_results(run_dirs: Iterable[str | Path], *, finished: bool = False) -> list[Path]:
    """The folders as paths; `RunDirError` naming every one without a `results.jsonl`, and with
    `finished` every one a run is still writing (compare, publish and export judge or copy a run
    whose lines are final)."""
    paths = [Path(d) for d in run_dirs]
    # A FIFO or a device where a run file belongs would block its reader forever: refused unopened.
    irregular = [problem for p in paths for name in RUN_FILES if (problem := regular_file_problem(p / name))]
    if irregular:
        raise RunDirError("; ".join(irregular))
    missing = [str(p) for p in paths if not (p / RESULTS_FILE).is_file()]
    if missing:
        raise RunDirError(f"no {RESULTS_FILE} in: {', '.join(missing)}")
    writing = [text for p in paths if finished and (text := still_being_written(p))]
    if writing:
        raise RunDirError("; ".join(writing) + ": wait for it to finish (or stop it), then try again")
    return paths


def setup_without_seed(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A run's recorded setup (run.json's `setup`, what the suite hash is made of) less its seed:
    two runs with equal ones ran the same cases, trained from other seeds. None when not recorded."""
    setup = meta.get("setup")
    return {k: v for k, v in setup.items() if k != "seed"} if isinstance(setup, dict) else None


def stored_suite(run_dir: str | Path) -> dict[str, Any]:
    """The suite a run folder keeps, as plain data, read without validation (no torch, no data);
    {} when unreadable."""
    try:
        data = yaml.safe_load(read_regular_text(Path(run_dir) / SUITE_FILE))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_target(run_dir: str | Path) -> float | None:
    """The `accuracy.target_top1` of the suite a run folder keeps, validated as the suite schema
    validates it (`AccuracyConfig`: 0 < t <= 1); None where unset or invalid. The stored suite is the
    one the run (or its last resume, whose `--set` changes it) was validated as, so the target read
    here is today's: resolved when read, never frozen into the lines."""
    from pydantic import ValidationError

    from dstbench.suite.schema_sections import AccuracyConfig

    accuracy = stored_suite(run_dir).get("accuracy")
    try:
        return AccuracyConfig.model_validate(accuracy if isinstance(accuracy, dict) else {}).target_top1
    except ValidationError:
        return None


def run_reference(run_dir: str | Path) -> str | None:
    """The `reference:` of the suite a run was made from. The stored suite was validated with every
    default filled in, so its `reference` key is the one the run used."""
    reference = stored_suite(run_dir).get("reference")
    return str(reference) if reference else None


class RunLock:
    """The one writer of a run folder: an exclusive `flock` on the run folder itself
    (`dstbench.util.dirlock`), so deleting a file cannot let a second writer in; `RUN_DIR/.lock`
    records who holds it (pid, host, start) for the message a second writer gets. The kernel drops
    the lock when its holder dies however it dies, so a lock file left by a dead process is simply
    taken over. `RunDirError` (exit 2) names the holder when another process has it."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.path = Path(run_dir) / LOCK_FILE if run_dir is not None else None
        self._folder: FolderLock | None = None

    def acquire(self, run_dir: str | Path | None = None) -> "RunLock":
        """Take the lock of `run_dir` (default: the folder given at construction)."""
        if run_dir is not None:
            self.path = Path(run_dir) / LOCK_FILE
        if self.path is None:
            raise ValueError("RunLock.acquire: no run folder given")
        folder = FolderLock(self.path.parent)
        if not folder.acquire():
            raise RunDirError(
                f"{self.path.parent} is being written by another dstbench run ({lock_holder(self.path.parent)}); "
                "wait for it to finish or stop it, then resume"
            )
        try:
            # Non-blocking: a FIFO planted as .lock fails to open (no reader) instead of waiting.
            fd = open_no_follow(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK)
        except OSError as exc:
            folder.release()
            if exc.errno == errno.ELOOP:
                raise RunDirError(f"{self.path} is a symbolic link: dstbench never writes through one; remove it") from None
            problem = regular_file_problem(self.path)
            if problem:
                raise RunDirError(f"{problem}; remove it") from None
            raise
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}) + "\n")
        self._folder = folder
        return self

    def release(self) -> None:
        if self._folder is not None:
            self._folder.release()  # the .lock file stays, free for the next run
            self._folder = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(run_dir: str | Path) -> str:
    """Who holds a run folder's lock, as its .lock file says ("unknown" when it says nothing)."""
    try:
        fd = open_no_follow(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return "unknown"
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as handle:
        text = handle.read(500).strip() if os.fstat(handle.fileno()).st_size < 4096 else ""
    return _describe_holder(text) if text else "unknown"


def still_being_written(run_dir: str | Path) -> str:
    """The sentence readers print for a run folder another process is writing (its writer lock held:
    "... (pid N on HOST, since T)"), '' when none is."""
    if not held_by_another(run_dir):
        return ""
    return f"{run_dir} is still being written by a dstbench run ({lock_holder(run_dir)})"


def _describe_holder(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on {holder['host']}, since {holder['started']}"
    except (ValueError, KeyError, TypeError, RecursionError):
        return text[:200]
