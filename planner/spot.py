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

import math

from planner.types import Cluster, Estimate, InputError, Plan

# Below this share of time the expected figures leave float range (1e-200 x 1e-200 rounds to 0, and
# 4.9e-324 turns $/token into inf): such a plan would in effect never run. 1e-100 keeps every expected
# figure finite for any throughput, price and token count the inputs allow.
MIN_JOINT_AVAILABILITY = 1e-100


def availability(cluster: Cluster, gpus_by_pool: dict[str, int]) -> float:
    """The share of time a plan on these pools runs: the product of the availabilities of its spot pools,
    summed in log space; an InputError naming the pools where it is below MIN_JOINT_AVAILABILITY."""
    spot = [cluster.pool(name) for name in gpus_by_pool if cluster.pool(name).spot]
    log10 = sum(math.log10(p.availability) for p in spot)
    if log10 < math.log10(MIN_JOINT_AVAILABILITY):
        names = ", ".join(f"{p.name} ({p.availability:.3g})" for p in spot)
        raise InputError("availability", f"the spot pools {names} are held together 10^{log10:.0f} of the time, "
                                          f"below {MIN_JOINT_AVAILABILITY:g}: a plan on them would in effect never "
                                          f"run; raise their availability or leave them out of the cluster")
    return math.prod(p.availability for p in spot)


def _spot_price_per_hour(cluster: Cluster, gpus_by_pool: dict[str, int]) -> float:
    return sum(n * cluster.pool(name).price_per_gpu_hour_usd for name, n in gpus_by_pool.items()
               if cluster.pool(name).spot)


def uses_spot(cluster: Cluster, gpus_by_pool: dict[str, int]) -> bool:
    return any(cluster.pool(name).spot for name in gpus_by_pool)


def wall_time_and_price(cluster: Cluster, gpus_by_pool: dict[str, int], time_s: float,
                        price_per_hour: float) -> tuple[float, float]:
    """A time at full speed and the plan's price per hour as expected wall time (time / A) and dollars per
    hour of wall time (on-demand $/h + A x spot $/h); unchanged for a plan on no spot pool."""
    if not uses_spot(cluster, gpus_by_pool):
        return time_s, price_per_hour
    a = availability(cluster, gpus_by_pool)
    return time_s / a, price_per_hour - (1 - a) * _spot_price_per_hour(cluster, gpus_by_pool)


def spot_figures(cluster: Cluster, plan: Plan, tokens_per_s: float, price_per_hour: float,
                 train_time_s: float | None) -> dict:
    """The Estimate's spot fields (availability, expected_*), by the module's formulas; none (their
    defaults, 1.0 and None) when the plan uses no spot pool."""
    used = plan.gpus_by_pool()
    if not uses_spot(cluster, used):
        return {}
    a = availability(cluster, used)
    spot_per_h = _spot_price_per_hour(cluster, used)
    per_wall_hour = (price_per_hour - spot_per_h) + a * spot_per_h     # on-demand all the time, spot while held
    tokens_per_s_expected = tokens_per_s * a
    time_expected = None if train_time_s is None else train_time_s / a
    return dict(availability=a, expected_tokens_per_s=tokens_per_s_expected,
                expected_cost_per_million_tokens_usd=per_wall_hour / 3600 / tokens_per_s_expected * 1e6,
                expected_train_time_s=time_expected,
                expected_train_cost_usd=None if time_expected is None else time_expected / 3600 * per_wall_hour)


# The figures the search's objectives rank by: the expected ones where the plan uses a spot pool, else the
# nominal ones. Expected tokens/s <= nominal and expected $/token >= nominal, so the search's lower bounds
# on nominal keys (planner.search.bound) still bound them.

def tokens_per_s(est: Estimate) -> float:
    return est.tokens_per_s if est.expected_tokens_per_s is None else est.expected_tokens_per_s


def cost_per_million_tokens_usd(est: Estimate) -> float:
    return (est.cost_per_million_tokens_usd if est.expected_cost_per_million_tokens_usd is None
            else est.expected_cost_per_million_tokens_usd)


def train_time_s(est: Estimate) -> float | None:
    return est.train_time_s if est.expected_train_time_s is None else est.expected_train_time_s


def cost_per_wall_hour_usd(est: Estimate) -> float:
    """Dollars per hour of wall time, waits included: on-demand $/h + availability x spot $/h."""
    if est.expected_tokens_per_s is None:
        return est.cost_per_hour_usd
    return est.expected_cost_per_million_tokens_usd / 1e6 * est.expected_tokens_per_s * 3600
