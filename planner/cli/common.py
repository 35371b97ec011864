"""Helpers shared by subcommands: loading the catalog and input files, printing JSON."""
from __future__ import annotations

import json
import sys


def catalog_from_args(args):
    from catalog import load_catalog
    return load_catalog(args.catalog)


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
