"""Pipeline simulator: closed forms, orders, unequal stages and replicas."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedule import (_grid, _gridded, _simulate_events, _simulate_lane, _simulate_lanes, _simulate_static,
                              _sums_exact, assign_micro_batches, closed_form_1f1b_s, extrapolation_threshold,
                              in_flight_limits, on_grid, simulate)
from planner.types import Schedule

NO_DELAY = lambda *a: 0.0  # noqa: E731


def _full_simulation(counts, fwd, bwd, delay, schedule, interleave, timeline):
    """Every pass of every worker simulated, no lanes and no extrapolation: what the faster paths must equal
    (its times on the simulation's grid, as simulate() takes them)."""
    grid = _grid(counts, fwd, bwd, delay, interleave)
    fwd, bwd = [[on_grid(x, grid) for x in row] for row in fwd], [[on_grid(x, grid) for x in row] for row in bwd]
    delay = _gridded(delay, grid)
    if interleave > 1 or schedule == Schedule.ONE_F_ONE_B:
        return _simulate_static(counts, fwd, bwd, delay, schedule, interleave, timeline, grid=grid,
                                limit=in_flight_limits(counts))
    return _simulate_events(counts, fwd, bwd, delay, schedule, timeline)


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
    full = _full_simulation(stages, fwd, bwd, delay, schedule, interleave, True)
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


@settings(max_examples=60, deadline=None)
@given(data=st.data(), schedule=st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.GPIPE]),
       interleave=st.sampled_from([1, 2]))
def test_lanes_kept_across_calls_give_each_call_its_own_simulation(data, schedule, interleave):
    """simulate's `lanes` (kept across calls, as evaluate keeps them over a search): pipelines drawn from a
    few pass times and delays, so that lanes repeat across calls and within one, each equal (==) to its own
    simulation without them; lanes that differ only in the delay from the last stage back to the first
    (interleaved chunks cross it) are told apart."""
    if schedule == Schedule.GPIPE:
        interleave = 1
    kept: dict = {}
    for call in range(4):
        p = data.draw(st.integers(2 if interleave > 1 else 1, 4))
        d = 1 if call == 0 else data.draw(st.integers(1, 3))          # one lane at least: kept
        counts = [[data.draw(st.integers(1, 3)) * p] * d] * p
        fwd = [[data.draw(st.sampled_from([1.0, 1.5])) for _ in range(d)] for _ in range(p)]
        bwd = [[2 * f for f in row] for row in fwd]
        near, wrap = data.draw(st.sampled_from([0.0, 0.25])), data.draw(st.sampled_from([0.0, 0.5, 1.0]))

        def delay(i, r, i2, r2, near=near, wrap=wrap):
            return wrap if abs(i - i2) > 1 else near + 0.125 * (r == 2)
        mine = simulate(counts, fwd, bwd, delay, schedule, interleave, lanes=kept)
        assert mine == simulate(counts, fwd, bwd, delay, schedule, interleave)
        assert kept


def test_lanes_that_differ_where_interleaved_chunks_wrap_are_two_kinds():
    """Interleaved chunks pass from the last stage back to the first: lanes alike but for that delay are
    simulated each as it is (they were once taken for one kind: 23.0 s for the full simulation's 25.5)."""
    counts, fwd, bwd = [[6, 6]] * 3, [[1.0, 1.0]] * 3, [[2.0, 2.0]] * 3
    delay = lambda i, r, i2, r2: (1.0 if r == 1 else 0.0) if abs(i - i2) > 1 else 0.25  # noqa: E731
    lanes = simulate(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, 2)
    assert lanes == _simulate_static(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, 2, False)
    assert lanes.makespan_s == 25.5


