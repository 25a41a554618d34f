"""One result line per case, appended to `results.jsonl` and flushed as each case ends.

Every line carries `schema_version` (SCHEMA_VERSION when it was written) and `run_id` (the name
of the run folder it was written into). Readers go by the version:

    0  lines written before the field existed (no schema_version, no run_id)
    1  schema_version and run_id; `env` adds ram_bytes, gpu_count, branch, commit_time, allocator
       configuration, matmul precision and TF32 / cuDNN flags, plugin versions; `env.cuda` and
       `env.cudnn` (now "9.1.0", not 90100) are recorded on CUDA devices only

Adding a field does not change the version; renaming or removing one, or changing what a field
means or its unit, does: bump SCHEMA_VERSION and add a line above (docs/reference/results.md is generated from the declarations).

The fields are declared where they are written: identity and bookkeeping here (`CORE_FIELDS`),
every figure by its tracker (`dstbench.measure.trackers.registry`), each with its type, default and
merge rules (`dstbench.measure.trackers.base`). `CaseResult` is made from those declarations (the
built-in trackers'), so a new metric is a tracker, with no edit here. A tracker registered later (a
suite's `plugins:`) adds its fields to `line_type()`, a subclass of `CaseResult`: what makes and
reads lines asks `line_type()` for the class, so a plugin's fields are written, read and merged too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from dstbench.measure.trackers import registered_trackers
from dstbench.measure.trackers.base import (
    EARLIEST, LARGEST, LATEST, RANK0, TOTAL, UNION, RankRule, ResultField, Tracker, declared_fields,
)
from dstbench.measure.trackers.noise import WARNINGS_OF_GROUPS
from dstbench.suite.cases import line_key
from dstbench.util.text import clip, short_repr
from dstbench.results.run_files import load_run_meta
from dstbench.util.files import RESULTS_FILE, open_no_follow, open_regular, write_atomic
from dstbench.results.line_rule import line_problem_of

SCHEMA_VERSION = 1

# A case's status: it finished, or how it failed (see docs/concepts/measurement.md).
# `cancelled`: a cluster job ended from outside (scancel, preemption) before its case reported.
STATUSES = ("ok", "oom", "error", "timeout", "crash", "cancelled", "diverged")  # diverged: dstbench.results.divergence
FAILED_STATUSES = STATUSES[1:]


# Rank 0's environment; each rank's finishing time is its own (the launcher reads them).
ENV_OF_RANK0 = RankRule("rank 0's, without its finishing time",
                        lambda values, ranks: {k: v for k, v in values[0].items() if k != "finished_at"})

# Identity and bookkeeping: what the session, the launchers and the writer put into every line.
CORE_FIELDS = (
    ResultField("suite", str, LATEST, RANK0, "the suite's name"),
    ResultField("suite_hash", str, LATEST, RANK0, "the hash of the suite's setup"),
    ResultField("case_id", str, LATEST, RANK0, "method@density"),
    ResultField("method", str, LATEST, RANK0, "the method as the suite names it"),
    ResultField("method_name", str, LATEST, RANK0, "the registered method it runs"),
    ResultField("kind", str, LATEST, RANK0, "the method's kind: dense, masked or compact"),
    ResultField("density", float, LATEST, RANK0, "the density the case asks for"),
    ResultField("params", dict[str, Any], LATEST, RANK0, "the method's parameters"),
    # A suite's sweep (dstbench.suite.sweep): the point's suite hash is the line's `suite_hash`.
    ResultField("sweep", dict[str, Any] | None, LATEST, RANK0,
                "the sweep point the case ran at: each swept suite key and its value (None: the suite has no sweep)",
                default=None),
    # A suite's `seeds:` run every case once per seed; a line's key is (case_id, seed) (`line_key`).
    ResultField("seed", int | None, LATEST, RANK0,
                "the seed the case trained with: one of the suite's `seeds`, else its `seed` (None: a line from before seeds)",
                default=None),
    # A failed status is kept by the merges themselves (dstbench.results.merge, the torchrun launcher).
    ResultField("status", str, LATEST, RANK0, "ok, or how the case failed (STATUSES)", default="ok"),
    ResultField("device", str | None, LATEST, RANK0, "the torch device", default=None, per_rank=True),
    ResultField("precision", str | None, LATEST, RANK0, "the suite's training precision", default=None),
    ResultField("fuse_norms", bool | None, LATEST, RANK0, "the suite's harness option, applied to every method alike",
                default=None),
    ResultField("batch_size", int | None, LATEST, RANK0, "images per step (per rank)", default=None),
    ResultField("mode", str, LATEST, RANK0, "speed, accuracy or both", default="speed"),
    ResultField("execution", str | None, LATEST, RANK0,
                "how a masked method's linears compute: masked, csr or semi_structured (None: not masked)", default=None),
    ResultField("groups", list[str], UNION, RANK0, "the ids of the groups the case was timed in", default_factory=list),
    # What a reader must know about this line: contention, and what could not be written as it was
    # (a plugin's extra that is not JSON), one line each.
    ResultField("warnings", list[str], WARNINGS_OF_GROUPS, RANK0, "what a reader must know, one line each",
                default_factory=list),
    ResultField("env", dict[str, Any], LATEST, ENV_OF_RANK0, "the environment the case ran in", default_factory=dict),
    ResultField("started_at", str | None, EARLIEST, RANK0, "when the case started, UTC ISO 8601", default=None),
    ResultField("duration_s", float | None, TOTAL, LARGEST, "wall seconds of the case", default=None),
    ResultField("error", str | None, LATEST, RANK0, "the traceback of a failed case", default=None),
    ResultField("schema_version", int, LATEST, RANK0, "SCHEMA_VERSION when the line was written", default=SCHEMA_VERSION),
    ResultField("run_id", str | None, LATEST, RANK0, "the run folder's name; set by `append_result`", default=None),
)

# The order of a line's fields in schema 1 (`to_dict` moves schema_version and run_id first). A
# field declared since goes after these, in the order of CORE_FIELDS and the registered trackers.
SCHEMA_1_ORDER = (
    "suite", "suite_hash", "case_id", "method", "method_name", "kind", "density", "params", "status", "device",
    "precision", "fuse_norms", "batch_size", "mode", "execution", "segment_steps", "segment_ms", "median_ms", "iqr_ms",
    "images_per_s", "segment_group", "segment_round", "segment_start_s", "groups", "noise", "warnings",
    "peak_memory_bytes", "reserved_memory_bytes", "rss_peak_bytes", "state_bytes", "state_breakdown", "activation_bytes",
    "flops_per_step", "density_achieved", "topology_updates", "topology_ms", "topology_detail_ms", "loss",
    "data_loading", "method_extras", "top1", "top5", "epochs", "train_time_s", "curve", "profile", "energy",
    "world_size", "ranks", "env", "started_at", "duration_s", "error", "schema_version", "run_id",
)


class ResultLine:
    """What every result line class has beside its fields (the classes are made by `line_class`)."""

    def to_dict(self) -> dict[str, Any]:
        """The result line as plain JSON data: never raises for what a method put in it (see
        `json_safe`); what had to change is listed in `warnings`. The version and the run come
        first: what a reader checks before anything else."""
        notes: list[str] = []
        data = {f.name: json_safe(getattr(self, f.name), f.name, notes) for f in dataclasses.fields(self)}
        if notes:
            data["warnings"] = list(dict.fromkeys([*(data.get("warnings") or []), *notes]))  # merged lines say them once
        return {"schema_version": data.pop("schema_version"), "run_id": data.pop("run_id"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        fields.setdefault("schema_version", 0)  # a line from before versioning
        return cls(**fields)


def line_class(trackers: Iterable[type[Tracker]] | None = None, name: str = "CaseResult", doc: str = "") -> type:
    """The dataclass of a result line with the core fields and every field `trackers` declare (by
    default every registered tracker), in schema 1's order. Raises ValueError for a field declared
    twice."""
    trackers = registered_trackers() if trackers is None else tuple(trackers)
    declared = [*CORE_FIELDS, *(spec for tracker in trackers for spec in tracker.fields)]
    names = [spec.name for spec in declared]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"result fields declared more than once: {', '.join(twice)}")
    position = {field: i for i, field in enumerate(SCHEMA_1_ORDER)}
    ordered = sorted(declared, key=lambda spec: position.get(spec.name, len(position)))  # stable: new ones keep theirs
    return dataclasses.make_dataclass(
        name, [(spec.name, spec.type, spec.dataclass_field()) for spec in ordered], bases=(ResultLine,),
        namespace={"__module__": __name__, "__doc__": doc or f"A result line ({name})."},
    )


# One case's result line: a dataclass whose fields the core and the built-in trackers declare.
CaseResult = line_class(doc="One case's result line: its identity, and every tracker's figures (see the module docstring).")
_BUILT_IN = frozenset(f.name for f in dataclasses.fields(CaseResult))
_LINE_TYPES: dict[tuple[type[Tracker], ...], type] = {}


def line_type() -> type:
    """The class of a result line with every tracker registered now: `CaseResult`, or a subclass
    with the fields of trackers registered since it was made (a plugin's), after its own."""
    added = tuple(t for t in registered_trackers() if any(spec.name not in _BUILT_IN for spec in t.fields))
    if not added:
        return CaseResult
    if added not in _LINE_TYPES:
        specs = [spec for tracker in added for spec in tracker.fields if spec.name not in _BUILT_IN]
        _LINE_TYPES[added] = dataclasses.make_dataclass(
            "CaseResult", [(spec.name, spec.type, spec.dataclass_field()) for spec in specs], bases=(CaseResult,),
            namespace={"__module__": __name__, "__doc__": f"{CaseResult.__doc__} With {', '.join(t.name for t in added)}."},
        )
    return _LINE_TYPES[added]


def result_fields() -> tuple[ResultField, ...]:
    """Every field a result line has now (`line_type()`), in line order."""
    return declared_fields(line_type())


def report_columns(unit: str) -> tuple[tuple[str, str], ...]:
    """(field, header) of every result field shown in a report column of `unit`, in line order."""
    return tuple((spec.name, spec.column.header) for spec in declared_fields(CaseResult)
                 if spec.column is not None and spec.column.unit == unit)


MAX_ARRAY_ITEMS = 10_000  # an array or tensor in a result line beyond this is summarised, not listed
MAX_DEPTH = 64



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
    try:
        fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:  # ELOOP: a link would send the line to a file outside the run folder
        raise OSError(exc.errno, f"{exc.strerror} (a symbolic link is never written through)", str(path)) from None
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


def replace_results(
    run_dir: Path, drop: set[str], results: list[CaseResult], key: Callable[[dict[str, Any]], str] = line_key
) -> None:
    """Remove every line whose key (`key`: by default case id and seed, `line_key`) is in `drop`,
    then add `results`, in one atomic step: the file is rewritten beside the old one and renamed
    over it, so a kill leaves either the old lines or the new ones (how an interleaved group that
    is timed again replaces its lines). Unreadable lines are kept as they were."""
    path = Path(run_dir) / RESULTS_FILE
    kept = []
    if path.exists():
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, RecursionError):
                data = None
            try:
                case = key(data) if isinstance(data, dict) and isinstance(data.get("case_id"), str) else None
            except (TypeError, ValueError):  # a field of the wrong type ("seed": "x"): kept, as unreadable
                case = None
            if raw.strip() and not (case is not None and case in drop):
                kept.append(raw)
    for result in results:
        if result.run_id is None:
            result.run_id = Path(run_dir).name
        kept.append(json.dumps(result.to_dict(), sort_keys=False))
    write_atomic(path, "".join(line + "\n" for line in kept))


