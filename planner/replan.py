"""Re-planning when the cluster changes: the best plan on the new cluster, what moves from the
current plan, what the switch costs, and whether it pays off over the tokens still to train.

The switch (Sailor, SOSP'25, section 5, and checkpoint-restart practice): every GPU of the current
plan writes its shard of the model state (weights, gradients' fp32 copies and optimizer states,
planner.training.ModelStates) to storage over its node's network, the new plan's GPUs read theirs
back over theirs (resharded: each reads what its new layout needs, the same bytes in all), and the
job restarts (process launch, communicator set-up, data loader): RESTART_S, an assumption. Where the
current plan cannot run on the new cluster, its state is written from the old cluster's nodes as
they were, and switching is not a choice.

Spot GPUs reclaimed are a new cluster without them (the pool gone, or fewer nodes in it); spot GPUs
arriving are a new cluster with a spot pool (examples/replan/lab-mix-spot*.yaml). Plans on spot pools
are compared by their expected tokens/s, waits for reclaimed pools counted (planner.spot), as the
search ranks them.
"""
from __future__ import annotations

from dataclasses import dataclass

from catalog.formats import check_plan_against_cluster
from planner.cost import CostOptions, evaluate
from planner.engines import ENGINES, REAL, RUNTIME
from planner.explain import layer_range
from planner.flops import model_params
from planner.memory import plan_states
from planner.report import format_duration
from planner.search import SearchOptions, search
from planner.search.explain import format_tokens
from planner.spot import tokens_per_s
from planner.types import Cluster, Estimate, InputError, Job, Objective, Plan

# Launching the processes, building the communicators and warming the data loader again, seconds.
# An assumption (Megatron-LM and torchtitan restarts take minutes at scale); no measurement in
# ../shared/reference sets it.
RESTART_S = 120.0


@dataclass(frozen=True)
class Switch:
    seconds: float
    dollars: float
    moves: tuple[str, ...]
    checkpoint_bytes: float


@dataclass(frozen=True)
class Replan:
    plan: Plan
    estimate: Estimate
    current: Estimate | None         # the current plan on the new cluster; None when it cannot run there
    why_not_current: str
    switch: Switch
    worth_switching: bool
    reason: str


def job_of(plan: Plan, tokens_to_train: float | None) -> Job:
    """The job a plan trains, with the settings it holds (offload, context and expert parallelism)."""
    return Job(model=plan.model, global_batch=plan.global_batch, seq_len=plan.seq_len, precision=plan.precision,
               tokens_to_train=tokens_to_train, engine=plan.engine, tf32=plan.tf32, training=plan.training,
               offload=plan.offload, context_parallel=plan.context_parallel, expert_parallel=plan.expert_parallel)


def default_engines(current: Plan) -> tuple[str, ...]:
    """The engines a replan searches by default: a plan for a real engine stays on it (its checkpoint is
    in that engine's format, and the job is launched by it); a plan for hetplan's runtime is planned
    again for the best of the real engines (planner.engines.REAL), as `plan` does by default."""
    return REAL if current.engine == RUNTIME else (current.engine,)


def checkpoint_bytes(plan: Plan) -> float:
    """The model state a checkpoint holds: every parameter's weights, fp32 master copy and optimizer
    moments (gradients are not saved), as the plan's job kind keeps them."""
    states = plan_states(plan)
    return model_params(plan.model) * (states.weight_bytes + states.optimizer_bytes + states.host_bytes
                                       - states.host_weight_bytes)


