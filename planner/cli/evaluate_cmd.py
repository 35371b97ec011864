"""hetplan evaluate --cluster FILE --plan FILE [--tokens T] [--json]"""
from __future__ import annotations

from planner.cli.rl_cmd import evaluate as evaluate_rl_plan, read_rl_plan
from planner.cli.common import add_cluster_and_plan, check_tokens, load_cluster_and_plan, print_json
from planner.cost import CostOptions, evaluate
from planner.network import crossing_to_dict, crossing_to_text, crossings
from planner.report import estimate_to_dict, estimate_to_text


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="predict time, memory and cost of a plan on a cluster",
                       description="Predict iteration time, memory per GPU and cost of a plan on a cluster.")
    add_cluster_and_plan(p)
    p.add_argument("--tokens", type=float, default=None, metavar="T",
                   help="tokens to train, for time and dollars to train (e.g. 1e12)")
    p.add_argument("--no-flash-attention", action="store_true",
                   help="model unfused attention kernels (older Megatron-LM) instead of FlashAttention")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    check_tokens("--tokens", args.tokens, " (e.g. 1e12)")
    rl = read_rl_plan(args.plan)
    if rl is not None:                  # an RL plan (plan JSON with "kind": "rl"): planner.rl
        return evaluate_rl_plan(args, rl)
    _, cluster, plan = load_cluster_and_plan(args)
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
