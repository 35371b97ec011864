"""The faster pipeline simulations (and the evaluate built on them) give exactly what the plain ones gave.

tests/reference_schedule.py keeps planner.schedule's simulations as they were before they were made
faster; every figure of a simulation here must equal the reference bit for bit (==, not approx): the
makespan, each worker's end, busy time and last backward, and the timeline row by row. Pass times that
are multiples of 1/16 make ties exact, where the order of events decides what a worker runs next."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import tests.reference_cost as reference_cost
import tests.reference_schedule as reference
from catalog import load_catalog, load_cluster_file
from planner import schedule
from planner.cost import evaluate
from planner.engines import REAL
from planner.search import search
from planner.types import InfeasibleError, InputError, Job, Objective, Offload, Schedule
from tests import test_properties


def _pipeline(data, lanes: bool, interleave: int, schedule_: Schedule, long: bool = False):
    """Random stages: replica counts (the same on every stage when `lanes`), micro-batch shares that sum
    to one total (with `lanes` the same on every stage, sometimes; with `long` always, and many), pass
    times (multiples of 1/16, ties included, or any floats) and a transfer delay per pair of workers (one
    of a few values, zero among them)."""
    p = data.draw(st.integers(1, 4), label="stages")
    if interleave > 1:
        p = max(p, 2)
    width = data.draw(st.integers(1, 3), label="replicas")
    replicas = [width] * p if lanes else [data.draw(st.integers(1, 3)) for _ in range(p)]
    unit = p if interleave > 1 else 1          # interleaved: whole groups of p micro-batches per replica
    most = 2 * schedule.extrapolation_threshold(p) + 40 if long else 12
    per = data.draw(st.integers(1, max(1, most // unit)), label="per replica")
    total = per * unit * max(replicas)
    counts = []
    for d in replicas:
        cuts = sorted(data.draw(st.lists(st.integers(1, total // unit - 1), min_size=d - 1, max_size=d - 1,
                                         unique=True))) if d > 1 and total // unit > d else []
        if len(cuts) != d - 1:
            cuts = [total // unit * k // d for k in range(1, d)]
        bounds = [0] + cuts + [total // unit]
        counts.append([(b - a) * unit for a, b in zip(bounds, bounds[1:])])
    if long or lanes and data.draw(st.booleans(), label="same shares"):
        counts = [list(counts[0]) for _ in range(p)]
    dyadic = data.draw(st.booleans(), label="dyadic")
    time_s = st.integers(1, 48).map(lambda x: x / 16) if dyadic else st.floats(0.05, 3.0)
    fwd = [[data.draw(time_s) for _ in c] for c in counts]
    bwd = [[data.draw(time_s) for _ in c] for c in counts]
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="delay seed"))
    choices = [0.0, 0.0625, 0.25] if dyadic else [0.0, rng.uniform(0.01, 0.3), rng.uniform(0.01, 0.3)]
    table = {(i, r, i2, r2): rng.choice(choices) for i in range(p) for r in range(len(counts[i]))
             for i2 in range(p) for r2 in range(len(counts[i2]))}

    def delay(i, r, i2, r2):
        return table[(i, r, i2, r2)]
    return counts, fwd, bwd, delay


def _assert_identical(mine, theirs):
    assert mine.makespan_s == theirs.makespan_s
    assert mine.end_s == theirs.end_s
    assert mine.busy_s == theirs.busy_s
    assert mine.last_backward_s == theirs.last_backward_s
    if theirs.timeline is None:
        assert mine.timeline is None
    else:
        assert mine.timeline.equals(theirs.timeline), (mine.timeline, theirs.timeline)


def _both(run_mine, run_theirs):
    """Each run's result, or the AssertionError it raised (a deadlocked order must deadlock in both)."""
    outcomes = []
    for run in (run_mine, run_theirs):
        try:
            outcomes.append(run())
        except AssertionError as e:
            outcomes.append(e)
    return outcomes


SCHEDULES = st.sampled_from([(Schedule.ONE_F_ONE_B, 1), (Schedule.GPIPE, 1), (Schedule.ONE_F_ONE_B, 2),
                             (Schedule.ONE_F_ONE_B, 3)])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), lanes=st.booleans(), kind=SCHEDULES, timeline=st.booleans())
