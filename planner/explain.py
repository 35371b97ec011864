"""Plain-language explanations of what limits a plan."""
from __future__ import annotations

from planner.types import Estimate, Plan

_TERM_NAMES = {
    "pipeline_bubble": "pipeline bubble (stages idle while the pipeline fills and drains)",
    "tensor_parallel_comm": "tensor-parallel all-reduces",
    "context_parallel_comm": "context-parallel ring (key/value chunks attention does not hide)",
    "expert_parallel_comm": "expert-parallel all-to-alls (token dispatch and combine)",
    "pipeline_p2p_comm": "activation transfers between stages",
    "data_parallel_comm": "data-parallel gradient synchronisation",
    "zero_comm": "ZeRO weight gathers and gradient scatters",
    "optimizer_step": "optimizer step and weight all-gather",
}


def layer_range(start: int, end: int) -> str:
    """Layers [start, end) (a stage's end-exclusive pair, as plan files hold it) as people read them: first and
    last, both included, counted from 0: "layers 0–15", "layer 7". The CLI and the app write them this way."""
    return f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"


def bottleneck(plan: Plan, est: Estimate, critical: tuple[int, int]) -> str:
    """One sentence naming what binds: memory, the slowest stage, or the largest overhead."""
    if not est.fits:
        return f"memory: {est.oom}"
    i, r = critical
    rep = next(e for e in est.replicas if (e.stage, e.replica) == critical)
    slowest = (f"stage {i} ({layer_range(plan.stages[i].layer_start, plan.stages[i].layer_end)}) on "
               f"{rep.gpu} tp {rep.tp}, replica {r}, is the slowest pipeline worker")
    overheads = {k: v.exposed_s for k, v in est.breakdown.items() if k != "compute"}
    worst = max(overheads, key=overheads.get)
    share = overheads[worst] / est.iteration_time_s
    if share >= 0.15:
        return f"{_TERM_NAMES[worst]}: {share:.0%} of the iteration; {slowest}"
    compute_share = est.breakdown["compute"].exposed_s / est.iteration_time_s
    return f"compute-bound ({compute_share:.0%} of the iteration computing): {slowest}"
