"""Pipeline simulator: closed forms, orders, unequal stages and replicas."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedule import (_simulate_events, _simulate_lanes, _simulate_static, assign_micro_batches,
                              closed_form_1f1b_s, simulate)
from planner.types import Schedule

NO_DELAY = lambda *a: 0.0  # noqa: E731


@pytest.mark.parametrize("p,m,tf,tb", [(1, 1, 1.0, 2.0), (2, 8, 1.0, 2.0), (4, 16, 0.5, 1.5), (8, 8, 3.0, 6.0),
                                       (8, 3, 1.0, 2.0)])
@pytest.mark.parametrize("schedule", [Schedule.ONE_F_ONE_B, Schedule.GPIPE])
def test_equal_stages_match_closed_form(p, m, tf, tb, schedule):
    # (m + p - 1)(t_f + t_b): Narayanan et al. 2021, section 2.2
    sim = simulate([[m]] * p, [[tf]] * p, [[tb]] * p, NO_DELAY, schedule)
    assert sim.makespan_s == pytest.approx((m + p - 1) * (tf + tb))


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4), (3, 9, 3)])
def test_interleaved_matches_closed_form(p, m, v):
    # (m + (p - 1) / v)(t_f + t_b) when m is a multiple of p
    sim = simulate([[m]] * p, [[1.0]] * p, [[2.0]] * p, NO_DELAY, Schedule.ONE_F_ONE_B, v)
    assert sim.makespan_s == pytest.approx(closed_form_1f1b_s(m, p, 1.0, 2.0, v))


def test_slowest_stage_sets_the_steady_state():
    # stage f+b times 1, 3, 1: the middle stage computes without a gap, so the makespan is its
    # busy time plus the first forward before it and the last backward after it
    m = 10
    sim = simulate([[m]] * 3, [[1 / 3], [1.0], [1 / 3]], [[2 / 3], [2.0], [2 / 3]], NO_DELAY)
    assert sim.makespan_s == pytest.approx(1 / 3 + m * 3 + 2 / 3)


def test_two_replicas_halve_a_stage():
    # a slow stage (time 2) with two replicas each doing half the micro-batches keeps pace with a fast one
    m = 16
    one = simulate([[m], [m]], [[1.0], [2.0]], [[2.0], [4.0]], NO_DELAY).makespan_s
    two = simulate([[m], [m // 2, m // 2]], [[1.0], [2.0, 2.0]], [[2.0], [4.0, 4.0]], NO_DELAY).makespan_s
    assert two < 0.7 * one


def test_transfer_delay_lengthens_fill_and_drain():
    m, p, d = 8, 4, 0.25
    base = simulate([[m]] * p, [[1.0]] * p, [[2.0]] * p, NO_DELAY).makespan_s
    slow = simulate([[m]] * p, [[1.0]] * p, [[2.0]] * p, lambda *a: d).makespan_s
    assert slow >= base + 2 * (p - 1) * d - 1e-9


def test_timeline_rows_are_consistent():
    sim = simulate([[4], [2, 2]], [[1.0], [1.0, 1.5]], [[2.0], [2.0, 3.0]], lambda *a: 0.1, timeline=True)
    df = sim.timeline
    work = df[df.kind != "p2p"]
    assert len(work) == 2 * 4 * 2  # each micro-batch: forward + backward on each of 2 stages
    assert (df.end >= df.start).all()
    assert df.end.max() == pytest.approx(sim.makespan_s)
    for (stage, replica), ops in work.groupby(["stage", "replica"]):  # a worker never overlaps itself
        ops = ops.sort_values("start")
        assert (ops.start.values[1:] >= ops.end.values[:-1] - 1e-12).all()


@given(counts=st.lists(st.integers(1, 9), min_size=1, max_size=5))
def test_assignment_respects_shares(counts):
    owners = assign_micro_batches(counts)
    assert len(owners) == sum(counts)
    for r, n in enumerate(counts):
        assert owners.count(r) == n


@settings(max_examples=60, deadline=None)
@given(data=st.data(), p=st.integers(1, 5), schedule=st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.GPIPE]))
def test_random_pipelines_never_deadlock_and_respect_lower_bounds(data, p, schedule):
    m = data.draw(st.integers(1, 12))
    counts, fwd, bwd = [], [], []
    for _ in range(p):
        d = data.draw(st.integers(1, min(3, m)))
        share = [m // d + (1 if r < m % d else 0) for r in range(d)]
        counts.append(share)
        fwd.append([data.draw(st.floats(0.1, 3.0)) for _ in share])
        bwd.append([data.draw(st.floats(0.1, 6.0)) for _ in share])
    sim = simulate(counts, fwd, bwd, NO_DELAY, schedule)
    busiest = max(n * (f + b) for c, fs, bs in zip(counts, fwd, bwd) for n, f, b in zip(c, fs, bs))
    assert sim.makespan_s >= busiest - 1e-9
    one_pass = sum(min(f + b for f, b in zip(fs, bs)) for fs, bs in zip(fwd, bwd))
    assert sim.makespan_s >= one_pass - 1e-9


def test_exhaustive_small_orders_agree_with_brute_force_list_schedule():
    # For p = 2 and GPipe, makespan equals a hand-derived formula:
    # forwards pipeline then backwards pipeline (backward of the last stage starts after its last forward)
    for m, (f0, f1), (b0, b1) in itertools.product([1, 2, 5], [(1.0, 2.0), (2.0, 1.0)], [(1.0, 3.0), (3.0, 1.0)]):
        sim = simulate([[m], [m]], [[f0], [f1]], [[b0], [b1]], NO_DELAY, Schedule.GPIPE)
        t, end0 = 0.0, []
        for _ in range(m):
            t += f0
            end0.append(t)
        t1 = 0.0
        for e in end0:
            t1 = max(t1, e) + f1
        # backwards: stage 1 runs its m backwards after its forwards, stage 0 follows each
        b_end1, t = [], t1
        for _ in range(m):
            t += b1
            b_end1.append(t)
        t0 = end0[-1]
        for e in b_end1:
            t0 = max(t0, e) + b0
        assert sim.makespan_s == pytest.approx(t0)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), p=st.integers(1, 5), d=st.integers(2, 5),
       schedule=st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.GPIPE]), interleave=st.sampled_from([1, 2]))
def test_lanes_simulated_once_per_kind_equal_the_full_simulation(data, p, d, schedule, interleave):
    """Replicas that form identical lanes are simulated once per kind of lane (schedule._simulate_lanes);
    the result must equal the full simulation of every worker (what timeline=True runs)."""
    if interleave > 1 and (p == 1 or schedule == Schedule.GPIPE):
        interleave = 1
    per = data.draw(st.integers(1, 4)) * (p if interleave > 1 else 1)
    odd = data.draw(st.sampled_from([0] + list(range(2, d)))) if interleave == 1 else 0
    counts = [per + (1 if r < odd else 0) for r in range(d)]          # uneven shares make two kinds of lane
    kind = [data.draw(st.integers(0, 1)) for _ in range(d)]             # and so do slower replicas
    kind[1] = kind[0]                                                   # lanes 0 and 1 alike: some lane repeats
    fwd = [[(1.0 + i * 0.3) * (1.5 if kind[r] else 1.0) for r in range(d)] for i in range(p)]
    bwd = [[2 * f for f in row] for row in fwd]
    slow_link = data.draw(st.integers(2, d)) if d > 2 else d            # d: no slow lane

    def delay(i, r, i2, r2):
        return 0.25 if r == slow_link else 0.1

    stages = [list(counts) for _ in range(p)]
    lanes = simulate(stages, fwd, bwd, delay, schedule, interleave, timeline=True)
    assert _simulate_lanes(stages, fwd, bwd, delay, schedule, interleave) is not None
    if interleave > 1:
        full = _simulate_static(stages, fwd, bwd, delay, schedule, interleave, True)
    else:
        full = _simulate_events(stages, fwd, bwd, delay, schedule, True)
    assert lanes.makespan_s == pytest.approx(full.makespan_s, rel=1e-12)
    for row in ("end_s", "busy_s", "last_backward_s"):
        for a, b in zip(getattr(lanes, row), getattr(full, row)):
            assert a == pytest.approx(b, rel=1e-12), row
    # the timeline too: every pass and transfer of every worker, from one simulation per kind of lane
    columns = ["stage", "replica", "micro_batch", "chunk", "kind", "start", "end"]
    mine = lanes.timeline.sort_values(columns).reset_index(drop=True)
    theirs = full.timeline.sort_values(columns).reset_index(drop=True)
    assert len(mine) == len(theirs)
    assert (mine[columns[:5]].values == theirs[columns[:5]].values).all()
    assert mine.start.values == pytest.approx(theirs.start.values, rel=1e-12, abs=1e-12)
    assert mine.end.values == pytest.approx(theirs.end.values, rel=1e-12, abs=1e-12)
