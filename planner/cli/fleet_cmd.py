"""hetplan fleet --cluster FILE --jobs FILE [--policy NAME] [--time-limit S] [--workers N] [--json]"""
from __future__ import annotations

import argparse
import os

from catalog.formats import load_cluster_file, load_jobs_file, plan_to_dict
from planner.cli.common import catalog_from_args, finite_number, print_json
from planner.engines import AUTO, ENGINES, REAL
from planner.fleet import FleetOptions, FleetResult, NodeSlice, Policy, plan_fleet
from planner.report import estimate_to_dict, format_duration
from planner.workers import ended_by_signals

MAX_TIME_LIMIT_S = 3600
MAX_WORKERS = 64


def register(sub) -> None:
    p = sub.add_parser("fleet", help="share a cluster among several jobs (whole nodes or part of one) under a policy",
                       description="Give each job of a jobs file whole nodes of the cluster, or a half, a quarter "
                                   "... of one node's GPUs, and a plan on them, chosen by a mixed-integer program "
                                   "over planner-scored candidate allocations.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML")
    p.add_argument("--jobs", required=True, metavar="FILE",
                   help="jobs YAML: jobs: [{name, model, global_batch, seq_len, tokens, deadline_hours, weight}]")
    p.add_argument("--policy", choices=[x.value for x in Policy], default=Policy.THROUGHPUT.value,
                   help="throughput (default): most total normalised throughput; max-min: fairest normalised "
                        "throughput (Gavel); min-cost: fewest dollars within each job's deadline_hours; "
                        "finish-time: fairest time to finish against the job's best alone")
    p.add_argument("--time-limit", type=finite_number(0, MAX_TIME_LIMIT_S, "seconds"),
                   default=FleetOptions().search_time_limit_s, metavar="S",
                   help=f"CPU seconds of the search for each candidate allocation (default "
                        f"{FleetOptions().search_time_limit_s:g}); CPU time, so load on the machine does not "
                        f"change the plans")
    p.add_argument("--workers", type=_workers, default=min(os.cpu_count() or 1, 8), metavar="N",
                   help="processes that plan the candidates (default: this machine's CPUs, at most 8); used "
                        "where there are enough searches to pay for starting them; the plans do not depend on it")
    p.add_argument("--engine", choices=(AUTO, *ENGINES), default=AUTO, metavar="NAME",
                   help=f"the engine every job's plan is for ({', '.join(ENGINES)}); {AUTO} (default): each "
                        f"candidate planned for the best of {', '.join(REAL)}, sharing its --time-limit")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"policy", "allocations": [{"job", "gpus", "nodes", "placement", '
                        '"plan", "metrics", ...}], "idle", "solve_time_s", "plan_time_s", ...}')
    p.set_defaults(run=run)


def run(args) -> int:
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    jobs = load_jobs_file(args.jobs, catalog)
    with ended_by_signals():
        result = plan_fleet(cluster, jobs, args.policy,
                            FleetOptions(search_time_limit_s=args.time_limit, workers=args.workers,
                                         engines=REAL if args.engine == AUTO else (args.engine,)))
    if args.json:
        print_json(to_dict(result, catalog))
    else:
        print(to_text(result))
    return 0


def _workers(text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= MAX_WORKERS):
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_WORKERS}, got {text[:40]!r}")
    return int(text)


def placement_to_dict(s: NodeSlice) -> dict:
    return {"pool": s.pool, "nodes": s.node_ids, "gpus": s.gpu_ids}


def to_dict(result: FleetResult, catalog=None) -> dict:
    """`nodes`: pool -> nodes the job's GPUs lie on; `placement`: which nodes and GPUs, numbered from 0
    within each pool (part of a node: the node it shares and its GPUs there)."""
    allocations = []
    for a in result.allocations:
        tokens = a.job.tokens
        allocations.append({"job": a.job.name, "gpus": a.gpus, "nodes": a.candidate.nodes_by_pool,
                            "placement": [placement_to_dict(s) for s in a.placement],
                            "plan": plan_to_dict(a.candidate.plan, catalog), "metrics": estimate_to_dict(a.estimate),
                            "normalised_throughput": a.normalised_throughput,
                            "hours_to_finish": a.candidate.hours_to_finish(tokens),
                            "dollars_to_finish": a.candidate.dollars_to_finish(tokens),
                            "deadline_hours": a.job.deadline_hours})
    return {"policy": result.policy.value, "allocations": allocations, "idle": result.idle_gpus,
            "idle_nodes": result.idle_nodes, "idle_reasons": result.idle_reasons, "unscheduled": result.unscheduled,
            "solve_time_s": result.solve_time_s, "plan_time_s": result.plan_time_s, "searches": result.searches}


def to_text(result: FleetResult) -> str:
    lines = [f"policy {result.policy.value}: {len(result.allocations)} jobs run, {len(result.unscheduled)} wait "
             f"(solved in {result.solve_time_s:.2f} s after {result.plan_time_s:.1f} s planning candidates, "
             f"{result.searches} searches)"]
    for a in result.allocations:
        gpus = ", ".join(f"{n} x {pool}" for pool, n in a.gpus.items())
        where = "; ".join(s.describe() for s in a.placement)
        hours = a.candidate.hours_to_finish(a.job.tokens)
        dollars = a.candidate.dollars_to_finish(a.job.tokens)
        finish = "" if hours is None else f", finishes in {format_duration(hours * 3600)} for ${dollars:,.0f}"
        lines.append(f"  {a.job.name}: {gpus} GPUs ({where}), {ENGINES[a.candidate.plan.engine].title}; "
                     f"{a.estimate.tokens_per_s:,.0f} tokens/s "
                     f"({a.normalised_throughput:.0%} of its best){finish}")
    for name, why in result.unscheduled.items():
        lines.append(f"  {name}: not scheduled: {why}")
    for pool, n in result.idle_gpus.items():
        nodes = result.idle_nodes.get(pool, 0)
        lines.append(f"  idle: {n} GPUs of {pool} ({nodes} whole node{'s' * (nodes != 1)}): "
                     f"{result.idle_reasons[pool]}")
    return "\n".join(lines)
