"""`hetplan` command line. Each subcommand lives in its own module with a `register(subparsers)`.

Bad input exits 2 with one line naming the problem; nothing prints a traceback unless
HETPLAN_DEBUG=1 is set.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

from planner.types import InputError

SUBCOMMANDS = ("catalog_cmd", "evaluate_cmd", "plan_cmd", "export_cmd", "run_cmd", "replan_cmd", "fleet_cmd")
# The module of each command: `main` imports only the module of the command it runs (each imports what its
# command needs: the search, exporters, the fleet's solver), the whole table for `hetplan --help` and for a
# word that names no command. tests/test_cli.py holds it equal to what the modules register.
COMMAND_MODULES = {"catalog": "catalog_cmd", "evaluate": "evaluate_cmd", "plan": "plan_cmd", "export": "export_cmd",
                   "run-local": "run_cmd", "calibrate": "run_cmd", "replan": "replan_cmd", "fleet": "fleet_cmd"}


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, instead of argparse's usage dump
        raise UsageError(f"{self.prog}: {message} (see --help)")


MAX_MESSAGE_CHARS = 2000


def one_line(message: str) -> str:
    """A message as one line of bounded length, whatever names or values it quotes."""
    text = message.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "..."


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or (`command`, one COMMAND_MODULES names) of that one only."""
    parser = _Parser(prog="hetplan", description="Plan and evaluate hybrid-parallel training on mixed GPU clusters.")
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="extra catalog YAML adding GPUs or models (repeatable)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in (COMMAND_MODULES[command],) if command in COMMAND_MODULES else SUBCOMMANDS:
        try:
            module = importlib.import_module(f"planner.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"planner.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def command_in(argv: list[str]) -> str | None:
    """The command word of a command line: its first word that is neither an option nor the value of
    the top-level --catalog FILE (None before a -h, --help or --: the full parser answers those)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--"):
            return None
        if not word.startswith("-"):
            return word
        if "=" not in word and len(word) > 2 and "--catalog".startswith(word):   # argparse takes --cat too
            next(words, None)
    return None


# A search allocates objects by the million and keeps caches of many: at Python's default thresholds (700, 10, 10)
# the cyclic collector rescans them hundreds of times (0.4-0.5 CPU s of a 3.7 s search at 1,024 GPUs). A command
# collects less often while it runs (docs/performance.md, "Evaluate in the best-engine command"): a collection
# traverses the young objects, nearly all of them the search's live caches, so the work is their number whatever
# the threshold, unless none runs; below a million young objects (a 4,096-GPU search keeps about half that) none
# does, and the cyclic garbage a command may hold is at most that many objects (docs/performance.md, "Start-up
# and exit of the command line").
GC_THRESHOLDS = (1_000_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return _main(argv)
    finally:
        gc.set_threshold(*thresholds)


def _main(argv: list[str] | None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(command_in(argv))
        args = parser.parse_args(argv)
        return args.run(args) or 0
    except (InputError, UsageError) as e:
        print(f"hetplan: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:               # SIGINT; SIGTERM and SIGHUP where a command turns them into it
        print("hetplan: interrupted", file=sys.stderr)
        return 128 + getattr(e, "signum", 2)
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: say so in one line
        if os.environ.get("HETPLAN_DEBUG"):
            raise
        print(f"hetplan: internal error: {type(e).__name__}: {one_line(str(e))} "
              f"(rerun with HETPLAN_DEBUG=1 for details)", file=sys.stderr)
        return 1
