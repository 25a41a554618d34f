"""`dstbench report RUN_DIR... [--html FILE] [--markdown FILE] [--reference METHOD]`.

Prints the tables on the terminal unless `--html` is given; writes the HTML and Markdown reports
when asked. Exit codes: 0 written, 2 unusable input (no run folder, no result line, unknown
reference).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.results.derive import data_loading, derive, headline, load_frame, run_warnings
from dstbench.results.run_folder import RunDirError, require_results, run_reference
from dstbench.util.files import output_file_problem, write_atomic


def choose_reference(frame: pd.DataFrame, run_dirs: list[str], requested: str | None) -> tuple[str | None, str]:
    """The reference to compare against and, when none can be used, why."""
    methods = list(pd.unique(frame["method"]))
    if requested:
        return (requested, "") if requested in methods else (None, f"--reference {requested!r} is not among the methods ({', '.join(map(str, methods))})")
    found = [r for r in (run_reference(d) for d in run_dirs) if r]
    if found and found[0] in methods:
        if len(set(found)) > 1:
            print(f"runs name different references ({', '.join(sorted(set(found)))}); comparing against {found[0]}", file=sys.stderr)
        return found[0], ""
    return ("dense", "") if "dense" in methods else (str(methods[0]), "")


def headline_text(derived: pd.DataFrame) -> str:
    h = headline(derived)
    lines = []
    if h["speedup"]:
        s = h["speedup"]
        dense = s.get("vs_dense")
        basis = f", {s['basis']}" if s.get("basis") else ""
        lines.append(
            f"best speedup vs {h['reference']}: {s['value']:.2f}x ({s['method']} at density {s['density']:g}, "
            f"{s['ci']}{basis}{', contended' if s.get('contended') else ''})"
            + (f"; vs dense {dense['value']:.2f}x ({dense['ci']})" if dense else "")
        )
    if h["memory"]:
        m = h["memory"]
        harness = "; " + ", ".join(h["harness"]) + " for every method" if h.get("harness") else ""
        lines.append(
            f"best memory reduction vs {h['reference']}: {m['value'] * 100:.1f}% ({m['method']} at density "
            f"{m['density']:g}, {m['basis']}{harness})"
        )
    lines.append(f"cases: {h['cases'] - h['failed']} of {h['cases']} ok" + (f", {h['failed']} failed" if h["failed"] else ""))
    from dstbench.report.expectations import counts, coverage_notes, run_verdicts

    for note in coverage_notes(derived):
        lines.append(f"{'INCOMPLETE RUN' if note['incomplete'] else 'selection'} {note['run']}: {note['summary']}")
    tally = counts(run_verdicts(derived))
    if any(tally.values()):
        lines.append(
            f"expectations: {tally['PASS']} of {tally['PASS'] + tally['FAIL']} passed"
            + (f", {tally['FAIL']} failed" if tally["FAIL"] else "") + (f", {tally['SKIPPED']} skipped" if tally["SKIPPED"] else "")
        )
    loading = data_loading(derived)
    if loading:
        lines.append(f"data loading: {' | '.join(loading)}")
    lines += [f"WARNING {w}" for w in run_warnings(derived)]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from dstbench.report.html import build_page, render_markdown, write_report
    from dstbench.report.sections import render_sections
    from dstbench.report.tables import render_text

    run_dirs = [str(d) for d in args.run_dirs]
    try:
        require_results(run_dirs)
    except RunDirError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    problems = [output_file_problem(p, o) for o, p in (("--html", args.html), ("--markdown", args.markdown)) if p]
    if any(problems):
        print("\n".join(p for p in problems if p), file=sys.stderr)
        return EXIT_USAGE
    frame = load_frame(run_dirs)
    if frame.empty:
        print(f"no result lines in {', '.join(run_dirs)}", file=sys.stderr)
        return EXIT_USAGE
    reference, problem = choose_reference(frame, run_dirs, getattr(args, "reference", None))
    if reference is None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    derived = derive(frame, reference)

    if not args.html:
        print(headline_text(derived) + "\n")
        print(render_text(render_sections(derived, images=False, terminal_only=True)))
    if args.markdown:
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, render_markdown(build_page(derived, run_dirs, images=False, output_dir=path.parent)))
        print(f"wrote {path}", file=sys.stderr)
    if args.html:
        write_report(derived, run_dirs, args.html)
        print(headline_text(derived))
        print(f"wrote {args.html}", file=sys.stderr)
    return EXIT_OK
