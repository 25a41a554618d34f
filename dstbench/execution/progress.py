"""Progress of a run for people: a live bar with an ETA on a terminal, one plain line now and then
in a CI log.

The run loop tells a `RunProgress` what happens, whatever order cases run in (one after another,
or several live at once):

    with RunProgress(console, suite, total_cases=len(cases)) as progress:
        progress.case_started(case.case_id)
        launcher.run(task, progress.for_case(case.case_id))    # stage(case_id, stage, done, total)
        progress.case_finished(case.case_id, result)

The ETA comes from the share of the run's work done so far: finished cases, plus each live case's
position in its stages (warmup, timed segments, epochs, profile), weighted by what the suite says
they cost. On a terminal the bar redraws in place and is cleared at the end, leaving one status
line per finished case. Elsewhere (a CI log, a file) one short line per case event (it starts,
enters a new stage, finishes: `case 3/16 rigl@0.1: segment 0/10`) and, every `interval_s` seconds
(a heartbeat from a thread), one summary line (`progress: 5 of 16 cases done, 2 running (...),
elapsed 1m05s, ETA 3m10s`), so an hour-long case still shows that it is alive and how far it got.
No line is longer than `LINE_LIMIT` characters: a CI log stays readable whatever a case's error.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dstbench.util.text import last_line

HEARTBEAT_S = 30.0
LINE_LIMIT = 160  # characters of any one line this module prints off a terminal
# A live case's stages in the order they run, and their share of its work when the suite does not
# say more (mode both: the training dwarfs the timed segments; a profile costs a few steps).
STAGE_ORDER = ("warmup", "segment", "epoch", "profile")
SPEED_SHARE_IN_BOTH = 0.1
PROFILE_SHARE = 0.1


def stage_weights(suite: Any) -> dict[str, float]:
    """Each stage's share of one case's work (summing to 1), from the suite's mode, timing and
    profile settings. `suite` is a SuiteConfig (or anything with those attributes)."""
    mode = getattr(suite, "mode", "speed")
    weights: dict[str, float] = {}
    speed = {"speed": 1.0, "both": SPEED_SHARE_IN_BOTH}.get(mode, 0.0)
    if speed:
        timing = suite.timing
        timed = timing.segments * timing.segment_steps
        weights["warmup"] = speed * timing.warmup_steps / (timing.warmup_steps + timed)
        weights["segment"] = speed * timed / (timing.warmup_steps + timed)
    if mode in ("accuracy", "both"):
        weights["epoch"] = 1.0 - speed
    if getattr(getattr(suite, "profile", None), "enabled", False):
        weights = {k: v * (1 - PROFILE_SHARE) for k, v in weights.items()}
        weights["profile"] = PROFILE_SHARE
    return weights


def one_line(text: str, limit: int = LINE_LIMIT) -> str:
    """`text` as at most `limit` characters on one line, cut with an ellipsis."""
    text = " ".join(str(text).splitlines())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float | None) -> str:
    """'45s', '12m05s', '3h07m'; '--' when unknown."""
    if seconds is None:
        return "--"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def status_text(result: Any) -> str:
    """How a finished case went, plain: 'ok median 12.3 ms/segment, density 0.100', or
    'error ValueError: boom' (the last line of the error; the whole of it stays in the result line)."""
    if result.status != "ok":
        return f"{result.status} {last_line(result.error)}"
    parts = []
    if result.median_ms is not None:
        parts.append(f"median {result.median_ms:.1f} ms/segment")
    if result.top1 is not None:
        parts.append(f"top1 {result.top1:.3f}")
    if result.density_achieved is not None:
        parts.append(f"density {result.density_achieved:.3f}")
    return "ok " + ", ".join(parts)


@dataclasses.dataclass
class _Live:
    index: int  # 1-based, in the order cases started
    stage: str = "starting"
    done: int = 0
    total: int = 0


class RunProgress:
    """Progress of one run (see the module docstring). `live`: draw a bar (default: when the
    console is a terminal); `clock` and `interval_s` are for tests."""

    def __init__(
        self,
        console: Console,
        suite: Any,
        total_cases: int,
        *,
        live: bool | None = None,
        interval_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.total = total_cases
        self.weights = stage_weights(suite)
        self.live_bar = console.is_terminal if live is None else live
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self.finished = 0
        self.cases: dict[str, _Live] = {}
        self._numbers: dict[str, int] = {}  # a case timed in several groups (dense) keeps its number
        self._lock = threading.RLock()
        self._last_summary = self.started
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._bar: Progress | None = None
        self._task: Any = None

    # -- context ------------------------------------------------------------------------------------
    def __enter__(self) -> "RunProgress":
        if self.live_bar:
            columns = [
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"),
            ]
            self._bar = Progress(*columns, console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("cases", total=max(self.total, 1), detail="", eta="--")
        elif self.interval_s > 0:
            self._heartbeat = threading.Thread(target=self._beat, name="dstbench-progress", daemon=True)
            self._heartbeat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        if self._bar is not None:
            self._bar.stop()

    # -- what the run loop reports ------------------------------------------------------------------
    def case_started(self, case_id: str) -> None:
        with self._lock:
            self.cases[case_id] = _Live(index=self._number(case_id))
            self._changed(case_id, announce=True)

    def stage(self, case_id: str, stage: str, done: int, total: int) -> None:
        """A live case's position: `done` of `total` in `stage` (as `build.Progress` reports it)."""
        with self._lock:
            live = self.cases.setdefault(case_id, _Live(index=self._number(case_id)))
            new_stage = stage != live.stage
            live.stage, live.done, live.total = stage, done, total
            self._changed(case_id, announce=new_stage)

    def for_case(self, case_id: str) -> Callable[[str, int, int], None]:
        """The `progress(stage, done, total)` callback a launcher takes, for one case."""
        return lambda stage, done, total: self.stage(case_id, stage, done, total)

    def case_finished(self, case_id: str, result: Any, count: bool = True) -> None:
        """Count the case done and print its status line (above the bar on a terminal). `count`
        False: a case timed in several groups (dense) reports again without counting twice."""
        with self._lock:
            live = self.cases.pop(case_id, None)
            self.finished += int(count)
            index = live.index if live else self._number(case_id)
            style = None if result.status == "ok" else "red"
            self._print(f"case {index}/{self.total} {case_id}: {status_text(result)}", style)
            for warning in getattr(result, "warnings", None) or []:
                self._print(f"  warning: {warning}", "yellow")
            self._update_bar(case_id)

    def _number(self, case_id: str) -> int:
        """1-based, in the order cases first started."""
        return self._numbers.setdefault(case_id, len(self._numbers) + 1)

    # -- figures ------------------------------------------------------------------------------------
    def case_fraction(self, live: _Live) -> float:
        """How much of a live case's work is done, 0 to 1."""
        fraction = min(live.done / live.total, 1.0) if live.total else 0.0
        if live.stage not in self.weights:
            return fraction if live.stage != "starting" else 0.0
        before = sum(self.weights[s] for s in STAGE_ORDER if s in self.weights and STAGE_ORDER.index(s) < STAGE_ORDER.index(live.stage))
        return min(before + self.weights[live.stage] * fraction, 1.0)

    def fraction(self) -> float:
        """The share of the run's work done, 0 to 1."""
        with self._lock:
            done = self.finished + sum(self.case_fraction(c) for c in self.cases.values())
        return min(done / self.total, 1.0) if self.total else 1.0

    def elapsed(self) -> float:
        return self.clock() - self.started

    def eta(self) -> float | None:
        """Seconds left at the pace so far; None until a little work is done."""
        fraction, elapsed = self.fraction(), self.elapsed()
        if fraction <= 0.01 or elapsed <= 0:
            return None
        return elapsed * (1 - fraction) / fraction

    def line(self) -> str:
        """The run's position as one plain line of at most `LINE_LIMIT` characters: the cases done,
        the running ones (the first named with its stage), elapsed time and ETA."""
        with self._lock:
            running = ""
            if self.cases:
                case_id, c = next(iter(self.cases.items()))
                first = f"case {c.index}/{self.total} {case_id}: {c.stage}" + (f" {c.done}/{c.total}" if c.total else "")
                more = f" and {len(self.cases) - 1} more" if len(self.cases) > 1 else ""
                running = f", {len(self.cases)} running ({one_line(first, 70)}{more})"
            return one_line(
                f"progress: {self.finished} of {self.total} cases done{running}, "
                f"elapsed {duration(self.elapsed())}, ETA {duration(self.eta())}",
            )

    def event_line(self, case_id: str) -> str:
        """A live case's event: 'case 3/16 rigl@0.1: segment 0/10'."""
        c = self.cases[case_id]
        return f"case {c.index}/{self.total} {case_id}: {c.stage}" + (f" {c.done}/{c.total}" if c.total else "")

    # -- output -------------------------------------------------------------------------------------
    def _changed(self, case_id: str, announce: bool) -> None:
        if self._bar is not None:
            self._update_bar(case_id)
        elif announce:
            self._print(self.event_line(case_id))
        elif self.clock() - self._last_summary >= self.interval_s > 0:
            self._print_summary()

    def _update_bar(self, case_id: str) -> None:
        if self._bar is None:
            return
        if case_id not in self.cases and self.cases:
            case_id = next(iter(self.cases))  # the one that finished is gone: show another live one
        live = self.cases.get(case_id)
        if live is not None:
            label = f"case {live.index}/{self.total} {case_id}"
            detail = f"{live.stage} {live.done}/{live.total}" if live.total else live.stage
        else:
            label, detail = f"{self.finished}/{self.total} cases", ""
        self._bar.update(
            self._task, description=escape(label), detail=escape(detail), eta=duration(self.eta()),
            completed=self.fraction() * max(self.total, 1),
        )

    def _print(self, text: str, style: str | None = None) -> None:
        # Plain text (no markup: a case id or an error may hold brackets), clipped to one short line.
        self.console.print(one_line(text), style=style, highlight=False, markup=False, soft_wrap=True)

    def _print_summary(self) -> None:
        self._print(self.line())
        self._last_summary = self.clock()

    def _beat(self) -> None:
        while not self._stop.wait(min(self.interval_s, 1.0)):
            with self._lock:
                if self.cases and self.clock() - self._last_summary >= self.interval_s:
                    self._print_summary()
