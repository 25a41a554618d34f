"""The run-to-run regression gate of `dstbench compare BASELINE_RUN CURRENT_RUN`: each case's
verdicts and the gate's exit code (the command: `dstbench.cli.compare`; its report:
`dstbench.gates.comparison_text`).

Cases are matched by suite hash and case key (case id, from method, density and sweep point,
and seed; `dstbench.gates.sides.SideKey`): a sweep's cases by their point's suite
hash, so only cases of the same point (or of a run without a sweep at the same settings) are
compared, and each is judged against its own point's dense; a suite's `seeds:` by seed, each
against its own seed's dense (a line from before lines named their seed counts as its run's first
seed), and no seed's line replaces another's. Time is judged from process-level data
(`dstbench.results.intervals`): each side's samples grouped by the process sets that timed them,
with the process-to-process spread pooled over that run's cases, so a process's own speed offset
is not taken for a change. On the relative basis each case's time is taken relative
to its own run's dense, round by round: what moves every case of a run alike (a machine shift, a
neighbour) cancels; dense itself, the reference, is judged on its own times, and a change of it
that every case shares is reported as such and fails unless accepted (`accept_machine_shift`);
"absolute" gates each case's own times; "auto" (the default) is relative wherever both runs have
the case's dense, else absolute. The verdict (`dstbench.gates.time_rule`): a regression (or
improvement) only when the change is significantly beyond the +/-threshold band (Holm over the
cases), unchanged only when its whole interval lies inside the band, else **inconclusive**, shown
and counted with what would decide it, never reported as no change. A side timed under
contention (the case in any of its groups, or a quarter of the rounds it is judged on starved, its
dense's included) makes the time verdict inconclusive, whatever the numbers say: starved segments
measure the machine's load, not the code; so do sides timed under different protocols
(`allow_protocol_change`; without it they are refused).
Memory is judged from exact figures (allocator peak where both runs have it, training-state and
activation bytes always) against its own threshold, with no test: byte counts do not jitter.
Top-1, where both runs trained a case, is judged per case over its seeds, paired by seed where the
runs have the same seeds (`dstbench.gates.top1_compare`), by the same rule as time: a change
significantly beyond +/- the threshold (Holm over the cases) is a regression or an improvement,
one whose (1 - 2 alpha) interval lies inside it is unchanged, anything else (one seed on a side
included) is inconclusive. A tracker's field named with `metrics` (`--metric NAME`) is judged per
case in its declared direction (`dstbench.gates.field_compare`): an exact one as memory, a sampled
one by the same rule over seeds.

Exit codes (`exit_code`): 0 no regression, 1 a regression or a baseline case the current run lacks
(unless `allow_missing`), or, with --strict, an inconclusive case or top-1; 2 unusable input
(missing files, no matching cases, different timing protocols, or, with --strict, runs from
different environments).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dstbench.util.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dstbench.results.derive import noise_level
from dstbench.gates.sides import (
    CompareInputError, Side, SideKey, check_thresholds, env_differences, key_order, key_text, protocol_differences,
    several_seeds,
)
from dstbench.gates.time_compare import case_basis, is_contended, time_verdicts
from dstbench.gates.time_rule import ReferenceShift, TimeVerdict, reference_shifts
from dstbench.gates.field_compare import FieldVerdict, compare_field
from dstbench.gates.top1_compare import Top1Verdict, compare_top1, setups_differ_in_seed_only
from dstbench.results.record import report_columns, segment_samples

__all__ = ["CaseComparison", "Comparison", "CompareInputError", "MemoryVerdict", "case_basis", "compare_runs", "exit_code"]

# Memory figures gated, in table order. The allocator peak exists only on CUDA runs.
MEMORY_METRICS = report_columns("bytes")  # the fields the trackers declare with a `bytes` column


@dataclasses.dataclass
class MemoryVerdict:
    metric: str
    baseline: int
    current: int
    change: float  # current / baseline - 1 (inf when the baseline was 0)
    verdict: str


@dataclasses.dataclass
class CaseComparison:
    key: SideKey
    baseline_status: str
    current_status: str
    time: TimeVerdict | None = None
    memory: list[MemoryVerdict] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    sweep: dict[str, Any] | None = None  # the sweep point (its suite hash is the key's): named in `case`
    seeded: bool = False  # the runs hold several seeds: `case` names the key's

    @property
    def case(self) -> str:
        return key_text(self.key, self.seeded)

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
    only_baseline: list[SideKey]
    only_current: list[SideKey]
    env_differences: list[str]
    settings: dict[str, Any]
    # Top-1 per case over its seeds (`dstbench.gates.top1_compare`); empty where neither run trained.
    top1: list[Top1Verdict] = dataclasses.field(default_factory=list)
    # Each time reference (dense) that moved beyond the band, and which cases moved with it.
    shifts: list[ReferenceShift] = dataclasses.field(default_factory=list)
    # How the sides' timing protocols differ (compared only under allow_protocol_change).
    protocol_differences: list[str] = dataclasses.field(default_factory=list)
    # The baseline's lines whose case (method, density, sweep point) the current run has at no seed.
    absent: list[SideKey] = dataclasses.field(default_factory=list)
    # Each tracker field asked for (`metrics`), per case (`dstbench.gates.field_compare`).
    fields: list[FieldVerdict] = dataclasses.field(default_factory=list)

    @property
    def fields_regressed(self) -> list[FieldVerdict]:
        return [v for v in self.fields if v.verdict == "regression"]

    @property
    def fields_inconclusive(self) -> list[FieldVerdict]:
        return [v for v in self.fields if v.verdict == "inconclusive"]

    @property
    def missing(self) -> list[SideKey]:
        """Cases of the baseline the current run lacks at every seed: a failure unless allowed. (A
        seed missing from a case the current run has is listed, not failed: top-1 says what its
        comparison rests on.)"""
        return [] if self.settings.get("allow_missing") else self.absent

    @property
    def top1_regressed(self) -> list[Top1Verdict]:
        return [v for v in self.top1 if v.verdict == "regression"]

    @property
    def top1_inconclusive(self) -> list[Top1Verdict]:
        return [v for v in self.top1 if v.verdict == "inconclusive"]

    @property
    def regressed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.regressions]

    @property
    def improved(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.improvements]

    @property
    def inconclusive(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.inconclusive and not c.regressions]


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
    key: SideKey, base: dict[str, Any], cur: dict[str, Any], *, memory_threshold: float, time: TimeVerdict | None,
    memory_only: bool,
) -> CaseComparison:
    sweep = base.get("sweep")
    result = CaseComparison(key, str(base.get("status")), str(cur.get("status")), sweep=sweep if isinstance(sweep, dict) else None)
    if base.get("params") != cur.get("params"):
        result.notes.append("method parameters differ")
    if result.baseline_status != "ok" or result.current_status != "ok":
        return result
    if not memory_only:
        result.time = time
        if time is None:
            result.notes.append("no segment samples (or no dense to relate them to); time not compared")
        else:
            result.notes += [time.note] if time.note else []
            result.notes += noise_notes(base, cur)
    for field, label in MEMORY_METRICS:
        if base.get(field) is not None and cur.get(field) is not None:
            result.memory.append(compare_memory(label, base[field], cur[field], memory_threshold))
        elif field != "peak_memory_bytes" and (base.get(field) is None) != (cur.get(field) is None):
            result.notes.append(f"{label} bytes measured on one side only")
    return result


def _hashes(side: Side) -> str:
    return ", ".join(sorted({k.suite_hash for k in side.cases}))


def compare_runs(
    baseline: Side, current: Side, *, time_threshold: float = 10.0, memory_threshold: float = 1.0,
    alpha: float = 0.05, memory_only: bool = False, time_basis: str = "auto", top1_threshold: float = 1.0,
    allow_missing: bool = False, accept_machine_shift: bool = False, allow_protocol_change: bool = False,
    metrics: tuple[str, ...] = (),
) -> Comparison:
    """Match the two runs' cases and judge each (and, unless `memory_only`, each trained case's
    top-1 over its seeds: `dstbench.gates.top1_compare`, `top1_threshold` in points).
    `CompareInputError` when no case matches, or when time is judged and the sides were timed under
    different protocols (unless `allow_protocol_change`: every time verdict is then inconclusive).
    `allow_missing`: a baseline case the current run lacks does not fail the gate;
    `accept_machine_shift`: a slowdown of the time reference that every case shares does not.
    `metrics`: tracker fields judged besides (`dstbench.gates.field_compare`; an unknown name is
    `CompareInputError`)."""
    check_thresholds(time_threshold, memory_threshold, top1_threshold, alpha)
    fields = [verdict for name in dict.fromkeys(metrics) for verdict in compare_field(
        baseline, current, name, time_threshold=time_threshold, memory_threshold=memory_threshold, alpha=alpha)]
    common = [k for k in baseline.cases if k in current.cases]
    top1 = [] if memory_only else compare_top1(baseline, current, top1_threshold, alpha)
    if not common and not top1:
        raise CompareInputError(
            "no case matches (same suite hash, method, density and seed) between the runs: "
            f"baseline suite hash {_hashes(baseline)}, current {_hashes(current)}; a changed suite "
            "setting (model, data, batch size, optimizer, precision, fuse_norms, mode, timing, accuracy, seed, device) needs a new baseline"
        )
    protocol = [] if memory_only else protocol_differences(baseline, current)
    if protocol and not allow_protocol_change:
        raise CompareInputError(
            "the runs were timed under different protocols (" + "; ".join(protocol) + "): their times do not "
            "compare; --allow-protocol-change (allow_protocol_change=True) compares them with every time verdict inconclusive"
        )
    def run_order(k: SideKey) -> tuple[str, int, float, str]:  # by seed, then densest first
        line = baseline.cases[k]
        return (k.suite_hash, -1 if k.case.seed is None else k.case.seed, -float(line.get("density") or 0.0), str(line.get("method")))

    order = sorted(common, key=run_order)
    times, own = ({}, {}) if memory_only else time_verdicts(
        baseline, current, order, basis=time_basis, threshold_pct=time_threshold, alpha=alpha,
        protocol_change="; ".join(protocol),
    )
    cases = [
        compare_case(
            k, baseline.cases[k], current.cases[k], memory_threshold=memory_threshold, time=times.get(k),
            memory_only=memory_only,
        )
        for k in order
    ]
    seeded = several_seeds(baseline, current)
    for case in cases:
        case.seeded = seeded
    shifts = reference_shifts(times, own, {c.key: c.case for c in cases}, accept_machine_shift, time_threshold)
    only_baseline = sorted((k for k in baseline.cases if k not in current.cases), key=key_order)
    return Comparison(
        baseline=baseline,
        current=current,
        cases=cases,
        only_baseline=only_baseline,
        only_current=sorted((k for k in current.cases if k not in baseline.cases), key=key_order),
        env_differences=env_differences(baseline, current),
        settings={
            "time_threshold": time_threshold, "memory_threshold": memory_threshold,
            "alpha": alpha, "memory_only": memory_only, "time_basis": time_basis, "top1_threshold": top1_threshold,
            "tests": sum(1 for c in cases if c.time is not None and math.isfinite(c.time.p_raw)),
            "allow_missing": allow_missing, "accept_machine_shift": accept_machine_shift,
            "allow_protocol_change": allow_protocol_change, "metrics": list(dict.fromkeys(metrics)),
        },
        top1=top1,
        shifts=shifts,
        protocol_differences=protocol,
        absent=absent_cases(baseline, current, only_baseline),
        fields=fields,
    )


def absent_cases(baseline: Side, current: Side, only_baseline: list[SideKey]) -> list[SideKey]:
    """The baseline's keys whose case the current run has at no seed: matched by suite hash, method,
    density and sweep point, or without the hash where the setups differ in their seed alone."""
    seedless = setups_differ_in_seed_only(baseline, current)

    def case(key: SideKey) -> tuple[str | None, str]:
        return (None if seedless else key.suite_hash, key.case.case_id)

    present = {case(k) for k in current.cases}
    return [k for k in only_baseline if case(k) not in present]


def exit_code(comparison: Comparison, strict: bool) -> int:
    """The gate's exit code: 2 for incomparable environments under `strict`, 1 for a regression or a
    baseline case missing from the current run (or, under `strict`, an inconclusive case), else 0."""
    if strict and comparison.env_differences:
        return EXIT_USAGE  # the figures are not comparable, so neither verdict can be trusted
    if comparison.regressed or comparison.top1_regressed or comparison.fields_regressed or comparison.missing:
        return EXIT_FAILED
    if strict and (comparison.inconclusive or comparison.top1_inconclusive or comparison.fields_inconclusive):
        return EXIT_FAILED
    return EXIT_OK
