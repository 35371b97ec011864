"""Which plan an export writes: the plan itself where the target engine runs it, else that engine's best plan.

Each export target (planner.export.TARGETS) belongs to one engine profile (planner.engines: the
profile whose `exports` names it). `resolve`:

  1. the engine runs the plan (`engine.violations(plan)` empty, and the target's writer can state
     it: `writer_limits`) -> the plan is exported exactly;
  2. otherwise the search is run for that engine (planner.search.search with Job(..., engine=name,
     training=the plan's job): it searches only the engine's space, for the same job kind and adapter
     rank, and returns only plans that fit by planner.cost.evaluate; offload is searched as `search`
     does, where GPU memory limits the plan) and its best plan that the writer can state is exported,
     with its estimate and the reasons the original could not run. A plan with context parallelism
     keeps its degree where the engine has it and a plan of that degree fits (else every degree the
     search tries); an engine without it is searched with context_parallel 1 (the search refuses
     more: planner.search.search._check_job_kind), and the export says so (`search_notes`).
     A plan with expert parallelism is searched from its degree (the search tries every degree the
     engine runs); an engine without it gets expert_parallel 1 (Engine.violations refuses more), and
     the export says so;
  3. the search finds nothing -> InputError naming what blocks the plan and why no other plan fits
     (a LoRA job for an engine without LoRA is refused here: it is never re-planned as pretraining).

No plan is coerced into another shape here: every alternative is a plan the search itself found
and the cost model scored (tests/test_engine_exports.py holds that each fits by `evaluate`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from planner.chunks import pipeline_order
from planner.engines import ENGINES, Engine
from planner.placement import place
from planner.search import SearchOptions, search
from planner.types import Cluster, Estimate, InfeasibleError, InputError, Job, JobKind, Plan

SEARCH_TIME_LIMIT_S = 10.0   # CPU seconds the search for an alternative plan may take (export --time-limit)


@dataclass(frozen=True)
class ExportResult:
    engine: str                        # the export target ("megatron", "flagscale", "torchrun", ...)
    files: dict[str, str]              # file name -> text
    warnings: tuple[str, ...]          # why the plan could not be exported as it is, and notes on the files
    exported_plan: Plan                # the plan the files describe
    closest_plan: Plan | None          # the engine's best plan (found by the search) when it cannot run the plan
    closest_estimate: Estimate | None  # its estimate by planner.cost.evaluate, as the engine runs it
    reasons: tuple[str, ...] = ()      # why the engine cannot run the original plan (empty: exported exactly)
    profile: str = ""                  # the engine profile (planner.engines) the files are for
    notes: tuple[str, ...] = field(default=())   # what the files leave to the user (model code, data paths)


def engine_for(target: str) -> Engine:
    """The profile whose `exports` names `target`."""
    owners = [e for e in ENGINES.values() if target in e.exports]
    if not owners:
        raise InputError("--to", f"unknown export target {target!r}; choose one of {sorted(targets())}")
    return owners[0]


def targets() -> list[str]:
    """Every export target, in the order the profiles list them."""
    out: list[str] = []
    for e in ENGINES.values():
        out += [t for t in e.exports if t not in out]
    return out


def resolve(plan: Plan, cluster: Cluster, target: str, writer_limits: Callable[[Plan, Cluster], list[str]],
            time_limit_s: float = SEARCH_TIME_LIMIT_S):
    """(plan to export, reasons the original cannot run, the alternative or None, its estimate or None,
    notes on how the alternative was searched)."""
    engine = engine_for(target)
    reasons = engine.violations(plan) + writer_limits(plan, cluster)
    if not reasons:
        return plan, (), None, None, ()
    alternative, estimate, search_notes = best_plan_for(engine, plan, cluster, writer_limits, reasons, time_limit_s)
    return alternative, tuple(reasons), alternative, estimate, search_notes


def best_plan_for(engine: Engine, plan: Plan, cluster: Cluster, writer_limits, reasons: list[str],
                  time_limit_s: float) -> tuple[Plan, Estimate, tuple[str, ...]]:
    """The search's best plan for `engine` on `cluster` (same model, batch and sequence length) that the
    target's writer can state, and notes on how it was searched; InputError when there is none."""
    blocked = "; ".join(reasons)
    job, notes = search_job(engine, plan)
    try:
        result, more = _search_keeping_cp(cluster, job, time_limit_s)
    except (InfeasibleError, InputError) as e:
        searched = "".join(f" ({n})" for n in notes)
        raise InputError("plan", f"{engine.title} cannot run this plan ({blocked}), and the search found no plan "
                                 f"{engine.title} runs on this cluster{searched}: {getattr(e, 'message', e)}") from None
    notes += more
    unwritable = []
    for scored in (*result.plans, *result.pareto):
        limits = engine.violations(scored.plan) + writer_limits(scored.plan, cluster)
        if not limits:
            return scored.plan, scored.estimate, tuple(notes)
        unwritable += limits
    raise InputError("plan", f"{engine.title} cannot run this plan ({blocked}), and the plans the search found for "
                             f"it cannot be written either ({'; '.join(dict.fromkeys(unwritable))})")


