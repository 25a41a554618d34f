"""Sessions: the stretches of time in which a run's process sets were timed, and the spread
between them.

Process sets timed one after another share the machine's state of those minutes (its neighbours on
the host, clock and cache pressure), and that state moves a case's time relative to dense, not
only both alike. The power study (`reports/studies/power`) measured it on this project's CPU VM: a
case's ratio to dense moves between runs timed minutes apart by about 3% (sd in logs) beyond what
their sets' spread predicts, while sets added to a run right after its own read what its own read.
So process sets added in one sitting narrow an interval without covering what a run timed at
another time draws: comparing two runs, each side's estimate carries its sessions' offsets
(`dstbench.results.intervals`, the model's c[s]).

A session here: a run's own process sets are one (however long the run took: `dstbench run` timed
them in one sitting); each process set added later (`dstbench.execution.more_sets`: its group id
says so) joins the session before it, or starts a new one where it started more than
`SESSION_GAP_S` after every set before it ended. So sets added right after a run
(`compare --decide`) are its session; sets added in a later sitting (`dstbench run --resume RUN
--more-processes N`) another. The spread between sessions is estimated from comparisons whose
units span two or more (`pool_sessions`): a one-way random-effects estimate over session means,
E[var(M_s)] = sigma_c^2 + mean over s of (sigma_b^2 + w) / n_s, the unit variance seen within
sessions.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from dstbench.results.intervals import BetweenProcesses, BetweenSessions, Unit, UnitSummary
from dstbench.suite.groups import is_added_set

# More than this between one process set's end and the next one's start begins a new session.
# Conservative: the state the power study saw held for minutes, so sessions this close may share
# some of it (sigma_c is then underestimated): a baseline's sessions are best minutes apart.
SESSION_GAP_S = 60.0


def unit_spans(line: Any) -> dict[Unit, tuple[float, float]]:
    """(group, process set) -> (first segment's start, last segment's end) in Unix seconds, from
    `segment_start_s` and `segment_ms`; empty for a line that lacks them."""
    lists = [line.get(k) for k in ("segment_start_s", "segment_ms", "segment_group")]
    if not all(isinstance(v, list) for v in lists) or len({len(v) for v in lists}) != 1:
        return {}
    process = line.get("segment_process")
    process = process if isinstance(process, list) and len(process) == len(lists[0]) else [0] * len(lists[0])
    spans: dict[Unit, tuple[float, float]] = {}
    for start, ms, group, p in zip(*lists, process):
        if not (group and isinstance(start, (int, float)) and isinstance(ms, (int, float)) and np.isfinite(start)):
            continue
        key = (group, int(p or 0))
        end = start + max(0.0, ms) / 1000.0 if np.isfinite(ms) else start
        low, high = spans.get(key, (start, end))
        spans[key] = (min(low, start), max(high, end))
    return spans


def session_of(spans: dict[Unit, tuple[float, float]], gap_s: float = SESSION_GAP_S) -> dict[Unit, int]:
    """Each unit's session: 0 for the run's own, then 1, 2, ... in time order for added sets (see
    the module docstring)."""
    own = [span for unit, span in spans.items() if not is_added_set(unit[0])]
    sessions: dict[Unit, int] = {unit: 0 for unit in spans if not is_added_set(unit[0])}
    index, last_end = 0, max((end for _, end in own), default=None)
    for unit, (start, end) in sorted(((u, s) for u, s in spans.items() if is_added_set(u[0])), key=lambda item: item[1]):
        if last_end is not None and start - last_end > gap_s:
            index += 1
        sessions[unit] = index
        last_end = end if last_end is None else max(last_end, end)
    return sessions


def assign_sessions(summary: UnitSummary | None, line: Any, gap_s: float = SESSION_GAP_S) -> UnitSummary | None:
    """`summary` with each unit's session from `line`'s segment times (a unit the line does not
    time, or a line without times: session 0)."""
    if summary is not None:
        sessions = session_of(unit_spans(line), gap_s)
        summary.sessions = [sessions.get(key, 0) for key in summary.keys] if summary.keys else [0] * summary.count
    return summary


def sessions_in(summary: UnitSummary | None) -> int:
    return len(summary.by_session()) if summary is not None and summary.count else 0


def pool_sessions(items: Iterable[tuple[UnitSummary | None, BetweenProcesses]]) -> BetweenSessions:
    """sigma_c^2 from every comparison whose units span two or more sessions, each with its run's
    between-process variance (see the module docstring); not seen where none does."""
    excess, df = 0.0, 0
    for summary, between in items:
        if summary is None or sessions_in(summary) < 2:
            continue
        groups = summary.by_session()
        means = [float(np.mean(g)) for g in groups]
        unit_variance = summary.within + (between.variance if between.seen else 0.0)
        expected = float(np.mean([unit_variance / len(g) for g in groups]))
        excess += (len(groups) - 1) * (float(np.var(means, ddof=1)) - expected)
        df += len(groups) - 1
    return BetweenSessions(max(0.0, excess / df), df) if df else BetweenSessions()
