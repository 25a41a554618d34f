"""Intervals that hold across re-runs: samples grouped by the processes that timed them.

A result line tags every timed segment with its interleaved group, round and process set
(`segment_group`, `segment_round`, `segment_process`). A *unit* is one process set of one group:
the rounds one set of fresh processes timed. Within a unit the rounds share the processes' speed
offsets (memory layout, thread placement, clock and cache state), which a re-run draws anew; an
interval from one unit's rounds alone covers those processes only.

The model, in logs, for a paired ratio (reference_ms / method_ms of one round) or a segment time:

    y[u, r] = mu + b[u] + e[u, r],   b ~ (0, sigma_b^2) per unit,  e ~ (0, sigma_w^2) per round.

Per unit the median m[u] of its rounds; the estimate is exp(mean of m[u]) (with one unit: the
median of its rounds). The variance of a unit median is sigma_b^2 + w, where w = (pi/2) s^2 / n is
a median's sampling variance from the case's own within-unit spread s^2 (pooled over its units).
sigma_b^2 is pooled over the run's comparisons (`BetweenProcesses`: a one-way random-effects
estimate, E[var(m[u])] = sigma_b^2 + w): a run has few units per case but many cases, and the
offsets are the machine's, not the method's. The interval is exp(estimate +- t * sqrt((sigma_b^2 +
w) / U)), with Satterthwaite's degrees of freedom. With one unit per case no run can see sigma_b:
the interval is then the within-process one and says so (`covers`).

Sessions. Units timed one after another share the machine's state of those minutes, which a
run timed later draws anew: y[s, u, r] = mu + c[s] + b[u] + e[u, r], c ~ (0, sigma_c^2) per session
(`dstbench.results.sessions` groups a line's units into sessions by time and pools sigma_c^2; b is
then estimated within sessions). Where it is seen, an estimate's variance gains sigma_c^2 x
sum(n_s^2) / U^2 (n_s units of U in session s): sets added within one session do not shrink it.

Rounds in which either side was starved (`noise.starved`) are left out of a paired ratio, whatever
the case-level contention rule says (`paired_units`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

import numpy as np
from scipy import stats

LEVEL = 0.95
MEDIAN_EFFICIENCY = math.pi / 2  # var(median) / var(mean) for normal data, large n

Unit = tuple[str, int]  # (group id, process set)


def _lists(line: Any, *keys: str) -> list[list[Any]] | None:
    values = [line.get(key) if hasattr(line, "get") else None for key in keys]
    if not all(isinstance(v, list) for v in values) or len({len(v) for v in values}) != 1:
        return None
    return values


def starved_flags(line: Any) -> list[bool]:
    """The contention rule's per-segment verdict, aligned with `segment_ms` (all False without one)."""
    ms = line.get("segment_ms") if hasattr(line, "get") else None
    noise = line.get("noise") if hasattr(line, "get") else None
    flags = noise.get("starved") if isinstance(noise, dict) else None
    n = len(ms) if isinstance(ms, list) else 0
    return [bool(f) for f in flags] if isinstance(flags, list) and len(flags) == n else [False] * n


def tagged_samples(line: Any, untagged: bool = False) -> dict[tuple[str, int], tuple[float, int, bool]]:
    """(group, round) -> (ms, process set, starved) of a line's finite positive samples. A line
    without group and round tags (written before interleaving) has none, unless `untagged`: then
    its samples are one unit, in order."""
    lists = _lists(line, "segment_ms", "segment_group", "segment_round")
    if lists is None and untagged and isinstance(line.get("segment_ms"), list):
        count = len(line["segment_ms"])
        lists = [line["segment_ms"], ["untagged"] * count, list(range(count))]
    if lists is None:
        return {}
    ms, groups, rounds = lists
    process = line.get("segment_process")
    process = process if isinstance(process, list) and len(process) == len(ms) else [0] * len(ms)
    starved = starved_flags(line)
    out = {}
    for x, g, r, p, s in zip(ms, groups, rounds, process, starved):
        if g and isinstance(x, (int, float)) and x is not None and np.isfinite(x) and x > 0:
            out[(g, int(r))] = (float(x), int(p or 0), bool(s))
    return out


@dataclasses.dataclass
class UnitSamples:
    """Log values by unit, and how many paired rounds were left out as starved."""

    units: dict[Unit, list[float]]
    starved: int = 0
    paired: int = 0  # rounds both sides timed, starved ones included

    @property
    def values(self) -> list[float]:
        return [v for unit in sorted(self.units) for v in self.units[unit]]


Samples = dict[tuple[str, int], tuple[float, int, bool]]  # (group, round) -> (value, process set, starved)


