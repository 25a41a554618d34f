"""Lines of a results.jsonl that no reader can use, set aside when a run resumes.

Readers skip an unusable line (a torn last line of a killed run, NUL bytes a crash left, a field of
the wrong type such as `"seed": "x"`: `dstbench.results.record.read_results`) and count its case as
not run, so `check` fails until the line is gone. A resume runs those cases again; before it does,
it moves the lines into `results.rejected.jsonl` beside `results.jsonl` (appended, as they were, so
nothing is lost and they can be read by hand) and rewrites `results.jsonl` without them. The
rejected file is written first: a kill between the two steps leaves a line in both, never in
neither. Lines of another suite hash are not touched (a run folder holds one suite: `check` names
them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dstbench.results.record import line_problem
from dstbench.util.files import RESULTS_FILE, open_no_follow, open_regular, write_atomic

REJECTED_FILE = "results.rejected.jsonl"


def unusable(text: str) -> str | None:
    """Why a line of results.jsonl (stripped, not blank) cannot be used, or None."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return "not JSON"
    return line_problem(data)


def set_aside_unusable(run_dir: str | Path) -> list[str]:
    """Move the unusable lines of `run_dir/results.jsonl` into `results.rejected.jsonl`; returns
    'N (why)' for each line moved (line numbers as they were), empty when there was none."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return []
    kept: list[str] = []
    rejected: list[tuple[int, str, str]] = []
    with open_regular(path, errors="replace") as handle:  # a FIFO is refused, never waited on
        for number, raw in enumerate(handle, 1):
            text = raw.strip()
            if not text:
                continue
            why = unusable(text)
            if why is None:
                kept.append(text)
            else:
                rejected.append((number, text, why))
    if not rejected:
        return []
    data = "".join(text + "\n" for _, text, _ in rejected).encode("utf-8", errors="replace")
    fd = open_no_follow(Path(run_dir) / REJECTED_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    write_atomic(path, "".join(line + "\n" for line in kept))
    return [f"{number} ({why})" for number, _, why in rejected]
