"""A stand-in for `planner.search` with its documented API, for app tests while (or where) the
real search is absent. Plans are simple: one pipeline stage per pool, layers in proportion to
the pool's peak FLOP/s, one tp-`gpus_per_node` replica per node; every plan is scored by the
real cost model."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner.cost import evaluate
from planner.types import (Cluster, Estimate, InfeasibleError, Job, Objective, Plan, Precision, Replica,
                           Stage)


@dataclass(frozen=True)
class SearchOptions:
    time_limit_s: float = 10.0


@dataclass(frozen=True)
class ScoredPlan:
    plan: Plan
    estimate: Estimate
    gain_over: dict = field(default_factory=dict)
    explanation: str = ""


@dataclass(frozen=True)
class SearchResult:
    plans: list
    pareto: list
    baselines: dict
    idle: dict
    search_time_s: float


def _split(total: int, weights: list[float]) -> list[int]:
    raw = [max(1, round(total * w / sum(weights))) for w in weights]
    raw[-1] = total - sum(raw[:-1])
    if raw[-1] < 1:
        raise InfeasibleError(f"{total} layers cannot be split over {len(weights)} stages")
    return raw


def _plan(cluster: Cluster, job: Job, tp_div: int, uniform: bool) -> Plan:
    pools = list(cluster.pools)
    weights = [1.0] * len(pools) if uniform else [p.num_gpus * p.gpu.peak_flops for p in pools]
    sizes = _split(job.model.layers, weights)
    stages, start = [], 0
    for pool, n in zip(pools, sizes):
        tp = max(1, pool.gpus_per_node // tp_div)
        count = pool.num_gpus // tp
        if job.global_batch < count:
            raise InfeasibleError(f"global batch {job.global_batch} is smaller than the {count} replicas "
                                  f"of pool {pool.name}; raise the global batch")
        share, extra = divmod(job.global_batch, count)
        replicas = tuple(Replica(pool.name, tp, share + (1 if k < extra else 0)) for k in range(count))
        stages.append(Stage(start, start + n, replicas))
        start += n
    bf16 = all(p.gpu.supports_bf16 for p in pools)
    precision = job.precision or (Precision.BF16 if bf16 else Precision.FP16)
    return Plan(job.model, job.global_batch, job.seq_len, 1, precision, tuple(stages))


def search(cluster: Cluster, job: Job, objective=Objective.THROUGHPUT, deadline_hours=None, top_k=5,
           method="hetplan", options=SearchOptions(), baselines=True, offload="auto", context_parallel="auto",
           expert_parallel="auto") -> SearchResult:
    t0 = time.perf_counter()
    if job.global_batch > 100_000:
        raise InfeasibleError("fake: global batch too large")
    if job.model.layers < len(cluster.pools):
        raise InfeasibleError(f"{job.model.layers} layers for {len(cluster.pools)} pools; use fewer pools")
    scored = []
    for tp_div in (1, 2, 4, 8)[:top_k]:
        plan = _plan(cluster, job, tp_div, uniform=False)
        scored.append(ScoredPlan(plan, evaluate(cluster, plan, job.tokens_to_train, timeline=True)))
    base = _plan(cluster, job, 1, uniform=True)
    megatron = ScoredPlan(base, evaluate(cluster, base, job.tokens_to_train, timeline=True), {}, "uniform layers")
    scored.sort(key=lambda s: -s.estimate.tokens_per_s)
    best = scored[0].estimate.tokens_per_s
    scored = [ScoredPlan(s.plan, s.estimate,
                         {"megatron": s.estimate.tokens_per_s / megatron.estimate.tokens_per_s - 1, "uniform": None},
                         f"fake plan with tp = gpus_per_node / {k}") for k, s in enumerate(scored)]
    return SearchResult(plans=scored, pareto=scored[:2], baselines={"megatron": megatron, "uniform": None},
                        idle={}, search_time_s=time.perf_counter() - t0 + 0 * best)
