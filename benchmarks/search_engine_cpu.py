"""CPU time of hetplan's search under the FSDP and torchtitan profiles on the 16- and 64-GPU examples.

    python benchmarks/search_engine_cpu.py [--repeat N] [--no-hybrid]

search() alone (no start-up), the least CPU time (time.process_time) of N runs, and the best plan's
tokens/s: what searching the hybrid-shard knob (planner.search.space.hybrid_shard_of) costs. `--no-hybrid`
searches the same profiles with their hybrid sharding taken out (Space.hybrid_shard false: no knob, no
relaxed bound); run both in the same minute to compare, since a shared machine inflates every figure.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

import planner.engines as engines  # noqa: E402
from catalog import load_catalog  # noqa: E402
from catalog.formats import load_cluster_file  # noqa: E402
from planner.search import search  # noqa: E402
from planner.types import Job  # noqa: E402

CASES = (("a100-v100-16", "llama-3-8b", 64), ("h100-a100-v100-64", "llama-2-70b", 512))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-hybrid", action="store_true", help="the profiles without hybrid sharding")
    args = parser.parse_args()
    for name in ("fsdp", "torchtitan") if args.no_hybrid else ():
        profile = engines.ENGINES[name]
        engines.ENGINES[name] = replace(profile, space=replace(profile.space, hybrid_shard=False))
    catalog = load_catalog()
    for engine in ("fsdp", "torchtitan"):
        for name, model, batch in CASES:
            cluster = load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog)
            job = Job(catalog.model(model), batch, 4096, engine=engine)
            times = []
            for _ in range(args.repeat):
                start = time.process_time()
                result = search(cluster, job)
                times.append(time.process_time() - start)
            print(f"{engine:10s} {name:18s} {model:12s} {min(times):6.3f} s  "
                  f"{result.plans[0].estimate.tokens_per_s:,.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
