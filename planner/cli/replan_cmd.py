"""hetplan replan --cluster NEW.yaml --plan CURRENT.json [--old-cluster OLD.yaml] [--tokens-remaining T] [--json]"""
from __future__ import annotations

from catalog.formats import load_cluster_file, load_plan_file, plan_to_dict
from planner.cli.common import (PLAN_FILE_HELP, add_cluster_and_plan, add_time_limit, catalog_from_args, check_tokens,
                                 print_json)
from planner.engines import AUTO, ENGINES, REAL, RUNTIME
from planner.replan import replan
from planner.report import estimate_to_dict
from planner.search.explain import describe_plan
from planner.search.planners import SearchOptions


def register(sub) -> None:
    p = sub.add_parser("replan", help="the best plan after the cluster changed, and whether switching pays",
                       description="Plan the current plan's job again on a changed cluster (nodes lost, spot GPUs "
                                   "reclaimed, new ones added): the best plan there, what moves, what the switch "
                                   "costs (checkpoint save, reshard and load at the nodes' network speed, restart) "
                                   "and whether it pays off over the tokens still to train.")
    add_cluster_and_plan(p, "the cluster as it is now (YAML)", PLAN_FILE_HELP + " (the plan running now)")
    p.add_argument("--old-cluster", metavar="FILE",
                   help="the cluster the current plan runs on, for the time to save its checkpoint "
                        "(default: --cluster)")
    p.add_argument("--tokens-remaining", type=float, default=None, metavar="T",
                   help="tokens still to train, to judge whether the switch pays off (e.g. 5e11)")
    p.add_argument("--engine", choices=(AUTO, *ENGINES), default=AUTO, metavar="NAME",
                   help=f"the engine the new plan is for ({', '.join(ENGINES)}). {AUTO} (default): the current "
                        f"plan's engine when it is one people launch ({', '.join(REAL)}); for a plan for "
                        f"{RUNTIME}'s runtime, the best of those engines")
    add_time_limit(p, SearchOptions().time_limit_s, "S", "CPU seconds for the search (shared by the engines searched)")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"plan", "metrics", "switch": {"seconds", "dollars", "moves"}, '
                        '"worth_switching", ...}')
    p.set_defaults(run=run)


def run(args) -> int:
    check_tokens("--tokens-remaining", args.tokens_remaining)
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    old = load_cluster_file(args.old_cluster, catalog) if args.old_cluster else None
    current = load_plan_file(args.plan, catalog)
    r = replan(cluster, current, args.tokens_remaining, old,
               options=SearchOptions(time_limit_s=args.time_limit, baseline_time_limit_s=None),
               engines=None if args.engine == AUTO else (args.engine,))
    if args.json:
        print_json({"plan": plan_to_dict(r.plan, catalog), "metrics": estimate_to_dict(r.estimate),
                    "switch": {"seconds": r.switch.seconds, "dollars": r.switch.dollars, "moves": list(r.switch.moves),
                               "checkpoint_gib": r.switch.checkpoint_bytes / 2**30},
                    "worth_switching": r.worth_switching, "reason": r.reason,
                    "current_metrics": None if r.current is None else estimate_to_dict(r.current),
                    "current_runs": r.current is not None, "why_not_current": r.why_not_current or None})
        return 0
    now = ("cannot run on the new cluster: " + r.why_not_current if r.current is None
           else f"{r.current.tokens_per_s:,.0f} tokens/s on the new cluster")
    lines = [f"current plan: {now}",
             f"best plan:    {r.estimate.tokens_per_s:,.0f} tokens/s on {r.estimate.num_gpus} GPUs, "
             f"${r.estimate.cost_per_million_tokens_usd:.3f} per million tokens",
             f"              for {ENGINES[r.plan.engine].title}: {describe_plan(r.plan)}",
             f"switch:       {r.switch.seconds:,.0f} s (${r.switch.dollars:,.2f}): checkpoint of "
             f"{r.switch.checkpoint_bytes / 2**30:,.0f} GiB saved and loaded, restart",
             *[f"  moves: {m}" for m in r.switch.moves],
             f"worth switching: {'yes' if r.worth_switching else 'no'}: {r.reason}"]
    print("\n".join(lines))
    return 0
