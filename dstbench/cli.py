"""The `dstbench` command. Exit codes: 0 fine, 1 a gate failed (expectation, regression), 2 unusable
input (invalid suite, missing files), 130 interrupted."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from dstbench.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from dstbench.rundir import RESULTS_FILE, RunDirError, require_results


def _cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from dstbench.registry import list_methods, method_info

    rows = [(name, method_info(name).kind, method_info(name).description) for name in list_methods()]
    print(tabulate(rows, headers=["method", "kind", "description"], tablefmt="simple"))
    return EXIT_OK


def print_run_summary(run_dir: Path, console: Console) -> int:
    """The end-of-run table and the suite's expectations; 1 if an expectation failed."""
    from dstbench.gates.expect import check_run, describe
    from dstbench.report.cli import choose_reference
    from dstbench.report.derive import derive, load_frame, run_warnings
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
    for warning in warnings:  # contended cases and implausible figures, named
        console.print(f"WARNING  {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    for outcome in outcomes:
        # soft_wrap: one line per expectation however narrow the terminal, so CI logs stay grep-able.
        console.print(
            describe(outcome, suite.reference), style=None if outcome.passed else "red", highlight=False, markup=False, soft_wrap=True
        )
    failed = [o for o in outcomes if not o.passed]
    if failed:
        console.print(f"{len(failed)} of {len(outcomes)} expectations failed", style="red")
        return EXIT_FAILED
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from dstbench.config import SuiteError
    from dstbench.run import run_suite

    # soft_wrap: long paths and messages stay on one line, so logs stay grep-able.
    console = Console(stderr=True, soft_wrap=True)
    try:
        run_dir = run_suite(
            args.suite, out=args.out, device=args.device, resume=args.resume, only=args.only, densities=args.density,
            console=console,
        )
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    code = print_run_summary(run_dir, console)
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
    parser = argparse.ArgumentParser(prog="dstbench", description=__doc__.splitlines()[0])
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
    p.add_argument("--strict", action="store_true", help="a different GPU, torch or device is an error (exit 2); an inconclusive case fails (exit 1)")
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
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("\ninterrupted; finished cases are in the run folder's results.jsonl", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
