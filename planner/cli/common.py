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


# The most tokens a run may be asked to train: 1e18 is ~64,000 times Llama 3's 15.6e12 (Llama 3 Herd of Models,
# section 3.1); far more (1e308) made every duration and cost overflow to inf, which JSON cannot carry.
MAX_TOKENS = 1e18


def check_tokens(option: str, tokens: float | None, example: str = "") -> None:
    """A token count given (not None) must be positive, finite and at most MAX_TOKENS; `example` follows the
    message's noun."""
    if tokens is not None and not (math.isfinite(tokens) and 0 < tokens <= MAX_TOKENS):
        raise InputError(option, f"must be a positive number of tokens up to {MAX_TOKENS:.0e}{example}, "
                                 f"got {tokens:g}")


def load_cluster_and_plan(args):
    """(catalog, cluster, plan) from --catalog, --cluster and --plan, the plan checked against the cluster."""
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = load_plan_file(args.plan, catalog)
    check_plan_against_cluster(plan, cluster)
    return catalog, cluster, plan


def print_json(data) -> None:
    # one write: json.dump hands stdout each of an answer's ~10^5 pieces (1 MB at 1,024 GPUs: 0.11 CPU s, 0.04 so)
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


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
