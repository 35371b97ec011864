"""What the two baselines (megatron, uniform) cost: CPU seconds of `search()` with and without them.

    python benchmarks/baselines_benchmark.py [--max-gpus N] [--repeat 2] [--save FILE | --compare FILE]

For each job (16, 64, 128, 1,024 and 4,096 GPUs, the "Second pass" rows of docs/performance.md), in this
process, one core: the CPU seconds of `search(..., engines=REAL)` as `hetplan plan` runs it, and of
the same call with baselines=False (the smallest of --repeat runs each; their difference is what
the baselines cost, their cost-model evaluations included); then each baseline's own search
(PLANNERS[name].consider, for the winning engine's job, fresh caches): its fast scores and CPU
seconds, whether it completed, then its re-scoring (search._best_of: the kept candidates it
evaluates with the cost model, and their CPU seconds), and the tokens/s of the baseline the search
reported.

--save FILE writes each job's baseline plans, tokens/s, status and notes as the search reported
them; --compare FILE says how many of them changed since (a change to the baselines' search must
leave them as they are: "0 of 8 baseline plans changed").
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL, RUNTIME  # noqa: E402
from planner.search import PLANNERS, SearchOptions, search  # noqa: E402
from planner.search.planners import Clock  # noqa: E402
from planner.search.search import _best_of  # noqa: E402
from planner.types import Job, Objective  # noqa: E402

import yaml  # noqa: E402

from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402

JOBS = [  # label, cluster file (None: the 128-GPU cluster of search_benchmark), model, batch, seq
    ("16 GPUs", "a100-v100-16.yaml", "llama-2-7b", 64, 4096),
    ("64 GPUs", "h100-a100-v100-64.yaml", "llama-2-70b", 256, 4096),
    ("128 GPUs", None, "llama-2-70b", 512, 4096),
    ("1,024 GPUs", "cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048),
    ("4,096 GPUs", "big-4types-4096.yaml", "llama-3.1-405b", 2048, 8192),
]


def _cpu(call, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        out = call()
        best = min(best, time.process_time() - start)
    return best, out


def _baseline_record(result) -> dict:
    """What must not change: each baseline's plan and estimate as reported, its status, the notes."""
    return {"plans": {name: None if b is None else {"plan": repr(b.plan), "tokens_per_s": b.estimate.tokens_per_s,
                                                      "explanation": b.explanation}
                      for name, b in result.baselines.items()},
            "status": {name: repr(st) for name, st in result.baseline_status.items()},
            "notes": [n for n in result.notes if "baseline" in n]}


def _changed(saved: dict, now: dict) -> tuple[int, int]:
    """(baseline plans changed, baseline plans compared) over the jobs both runs have."""
    changed = compared = 0
    for label in saved.keys() & now.keys():
        old, new = saved[label], now[label]
        for name in old["plans"].keys() | new["plans"].keys():
            compared += 1
            same = (old["plans"].get(name) == new["plans"].get(name)
                    and old["status"].get(name) == new["status"].get(name))
            if not same:
                changed += 1
                print(f"changed: {label} {name}", flush=True)
        if old["notes"] != new["notes"]:
            changed += 1
            print(f"changed: {label} baseline notes", flush=True)
    return changed, compared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gpus", type=int, default=10**9)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--save", help="write the baselines' plans to this JSON file")
    parser.add_argument("--compare", help="compare the baselines' plans with those of this JSON file")
    args = parser.parse_args()
    catalog = load_catalog()
    records = {}
    print("| job | search() CPU s | without baselines | baselines | megatron: fast scores, CPU s; re-scored, CPU s | "
          "uniform: fast scores, CPU s; re-scored, CPU s | baselines' tokens/s (megatron, uniform) |")
    print("|---|---|---|---|---|---|---|")
    for label, file, model, batch, seq in JOBS:
        if int(label.split()[0].replace(",", "")) > args.max_gpus:
            continue
        cluster = (cluster_from_dict(yaml.safe_load(CLUSTER_128), catalog) if file is None
                   else load_cluster_file(ROOT / "examples" / file, catalog))
        job = Job(catalog.model(model), batch, seq, engine=RUNTIME)
        whole, result = _cpu(lambda: search(cluster, job, engines=REAL), args.repeat)
        alone, _ = _cpu(lambda: search(cluster, job, engines=REAL, baselines=False), args.repeat)
        records[label] = _baseline_record(result)
        plan = result.plans[0].plan
        winner = replace(job, engine=plan.engine, offload=plan.offload, context_parallel=plan.context_parallel,
                         expert_parallel=plan.expert_parallel)
        cells = []
        for name in ("megatron", "uniform"):
            options = SearchOptions()
            cpu, seen = _cpu(lambda: PLANNERS[name].consider(cluster, winner, Objective.THROUGHPUT, None, options), 1)
            rescore, _ = _cpu(lambda: _best_of(cluster, winner, Objective.THROUGHPUT, None, seen, options,
                                               Clock(options.baseline_time_limit_s), {}), 1)
            cells.append(f"{seen.fast_scores:,}, {cpu:.2f}" + ("" if seen.stopped_by is None else f" ({seen.stopped_by})")
                         + f"; {seen.rescored} of {len(seen.kept)}, {rescore:.2f}")
        tokens = ", ".join(f"{b.estimate.tokens_per_s:,.0f}" if b else "none" for b in result.baselines.values())
        print(f"| {label} | {whole:.2f} | {alone:.2f} | {whole - alone:.2f} | {cells[0]} | {cells[1]} | {tokens} |",
              flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(records, indent=1, sort_keys=True))
    if args.compare:
        changed, compared = _changed(json.loads(Path(args.compare).read_text()), records)
        print(f"{changed} of {compared} baseline plans changed (plan, tokens/s, status; notes count as one)")


if __name__ == "__main__":
    main()
