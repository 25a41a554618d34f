"""`dstbench run SUITE`: run a suite into a run folder, then print its table and check its
expectations (`--dry-run`: show the plan and write nothing)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from rich.console import Console

from dstbench.cli.check import print_run_summary
from dstbench.cli.common import Commands, add_command, add_selection_arguments, parse_assignments
from dstbench.util.text import clip
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.util.files import RESULTS_FILE, output_file_problem


def add_parser(commands: Commands) -> None:
    p = add_command(
        commands, "run", "run a suite into a new run folder, print its table and check its expectations",
        "Run a suite: validate it, run each case (method, density) in its own process, append one line per "
        "case to RUN_DIR/results.jsonl, print the table and check the suite's `expect:` gates.",
    )
    p.add_argument("suite", metavar="SUITE", help="suite YAML file")
    add_selection_arguments(p)
    p.add_argument(
        "--resume", nargs="?", const=True, metavar="RUN_DIR",
        help="run only the missing cases of RUN_DIR (without RUN_DIR: the newest run of this suite under --out)",
    )
    p.add_argument(
        "--retry-failed", action="store_true",
        help="with --resume: also time again the cases whose line is not ok (failed, oom, timeout), with their groups",
    )
    p.add_argument(
        "--allow-other-machine", action="store_true",
        help="with --resume: a run folder holding lines timed on another machine (host, CPU model, device, torch) "
        "is refused; this times every group holding such a line again here instead",
    )
    p.add_argument(
        "--more-processes", type=int, metavar="N",
        help="with --resume RUN_DIR: time N more process sets of the selected cases (--only, --density; default every "
        "case) with their density group's references (dense, the suite's reference), interleaved, into RUN_DIR, so their "
        "intervals narrow (recorded in run.json's added_process_sets)",
    )
    p.add_argument("--dry-run", action="store_true", help="validate the suite and list the cases it would run; write nothing")
    p.add_argument("--html", metavar="FILE", help="also write the run's HTML report (as `dstbench report --html`)")
    p.add_argument("--markdown", metavar="FILE", help="also write the run's Markdown report")
    p.set_defaults(func=main)


def print_plan(plan: Any) -> None:
    """What `run --dry-run` shows: the suite's settings that decide the cost, and each case."""
    from tabulate import tabulate

    from dstbench.execution.orchestrator import overrides_text
    from dstbench.suite.groups import by_point

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
    if suite.seeds is not None:
        timed = "every seed" if suite.timing.per_seed or suite.mode == "accuracy" else f"seed {suite.seeds[0]} only"
        print(f"seeds {', '.join(map(str, suite.seeds))}: every case once per seed, seed by seed"
              + (f"; speed segments: {timed}" if suite.mode != "accuracy" else ""))
    if suite.compile.enabled:
        print("compile: " + ", ".join(f"{k}={v!r}" for k, v in suite.compile.options().items()) + " (every method alike)")
    done = {c.key for c in plan.cases} - {c.key for c in plan.todo}
    status: dict[str, str] = {}  # a case to run says which phase of `mode: both` it still needs
    if plan.training:
        _print_phases(plan)
        untimed = {c.key for g in plan.todo_groups for c in g.cases}
        untrained = {c.key for c in plan.todo_training}
        status = {k: "to time and train" if k in untimed and k in untrained else "to time" if k in untimed else "to train"
                  for k in untimed | untrained}
    points = {json.dumps(values, sort_keys=True): point for values, point in suite.points}
    if points:
        print(f"sweep ({suite.sweep_mode}) over {', '.join(suite.sweep)}: {len(points)} points, each validated as a suite of its own")
    for members in by_point(plan.cases):
        rows = [
            (c.key, c.method_name, c.kind, f"{c.density:g}", ", ".join(f"{k}={v!r}" for k, v in c.params.items()) or "—",
             "done" if c.key in done else status.get(c.key, "to run"))
            for c in members
        ]
        point = points.get(json.dumps(members[0].sweep, sort_keys=True)) if members[0].sweep is not None else None
        print()
        if point is not None:
            print(f"point {members[0].point}: model {point.model.name} {_model_text(point)}, batch {point.batch_size}, "
                  f"precision {point.precision}, compile {'on' if point.compile.enabled else 'off'}; suite hash {point.setup_hash()}")
        print(tabulate(rows, headers=["case", "method", "kind", "density", "params", "status"], tablefmt="simple", disable_numparse=True))
    _print_pruned(suite)
    where = f"into {plan.run_dir} (resumed)" if plan.run_dir else "into a new run folder"
    left_out = len(plan.all_cases) - len(plan.cases)
    print(f"\n{len(plan.todo)} of {len(plan.cases)} selected cases would run {where}"
          + (f"; {left_out} more in the suite, not selected" if left_out else "") + ". Nothing was written (--dry-run).")


