"""What searching part of each pool would change for the throughput objective (it is not the default).

    python benchmarks/partial_pools.py

For each case, hetplan's search (--engine megatron, no baselines) with the default space (a pool used whole
unless no layout can hold it) and with SearchOptions(partial_pools=True) (every pool also offers half, a
quarter ... of its nodes): the best tokens/s, GPUs used and the CPU seconds of the search. docs/performance.md
quotes it.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.types import Job  # noqa: E402


def cases(catalog):
    two_nodes = cluster_from_dict({"name": "2 x 64 A100", "pools": [{"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 2,
                                                                      "gpus_per_node": 64, "inter_node_gbps": 100}]},
                                  catalog)
    yield two_nodes, Job(catalog.model("gpt3-1.3b"), 8, 2048, engine="megatron")
    for name, model, batch in (("a100-v100-16", "gpt3-1.3b", 64), ("h100-a100-v100-64", "gpt3-13b", 512),
                               ("cloud-4types-1024", "gpt3-13b", 1024)):
        yield load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog), \
            Job(catalog.model(model), batch, 2048, engine="megatron")


def main() -> None:
    catalog = load_catalog()
    for cluster, job in cases(catalog):
        for partial in (None, True):
            start = time.process_time()
            result = search(cluster, job, options=SearchOptions(partial_pools=partial), baselines=False)
            best = result.plans[0]
            print(f"{cluster.name}, {job.model.id} batch {job.global_batch}, "
                  f"{'partial pools' if partial else 'default'}: {best.estimate.tokens_per_s:,.0f} tokens/s on "
                  f"{best.plan.num_gpus:,} GPUs, {time.process_time() - start:.1f} CPU s"
                  f"{'' if result.complete else ' (stopped at its limit)'}")


if __name__ == "__main__":
    main()
