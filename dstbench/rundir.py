"""The run folder: what `dstbench run` writes and every other command reads.

    RUN_DIR/suite.yaml      the suite as validated, every default filled in
    RUN_DIR/run.json        when, where and from which commit the run started
    RUN_DIR/results.jsonl   one line per finished case

The file names and the checks on them live here only. Nothing here imports torch, so commands that
only read results (report, compare, export) stay light.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

SUITE_FILE = "suite.yaml"
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
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
