"""The fleet policies against two simple allocators on every example cluster, and the time to answer.

    PYTHONPATH=. python benchmarks/fleet_benchmark.py [--clusters NAME ...] [--time-limit S] [--workers N]
                                                      [--timing-limits S ...] [--write-docs]

Fleets: each example cluster with the jobs file of examples/fleet sized to it (FLEETS): small-jobs (4 jobs)
on the three clusters of at most 16 GPUs, three-jobs on lab-mix, five-jobs on the 64- and 1,024-GPU
clusters, ten-jobs on big-4types-4096 (the "10 jobs x 4,096 GPUs" case).

Deadlines (min-cost): the jobs files' deadlines are replaced by ones derived from the cluster, so that
min-cost is judged on deadlines it can meet: a job's deadline is SLACK times its hours to finish on the
equal split's allocation below, or, where the equal split finds it none, SLACK times the number of jobs
times its hours on its fastest candidate. The equal split then meets every deadline it schedules, so an
allocation running those jobs within their deadlines exists among the candidates.

greedy: jobs by weight (heaviest first) each take their fastest candidate whose GPUs still fit.
equal:  each job takes its fastest candidate within an equal share, floor(GPUs / jobs), of every pool.
Both choose among the same candidates as the policies (planner.fleet.fleet_candidates), and what they
choose packs onto nodes for the reason planner.fleet.solve's docstring gives.
Columns: jobs run; total normalised throughput (each job's tokens/s over its best candidate) weighted by
the jobs' weights (what the throughput policy maximises), the same unweighted, and the least of them;
worst slowdown against the job's best alone (finish-time fairness); dollars to finish; deadlines missed
(a job that does not run misses its own); seconds of the program (every stage). Planning the candidates
is timed once per cluster: every policy and allocator then reuses the same cached plans. Last, the "10 jobs
x 4,096 GPUs" fleet is planned afresh at each of --timing-limits, its planning and each policy's solve timed
apart (wall and CPU seconds, workers included).
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from dataclasses import replace
from pathlib import Path

from catalog import load_catalog
from catalog.formats import load_cluster_file, load_jobs_file
from planner.fleet import FleetOptions, Policy, fleet_candidates, plan_fleet

ROOT = Path(__file__).resolve().parent.parent
FLEETS = {"single-node-8": "small-jobs.yaml", "consumer-mix": "small-jobs.yaml", "a100-v100-16": "small-jobs.yaml",
          "lab-mix": "three-jobs.yaml", "h100-a100-v100-64": "five-jobs.yaml",
          "cloud-4types-1024": "five-jobs.yaml", "big-4types-4096": "ten-jobs.yaml"}
SLACK = 1.5
TIMED = "big-4types-4096"               # the "10 jobs x 4,096 GPUs" case
DOCS = ROOT / "docs" / "fleet.md"
HEADER = ("| allocator | run | weighted sum | sum norm | min norm | worst x | $ to finish | missed | solve s |\n"
          "|---|---|---|---|---|---|---|---|---|")


def _fits(cand, free) -> bool:
    return all(free.get(p, 0) >= n for p, n in cand.gpus_by_pool.items())


def greedy(cluster, jobs, cands):
    free = {p.name: p.num_gpus for p in cluster.pools}
    chosen = [None] * len(jobs)
    for j in sorted(range(len(jobs)), key=lambda j: -jobs[j].weight):
        for k in sorted(cands[j], key=lambda k: -k.estimate.tokens_per_s):
            if _fits(k, free):
                chosen[j] = k
                for p, n in k.gpus_by_pool.items():
                    free[p] -= n
                break
    return chosen


def equal(cluster, jobs, cands):
    share = {p.name: p.num_gpus // len(jobs) for p in cluster.pools}
    return [max((k for k in cands[j] if _fits(k, share)), key=lambda k: k.estimate.tokens_per_s, default=None)
            for j in range(len(jobs))]


def with_deadlines(cluster, jobs, cands):
    """The jobs with deadlines derived from the cluster (see the module's docstring)."""
    out = []
    for jb, mine, k in zip(jobs, cands, equal(cluster, jobs, cands)):
        if k is not None:
            hours = SLACK * k.hours_to_finish(jb.tokens)
        else:
            hours = SLACK * len(jobs) * min((c.hours_to_finish(jb.tokens) for c in mine), default=1.0)
        out.append(replace(jb, deadline_hours=float(f"{hours:.3g}")))
    return tuple(out)


def _row(name, jobs, cands, chosen, seconds) -> str:
    best = [max((k.estimate.tokens_per_s for k in c), default=1.0) for c in cands]
    norms = [k.estimate.tokens_per_s / b for k, b in zip(chosen, best) if k is not None]
    weighted = sum(jb.weight * k.estimate.tokens_per_s / b for k, b, jb in zip(chosen, best, jobs) if k is not None)
    dollars = sum(k.dollars_to_finish(jb.tokens) for k, jb in zip(chosen, jobs) if k)
    missed = sum(k is None or k.hours_to_finish(jb.tokens) > jb.deadline_hours for k, jb in zip(chosen, jobs))
    return (f"| {name} | {len(norms)}/{len(jobs)} | {weighted:.3f} | {sum(norms):.3f} | {min(norms, default=0):.3f} | "
            f"{max((1 / n for n in norms), default=float('inf')):.2f} | {dollars:,.0f} | {missed} | {seconds:.3f} |")


def bench(name: str, catalog, options: FleetOptions) -> list[str]:
    cluster = load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog)
    jobs = load_jobs_file(ROOT / "examples" / "fleet" / FLEETS[name], catalog)
    cache: dict = {}
    (cands, _, searches), wall, cpu = _timed(lambda: fleet_candidates(cluster, jobs, options, cache))
    jobs = with_deadlines(cluster, jobs, cands)
    lines = [f"### {name}: {cluster.num_gpus:,} GPUs, {len(jobs)} jobs ({FLEETS[name]})", "",
             f"Candidates: {sum(map(len, cands))} for {len(jobs)} jobs from {searches} searches, planned in "
             f"{wall:.1f} s wall, {cpu:.1f} CPU s (this process and its {options.workers} worker"
             f"{'s' * (options.workers != 1)}). Deadlines (h): "
             + ", ".join(f"{jb.name} {jb.deadline_hours:g}" for jb in jobs) + ".", "", HEADER]
    for policy in Policy:
        r = plan_fleet(cluster, jobs, policy, options, cache)
        by_name = {a.job.name: a.candidate for a in r.allocations}
        lines.append(_row(policy.value, jobs, cands, [by_name.get(jb.name) for jb in jobs], r.solve_time_s))
    for label, allocator in (("greedy", greedy), ("equal", equal)):
        start = time.perf_counter()
        chosen = allocator(cluster, jobs, cands)
        lines.append(_row(label, jobs, cands, chosen, time.perf_counter() - start))
    return lines + [""]


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (the worker processes)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _timed(work):
    start, cpu = time.perf_counter(), _cpu_s()
    out = work()
    return out, time.perf_counter() - start, _cpu_s() - cpu


