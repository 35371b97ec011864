"""Helpers shared by subcommands: loading the catalog and input files, printing JSON."""
from __future__ import annotations

import argparse
import json
import math
import sys

PLAN_FILE_HELP = ("plan JSON (format hetplan.plan/1): a plan file, the file `plan --out` writes, or what `plan --json` "
                  "prints (its best plan, plans[0], is read) or any plan in it")


def catalog_from_args(args):
    from catalog import load_catalog
    return load_catalog(args.catalog)


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def whole_number(low: int, high: int):
    """An argparse type: a whole number from `low` to `high` (the parser names the option)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:,} to {high:,}, got {text[:40]}")
        return value
    parse.__name__ = "whole number"
    return parse


def finite_number(low_exclusive: float, high: float, unit: str):
    """An argparse type: a finite number of `unit` above `low_exclusive`, at most `high`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of {unit}, got {text[:40]!r}") from None
        if not (math.isfinite(value) and low_exclusive < value <= high):
            raise argparse.ArgumentTypeError(f"must be more than {low_exclusive:g} and at most {high:g} {unit}, "
                                             f"got {text[:40]}")
        return value
    parse.__name__ = unit
    return parse
