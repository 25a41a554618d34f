"""`dstbench compare BASELINE_RUN CURRENT_RUN`: the run-to-run regression gate. The verdicts are
`dstbench.gates.compare`'s, the report `dstbench.gates.comparison_text`'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dstbench.cli.common import Commands, add_command
from dstbench.util.exitcodes import EXIT_USAGE
from dstbench.util.files import output_file_problem, write_atomic


def add_parser(commands: Commands) -> None:
    p = add_command(
        commands, "compare", "gate a run against a baseline run (time, memory and top-1 regressions)",
        description=(
            "Each case's time change (current / baseline, with its 1 - 2 ALPHA interval: 90% by default) is judged "
            "against the band +/-PCT: a regression (or improvement) only when significantly beyond the band (the "
            "one-sided test against its edge, Holm-adjusted over the cases, p < ALPHA); unchanged only when the whole "
            "interval lies inside it (two one-sided tests); otherwise inconclusive, printed with what would decide it. "
            "Under the relative basis dense is judged on its own times. Memory is exact. "
            "Exit 1 on a regression or a baseline case missing from the current run; 2 on unusable input or runs "
            "timed under different protocols."),
    )
    p.add_argument("baseline", metavar="BASELINE_RUN", help="the run folder to compare against")
    p.add_argument("current", metavar="CURRENT_RUN", help="the run folder being judged")
    p.add_argument("--time-threshold", type=float, default=10.0, metavar="PCT",
                   help="the band of no change, +/- PCT")
    p.add_argument("--memory-threshold", type=float, default=1.0, metavar="PCT", help="memory change, in percent, that counts (exact: no test)")
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise level of the one-sided time tests (Holm over the cases); the intervals shown are at 1 - 2 ALPHA")
    p.add_argument("--time-basis", choices=("auto", "relative", "absolute"), default="auto",
                   help="relative: each case's time relative to its own run's dense, round by round, which cancels "
                   "machine-wide shifts, and dense on its own times; absolute: each case's own times; auto (default): "
                   "relative where both runs have the case's dense, else absolute")
    p.add_argument("--accept-machine-shift", action="store_true",
                   help="dense (the reference of relative gating) slower on its own times, other cases slower with "
                   "it, is a machine shift or a change to the common training step: a failure unless this flag "
                   "accepts it (dense slower alone still fails)")
    p.add_argument("--allow-missing", action="store_true",
                   help="a baseline case the current run lacks is listed, not a failure (extra cases are always listed)")
    p.add_argument("--allow-protocol-change", action="store_true",
                   help="compare runs timed under different protocols (timing.processes, interleave, round_order, "
                   "settle_segments, hand_over, segment_steps, segments), every time verdict inconclusive; without it they are "
                   "refused (exit 2)")
    p.add_argument("--top1-threshold", type=float, default=1.0, metavar="PP",
                   help="the band of no top-1 change, +/- percentage points: a regression must be significantly beyond it, "
                   "unchanged inside it (its interval over the seeds)")
    p.add_argument("--metric", action="append", default=[], metavar="NAME",
                   help="also judge this numeric field of a registered tracker (a plugin's once the runs' suites import it), "
                   "per case in the direction its tracker declares better: an exact one (bytes, FLOPs) as memory, "
                   "with --memory-threshold; any other over seeds by the time rule, with --time-threshold; repeatable")
    p.add_argument("--memory-only", action="store_true", help="gate memory alone (noisy machines)")
    p.add_argument("--strict", action="store_true", help="a different device type, GPU/CPU model, torch or timm version, host, thread count or OpenMP setting "
                   "is an error (exit 2); an inconclusive case fails (exit 1)")
    p.add_argument("--decide", action="store_true",
                   help="time the current run's inconclusive cases again, in more process sets (with their references, "
                   "into CURRENT), until their time verdicts are decided or --decide-budget-s is spent; says which stayed "
                   "undecided and why")
    p.add_argument("--decide-budget-s", type=float, metavar="S",
                   help="with --decide: the wall time the added process sets may take (default: as long as the current "
                   "run's own timing took, from its run.json's start to its last case's end)")
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown (a pull-request comment)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Loaded here, not at the top: scipy and numpy are for this command alone.
    from dstbench.gates.compare import compare_runs, exit_code
    from dstbench.gates.sides import CompareInputError, check_thresholds, load_side
    from dstbench.gates.comparison_text import render

    try:
        check_thresholds(args.time_threshold, args.memory_threshold, args.top1_threshold, args.alpha)
        problem = output_file_problem(args.markdown, "--markdown", [args.baseline, args.current]) if args.markdown else None
        if problem:
            raise CompareInputError(problem)
        options = dict(
            time_threshold=args.time_threshold, memory_threshold=args.memory_threshold, alpha=args.alpha,
            memory_only=args.memory_only, time_basis=args.time_basis, top1_threshold=args.top1_threshold,
            allow_missing=args.allow_missing, accept_machine_shift=args.accept_machine_shift,
            allow_protocol_change=args.allow_protocol_change, metrics=tuple(args.metric),
        )
        if args.decide and (args.memory_only or (args.decide_budget_s is not None and not args.decide_budget_s > 0)):
            raise CompareInputError("--decide: needs time judged (not --memory-only) and a budget > 0 s")
        decision = None
        if args.decide:
            decision = _decide(args, options)
            comparison = decision.comparison
        else:
            comparison = compare_runs(load_side(args.baseline), load_side(args.current), **options)
    except CompareInputError as exc:
        print(f"dstbench compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if decision is not None:
        print(decision.text(), end="")
    print(render(comparison, strict=args.strict), end="")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.markdown, render(comparison, strict=args.strict, markdown=True))
    return exit_code(comparison, args.strict)


def _decide(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """`--decide` (`dstbench.gates.decide`); a run folder it cannot add to is unusable input."""
    from dstbench.execution.more_sets import timing_wall_s
    from dstbench.gates.decide import decide_inconclusive
    from dstbench.gates.sides import CompareInputError
    from dstbench.results.run_files import RunDirError
    from dstbench.suite.loading import SuiteError

    budget = args.decide_budget_s if args.decide_budget_s is not None else timing_wall_s(Path(args.current))
    if budget is None:
        raise CompareInputError(f"--decide: {args.current} does not say how long its run took; give --decide-budget-s")
    try:
        return decide_inconclusive(Path(args.baseline), Path(args.current), budget_s=budget,
                                   say=lambda text: print(text, file=sys.stderr, flush=True), **options)
    except (SuiteError, RunDirError) as exc:
        raise CompareInputError(f"--decide: {exc}") from None
