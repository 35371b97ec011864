"""Random valid plans against the search, by planner.cost.evaluate: the held-out check of issue 9.

    python benchmarks/random_plans.py [--plans 3000] [--seed 0] [--out docs/random-plans.md]

For held-out clusters of small nodes and slow links (none of them an example the search was tuned
on), draws random plans from the whole plan format (any stage count, layer split, replicas of
any pool and tp per stage, sample shares, micro-batch, ZeRO, recompute, interleave), keeps those
that fit, and reports the best random plan beside the search's answer. A random plan that beats
the answer lies outside the search space (the search is complete over its space by evaluate,
or says by how much it may miss); the table says which feature of the plan the space lacks.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog  # noqa: E402
from planner.cost import evaluate  # noqa: E402
from planner.search import search  # noqa: E402
from planner.search.space import tp_degrees  # noqa: E402
from planner.types import InputError, Job, Plan, Precision, Recompute, Replica, Schedule, Stage  # noqa: E402

HELD_OUT = [  # name, pools (gpu, nodes, gpus per node, Gb/s), model, global batch, seq len
    ("3x2 L40S + 2x4 V100, 25 Gb/s", [("l40s", 3, 2, 25), ("v100-32gb-sxm", 2, 4, 25)], "opt-350m", 64, 2048),
    ("4x1 RTX 4090 + 2x2 A10G, 10 Gb/s", [("rtx-4090", 4, 1, 10), ("a10g", 2, 2, 10)], "gpt3-1.3b", 32, 2048),
    ("2x4 A100-40 + 4x1 T4, 25 Gb/s", [("a100-40gb-sxm", 2, 4, 25), ("t4", 4, 1, 25)], "gpt3-1.3b", 64, 1024),
    ("2x2 H100 + 2x4 L40S, 100 Gb/s", [("h100-sxm", 2, 2, 100), ("l40s", 2, 4, 100)], "llama-2-7b", 32, 2048),
]


def cluster_of(name, pools, catalog):
    return cluster_from_dict({"name": "held-out", "pools": [
        {"name": gpu, "gpu": gpu, "nodes": n, "gpus_per_node": g, "inter_node_gbps": gbps}
        for gpu, n, g, gbps in pools]}, catalog)


def random_plan(rng: random.Random, cluster, job: Job) -> Plan | None:
    """A random plan of the whole format: stages, split, replicas and knobs drawn independently."""
    L, B = job.model.layers, job.global_batch
    p = rng.randint(1, min(8, L))
    cuts = sorted(rng.sample(range(1, L), p - 1))
    bounds = [0] + cuts + [L]
    free = {pool.name: pool.num_gpus for pool in cluster.pools}
    mb = rng.choice([m for m in (1, 2, 4, 8) if B % m == 0])
    stages = []
    for i in range(p):
        replicas = []
        for _ in range(rng.randint(1, 4)):
            pool = rng.choice([q for q in cluster.pools if free[q.name] > 0] or [None])
            if pool is None:
                break
            tp = rng.choice([t for t in tp_degrees(pool, job.model) if t <= free[pool.name]] or [0])
            if not tp:
                break
            free[pool.name] -= tp
            replicas.append((pool.name, tp))
        if not replicas:
            return None
        stages.append(replicas)
    shares_ok = all(len(r) <= B // mb for r in stages)
    if not shares_ok:
        return None
    built = []
    for i, replicas in enumerate(stages):
        m = B // mb
        weights = [rng.random() + 0.2 for _ in replicas]
        counts = [max(1, int(m * w / sum(weights))) for w in weights]
        while sum(counts) > m:
            counts[counts.index(max(counts))] -= 1
        counts[0] += m - sum(counts)
        built.append(Stage(bounds[i], bounds[i + 1], tuple(Replica(pool, tp, n * mb)
                                                           for (pool, tp), n in zip(replicas, counts))))
    precision = Precision.BF16 if all(q.gpu.supports_bf16 for q in cluster.pools) else Precision.FP16
    try:
        return Plan(job.model, B, job.seq_len, mb, precision, tuple(built), rng.choice((0, 1, 2, 3)),
                    rng.choice(list(Recompute)), any(r.tp > 1 for s in built for r in s.replicas),
                    Schedule.ONE_F_ONE_B, 1)
    except InputError:
        return None


def what_the_space_lacks(plan: Plan) -> str:
    lacks = []
    tps = {(r.pool, r.tp) for s in plan.stages for r in s.replicas}
    pools_tp: dict = {}
    for pool, tp in tps:
        pools_tp.setdefault(pool, set()).add(tp)
    if any(len(t) > 1 for t in pools_tp.values()):
        lacks.append("one pool at two tp degrees")
    counts = {len(s.replicas) for s in plan.stages}
    mixed = [s for s in plan.stages if len({r.pool for r in s.replicas}) > 1]
    if mixed and len(mixed) < len(plan.stages):
        lacks.append("mixed and single-pool stages together")
    if len(counts) > 1 and not mixed:
        lacks.append("unequal replica counts per stage")
    return ", ".join(lacks) or "(in the space)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "docs" / "random-plans.md"))
    args = parser.parse_args()
    catalog = load_catalog()
    rows = ["| cluster | model | search tokens/s | complete | random plans that fit | best random tokens/s | "
            "random / search | what the best random plan has that the space lacks |", "|---|---|---|---|---|---|---|---|"]
    for name, pools, model, batch, seq in HELD_OUT:
        cluster, job = cluster_of(name, pools, catalog), Job(catalog.model(model), batch, seq)
        result = search(cluster, job, baselines=False)
        ours = result.plans[0].estimate.tokens_per_s
        rng, fit, best = random.Random(args.seed), 0, (0.0, None)
        for _ in range(args.plans):
            plan = random_plan(rng, cluster, job)
            if plan is None:
                continue
            try:
                est = evaluate(cluster, plan, detail=False)
            except InputError:
                continue
            if est.fits:
                fit += 1
                if est.tokens_per_s > best[0]:
                    best = (est.tokens_per_s, plan)
        lacks = what_the_space_lacks(best[1]) if best[1] is not None and best[0] > ours else ""
        rows.append(f"| {name} | {model} | {ours:,.0f} | {'yes' if result.complete else f'gap {result.gap:.1%}'} | "
                    f"{fit:,} | {best[0]:,.0f} | {best[0] / ours:.3f} | {lacks} |")
        print(rows[-1], flush=True)
    header = ["# Random plans against the search", "",
              f"Generated by `python benchmarks/random_plans.py --plans {args.plans} --seed {args.seed}`. For each "
              "held-out cluster (small nodes, slow links; none is an example the search was tuned on), random plans "
              "drawn from the whole plan format (1-8 stages, any layer split, 1-4 replicas of any pool and tp per "
              "stage, random sample shares, micro-batch, ZeRO stage and recompute), scored by `planner.cost.evaluate`; "
              "the best that fits beside the search's answer (`search(..., baselines=False)`). `complete`: the "
              "search proved its answer best over its space by `evaluate` (README, `plan --json`). A ratio above 1 "
              "would be a plan outside the search space that beats it; the last column names what the space lacks.", ""]
    Path(args.out).write_text("\n".join(header + rows) + "\n")


if __name__ == "__main__":
    main()
