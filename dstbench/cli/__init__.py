"""The `dstbench` command: `main` parses the command line and runs one command. Each command is a
module here that defines its arguments (`add_parser`) and runs them (`main(args)`):

    list_methods.py  list        check.py    check        compare.py  compare
    run.py           run         report.py   report       export.py   export
    profile.py       profile     publish.py  publish      common.py   what they share

A command module loads what its command needs when it runs, so building the parser stays cheap.
Exit codes: `dstbench.util.exitcodes` (0 every case ok and every gate passed, 1 a gate or a case
failed, 2 unusable input, 74 a file could not be written, 128 + N ended by signal N)."""

from __future__ import annotations

import argparse
import errno
import sys
import warnings

from dstbench.cli import check, compare, export, list_methods, profile, publish, report, run
from dstbench.cli.common import HelpFormatter
from dstbench.execution.lifeline import Terminated, terminate_as_interrupt
from dstbench.results.run_files import RunDirError
from dstbench.util.exitcodes import EXIT_CODES_HELP, EXIT_INTERRUPTED, EXIT_IO_ERROR, EXIT_USAGE, signal_exit_code
from dstbench.util.text import clip
from dstbench.util.version import __version__

DESCRIPTION = """\
Benchmark and profile dynamic sparse training (DST) of Vision Transformers: does a method make
training faster and smaller on real hardware, and what does it cost in accuracy? `run` a suite (a
YAML file of methods and densities), then read its run folder with `report`, `check`, `compare`,
`publish` or `export`."""

# In the order `dstbench --help` lists them.
COMMANDS = (list_methods, run, check, report, publish, compare, export, profile)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstbench", description=DESCRIPTION, epilog=EXIT_CODES_HELP + "\n\nRun `dstbench COMMAND --help` for a command's options.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dstbench {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # OMP_WAIT_POLICY is left to the user: passive waiting helps only where processes share the
    # cores, and on a quiet 2-core machine it made the smoke model's steps 30-60% slower (docs/concepts/measurement.md).
    args = build_parser().parse_args(argv)
    # SIGTERM (timeout, a cancelled CI job, scancel) and SIGHUP end a command as Ctrl-C does.
    format_before = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    with terminate_as_interrupt():
        try:
            return int(args.func(args))
        # A run stopped after its folder was made has said where its lines are and how to resume
        # (`dstbench.execution.orchestrator`); before that there is no folder to name.
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated as exc:
            print(f"\n{exc}", file=sys.stderr)
            return signal_exit_code(exc.signum)
        except RunDirError as exc:  # a run folder found unusable half way (damaged run.json, a link)
            print(f"dstbench: {clip(exc, 2000)}", file=sys.stderr)
            return EXIT_USAGE
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
