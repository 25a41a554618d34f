"""`dstbench export RUN_DIR --pytest-benchmark FILE`: a run in pytest-benchmark's JSON format
(the document is `dstbench.gates.export.export_run`'s)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dstbench.cli.common import Commands, add_command
from dstbench.results.run_files import RunDirError, require_results
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE
from dstbench.util.extras import MissingExtra, require
from dstbench.util.files import output_file_problem, write_atomic


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "export", "write a run in another tool's format (needs: pip install 'dstbench[export]')")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    p.add_argument("--pytest-benchmark", required=True, metavar="FILE", help="write pytest-benchmark's JSON format here")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from dstbench.gates.export import export_run

    run_dir = Path(args.run_dir)
    try:
        require("dstbench export", "pytest_benchmark")
        require_results([run_dir], finished=True)
    except (RunDirError, MissingExtra) as exc:
        print(f"dstbench export: {exc}" if isinstance(exc, RunDirError) else str(exc), file=sys.stderr)
        return EXIT_USAGE
    problem = output_file_problem(args.pytest_benchmark, "--pytest-benchmark", [run_dir])
    if problem:
        print(f"dstbench export: {problem}", file=sys.stderr)
        return EXIT_USAGE
    document, skipped = export_run(run_dir)
    for case in skipped:
        print(f"dstbench export: left out {case}: not ok, or no timed samples", file=sys.stderr)
    if not document["benchmarks"]:
        # pytest-benchmark cannot show an empty file; say so rather than write one.
        print(f"dstbench export: {run_dir}: no ok case with segment samples", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.pytest_benchmark)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(document, indent=2) + "\n")
    print(f"wrote {len(document['benchmarks'])} benchmarks to {out}")
    return EXIT_OK
