"""The `dstbench` command: argument definitions, and the commands that live here (list, run, check).
The others (report, publish, compare, export, profile) load their module when called. Exit codes:
`dstbench.util.exitcodes` (0 every case ok and every gate passed, 1 a gate or a case failed, 2 unusable
input, 74 a file could not be written, 128 + N ended by signal N)."""

from __future__ import annotations

import argparse
import errno
import inspect
import sys
import textwrap
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from dstbench.util.exitcodes import (
    EXIT_CODES_HELP, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_IO_ERROR, EXIT_OK, EXIT_USAGE, signal_exit_code,
)
from dstbench.util.text import clip
from dstbench.execution.lifeline import Terminated, terminate_as_interrupt
from dstbench.results.run_folder import RunDirError, require_results
from dstbench.util.files import RESULTS_FILE, output_file_problem

if TYPE_CHECKING:
    import pandas as pd

# `--only` and `--density` of a run: the cases its exit code covers.
Selection = tuple[list[str] | None, list[float] | None]

DESCRIPTION = """\
Benchmark and profile dynamic sparse training (DST) of Vision Transformers: does a method make
training faster and smaller on real hardware, and what does it cost in accuracy? `run` a suite (a
YAML file of methods and densities), then read its run folder with `report`, `check`, `compare`,
`publish` or `export`."""


def _yaml(value: Any) -> str:
    """A value as it would be written in a suite."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n").removesuffix("\n...")


def _cmd_list(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from dstbench.dst.registry import list_methods, method_info, method_params

    if args.method:
        try:
            info = method_info(args.method)
        except KeyError as exc:
            print(exc.args[0], file=sys.stderr)
            return EXIT_USAGE
        print(f"{info.name} ({info.kind}, {info.module}.{info.cls.__qualname__})\n")
        print(inspect.cleandoc(info.cls.__doc__ or info.description) + "\n")
        params = method_params(info.name)
        if params:
            rows = [(p.name, p.type, _yaml(p.default), p.help) for p in params]
            print(tabulate(rows, headers=["parameter", "type", "default", "meaning"], tablefmt="simple", disable_numparse=True))
            print(f"\nSet them in a suite: methods: [{{name: {info.name}, params: {{{params[0].name}: ...}}}}]")
        else:
            print("parameters: none")
        return EXIT_OK
    width = 100
    for name in list_methods():
        info = method_info(name)
        params = ", ".join(f"{p.name}={_yaml(p.default)}" for p in method_params(name)) or "none"
        print(f"{name} ({info.kind})")
        print(textwrap.fill(info.description, width, initial_indent="  ", subsequent_indent="  "))
        print(textwrap.fill(f"parameters: {params}", width, initial_indent="  ", subsequent_indent="    "))
    print("\n`dstbench list METHOD` shows a method's documentation and what each parameter does.")
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
    from dstbench.suite.cases import expand_cases
    from dstbench.results.coverage import run_coverage
    from dstbench.results.expectations import check_run, describe, summary
    from dstbench.cli.report import choose_reference
    from dstbench.results.derive import derive, load_frame, run_warnings
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
    coverage = run_coverage(run_dir)
    if coverage is not None and not coverage.complete:
        console.print(f"incomplete run: {coverage.summary()}", style="red", highlight=False, markup=False, soft_wrap=True)
    styles = {"PASS": None, "FAIL": "red", "SKIPPED": "yellow"}
    for warning in warnings:  # contended cases and implausible figures, named
        console.print(f"WARNING  {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    for outcome in outcomes:
        # soft_wrap: one line per expectation however narrow the terminal, so CI logs stay grep-able.
        console.print(
            describe(outcome, suite.reference), style=styles[outcome.verdict], highlight=False, markup=False, soft_wrap=True
        )
    code = EXIT_OK
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


def _assignments(values: list[str] | None) -> dict[str, Any]:
    """`--set KEY=VALUE...` as {dotted key: YAML value}; a later one for a key wins."""
    from dstbench.suite.loading import parse_assignment

    out: dict[str, Any] = {}
    for text in values or []:
        key, value = parse_assignment(text)
        out[key] = value
    return out


def print_plan(plan: Any) -> None:
    """What `run --dry-run` shows: the suite's settings that decide the cost, and each case."""
    from tabulate import tabulate

    from dstbench.execution.orchestrator import overrides_text

    suite = plan.suite
    print(f"suite {suite.name!r} from {plan.suite_path}" + (f" with --set {overrides_text(plan.overrides)}" if plan.overrides else ""))
    timing = suite.timing
    what = []
    if suite.mode in ("speed", "both"):
        what.append(f"{timing.warmup_steps} warmup steps + {timing.segments} timed segments of {timing.segment_steps} steps")
    if suite.mode in ("accuracy", "both"):
        what.append(f"{suite.accuracy.epochs} epochs on {suite.data.name}")
    if suite.profile.enabled:
        what.append(f"a profile of {suite.profile.steps} steps")
    print(f"device {suite.device}, mode {suite.mode}, batch {suite.batch_size}, precision {suite.precision}, "
          f"model {suite.model.name}; per case: {', then '.join(what)}")
    print(f"launcher {_launcher_text(suite.launcher)}; reference {suite.reference}; {len(suite.expect)} expectation(s)")
    done = {c.case_id for c in plan.cases} - {c.case_id for c in plan.todo}
    rows = [
        (c.case_id, c.method_name, c.kind, f"{c.density:g}", ", ".join(f"{k}={v!r}" for k, v in c.params.items()) or "—",
         "done" if c.case_id in done else "to run")
        for c in plan.cases
    ]
    print()
    print(tabulate(rows, headers=["case", "method", "kind", "density", "params", "status"], tablefmt="simple", disable_numparse=True))
    where = f"into {plan.run_dir} (resumed)" if plan.run_dir else "into a new run folder"
    left_out = len(plan.all_cases) - len(plan.cases)
    print(f"\n{len(plan.todo)} of {len(plan.cases)} selected cases would run {where}"
          + (f"; {left_out} more in the suite, not selected" if left_out else "") + ". Nothing was written (--dry-run).")


