"""Which plan an export writes: the plan itself where the target engine runs it, else that engine's best plan.

Each export target (planner.export.TARGETS) belongs to one engine profile (planner.engines: the
profile whose `exports` names it). `resolve`:

  1. the engine runs the plan (`engine.violations(plan)` empty, and the target's writer can state
     it: `writer_limits`) -> the plan is exported exactly;
  2. otherwise the search is run for that engine (planner.search.search with Job(..., engine=name,
     training=the plan's job): it searches only the engine's space, for the same job kind and adapter
     rank, and returns only plans that fit by planner.cost.evaluate; offload is searched as `search`
     does, where GPU memory limits the plan) and its best plan that the writer can state is exported,
     with its estimate and the reasons the original could not run;
  3. the search finds nothing -> InputError naming what blocks the plan and why no other plan fits
     (a LoRA job for an engine without LoRA is refused here: it is never re-planned as pretraining).

No plan is coerced into another shape here: every alternative is a plan the search itself found
and the cost model scored (tests/test_engine_exports.py holds that each fits by `evaluate`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from planner.engines import ENGINES, Engine
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
    """(plan to export, reasons the original cannot run, the alternative or None, its estimate or None)."""
    engine = engine_for(target)
    reasons = engine.violations(plan) + writer_limits(plan, cluster)
    if not reasons:
        return plan, (), None, None
    alternative, estimate = best_plan_for(engine, plan, cluster, writer_limits, reasons, time_limit_s)
    return alternative, tuple(reasons), alternative, estimate


def best_plan_for(engine: Engine, plan: Plan, cluster: Cluster, writer_limits, reasons: list[str],
                  time_limit_s: float) -> tuple[Plan, Estimate]:
    """The search's best plan for `engine` on `cluster` (same model, batch and sequence length) that the
    target's writer can state; InputError when there is none."""
    from planner.search import SearchOptions, search
    precision = plan.precision if plan.precision in engine.space.precisions else None
    job = Job(plan.model, plan.global_batch, plan.seq_len, precision, engine=engine.name, training=plan.training)
    blocked = "; ".join(reasons)
    try:
        result = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=time_limit_s))
    except (InfeasibleError, InputError) as e:
        raise InputError("plan", f"{engine.title} cannot run this plan ({blocked}), and the search found no plan "
                                 f"{engine.title} runs on this cluster: {getattr(e, 'message', e)}") from None
    unwritable = []
    for scored in (*result.plans, *result.pareto):
        limits = engine.violations(scored.plan) + writer_limits(scored.plan, cluster)
        if not limits:
            return scored.plan, scored.estimate
        unwritable += limits
    raise InputError("plan", f"{engine.title} cannot run this plan ({blocked}), and the plans the search found for "
                             f"it cannot be written either ({'; '.join(dict.fromkeys(unwritable))})")


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
    from planner.chunks import pipeline_order
    return pipeline_order(plan)


def uniform_tp_dp(plan: Plan) -> tuple[int, int]:
    """(tp, dp) of a plan with one tp and one replica count for every stage (what one-mesh engines run)."""
    tp, dp = plan.stages[0].replicas[0].tp, len(plan.stages[0].replicas)
    assert all(r.tp == tp for s in plan.stages for r in s.replicas), "one-mesh export of a plan with several tp"
    assert all(len(s.replicas) == dp for s in plan.stages), "one-mesh export of a plan with uneven replicas"
    return tp, dp
