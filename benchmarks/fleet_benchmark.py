"""The fleet policies against two simple allocators on the same jobs and candidates, and the solve time.

    PYTHONPATH=. python benchmarks/fleet_benchmark.py [--clusters a.yaml ...] [--jobs jobs.yaml] [--time-limit S]

greedy: jobs by weight (heaviest first) each take their best candidate that still fits.
equal:  each job takes its best candidate within an equal share (floor(nodes / jobs)) of every pool.
Columns: jobs run, total (unweighted) and least normalised throughput, worst slowdown against the job's best alone
(finish-time fairness), dollars to finish (where every job has tokens), and seconds to solve.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from catalog import load_catalog
from catalog.formats import load_cluster_file, load_jobs_file
from planner.fleet import FleetOptions, Policy, job_candidates, plan_fleet

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CLUSTERS = ["lab-mix.yaml", "a100-v100-16.yaml", "consumer-mix.yaml", "h100-a100-v100-64.yaml",
                    "single-node-8.yaml"]


def _fits(nodes, free) -> bool:
    return all(free.get(p, 0) >= n for p, n in nodes)


def greedy(cluster, jobs, cands):
    free = {p.name: p.nodes for p in cluster.pools}
    chosen = [None] * len(jobs)
    for j in sorted(range(len(jobs)), key=lambda j: -jobs[j].weight):
        for k in sorted(cands[j], key=lambda k: -k.estimate.tokens_per_s):
            if _fits(k.nodes, free):
                chosen[j] = k
                for p, n in k.nodes:
                    free[p] -= n
                break
    return chosen


def equal(cluster, jobs, cands):
    share = {p.name: p.nodes // len(jobs) for p in cluster.pools}
    return [max((k for k in cands[j] if _fits(k.nodes, share)), key=lambda k: k.estimate.tokens_per_s, default=None)
            for j in range(len(jobs))]


def _row(name, jobs, cands, chosen, seconds):
    best = [max((k.estimate.tokens_per_s for k in c), default=1.0) for c in cands]
    norms = [k.estimate.tokens_per_s / b for k, b in zip(chosen, best) if k is not None]
    dollars = (sum(k.dollars_to_finish(jb.tokens) for k, jb in zip(chosen, jobs) if k)
               if all(jb.tokens for jb in jobs) else float("nan"))
    return (f"  {name:<12} {len(norms):>3}/{len(jobs):<3} {sum(norms):>8.3f} {min(norms, default=0):>8.3f} "
            f"{max((1 / n for n in norms), default=float('inf')):>9.2f} {dollars:>12,.0f} {seconds:>8.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", nargs="*", default=[str(ROOT / "examples" / c) for c in DEFAULT_CLUSTERS])
    ap.add_argument("--jobs", default=str(ROOT / "examples" / "fleet" / "three-jobs.yaml"))
    ap.add_argument("--time-limit", type=float, default=0.3, help="search CPU seconds per candidate")
    args = ap.parse_args()
    catalog = load_catalog()
    jobs = load_jobs_file(args.jobs, catalog)
    options = FleetOptions(search_time_limit_s=args.time_limit)
    for path in args.clusters:
        cluster = load_cluster_file(path, catalog)
        cache: dict = {}
        start = time.perf_counter()
        cands = [job_candidates(cluster, jb, options, cache)[0] for jb in jobs]
        print(f"{cluster.name}: {cluster.num_gpus} GPUs, {len(jobs)} jobs, "
              f"{sum(map(len, cands))} candidates planned in {time.perf_counter() - start:.1f} s")
        print(f"  {'allocator':<12} {'run':>7} {'sum norm':>8} {'min norm':>8} {'worst x':>9} {'dollars':>12} {'solve s':>8}")
        for policy in Policy:
            try:
                r = plan_fleet(cluster, jobs, policy, options, cache)
            except Exception as e:                      # a policy's input limit (e.g. tokens) shows as a row
                print(f"  {policy.value:<12} {type(e).__name__}: {e}")
                continue
            by_name = {a.job.name: a.candidate for a in r.allocations}
            print(_row(policy.value, jobs, cands, [by_name.get(jb.name) for jb in jobs], r.solve_time_s))
        for name, allocator in (("greedy", greedy), ("equal", equal)):
            start = time.perf_counter()
            chosen = allocator(cluster, jobs, cands)
            print(_row(name, jobs, cands, chosen, time.perf_counter() - start))


if __name__ == "__main__":
    main()
