"""What the command modules share: the help formatter, the way a command is added to the parser,
the run selection options of `run` and `profile`, and `--set` parsing."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from dstbench.util.exitcodes import EXIT_CODES_HELP

# What `add_subparsers` returns: each command module adds its parser to it.
Commands = argparse._SubParsersAction


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


def add_command(commands: Commands, name: str, help_text: str, description: str | None = None) -> argparse.ArgumentParser:
    """A command's parser: `help_text` in the command list, `description` (default: the help text
    as a sentence) atop its own help, the exit codes below it."""
    text = description or help_text[0].upper() + help_text[1:] + "."
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=textwrap.fill(text, 100), formatter_class=HelpFormatter, epilog=EXIT_CODES_HELP
    )
    return parser


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose what a suite runs and where (`run` and `profile`)."""
    parser.add_argument("--only", nargs="+", metavar="METHOD", help="run only these method labels (default: every method of the suite)")
    parser.add_argument("--density", nargs="+", type=float, metavar="D", help="run only these densities (default: every density; dense runs at 1.0 whenever selected)")
    parser.add_argument("--out", default="runs", metavar="DIR", help="folder that receives the run folder")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu", "mps"], help="override the suite's device (default: the suite's)")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a suite key before validation; dotted keys reach inside (timing.segments=10, model.depth=2, "
        "methods.1.params.delta_t=50), values are YAML (null, true, [0.1, 0.5]); repeatable; recorded in the run "
        "folder's run.json and suite.yaml",
    )


def parse_assignments(values: list[str] | None) -> dict[str, Any]:
    """`--set KEY=VALUE...` as {dotted key: YAML value}; a later one for a key wins. A malformed
    one raises ValueError."""
    from dstbench.suite.loading import parse_assignment

    out: dict[str, Any] = {}
    for text in values or []:
        key, value = parse_assignment(text)
        out[key] = value
    return out
