"""CPU seconds a best-engine search spends in Python's cyclic garbage collector, at the default thresholds and at
the command line's (planner.cli.GC_THRESHOLDS).

    python benchmarks/gc_share.py CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--thresholds default|cli]

`search(..., engines=planner.engines.REAL)` as `hetplan plan` runs it, in this process, once, at the thresholds
asked for; prints the search's CPU seconds, the collector's (gc.callbacks, start to stop of each collection) and
the collections per generation. Run each setting in a fresh process, one after the other, to compare.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import load_catalog, load_cluster_file  # noqa: E402
from planner.cli import GC_THRESHOLDS  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import search  # noqa: E402
from benchmarks.job_args import add_job_arguments, job_of  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--thresholds", choices=("default", "cli"), default="cli")
    args = parser.parse_args()
    catalog = load_catalog()
    cluster = load_cluster_file(args.cluster, catalog)
    job = job_of(args, catalog)
    spent = {"cpu_s": 0.0, "since": 0.0, "collections": [0, 0, 0]}

    def timed(phase, info):
        if phase == "start":
            spent["since"] = time.process_time()
        else:
            spent["cpu_s"] += time.process_time() - spent["since"]
            spent["collections"][info["generation"]] += 1
    if args.thresholds == "cli":
        gc.set_threshold(*GC_THRESHOLDS)
    gc.callbacks.append(timed)
    start = time.process_time()
    search(cluster, job, engines=REAL)
    total = time.process_time() - start
    gc.callbacks.remove(timed)
    print(f"thresholds {gc.get_threshold()}: search {total:.2f} CPU s, of which the collector {spent['cpu_s']:.3f} "
          f"({', '.join(map(str, spent['collections']))} collections of generations 0, 1, 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
