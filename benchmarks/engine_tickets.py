"""CPU seconds of each ticket of a best-engine search: each engine's search (and each part of the first
engine's), and the first engine's baselines, in the process that ran it, with `--workers N` as
`hetplan plan --workers N` runs them (1: in turn, in this process).

    python benchmarks/engine_tickets.py CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--workers N]

With N 1 the engines are searched in turn (planner.search.search._search_settings per engine, the
baselines after them); above, as tickets of planner.search.parallel.run_each (forked workers inherit
the timing). What a critical path is made of: the longest ticket bounds the wall time on N free cores.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from benchmarks.job_args import add_job_arguments, job_of  # noqa: E402

SEARCH = importlib.import_module("planner.search.search")     # the package exports the function `search`


def _timed(name: str, label):
    """SEARCH.`name`, printing its CPU seconds and `label(args)` on stderr at each return (a module-level
    name, so that a worker process reaches it by the same name)."""
    real = getattr(SEARCH, name)

    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            print(f"pid {os.getpid()}: {label(args)} {time.process_time() - start:.3f} CPU s", file=sys.stderr,
                  flush=True)
    timed.__module__, timed.__qualname__ = SEARCH.__name__, name
    setattr(SEARCH, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    catalog = load_catalog()
    cluster, job = load_cluster_file(args.cluster, catalog), job_of(args, catalog)
    if args.workers > 1:
        _timed("_engine_ticket", lambda a: "ticket {} {}".format(a[0], a[7][a[0]]))
    else:
        _timed("_search_settings", lambda a: f"engine {a[1].engine}")
        _timed("_attach_baselines", lambda a: "baselines")
    start = time.process_time()
    found = search(cluster, job, options=SearchOptions(workers=args.workers), engines=REAL)
    print(f"this process: {time.process_time() - start:.2f} CPU s; {found.plans[0].estimate.tokens_per_s:,.0f} "
          f"tokens/s, complete {found.complete}, gap {found.gap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
