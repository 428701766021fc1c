"""The ``roam`` command line: a thin dispatcher over ``roam_core.commands.*``.

Each sub-command lives in its own module under :mod:`roam_core.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.  A
:class:`~roam_core.base.errors.RoamError` becomes one line on stderr and exit status 2
(``roam check`` returns 1 itself for an invalid plan).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from roam_core.base.errors import RoamError

__all__ = ["COMMANDS", "build_parser", "main"]

#: Sub-command modules, in the order ``roam --help`` lists them.
COMMANDS = ("trace", "info", "plan", "frontier", "fit", "check", "layout", "report", "bench",
            "execute", "train", "export_policy", "serve")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every available sub-command registered)."""
    parser = argparse.ArgumentParser(
        prog="roam",
        description="Find, check and run memory-efficient execution plans for training steps.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"roam_core.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"roam_core.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except RoamError as e:
        print(f"roam {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"roam {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
