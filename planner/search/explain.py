"""Why a plan won, what the next one gives up, why pools stayed idle, and what is short when nothing fits."""
from __future__ import annotations

import math

from planner import spot
from planner.engines import ENGINES
from planner.flops import model_params
from planner.memory import FRAMEWORK_OVERHEAD_BYTES, state_bytes_per_param
from planner.report import format_duration
from planner.search.objective import describe
from planner.search.space import most_usable_gpus
from planner.training import describe as describe_training, model_states
from planner.types import GIB, PRETRAIN, Cluster, Estimate, Job, Objective, Plan


def describe_plan(plan: Plan) -> str:
    """One line: stages with their layers and replicas, then the knobs."""
    parts = []
    for s in plan.stages:
        groups: dict[tuple[str, int], int] = {}
        for r in s.replicas:
            groups[(r.pool, r.tp)] = groups.get((r.pool, r.tp), 0) + 1
        reps = " + ".join(f"{n}x {pool} tp{tp}" for (pool, tp), n in groups.items())
        parts.append(f"L{s.layer_start}–{s.layer_end - 1}: {reps}")     # first and last layer, as layer_range
    knobs = [f"mb {plan.micro_batch}", f"ZeRO-{plan.zero_stage}", f"recompute {plan.recompute.value}"]
    if plan.interleave > 1:
        knobs.append(f"interleave {plan.interleave}")
    if plan.sequence_parallel:
        knobs.append("SP")
    if plan.tp_comm_overlap:
        knobs.append("TP-comm overlap")
    if plan.overlap_param_gather:
        knobs.append("param-gather overlap")
    if plan.overlap_grad_reduce is False or plan.prefetch is False:
        knobs.append("no " + " or ".join(k for k, v in (("grad-reduce overlap", plan.overlap_grad_reduce),
                                                        ("prefetch", plan.prefetch)) if v is False))
    if plan.hybrid_shard:
        knobs.append(f"hybrid shard {plan.hybrid_shard}")
    if plan.expert_parallel > 1:
        knobs.append(f"EP {plan.expert_parallel}")
    if plan.expert_tensor_parallel:
        knobs.append(f"expert TP {plan.expert_tensor_parallel}")
    if plan.context_parallel > 1:
        knobs.append(f"CP {plan.context_parallel} (each replica tp x {plan.context_parallel} GPUs)")
    if plan.offload.value != "none":
        knobs.append(f"offload {plan.offload.value}")
    job = "" if plan.training == PRETRAIN else f", {describe_training(plan.training)}"
    stages = f"{plan.num_stages} stage" + ("s" if plan.num_stages != 1 else "")
    return f"{stages} [{' | '.join(parts)}], {', '.join(knobs)}, {plan.precision.value}{job}"


def _shape(plan: Plan) -> dict[str, object]:
    tps = sorted({r.tp for s in plan.stages for r in s.replicas})
    return {"stages": plan.num_stages, "GPUs": plan.num_gpus, "pools": ", ".join(sorted(plan.gpus_by_pool())),
            "tp": "/".join(map(str, tps)), "micro-batch": plan.micro_batch, "ZeRO": plan.zero_stage,
            "recompute": plan.recompute.value, "interleave": plan.interleave, "offload": plan.offload.value,
            "context parallel": plan.context_parallel, "expert parallel": plan.expert_parallel,
            "hybrid shard": plan.hybrid_shard or "none", "expert TP": plan.expert_tensor_parallel or "tp"}


def differences(a: Plan, b: Plan) -> str:
    """How plan b differs from plan a, in a few words."""
    sa, sb = _shape(a), _shape(b)
    diffs = [f"{k} {sb[k]} instead of {sa[k]}" for k in sa if sa[k] != sb[k]]
    if not diffs:
        diffs = ["the same shape with a different layer split or sample shares"]
    return "; ".join(diffs)