@pytest.mark.parametrize("replicas", [1, 2])
def test_kept_lanes_tell_apart_the_delay_where_interleaved_chunks_wrap(replicas):
    """Interleaved chunks pass from the last stage back to the first: two pipelines alike but for that
    delay are two lanes for simulate's `lanes`, each simulated as it is."""
    kept: dict = {}
    counts, fwd, bwd = [[6] * replicas] * 3, [[1.0] * replicas] * 3, [[2.0] * replicas] * 3
    for wrap in (0.0, 1.0, 0.0):
        delay = lambda i, r, i2, r2, wrap=wrap: wrap if abs(i - i2) > 1 else 0.25  # noqa: E731
        mine = simulate(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, 2, lanes=kept)
        assert mine == simulate(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, 2)
    assert len(kept) == 2


# ----------------------------------------------------------------------------- one lane, extrapolated

def _lane_inputs(data, p, schedule, interleave, dyadic):
    """Random pass times (multiples of 1/16 when `dyadic`, so that sums are exact and ties are ties),
    transfer delays, an in-flight limit per stage as a lane of a replicated plan gets it, and a
    micro-batch count past the extrapolation threshold (a multiple of p when interleaved)."""
    from planner.schedule import extrapolation_threshold, window_in_flight_limit
    time_s = st.integers(1, 64).map(lambda x: x / 16) if dyadic else st.floats(0.05, 4.0)
    f = [data.draw(time_s) for _ in range(p)]
    b = [data.draw(time_s) for _ in range(p)]
    links = [[data.draw(st.sampled_from([0.0, 0.125, 0.5])) if dyadic else data.draw(st.floats(0.0, 0.5))
              for _ in range(2)] for _ in range(p)]
    m = 2 * extrapolation_threshold(p) + data.draw(st.integers(1, 4 * extrapolation_threshold(p)))
    if interleave > 1:
        m = -(-m // p) * p
    lanes = data.draw(st.integers(1, 4))
    total = m * lanes + data.draw(st.integers(-m // 2, m)) * (lanes > 1)
    limits = [[m if schedule == Schedule.GPIPE else window_in_flight_limit(lanes * (p - i), m, total)]
              for i in range(p)]

    def delay(i, r, i2, r2):
        return links[min(i, i2)][0 if i2 > i else 1]
    return [[m]] * p, [[x] for x in f], [[x] for x in b], delay, limits


@settings(max_examples=120, deadline=None)
@given(data=st.data(), p=st.integers(1, 6), interleave=st.sampled_from([1, 1, 2, 3]),
       schedule=st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.GPIPE]), dyadic=st.booleans())
def test_an_extrapolated_lane_equals_its_full_simulation(data, p, interleave, schedule, dyadic):
    """Issue 24: a lane of m micro-batches is simulated up to a recurring state (or in closed form,
    GPipe) and extrapolated (schedule._simulate_lane); makespan, every worker's end, busy time (which
    the plan's bubble figures come from) and last backward must equal the full simulation's. Dyadic
    times are exact in floating point, so these agree to rounding of the long sums only."""
    if interleave > 1 and (p == 1 or schedule == Schedule.GPIPE):
        interleave = 1
    counts, fwd, bwd, delay, limits = _lane_inputs(data, p, schedule, interleave, dyadic)
    mine = _simulate_lane(counts, fwd, bwd, delay, schedule, interleave, False, limits)
    if interleave > 1 or schedule == Schedule.ONE_F_ONE_B:
        full = _simulate_static(counts, fwd, bwd, delay, schedule, interleave, False, limit=limits)
    else:
        full = _simulate_events(counts, fwd, bwd, delay, schedule, False, limits)
    scale = full.makespan_s * 1e-10
    assert mine.makespan_s == pytest.approx(full.makespan_s, abs=scale)
    for row in ("end_s", "busy_s", "last_backward_s"):
        for a, b in zip(getattr(mine, row), getattr(full, row)):
            assert a == pytest.approx(b, abs=scale), row


@settings(max_examples=150, deadline=None)
@given(data=st.data(), p=st.integers(1, 7), m=st.integers(1, 40),
       schedule=st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.GPIPE]),
       whole=st.booleans(), own_limits=st.booleans())
