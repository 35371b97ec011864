"""What a best-engine search's proof evaluates: the candidates whose floors sit below the answer.

    python benchmarks/proof_benchmark.py CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--engine flagscale] [--pools K]

`search(..., engines=planner.engines.REAL)` as `hetplan plan` runs it, without a time limit; for each engine
(or the one `--engine` names), the candidates its verification (planner.search.search._verify) re-scored with
planner.cost.evaluate, with each one's floor (`Candidate.floor_s`, a lower bound on evaluate's iteration time)
and fast score: how many, and evaluate / floor (how far below evaluate the floors that made the proof
evaluate them were). `--pools K` takes benchmarks/growth_benchmark.py's K-pool cluster instead of CLUSTER
(pass `-` for it). The functions it watches are wrapped for the run only: the search itself is unchanged.
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.search import score as score_module  # noqa: E402
from benchmarks.growth_benchmark import pools_of  # noqa: E402
from benchmarks.job_args import add_job_arguments, job_of  # noqa: E402

search_module = importlib.import_module("planner.search.search")     # the package exports the function `search`


def watched_search(cluster, job) -> tuple[object, dict[str, list[tuple[float, float, float]]]]:
    """The search's result, and per engine the (floor, fast score, evaluate) of each candidate its
    verification re-scored."""
    rows: dict[str, list] = defaultdict(list)
    state: dict = {"engine": None, "candidate": None}
    to_plan, verify, evaluate_plan = (score_module.Candidate.to_plan, search_module._verify,
                                      search_module._evaluate_plan)

    def watched_to_plan(candidate, plan_job):
        state["candidate"] = candidate
        return to_plan(candidate, plan_job)

    def watched_verify(cluster, verified_job, *args, **kwargs):
        state["engine"] = verified_job.engine
        try:
            return verify(cluster, verified_job, *args, **kwargs)
        finally:
            state["engine"] = None

    def watched_evaluate(cluster, plan_job, plan, options):
        estimate = evaluate_plan(cluster, plan_job, plan, options)
        candidate = state["candidate"]
        if state["engine"] is not None and candidate is not None:
            rows[state["engine"]].append((candidate.floor_s, candidate.time_s, estimate.iteration_time_s))
        return estimate

    score_module.Candidate.to_plan = watched_to_plan
    search_module._verify, search_module._evaluate_plan = watched_verify, watched_evaluate
    try:
        result = search(cluster, job, options=SearchOptions(time_limit_s=None, baseline_time_limit_s=None),
                        engines=REAL)
    finally:
        score_module.Candidate.to_plan = to_plan
        search_module._verify, search_module._evaluate_plan = verify, evaluate_plan
    return result, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--engine", default=None, help="report this engine only (default: every engine)")
    parser.add_argument("--pools", type=int, default=None, help="growth_benchmark's K-pool cluster instead of CLUSTER")
    args = parser.parse_args()
    catalog = load_catalog()
    cluster = (cluster_from_dict(pools_of(args.pools), catalog) if args.pools is not None
               else load_cluster_file(args.cluster, catalog))
    start = time.process_time()
    result, rows = watched_search(cluster, job_of(args, catalog))
    spent = time.process_time() - start
    print(f"{cluster.name}: {result.plans[0].estimate.tokens_per_s:,.0f} tokens/s, "
          f"{'complete' if result.complete else f'gap {result.gap:.1%}'}, search {spent:.2f} CPU s")
    print("| engine | candidates the proof evaluated | evaluate / floor: least | median | largest |")
    print("|---|---|---|---|---|")
    for engine in REAL:
        if args.engine not in (None, engine):
            continue
        ratios = sorted(e / f for f, _, e in rows.get(engine, []) if f > 0)
        figures = (f"{ratios[0]:.3f} | {statistics.median(ratios):.3f} | {ratios[-1]:.3f}" if ratios else "- | - | -")
        print(f"| {engine} | {len(rows.get(engine, []))} | {figures} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