def test_simulate_equals_the_reference_bit_for_bit(data, lanes, kind, timeline):
    """simulate(): lanes (simulated once per kind), one lane, and the full event and static simulations
    of unequal stages, with and without a timeline."""
    schedule_, v = kind
    counts, fwd, bwd, delay = _pipeline(data, lanes, v, schedule_)
    mine, theirs = _both(lambda: schedule.simulate(counts, fwd, bwd, delay, schedule_, v, timeline),
                         lambda: reference.simulate(counts, fwd, bwd, delay, schedule_, v, timeline))
    if isinstance(theirs, AssertionError):
        assert isinstance(mine, AssertionError)
        return
    _assert_identical(mine, theirs)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), lanes=st.booleans(), kind=SCHEDULES, timeline=st.booleans())
def test_the_full_simulations_equal_the_reference_bit_for_bit(data, lanes, kind, timeline):
    """Every worker simulated (what simulate() falls back to, and what timelines of unequal stages run):
    the event simulation (1F1B, GPipe) and the fixed-order one (interleaved; 1F1B and GPipe too)."""
    schedule_, v = kind
    counts, fwd, bwd, delay = _pipeline(data, lanes, v, schedule_)
    if v == 1:
        outcomes = _both(lambda: schedule._simulate_events(counts, fwd, bwd, delay, schedule_, timeline),
                         lambda: reference._simulate_events(counts, fwd, bwd, delay, schedule_, timeline))
        _assert_identical(*outcomes)
    mine_end, theirs_end = [], {}
    mine, theirs = _both(
        lambda: schedule._simulate_static(counts, fwd, bwd, delay, schedule_, v, timeline, mine_end),
        lambda: reference._simulate_static(counts, fwd, bwd, delay, schedule_, v, timeline, theirs_end))
    if isinstance(theirs, AssertionError):
        assert isinstance(mine, AssertionError)
        return
    _assert_identical(mine, theirs)
    p, total = len(counts), sum(counts[0])
    assert {(k, c, i, j): mine_end[schedule._pass_index(k, c, i, j, v, p, total)]
            for k, c, i, j in theirs_end} == theirs_end


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=SCHEDULES)
def test_long_lanes_extrapolated_equal_the_reference_bit_for_bit(data, kind):
    """Lanes past the extrapolation threshold: the recurrence found (or not) at the same cut, the same
    extrapolated figures."""
    schedule_, v = kind
    counts, fwd, bwd, delay = _pipeline(data, True, v, schedule_, long=True)
    _assert_identical(schedule.simulate(counts, fwd, bwd, delay, schedule_, v),
                      reference.simulate(counts, fwd, bwd, delay, schedule_, v))


@pytest.mark.parametrize("p,v,n", [(1, 1, 5), (3, 1, 2), (4, 1, 9), (2, 2, 4), (3, 2, 7), (4, 3, 8), (4, 2, 3)])
@pytest.mark.parametrize("schedule_", [Schedule.ONE_F_ONE_B, Schedule.GPIPE])
def test_worker_order_is_the_reference_order(p, v, n, schedule_):
    """_worker_order's arrays list the passes of the reference's per-worker order lists."""
    mbs = [3 * k + 1 for k in range(n)]                     # a worker's own micro-batches, any increasing
    for i in range(p):
        kind, chunk, index = schedule._worker_order(schedule_, v, p, i, n)
        mine = [(k, c, mbs[x]) for k, c, x in zip(kind.tolist(), chunk.tolist(), index.tolist())]
        assert mine == reference._worker_ops(schedule_, v, p, i, mbs)


# ----------------------------------------------------------------------------- evaluate


def _fields_equal(mine, theirs):
    """Two estimates equal in every field (the timeline, a DataFrame, row for row)."""
    assert (mine.timeline is None) == (theirs.timeline is None)
    if theirs.timeline is not None:
        assert mine.timeline.equals(theirs.timeline)
    assert replace(mine, timeline=None) == replace(theirs, timeline=None)


def _outcome(run):
    try:
        return run()
    except (InputError, InfeasibleError) as e:
        return type(e), str(e)