def _print_phases(plan: Any) -> None:
    """A `mode: both` run's two phases: the timing groups, then the trainings."""
    timing = plan.suite.timing
    left = plan.todo_groups
    rounds = "interleaved rounds" if any(len(g.cases) > 1 for g in plan.groups) else "one case at a time"
    print(f"timing phase: {len(plan.groups)} group(s) in {rounds} over {timing.processes} process set(s), as mode: speed "
          f"plans them; {len(left)} to time")
    for group in plan.groups:
        print(f"  {group.key}: {', '.join(c.method for c in group.cases)}" + ("" if group in left else " (done)"))
    print(f"training phase: {len(plan.training)} (case, seed) training(s), each in a process of its own "
          f"(dense once per seed); {len(plan.todo_training)} to train")


def _print_pruned(suite: Any) -> None:
    """The weights the suite's masked methods prune, with their shapes and active weights per density."""
    from tabulate import tabulate

    from dstbench.suite.model_fit import compact_layouts, pruned_weights, trainable_parameters, unlisted_methods

    others = unlisted_methods(suite)
    if others:
        rows = [(label, kind, module, ", ".join(f"{d:g}" for d in densities)) for label, kind, module, densities in others]
        print(f"\n{suite.model.name}: {trainable_parameters(suite):,} trainable parameters; the methods below shape them "
              "their own way (only the masked engine's pruning is listed before a run):")
        print(tabulate(rows, headers=["method", "kind", "defined in", "densities"], tablefmt="simple", disable_numparse=True))
    layouts = compact_layouts(suite)
    if layouts:
        rows = [(label, f"{density:g}", " ".join(map(str, heads)), " ".join(map(str, hidden)), f"{share:.4f}")
                for label, density, heads, hidden, share in layouts]
        print(f"\ncompact methods' initial layouts on {suite.model.name}, per block:")
        print(tabulate(rows, headers=["method", "density", "heads", "FFN channels", "density of prunable weights"],
                       tablefmt="simple", disable_numparse=True))
    for labels, shapes, budgets in pruned_weights(suite):
        total = sum(math.prod(shape) for shape in shapes.values())
        print(f"\npruned by {', '.join(labels)}: {len(shapes)} weights of {suite.model.name}, {total:,} in all")
        rows = [(name, "x".join(map(str, shape)), *(f"{budget[name]:,}" for budget in budgets.values())) for name, shape in shapes.items()]
        print(tabulate(rows, headers=["parameter", "shape", *(f"active at {d:g}" for d in budgets)], tablefmt="simple", disable_numparse=True))


def _model_text(suite: Any) -> str:
    """The model settings a sweep most often changes, as the point's suite has them: 'embed_dim 192, depth 6, ...'."""
    kwargs = suite.model.kwargs
    shown = [f"{key} {kwargs[key]}" for key in ("embed_dim", "depth", "num_heads", "img_size", "patch_size") if key in kwargs]
    return f"({', '.join(shown)})" if shown else ""


def _launcher_text(launcher: Any) -> str:
    """'subprocess (timeout 3600 s, 4 cases at once)', 'submitit (slurm, job limit 62 min, partition gpu)':
    each launcher's config says what of its settings to show (`describe`)."""
    return f"{launcher.name} ({', '.join(launcher.describe())})"