def _launcher_text(launcher: Any) -> str:
    """'subprocess (timeout 3600 s, 4 cases at once)', 'submitit (slurm, job limit 62 min, partition gpu)'."""
    parts = [f"timeout {launcher.timeout_s:g} s"]
    if launcher.name == "submitit":
        parts = [launcher.cluster, f"job limit {launcher.job_minutes:g} min"]
        parts += [f"{k} {getattr(launcher, k)}" for k in ("partition", "account", "gpus_per_node") if getattr(launcher, k)]
    if launcher.parallel > 1:
        parts.append(f"{launcher.parallel} cases at once")
    return f"{launcher.name} ({', '.join(parts)})"


def _cmd_run(args: argparse.Namespace) -> int:
    from dstbench.suite.loading import SuiteError
    from dstbench.execution.orchestrator import plan_run, run_suite

    # soft_wrap: long paths and messages stay on one line, so logs stay grep-able.
    console = Console(stderr=True, soft_wrap=True)
    # Outputs are checked first: a report that cannot be written must not be found out after the run.
    problems = [output_file_problem(path, option) for option, path in (("--html", args.html), ("--markdown", args.markdown)) if path]
    if any(problems):
        console.print("\n".join(p for p in problems if p), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        overrides = _assignments(args.set)
    except ValueError as exc:  # a malformed --set
        console.print(f"--set {exc}", style="red", highlight=False, markup=False)
        return EXIT_USAGE
    selection = dict(out=args.out, device=args.device, resume=args.resume, only=args.only, densities=args.density,
                     overrides=overrides)
    try:
        if args.dry_run:
            print_plan(plan_run(args.suite, **selection))
            return EXIT_OK
        run_dir = run_suite(args.suite, console=console, **selection)
    except SuiteError as exc:
        console.print(str(exc), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    # The exit code covers the cases this command selected (with --resume: finished earlier too).
    code = print_run_summary(run_dir, console, (args.only, args.density))
    if (args.html or args.markdown) and (run_dir / RESULTS_FILE).exists():
        # The report of this run, written whatever its gates said: a failed gate is worth reading.
        from dstbench.cli.report import main as report_main

        report = argparse.Namespace(run_dirs=[run_dir], html=args.html, markdown=args.markdown, reference=None)
        code = max(code, report_main(report))
    return code


def _cmd_check(args: argparse.Namespace) -> int:
    from dstbench.suite.loading import SuiteError

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


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; every option's default appended to its help (unless
    there is none to show: None, False, or a help that already names it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        default = action.default
        if (
            "%(default)" in help_text or "default:" in help_text or default is None or default is False
            or default is argparse.SUPPRESS or not action.option_strings
        ):
            return help_text
        return f"{help_text} (default: %(default)s)"


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", nargs="+", metavar="METHOD", help="run only these method labels (default: every method of the suite)")
    p.add_argument("--density", nargs="+", type=float, metavar="D", help="run only these densities (default: every density; dense runs at 1.0 whenever selected)")
    p.add_argument("--out", default="runs", metavar="DIR", help="folder that receives the run folder")
    p.add_argument("--device", choices=["auto", "cuda", "cpu", "mps"], help="override the suite's device (default: the suite's)")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a suite key before validation; dotted keys reach inside (timing.segments=10, model.depth=2, "
        "methods.1.params.delta_t=50), values are YAML (null, true, [0.1, 0.5]); repeatable; recorded in the run "
        "folder's run.json and suite.yaml",
    )


def build_parser() -> argparse.ArgumentParser:
    from dstbench import __version__

    parser = argparse.ArgumentParser(
        prog="dstbench", description=DESCRIPTION, epilog=EXIT_CODES_HELP + "\n\nRun `dstbench COMMAND --help` for a command's options.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dstbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, description: str | None = None) -> argparse.ArgumentParser:
        text = description or help_text[0].upper() + help_text[1:] + "."
        return sub.add_parser(name, help=help_text, description=textwrap.fill(text, 100), formatter_class=HelpFormatter,
                              epilog=EXIT_CODES_HELP)

    p = command("list", "list registered methods with their kind, description and parameters")
    p.add_argument("method", nargs="?", metavar="METHOD", help="show one method's documentation and what each parameter does")
    p.set_defaults(func=_cmd_list)

    p = command(
        "run", "run a suite into a new run folder, print its table and check its expectations",
        "Run a suite: validate it, run each case (method, density) in its own process, append one line per "
        "case to RUN_DIR/results.jsonl, print the table and check the suite's `expect:` gates.",
    )
    p.add_argument("suite", metavar="SUITE", help="suite YAML file")
    _selection(p)
    p.add_argument(
        "--resume", nargs="?", const=True, metavar="RUN_DIR",
        help="run only the missing cases of RUN_DIR (without RUN_DIR: the newest run of this suite under --out)",
    )
    p.add_argument("--dry-run", action="store_true", help="validate the suite and list the cases it would run; write nothing")
    p.add_argument("--html", metavar="FILE", help="also write the run's HTML report (as `dstbench report --html`)")
    p.add_argument("--markdown", metavar="FILE", help="also write the run's Markdown report")
    p.set_defaults(func=_cmd_run)

    p = command("check", "check a run against its suite's expectations (and say whether it is complete)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    p.set_defaults(func=_cmd_check)

    p = command("report", "tables, plots and an HTML report from run folders")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders; several are shown side by side")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (default: tables on the terminal)")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--reference", metavar="METHOD", help="method to compare against (default: the suite's `reference`)")
    p.set_defaults(func=_lazy("dstbench.cli.report"))

    p = command("publish", "a static site of runs for GitHub Pages or any web server")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders to add to the site")
    p.add_argument("--site", required=True, metavar="DIR", help="the site's folder (created, or updated)")
    p.set_defaults(func=_lazy("dstbench.report.publish"))

    p = command("compare", "gate a run against a baseline run (time and memory regressions)")
    p.add_argument("baseline", metavar="BASELINE_RUN", help="the run folder to compare against")
    p.add_argument("current", metavar="CURRENT_RUN", help="the run folder being judged")
    p.add_argument("--time-threshold", type=float, default=10.0, metavar="PCT", help="median time change, in percent, that counts when significant")
    p.add_argument("--memory-threshold", type=float, default=1.0, metavar="PCT", help="memory change, in percent, that counts (exact: no test)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the time test (Mann-Whitney U)")
    p.add_argument("--memory-only", action="store_true", help="gate memory alone (noisy machines)")
    p.add_argument("--strict", action="store_true", help="a different device type, GPU/CPU model, torch or timm version is an error (exit 2); an inconclusive case fails (exit 1)")
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown (a pull-request comment)")
    p.set_defaults(func=_lazy("dstbench.gates.compare"))

    p = command("export", "write a run in another tool's format (needs: pip install 'dstbench[export]')")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    p.add_argument("--pytest-benchmark", required=True, metavar="FILE", help="write pytest-benchmark's JSON format here")
    p.set_defaults(func=_lazy("dstbench.gates.export"))

    p = command("profile", "profile the cases of a suite: where each method's time and memory go")
    p.add_argument("suite", metavar="SUITE", help="suite YAML file (profiling is switched on)")
    _selection(p)
    p.set_defaults(func=_lazy("dstbench.cli.profile"))
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
