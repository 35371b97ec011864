"""An RL estimate for people and for `--json`: figures, phases, where each role runs."""
from __future__ import annotations

from planner.rl.roles import RlPlan, Shape
from planner.rl.step import RlEstimate
from planner.search.explain import describe_plan


def estimate_to_dict(est: RlEstimate) -> dict:
    return {
        "step_time_s": est.step_time_s, "samples_per_s": est.samples_per_s, "tokens_per_s": est.tokens_per_s,
        "response_tokens_per_s": est.response_tokens_per_s, "dollars_per_step": est.dollars_per_step,
        "cost_per_hour_usd": est.cost_per_hour_usd, "num_gpus": est.num_gpus, "gpus_by_pool": dict(est.gpus_by_pool),
        "phase_sum_s": est.phase_sum_s, "longest_phase_s": est.longest_phase_s,
        "phases": [{"role": p.role, "name": p.name, "where": p.where, "start_s": p.start_s,
                    "duration_s": p.duration_s} for p in est.phases],
        "rollout": [{"pool": g.pool, "tp": g.tp, "replicas": g.replicas, "sequences_per_replica": gen.sequences,
                     "time_s": gen.time_s, "prefill_s": gen.prefill_s, "decode_s": gen.decode_s,
                     "batch": gen.batch, "decode_steps": gen.steps, "kv_capacity_tokens": gen.kv_capacity_tokens}
                    for g, gen in est.generation],
        "actor_iteration_s": est.actor.iteration_time_s, "actor_peak_memory_gib": est.actor.peak_memory_bytes / 2**30,
        "fits": est.fits, "notes": list(est.notes),
    }


def roles_text(plan: RlPlan) -> list[str]:
    side = "the rollout GPUs" if plan.shape == Shape.MIXED else "the training GPUs"
    lines = ["    rollout:   " + ", ".join(f"{g.replicas}x {g.pool} tp{g.tp}" for g in plan.rollout)
             + f" ({plan.rollout_engine})",
             f"    actor:     {describe_plan(plan.actor)}"]
    if plan.job.reference:
        lines.append(f"    reference: forward on {side}")
    if plan.job.critic:
        lines.append("    critic:    the actor's plan, on its GPUs")
    if plan.job.reward_model is not None:
        lines.append(f"    reward:    {plan.job.reward_model.id} forward on {side}")
    return lines


def estimate_text(plan: RlPlan, est: RlEstimate) -> list[str]:
    job = plan.job
    lines = [f"{plan.shape.value} ({job.mode.value}): step {est.step_time_s:,.1f} s, "
             f"{est.samples_per_s:,.1f} samples/s, "
             f"{est.tokens_per_s:,.0f} tokens/s ({est.response_tokens_per_s:,.0f} generated), "
             f"${est.dollars_per_step:,.2f} per step on {est.num_gpus} GPUs "
             f"({', '.join(f'{n} {p}' for p, n in est.gpus_by_pool.items())}, ${est.cost_per_hour_usd:,.2f}/h)"]
    lines += roles_text(plan)
    lines.append("    phases:    " + "; ".join(f"{p.name} {p.duration_s:,.1f} s @{p.start_s:,.1f}" for p in est.phases))
    return lines
