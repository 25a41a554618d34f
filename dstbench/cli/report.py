"""`dstbench report RUN_DIR... [--html FILE] [--markdown FILE] [--reference METHOD]`.

Prints the tables on the terminal unless `--html` is given; writes the HTML and Markdown reports
when asked. Exit codes: 0 written, 2 unusable input (no run folder, no result line, unknown
reference).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_files import RunDirError, require_results, still_being_written
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.util.files import output_file_problem

if TYPE_CHECKING:
    from dstbench.results.run_folder import RunFolder


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "report", "tables, plots and an HTML report from run folders")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders; several are shown side by side")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (default: tables on the terminal)")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    p.add_argument("--reference", metavar="METHOD", help="method to compare against (default: the suite's `reference`)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Loaded here, not at the top: every command builds the parser, and only this one needs pandas.
    from dstbench.results.run_folder import RunFolder

    return report_runs([RunFolder.open(d) for d in args.run_dirs], args.html, args.markdown, getattr(args, "reference", None))


def report_runs(folders: "list[RunFolder]", html: str | None, markdown: str | None, reference: str | None = None) -> int:
    """`dstbench report`'s work on run folders already open (`dstbench run --html` hands over the
    one it summarised, so its figures are derived once)."""
    from dstbench.report.headline import headline_text
    from dstbench.report.html import write_markdown_report, write_report
    from dstbench.report.sections import render_sections
    from dstbench.report.tables import render_text
    from dstbench.results.run_folder import derived_frame

    run_dirs = [str(f.path) for f in folders]
    try:
        require_results(run_dirs)
    except RunDirError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    for text in filter(None, map(still_being_written, run_dirs)):
        print(f"warning: {text}: its figures may still change", file=sys.stderr)
    problems = [output_file_problem(p, o, run_dirs) for o, p in (("--html", html), ("--markdown", markdown)) if p]
    if any(problems):
        print("\n".join(p for p in problems if p), file=sys.stderr)
        return EXIT_USAGE
    try:
        derived = derived_frame(folders, reference)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    if derived.empty:
        print(f"no result lines in {', '.join(run_dirs)}", file=sys.stderr)
        return EXIT_USAGE

    if not html:
        print(headline_text(derived) + "\n")
        print(render_text(render_sections(derived, images=False, terminal_only=True)))
    if markdown:
        write_markdown_report(derived, run_dirs, markdown)
        print(f"wrote {markdown}", file=sys.stderr)
    if html:
        write_report(derived, run_dirs, html)
        print(headline_text(derived))
        print(f"wrote {html}", file=sys.stderr)
    return EXIT_OK