def main(args: argparse.Namespace) -> int:
    from dstbench.suite.loading import SuiteError
    from dstbench.execution.orchestrator import plan_run, run_suite

    # soft_wrap: long paths and messages stay on one line, so logs stay grep-able.
    console = Console(stderr=True, soft_wrap=True)
    # Outputs are checked first: a report that cannot be written must not be found out after the run.
    inputs = [args.resume] if isinstance(args.resume, str) else []
    problems = [
        output_file_problem(path, option, inputs) for option, path in (("--html", args.html), ("--markdown", args.markdown)) if path
    ]
    if any(problems):
        console.print("\n".join(p for p in problems if p), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        overrides = parse_assignments(args.set)
    except ValueError as exc:  # a malformed --set
        console.print(clip(f"--set {exc}", 1000), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    for flag, given in (("--retry-failed", args.retry_failed), ("--allow-other-machine", args.allow_other_machine)):
        if given and not args.resume:
            console.print(f"{flag}: only with --resume (a new run has no lines yet)", style="red", highlight=False, markup=False)
            return EXIT_USAGE
    if args.more_processes is not None:
        return _more_processes(args, overrides, console)
    selection = dict(out=args.out, device=args.device, resume=args.resume, only=args.only, densities=args.density,
                     overrides=overrides, retry_failed=args.retry_failed, allow_other_machine=args.allow_other_machine)
    try:
        if args.dry_run:
            print_plan(plan_run(args.suite, **selection))
            return EXIT_OK
        run_dir = run_suite(args.suite, console=console, **selection)
    except SuiteError as exc:
        console.print(clip(str(exc), 4000), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    # The exit code covers the cases this command selected (with --resume: finished earlier too).
    from dstbench.results.run_folder import RunFolder

    folder = RunFolder.open(run_dir)  # read once: the summary and the reports share its derived figures
    code = print_run_summary(folder, console, (args.only, args.density))
    if (args.html or args.markdown) and (run_dir / RESULTS_FILE).exists():
        # The report of this run, written whatever its gates said: a failed gate is worth reading.
        from dstbench.cli.report import report_runs

        code = max(code, report_runs([folder], args.html, args.markdown))
    return code


def _more_processes(args: argparse.Namespace, overrides: dict[str, Any], console: Console) -> int:
    """`--resume RUN_DIR --more-processes N`: more process sets of the selected cases (`dstbench.execution.more_sets`)."""
    from pathlib import Path

    from dstbench.execution.more_sets import add_process_sets, selected_cases
    from dstbench.execution.orchestrator import find_resumed_run_dir
    from dstbench.results.run_files import RunDirError
    from dstbench.suite.loading import SuiteError, load_suite

    wrong = ("--resume RUN_DIR (the run to add to)" if not isinstance(args.resume, str) else
             "a count >= 1" if args.more_processes < 1 else
             "no --set, --device, --retry-failed, --dry-run, --html or --markdown (the sets are timed as the run was)"
             if overrides or args.device or args.retry_failed or args.dry_run or args.html or args.markdown else "")
    if wrong:
        console.print(f"--more-processes: needs {wrong}", style="red", highlight=False, markup=False)
        return EXIT_USAGE
    try:
        run_dir = find_resumed_run_dir(Path(args.out), load_suite(args.suite), Path(args.suite), args.resume)
        cases = selected_cases(run_dir, args.only, args.density)
        added = add_process_sets(run_dir, cases, args.more_processes, say=lambda text: console.print(text, highlight=False, markup=False))
    except (SuiteError, RunDirError) as exc:
        console.print(clip(str(exc), 4000), style="red", highlight=False, markup=False)
        return EXIT_USAGE
    console.print(f"added {len(added)} process set(s) to {run_dir}", highlight=False, markup=False)
    from dstbench.results.run_folder import RunFolder

    return print_run_summary(RunFolder.open(run_dir), console, (args.only, args.density))
