"""One result line per case, appended to `results.jsonl` and flushed as each case ends."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Iterator

from dstbench.rundir import RESULTS_FILE

# A case's status: it finished, or how it failed (see README, "How a case is measured").
STATUSES = ("ok", "oom", "error", "timeout", "crash")
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
    batch_size: int | None = None
    mode: str = "speed"
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


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
    a line of its own, so the torn one stays the only unreadable line.
    """
    line = json.dumps(_finite(result.to_dict()), sort_keys=False)
    path = Path(run_dir) / RESULTS_FILE
    prefix = "" if not path.exists() or _ends_with_newline(path) else "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(prefix + line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


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
            if raw.strip() and not (isinstance(data, dict) and data.get("case_id") in drop):
                kept.append(raw)
    kept += [json.dumps(_finite(r.to_dict()), sort_keys=False) for r in results]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in kept))
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


_WARNED: set[tuple[str, tuple[int, ...]]] = set()


def iter_results(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Result lines as dicts. Unreadable lines (a torn line of a run killed mid-write) are skipped,
    with one warning per file that names them: the case of a skipped line counts as not run."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return
    skipped = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                skipped.append(number)
                continue
            if isinstance(data, dict):
                yield data
            else:
                skipped.append(number)
    key = (str(path.resolve()), tuple(skipped))
    if skipped and key not in _WARNED:
        # A run reads its results several times (resume, table, expectations): say it once.
        _WARNED.add(key)
        warnings.warn(
            f"{path}: skipped {len(skipped)} unreadable line(s) (line {', '.join(map(str, skipped))}); "
            "their cases count as not run",
            stacklevel=2,
        )


def load_results(run_dir: Path) -> list[CaseResult]:
    return [CaseResult.from_dict(d) for d in iter_results(run_dir)]