@st.composite
def _varied_plans(draw):
    """A hand-built plan (tests.test_properties.plans_on) with knobs the search sets: an engine, a mixture
    of experts with expert parallelism, interleaving, context parallelism, offload, hybrid sharding,
    overlaps; each knob kept only where the plan stays valid."""
    cluster = draw(test_properties.clusters)
    plan = draw(test_properties.plans_on(cluster))
    changes = [dict(engine=draw(st.sampled_from(REAL + ("hetplan",))))]
    moe = test_properties.CATALOG.models["mixtral-8x7b"]
    if plan.model.layers == moe.layers and draw(st.booleans()):
        changes.append(dict(model=moe, expert_parallel=draw(st.sampled_from([1, 2, 4, 8]))))
    v, p, layers = draw(st.sampled_from([1, 2, 3])), plan.num_stages, plan.model.layers
    if v > 1 and p > 1 and layers % (p * v) == 0:
        # interleaving: stage 0's replicas on every stage, whole groups of p micro-batches each, and
        # layer counts that split into v chunks
        replicas = tuple(replace(r, samples=r.samples * p) for r in plan.stages[0].replicas)
        changes.append(dict(global_batch=sum(r.samples for r in replicas), schedule=Schedule.ONE_F_ONE_B,
                            stages=tuple(replace(s, layer_start=k * layers // p, layer_end=(k + 1) * layers // p,
                                                 replicas=replicas) for k, s in enumerate(plan.stages))))
    changes.append(dict(interleave=v))
    changes.append(dict(context_parallel=draw(st.sampled_from([1, 2]))))
    changes.append(dict(offload=draw(st.sampled_from(list(Offload)))))
    changes.append(dict(hybrid_shard=draw(st.sampled_from([0, 1, 2]))))
    changes.append({name: draw(st.sampled_from([None, True, False]))
                    for name in ("overlap_grad_reduce", "overlap_param_gather", "prefetch")})
    changes.append(dict(tp_comm_overlap=draw(st.booleans())))
    for change in changes:
        try:
            plan = replace(plan, **change)
        except (InputError, ValueError):
            pass
    return cluster, plan


@settings(max_examples=150, deadline=None)
@given(case=_varied_plans(), tokens=st.sampled_from([None, 3e10]), detail=st.booleans(), timeline=st.booleans())
def test_evaluate_equals_the_reference_field_for_field(case, tokens, detail, timeline):
    """planner.cost.evaluate (replica kinds worked out once per stage, pool and tp; placement checks once per
    pool and tp; transfer figures shared by alike replica pairs) against tests/reference_cost.py: every field
    of the Estimate, the timeline included, or the same error."""
    cluster, plan = case
    mine = _outcome(lambda: evaluate(cluster, plan, tokens, timeline=timeline, detail=detail))
    theirs = _outcome(lambda: reference_cost.evaluate(cluster, plan, tokens, timeline=timeline, detail=detail))
    event(f"engine {plan.engine}")
    event(f"{plan.schedule.value}, interleave {plan.interleave}, cp {plan.context_parallel}, zero {plan.zero_stage}")
    event(f"{plan.model.name}, ep {plan.expert_parallel}, offload {plan.offload.value}, hybrid {plan.hybrid_shard}")
    if isinstance(theirs, tuple):
        event(f"error: {theirs[0].__name__}")
        assert mine == theirs
        return
    event(f"estimate, fits: {theirs.fits}")
    _fields_equal(mine, theirs)


@pytest.mark.parametrize("name,model,batch,seq", [("a100-v100-16.yaml", "llama-2-7b", 64, 4096),
                                                  ("h100-a100-v100-64.yaml", "mixtral-8x7b", 256, 4096)])
def test_evaluate_equals_the_reference_on_the_searchs_answers(name, model, batch, seq):
    """The plans a search answers with, its baselines' and each engine's best, as `hetplan plan` reports
    them: evaluate equals the reference on each."""
    catalog = load_catalog()
    cluster = load_cluster_file(Path(__file__).resolve().parent.parent / "examples" / name, catalog)
    job = Job(catalog.model(model), batch, seq)
    result = search(cluster, job, Objective.THROUGHPUT, engines=REAL)
    plans = [sp.plan for sp in result.plans] + [sp.plan for sp in result.baselines.values() if sp is not None]
    plans += [r.plans[0].plan for r in result.by_engine.values() if not isinstance(r, str)]
    for plan in plans:
        for detail in (True, False):
            _fields_equal(evaluate(cluster, plan, job.tokens_to_train, detail=detail),
                          reference_cost.evaluate(cluster, plan, job.tokens_to_train, detail=detail))
    _fields_equal(evaluate(cluster, plans[0], timeline=True), reference_cost.evaluate(cluster, plans[0], timeline=True))
