"""`dstbench compare --decide`: how many more process sets decide a change, which cases more sets
cannot decide, and the loop that adds sets until the data decide or the budget is spent (on
synthetic run folders, the sets added by a stand-in that writes samples)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from dstbench.gates.decide import decide_inconclusive, sets_needed
from dstbench.gates.time_rule import TimeVerdict
from dstbench.results.intervals import LogChange
from tests.gates.synthetic import line, write_run

# Round-to-round jitter (logs) and each process set's own offset: the between-process spread is
# what keeps a two-set run from deciding a 20% change at a 10% band.
JITTER = [0.004, -0.003, 0.002, -0.004, 0.001]
OFFSETS = [0.06, -0.06, 0.05, -0.05, 0.04, -0.04, 0.06, -0.06, 0.05, -0.05, 0.04, -0.04]


def in_sittings(p: int) -> float:
    """A baseline timed in sittings of two process sets each, an hour apart (sessions)."""
    return 3600.0 * (p // 2) + 10.0 * (p % 2)


def in_one_sitting(p: int) -> float:
    """The current run and the sets added to it: one after another (one session)."""
    return 10**6 + 10.0 * p


def samples(level: float, sets: range, start: Any = in_one_sitting) -> dict[str, list[Any]]:
    """Per-round samples of `level` ms in process sets `sets`, each its own group (as added sets
    are), set p timed from `start(p)` seconds."""
    out: dict[str, list[Any]] = {k: [] for k in ("segment_ms", "segment_group", "segment_round", "segment_process", "segment_start_s")}
    for p in sets:
        for r, j in enumerate(JITTER):
            out["segment_ms"].append(round(level * math.exp(j + OFFSETS[p % len(OFFSETS)] * (level != 100.0)), 6))
            out["segment_group"].append(f"d=0.5+set{p}#t{p}")
            out["segment_round"].append(r)
            out["segment_process"].append(p)
            out["segment_start_s"].append(start(p) + r)
    return out


def run_lines(rigl_ms: float, sets: range, start: Any = in_one_sitting) -> list[dict[str, Any]]:
    return [line("dense", 1.0, **samples(100.0, sets, start)), line("rigl", 0.5, **samples(rigl_ms, sets, start))]


@dataclasses.dataclass
class Added:
    group_id: str


def stand_in(levels: dict[str, float]) -> Any:
    """An `add_process_sets` that appends `sets` more process sets' samples to the run's lines."""
    calls: list[tuple[list[str], int]] = []

    def add(run_dir: Path, case_ids: list[str], sets: int, **options: Any) -> list[Added]:
        calls.append((case_ids, sets))
        path = run_dir / "results.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        first = 1 + max(p for x in lines for p in x["segment_process"])
        for x in lines:
            more = samples(levels[x["method"]], range(first, first + sets))
            for key, values in more.items():
                x[key] = x[key] + values
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        return [Added(f"d=0.5+set{p}#t{p}") for p in range(first, first + sets)]

    add.calls = calls  # type: ignore[attr-defined]
    return add


def test_the_sets_needed_decide_the_change_at_its_estimate() -> None:
    change = LogChange(math.log(1.2), 0.05, 6.0)
    verdict = TimeVerdict(100, 120, 1.2, 1.0, "inconclusive", change=change, sides_se=(0.02, 0.046), current_units=2)
    needed = sets_needed(verdict, 10.0, 0.05)
    assert needed is not None and needed >= 1
    se_c = 0.046 * math.sqrt(2 / (2 + needed))  # the current side's se with that many more units
    margin = math.log(1.2) - math.log(1.1)
    assert se_c**2 + 0.02**2 <= (margin / 1.645) ** 2 * 1.5  # decided, up to the t quantile's excess over z
    # The baseline's own spread wider than the margin allows: no number of current sets decides it.
    wide = dataclasses.replace(verdict, sides_se=(0.06, 0.046))
    assert sets_needed(wide, 10.0, 0.05) is None
    # A change on the band's edge is never decided.
    edge = dataclasses.replace(verdict, change=LogChange(math.log(1.1), 0.05, 6.0))
    assert sets_needed(edge, 10.0, 0.05) is None


def test_decide_adds_sets_until_the_slowdown_is_decided(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", run_lines(80.0, range(12), in_sittings))
    current = write_run(tmp_path / "current", run_lines(96.0, range(2)))  # rigl 20% slower relative to dense
    add = stand_in({"dense": 100.0, "rigl": 96.0})
    decision = decide_inconclusive(base, current, budget_s=600, add_sets=add)
    verdicts = {c.case: c.time.verdict for c in decision.comparison.cases}
    assert verdicts["rigl@0.5"] == "regression" and "rigl@0.5" in decision.decided  # dense may be, by its added sets
    assert add.calls and all(ids == ["rigl@0.5"] for ids, _ in add.calls)  # dense comes with the sets, not asked for
    added = len(decision.added)
    assert added == sum(n for _, n in add.calls) >= 1
    assert "dense@1" not in decision.left or "time reference" in decision.left["dense@1"]
    assert decision.text().startswith(f"decide: added {added} process set(s)") and "rigl@0.5" in decision.text().splitlines()[1]


def test_a_spent_budget_and_a_wide_baseline_leave_cases_undecided_and_say_why(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", run_lines(80.0, range(12), in_sittings))
    current = write_run(tmp_path / "current", run_lines(96.0, range(2)))
    nothing = stand_in({"dense": 100.0, "rigl": 96.0})
    decision = decide_inconclusive(base, current, budget_s=0.0, add_sets=nothing)
    assert not nothing.calls and decision.left["rigl@0.5"].startswith("the budget (0 s) was spent")
    assert decision.comparison.cases[0].time is not None
    # A baseline of two process sets: its own interval is too wide for any current run to decide.
    narrow = write_run(tmp_path / "narrow", run_lines(80.0, range(4), in_sittings))
    add = stand_in({"dense": 100.0, "rigl": 96.0})
    decision = decide_inconclusive(narrow, current, budget_s=600, add_sets=add)
    assert not add.calls and "the baseline's own interval is too wide" in decision.left["rigl@0.5"]


@pytest.mark.parametrize("noise", [{"contended": True, "starved_segments": 10}])
def test_a_contended_case_is_not_timed_again(tmp_path: Path, noise: dict[str, Any]) -> None:
    base = write_run(tmp_path / "base", run_lines(80.0, range(12), in_sittings))
    lines = run_lines(96.0, range(2))
    lines[1]["noise"] = noise
    current = write_run(tmp_path / "current", lines)
    add = stand_in({"dense": 100.0, "rigl": 96.0})
    decision = decide_inconclusive(base, current, budget_s=600, add_sets=add)
    assert not add.calls and "more process sets do not change that" in decision.left["rigl@0.5"]


def test_a_baseline_timed_in_one_sitting_is_not_decided_on(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", run_lines(80.0, range(12)))  # twelve sets, one session
    current = write_run(tmp_path / "current", run_lines(96.0, range(2)))
    add = stand_in({"dense": 100.0, "rigl": 96.0})
    decision = decide_inconclusive(base, current, budget_s=600, add_sets=add)
    assert not add.calls and "the spread between sessions is not seen" in decision.left["rigl@0.5"]
    assert "--more-processes" in decision.left["rigl@0.5"]


def test_the_session_floor_of_the_current_run_can_leave_a_change_undecidable() -> None:
    change = LogChange(math.log(1.2), 0.05, 6.0)
    verdict = TimeVerdict(100, 120, 1.2, 1.0, "inconclusive", change=change, sides_se=(0.02, 0.046), current_units=2,
                          sessions_seen=True)
    assert sets_needed(verdict, 10.0, 0.05) is not None
    # The current session's offset alone as wide as the margin allows: no set of this session decides it.
    floored = dataclasses.replace(verdict, current_floor=0.05**2)
    assert sets_needed(floored, 10.0, 0.05) is None
    # A smaller floor: decidable, with more sets than without it.
    some = dataclasses.replace(verdict, current_floor=0.03**2)
    assert sets_needed(some, 10.0, 0.05) > sets_needed(verdict, 10.0, 0.05)