def paired_rounds(pairs: Iterable[tuple[Samples, Samples]], drop_starved: bool = True) -> UnitSamples:
    """log(reference / method) of every (group, round) both samples of each pair hold, by unit; a
    round where either side was starved is left out (and counted) unless `drop_starved` is false."""
    units: dict[Unit, list[float]] = {}
    starved = paired = 0
    for ref, own in pairs:
        for key in sorted(set(ref) & set(own)):
            (ref_value, process, ref_starved), (own_value, _, own_starved) = ref[key], own[key]
            paired += 1
            if ref_starved or own_starved:
                starved += 1
                if drop_starved:
                    continue
            units.setdefault((key[0], process), []).append(math.log(ref_value / own_value))
    return UnitSamples(units, starved, paired)


def paired_units(reference: Any, method: Any, drop_starved: bool = True) -> UnitSamples:
    """log(reference_ms / method_ms) of every round both were timed in, by unit (`paired_rounds`)."""
    return paired_rounds([(tagged_samples(reference), tagged_samples(method))], drop_starved)


def sample_units(line: Any, drop_starved: bool = True) -> UnitSamples:
    """log(segment ms) by unit, starved segments left out (unless `drop_starved` is false): a
    case's own times (absolute basis)."""
    units: dict[Unit, list[float]] = {}
    starved = 0
    samples = tagged_samples(line, untagged=True)
    for (group, _), (ms, process, is_starved) in sorted(samples.items()):
        if is_starved:
            starved += 1
            if drop_starved:
                continue
        units.setdefault((group, process), []).append(math.log(ms))
    return UnitSamples(units, starved, len(samples))


def judged_units(units: Callable[[bool], UnitSamples]) -> UnitSamples:
    """`units(drop_starved=True)`, or every round where too few unstarved ones are left to judge
    (the starved count stays, so the figure is flagged contended rather than left unmeasured)."""
    kept = units(True)
    if kept.starved and summarize(kept) is None:
        return units(False)
    return kept


@dataclasses.dataclass
class UnitSummary:
    """One comparison's units: their medians, the within-unit variance of a median (w) and its df;
    the units' keys, and the session of each (`dstbench.results.sessions`: all 0 until assigned)."""

    medians: list[float]
    within: float
    within_df: int
    rounds: int
    keys: list[Unit] = dataclasses.field(default_factory=list)
    sessions: list[int] = dataclasses.field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.medians)

    @property
    def estimate(self) -> float:
        return float(np.mean(self.medians))

    def by_session(self) -> list[list[float]]:
        """The medians grouped by session (one group when none were assigned)."""
        if len(self.sessions) != len(self.medians):
            return [list(self.medians)]
        groups: dict[int, list[float]] = {}
        for median, session in zip(self.medians, self.sessions):
            groups.setdefault(session, []).append(median)
        return list(groups.values())

    @property
    def session_share(self) -> float:
        """How much of one session's offset the estimate (a mean over units) carries: sum(n_s^2) / U^2,
        1 with one session, 1/S with S equal sessions."""
        return sum(len(g) ** 2 for g in self.by_session()) / self.count**2 if self.count else 1.0


def summarize(samples: UnitSamples) -> UnitSummary | None:
    """The units' medians and w; None without a unit of at least two rounds (no spread to see)."""
    keys = [k for k, v in samples.units.items() if v]
    units = [samples.units[k] for k in keys]
    if not units:
        return None
    squares = sum(float(np.sum((np.asarray(v) - np.median(v)) ** 2)) for v in units)
    df = sum(len(v) - 1 for v in units)
    if df <= 0:
        return None
    per_round = squares / df
    n = float(np.mean([len(v) for v in units]))
    return UnitSummary([float(np.median(v)) for v in units], MEDIAN_EFFICIENCY * per_round / n, df, sum(map(len, units)),
                       keys, [0] * len(keys))


@dataclasses.dataclass(frozen=True)
class BetweenProcesses:
    """sigma_b^2 pooled over a run's comparisons, and its degrees of freedom (0: not seen)."""

    variance: float = 0.0
    df: int = 0

    @property
    def seen(self) -> bool:
        return self.df > 0


def pool_between(summaries: Iterable[UnitSummary | None]) -> BetweenProcesses:
    """The between-process variance from every comparison with two or more units (of one session:
    the spread of units within their sessions, where a comparison's units span several)."""
    excess, df = 0.0, 0
    for s in summaries:
        if s is None:
            continue
        groups = [g for g in s.by_session() if len(g) >= 2]
        count = sum(len(g) - 1 for g in groups)
        if not count:
            continue
        spread = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups) / count
        excess += count * (spread - s.within)
        df += count
    return BetweenProcesses(max(0.0, excess / df), df) if df else BetweenProcesses()