# Fields a line must have for any reader to use it (the others are checked when present).
_HINTS: dict[type, dict[str, Any]] = {}  # by line class


def line_problem(data: Any) -> str | None:
    """Why a parsed result line cannot be used, or None (`dstbench.results.line_rule`)."""
    current = line_type()
    hints = _HINTS.get(current)
    if hints is None:
        hints = _HINTS[current] = typing.get_type_hints(current)
    return line_problem_of(data, hints, SCHEMA_VERSION)


_WARNED: set[tuple[Any, ...]] = set()


@dataclasses.dataclass
class ResultsRead:
    """A results.jsonl as read: the usable lines (the last of each case id and seed, by `line_key`),
    and what was left out."""

    lines: dict[str, dict[str, Any]]  # by `line_key`
    skipped: list[str]  # "LINE (why)" of unusable lines
    duplicated: dict[str, int]  # line key -> lines
    foreign: list[str]  # "LINE (case, hash)" of lines of another suite hash than run.json's
    suite_hash: str | None = None
    point_hashes: tuple[str, ...] = ()  # a sweep's points' hashes (run.json), each a line's own

    def problems(self) -> list[str]:
        parts = []
        if self.skipped:
            parts.append(f"skipped {len(self.skipped)} unreadable line(s): line {', '.join(self.skipped)}; their cases count as not run")
        if self.foreign:
            parts.append(
                f"left out {len(self.foreign)} line(s) of another suite than the run's ({self.suite_hash}, run.json): "
                f"line {', '.join(self.foreign)}; a run folder holds one suite's cases"
            )
        if self.duplicated:
            listed = ", ".join(f"{case} ({n} lines)" for case, n in self.duplicated.items())
            parts.append(f"{len(self.duplicated)} case(s) appear more than once: {listed}; the last line of each counts")
        return parts


