"""Energy and carbon of a plan: the board power of the GPUs it uses, for as long as it runs.

Each GPU a plan uses is counted at its board power (the catalog's `power_w`, the vendor's TDP or
TBP, cited per GPU in catalog/gpus.yaml) for the whole iteration: an upper bound on what the GPUs
draw (training at high MFU runs near it; waiting in a pipeline bubble draws less) that leaves out
the host, network and cooling (a data centre's PUE multiplies it). Carbon is the energy times the
carbon intensity of each pool's grid (`grid_gco2_per_kwh` in the cluster file), when every pool the
plan uses states one.
"""
from __future__ import annotations

from planner.types import Cluster, Plan

J_PER_KWH = 3.6e6


def power_w(cluster: Cluster, plan: Plan) -> float:
    """Board power of the GPUs the plan uses, watts."""
    return sum(n * cluster.pool(name).gpu.power_w for name, n in plan.gpus_by_pool().items())


def energy_per_million_tokens_kwh(power: float, iteration_s: float, tokens_per_iteration: int) -> float:
    return power * iteration_s / tokens_per_iteration * 1e6 / J_PER_KWH


def train_co2_kg(cluster: Cluster, plan: Plan, train_time_s: float | None) -> float | None:
    """Kilograms of CO2 to train, from each used pool's share of the power and its grid's intensity;
    None when the time to train or any used pool's intensity is unknown."""
    if train_time_s is None:
        return None
    grams = 0.0
    for name, n in plan.gpus_by_pool().items():
        pool = cluster.pool(name)
        if pool.grid_gco2_per_kwh is None:
            return None
        grams += n * pool.gpu.power_w * train_time_s / J_PER_KWH * pool.grid_gco2_per_kwh
    return grams / 1000
