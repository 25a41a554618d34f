"""The `dstbench` command. Exit codes (`dstbench.exitcodes`): 0 every case ok and every gate passed,
1 a gate failed (a failed case, an expectation, a regression), 2 unusable input (invalid suite,
missing files, a run folder in use), 74 a file could not be written, 128 + N ended by signal N
(130 Ctrl-C, 143 SIGTERM)."""

from __future__ import annotations

import argparse
import errno
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from dstbench.exitcodes import (
    EXIT_CODES_HELP, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_IO_ERROR, EXIT_OK, EXIT_USAGE, signal_exit_code,
)
from dstbench.fmt import clip
from dstbench.lifeline import Terminated, terminate_as_interrupt
from dstbench.rundir import RESULTS_FILE, RunDirError, output_file_problem, require_results

if TYPE_CHECKING:
    import pandas as pd

# `--only` and `--density` of a run: the cases its exit code covers.
Selection = tuple[list[str] | None, list[float] | None]


def _cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from dstbench.registry import list_methods, method_info

    rows = [(name, method_info(name).kind, method_info(name).description) for name in list_methods()]
    print(tabulate(rows, headers=["method", "kind", "description"], tablefmt="simple"))
    return EXIT_OK


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


def print_run_summary(run_dir: Path, console: Console, selection: Selection | None = None) -> int:
    """The end-of-run table, the suite's expectations and the failed cases; 1 if an expectation or
    a case failed. With `selection` (a run's), every selected case must have an ok line; without
    (`dstbench check`), every line present must be ok."""
    from dstbench.cases import expand_cases
    from dstbench.gates.expect import check_run, describe
    from dstbench.report.cli import choose_reference
    from dstbench.report.derive import derive, load_frame
    from dstbench.report.tables import summary_table

    suite, outcomes = check_run(run_dir)
    frame = load_frame([run_dir])
    if frame.empty:
        print("(no results)")
    else:
        # The reference as `dstbench report` picks it, so the two tables always agree.
        reference, _ = choose_reference(frame, [str(run_dir)], None)
        print(summary_table(derive(frame, reference), reference))
    print(f"\nresults: {run_dir / RESULTS_FILE}")
    for outcome in outcomes:
        # soft_wrap: one line per expectation however narrow the terminal, so CI logs stay grep-able.
        console.print(
            describe(outcome, suite.reference), style=None if outcome.passed else "red", highlight=False, markup=False, soft_wrap=True
        )
    code = EXIT_OK
    failed = [o for o in outcomes if not o.passed]
    if failed:
        console.print(f"{len(failed)} of {len(outcomes)} expectations failed", style="red")
        code = EXIT_FAILED
    case_ids = None if selection is None else [c.case_id for c in expand_cases(suite, *selection)]
    failed_cases = failed_cases_message(frame, case_ids)
    if failed_cases:
        # A run whose cases failed must not pass CI, whatever its expectations said.
        console.print(failed_cases, style="red", highlight=False, markup=False, soft_wrap=True)
        code = EXIT_FAILED
    return code


