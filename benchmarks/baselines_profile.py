"""Where the two baselines' time goes, for one job: what docs/performance.md's "The baselines, third step" cites.

    python benchmarks/baselines_profile.py [--gpus 128|1024|4096] [--repeat N]

In this process, one core, CPU time: `search(..., engines=REAL)` as `hetplan plan` runs it, with every call of
planner.cost.evaluate recorded as the main search's or the baselines' (how many plans the two share); then each
baseline's own search (PLANNERS[name].consider) for the winning engine's job on a copy of the winner's scorer
and bounds (their caches, as the search hands them over): its CPU seconds (the least of --repeat runs, each on
a fresh copy), the CPU seconds until its loop had a finite threshold (`rescore` candidates kept), and a
CPU-clock profile of both searches, the largest items as shares of the whole.
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import math
import pstats
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import PLANNERS, SearchOptions, search  # noqa: E402
from planner.search import planners as planners_module  # noqa: E402
from planner.types import Job, Objective  # noqa: E402

search_module = sys.modules["planner.search.search"]
ITEMS = [("bound.py", "pipeline_s"), ("bound.py", "_run_caps"), ("score.py", "score"),
         ("score.py", "even_family_busiest_s"), ("score.py", "even_runs_s"), ("score.py", "even_holds"),
         ("space.py", "knob_settings"), ("screen.py", "screen_s")]


def _job(gpus: int, catalog):
    if gpus == 128:
        return cluster_from_dict(yaml.safe_load(CLUSTER_128), catalog), Job(catalog.model("llama-2-70b"), 512, 4096)
    if gpus == 4096:
        return (load_cluster_file(ROOT / "examples" / "big-4types-4096.yaml", catalog),
                Job(catalog.model("llama-3.1-405b"), 2048, 8192))
    return (load_cluster_file(ROOT / "examples" / "cloud-4types-1024.yaml", catalog),
            Job(catalog.model("gpt3-175b"), 1536, 2048))


def _shared_evaluations(cluster, job) -> tuple[int, int, int]:
    """(plans the main search evaluated, the baselines evaluated, of those the main search's too)."""
    calls, inside = {"main": [], "baselines": []}, [False]
    attach = search_module._attach_baselines

    def recording(module):
        real = module.evaluate

        def evaluate(cluster, plan, *args, **kwargs):
            calls["baselines" if inside[0] else "main"].append(plan)
            return real(cluster, plan, *args, **kwargs)
        return real, evaluate

    def attaching(*args, **kwargs):
        inside[0] = True
        try:
            return attach(*args, **kwargs)
        finally:
            inside[0] = False
    saved = [(module, *recording(module)) for module in (search_module, planners_module)]
    for module, _, evaluate in saved:
        module.evaluate = evaluate
    search_module._attach_baselines = attaching
    try:
        search(cluster, job, engines=REAL)
    finally:
        for module, real, _ in saved:
            module.evaluate = real
        search_module._attach_baselines = attach
    main = set(calls["main"])
    return len(calls["main"]), len(calls["baselines"]), sum(plan in main for plan in calls["baselines"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, choices=(128, 1024, 4096), default=1024)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    catalog = load_catalog()
    cluster, job = _job(args.gpus, catalog)
    main_n, base_n, shared = _shared_evaluations(cluster, job)
    print(f"evaluate calls: main search {main_n}, baselines {base_n}, of which plans the main search evaluated: {shared}")
    result = search(cluster, job, engines=REAL, baselines=False)
    plan = result.plans[0].plan
    winner = replace(job, engine=plan.engine, offload=plan.offload, context_parallel=plan.context_parallel,
                     expert_parallel=plan.expert_parallel)
    options = SearchOptions()
    warm = planners_module.shared_bounds(cluster, winner, options)
    PLANNERS["hetplan"].consider(cluster, winner, Objective.THROUGHPUT, None, options, warm)
    first, add = [math.inf], planners_module._Keeper.add

    def timed_add(keeper, cand, bound=-math.inf):
        add(keeper, cand, bound)
        if first[0] == math.inf and keeper.threshold() < math.inf:
            first[0] = time.process_time()
    planners_module._Keeper.add = timed_add
    profile = cProfile.Profile(time.process_time)
    unlimited = SearchOptions(baseline_time_limit_s=None)     # profiled, past no limit (it runs several times slower)
    try:
        for name in ("megatron", "uniform"):
            runs = []
            for _ in range(args.repeat):
                bounds, first[0] = copy.deepcopy(warm), math.inf
                start = time.process_time()
                seen = PLANNERS[name].consider(cluster, winner, Objective.THROUGHPUT, None, options, bounds)
                end = time.process_time()
                runs.append((end - start, first[0] - start))
            cpu, until = min(runs)
            print(f"{name}: {cpu:.3f} CPU s, {seen.fast_scores} fast scores; a finite threshold after {until:.3f} s")
            bounds = copy.deepcopy(warm)
            profile.enable()
            PLANNERS[name].consider(cluster, winner, Objective.THROUGHPUT, None, unlimited, bounds)
            profile.disable()
    finally:
        planners_module._Keeper.add = add
    stats = pstats.Stats(profile).stats
    whole = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    for file, function in ITEMS:
        cumulative = sum(ct for (path, _, name), (_, _, _, ct, _) in stats.items()
                         if path.endswith(file) and name == function)
        print(f"{file} {function}: {cumulative / whole:.0%} of the baselines' searches (profiled)")


if __name__ == "__main__":
    main()
