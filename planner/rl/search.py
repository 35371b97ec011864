"""The search over RL placements: colocated on each pool, and disaggregated (and mixed) with the
actor on a pool (all its nodes, or half of them) and the rollout on every other GPU, for the
objective; and the colocated all-on-the-best-GPU baseline.

Candidates (P pools): colocated on each pool; for each training pool T and size (all of T's nodes,
or half when T has two or more), the rollout on the cluster's other GPUs (the rest of T and every
other pool), shapes disaggregated and mixed. The actor's plan is hetplan's training search (planner.
search.search) for the training GPUs under the training engine, for throughput, cached per (pool,
nodes); each rollout pool takes the tensor-parallel degree (powers of two within a node) whose
replicas generate fastest at an even share of the samples. Objectives: `throughput` (most samples
per second: least step time) or `cost` (least dollars per step), each optionally under a step-time
deadline.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.cost import evaluate
from planner.flops import model_params
from planner.rl.engines import ROLLOUT_ENGINES
from planner.rl.generation import generation
from planner.rl.roles import RlPlan, RolloutGroup, Shape
from planner.rl.step import RlEstimate, evaluate_rl, training_states_per_gpu
from planner.rl.workload import OBJECTIVES, RlJob
from planner.search import SearchOptions, search
from planner.types import Cluster, InfeasibleError, InputError, Job, Objective, Plan, Pool

TRAINING_TIME_LIMIT_S = 20.0        # CPU seconds each actor training search may take (hetplan plan's default)


@dataclass(frozen=True)
class RlCandidate:
    plan: RlPlan
    estimate: RlEstimate


@dataclass(frozen=True)
class RlSearchResult:
    best: RlCandidate
    candidates: tuple[RlCandidate, ...]        # every feasible candidate, best first
    baseline: RlCandidate | None               # colocated on the best GPU's pool
    baseline_pool: str
    rejected: tuple[str, ...]                  # candidates that could not run, with why
    objective: str
    step_deadline_s: float | None


def key(objective: str, est: RlEstimate) -> float:
    return est.step_time_s if objective == "throughput" else est.dollars_per_step


def best_gpu_pool(cluster: Cluster) -> Pool:
    """The pool of the best GPU: highest 16-bit peak, then most memory, then most GPUs."""
    return max(cluster.pools, key=lambda p: (p.gpu.peak_flops, p.gpu.mem_bytes, p.num_gpus))


def _actor_plan(cluster: Cluster, job: RlJob, pool: Pool, nodes: int, engine: str, limit_s: float,
                cache: dict) -> Plan:
    k = (pool.name, nodes)
    if k not in cache:
        sub = Cluster(cluster.name, (replace(pool, nodes=nodes),))
        train = Job(job.model, job.mini_batch_samples, job.train_seq_len, job.precision, engine=engine)
        try:
            cache[k] = search(sub, train, Objective.THROUGHPUT, top_k=1, options=SearchOptions(time_limit_s=limit_s),
                              baselines=False).plans[0].plan
        except InputError as e:
            cache[k] = e
    if isinstance(cache[k], InputError):
        raise cache[k]
    return cache[k]


def rollout_group(cluster: Cluster, job: RlJob, pool: Pool, gpus: int, engine: str, sharded: float = 0.0,
                  share: float = 1.0, per_gpu: float = 0.0) -> RolloutGroup:
    """The fastest tensor-parallel degree for `gpus` GPUs of `pool` at `share` of the samples, with
    `per_gpu` bytes resident on each GPU and `sharded` bytes split over each replica's GPUs."""
    best, best_s, why = None, math.inf, ""
    tp = 1
    while tp <= min(pool.gpus_per_node, gpus):
        replicas = gpus // tp
        try:
            g = generation(model=job.model, pool=pool, tp=tp,
                           sequences=max(1, math.ceil(job.samples_per_step * share / replicas)),
                           prompt_len=job.prompt_len, response_len=job.response_len,
                           response_len_max=job.response_len_max, samples_per_prompt=job.samples_per_prompt,
                           engine=ROLLOUT_ENGINES[engine], resident_bytes=per_gpu + sharded / tp)
            if g.time_s < best_s:
                best, best_s = RolloutGroup(pool.name, tp, replicas), g.time_s
        except InputError as e:
            why = str(e)
        tp *= 2
    if best is None:
        raise InputError("rollout", f"no rollout replica fits {pool.name}: {why}")
    return best