def search_job(engine: Engine, plan: Plan) -> tuple[Job, list[str]]:
    """The job the search for `engine`'s own plan solves, and what it changed: the plan's model, batch,
    sequence, job kind and precision (where the engine has it), context- and expert-parallel degrees, 1 where
    the engine has no such parallelism (the search refuses more for it: search._check_job_kind)."""
    precision = plan.precision if plan.precision in engine.space.precisions else None
    cp, notes = plan.context_parallel, []
    if cp > 1 and not engine.space.context_parallel:
        notes.append(f"{engine.title} has no context parallelism, so its own plan was searched with "
                     f"context_parallel 1")
        cp = 1
    ep = plan.expert_parallel
    if ep > 1 and not engine.space.expert_parallel:
        notes.append(f"{engine.title} has no expert parallelism, so its own plan was searched with expert_parallel 1 "
                     f"(every GPU holds all {plan.model.experts} experts of its layers)")
        ep = 1
    return Job(plan.model, plan.global_batch, plan.seq_len, precision, engine=engine.name, training=plan.training,
               context_parallel=cp, expert_parallel=ep), notes


def _search_keeping_cp(cluster: Cluster, job: Job, time_limit_s: float):
    """(the search's result, notes): with context parallelism, the job's degree first; where no plan of that
    degree fits, every degree the search tries (planner.search.search context_parallel="auto")."""
    options = SearchOptions(time_limit_s=time_limit_s)
    if job.context_parallel == 1:
        return search(cluster, job, baselines=False, options=options), []
    try:
        return search(cluster, job, baselines=False, options=options, context_parallel="fixed"), []
    except InfeasibleError as e:
        note = (f"no plan with context_parallel {job.context_parallel} fits ({e.message}); the search tried every "
                f"context-parallel degree instead")
        return search(cluster, job, baselines=False, options=options), [note]


def switched(plan: Plan) -> tuple[str, ...]:
    """The overlap switches the plan sets where its engine offers them (planner.engines.base.PlanSwitch): what the
    export writes; a switch left to the engine's default is not written."""
    engine = ENGINES[plan.engine]
    return tuple(sw.name for sw in engine.space.switches
                 if getattr(plan, sw.name) is not None and sw.applies(plan.num_stages, plan.zero_stage))


def no_limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []


CHECKPOINT_VARIABLE = "CHECKPOINT"    # what launch.sh requires for a job that starts from a checkpoint


def from_checkpoint(plan: Plan) -> bool:
    """Full fine-tuning, LoRA and QLoRA start from a trained model: the launch needs its checkpoint."""
    return plan.training.kind != JobKind.PRETRAIN