def test_one_lane_events_equal_the_general_event_loop(data, p, m, schedule, whole, own_limits):
    """schedule._lane_events (one replica per stage, no timeline) counts its ready passes and counts an input
    that reaches a busy stage at once; its floats must be the general event loop's, ==. Whole-second and equal
    times (`whole`) make passes end and inputs arrive at the same instants, where the order events were made
    decides what a stage runs next."""
    times = st.sampled_from([1.0, 2.0, 3.0]) if whole else st.floats(0.05, 3.0)
    f = data.draw(st.lists(times, min_size=p, max_size=p))
    b = data.draw(st.lists(times, min_size=p, max_size=p))
    links = data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.25]) if whole else st.floats(0.0, 0.5),
                               min_size=2 * p, max_size=2 * p))
    delay = lambda i, r, i2, r2: links[2 * min(i, i2) + (i2 < i)]  # noqa: E731
    gpipe = schedule == Schedule.GPIPE          # GPipe holds every micro-batch: no limit of its own
    limits = [[data.draw(st.integers(1, p + 1))] for _ in range(p)] if own_limits and not gpipe else None
    counts, fwd, bwd = [[m]] * p, [[x] for x in f], [[x] for x in b]
    fast = _simulate_events(counts, fwd, bwd, delay, schedule, False, limits)
    general = _simulate_events(counts, fwd, bwd, delay, schedule, True, limits)      # a timeline: the general loop
    assert (fast.makespan_s, fast.end_s, fast.busy_s, fast.last_backward_s) == (
        general.makespan_s, general.end_s, general.busy_s, general.last_backward_s)


@pytest.mark.parametrize("p,interleave", [(2, 1), (4, 1), (8, 1), (4, 2), (8, 4), (3, 3)])
def test_balanced_lanes_are_extrapolated_not_fallen_back(p, interleave):
    """The recurrence is found (no fall-back to the full simulation) for the balanced stages a search
    produces: pass times within 10% of each other, transfers of a few percent."""
    from planner.schedule import _detection_bounds, _static_lane, in_flight_limit
    import random
    rng = random.Random(p * 10 + interleave)
    for _ in range(5):
        f = [rng.uniform(1.0, 1.1) for _ in range(p)]
        b = [2 * x * rng.uniform(0.95, 1.05) for x in f]
        m = 4096 * p
        limits = [[in_flight_limit([1] * p, i, m, m)] for i in range(p)]
        grid = _grid([[m]] * p, [[x] for x in f], [[x] for x in b], lambda *a: 0.02, interleave)   # as simulate()
        f, b, delay = [on_grid(x, grid) for x in f], [on_grid(x, grid) for x in b], _gridded(lambda *a: 0.02, grid)
        assert any(_static_lane(m, f, b, delay, interleave, limits, bound, grid) is not None
                   for bound in _detection_bounds(p, m))


@pytest.mark.parametrize("schedule,interleave", [(Schedule.ONE_F_ONE_B, 1), (Schedule.GPIPE, 1),
                                                 (Schedule.ONE_F_ONE_B, 2)])
def test_a_million_micro_batches_cost_what_a_few_hundred_do(schedule, interleave):
    """Equal stages at m = 10^6: the closed form (m + (p - 1) / v)(t_f + t_b), in a fraction of a
    CPU-second (the full simulation took seconds per lane; issue 24)."""
    import time
    p, m = 4, 1_000_000
    start = time.process_time()
    sim = simulate([[m]] * p, [[1.0]] * p, [[2.0]] * p, NO_DELAY, schedule, interleave)
    assert time.process_time() - start < 1.0
    assert sim.makespan_s == pytest.approx(closed_form_1f1b_s(m, p, 1.0, 2.0, interleave), rel=1e-12)
    assert sim.busy_s == [[pytest.approx(m * 3.0, rel=1e-12)]] * p


