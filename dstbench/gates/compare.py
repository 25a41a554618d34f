"""The run-to-run regression gate of `dstbench compare BASELINE_RUN CURRENT_RUN`: each case's
verdicts and the gate's exit code (the command: `dstbench.cli.compare`; its report:
`dstbench.gates.comparison_text`).

Cases are matched by suite hash, method and density. Time is judged from the raw segment samples:
a case regresses (or improved) only when the ratio of medians (current / baseline) crosses the
threshold *and* a two-sided Mann-Whitney U test says the samples differ; a ratio within the
threshold is unchanged; a ratio beyond it that the samples cannot prove is **inconclusive**, shown
and counted, never reported as no change. Cases whose segment times spread widely (IQR / median
above 10%: noisy, 25%: very noisy) or that were timed under contention say so in their notes, and
a time change beyond the threshold on a side timed under contention is inconclusive, whatever the
test says: starved segments measure the machine's load, not the code.
Memory is judged from exact figures (allocator peak where both runs have it, training-state and
activation bytes always) against its own threshold, with no test: byte counts do not jitter.

Exit codes (`exit_code`): 0 no regression, 1 a regression (or, with --strict, an inconclusive
case), 2 unusable input (missing files, no matching cases, or, with --strict, runs from different
environments).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu

from dstbench.suite.cases import case_id
from dstbench.util.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dstbench.results.derive import noise_level
from dstbench.results.record import iter_results, report_columns, segment_samples
from dstbench.results.run_folder import RunDirError, load_run_meta, require_results
from dstbench.util.files import RESULTS_FILE

# Memory figures gated, in table order. The allocator peak exists only on CUDA runs.
MEMORY_METRICS = report_columns("bytes")  # the fields the trackers declare with a `bytes` column
# What makes two runs' figures incomparable: the accelerator (or CPU model), the device type, torch,
# and timm (it builds the model, so a new release can change the byte counts the memory gate checks).
ENV_KEYS = (
    ("device_type", "device"), ("device_name", "GPU/CPU model"), ("torch", "torch version"), ("timm", "timm version"),
)

Key = tuple[str, str, float]


class CompareInputError(Exception):
    """The runs cannot be compared (exit 2)."""


@dataclasses.dataclass
class Side:
    """One run folder: its metadata and its last result line per (suite hash, method, density)."""

    path: Path
    meta: dict[str, Any]
    cases: dict[Key, dict[str, Any]]


@dataclasses.dataclass
class TimeVerdict:
    baseline_ms: float
    current_ms: float
    ratio: float  # median(current) / median(baseline): above 1 is slower
    p_value: float
    verdict: str  # "regression", "improvement", "unchanged" or "inconclusive"
    note: str = ""


@dataclasses.dataclass
class MemoryVerdict:
    metric: str
    baseline: int
    current: int
    change: float  # current / baseline - 1 (inf when the baseline was 0)
    verdict: str


@dataclasses.dataclass
class CaseComparison:
    key: Key
    baseline_status: str
    current_status: str
    time: TimeVerdict | None = None
    memory: list[MemoryVerdict] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def case(self) -> str:
        return case_id(self.key[1], self.key[2])

    def _parts(self, verdict: str) -> list[str]:
        parts = [m.metric for m in self.memory if m.verdict == verdict]
        if self.time is not None and self.time.verdict == verdict:
            parts.insert(0, "time")
        return parts

    @property
    def regressions(self) -> list[str]:
        # A case that ran before and fails now is the worst regression there is.
        status = [f"status {self.current_status}"] if self.baseline_status == "ok" != self.current_status else []
        return status + self._parts("regression")

    @property
    def improvements(self) -> list[str]:
        status = [f"status {self.baseline_status} -> ok"] if self.current_status == "ok" != self.baseline_status else []
        return status + self._parts("improvement")

    @property
    def inconclusive(self) -> bool:
        """Time moved beyond the threshold, but the samples cannot tell the runs apart."""
        return self.time is not None and self.time.verdict == "inconclusive"


@dataclasses.dataclass
class Comparison:
    baseline: Side
    current: Side
    cases: list[CaseComparison]
    only_baseline: list[Key]
    only_current: list[Key]
    env_differences: list[str]
    settings: dict[str, Any]

    @property
    def regressed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.regressions]

    @property
    def improved(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.improvements]

    @property
    def inconclusive(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.inconclusive and not c.regressions]


def _key(line: dict[str, Any]) -> Key:
    # Densities are floats written by the same code; rounding guards against 0.1 vs 0.1000000001.
    return (str(line.get("suite_hash")), str(line.get("method")), round(float(line.get("density") or 0.0), 6))


def load_side(path: str | Path) -> Side:
    """Read a run folder; `CompareInputError` when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise CompareInputError(f"{path}: not a run folder")
    try:
        require_results([path])
        meta = load_run_meta(path, required=True)
    except RunDirError as exc:
        raise CompareInputError(str(exc)) from None
    cases: dict[Key, dict[str, Any]] = {}
    for line in iter_results(path):
        cases[_key(line)] = line  # a later line for the same case wins, as in the reports
    if not cases:
        raise CompareInputError(f"{path / RESULTS_FILE}: no result lines")
    return Side(path, meta, cases)


