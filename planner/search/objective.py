"""What 'better' means for each objective, on fast scores and on the cost model's estimates."""
from __future__ import annotations

import math

from planner import spot
from planner.types import Estimate, InputError, Job, Objective


def check_objective(objective: Objective, job: Job, deadline_hours: float | None) -> None:
    if objective == Objective.DEADLINE:
        if deadline_hours is None or not deadline_hours > 0:
            raise InputError("deadline_hours", f"the deadline objective needs a positive number of hours, got {deadline_hours!r}")
        if not job.tokens_to_train:
            raise InputError("tokens", "the deadline objective needs the number of tokens to train (--tokens)")


def fast_key(objective: Objective, job: Job, time_s: float, price_per_hour: float,
             deadline_hours: float | None) -> float:
    """The objective on an iteration time and a price (fast scores, bounds); estimate_key is the same
    objective on an estimate, in its units (estimate_key_of_fast converts; tests/test_formulas.py holds
    the two equal on evaluated plans). Smaller is better: seconds per iteration, or dollars per
    iteration (the cost and deadline objectives; a plan over the deadline scores infinity, and so
    does an infinite time: a bound that rules out every setting). Under the energy objective the search prices each GPU at its
    board power in kW (planner.search.search), so the same product is kWh per iteration."""
    if objective == Objective.THROUGHPUT or time_s == math.inf:
        return time_s
    if objective == Objective.DEADLINE and past_deadline(train_time_s(job, time_s), deadline_hours):
        return math.inf
    return time_s * price_per_hour


def estimate_key_of_fast(objective: Objective, job: Job, key: float) -> float:
    """A fast key (seconds, or seconds times dollars per hour) as estimate_key measures it
    (seconds per token, or dollars per million tokens)."""
    if key == math.inf or key == -math.inf:
        return key
    if objective == Objective.THROUGHPUT:
        return key / job.tokens_per_iteration
    return key / 3600 / job.tokens_per_iteration * 1e6


def fast_key_of_estimate(objective: Objective, job: Job, key: float) -> float:
    """The inverse of estimate_key_of_fast."""
    if key == math.inf:
        return key
    if objective == Objective.THROUGHPUT:
        return key * job.tokens_per_iteration
    return key * 3600 * job.tokens_per_iteration / 1e6


def past_deadline(train_time_s: float, deadline_hours: float) -> bool:
    """The deadline objective's one test, for fast keys and estimates alike."""
    return train_time_s > deadline_hours * 3600


def train_time_s(job: Job, iteration_s: float) -> float:
    return job.tokens_to_train / (job.tokens_per_iteration / iteration_s)


def estimate_key(objective: Objective, est: Estimate, deadline_hours: float | None) -> float:
    """Smaller is better, on the cost model's numbers: for a plan on spot pools its expected figures,
    waits for reclaimed pools counted (planner.spot; energy stays nominal). These are never better than
    the nominal ones, so the fast keys and bounds, nominal, stay lower bounds of this key."""
    if not est.fits:
        return math.inf
    if objective == Objective.THROUGHPUT:
        return 1.0 / spot.tokens_per_s(est)
    if objective == Objective.DEADLINE and past_deadline(spot.train_time_s(est), deadline_hours):
        return math.inf
    if objective == Objective.ENERGY:
        return est.energy_per_million_tokens_kwh
    return spot.cost_per_million_tokens_usd(est)


def gain(objective: Objective, est: Estimate, baseline: Estimate) -> float | None:
    """Relative gain on the objective: 0.35 = 35% more tokens/s, or 35% more tokens per dollar;
    None where the plan is free and the baseline is not (no finite ratio)."""
    if objective == Objective.THROUGHPUT:
        return spot.tokens_per_s(est) / spot.tokens_per_s(baseline) - 1.0
    if objective == Objective.ENERGY:
        return baseline.energy_per_million_tokens_kwh / est.energy_per_million_tokens_kwh - 1.0
    cost, baseline_cost = spot.cost_per_million_tokens_usd(est), spot.cost_per_million_tokens_usd(baseline)
    if cost <= 0:      # free GPUs (a price of 0): no ratio against a paid baseline
        return 0.0 if baseline_cost <= 0 else None
    return baseline_cost / cost - 1.0


def describe(objective: Objective) -> str:
    return {Objective.THROUGHPUT: "throughput", Objective.COST: "cost per token",
            Objective.DEADLINE: "cost per token within the deadline", Objective.ENERGY: "energy per token"}[objective]