@pytest.mark.parametrize("schedule,interleave", [(Schedule.ONE_F_ONE_B, 1), (Schedule.GPIPE, 1),
                                                 (Schedule.ONE_F_ONE_B, 2)])
def test_replicated_stages_of_long_lanes_equal_the_full_simulation(schedule, interleave):
    """Lanes that all differ used to be simulated together (nothing to save by kind); past the
    extrapolation threshold each is extrapolated on its own: simulate() of three unequal lanes, as
    `evaluate` calls it, equals the full simulation of every worker."""
    from planner.schedule import extrapolation_threshold
    p = 3
    per = 2 * extrapolation_threshold(p) + 3 * p
    counts = [[per, per + p, per + 2 * p] for _ in range(p)]
    fwd = [[1.0 + 0.1 * i + 0.05 * r for r in range(3)] for i in range(p)]
    bwd = [[2.1 * x for x in row] for row in fwd]

    def delay(i, r, i2, r2):
        return 0.02 * (1 + r)
    mine = simulate(counts, fwd, bwd, delay, schedule, interleave)
    full = _full_simulation(counts, fwd, bwd, delay, schedule, interleave, False)
    assert mine.makespan_s == pytest.approx(full.makespan_s, rel=1e-10)
    for row in ("end_s", "busy_s", "last_backward_s"):
        assert getattr(mine, row) == [[pytest.approx(x, rel=1e-10) for x in r] for r in getattr(full, row)], row


@settings(max_examples=60, deadline=None)
@given(data=st.data(), p=st.integers(2, 5), d=st.integers(1, 3), v=st.sampled_from([1, 2, 3]))
def test_the_static_run_without_a_timeline_ends_as_with_one(data, p, d, v):
    """schedule._static_ends (no timeline, the search's loop) and _static_run's timeline loop work out the
    same longest path: every worker's end and busy time equal to the last bit, on uneven pass times and links."""
    per = data.draw(st.integers(1, 3)) * p
    fwd = [[data.draw(st.floats(0.5, 3.0)) for _ in range(d)] for _ in range(p)]
    bwd = [[f * data.draw(st.floats(1.5, 2.5)) for f in row] for row in fwd]
    links = {(i, r): data.draw(st.floats(0.0, 0.5)) for i in range(p) for r in range(d)}

    def delay(i, r, i2, r2):
        return links[(i, r)]

    stages = [[per] * d for _ in range(p)]
    plain = _simulate_static(stages, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, False)
    timed = _simulate_static(stages, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, True)
    assert plain.makespan_s == timed.makespan_s
    assert plain.end_s == timed.end_s and plain.busy_s == timed.busy_s


