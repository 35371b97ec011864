"""What the two baselines (megatron, uniform) cost: CPU seconds of `search()` with and without them.

    python benchmarks/baselines_benchmark.py [--max-gpus N] [--repeat 2]

For each job (16, 64, 128 and 1,024 GPUs, the "Second pass" rows of docs/performance.md), in this
process, one core: the CPU seconds of `search(..., engines=REAL)` as `hetplan plan` runs it, and of
the same call with baselines=False (the smallest of --repeat runs each; their difference is what
the baselines cost, their cost-model evaluations included); then each baseline's own search
(PLANNERS[name].consider, for the winning engine's job, fresh caches): its fast scores and CPU
seconds, whether it completed, and the tokens/s of the baseline the search reported.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL, RUNTIME  # noqa: E402
from planner.search import PLANNERS, SearchOptions, search  # noqa: E402
from planner.types import Job, Objective  # noqa: E402

import yaml  # noqa: E402

from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402

JOBS = [  # label, cluster file (None: the 128-GPU cluster of search_benchmark), model, batch, seq
    ("16 GPUs", "a100-v100-16.yaml", "llama-2-7b", 64, 4096),
    ("64 GPUs", "h100-a100-v100-64.yaml", "llama-2-70b", 256, 4096),
    ("128 GPUs", None, "llama-2-70b", 512, 4096),
    ("1,024 GPUs", "cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048),
]


def _cpu(call, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        out = call()
        best = min(best, time.process_time() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gpus", type=int, default=10**9)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    catalog = load_catalog()
    print("| job | search() CPU s | without baselines | baselines | megatron: fast scores, CPU s | "
          "uniform: fast scores, CPU s | baselines' tokens/s (megatron, uniform) |")
    print("|---|---|---|---|---|---|---|")
    for label, file, model, batch, seq in JOBS:
        if int(label.split()[0].replace(",", "")) > args.max_gpus:
            continue
        cluster = (cluster_from_dict(yaml.safe_load(CLUSTER_128), catalog) if file is None
                   else load_cluster_file(ROOT / "examples" / file, catalog))
        job = Job(catalog.model(model), batch, seq, engine=RUNTIME)
        whole, result = _cpu(lambda: search(cluster, job, engines=REAL), args.repeat)
        alone, _ = _cpu(lambda: search(cluster, job, engines=REAL, baselines=False), args.repeat)
        plan = result.plans[0].plan
        winner = replace(job, engine=plan.engine, offload=plan.offload, context_parallel=plan.context_parallel,
                         expert_parallel=plan.expert_parallel)
        cells = []
        for name in ("megatron", "uniform"):
            cpu, seen = _cpu(lambda: PLANNERS[name].consider(cluster, winner, Objective.THROUGHPUT, None,
                                                             SearchOptions()), 1)
            cells.append(f"{seen.fast_scores:,}, {cpu:.2f}" + ("" if seen.stopped_by is None else f" ({seen.stopped_by})"))
        tokens = ", ".join(f"{b.estimate.tokens_per_s:,.0f}" if b else "none" for b in result.baselines.values())
        print(f"| {label} | {whole:.2f} | {alone:.2f} | {whole - alone:.2f} | {cells[0]} | {cells[1]} | {tokens} |",
              flush=True)


if __name__ == "__main__":
    main()
