"""Sessions (`dstbench.results.sessions`): units grouped by when they were timed, and the spread
between sessions pooled over comparisons (on hand-made lines and planted, seeded draws)."""

from __future__ import annotations

import numpy as np

from dstbench.results.intervals import BetweenProcesses, BetweenSessions, UnitSummary, interval, log_variance
from dstbench.results.sessions import SESSION_GAP_S, assign_sessions, pool_sessions, session_of, unit_spans
from dstbench.suite.groups import added_set_key


def group(p: int) -> str:
    """Sets 0 and 1: the run's own; later ones added after it (`dstbench.suite.groups.added_set_key`)."""
    return f"d=0.5#own{p}" if p < 2 else f"{added_set_key('d=0.5', p)}#add{p}"


def timed_line(starts: dict[int, float], rounds: int = 3, ms: float = 100.0) -> dict:
    """A line whose process set p (its own group) starts at `starts[p]`, one segment a second."""
    line: dict = {"segment_ms": [], "segment_group": [], "segment_process": [], "segment_start_s": []}
    for p, start in starts.items():
        for r in range(rounds):
            line["segment_ms"].append(ms)
            line["segment_group"].append(group(p))
            line["segment_process"].append(p)
            line["segment_start_s"].append(start + r)
    return line


def test_added_sets_a_gap_after_the_rest_start_a_new_session() -> None:
    gap = SESSION_GAP_S
    line = timed_line({0: 0.0, 1: 5.0 + 2 * gap, 2: 7.1 + 2 * gap + 1, 3: 7.1 + 2 * gap + 2, 4: 9.1 + 4 * gap, 5: 9.1 + 6 * gap})
    spans = unit_spans(line)
    assert spans[(group(0), 0)] == (0.0, 2.1)  # its last segment ends 100 ms after it starts
    # The run's own sets are one session however far apart; added sets join the one before them
    # unless they start more than the gap after it ended.
    assert list(session_of(spans).values()) == [0, 0, 0, 0, 1, 2]
    assert unit_spans({"segment_ms": [1.0]}) == {}  # a line without times: no spans, one session


def test_a_summary_takes_its_sessions_from_its_line() -> None:
    keys = [(group(p), p) for p in range(3)]
    summary = UnitSummary([0.0, 0.1, 0.2], 0.001, 6, 9, keys=keys, sessions=[0, 0, 0])
    assign_sessions(summary, timed_line({0: 0.0, 1: 10.0, 2: 1000.0}))
    assert summary.sessions == [0, 0, 1] and summary.by_session() == [[0.0, 0.1], [0.2]]
    assert summary.session_share == (4 + 1) / 9  # sum n_s^2 / U^2


def test_the_session_part_is_added_and_more_units_of_one_session_keep_it() -> None:
    one = UnitSummary([0.0] * 4, 0.0004, 16, 20, keys=[("g", p) for p in range(4)], sessions=[0] * 4)
    many = UnitSummary([0.0] * 4, 0.0004, 16, 20, keys=[("g", p) for p in range(4)], sessions=[0, 1, 2, 3])
    between, sessions = BetweenProcesses(0.002, 10), BetweenSessions(0.001, 6)
    base = log_variance(one, between)[0]
    assert abs(log_variance(one, between, sessions)[0] - (base + 0.001)) < 1e-12  # one session: all of it
    assert abs(log_variance(many, between, sessions)[0] - (base + 0.001 / 4)) < 1e-12  # four: a quarter
    assert "4 sessions" in interval(many, between, sessions=sessions).covers
    assert "sessions" not in interval(many, between).covers


def test_pooled_session_spread_recovers_a_planted_one() -> None:
    rng = np.random.default_rng(7)
    sigma_c, sigma_b, w = 0.03, 0.04, 0.0004
    items = []
    for _ in range(60):  # comparisons: 4 sessions of 2 units each
        medians, sessions = [], []
        for s in range(4):
            offset = rng.normal(0, sigma_c)
            for _ in range(2):
                medians.append(float(offset + rng.normal(0, sigma_b) + rng.normal(0, np.sqrt(w))))
                sessions.append(s)
        items.append((UnitSummary(medians, w, 32, 40, keys=[("g", i) for i in range(8)], sessions=sessions),
                      BetweenProcesses(sigma_b**2, 240)))
    pooled = pool_sessions(items)
    assert pooled.seen and pooled.df == 180
    assert 0.5 * sigma_c**2 < pooled.variance < 1.5 * sigma_c**2
    # One session per comparison: nothing to see.
    flat = [(UnitSummary(s.medians, s.within, s.within_df, s.rounds, s.keys, [0] * 8), b) for s, b in items]
    assert not pool_sessions(flat).seen


def test_process_spread_is_taken_within_sessions() -> None:
    from dstbench.results.intervals import pool_between

    # Two sessions 0.2 apart, units within each 0.02 apart: the process spread is the latter's.
    summary = UnitSummary([0.0, 0.02, 0.2, 0.22], 0.0, 8, 12, keys=[("g", p) for p in range(4)], sessions=[0, 0, 1, 1])
    assert abs(pool_between([summary]).variance - 0.0002) < 1e-12
    summary.sessions = [0, 0, 0, 0]  # as one session, the offsets between them count as process spread
    assert pool_between([summary]).variance > 0.01
