"""The two sides of `dstbench compare`: each run folder's lines by suite hash and case key (case id
and seed), how a matched case is named, and the environment each side ran in.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, NamedTuple

from dstbench.results.run_folder import RunFolder
from dstbench.results.run_files import RunDirError, require_results
from dstbench.suite.cases import CaseKey, case_id
from dstbench.util.files import RESULTS_FILE

# What makes two runs' figures incomparable: the accelerator (or CPU model), the device type, torch,
# and timm (it builds the model, so a new release can change the byte counts the memory gate checks);
# and what moves CPU step times: the host's CPU, the host itself, the intra-op threads and OpenMP's
# thread count and waiting policy (severalfold on shared cores).
ENV_KEYS = (
    ("device_type", "device"), ("device_name", "GPU/CPU model"), ("torch", "torch version"), ("timm", "timm version"),
    ("cpu_model", "CPU model"), ("hostname", "host"), ("threads", "intra-op threads"),
    ("OMP_NUM_THREADS", "OMP_NUM_THREADS"), ("OMP_WAIT_POLICY", "OMP_WAIT_POLICY"),
)

# How a run's segments were timed: what moves a time without changing the case. The last two are in
# the suite hash too (cases of other values do not match); the first five are not, so two runs of one
# suite can differ in them, and each run folder's suite.yaml records them.
PROTOCOL_KEYS = ("processes", "interleave", "round_order", "settle_segments", "hand_over", "segment_steps", "segments")



class SideKey(NamedTuple):
    """A line's key across runs: its suite hash (cases of other settings never match) beside its
    case key within the run (case id and seed, `dstbench.suite.cases.CaseKey`)."""

    suite_hash: str
    case: CaseKey

    def beside(self, other: "SideKey") -> bool:
        """Whether `other` is of the same suite hash (sweep point) and seed: a case its dense is the
        reference of."""
        return self.suite_hash == other.suite_hash and self.case.seed == other.case.seed


class CompareInputError(Exception):
    """The runs cannot be compared (exit 2)."""


def check_thresholds(time: float, memory: float, top1: float, alpha: float) -> None:
    """`CompareInputError` unless every threshold is a finite number >= 0 and alpha is in (0, 0.5):
    a NaN band would judge nothing (every comparison with NaN is false) and pass any change."""
    values = {"time threshold": time, "memory threshold": memory, "top-1 threshold": top1}
    wrong = [f"{name} {value!r}" for name, value in values.items()
             if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0]
    if wrong or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
        got = ", ".join(wrong + ([] if isinstance(alpha, (int, float)) and 0 < alpha < 0.5 else [f"alpha {alpha!r}"]))
        raise CompareInputError(f"thresholds must be finite and >= 0, and alpha in (0, 0.5); got {got}")


@dataclasses.dataclass
class Side:
    """One run folder: its metadata and its last result line per suite hash and case key."""

    path: Path
    meta: dict[str, Any]
    cases: dict[SideKey, dict[str, Any]]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)  # suite.yaml's `timing`, as the run used it


def side_key(line: dict[str, Any], run_seed: int | None = None) -> SideKey:
    """A line's key across runs: its suite hash beside its case key, the case id made from its
    method, density and sweep point, and its seed (`run_seed` for a line without one: its run's first
    seed)."""
    # Densities are floats written by the same code; rounding guards against 0.1 vs 0.1000000001.
    sweep, seed = line.get("sweep"), line.get("seed")
    case = case_id(str(line.get("method")), round(float(line.get("density") or 0.0), 6), sweep if isinstance(sweep, dict) else None)
    return SideKey(str(line.get("suite_hash")), CaseKey(case, int(seed) if seed is not None else run_seed))


def key_text(key: SideKey, seeded: bool = False) -> str:
    """A matched case as reports name it: its case id, with its seed where the runs hold several."""
    return key.case if seeded else key.case.case_id


def key_order(key: SideKey) -> tuple[str, str, int]:
    """Sorts keys with and without a seed alike (None first)."""
    return (key.suite_hash, key.case.case_id, -1 if key.case.seed is None else key.case.seed)


CaseValues = dict[tuple[str, ...], dict[Any, float]]  # per case: its value by seed
CaseNames = dict[tuple[str, ...], tuple[str, str, float]]  # per case: its name, method and density


def values_by_seed(side: Side, value: Callable[[dict[str, Any]], float | None], seedless: bool) -> tuple[CaseValues, CaseNames]:
    """Each case's `value` by seed from its ok lines (None: no value), keyed by (suite hash, case id),
    or by (case id,) where `seedless` (runs whose setups differ in their seed alone: the seed is in
    the suite hash); and each case's name (with its sweep point), method and density."""
    found: CaseValues = {}
    names: CaseNames = {}
    for key, line in side.cases.items():
        figure = value(line) if line.get("status") == "ok" else None
        if figure is None:
            continue
        case = (key.case.case_id,) if seedless else (key.suite_hash, key.case.case_id)
        found.setdefault(case, {})[key.case.seed] = figure
        names[case] = (key.case.case_id, str(line.get("method")), round(float(line.get("density") or 0.0), 6))
    return found, names