def timing(name: str, catalog, limits: list[float], workers: int) -> list[str]:
    """The time to answer on `name`'s fleet at each search limit: the candidates' planning (from an empty
    cache) apart from each policy's program."""
    cluster = load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog)
    jobs = load_jobs_file(ROOT / "examples" / "fleet" / FLEETS[name], catalog)
    lines = [f"### Time to answer: {len(jobs)} jobs x {cluster.num_gpus:,} GPUs ({name})", "",
             "Planning is the candidates' searches, once for all policies (they share the cache); solve is "
             "each policy's program alone (every stage), on those candidates; min-cost with deadlines derived as for the tables above.",
             "", "| search limit (CPU s per candidate) | workers | searches | planning wall s | planning CPU s | "
             + " | ".join(f"solve s {p.value}" for p in Policy) + " |", "|---" * (5 + len(Policy)) + "|"]
    for limit in limits:
        options, cache = FleetOptions(search_time_limit_s=limit, workers=workers), {}
        (cands, _, searches), wall, cpu = _timed(lambda: fleet_candidates(cluster, jobs, options, cache))
        timed = with_deadlines(cluster, jobs, cands)
        solves = [plan_fleet(cluster, timed, p, options, cache).solve_time_s for p in Policy]
        lines.append(f"| {limit:g} | {workers} | {searches} | {wall:.1f} | {cpu:.1f} | "
                     + " | ".join(f"{t:.2f}" for t in solves) + " |")
    return lines + [""]


def _docs(sections: list[list[str]], options: FleetOptions, command: str) -> str:
    head = DOCS.read_text().split(MARK)[0] if DOCS.exists() else DEFAULT_HEAD      # the text above stays
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    body = [MARK, "", f"Generated by `{command}` on {machine}, {time.strftime('%Y-%m-%d')}; search limit "
            f"{options.search_time_limit_s:g} CPU s per candidate, at most {options.max_candidates} candidates "
            f"per job. Times are wall-clock on that machine, which other work shared.", ""]
    return head + "\n".join(body + [line for s in sections for line in s])


MARK = "## Measured"
DEFAULT_HEAD = "# Fleet benchmark\n\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", nargs="*", default=list(FLEETS), choices=list(FLEETS), metavar="NAME")
    ap.add_argument("--time-limit", type=float, default=FleetOptions().search_time_limit_s,
                    help="search CPU seconds per candidate")
    ap.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 8))
    ap.add_argument("--timing-limits", type=float, nargs="*", default=[0.5, 1.0], metavar="S",
                    help=f"search limits at which to time the {TIMED} fleet afresh (none: skip)")
    ap.add_argument("--write-docs", action="store_true", help=f"write the tables into {DOCS.relative_to(ROOT)}")
    args = ap.parse_args()
    catalog = load_catalog()
    options = FleetOptions(search_time_limit_s=args.time_limit, workers=args.workers)
    sections = []
    for name in args.clusters:
        sections.append(bench(name, catalog, options))
        print("\n".join(sections[-1]), flush=True)
    if args.timing_limits:
        sections.append(timing(TIMED, catalog, args.timing_limits, args.workers))
        print("\n".join(sections[-1]), flush=True)
    if args.write_docs:
        command = "PYTHONPATH=. python benchmarks/fleet_benchmark.py --write-docs" + (
            f" --time-limit {args.time_limit:g}" if args.time_limit != FleetOptions().search_time_limit_s else "")
        DOCS.write_text(_docs(sections, options, command) + "\n")


if __name__ == "__main__":
    main()