def _loss(objective: Objective, best: Estimate, other: Estimate) -> str:
    """On the figures the ranking uses: expected ones for plans on spot pools (planner.spot)."""
    if objective == Objective.THROUGHPUT:
        return f"{1 - spot.tokens_per_s(other) / spot.tokens_per_s(best):.1%} fewer tokens/s"
    if objective == Objective.ENERGY:
        return f"{other.energy_per_million_tokens_kwh / best.energy_per_million_tokens_kwh - 1:.1%} more energy per token"
    cost, other_cost = spot.cost_per_million_tokens_usd(best), spot.cost_per_million_tokens_usd(other)
    if cost <= 0:    # free GPUs (a price of 0)
        return "the same cost per token (free GPUs)" if other_cost <= 0 else f"${other_cost:.3f} more per million tokens"
    return f"{other_cost / cost - 1:.1%} more per token"


def explain_ranking(objective: Objective, top: list[tuple[Plan, Estimate]],
                    ranked: list[tuple[Plan, Estimate]] | None) -> list[str]:
    """For each plan: its bottleneck and what the next plan in the ranking gives up against it
    (`ranked` None: the bottleneck alone, the ranking after `top` not known)."""
    out = []
    for k, (plan, est) in enumerate(top):
        text = f"Bottleneck: {est.bottleneck}."
        if ranked is not None and k + 1 < len(ranked):
            nxt_plan, nxt = ranked[k + 1]
            text += (f" The next plan ({differences(plan, nxt_plan)}) gives up {_loss(objective, est, nxt)}"
                     f" ({nxt.bottleneck}).")
        elif ranked is not None:
            text += " No other plan that fits was found among those re-scored."
        out.append(text)
    return out


def idle_reasons(cluster: Cluster, objective: Objective, best, considered) -> dict[str, str]:
    """Pool name -> why the best plan leaves it idle."""
    used = best.plan.gpus_by_pool()
    best_key = _fast_key_of(objective, best.estimate)
    out = {}
    for pool in cluster.pools:
        if pool.name in used:
            if used[pool.name] < pool.num_gpus:
                plan = best.plan
                most = most_usable_gpus(pool, plan.model, plan.global_batch, plan.engine, plan.context_parallel)
                left = pool.num_gpus - used[pool.name]
                idle = f"{left:,} of its {pool.num_gpus:,} GPUs {'stays' if left == 1 else 'stay'} idle: "
                out[pool.name] = idle + (
                    f"a global batch of {plan.global_batch:,} sequences gives a stage at most {plan.global_batch:,} "
                    f"replicas, so no plan uses more than {most:,} of them, and fewer were faster on "
                    f"{describe(objective)}" if pool.num_gpus > most else
                    f"the layout that fits the stages to this pool's nodes leaves them over, or using "
                    f"them does not pay for itself on {describe(objective)}")
            continue
        if pool.name in considered.precision_excluded:
            out[pool.name] = considered.precision_excluded[pool.name]
        elif (pool.name not in considered.fits_with_pool and pool.name in considered.scored_with_pool
              and considered.bound_with_pool.get(pool.name, math.inf) < best_key):
            out[pool.name] = (f"no plan using {pool.gpu.id} fits in memory ({pool.gpu.mem_bytes / GIB:.0f} GiB per GPU) "
                              f"with the model's layers as the search split them")
        elif pool.name in considered.best_with_pool:
            other = considered.best_with_pool[pool.name]
            if best_key > 0 and other >= best_key:
                worse = f"{other / best_key - 1:.0%} worse (by the search's fast estimate)"
            elif best_key > 0:       # a better fast estimate that the cost model did not confirm
                worse = "no better by the cost model"
            else:                    # a free plan (price 0) has key 0
                worse = "worse" if other > 0 else "no better"
            rate = (f"{pool.gpu.power_w:.0f} W" if objective == Objective.ENERGY
                    else f"${pool.price_per_gpu_hour_usd:.2f}/GPU-hour")
            if pool.spot and objective != Objective.ENERGY:
                rate += f", spot, held {pool.availability:.0%} of the time: a plan on it waits while it is reclaimed"
            out[pool.name] = (f"the best plan found that uses it is {worse} on {describe(objective)}: its GPUs "
                              f"do not pay for themselves ({pool.gpu.id}, {rate})")
        else:
            out[pool.name] = (f"by the search's lower bounds (each GPU at its best rate, the pipeline's fill and "
                              f"drain, what fits in memory), no plan using it beats the chosen one on "
                              f"{describe(objective)}")
    return out


