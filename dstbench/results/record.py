"""One result line per case, appended to `results.jsonl` and flushed as each case ends.

Every line carries `schema_version` (SCHEMA_VERSION when it was written) and `run_id` (the name
of the run folder it was written into). Readers go by the version:

    0  lines written before the field existed (no schema_version, no run_id)
    1  schema_version and run_id; `env` adds ram_bytes, gpu_count, branch, commit_time, allocator
       configuration, matmul precision and TF32 / cuDNN flags, plugin versions; `env.cuda` and
       `env.cudnn` (now "9.1.0", not 90100) are recorded on CUDA devices only

Adding a field does not change the version; renaming or removing one, or changing what a field
means or its unit, does: bump SCHEMA_VERSION and add a line above (and in README, "Result fields").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
import warnings
from pathlib import Path
from typing import Any, Iterator, Union

from dstbench.util.text import clip, short_repr
from dstbench.util.files import RESULTS_FILE, write_atomic

SCHEMA_VERSION = 1

# A case's status: it finished, or how it failed (see README, "How a case is measured").
# `cancelled`: a cluster job ended from outside (scancel, preemption) before its case reported.
STATUSES = ("ok", "oom", "error", "timeout", "crash", "cancelled")
FAILED_STATUSES = STATUSES[1:]


@dataclasses.dataclass
class CaseResult:
    # identity
    suite: str
    suite_hash: str
    case_id: str
    method: str
    method_name: str
    kind: str
    density: float
    params: dict[str, Any]
    status: str = "ok"
    device: str | None = None
    precision: str | None = None
    fuse_norms: bool | None = None  # the suite's harness option, applied to every method alike
    batch_size: int | None = None
    mode: str = "speed"
    # how a masked method's linears compute: masked, csr or semi_structured (None: not masked)
    execution: str | None = None
    # speed
    segment_steps: int | None = None
    segment_ms: list[float] = dataclasses.field(default_factory=list)
    median_ms: float | None = None
    iqr_ms: float | None = None
    images_per_s: float | None = None
    # what each segment sample was timed with (aligned with segment_ms): the interleaved group's id,
    # its round, its start (Unix seconds); the groups the case was timed in; contention per segment
    segment_group: list[str] = dataclasses.field(default_factory=list)
    segment_round: list[int] = dataclasses.field(default_factory=list)
    segment_start_s: list[float] = dataclasses.field(default_factory=list)
    groups: list[str] = dataclasses.field(default_factory=list)
    noise: dict[str, Any] | None = None
    # What a reader must know about this line: contention, and what could not be written as it was
    # (a plugin's extra that is not JSON), one line each.
    warnings: list[str] = dataclasses.field(default_factory=list)
    # memory: allocator figures on CUDA, exact byte counts everywhere
    peak_memory_bytes: int | None = None
    reserved_memory_bytes: int | None = None
    rss_peak_bytes: int | None = None
    state_bytes: int | None = None
    state_breakdown: dict[str, int] | None = None
    activation_bytes: int | None = None
    # cost model and method
    flops_per_step: int | None = None
    density_achieved: float | None = None
    topology_updates: int | None = None
    topology_ms: float | None = None
    topology_detail_ms: dict[str, float] | None = None
    loss: float | None = None
    data_loading: str | None = None
    method_extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    # accuracy track
    top1: float | None = None
    top5: float | None = None
    epochs: int | None = None
    train_time_s: float | None = None
    curve: list[dict[str, Any]] | None = None
    # profiling and energy
    profile: dict[str, Any] | None = None
    energy: dict[str, Any] | None = None
    # distributed
    world_size: int = 1
    ranks: list[dict[str, Any]] | None = None
    # bookkeeping
    env: dict[str, Any] = dataclasses.field(default_factory=dict)
    started_at: str | None = None
    duration_s: float | None = None
    error: str | None = None
    schema_version: int = SCHEMA_VERSION
    run_id: str | None = None  # the run folder's name; set by `append_result`

    def to_dict(self) -> dict[str, Any]:
        """The result line as plain JSON data: never raises for what a method put in it (see
        `json_safe`); what had to change is listed in `warnings`. The version and the run come
        first: what a reader checks before anything else."""
        notes: list[str] = []
        data = {f.name: json_safe(getattr(self, f.name), f.name, notes) for f in dataclasses.fields(self)}
        if notes:
            data["warnings"] = [*(data.get("warnings") or []), *notes]
        return {"schema_version": data.pop("schema_version"), "run_id": data.pop("run_id"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseResult":
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        fields.setdefault("schema_version", 0)  # a line from before versioning
        return cls(**fields)


MAX_ARRAY_ITEMS = 10_000  # an array or tensor in a result line beyond this is summarised, not listed
MAX_DEPTH = 64


RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(CaseResult))


def json_safe(value: Any, where: str = "", notes: list[str] | None = None, _depth: int = 0) -> Any:
    """`value` as JSON data: NaN and infinity become null (JSON has neither), tuples lists, numpy
    and torch scalars numbers. Anything else that JSON cannot hold (a set, a tensor, an object) is
    converted (sets and arrays to lists, the rest to its repr) and noted in `notes` as
    "where: what happened", so that a plugin's odd extra costs a warning, not the case."""
    notes = notes if notes is not None else []
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if _depth > MAX_DEPTH:
        notes.append(f"{where}: nested deeper than {MAX_DEPTH} levels; written as null")
        return None
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                if not isinstance(key, (int, float, bool)) and key is not None:
                    notes.append(f"{where}: key {short_repr(key)} is not a string; written as its str()")
                key = str(key) if not isinstance(key, bool) else str(key).lower()
            out[key] = json_safe(item, f"{where}.{key}", notes, _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [json_safe(item, f"{where}[{i}]", notes, _depth + 1) for i, item in enumerate(value)]
    kind = type(value).__name__
    if isinstance(value, (set, frozenset)):
        try:
            items = sorted(value)
        except TypeError:
            items = list(value)
        notes.append(f"{where}: {kind} is not JSON; written as a list")
        return json_safe(items, where, notes, _depth + 1)
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # numpy arrays and scalars, torch tensors
        if value.ndim == 0:  # a scalar: a number
            return json_safe(value.tolist(), where, notes, _depth + 1)
        numel = int(value.numel()) if callable(getattr(value, "numel", None)) else int(value.size)
        if numel <= MAX_ARRAY_ITEMS:
            notes.append(f"{where}: {kind} is not JSON; written as a list")
            return json_safe(value.tolist(), where, notes, _depth + 1)
        notes.append(f"{where}: {kind} of {numel} items is not JSON; written as its repr")
        return clip(repr(value), 200)
    notes.append(f"{where}: {kind} is not JSON; written as its repr")
    try:
        return clip(repr(value), 200)
    except Exception:  # a repr that raises
        return f"<{kind}>"


def segment_samples(value: Any) -> list[float]:
    """The finite segment times of a result line's `segment_ms` (NaN was written as null)."""
    if not isinstance(value, (list, tuple)):
        return []
    samples = []
    for x in value:
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
            samples.append(float(x))
    return samples


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def append_result(run_dir: Path, result: CaseResult) -> None:
    """Append one line and make it durable before the next case starts.

    A run killed mid-write leaves a torn last line without its newline; the new line then starts on
    a line of its own, so the torn one stays the only unreadable line. A write that fails (disk
    full) is undone, so the file keeps whole lines only, and raises one `OSError` naming the file.
    """
    if result.run_id is None:
        result.run_id = Path(run_dir).name
    line = json.dumps(result.to_dict(), sort_keys=False)
    path = Path(run_dir) / RESULTS_FILE
    prefix = "" if not path.exists() or _ends_with_newline(path) else "\n"
    data = (prefix + line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size, written = os.fstat(fd).st_size, 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException as exc:
            # All or nothing: a full disk (also at fsync) undoes the line, and so does Ctrl-C or
            # SIGTERM between two partial writes; one arriving after the whole line keeps it.
            if isinstance(exc, OSError) or written < len(data):
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass  # the reader skips a torn line
            if isinstance(exc, OSError):
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            raise
    finally:
        os.close(fd)


def replace_results(run_dir: Path, drop: set[str], results: list[CaseResult]) -> None:
    """Remove every line whose `case_id` is in `drop`, then add `results`, in one atomic step: the
    file is rewritten beside the old one and renamed over it, so a kill leaves either the old lines
    or the new ones (how an interleaved group that is timed again replaces its lines). Unreadable
    lines are kept as they were."""
    path = Path(run_dir) / RESULTS_FILE
    kept = []
    if path.exists():
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                data = None
            case = data.get("case_id") if isinstance(data, dict) else None
            if raw.strip() and not (isinstance(case, str) and case in drop):
                kept.append(raw)
    for result in results:
        if result.run_id is None:
            result.run_id = Path(run_dir).name
        kept.append(json.dumps(result.to_dict(), sort_keys=False))
    write_atomic(path, "".join(line + "\n" for line in kept))


# Fields a line must have for any reader to use it (the others are checked when present).
REQUIRED_FIELDS = ("case_id", "method", "kind", "density", "status")


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's annotation, at the top level (JSON has no tuple, and
    NaN was written as null, so list items are not checked here: `segment_samples` filters)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin in (list, tuple) or hint in (list, tuple):
        return isinstance(value, list)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True


_HINTS: dict[str, Any] = {}


def line_problem(data: Any) -> str | None:
    """Why a parsed result line cannot be used (not an object, a required field missing, a field
    of the wrong type, a density outside (0, 1]), or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(CaseResult))
    missing = [key for key in REQUIRED_FIELDS if key not in data]
    if missing:
        return f"missing {', '.join(missing)}"
    for key, value in data.items():
        hint = _HINTS.get(key)
        if hint is not None and not _matches(value, hint):
            return f"{key} is {short_repr(value, 40)}"
    if not 0.0 < data["density"] <= 1.0:
        return f"density {data['density']} outside (0, 1]"
    return None


_WARNED: set[tuple[Any, ...]] = set()


def iter_results(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Result lines as dicts, one per case id.

    Unusable lines are skipped: a torn line of a run killed mid-write, text that is not JSON, a
    line whose fields have the wrong types (`line_problem`); their cases count as not run. A case
    id with several lines (two runs writing one folder, a hand-edited file) keeps its last line,
    which stands where that line stands. Each file's problems are said once, in one warning.
    """
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return
    skipped: list[str] = []
    lines: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, text in enumerate(handle, 1):
            text = text.strip()
            if not text:
                continue
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                skipped.append(f"{number} (not JSON)")
                continue
            problem = line_problem(data)
            if problem:
                skipped.append(f"{number} ({problem})")
                continue
            case = data["case_id"]
            counts[case] = counts.get(case, 0) + 1
            lines.pop(case, None)  # the last line of a case id counts, in its place
            lines[case] = data
    yield from lines.values()
    duplicated = {case: n for case, n in counts.items() if n > 1}
    key = (str(path.resolve()), tuple(skipped), tuple(duplicated.items()))
    if (skipped or duplicated) and key not in _WARNED:
        # A run reads its results several times (resume, table, expectations): say it once.
        _WARNED.add(key)
        parts = []
        if skipped:
            parts.append(f"skipped {len(skipped)} unreadable line(s): line {', '.join(skipped)}; their cases count as not run")
        if duplicated:
            listed = ", ".join(f"{case} ({n} lines)" for case, n in duplicated.items())
            parts.append(f"{len(duplicated)} case id(s) appear more than once: {listed}; the last line of each counts")
        warnings.warn(clip(f"{path}: " + "; ".join(parts), 2000), stacklevel=2)


def load_results(run_dir: Path) -> list[CaseResult]:
    return [CaseResult.from_dict(d) for d in iter_results(run_dir)]