def checkpoint_preamble(what: str) -> list[str]:
    """launch.sh lines that require CHECKPOINT and export it (engines that read it in Python see it too)."""
    return [f'export {CHECKPOINT_VARIABLE}="${{{CHECKPOINT_VARIABLE}:?set {CHECKPOINT_VARIABLE} to {what}}}"']


def layer_segments(plan: Plan) -> list[tuple[int, int, int, int]]:
    """(stage, chunk, first layer, end layer) in model order (planner.chunks convention)."""
    return pipeline_order(plan)


def uniform_tp_dp(plan: Plan) -> tuple[int, int]:
    """(tp, dp) of a plan with one tp and one replica count for every stage (what one-mesh engines run)."""
    tp, dp = plan.stages[0].replicas[0].tp, len(plan.stages[0].replicas)
    assert all(r.tp == tp for s in plan.stages for r in s.replicas), "one-mesh export of a plan with several tp"
    assert all(len(s.replicas) == dp for s in plan.stages), "one-mesh export of a plan with uneven replicas"
    return tp, dp


def host_name(pool: str, node: int) -> str:
    """How launch.sh and hostfile name a node: <pool>-<node>."""
    return f"{pool}-{node}"


def replica_gpus(cluster: Cluster, plan: Plan) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """(stage, replica) -> its tp x cp GPUs as (host, GPU index), in the order of its slot's GPUs
    (planner.placement). A replica wider than a node holds whole nodes from its slot's node on:
    `place` puts replicas in order of falling width, so every such replica is placed before any
    narrower one and takes the first wholly free nodes of its pool, the ones after those the wider
    replicas before it took (placement._whole_nodes), i.e. consecutive nodes."""
    placement = place(cluster, plan)
    out = {}
    for (i, r), slot in placement.slots.items():        # slot.tp is the replica's width, tp x cp
        per_node = cluster.pool(slot.pool).gpus_per_node
        if slot.tp <= per_node:
            out[(i, r)] = [(host_name(slot.pool, slot.node), g) for g in slot.gpus]
            continue
        nodes = range(slot.node, slot.node + slot.tp // per_node)
        assert all(placement.gpus_used_per_node.get((slot.pool, n)) == per_node for n in nodes), \
            f"replica ({i}, {r}) is not on whole consecutive nodes {list(nodes)} of pool {slot.pool!r}"
        out[(i, r)] = [(host_name(slot.pool, n), g) for n in nodes for g in range(per_node)]
    return out


def one_mesh_ranks(cluster: Cluster, plan: Plan) -> list[tuple[str, int]]:
    """(host, GPU index) of each global rank, in rank order, for an engine whose ranks run tp fastest,
    then cp, then dp, then pp (Megatron-LM's order 'tp-cp-ep-dp-pp' without experts; torchtitan's mesh
    pp x dp_replicate x dp_shard x cp x tp). With w = tp x cp GPUs a replica:
        rank = ((stage x dp + replica) x cp + cp rank) x tp + tp rank = (stage x dp + replica) x w + k,
    k = cp rank x tp + tp rank the replica's k-th GPU (replica_gpus), so every tp group is tp
    consecutive GPUs of one node (tp divides a node's GPUs: placement.check_fits)."""
    tp, dp = uniform_tp_dp(plan)
    width = tp * plan.context_parallel
    by_rank = {}
    for (stage, replica), gpus in replica_gpus(cluster, plan).items():
        assert len(gpus) == width, f"replica ({stage}, {replica}) holds {len(gpus)} GPUs, not tp x cp = {width}"
        for k, gpu in enumerate(gpus):
            by_rank[(stage * dp + replica) * width + k] = gpu
    assert sorted(by_rank) == list(range(plan.num_gpus)), "the ranks must cover the plan's GPUs once"
    assert len(set(by_rank.values())) == plan.num_gpus, "two ranks on one GPU"
    return [by_rank[r] for r in range(plan.num_gpus)]