def _cmd_run(args: argparse.Namespace) -> int:
    from dstbench.config import SuiteError
    from dstbench.run import run_suite

    # soft_wrap: long paths and messages stay on one line, so logs stay grep-able.
    console = Console(stderr=True, soft_wrap=True)
    # Outputs are checked first: a report that cannot be written must not be found out after the run.
    problems = [output_file_problem(path, option) for option, path in (("--html", args.html), ("--markdown", args.markdown)) if path]
    if any(problems):
        console.print("\n".join(p for p in problems if p), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        run_dir = run_suite(
            args.suite, out=args.out, device=args.device, resume=args.resume, only=args.only, densities=args.density,
            console=console,
        )
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    # The exit code covers the cases this command selected (with --resume: finished earlier too).
    code = print_run_summary(run_dir, console, (args.only, args.density))
    if (args.html or args.markdown) and (run_dir / RESULTS_FILE).exists():
        # The report of this run, written whatever its gates said: a failed gate is worth reading.
        from dstbench.report.cli import main as report_main

        report = argparse.Namespace(run_dirs=[run_dir], html=args.html, markdown=args.markdown, reference=None)
        code = max(code, report_main(report))
    return code


def _cmd_check(args: argparse.Namespace) -> int:
    from dstbench.config import SuiteError

    console = Console(stderr=True, soft_wrap=True)
    try:
        require_results([args.run_dir])
    except RunDirError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        return print_run_summary(Path(args.run_dir), console)
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE


def _lazy(module: str, function: str = "main"):  # type: ignore[no-untyped-def]
    def call(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), function)(args))

    return call


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstbench", description=__doc__.splitlines()[0], epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list registered methods")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("run", help="run a suite")
    p.add_argument("suite", help="suite YAML file")
    p.add_argument("--out", default="runs", help="folder for run folders (default: runs/)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu", "mps"], help="override the suite's device")
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        metavar="RUN_DIR",
        help="run only the missing cases of RUN_DIR (default: the newest run of this suite under --out)",
    )
    p.add_argument("--only", nargs="+", metavar="METHOD", help="run only these methods")
    p.add_argument("--density", nargs="+", type=float, metavar="D", help="run only these densities")
    p.add_argument("--html", metavar="FILE", help="also write the run's HTML report (as `dstbench report --html`)")
    p.add_argument("--markdown", metavar="FILE", help="also write the run's Markdown report")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("check", help="check a run against its suite's expectations")
    p.add_argument("run_dir")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("report", help="tables, plots and an HTML report from run folders")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--reference", metavar="METHOD", help="method to compare against (default: the suite's)")
    p.set_defaults(func=_lazy("dstbench.report.cli"))

    p = sub.add_parser("publish", help="a static site of runs for GitHub Pages or any web server")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--site", required=True, metavar="DIR")
    p.set_defaults(func=_lazy("dstbench.report.publish"))

    p = sub.add_parser("compare", help="gate a run against a baseline run")
    p.add_argument("baseline", metavar="BASELINE_RUN")
    p.add_argument("current", metavar="CURRENT_RUN")
    p.add_argument("--time-threshold", type=float, default=10.0, metavar="PCT")
    p.add_argument("--memory-threshold", type=float, default=1.0, metavar="PCT")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the time test")
    p.add_argument("--memory-only", action="store_true", help="gate memory alone (noisy machines)")
    p.add_argument("--strict", action="store_true", help="a different GPU, torch or device is an error")
    p.add_argument("--markdown", metavar="FILE")
    p.set_defaults(func=_lazy("dstbench.gates.compare"))

    p = sub.add_parser("export", help="write a run in another tool's format")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--pytest-benchmark", required=True, metavar="FILE")
    p.set_defaults(func=_lazy("dstbench.gates.export"))

    p = sub.add_parser("profile", help="profile the cases of a suite")
    p.add_argument("suite")
    p.add_argument("--only", nargs="+", metavar="METHOD")
    p.add_argument("--density", nargs="+", type=float, metavar="D")
    p.add_argument("--out", default="runs", metavar="DIR")
    p.add_argument("--device", choices=["auto", "cuda", "cpu", "mps"])
    p.set_defaults(func=_lazy("dstbench.profiling"))
    return parser


def main(argv: list[str] | None = None) -> int:
    # OMP_WAIT_POLICY is left to the user: passive waiting helps only where processes share the
    # cores, and on a quiet 2-core machine it made the smoke model's steps 30-60% slower (README).
    args = build_parser().parse_args(argv)
    # SIGTERM (timeout, a cancelled CI job, scancel) and SIGHUP end a command as Ctrl-C does.
    format_before = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    with terminate_as_interrupt():
        try:
            return args.func(args)
        except KeyboardInterrupt:
            print("\ninterrupted; finished cases are in the run folder's results.jsonl", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated as exc:
            print(f"\n{exc}; finished cases are in the run folder's results.jsonl", file=sys.stderr)
            return signal_exit_code(exc.signum)
        except OSError as exc:
            # Disk full, a read-only folder, a path that is a file: one line, not a chained traceback.
            reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"dstbench: cannot write or read {where}{reason}", file=sys.stderr)
            return EXIT_IO_ERROR
        finally:
            warnings.formatwarning = format_before


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> str:
    """A warning as one clipped line (the default adds the file, line and source of the call)."""
    return f"warning: {clip(message, 2000)}\n"


if __name__ == "__main__":
    sys.exit(main())