@dataclasses.dataclass(frozen=True)
class Interval:
    """An estimate (back on the ratio scale) with its interval and what the interval covers."""

    value: float
    low: float
    high: float
    log_se: float  # standard error of the log estimate
    df: float
    units: int
    rounds: int
    covers: str


@dataclasses.dataclass(frozen=True)
class BetweenSessions:
    """The variance of a session's offset (`dstbench.results.sessions`) and its degrees of freedom
    (0: not seen, and then no part of an interval)."""

    variance: float = 0.0
    df: int = 0

    @property
    def seen(self) -> bool:
        return self.df > 0


def covers_text(units: int, rounds: int, between: BetweenProcesses, sessions: int = 0) -> str:
    """"2 processes x 5 rounds" or "1 process x 10 rounds, within one process"; with `sessions`
    (the session spread part of the interval), ", 3 sessions"."""
    per = round(rounds / units) if units else 0
    text = f"{units} process{'es' if units != 1 else ''} x {per} rounds"
    text = text if between.seen else f"{text}, within one process"
    return f"{text}, {sessions} session{'s' if sessions != 1 else ''}" if sessions else text


def log_variance(
    summary: UnitSummary, between: BetweenProcesses, sessions: BetweenSessions = BetweenSessions()
) -> tuple[float, float]:
    """(variance of the log estimate, its Satterthwaite degrees of freedom)."""
    between_part = between.variance / summary.count if between.seen else 0.0
    within_part = summary.within / summary.count
    session_part = sessions.variance * summary.session_share if sessions.seen else 0.0
    variance = between_part + within_part + session_part
    if variance <= 0:
        return 0.0, float(summary.within_df)
    denominator = (within_part**2 / summary.within_df + (between_part**2 / between.df if between.seen else 0.0)
                   + (session_part**2 / sessions.df if sessions.seen else 0.0))
    return variance, variance**2 / denominator if denominator > 0 else float(summary.within_df)


def interval(
    summary: UnitSummary, between: BetweenProcesses, level: float = LEVEL, sessions: BetweenSessions = BetweenSessions()
) -> Interval:
    """The estimate of `summary` with its `level` interval (see the module docstring); with
    `sessions` seen, the spread between sessions is part of it."""
    variance, df = log_variance(summary, between, sessions)
    se = math.sqrt(variance)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    centre = summary.estimate
    return Interval(
        math.exp(centre), math.exp(centre - half), math.exp(centre + half), se, df, summary.count, summary.rounds,
        covers_text(summary.count, summary.rounds, between, len(summary.by_session()) if sessions.seen else 0),
    )


@dataclasses.dataclass(frozen=True)
class LogChange:
    """log(current / base) from two independent log estimates: its standard error and Welch-
    Satterthwaite degrees of freedom, an interval, and one-sided tests against a bound."""

    log_ratio: float
    se: float
    df: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The change's `level` interval on the ratio scale."""
        if self.se <= 0:
            return self.ratio, self.ratio
        half = float(stats.t.ppf(0.5 + level / 2, self.df)) * self.se
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def p_above(self, bound: float) -> float:
        """One-sided p against "the change is at most `bound`" (a ratio): small when it is above."""
        if self.se <= 0:
            return 0.0 if self.ratio > bound else 1.0
        return float(stats.t.sf((self.log_ratio - math.log(bound)) / self.se, self.df))

    def p_below(self, bound: float) -> float:
        """One-sided p against "the change is at least `bound`": small when it is below."""
        if bound <= 0:
            return 1.0  # no ratio lies below 0
        if self.se <= 0:
            return 0.0 if self.ratio < bound else 1.0
        return float(stats.t.sf((math.log(bound) - self.log_ratio) / self.se, self.df))


def log_change(base: Interval, current: Interval) -> LogChange:
    """current / base in logs, from two independent estimates."""
    d = math.log(current.value) - math.log(base.value)
    variance = base.log_se**2 + current.log_se**2
    if variance <= 0:
        return LogChange(d, 0.0, math.inf)
    df = variance**2 / (base.log_se**4 / max(base.df, 1e-9) + current.log_se**4 / max(current.df, 1e-9))
    return LogChange(d, math.sqrt(variance), df)


def difference(base: Interval, current: Interval, level: float = LEVEL) -> tuple[float, float, float, float]:
    """current / base on the ratio scale: (ratio, low, high, two-sided p that it is 1), from the
    two independent log estimates (Welch-Satterthwaite degrees of freedom)."""
    change = log_change(base, current)
    low, high = change.interval(level)
    return change.ratio, low, high, min(1.0, 2 * min(change.p_above(1.0), change.p_below(1.0)))


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values (family-wise error over the list), in the input's order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