def run_env(side: Side) -> dict[str, str]:
    """The environment the run's cases report, per key; several values are joined with ' | '."""
    env: dict[str, str] = {}
    for key, _ in ENV_KEYS:
        values = sorted({str(line.get("env", {}).get(key)) for line in side.cases.values() if line.get("env")})
        env[key] = " | ".join(values) if values else "unknown"
    return env


def env_differences(baseline: Side, current: Side) -> list[str]:
    base, cur = run_env(baseline), run_env(current)
    return [f"{label} differs: baseline {base[key]}, current {cur[key]}" for key, label in ENV_KEYS if base[key] != cur[key]]


def mann_whitney_method(base: list[float], cur: list[float]) -> str:
    """The exact test where it is valid and cheap (no ties, small samples), else the normal
    approximation; named explicitly so that `min_p_value` describes the test that ran."""
    combined = list(base) + list(cur)
    return "exact" if len(set(combined)) == len(combined) and len(combined) <= 40 else "asymptotic"


def min_p_value(n_baseline: int, n_current: int, method: str = "exact") -> float:
    """The smallest two-sided p the Mann-Whitney U test (`method`) can give with these sample
    sizes: that of two samples that do not overlap at all."""
    apart = mannwhitneyu(
        np.arange(n_current, dtype=float), np.arange(n_current, n_current + n_baseline, dtype=float),
        alternative="two-sided", method=method,
    )
    return float(apart.pvalue)


def compare_time(base: list[float], cur: list[float], threshold_pct: float, alpha: float) -> TimeVerdict:
    base_ms, cur_ms = float(np.median(base)), float(np.median(cur))
    ratio = cur_ms / base_ms if base_ms > 0 else math.inf
    method = mann_whitney_method(base, cur)
    p_value = float(mannwhitneyu(cur, base, alternative="two-sided", method=method).pvalue)
    significant = p_value < alpha
    limit = threshold_pct / 100.0
    verdict = "unchanged"
    if ratio > 1.0 + limit:
        verdict = "regression" if significant else "inconclusive"
    elif ratio < 1.0 - limit:
        verdict = "improvement" if significant else "inconclusive"
    note = ""
    if min_p_value(len(base), len(cur), method) >= alpha:
        # Say so: otherwise a gate that can never fire looks like a passing one.
        note = f"{len(base)} vs {len(cur)} samples cannot reach p < {alpha:g}; time is not gated"
    return TimeVerdict(base_ms, cur_ms, ratio, p_value, verdict, note)


def is_contended(line: dict[str, Any]) -> bool:
    noise = line.get("noise")
    return isinstance(noise, dict) and bool(noise.get("contended"))


