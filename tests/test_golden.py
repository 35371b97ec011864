"""The simulations, evaluate and the search bounds answer exactly what tests/data/golden.json recorded.

The faster planner.schedule, planner.cost and planner.search.bound/score were proved bit-for-bit equal to the
plain code they replaced (as of commit 7876cc8, with the later FILL_SLACK change); their outputs on fixed seeded
cases are recorded (tests/golden_cases.py draws and works out the cases, tests/data/make_golden.py writes them),
and every figure here must equal the record (==, not approx): a simulation's makespan, each worker's end, busy
time and last backward, each pass's end and the timeline's checksum; every field of an Estimate or the same
error; every pipeline bound of every family order and setting; the fast score's lane, window and prefix terms.
After an intentional change, rerun `python tests/data/make_golden.py` and review the diff of the JSON."""
from __future__ import annotations

import pytest

from tests.golden_cases import REGENERATE, RUN, recorded

GOLDEN = recorded()


def _check(group: str, k: int):
    entry = GOLDEN[group][k]
    got = RUN[group](entry["case"])
    assert got == entry["output"], f"{group} case {k} {REGENERATE}"


@pytest.mark.parametrize("k", range(len(GOLDEN["simulate"])))
def test_simulate_equals_the_record(k):
    """simulate(): lanes, one lane, unequal stages; 1F1B, GPipe, interleaved 2 and 3; with and without a timeline."""
    _check("simulate", k)


@pytest.mark.parametrize("k", range(len(GOLDEN["full"])))
def test_the_full_simulations_equal_the_record(k):
    """The event simulation (1F1B, GPipe) and the fixed-order one, each pass's end included."""
    _check("full", k)


@pytest.mark.parametrize("k", range(len(GOLDEN["long"])))
def test_long_lanes_extrapolated_equal_the_record(k):
    """Lanes past the extrapolation threshold: the same extrapolated figures."""
    _check("long", k)


def test_worker_orders_equal_the_record():
    for k in range(len(GOLDEN["worker_order"])):
        _check("worker_order", k)


@pytest.mark.parametrize("k", range(len(GOLDEN["evaluate"])))
def test_evaluate_equals_the_record(k):
    """Hand-built plans with the knobs the search sets (engines, MoE with ep, interleaving, cp, offload, hybrid
    sharding, overlaps, ZeRO stages), and the plans two searches answer with: every field, or the same error."""
    _check("evaluate", k)


@pytest.mark.parametrize("k", range(len(GOLDEN["pipeline_bounds"])))
def test_pipeline_bounds_equal_the_record(k):
    _check("pipeline_bounds", k)


def test_window_terms_equal_the_record():
    for k in range(len(GOLDEN["window_terms"])):
        _check("window_terms", k)


def test_the_cases_cover_what_they_should():
    """The record spans the schedules, several replicas, timelines, errors, and evaluate's ZeRO stages and engines."""
    sims = [e["case"] for e in GOLDEN["simulate"] + GOLDEN["full"]]
    assert {(c["schedule"], c["interleave"]) for c in sims} >= {("1f1b", 1), ("gpipe", 1), ("1f1b", 2), ("1f1b", 3)}
    assert any(max(map(len, c["counts"])) > 1 for c in sims) and any(c["timeline"] for c in sims)
    plans = [e["case"] for e in GOLDEN["evaluate"]]
    assert {c["knobs"]["zero_stage"] for c in plans} >= {0, 1, 2, 3}
    assert len({c["knobs"]["engine"] for c in plans}) >= 4
    outputs = [e["output"] for e in GOLDEN["evaluate"]]
    assert any("error" in o for o in outputs) and any(o.get("timeline") for o in outputs)
