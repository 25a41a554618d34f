"""One result line per case, appended to `results.jsonl` and flushed as each case ends."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

STATUSES = ("ok", "oom", "error", "timeout", "crash")
RESULTS_FILE = "results.jsonl"


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


def append_result(run_dir: Path, result: CaseResult) -> None:
    """Append one line and make it durable before the next case starts."""
    line = json.dumps(_finite(result.to_dict()), sort_keys=False)
    with open(Path(run_dir) / RESULTS_FILE, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def iter_results(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Result lines as dicts; a torn last line (a run killed mid-write) is skipped."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def load_results(run_dir: Path) -> list[CaseResult]:
    return [CaseResult.from_dict(d) for d in iter_results(run_dir)]