def read_results(run_dir: Path, hashes: tuple[str, ...] = ()) -> ResultsRead:
    """Every line of `run_dir/results.jsonl`, sorted into usable ones and what was left out: a torn
    line of a run killed mid-write, text that is not JSON, a line whose fields have the wrong types
    (`line_problem`), a line of another suite hash than run.json records (never merged with the
    run's). A case with several lines (one case id and seed) keeps its last line, which stands
    where that line stands; each seed of a case keeps its own. `hashes`: the suite's hash and its
    points' for a folder whose run.json does not record them (`dstbench check` has the suite)."""
    meta = load_run_meta(run_dir)
    points = tuple(h for h in meta.get("point_hashes") or () if isinstance(h, str))
    suite_hash = meta.get("suite_hash") or None
    if suite_hash is None and hashes:
        suite_hash, points = hashes[0], tuple(hashes[1:])
    read = ResultsRead({}, [], {}, [], suite_hash, points)
    # The seeds run.json plans (a suite's `seeds:`): a line of another seed would be pooled silently.
    seeds = {c["seed"] for c in meta.get("cases") or [] if isinstance(c, dict) and isinstance(c.get("seed"), int)}
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return read
    counts: dict[str, int] = {}
    with open_regular(path, errors="replace") as handle:  # a FIFO is refused, never waited on
        for number, text in enumerate(handle, 1):
            text = text.strip()
            if not text:
                continue
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                read.skipped.append(f"{number} (not JSON)")
                continue
            problem = line_problem(data) or _seed_problem(data, seeds)
            if problem:
                read.skipped.append(f"{number} ({problem})")
                continue
            case = line_key(data)
            line_hash = data.get("suite_hash")
            if read.suite_hash and isinstance(line_hash, str) and line_hash not in (read.suite_hash, *read.point_hashes):
                read.foreign.append(f"{number} ({case}, {line_hash})")
                continue
            counts[case] = counts.get(case, 0) + 1
            read.lines.pop(case, None)  # the last line of a case (and seed) counts, in its place
            read.lines[case] = data
    read.duplicated = {case: n for case, n in counts.items() if n > 1}
    return read


def _seed_problem(data: dict[str, Any], seeds: set[int]) -> str | None:
    seed = data.get("seed")
    if seeds and isinstance(seed, int) and seed not in seeds:
        return f"seed {seed} is not among the run's seeds ({', '.join(map(str, sorted(seeds)))})"
    return None


def iter_results(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Result lines as dicts, one per case id and seed (`read_results`); cases of unusable lines count as
    not run. Each file's problems are said once, in one warning."""
    read = read_results(run_dir)
    yield from read.lines.values()
    parts = read.problems()
    path = Path(run_dir) / RESULTS_FILE
    key = (str(path.resolve()), tuple(parts))
    if parts and key not in _WARNED:
        # A run reads its results several times (resume, table, expectations): say it once.
        _WARNED.add(key)
        warnings.warn(clip(f"{path}: " + "; ".join(parts), 2000), stacklevel=2)


def load_results(run_dir: Path) -> list[CaseResult]:
    return [line_type().from_dict(d) for d in iter_results(run_dir)]