def _io_bw(cluster: Cluster, plan: Plan) -> float:
    """Bytes/s the plan's nodes move to or from storage together: each node's network, or, where
    the cluster's network names its storage, the bottleneck of the paths there
    (planner.types.NetworkGraph.storage_bw)."""
    nodes = {name: -(-gpus // cluster.pool(name).gpus_per_node) for name, gpus in plan.gpus_by_pool().items()}
    if cluster.network is not None and cluster.network.storage is not None:
        return cluster.network.storage_bw(nodes)
    return sum(n * cluster.pool(name).inter_node_bw_bytes_per_s for name, n in nodes.items())


def moves(old: Plan, new: Plan) -> tuple[str, ...]:
    """What changes between two plans, in words: GPUs per pool, stages and their layers, replicas."""
    out = [] if old.engine == new.engine else [f"engine: {ENGINES[old.engine].title} -> {ENGINES[new.engine].title}"]
    before, after = old.gpus_by_pool(), new.gpus_by_pool()
    for name in sorted(set(before) | set(after)):
        if before.get(name, 0) != after.get(name, 0):
            out.append(f"pool {name}: {before.get(name, 0)} -> {after.get(name, 0)} GPUs")
    if old.num_stages != new.num_stages:
        out.append(f"pipeline: {old.num_stages} -> {new.num_stages} stages")
    for i, stage in enumerate(new.stages):
        layers = layer_range(stage.layer_start, stage.layer_end)
        if i >= old.num_stages:
            out.append(f"stage {i}: new, {layers}, {_replicas(stage)}")
            continue
        was = old.stages[i]
        if (was.layer_start, was.layer_end) != (stage.layer_start, stage.layer_end):
            out.append(f"stage {i}: {layer_range(was.layer_start, was.layer_end)} -> "
                       f"{layer_range(stage.layer_start, stage.layer_end)}")
        if _replicas(was) != _replicas(stage):
            out.append(f"stage {i}: {_replicas(was)} -> {_replicas(stage)}")
    knobs = [(k, getattr(old, k), getattr(new, k)) for k in ("micro_batch", "zero_stage", "interleave",
                                                             "context_parallel", "expert_parallel")]
    out += [f"{k}: {a} -> {b}" for k, a, b in knobs if a != b]
    if old.recompute != new.recompute:
        out.append(f"recompute: {old.recompute.value} -> {new.recompute.value}")
    if old.offload != new.offload:
        out.append(f"offload: {old.offload.value} -> {new.offload.value}")
    return tuple(out) or ("nothing: the best plan on the new cluster is the current one",)


def _replicas(stage) -> str:
    groups: dict[tuple[str, int], int] = {}
    for r in stage.replicas:
        groups[(r.pool, r.tp)] = groups.get((r.pool, r.tp), 0) + 1
    return " + ".join(f"{n}x {pool} tp{tp}" for (pool, tp), n in groups.items())


def replan(new_cluster: Cluster, current: Plan, tokens_remaining: float | None = None,
           old_cluster: Cluster | None = None, objective: Objective = Objective.THROUGHPUT,
           options: SearchOptions = SearchOptions(), engines: tuple[str, ...] | None = None) -> Replan:
    """The best plan for `current`'s job on `new_cluster` and whether switching to it pays off over
    `tokens_remaining` (None: the switch is costed, its payoff not judged). `old_cluster`: where the
    current plan runs now (for the time to write its checkpoint; default: the new cluster).
    `engines`: plan for the best of these engines (planner.search.search); default
    `default_engines(current)`."""
    if tokens_remaining is not None and not tokens_remaining > 0:
        raise InputError("tokens_remaining", f"must be a positive number of tokens, got {tokens_remaining!r}")
    job = job_of(current, tokens_remaining)
    engines = default_engines(current) if engines is None else engines
    best = search(new_cluster, job, objective, options=options, baselines=False,
                  engines=engines if tuple(engines) != (current.engine,) else None).plans[0]
    now, why = _current_on(new_cluster, current, tokens_remaining)
    if now is not None and tokens_per_s(best.estimate) <= tokens_per_s(now) * (1 + 1e-9):
        best_plan, best_est = current, now          # the current plan is still the best: nothing to switch
    else:
        best_plan, best_est = best.plan, best.estimate
    switch = _switch(old_cluster or new_cluster, new_cluster, current, best_plan, best_est)
    worth, reason = _worth(now, why, best_est, switch, tokens_remaining, best_plan == current)
    return Replan(best_plan, best_est, now, why, switch, worth, reason)


def _current_on(cluster: Cluster, plan: Plan, tokens: float | None) -> tuple[Estimate | None, str]:
    try:
        check_plan_against_cluster(plan, cluster)
        est = evaluate(cluster, plan, tokens, CostOptions())
    except InputError as e:
        return None, str(e)
    if not est.fits:
        return None, f"it no longer fits: {est.oom}"
    return est, ""


def _switch(old_cluster: Cluster, new_cluster: Cluster, old: Plan, new: Plan, new_est: Estimate) -> Switch:
    if new == old:
        return Switch(0.0, 0.0, moves(old, new), 0.0)
    size = checkpoint_bytes(old)
    try:
        save_bw = _io_bw(old_cluster, old)
    except InputError:                   # the old plan's pools are gone from the cluster it is costed on
        save_bw = _io_bw(new_cluster, new)
    seconds = size / save_bw + size / _io_bw(new_cluster, new) + RESTART_S
    return Switch(seconds, seconds / 3600 * new_est.cost_per_hour_usd, moves(old, new), size)


def _worth(now: Estimate | None, why: str, new: Estimate, switch: Switch, tokens: float | None,
           same: bool) -> tuple[bool, str]:
    if same:
        return False, "the current plan is still the best on the new cluster"
    if now is None:
        return True, f"the current plan cannot run on the new cluster ({why})"
    if tokens is None:
        faster = tokens_per_s(new) / tokens_per_s(now) - 1
        return faster > 0, (f"the new plan is {faster:+.1%} in tokens/s; give the tokens still to train to weigh "
                            f"it against the {switch.seconds:,.0f} s switch")
    stay = tokens / tokens_per_s(now)
    move = switch.seconds + tokens / tokens_per_s(new)
    return move < stay, (f"{format_tokens(tokens)} take {format_duration(stay)} on the current plan and "
                         f"{format_duration(move)} with the switch ({format_duration(switch.seconds)}) and the new plan")
