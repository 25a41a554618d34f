"""`dstbench report RUN_DIR... [--html FILE] [--markdown FILE] [--reference METHOD]`.

Prints the tables on the terminal unless `--html` is given; writes the HTML and Markdown reports
when asked. Exit codes: 0 written, 2 unusable input (no run folder, no result line, unknown
reference).
"""

from __future__ import annotations

import argparse
import sys

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_folder import RunDirError, require_results, still_being_written
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.util.files import output_file_problem


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "report", "tables, plots and an HTML report from run folders")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders; several are shown side by side")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (default: tables on the terminal)")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--reference", metavar="METHOD", help="method to compare against (default: the suite's `reference`)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Loaded here, not at the top: every command builds the parser, and only this one needs pandas.
    from dstbench.report.headline import choose_reference, headline_text
    from dstbench.report.html import write_markdown_report, write_report
    from dstbench.report.sections import render_sections
    from dstbench.report.tables import render_text
    from dstbench.results.derive import derive, load_frame

    run_dirs = [str(d) for d in args.run_dirs]
    try:
        require_results(run_dirs)
    except RunDirError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    for text in filter(None, map(still_being_written, run_dirs)):
        print(f"warning: {text}: its figures may still change", file=sys.stderr)
    problems = [output_file_problem(p, o, run_dirs) for o, p in (("--html", args.html), ("--markdown", args.markdown)) if p]
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
        write_markdown_report(derived, run_dirs, args.markdown)
        print(f"wrote {args.markdown}", file=sys.stderr)
    if args.html:
        write_report(derived, run_dirs, args.html)
        print(headline_text(derived))
        print(f"wrote {args.html}", file=sys.stderr)
    return EXIT_OK