@settings(max_examples=200, deadline=None)
@given(data=st.data(), p=st.integers(2, 16), interleave=st.sampled_from([1, 1, 1, 2, 3]))
def test_a_lane_of_a_real_plans_times_extrapolates_to_its_full_simulation_exactly(data, p, interleave):
    """A search's plans have stages of equal times (one GPU type, the same layers) and equal transfers, in
    floats that are not sums of powers of two: passes end and inputs arrive at the same instants, and which
    comes first decides what a stage runs next. With times as given, rounding broke such a tie one way in
    one period and the other way in the next, and the extrapolated lane differed from its full simulation
    (0.64% on a 4-stage lane; 0.06% on lanes of the 128-GPU benchmark's plans). On the grid of simulate()
    (schedule._grid) every sum is exact: simulate() equals the full simulation, ==."""
    f = data.draw(st.floats(0.001, 0.3))
    b = data.draw(st.sampled_from([2.0, 2.2, 3.0])) * f
    link = data.draw(st.sampled_from([0.0, 0.01, 0.1])) * f
    kinds = data.draw(st.integers(1, 3))                   # stages of up to three speeds, in turn
    fwd = [[f * (1 + 0.25 * (i % kinds))] for i in range(p)]
    bwd = [[b / f * row[0]] for row in fwd]
    m = 2 * extrapolation_threshold(p) + data.draw(st.integers(1, 3 * p))
    if interleave > 1:
        m = -(-m // p) * p
    counts = [[m]] * p
    delay = lambda *a: link  # noqa: E731
    grid = _grid(counts, fwd, bwd, delay, interleave)
    assert _sums_exact(m, [on_grid(row[0], grid) for row in fwd], [on_grid(row[0], grid) for row in bwd],
                       _gridded(delay, grid), interleave, grid)          # the lane is extrapolated, not run in full
    lane = simulate(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, interleave)
    full = _full_simulation(counts, fwd, bwd, delay, Schedule.ONE_F_ONE_B, interleave, False)
    assert (lane.makespan_s, lane.end_s, lane.busy_s) == (full.makespan_s, full.end_s, full.busy_s)


@pytest.mark.parametrize("times", [(3.0, 1.5, 1.5), (1.5, 3.0, 1.5), (1.5, 1.5, 1.5, 3.0, 1.5, 1.5)])
def test_a_slow_stage_before_faster_ones_keeps_a_constant_fill_as_megatron_runs_1f1b(times):
    """1F1B runs Megatron-LM's fixed order (megatron/core/pipeline_parallel/schedules.py at d98e8a6,
    forward_backward_pipelining_without_interleaving: p - i - 1 warm-up forwards, then one forward and one
    backward in turn). With the slowest stage anywhere but last, a worker that greedily ran every ready
    backward first emptied the pipeline behind the slow stage and refilled it, a bubble that grew with the
    micro-batches (24, 44 and 336 s past m t_max at m = 64, 128 and 1,000 on the first lane). In the
    fixed order the slow stage never waits once it runs, so the time past m t_max stays the fill: here 1, 2
    and 5.5 s, at most the sum of the other stages' passes (3, 3, 7.5 s)."""
    p, slowest = len(times), max(times)
    fwd, bwd = [[t / 3] for t in times], [[2 * t / 3] for t in times]
    fills = {m: simulate([[m]] * p, fwd, bwd, NO_DELAY).makespan_s - m * slowest for m in (64, 128, 1000)}
    assert len(set(fills.values())) == 1
    assert 0 < fills[64] <= sum(times) - slowest


@settings(max_examples=300, deadline=None)
@given(data=st.data(), p=st.integers(2, 6), total=st.integers(1, 30), lanes=st.booleans(),
       timeline=st.booleans())
def test_1f1b_never_deadlocks_whatever_the_replica_counts(data, p, total, lanes, timeline):
    """Lanes (every stage the same replica counts) run Megatron-LM's fixed 1F1B order, whose warm-ups do not
    grow down a lane; stages of different replica counts pass micro-batches between replicas, where a fixed
    order of each worker's own micro-batches deadlocked in 8% of random cases (a worker waiting for a backward
    that waits for a forward it holds back), so their workers choose greedily. simulate() must finish either
    way, every micro-batch through every stage (busy time = forward + backward of each it owns)."""
    def counts():
        d = data.draw(st.integers(1, min(4, total)))
        cuts = sorted(data.draw(st.lists(st.integers(1, total - 1), min_size=d - 1, max_size=d - 1, unique=True))
                      ) if d > 1 else []
        return [b - a for a, b in zip([0] + cuts, cuts + [total])]
    first = counts()
    stages = [list(first) for _ in range(p)] if lanes else [counts() for _ in range(p)]
    fwd = [[data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in c] for c in stages]
    bwd = [[2 * x for x in row] for row in fwd]
    sim = simulate(stages, fwd, bwd, lambda *a: 0.125, Schedule.ONE_F_ONE_B, timeline=timeline)
    for i, c in enumerate(stages):
        for r, n in enumerate(c):
            assert sim.busy_s[i][r] == pytest.approx(n * (fwd[i][r] + bwd[i][r]))
