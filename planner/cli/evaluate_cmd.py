"""hetplan evaluate --cluster FILE --plan FILE [--tokens T] [--json]"""
from __future__ import annotations

import math

from planner.cli.common import PLAN_FILE_HELP, catalog_from_args, print_json
from planner.cost import evaluate
from planner.report import estimate_to_dict, estimate_to_text
from planner.types import InputError


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="predict time, memory and cost of a plan on a cluster",
                       description="Predict iteration time, memory per GPU and cost of a plan on a cluster.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML")
    p.add_argument("--plan", required=True, metavar="FILE", help=PLAN_FILE_HELP)
    p.add_argument("--tokens", type=float, default=None, metavar="T",
                   help="tokens to train, for time and dollars to train (e.g. 1e12)")
    p.add_argument("--no-flash-attention", action="store_true",
                   help="model unfused attention kernels (older Megatron-LM) instead of FlashAttention")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    from catalog.formats import check_plan_against_cluster, load_cluster_file, load_plan_file
    from planner.cost import CostOptions
    from planner.network import crossing_to_dict, crossing_to_text, crossings
    if args.tokens is not None and not (math.isfinite(args.tokens) and args.tokens > 0):
        raise InputError("--tokens", f"must be a positive, finite number of tokens (e.g. 1e12), got {args.tokens}")
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = load_plan_file(args.plan, catalog)
    check_plan_against_cluster(plan, cluster)
    est = evaluate(cluster, plan, tokens_to_train=args.tokens,
                   options=CostOptions(flash_attention=not args.no_flash_attention))
    paths = crossings(cluster, plan)
    if args.json:
        out = estimate_to_dict(est)
        if cluster.network is not None:
            out["network_paths"] = [crossing_to_dict(c) for c in paths]
        print_json(out)
    else:
        print(estimate_to_text(est))
        if paths:
            print("\ntraffic between pools (the cluster's network section; widest paths)")
            print("\n".join(crossing_to_text(c) for c in paths))
    return 0
