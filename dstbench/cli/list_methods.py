"""`dstbench list [--suite SUITE] [METHOD]`: the registered methods (with a suite's plugins), or one
method's documentation and parameters."""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from typing import Any

from dstbench.cli.common import Commands, add_command
from dstbench.util.exitcodes import EXIT_OK, EXIT_USAGE


def add_parser(commands: Commands) -> None:
    p = add_command(commands, "list", "list registered methods with their kind, description and parameters")
    p.add_argument("method", nargs="?", metavar="METHOD", help="show one method's documentation and what each parameter does")
    p.add_argument("--suite", metavar="SUITE", help="import the suite's `plugins:` first (validating it), so their methods are listed too")
    p.set_defaults(func=main)


def _yaml(value: Any) -> str:
    """A value as it would be written in a suite."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n").removesuffix("\n...")


def main(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from dstbench.methods import list_methods, method_info, method_params

    if args.suite:
        from dstbench.suite.loading import SuiteError, load_suite

        try:
            load_suite(args.suite, check_files=False, recorded=False)  # imports its plugins
        except (SuiteError, OSError) as exc:
            print(exc, file=sys.stderr)
            return EXIT_USAGE
    if args.method:
        try:
            info = method_info(args.method)
        except KeyError as exc:
            hint = "" if args.suite else "; a method from a suite's `plugins:` is listed with --suite SUITE"
            print(f"{exc.args[0]}{hint}", file=sys.stderr)
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
