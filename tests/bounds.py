"""The search's lower bounds held against the cost model, for the tests of each parallelism."""
from __future__ import annotations

from planner.cost import evaluate
from tests.test_engines import _candidates
from tests.test_one_cost_model import PIPELINE_TOLERANCE


def check_bounds_below_evaluate(cluster, job, check_plan=lambda plan, cand: None) -> int:
    """For every candidate the search scores for `job`: its screen, floor and pipeline bounds are at most
    `evaluate`'s iteration time; `check_plan(plan, candidate)` checks each plan too. Returns how many were checked."""
    checked = 0
    for cand, screen, pipeline in _candidates(cluster, job):
        plan = cand.to_plan(job)
        check_plan(plan, cand)
        est = evaluate(cluster, plan, detail=False).iteration_time_s
        assert screen <= est * (1 + 1e-9) and cand.floor_s <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        assert pipeline <= est * (1 + PIPELINE_TOLERANCE), (cand.layout, cand.knobs)
        checked += 1
    return checked
