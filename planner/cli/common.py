"""Helpers shared by subcommands: their common options, loading the catalog and input files, printing JSON."""
from __future__ import annotations

import argparse
import json
import math
import sys

from catalog import load_catalog
from catalog.formats import check_plan_against_cluster, load_cluster_file, load_plan_file
from planner.types import InputError

MAX_SEARCH_TIME_LIMIT_S = 3600      # for subcommands that search as a step (export, replan)
PLAN_FILE_HELP = ("plan JSON (format hetplan.plan/1): a plan file, the file `plan --out` writes, or what `plan --json` "
                  "prints (its best plan, plans[0], is read) or any plan in it")


def catalog_from_args(args):
    return load_catalog(args.catalog)


def add_cluster_and_plan(p, cluster_help: str = "cluster YAML", plan_help: str = PLAN_FILE_HELP) -> None:
    """The required --cluster FILE and --plan FILE."""
    p.add_argument("--cluster", required=True, metavar="FILE", help=cluster_help)
    p.add_argument("--plan", required=True, metavar="FILE", help=plan_help)


def add_time_limit(p, default: float, metavar: str, help: str) -> None:
    """--time-limit: CPU seconds for a search the subcommand runs, at most MAX_SEARCH_TIME_LIMIT_S."""
    p.add_argument("--time-limit", type=finite_number(0, MAX_SEARCH_TIME_LIMIT_S, "seconds"), default=default,
                   metavar=metavar, help=help)


def check_tokens(option: str, tokens: float | None, example: str = "") -> None:
    """A token count given (not None) must be positive and finite; `example` follows the message's noun."""
    if tokens is not None and not (math.isfinite(tokens) and tokens > 0):
        raise InputError(option, f"must be a positive, finite number of tokens{example}, got {tokens}")


def load_cluster_and_plan(args):
    """(catalog, cluster, plan) from --catalog, --cluster and --plan, the plan checked against the cluster."""
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = load_plan_file(args.plan, catalog)
    check_plan_against_cluster(plan, cluster)
    return catalog, cluster, plan


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
