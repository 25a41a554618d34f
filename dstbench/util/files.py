"""Files as dstbench writes them: the run folder's file names, names made safe for a file system,
atomic writes, unique folders, and the check an output path gets before a run.

The run folder's files (read in `dstbench.results.run_folder`, at the lowest level and locked in `dstbench.results.run_files`):

    RUN_DIR/suite.yaml      the suite as validated, every default filled in
    RUN_DIR/run.json        when, where and from which commit the run started
    RUN_DIR/results.jsonl   one line per finished case
    RUN_DIR/.lock           held (flock) by the one `dstbench run` writing the folder
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable, TextIO

SUITE_FILE = "suite.yaml"
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
LOCK_FILE = ".lock"
RUN_FILES = (RESULTS_FILE, SUITE_FILE, RUN_FILE)


def slug(text: str, default: str = "run") -> str:
    """`text` as a file or folder name: runs of other characters become "-", no leading or trailing
    "-" or "." (so never "." or ".."). Case ids keep their "@" (`rigl@0.1`)."""
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "-", text).strip("-.") or default


def write_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file beside it and a rename: readers see the old
    file or the whole new one, and a failed write (disk full) leaves no empty or partial file."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise named(exc, path) from None
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a published page from a web server
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise named(exc, path) from None  # a full disk: say which file it was writing
        raise
    return path


def named(exc: OSError, path: str | Path) -> OSError:
    """`exc` with `path` as its file name when it names none (a write to an open file, a full disk,
    raises one without), so the one-line error says which file failed."""
    if exc.filename:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))  # OSError picks the subclass from errno


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


def is_run_folder(folder: str | Path) -> bool:
    """A folder holding results.jsonl, or run.json beside suite.yaml (a run that has no line yet);
    a lone run.json may be another tool's file."""
    folder = Path(folder)
    return folder.is_dir() and (
        os.path.lexists(folder / RESULTS_FILE) or os.path.lexists(folder / RUN_FILE) and os.path.lexists(folder / SUITE_FILE)
    )


def run_folder_of(path: str | Path) -> Path | None:
    """The run folder (`is_run_folder`) `path` is or lies in, links followed; None when none."""
    real = Path(os.path.realpath(path))
    return next((folder for folder in (real, *real.parents) if is_run_folder(folder)), None)


def is_within(path: str | Path, folder: str | Path) -> bool:
    """`path` is `folder` or lies inside it, links followed on both sides."""
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return real == root or root in real.parents


def output_place_problem(path: str | Path, option: str, inputs: Iterable[str | Path] = ()) -> str | None:
    """Why an output (file or folder) may not go to `path`: it is, or is inside, a run folder given
    as input or any run folder (its own files would be overwritten or mixed with a report)."""
    for folder in inputs:
        if is_within(path, folder):
            return f"{option}: {path} is inside the input run folder {folder}; write it outside the run folder"
    folder = run_folder_of(path)
    if folder is not None:
        return f"{option}: {path} is inside the run folder {folder}; write it outside the run folder"
    return None


def output_file_problem(path: str | Path, option: str, inputs: Iterable[str | Path] = ()) -> str | None:
    """Why `path` cannot be written as an output file (it is a folder, a file stands where a folder
    of it would be created, or it is inside a run folder: `output_place_problem`), checked before
    anything runs, so that no input is overwritten and no report is lost after a run."""
    path = Path(path)
    if path.is_dir():
        return f"{option}: {path} is a folder; name a file"
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{option}: {parent} is a file, not a folder"
            problem = _unwritable(parent)
            if problem:
                return f"{option}: cannot write into {parent} ({problem})"
            break
    return output_place_problem(path, option, inputs)


def _unwritable(folder: Path) -> str | None:
    """Why a file cannot be created in `folder` (read-only, no permission), found by creating and
    removing one: the only test that holds for root and read-only file systems alike."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dstbench-probe.", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


class NotRegularFile(OSError):
    """A run file that is a FIFO, a device or a folder: reading it could block forever."""


def regular_file_problem(path: str | Path) -> str | None:
    """"PATH: not a regular file (a FIFO)" when `path` exists (through links) and is not a regular
    file; None for a regular file or nothing there. Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
    return f"{path}: not a regular file ({kind}); a run file must be one"


def _regular_fd(path: str | Path) -> int:
    """A read-only descriptor of `path`, opened without blocking (a FIFO would wait for a writer
    forever) and refused (`NotRegularFile`) unless the open file is regular, so nothing can swap it
    between the check and the read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(regular_file_problem(path) or f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str | Path, errors: str = "strict") -> TextIO:
    """`path` opened for reading as UTF-8 text, refused (`NotRegularFile`) unless it is a regular
    file (`_regular_fd`)."""
    return os.fdopen(_regular_fd(path), "r", encoding="utf-8", errors=errors)


def open_regular_bytes(path: str | Path) -> BinaryIO:
    """`path` opened for reading as bytes (a checkpoint), refused unless it is a regular file."""
    return os.fdopen(_regular_fd(path), "rb")


def read_regular_text(path: str | Path, errors: str = "strict") -> str:
    """The text of a regular file (`open_regular`)."""
    with open_regular(path, errors) as handle:
        return handle.read()


def open_no_follow(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` that refuses a symbolic link at `path` (OSError ELOOP) instead of writing through
    it into a file outside the run folder."""
    return os.open(path, flags | os.O_NOFOLLOW, mode)