def noise_notes(base: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    """Why a side's time is less trustworthy: its samples spread widely, or it was contended."""
    notes = []
    for label, line in (("baseline", base), ("current", cur)):
        samples = segment_samples(line.get("segment_ms"))
        if len(samples) >= 2 and np.median(samples) > 0:
            q1, median, q3 = np.percentile(samples, [25, 50, 75])
            level = noise_level(float(q3 - q1) / float(median))
            if level:
                notes.append(f"{label} {level} (IQR/median {(q3 - q1) / median:.0%})")
        if is_contended(line):
            notes.append(f"{label} contended ({line['noise'].get('starved_segments')} segments starved)")
    return notes


def compare_memory(metric: str, base: int, cur: int, threshold_pct: float) -> MemoryVerdict:
    if base == cur:
        change = 0.0
    else:
        change = (cur - base) / base if base else math.inf
    verdict = "unchanged"
    if change * 100.0 > threshold_pct:
        verdict = "regression"
    elif change * 100.0 < -threshold_pct:
        verdict = "improvement"
    return MemoryVerdict(metric, int(base), int(cur), change, verdict)


def compare_case(
    key: Key, base: dict[str, Any], cur: dict[str, Any], *, time_threshold: float, memory_threshold: float,
    alpha: float, memory_only: bool,
) -> CaseComparison:
    result = CaseComparison(key, str(base.get("status")), str(cur.get("status")))
    if base.get("params") != cur.get("params"):
        result.notes.append("method parameters differ")
    if result.baseline_status != "ok" or result.current_status != "ok":
        return result
    if not memory_only:
        # NaN segment times were written as null; they carry no evidence either way.
        base_ms, cur_ms = segment_samples(base.get("segment_ms")), segment_samples(cur.get("segment_ms"))
        if base_ms and cur_ms:
            result.time = compare_time(base_ms, cur_ms, time_threshold, alpha)
            if result.time.note:
                result.notes.append(result.time.note)
            result.notes += noise_notes(base, cur)
            if result.time.verdict in ("regression", "improvement") and (is_contended(base) or is_contended(cur)):
                # A starved side's times say how busy the machine was, not what the code costs.
                result.time.verdict = "inconclusive"
                result.notes.append("time change not attributed: timed under contention")
        else:
            result.notes.append("no segment samples; time not compared")
    for field, label in MEMORY_METRICS:
        if base.get(field) is not None and cur.get(field) is not None:
            result.memory.append(compare_memory(label, base[field], cur[field], memory_threshold))
        elif field != "peak_memory_bytes" and (base.get(field) is None) != (cur.get(field) is None):
            result.notes.append(f"{label} bytes measured on one side only")
    return result


def _hashes(side: Side) -> str:
    return ", ".join(sorted({k[0] for k in side.cases}))


def compare_runs(
    baseline: Side, current: Side, *, time_threshold: float = 10.0, memory_threshold: float = 1.0,
    alpha: float = 0.05, memory_only: bool = False,
) -> Comparison:
    """Match the two runs' cases and judge each; `CompareInputError` when no case matches."""
    common = [k for k in baseline.cases if k in current.cases]
    if not common:
        raise CompareInputError(
            "no case matches (same suite hash, method and density) between the runs: "
            f"baseline suite hash {_hashes(baseline)}, current {_hashes(current)}; a changed suite "
            "setting (model, data, batch size, optimizer, precision, fuse_norms, mode, timing, accuracy, seed, device) needs a new baseline"
        )
    cases = [
        compare_case(
            k, baseline.cases[k], current.cases[k], time_threshold=time_threshold,
            memory_threshold=memory_threshold, alpha=alpha, memory_only=memory_only,
        )
        for k in sorted(common, key=lambda k: (k[0], -k[2], k[1]))
    ]
    return Comparison(
        baseline=baseline,
        current=current,
        cases=cases,
        only_baseline=sorted(k for k in baseline.cases if k not in current.cases),
        only_current=sorted(k for k in current.cases if k not in baseline.cases),
        env_differences=env_differences(baseline, current),
        settings={
            "time_threshold": time_threshold, "memory_threshold": memory_threshold,
            "alpha": alpha, "memory_only": memory_only,
        },
    )


def exit_code(comparison: Comparison, strict: bool) -> int:
    """The gate's exit code: 2 for incomparable environments under `strict`, 1 for a regression
    (or, under `strict`, an inconclusive case), else 0."""
    if strict and comparison.env_differences:
        return EXIT_USAGE  # the figures are not comparable, so neither verdict can be trusted
    if comparison.regressed or (strict and comparison.inconclusive):
        return EXIT_FAILED
    return EXIT_OK