def several_seeds(*sides: Side) -> bool:
    """Whether the sides hold more than one seed between them: names then carry the seed."""
    return len({k.case.seed for side in sides for k in side.cases}) > 1


def load_side(path: str | Path) -> Side:
    """Read a run folder; `CompareInputError` when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise CompareInputError(f"{path}: not a run folder")
    try:
        require_results([path], finished=True)
        folder = RunFolder.open(path)
        meta = folder.checked_meta()
    except RunDirError as exc:
        raise CompareInputError(str(exc)) from None
    cases: dict[SideKey, dict[str, Any]] = {}
    run_seed = folder.first_seed()  # what a line without a seed ran with
    for line in folder.lines():
        cases[side_key(line, run_seed)] = line  # a later line for the same case and seed wins, as in the reports
    if not cases:
        raise CompareInputError(f"{path / RESULTS_FILE}: no result lines")
    return Side(path, meta, cases, timing=recorded_timing(folder))


def recorded_timing(folder: RunFolder) -> dict[str, Any]:
    """The `timing` section of the run folder's suite.yaml ({} without a readable one)."""
    timing = folder.suite_data().get("timing")
    return timing if isinstance(timing, dict) else {}


def protocol_differences(baseline: Side, current: Side) -> list[str]:
    """"processes: baseline 1, current 2" for each timing-protocol setting the sides differ in (a
    side without the setting recorded counts as differing from one with it)."""
    differences = []
    for key in PROTOCOL_KEYS:
        base, cur = baseline.timing.get(key), current.timing.get(key)
        if base != cur:
            shown = ["not recorded" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in (base, cur)]
            differences.append(f"timing.{key}: baseline {shown[0]}, current {shown[1]}")
    return differences


def run_env(side: Side) -> dict[str, str]:
    """The environment the run's cases report, per key; several values are joined with ' | '."""
    env: dict[str, str] = {}
    for key, _ in ENV_KEYS:
        values = sorted({str(line.get("env", {}).get(key)) for line in side.cases.values() if line.get("env")})
        env[key] = " | ".join(values) if values else "unknown"
    return env


def env_differences(baseline: Side, current: Side) -> list[str]:
    base, cur = run_env(baseline), run_env(current)
    differ = [key for key, _ in ENV_KEYS if base[key] != cur[key]]
    # On a CPU the device is the CPU: one line says it.
    if "device_name" in differ and (base["cpu_model"], cur["cpu_model"]) == (base["device_name"], cur["device_name"]):
        differ.remove("cpu_model")
    return [f"{label} differs: baseline {base[key]}, current {cur[key]}" for key, label in ENV_KEYS if key in differ]


def one_process_set(side: Side) -> bool:
    """Whether every ok line of `side` was timed by one process set (its segments tagged with a
    single process): no process-to-process spread to judge a change against. Untagged lines
    (written before interleaving) do not say, and do not count."""
    sets = [set(line["segment_process"]) for line in side.cases.values()
            if line.get("status") == "ok" and isinstance(line.get("segment_process"), list) and line["segment_process"]]
    return bool(sets) and all(len(processes) == 1 for processes in sets)
