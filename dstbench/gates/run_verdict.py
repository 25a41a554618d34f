"""Whether a run passes: its suite's expectations, its cases' statuses, its completeness and the
lines of another suite in its folder. `dstbench check` and the end of `dstbench run` print this
verdict; `dstbench.load_run(...).check()` returns it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from dstbench.results.coverage import Coverage, run_coverage
from dstbench.results.run_folder import RunFolder
from dstbench.results.expectations import Outcome, check_run
from dstbench.suite.cases import line_keys
from dstbench.suite.plan import expand_cases
from dstbench.suite.schema import SuiteConfig
from dstbench.util.exitcodes import EXIT_FAILED, EXIT_OK
from dstbench.util.files import RUN_FILE
from dstbench.util.text import clip

# `--only` and `--density` of a run: the cases its verdict covers.
Selection = tuple[list[str] | None, list[float] | None]


@dataclasses.dataclass
class RunVerdict:
    """What `check` decides about one run folder; `passed` is exit code 0."""

    suite: SuiteConfig
    expectations: list[Outcome]
    failed_cases: list[str]  # "case (status)" of every line not ok, "case (no result)" of a selected case without one
    cases_judged: int  # the cases `failed_cases` is out of
    coverage: Coverage | None
    incomplete_fails: bool  # incomplete, and that fails the run (see `judge_run`)
    foreign_lines: list[str]  # line numbers of another suite's lines, left out of everything
    # "N (why)" of lines no reader uses (not JSON, wrong types, negative or non-finite times, an
    # unknown schema: `dstbench.results.line_rule`), and "case (n lines)" of cases with several lines.
    unusable_lines: list[str] = dataclasses.field(default_factory=list)
    duplicated: list[str] = dataclasses.field(default_factory=list)

    @property
    def failed_expectations(self) -> list[Outcome]:
        return [o for o in self.expectations if o.failed]

    @property
    def passed(self) -> bool:
        return not (
            self.failed_expectations or self.failed_cases or self.incomplete_fails or self.foreign_lines
            or self.unusable_lines or self.duplicated
        )

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.passed else EXIT_FAILED

    def failed_cases_message(self) -> str | None:
        """"N of M cases failed: a (failed), b (no result)", or None."""
        if not self.failed_cases:
            return None
        return clip(f"{len(self.failed_cases)} of {self.cases_judged} cases failed: {', '.join(self.failed_cases)}", 1000)


def failed_case_list(
    frame: pd.DataFrame, case_ids: list[str] | None = None, seeded: bool | None = None
) -> tuple[list[str], int]:
    """The result lines (of `case_ids` when given: case keys, `Case.key`) that are not ok, then the
    selected cases without any line, as "case (why)"; and how many cases that is out of. A line is
    named by its case id, and by its seed where `seeded` (default: where the frame holds several)."""
    keys = pd.Series(line_keys(frame.to_dict("records"), seeded) if not frame.empty else [], index=frame.index, dtype=object)
    chosen = frame.index if case_ids is None or frame.empty else frame.index[keys.isin(case_ids)]
    statuses = frame.loc[chosen, "status"] if not frame.empty else pd.Series(dtype=object)
    failed = [f"{keys[i]} ({s})" for i, s in statuses.items() if s != "ok"]
    present = set(keys[chosen])
    missing = [f"{c} (no result)" for c in case_ids or () if c not in present]
    return failed + missing, len(case_ids) if case_ids is not None else len(chosen)


def judge_run(
    run_dir: str | Path, selection: Selection | None = None, *, allow_incomplete: bool = False,
    frame: pd.DataFrame | None = None,
) -> RunVerdict:
    """The verdict on a run folder. With `selection` (a run's `--only`/`--density`), every selected
    case must have an ok line; without it (`dstbench check`), every line present must be ok and, where
    run.json records what was asked for, every selected case present (unless `allow_incomplete`)."""
    run_dir = Path(run_dir)
    frame = RunFolder.open(run_dir).loaded() if frame is None else frame
    coverage = run_coverage(run_dir)
    suite, outcomes = check_run(run_dir, frame, coverage)
    # Without run.json nothing records what was asked for, or the suite hash of the run's lines: the
    # suite's cases are what was asked for, and its own hashes those of its lines.
    without_meta = not (run_dir / RUN_FILE).exists()
    # A run.json that records no selection (damaged, or `{}`) counts the whole suite as asked for,
    # as a folder without run.json does: an unfinished run never passes for lack of a record.
    incomplete_fails = coverage is not None and not coverage.complete and selection is None and not allow_incomplete
    hashes = (suite.setup_hash(), *(point.setup_hash() for _, point in suite.points)) if without_meta else ()
    read = RunFolder.open(run_dir).results_read(hashes)
    case_ids = None if selection is None else [c.key for c in expand_cases(suite, *selection)]
    failed, judged = failed_case_list(frame, case_ids, seeded=suite.seeds is not None if case_ids is not None else None)
    return RunVerdict(
        suite=suite, expectations=outcomes, failed_cases=failed, cases_judged=judged, coverage=coverage,
        incomplete_fails=incomplete_fails, foreign_lines=list(read.foreign), unusable_lines=list(read.skipped),
        duplicated=[f"{case} ({n} lines)" for case, n in read.duplicated.items()],
    )
