"""What an engine can express, and the closest plan it can run.

Megatron-LM, torchtitan and DeepSpeed build one device mesh: every pipeline stage has the same
tensor-parallel degree and the same number of data-parallel replicas, and every replica gets the
same share of the batch. hetplan plans may break each of these; `limits` names each break, and
`closest_plan` builds the nearest plan inside them: same stages and layer split, one tp degree,
d equal replicas per stage drawn from the pools the stage used.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from planner.cost import evaluate
from planner.placement import check_fits
from planner.types import Cluster, Estimate, InputError, Plan, Precision, Replica, Schedule, Stage


@dataclass(frozen=True)
class ExportResult:
    engine: str
    files: dict[str, str]              # file name -> text
    warnings: tuple[str, ...]          # what the engine cannot express, in plain words
    exported_plan: Plan                # the plan the files describe (the closest one when warned)
    closest_plan: Plan | None          # None when the engine runs the plan as it is
    closest_estimate: Estimate | None


@dataclass(frozen=True)
class Capabilities:
    uneven_tp: bool = False            # tp may differ between stages / replicas
    uneven_replicas: bool = False      # replica counts or sample shares may differ
    interleave: bool = True
    gpipe: bool = True
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    precisions: tuple[Precision, ...] = (Precision.BF16, Precision.FP16)   # first: the fallback


def limits(plan: Plan, caps: Capabilities, engine: str) -> list[str]:
    out = []
    tps = sorted({r.tp for s in plan.stages for r in s.replicas})
    if len(tps) > 1 and not caps.uneven_tp:
        out.append(f"{engine} uses one tensor-parallel degree for every stage; the plan uses {tps}")
    counts = [len(s.replicas) for s in plan.stages]
    if len(set(counts)) > 1 and not caps.uneven_replicas:
        out.append(f"{engine} gives every stage the same number of data-parallel replicas; the plan has {counts}")
    uneven = [i for i, s in enumerate(plan.stages) if len({r.samples for r in s.replicas}) > 1]
    if uneven and not caps.uneven_replicas:
        out.append(f"{engine} gives every replica the same share of the batch; stages {uneven} split it unevenly")
    for i, s in enumerate(plan.stages):
        pools = sorted({r.pool for r in s.replicas})
        if len(pools) > 1 and not caps.uneven_replicas:
            out.append(f"stage {i} mixes GPU pools {pools}: {engine} treats its replicas as equal, so the slowest "
                       f"sets the pace")
    if plan.interleave > 1 and not caps.interleave:
        out.append(f"{engine} has no interleaved pipeline schedule; the plan uses interleave {plan.interleave}")
    if plan.schedule == Schedule.GPIPE and not caps.gpipe:
        out.append(f"{engine} runs 1F1B, not GPipe")
    if plan.zero_stage not in caps.zero_stages:
        out.append(f"{engine} does not offer ZeRO stage {plan.zero_stage} here (it has {list(caps.zero_stages)})")
    if plan.precision not in caps.precisions:
        out.append(f"{engine} does not train in {plan.precision.value}; it offers {[p.value for p in caps.precisions]}")
    return out


def _stage_groups(stage: Stage, tp: int, cluster: Cluster) -> list[str]:
    """Pools of the tp-wide groups the stage's GPUs can form, in the order the stage named them."""
    per_pool = Counter()
    for r in stage.replicas:
        per_pool[r.pool] += r.tp
    out = []
    for pool, n in per_pool.items():
        if cluster.pool(pool).gpus_per_node % tp == 0:
            out += [pool] * (n // tp)
    return out


def _with_tp(plan: Plan, cluster: Cluster, tp: int, caps: Capabilities) -> Plan | None:
    groups = [_stage_groups(s, tp, cluster) for s in plan.stages]
    d = min(len(g) for g in groups)
    while d >= 1 and (plan.global_batch % d or (plan.global_batch // d) % plan.micro_batch):
        d -= 1
    if d < 1:
        return None
    stages = tuple(Stage(s.layer_start, s.layer_end, tuple(Replica(pool, tp, plan.global_batch // d)
                                                           for pool in g[:d]))
                   for s, g in zip(plan.stages, groups))
    candidate = replace(plan, stages=stages,
                        interleave=plan.interleave if caps.interleave else 1,
                        schedule=plan.schedule if (caps.gpipe or plan.schedule != Schedule.GPIPE) else Schedule.ONE_F_ONE_B,
                        zero_stage=_nearest_zero(plan.zero_stage, caps),
                        precision=plan.precision if plan.precision in caps.precisions else caps.precisions[0])
    try:
        check_fits(cluster, candidate)
    except InputError:
        return None
    return candidate


def _nearest_zero(stage: int, caps: Capabilities) -> int:
    lower = [z for z in caps.zero_stages if z <= stage]
    return max(lower) if lower else min(caps.zero_stages)


def closest_plan(plan: Plan, cluster: Cluster, caps: Capabilities) -> Plan | None:
    """The nearest plan within `caps`: the plan's most used tp degree first, then the others, largest first."""
    by_gpus = Counter()
    for s in plan.stages:
        for r in s.replicas:
            by_gpus[r.tp] += r.tp
    candidates = [tp for tp, _ in by_gpus.most_common()]
    candidates += [t for t in (8, 4, 2, 1) if t not in candidates]
    best = None
    for tp in candidates:
        cand = _with_tp(plan, cluster, tp, caps)
        if cand is not None and (best is None or cand.num_gpus > best.num_gpus):
            best = cand
    return best


def resolve(plan: Plan, cluster: Cluster, caps: Capabilities, engine: str):
    """(plan to export, warnings, closest plan or None, its estimate or None)."""
    warnings = limits(plan, caps, engine)
    if not warnings:
        return plan, [], None, None
    closest = closest_plan(plan, cluster, caps)
    if closest is None:
        raise InputError("plan", f"{engine} cannot run this plan ({'; '.join(warnings)}) and no plan with one "
                                 f"tensor-parallel degree and equal replicas fits its GPUs")
    return closest, warnings, closest, evaluate(cluster, closest)


def layer_segments(plan: Plan) -> list[tuple[int, int, int, int]]:
    """(stage, chunk, first layer, end layer) in model order (planner.chunks convention)."""
    from planner.chunks import pipeline_order
    return pipeline_order(plan)
