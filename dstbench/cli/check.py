"""`dstbench check RUN_DIR`: a run against its suite's expectations, and whether it is complete.
`print_run_summary` is also the end of `dstbench run`; the expectations themselves are checked by
`dstbench.results.expectations.check_run`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_folder import RunDirError, require_results
from dstbench.util.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dstbench.util.files import RESULTS_FILE
from dstbench.util.text import clip

if TYPE_CHECKING:
    import pandas as pd

# `--only` and `--density` of a run: the cases its exit code covers.
Selection = tuple[list[str] | None, list[float] | None]


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "check", "check a run against its suite's expectations (and say whether it is complete)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    p.add_argument(
        "--allow-incomplete", action="store_true",
        help="pass a run that lacks some of its suite's cases (default: an incomplete run fails, exit 1)",
    )
    p.set_defaults(func=main)


def failed_cases_message(frame: "pd.DataFrame", case_ids: list[str] | None = None) -> str | None:
    """"N of M cases failed: ..." for the result lines (of `case_ids` when given) that are not ok,
    and the selected cases that have no line at all; None when every one is ok."""
    lines = frame if case_ids is None or frame.empty else frame[frame["case_id"].isin(case_ids)]
    failed = [] if lines.empty else [f"{c} ({s})" for c, s in zip(lines["case_id"], lines["status"]) if s != "ok"]
    present = set() if lines.empty else set(lines["case_id"])
    missing = [f"{c} (no result)" for c in case_ids or () if c not in present]
    total = len(case_ids) if case_ids is not None else len(lines)
    if not failed and not missing:
        return None
    return clip(f"{len(failed) + len(missing)} of {total} cases failed: {', '.join(failed + missing)}", 1000)


def print_run_summary(
    run_dir: Path, console: Console, selection: Selection | None = None, allow_incomplete: bool = False
) -> int:
    """The end-of-run table, the suite's expectations and the failed cases; 1 if an expectation or
    a case failed, or a line of another suite is in the folder. With `selection` (a run's), every
    selected case must have an ok line; without (`dstbench check`), every line present must be ok
    and every case of the suite present (unless `allow_incomplete`)."""
    from dstbench.suite.plan import expand_cases
    from dstbench.results.coverage import run_coverage
    from dstbench.results.expectations import check_run, describe, summary
    from dstbench.report.headline import choose_reference
    from dstbench.results.derive import derive, load_frame, run_warnings
    from dstbench.results.record import read_results
    from dstbench.report.tables import summary_table

    suite, outcomes = check_run(run_dir)
    frame = load_frame([run_dir])
    warnings: list[str] = []
    if frame.empty:
        print("(no results)")
    else:
        # The reference as `dstbench report` picks it, so the two tables always agree.
        reference, _ = choose_reference(frame, [str(run_dir)], None)
        derived = derive(frame, reference)
        print(summary_table(derived, reference))
        warnings = run_warnings(derived)
    print(f"\nresults: {run_dir / RESULTS_FILE}")
    code = EXIT_OK
    coverage = run_coverage(run_dir)
    if coverage is not None and not coverage.complete:
        console.print(f"incomplete run: {coverage.summary()}", style="red", highlight=False, markup=False, soft_wrap=True)
        # Only where run.json records what was asked for: an older folder cannot tell a case left
        # out by --only from one an interruption never reached.
        if selection is None and not allow_incomplete and coverage.recorded:
            console.print("check: the run is incomplete (--allow-incomplete passes it)", style="red", highlight=False, markup=False)
            code = EXIT_FAILED
    foreign = read_results(run_dir).foreign
    if foreign:
        console.print(
            clip(f"ERROR  {len(foreign)} line(s) of another suite in this run folder, left out: line {', '.join(foreign)}", 1000),
            style="red", highlight=False, markup=False, soft_wrap=True,
        )
        code = EXIT_FAILED
    styles = {"PASS": None, "FAIL": "red", "SKIPPED": "yellow"}
    for warning in warnings:  # contended cases and implausible figures, named
        console.print(f"WARNING  {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    for outcome in outcomes:
        # soft_wrap: one line per expectation however narrow the terminal, so CI logs stay grep-able.
        console.print(
            describe(outcome, suite.reference), style=styles[outcome.verdict], highlight=False, markup=False, soft_wrap=True
        )
    if outcomes:
        failed = any(o.failed for o in outcomes)
        console.print(summary(outcomes), style="red" if failed else None, highlight=False)
        if failed:
            code = EXIT_FAILED
    case_ids = None if selection is None else [c.case_id for c in expand_cases(suite, *selection)]
    failed_cases = failed_cases_message(frame, case_ids)
    if failed_cases:
        # A run whose cases failed must not pass CI, whatever its expectations said.
        console.print(failed_cases, style="red", highlight=False, markup=False, soft_wrap=True)
        code = EXIT_FAILED
    return code


def main(args: argparse.Namespace) -> int:
    from dstbench.suite.loading import SuiteError

    console = Console(stderr=True, soft_wrap=True)
    try:
        require_results([args.run_dir])
    except RunDirError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        return print_run_summary(Path(args.run_dir), console, allow_incomplete=args.allow_incomplete)
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
