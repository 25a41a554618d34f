"""`dstbench publish RUN_DIR... --site DIR`: add runs to a static site (the site is
`dstbench.report.publish`'s)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_files import RunDirError, require_results
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.util.files import output_place_problem


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "publish", "a static site of runs for GitHub Pages or any web server")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders to add to the site")
    p.add_argument("--site", required=True, metavar="DIR", help="the site's folder (created, or updated)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Loaded here, not at the top: the site needs pandas, jinja2 and the report sections.
    from dstbench.report.publish import publish
    from dstbench.report.site_manifest import SiteError
    from dstbench.results.run_folder import RunFolder

    try:
        require_results(args.run_dirs, finished=True)
    except RunDirError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    site = Path(args.site)
    if site.exists() and not site.is_dir():
        print(f"--site: {site} is a file, not a folder", file=sys.stderr)
        return EXIT_USAGE
    problem = output_place_problem(site, "--site", args.run_dirs)
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    # A run without one readable line (empty, or only a torn line) has nothing to show.
    empty = [str(d) for d in args.run_dirs if not RunFolder.open(d).lines()]
    if empty:
        print(f"no readable result line in: {', '.join(empty)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        index = publish(list(args.run_dirs), args.site)
    except SiteError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    print(f"site: {index}")
    return EXIT_OK
