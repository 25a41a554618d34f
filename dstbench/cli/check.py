"""`dstbench check RUN_DIR`: a run against its suite's expectations, and whether it is complete.
`print_run_summary` is also the end of `dstbench run`; the verdict itself is
`dstbench.gates.run_verdict.judge_run`'s (and `dstbench.load_run(...).check()`'s)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_files import RunDirError, require_results, still_being_written
from dstbench.util.exitcodes import EXIT_USAGE
from dstbench.util.files import RESULTS_FILE
from dstbench.util.text import clip

if TYPE_CHECKING:
    from dstbench.gates.run_verdict import Selection
    from dstbench.results.run_folder import RunFolder


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "check", "check a run against its suite's expectations (and say whether it is complete)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    p.add_argument(
        "--allow-incomplete", action="store_true",
        help="pass a run that lacks some of its suite's cases (default: an incomplete run fails, exit 1)",
    )
    p.set_defaults(func=main)


def print_run_summary(
    folder: "RunFolder", console: Console, selection: "Selection | None" = None, allow_incomplete: bool = False
) -> int:
    """The end-of-run table, then the verdict of `dstbench.gates.run_verdict.judge_run` (the
    expectations, the failed cases, completeness, another suite's lines), as its exit code."""
    from dstbench.gates.run_verdict import judge_run
    from dstbench.report.tables import summary_table
    from dstbench.results.derive import run_warnings
    from dstbench.results.expectations import describe, summary

    run_dir = folder.path
    frame = folder.loaded()
    verdict = judge_run(run_dir, selection, allow_incomplete=allow_incomplete, frame=frame)
    warnings: list[str] = []
    if frame.empty:
        print("(no results)")
    else:
        # The reference as `dstbench report` picks it, so the two tables always agree.
        derived = folder.frame()
        print(summary_table(derived, derived.attrs["reference"]))
        warnings = run_warnings(derived)
    print(f"\nresults: {run_dir / RESULTS_FILE}")

    def say(text: str, style: str | None = None) -> None:
        # soft_wrap: one line per message however narrow the terminal, so CI logs stay grep-able.
        console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)

    coverage = verdict.coverage
    if coverage is not None and not coverage.complete:
        recorded = coverage.recorded or not (run_dir / "run.json").exists()  # without one, the docs say the suite counts
        unrecorded = "" if recorded else " (run.json records no selection: every case of its suite counts)"
        say(f"incomplete run{unrecorded}: {coverage.summary()}", "red")
        if verdict.incomplete_fails:
            say("check: the run is incomplete (--allow-incomplete passes it)", "red")
    if verdict.foreign_lines:
        say(clip(f"ERROR  {len(verdict.foreign_lines)} line(s) of another suite in this run folder, left out: "
                 f"line {', '.join(verdict.foreign_lines)}", 1000), "red")
    if verdict.unusable_lines:
        say(clip(f"ERROR  {run_dir / RESULTS_FILE}: " + ", ".join(f"line {x}" for x in verdict.unusable_lines)
                 + ": unusable, left out of every figure", 1000), "red")
    if verdict.duplicated:
        say(clip(f"ERROR  {run_dir / RESULTS_FILE}: case(s) with more than one line (the last counts): "
                 f"{', '.join(verdict.duplicated)}", 1000), "red")
    for warning in warnings:  # contended cases and implausible figures, named
        say(f"WARNING  {warning}", "yellow")
    styles = {"PASS": None, "FAIL": "red", "SKIPPED": "yellow"}
    for outcome in verdict.expectations:
        say(describe(outcome, verdict.suite.reference), styles[outcome.verdict])
    if verdict.expectations:
        console.print(summary(verdict.expectations), style="red" if verdict.failed_expectations else None, highlight=False)
    message = verdict.failed_cases_message()
    if message:
        # A run whose cases failed must not pass CI, whatever its expectations said.
        say(message, "red")
    return verdict.exit_code


def main(args: argparse.Namespace) -> int:
    from dstbench.results.run_folder import RunFolder
    from dstbench.suite.loading import SuiteError

    console = Console(stderr=True, soft_wrap=True)
    try:
        require_results([args.run_dir])
    except RunDirError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    writing = still_being_written(args.run_dir)
    if writing:
        console.print(f"warning: {writing}: what it holds may still change", style="yellow", highlight=False, markup=False)
    try:
        return print_run_summary(RunFolder.open(args.run_dir), console, allow_incomplete=args.allow_incomplete)
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