def _fast_key_of(objective: Objective, est: Estimate) -> float:
    """As the search's keeper keys candidates: on spot pools, expected wall time and dollars (planner.spot)."""
    time_s, price = est.iteration_time_s, est.cost_per_hour_usd
    if objective != Objective.ENERGY:
        time_s, price = time_s / est.availability, spot.cost_per_wall_hour_usd(est)
    if objective == Objective.THROUGHPUT:
        return time_s
    return time_s * price


def infeasible_message(cluster: Cluster, job: Job) -> str:
    """What is short, and what would help."""
    params = model_params(job.model)
    per_param = sum(state_bytes_per_param(0, 1, model_states(job.precision, job.training, job.model, job.offload)))
    states = params * per_param
    node_bytes = max(p.gpus_per_node * p.gpu.mem_bytes for p in cluster.pools)
    biggest = max(cluster.pools, key=lambda p: p.gpus_per_node * p.gpu.mem_bytes)
    total = sum(p.num_gpus * (p.gpu.mem_bytes - FRAMEWORK_OVERHEAD_BYTES) for p in cluster.pools)
    head = (f"no plan fits in memory: {job.model.id}'s weights, gradients and optimizer states take "
            f"{states / GIB:,.0f} GiB in all ({per_param:g} bytes × {params / 1e9:.1f} B parameters; ZeRO shards them "
            f"over replicas, it does not shrink them) before activations; "
            f"the largest pool ({biggest.name}) offers {biggest.gpus_per_node} × {biggest.gpu.mem_bytes / GIB:.0f} GiB "
            f"= {node_bytes / GIB:,.0f} GiB per node and the whole cluster {total / GIB:,.0f} GiB")
    if states > total:
        return head + (f" ({states / total:,.1f}× what it holds): the cluster is too small for this model; add GPUs "
                       f"or choose a smaller model{_lighter_jobs(job)}")
    return (head + f": try a shorter sequence (now {job.seq_len}) or smaller global batch, ZeRO-3 with more replicas, "
            f"more pipeline stages, or GPUs with more memory (the search already tried ZeRO 0-3, full recompute "
            f"and every pipeline depth its pools allow){_lighter_jobs(job)}")


def _lighter_jobs(job: Job) -> str:
    """What else could fit: CPU offload under an engine that has it, or an adapter job."""
    hints = []
    if not job.training.adapters:
        hints.append("--job-kind lora or qlora (frozen base weights: no gradients or optimizer states for them)")
    offloading = [e.name for e in ENGINES.values() if e.space.offloads]
    if job.offload.value == "none" and offloading and not job.training.adapters:
        hints.append(f"optimizer offload to CPU memory (--engine {' or '.join(offloading)})")
    return "; or " + "; or ".join(hints) if hints else ""


def format_tokens(tokens: float) -> str:
    """A token count for people: "300 B tokens", "1.2 T tokens", "450 M tokens", "12,000 tokens"."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            value = tokens / scale
            return f"{value:,.0f} {unit} tokens" if value >= 100 else f"{value:.3g} {unit} tokens"
    return f"{tokens:,.0f} tokens"


def deadline_message(job: Job, deadline_hours: float, plan: Plan, est: Estimate) -> str:
    hours = job.tokens_to_train / spot.tokens_per_s(est) / 3600
    waits = "" if est.expected_tokens_per_s is None else ", on average, waits for reclaimed spot GPUs counted"
    return (f"no plan trains {format_tokens(job.tokens_to_train)} within {deadline_hours:g} h: the fastest plan found "
            f"({spot.tokens_per_s(est):,.0f} tokens/s{waits} on {est.num_gpus} GPUs) needs {format_duration(hours * 3600)} "
            f"({hours:,.1f} h); allow {math.ceil(hours):,} h, train fewer tokens, or add GPUs")
