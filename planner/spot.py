"""Expected figures of a plan that uses spot (preemptible) pools.

A spot pool (`spot: true` in the cluster file) is priced at its spot price and comes with an
`availability` a: the share of time the plan holds all the pool's GPUs it uses. The model is an
assumption, stated here with its limits:

- Synchronous training stops while any spot pool it uses is reclaimed, and resumes at the same
  speed when the GPUs are back (the plan waits; it does not re-plan).
- Pools are reclaimed independently, so the plan runs a share of the time

      A = prod_{spot pools p the plan uses} a_p

- While it runs it is exactly as fast as the cost model says, so

      expected tokens/s         = tokens/s x A
      expected time to train    = time to train / A
- On-demand GPUs are paid all the time, waits included; spot GPUs only while held (each spot pool
  is counted at the plan's A, the share of time the plan runs, a simplification: a pool still held
  while another is reclaimed is paid too, so this is a lower bound on the spot bill):

      expected $/h of wall time = on-demand $/h + A x spot $/h
      expected $ to train       = expected hours to train x expected $/h of wall time
      expected $ per token      = expected $/h of wall time / expected tokens per hour

Left out: the work lost at each reclaim since the last checkpoint and the time to restart (both
lengthen every wait), correlated reclaims across pools, energy while waiting (energy figures stay
nominal), and the alternative of not waiting but re-planning without the spot pools while they are
gone (`hetplan replan` plans each cluster on its own; comparing the two policies is out of scope).
"""
from __future__ import annotations

from planner.types import Cluster, Plan


def plan_availability(cluster: Cluster, plan: Plan) -> float:
    """The share of time the plan runs: the product of the availabilities of the spot pools it uses."""
    share = 1.0
    for name in plan.gpus_by_pool():
        pool = cluster.pool(name)
        if pool.spot:
            share *= pool.availability
    return share


def uses_spot(cluster: Cluster, plan: Plan) -> bool:
    return any(cluster.pool(name).spot for name in plan.gpus_by_pool())


def spot_figures(cluster: Cluster, plan: Plan, tokens_per_s: float, train_time_s: float | None) -> dict:
    """The Estimate's spot fields (availability, expected_*); 1.0 and None when the plan uses no spot pool."""
    if not uses_spot(cluster, plan):
        return {}
    a = plan_availability(cluster, plan)
    on_demand_per_h = spot_per_h = 0.0
    for name, n in plan.gpus_by_pool().items():
        pool = cluster.pool(name)
        if pool.spot:
            spot_per_h += n * pool.price_per_gpu_hour_usd
        else:
            on_demand_per_h += n * pool.price_per_gpu_hour_usd
    per_wall_hour = on_demand_per_h + a * spot_per_h
    tokens_per_s_expected = tokens_per_s * a
    time_expected = None if train_time_s is None else train_time_s / a
    return dict(availability=a, expected_tokens_per_s=tokens_per_s_expected,
                expected_cost_per_million_tokens_usd=per_wall_hour / 3600 / tokens_per_s_expected * 1e6,
                expected_train_time_s=time_expected,
                expected_train_cost_usd=None if time_expected is None else time_expected / 3600 * per_wall_hour)
