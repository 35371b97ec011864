"""What the plan's overlap switches and FSDP's hybrid sharding change, by the cost model.

    python benchmarks/overlap_switches.py [--time-limit S]

For the best plan of a few engines on the example clusters (hetplan's search, each switch the engine offers
turned on, as the search does), the tokens/s with the switches as searched and with every switch left to the
engine's default; then an FSDP ZeRO-3 plan (Llama 3 8B, 2 x 8 H100 at 400 Gb/s, micro-batch 1, full
recompute: tests/test_overlaps.py's case) with FULL_SHARD and with HYBRID_SHARD over each node's 8 GPUs.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import load_catalog  # noqa: E402
from catalog.formats import load_cluster_file  # noqa: E402
from planner.cost import evaluate  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.types import Job, Recompute  # noqa: E402

CASES = (("h100-a100-v100-64", "llama-2-70b", "megatron"), ("a100-v100-16", "llama-3-8b", "deepspeed"),
         ("a100-v100-16", "llama-3-8b", "fsdp"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=5.0, help="search time per case (CPU s)")
    args = parser.parse_args()
    catalog = load_catalog()
    for name, model, engine in CASES:
        cluster = load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog)
        plan = search(cluster, Job(catalog.model(model), 512, 4096, engine=engine), baselines=False,
                      options=SearchOptions(time_limit_s=args.time_limit)).plans[0].plan
        on = evaluate(cluster, plan).tokens_per_s
        off = evaluate(cluster, replace(plan, overlap_grad_reduce=None, overlap_param_gather=None,
                                        prefetch=None)).tokens_per_s
        switches = {k: getattr(plan, k) for k in ("overlap_grad_reduce", "overlap_param_gather", "prefetch")
                    if getattr(plan, k) is not None}
        print(f"{name} {model} {engine} (ZeRO {plan.zero_stage}, {plan.num_stages} stages) switches {switches}: "
              f"{on:,.0f} tokens/s; engine defaults {off:,.0f} ({on / off - 1:+.1%})")
    from tests.test_overlaps import _one_stage
    cluster, plan = _one_stage(catalog, "fsdp", 3)
    plan = replace(plan, recompute=Recompute.FULL)
    for p in (plan, replace(plan, hybrid_shard=8)):
        est = evaluate(cluster, p)
        peak = max(r.memory.total_bytes for r in est.replicas) / 2 ** 30
        print(f"FSDP ZeRO-3, llama-3-8b, 2 x 8 H100, mb 1, {'HYBRID_SHARD 8' if p.hybrid_shard else 'FULL_SHARD'}: "
              f"{est.tokens_per_s:,.0f} tokens/s, {peak:.1f} GiB per GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