def _candidates(cluster: Cluster, job: RlJob, engine: str, rollout_engine: str, limit_s: float):
    """(label, thunk making the RlPlan) for every candidate of the module docstring."""
    cache: dict = {}
    for pool in cluster.pools:
        def colocated(pool=pool):
            actor = _actor_plan(cluster, job, pool, pool.nodes, engine, limit_s, cache)
            gpus = actor.gpus_by_pool()[pool.name]
            states = training_states_per_gpu(job, evaluate(cluster, actor)).get(pool.name, 0.0)
            group = rollout_group(cluster, job, pool, gpus, rollout_engine, per_gpu=states)
            return RlPlan(job, Shape.COLOCATED, (group,), actor, rollout_engine)
        yield f"colocated on {pool.name}", colocated
    for pool in cluster.pools:
        for nodes in sorted({pool.nodes, pool.nodes // 2} - {0}):
            rest = [(p, p.num_gpus) for p in cluster.pools if p.name != pool.name]
            if nodes < pool.nodes:
                rest.append((pool, (pool.nodes - nodes) * pool.gpus_per_node))
            if not rest:
                continue
            for shape in (Shape.DISAGGREGATED, Shape.MIXED):
                def apart(pool=pool, nodes=nodes, rest=rest, shape=shape):
                    actor = _actor_plan(cluster, job, pool, nodes, engine, limit_s, cache)
                    total = sum(p.gpu.mem_bw_bytes_per_s * n for p, n in rest)
                    groups = tuple(rollout_group(cluster, job, p, n, rollout_engine,
                                                 _mixed_resident(job) if shape == Shape.MIXED else 0.0,
                                                 p.gpu.mem_bw_bytes_per_s * n / total) for p, n in rest)
                    return RlPlan(job, shape, groups, actor, rollout_engine)
                yield f"{shape.value}: actor on {nodes} node(s) of {pool.name}", apart


def _mixed_resident(job: RlJob) -> float:
    return 2.0 * (model_params(job.model) * job.reference + (model_params(job.reward_model) if job.reward_model else 0))


def search_rl(cluster: Cluster, job: RlJob, objective: str = "throughput", step_deadline_s: float | None = None,
              engine: str = "megatron", rollout_engine: str = "vllm",
              training_time_limit_s: float = TRAINING_TIME_LIMIT_S) -> RlSearchResult:
    """Every candidate evaluated by planner.rl.step.evaluate_rl, ranked by the objective; raises
    InfeasibleError when none runs (or none meets the deadline), with the reasons."""
    if objective not in OBJECTIVES:
        raise InputError("objective", f"RL jobs take {' or '.join(OBJECTIVES)}, got {objective!r}")
    found, rejected = [], []
    for label, make in _candidates(cluster, job, engine, rollout_engine, training_time_limit_s):
        try:
            plan = make()
            est = evaluate_rl(cluster, plan)
        except InputError as e:
            rejected.append(f"{label}: {e}")
            continue
        if not est.fits:
            rejected.append(f"{label}: {est.notes[-1]}")
            continue
        found.append(RlCandidate(plan, est))
    base_pool = best_gpu_pool(cluster)
    baseline = next((c for c in found if c.plan.shape == Shape.COLOCATED
                     and set(c.estimate.gpus_by_pool) == {base_pool.name}), None)
    ok = [c for c in found if step_deadline_s is None or c.estimate.step_time_s <= step_deadline_s]
    if not ok:
        why = "; ".join(rejected) or "no candidate"
        if found:
            fastest = min(c.estimate.step_time_s for c in found)
            raise InfeasibleError(f"no placement meets the step deadline of {step_deadline_s:g} s: the fastest takes "
                                  f"{fastest:,.1f} s; raise --step-deadline")
        raise InfeasibleError(f"no RL placement runs on {cluster.name}: {why}")
    ok.sort(key=lambda c: key(objective, c.estimate))
    return RlSearchResult(ok[0], tuple(ok), baseline, base_pool.name, tuple(rejected), objective, step_deadline_s)
