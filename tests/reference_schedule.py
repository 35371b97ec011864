"""planner.schedule's pipeline simulations as they were before they were made faster (commit 7876cc8):
the reference that tests/test_evaluate_speed.py holds the faster ones equal to, bit for bit. Reachable from
the tests only."""
from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque

import numpy as np

from planner.schedule import BACKWARD, FORWARD, KIND_NAMES, LinkDelay, SimResult, _frame, in_flight_limit
from planner.types import Schedule


def assign_micro_batches(counts: list[int]) -> list[int]:
    """Owner replica of each global micro-batch: stride scheduling by share, ties to the lowest index.

    The order is that of the fractions k / n_r (k = 1..n_r) of every replica r, ties to the lower r;
    with g the counts' greatest common divisor it repeats every sum(counts) / g micro-batches (the
    fractions of counts n_r / g, shifted by whole units), so one period is computed and repeated."""
    g = math.gcd(*counts)
    if g == 0:
        return []
    return _stride_order([n // g for n in counts]) * g


def _stride_order(counts: list[int]) -> list[int]:
    heap = [(1.0 / n, r) for r, n in enumerate(counts) if n > 0]
    heapq.heapify(heap)
    taken = [0] * len(counts)
    owners = []
    while heap:
        _, r = heapq.heappop(heap)
        owners.append(r)
        taken[r] += 1
        if taken[r] < counts[r]:
            heapq.heappush(heap, ((taken[r] + 1) / counts[r], r))
    return owners


def _order_1f1b(mbs: list[int], warmup: int) -> list[tuple[int, int, int]]:
    n = len(mbs)
    warmup = min(warmup, n)
    ops = [(FORWARD, 0, j) for j in mbs[:warmup]]
    for k in range(warmup, n):
        ops.append((FORWARD, 0, mbs[k]))
        ops.append((BACKWARD, 0, mbs[k - warmup]))
    ops += [(BACKWARD, 0, j) for j in mbs[n - warmup:]] if warmup else []
    return ops


def _order_gpipe(mbs: list[int]) -> list[tuple[int, int, int]]:
    return [(FORWARD, 0, j) for j in mbs] + [(BACKWARD, 0, j) for j in mbs]


def _order_interleaved(mbs: list[int], p: int, i: int, v: int) -> list[tuple[int, int, int]]:
    groups = [mbs[g:g + p] for g in range(0, len(mbs), p)]
    fwd = [(FORWARD, c, j) for grp in groups for c in range(v) for j in grp]
    bwd = [(BACKWARD, c, j) for grp in groups for c in reversed(range(v)) for j in grp]
    warmup = min(len(fwd), 2 * (p - i - 1) + (v - 1) * p)
    ops = fwd[:warmup]
    for k in range(warmup, len(fwd)):
        ops.append(fwd[k])
        ops.append(bwd[k - warmup])
    ops += bwd[len(fwd) - warmup:] if warmup else []
    return ops


def _worker_ops(schedule: Schedule, v: int, p: int, i: int, mbs: list[int]):
    if schedule == Schedule.GPIPE:
        return _order_gpipe(mbs)
    if v > 1:
        return _order_interleaved(mbs, p, i, v)
    return _order_1f1b(mbs, p - i - 1)


def _dependency(kind: int, chunk: int, stage: int, p: int, v: int):
    """(kind, chunk, stage) whose end this op waits for, or None."""
    if kind == FORWARD:
        if stage > 0:
            return FORWARD, chunk, stage - 1
        return (FORWARD, chunk - 1, p - 1) if chunk > 0 else None
    if stage < p - 1:
        return BACKWARD, chunk, stage + 1
    return (BACKWARD, chunk + 1, 0) if chunk < v - 1 else None


def simulate(micro_batches: list[list[int]], forward_s: list[list[float]], backward_s: list[list[float]],
             delay: LinkDelay, schedule: Schedule = Schedule.ONE_F_ONE_B, interleave: int = 1,
             timeline: bool = False) -> SimResult:
    """Simulate one iteration. micro_batches[i][r]: how many micro-batches replica r of stage i
    handles (each stage's counts sum to the same total); forward_s/backward_s[i][r]: its time for
    one micro-batch through the whole stage (all chunks).

    1F1B and GPipe run as an event simulation: an idle worker starts the ready backward with the
    lowest micro-batch index, else (1F1B: while it holds fewer than its in-flight limit) the
    ready forward with the lowest index; GPipe runs every forward before any backward. Interleaved
    1F1B follows Megatron-LM's fixed order per worker (stages then form independent lanes).
    Without a timeline, a lane (one replica per stage, or one kind of lane) of many micro-batches
    is extrapolated from its periodic steady state, exactly (_simulate_lane).
    """
    totals = {sum(c) for c in micro_batches}
    assert len(totals) == 1, f"stages handle different numbers of micro-batches: {micro_batches}"
    lanes = _simulate_lanes(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline)
    if lanes is not None:
        return lanes
    if all(len(c) == 1 for c in micro_batches):
        m, p = micro_batches[0][0], len(micro_batches)
        limits = [[m if schedule == Schedule.GPIPE else in_flight_limit([1] * p, i, m, m)] for i in range(p)]
        return _simulate_lane(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline, limits)
    if interleave > 1:
        return _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline)
    return _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline)


def _simulate_lanes(micro_batches, forward_s, backward_s, delay, schedule, interleave,
                    timeline: bool = False) -> SimResult | None:
    """The same result from one simulation per kind of lane, when the replicas form lanes.

    When every stage has the same replica counts [n_0 .. n_{d-1}], micro-batch j has the same
    owner r on every stage (assign_micro_batches is deterministic), so replica r of every stage
    forms lane r, and no operation of one lane waits for another lane. Lanes with the same
    micro-batch count, pass times, in-flight limits and transfer delays run identically (their
    micro-batches keep their relative order), so each kind is simulated once as a one-replica
    pipeline and its figures are copied to its lanes; with `timeline`, so are its passes, each
    lane's j-th micro-batch being the j-th of the global micro-batches it owns. Each kind is one
    lane, extrapolated past its threshold (_simulate_lane). None when the replicas do not form lanes,
    or every lane differs and none is long enough to extrapolate (nothing to save)."""
    p, counts = len(micro_batches), micro_batches[0]
    d = len(counts)
    if d < 2 or any(c != counts for c in micro_batches):
        return None
    total = sum(counts)
    gpipe = schedule == Schedule.GPIPE
    replicas = [d] * p
    kinds: dict[tuple, list[int]] = {}
    for r, n in enumerate(counts):
        key = (n, tuple(forward_s[i][r] for i in range(p)), tuple(backward_s[i][r] for i in range(p)),
               tuple(delay(i, r, i + 1, r) for i in range(p - 1)), tuple(delay(i + 1, r, i, r) for i in range(p - 1)),
               tuple(total if gpipe else in_flight_limit(replicas, i, n, total) for i in range(p)))
        kinds.setdefault(key, []).append(r)
    if len(kinds) == d and max(counts) <= extrapolation_threshold(p):
        return None                     # every lane differs and none is long enough to extrapolate
    end_s = [[0.0] * d for _ in range(p)]
    busy_s = [[0.0] * d for _ in range(p)]
    last_bwd = [[0.0] * d for _ in range(p)]
    frames = []
    owned: list[list[int]] = [[] for _ in range(d)]
    for j, r in enumerate(assign_micro_batches(counts) if timeline else ()):
        owned[r].append(j)
    for (n, _, _, _, _, limits), lane in kinds.items():
        r0 = lane[0]
        one = [[n] for _ in range(p)]
        fwd = [[forward_s[i][r0]] for i in range(p)]
        bwd = [[backward_s[i][r0]] for i in range(p)]
        link = (lambda i, _r, i2, _r2, r0=r0: delay(i, r0, i2, r0))
        sim = _simulate_lane(one, fwd, bwd, link, schedule, interleave, timeline, [[x] for x in limits])
        for r in lane:
            for i in range(p):
                end_s[i][r], busy_s[i][r], last_bwd[i][r] = sim.end_s[i][0], sim.busy_s[i][0], sim.last_backward_s[i][0]
            if timeline:
                frames.append(sim.timeline.assign(replica=r, micro_batch=[owned[r][j] for j in sim.timeline.micro_batch]))
    table = None
    if timeline:
        import pandas as pd   # lazy, as in _frame
        table = pd.concat(frames, ignore_index=True)
    return SimResult(max(max(row) for row in end_s), end_s, busy_s, last_bwd, table)


# ----------------------------------------------------------------------------- one lane, extrapolated
#
# A one-replica-per-stage pipeline (a lane) with fixed pass and transfer times settles into a
# periodic steady state, so one of m micro-batches costs what a few times p of them cost:
#
#   1F1B (event simulation). Let a cut be the moment stage 0 starts forward k. A run of m
#   micro-batches is, up to cut m, the run of an endless stream (stage 0 is the only one that knows
#   how many there are, and it starts forward m nowhere else), and after it a tail that depends on
#   the state at the cut alone: pending events, queues, in-flight counts and busy workers, times
#   taken from the cut and micro-batches from k. Once that state at cut k0 + c equals the one at
#   k0 (shifted by dt), the stream repeats every c micro-batches for ever, so m ends as
#   m' = k0 + c + (m - k0 - c) mod c does, q = (m - m') / c periods of dt later, each worker q
#   periods of busy time busier (m' a period past k0, so that a worker idle at the cut last ended
#   within the periodic part). A state that does not recur within the bound: the full simulation.
#   Interleaved 1F1B (Megatron's fixed order). Worker i's ops for m micro-batches are those of an
#   endless stream up to its pair (F_k, B_{k - w_i}) with k = v m - 1, then a cool-down; the pairs
#   with k < v m - i on every worker i are closed under their inputs (the chunk wrap from the last
#   stage back to stage 0 reaches p - 2 pairs ahead, the 2-pair skew between neighbours absorbs
#   it), so they run as in the stream, and everything after them depends only on the end times of
#   each worker's last such pair. When those 2p ends (relative to one of them) recur after c groups
#   of p micro-batches, m extrapolates as above.
#   GPipe: both phases are flow shops of identical jobs, whose longest path spends every extra
#   micro-batch on the slowest stage so far: forward j ends on stage i at
#   sum_{s<=i} (t_f,s + d_s-1) + j max_{s<=i} t_f,s; the backwards start when the last stage's last
#   forward ends, X, and end at X + sum_{s>=i} (t_b,s + d'_s) + j max_{s>=i} t_b,s (closed form).
#
# Times are floats: a state recurs when its times agree within RECURRENCE_TOLERANCE of one
# micro-batch's pass through the lane (rounding of the absolute times is far below it);
# tests/test_schedule.py holds the extrapolation equal to the full simulation.

RECURRENCE_TOLERANCE = 1e-9


def extrapolation_threshold(num_stages: int) -> int:
    """A lane of more micro-batches than twice this is extrapolated: its recurrence is searched for
    among this many, then twice as many, and so on up to half of them (a slowly settling lane), and
    a lane whose state does not recur by then is simulated in full: at most about twice the work of
    the full simulation, for any m."""
    return max(64, 32 * num_stages)


def _detection_bounds(num_stages: int, m: int):
    bound = extrapolation_threshold(num_stages)
    while bound <= m // 2:
        yield bound
        bound *= 2


def _simulate_lane(micro_batches, forward_s, backward_s, delay, schedule, v, timeline, limit) -> SimResult:
    """One lane (one replica per stage), extrapolated past extrapolation_threshold micro-batches
    when no timeline is asked for (a timeline lists every pass)."""
    m, p = micro_batches[0][0], len(micro_batches)
    if not timeline and m > extrapolation_threshold(p):
        f, b = [row[0] for row in forward_s], [row[0] for row in backward_s]
        if schedule == Schedule.GPIPE:
            return _gpipe_lane(m, f, b, delay)
        for bound in _detection_bounds(p, m):
            found = (_interleaved_lane if v > 1 else _one_f_one_b_lane)(m, f, b, delay, v, limit, bound)
            if found is not None:
                return found
    if v > 1:
        return _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, v, timeline)
    return _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline, limit)


def _lane_scale(f, b, delay) -> float:
    p = len(f)
    links = sum(delay(i, 0, i + 1, 0) + delay(i + 1, 0, i, 0) for i in range(p - 1))
    return sum(f) + sum(b) + links


def _gpipe_lane(m, f, b, delay) -> SimResult:
    p = len(f)
    start, slowest = 0.0, 0.0
    for i in range(p):                        # the last forward's end on the last stage
        start += f[i] + (delay(i - 1, 0, i, 0) if i else 0.0)
        slowest = max(slowest, f[i])
    last_forward = start + (m - 1) * slowest
    end, fill, slowest = [0.0] * p, 0.0, 0.0
    for i in reversed(range(p)):
        fill += b[i] + (delay(i + 1, 0, i, 0) if i < p - 1 else 0.0)
        slowest = max(slowest, b[i])
        end[i] = last_forward + fill + (m - 1) * slowest
    return SimResult(max(end), [[e] for e in end], [[m * (f[i] + b[i])] for i in range(p)],
                     [[x] for x in b])


class _Recurrence:
    """The states seen at cuts; `seen` says when one recurs (then `found` = (k0, k1, dt, dbusy))."""

    def __init__(self, tolerance_s: float):
        self.tolerance_s = tolerance_s
        self.states: dict[tuple, list[tuple[int, float, np.ndarray, list[float]]]] = {}
        self.found = None

    def seen(self, t: float, k: int, state: tuple, busy) -> bool:
        shape, times = state
        times = np.asarray(times)
        busy_now = [row[0] for row in busy]
        for k0, t0, times0, busy0 in self.states.get(shape, ()):
            if np.all(np.abs(times - times0) <= self.tolerance_s):
                self.found = (k0, k, t - t0, [x - x0 for x, x0 in zip(busy_now, busy0)])
                return True
        self.states.setdefault(shape, []).append((k, t, times, busy_now))
        return False


def _event_state(t, k, events, busy_until, ready_f, ready_b, in_flight, end_s):
    """The one-lane event simulation's state at a cut: (its discrete part, its times from t)."""
    pending = sorted(events)
    shape = (tuple((what, i, kind, j - k) for _, _, what, i, _, kind, j in pending),
             tuple(b[0] is None for b in busy_until),
             tuple(tuple(sorted(x - k for x in q[0])) for q in ready_f[1:]),
             tuple(tuple(sorted(x - k for x in q[0])) for q in ready_b),
             tuple(x[0] for x in in_flight))
    times = [e[0] - t for e in pending] + [b[0] - t for b in busy_until if b[0] is not None]
    return shape, times


def _shifted(sim: SimResult, periods: int, dt: float, dbusy: list[float]) -> SimResult:
    end = [[x + periods * dt for x in row] for row in sim.end_s]
    busy = [[x + periods * d for x in row] for row, d in zip(sim.busy_s, dbusy)]
    return SimResult(max(max(row) for row in end), end, busy, sim.last_backward_s)


def _one_f_one_b_lane(m, f, b, delay, v, limit, bound) -> SimResult | None:
    """m micro-batches through a 1F1B lane, extrapolated from a state that recurs within `bound`;
    None when none does."""
    p = len(f)
    fwd, bwd = [[x] for x in f], [[x] for x in b]
    watch = _Recurrence(RECURRENCE_TOLERANCE * _lane_scale(f, b, delay))
    _simulate_events([[bound]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, False, limit, watch)
    if watch.found is None:
        return None
    k0, k1, dt, dbusy = watch.found
    c = k1 - k0
    rest = k1 + (m - k1) % c       # a whole period past k0: every worker's last end before the cut is periodic
    if rest > m:
        return None
    base = _simulate_events([[rest]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, False, limit)
    return _shifted(base, (m - rest) // c, dt, dbusy)


def _interleaved_frontier(end: dict, groups: int, p: int, v: int) -> list[float] | None:
    """The ends of each worker's last pair (F_k, B_{k - w_i}), k = v m - i - 1, of the ops a run of
    m = groups p micro-batches shares with an endless stream; None while the warm-up lasts."""
    out = []
    for i in range(p):
        warmup = 2 * (p - i - 1) + (v - 1) * p
        k = v * groups * p - i - 1
        if k - warmup < 0:
            return None
        kb = k - warmup
        out.append(end[(FORWARD, (k % (v * p)) // p, i, k // (v * p) * p + k % p)])
        out.append(end[(BACKWARD, v - 1 - (kb % (v * p)) // p, i, kb // (v * p) * p + kb % p)])
    return out


def _interleaved_lane(m, f, b, delay, v, limit, bound) -> SimResult | None:
    """m micro-batches through an interleaved lane, extrapolated from ends that recur within `bound`
    micro-batches; None when they do not."""
    p = len(f)
    fwd, bwd = [[x] for x in f], [[x] for x in b]
    groups = bound // p
    end: dict = {}
    _simulate_static([[groups * p]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, False, end)
    tolerance = RECURRENCE_TOLERANCE * _lane_scale(f, b, delay)
    seen: list[tuple[int, float, np.ndarray]] = []
    for g in range(1, groups + 1):
        front = _interleaved_frontier(end, g, p, v)
        if front is None:
            continue
        rel = np.asarray(front) - front[0]
        match = next((x for x in seen if np.all(np.abs(rel - x[2]) <= tolerance)), None)
        if match is not None:
            g0, t0, _ = match
            c, dt = g - g0, front[0] - t0
            rest = g0 + (m // p - g0) % c
            base = _simulate_static([[rest * p]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, False)
            periods = (m // p - rest) // c
            return _shifted(base, periods, dt, [c * p * (f[i] + b[i]) for i in range(p)])
        seen.append((g, front[0], rel))
    return None


def _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline, limit=None,
                     watch: "_Recurrence | None" = None) -> SimResult | None:
    """`watch`: shown the state each time stage 0 is about to start a forward (one lane only); the
    simulation stops, returning None, once it has found the state recurring."""
    p = len(micro_batches)
    total = next(iter({sum(c) for c in micro_batches}))
    owners = [assign_micro_batches(c) for c in micro_batches]
    replicas = [len(c) for c in micro_batches]
    gpipe = schedule == Schedule.GPIPE
    if limit is None:
        limit = [[total if gpipe else in_flight_limit(replicas, i, n, total) for n in c]
                 for i, c in enumerate(micro_batches)]
    ready_f = [[[] for _ in c] for c in micro_batches]
    ready_b = [[[] for _ in c] for c in micro_batches]
    in_flight = [[0] * len(c) for c in micro_batches]
    forwards_left = [list(c) for c in micro_batches]
    busy_until = [[None] * len(c) for c in micro_batches]   # None: idle
    end_s = [[0.0] * len(c) for c in micro_batches]
    busy_s = [[0.0] * len(c) for c in micro_batches]
    rows: list[tuple] = []
    events: list[tuple] = []   # (time, seq, what, stage, replica, kind, micro_batch)
    seq = 0

    def push(t, what, i, r, kind=0, j=0):
        nonlocal seq
        heapq.heappush(events, (t, seq, what, i, r, kind, j))
        seq += 1

    def send(t, i, r, i2, r2, kind, j):        # an output leaves (i, r) for (i2, r2) over their link
        link = delay(i, r, i2, r2)
        if timeline and link > 0:
            rows.append((i2, r2, j, 0, "p2p", t, t + link))
        push(t + link, 0, i2, r2, kind, j)

    def try_start(t, i, r):
        if busy_until[i][r] is not None:
            return
        may_forward = ready_f[i][r] and in_flight[i][r] < limit[i][r]
        if ready_b[i][r] and not (gpipe and forwards_left[i][r] > 0):
            kind, j = BACKWARD, heapq.heappop(ready_b[i][r])
            duration = backward_s[i][r]
        elif may_forward:
            kind, j = FORWARD, heapq.heappop(ready_f[i][r])
            in_flight[i][r] += 1
            forwards_left[i][r] -= 1
            duration = forward_s[i][r]
        else:
            return
        if watch is not None and i == 0 and kind == FORWARD and watch.seen(t, j, _event_state(
                t, j, events, busy_until, ready_f, ready_b, in_flight, end_s), busy_s):
            stopped.append(t)
        busy_until[i][r] = t + duration
        busy_s[i][r] += duration
        if timeline:
            rows.append((i, r, j, 0, KIND_NAMES[kind], t, t + duration))
        push(t + duration, 1, i, r, kind, j)

    for j, owner in enumerate(owners[0]):
        ready_f[0][owner].append(j)
    stopped: list[float] = []
    for r in range(len(micro_batches[0])):
        try_start(0.0, 0, r)
    while events and not stopped:
        t, _, what, i, r, kind, j = heapq.heappop(events)
        if what == 0:                      # an input arrives
            heapq.heappush((ready_f if kind == FORWARD else ready_b)[i][r], j)
            try_start(t, i, r)
            continue
        busy_until[i][r] = None            # an operation ends
        end_s[i][r] = t
        if kind == FORWARD and i == p - 1:
            heapq.heappush(ready_b[i][r], j)
        elif kind == FORWARD:
            send(t, i, r, i + 1, owners[i + 1][j], FORWARD, j)
        else:
            in_flight[i][r] -= 1
            if i > 0:
                send(t, i, r, i - 1, owners[i - 1][j], BACKWARD, j)
        try_start(t, i, r)
    if stopped:
        return None
    stuck = [(i, r) for i, c in enumerate(micro_batches) for r in range(len(c))
             if forwards_left[i][r] or in_flight[i][r]]
    assert not stuck, f"pipeline schedule deadlocked at workers {stuck[:5]}"
    last_bwd = [list(row) for row in backward_s]
    makespan = max(max(row) for row in end_s)
    return SimResult(makespan, end_s, busy_s, last_bwd, _frame(rows) if timeline else None)


def _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, v, timeline,
                     end: dict | None = None) -> SimResult:
    """`end`, when given, receives each pass's end, keyed (kind, chunk, stage, micro-batch)."""
    p = len(micro_batches)
    owners = [assign_micro_batches(c) for c in micro_batches]
    workers = [(i, r) for i in range(p) for r in range(len(micro_batches[i]))]
    ops = []
    for i, r in workers:
        mbs = [j for j, o in enumerate(owners[i]) if o == r]
        ops.append(_worker_ops(schedule, v, p, i, mbs))
    end = {} if end is None else end
    waiting: dict[tuple, list[int]] = defaultdict(list)
    ptr, free_at = [0] * len(workers), [0.0] * len(workers)
    busy = [0.0] * len(workers)
    rows: list[tuple] = []
    ready = deque(range(len(workers)))
    while ready:
        w = ready.popleft()
        i, r = workers[w]
        worker_ops = ops[w]
        while ptr[w] < len(worker_ops):
            kind, chunk, j = worker_ops[ptr[w]]
            start = free_at[w]
            dep = _dependency(kind, chunk, i, p, v)
            if dep is not None:
                dep_key = (dep[0], dep[1], dep[2], j)
                arrived = end.get(dep_key)
                if arrived is None:
                    waiting[dep_key].append(w)
                    break
                src_replica = owners[dep[2]][j]
                link = delay(dep[2], src_replica, i, r) if dep[2] != i else 0.0
                if timeline and link > 0:
                    rows.append((i, r, j, chunk, "p2p", arrived, arrived + link))
                start = max(start, arrived + link)
            duration = (forward_s[i][r] if kind == FORWARD else backward_s[i][r]) / v
            finish = start + duration
            key = (kind, chunk, i, j)
            end[key] = finish
            free_at[w] = finish
            busy[w] += duration
            ptr[w] += 1
            if timeline:
                rows.append((i, r, j, chunk, KIND_NAMES[kind], start, finish))
            if key in waiting:
                ready.extend(waiting.pop(key))
    stuck = [workers[w] for w in range(len(workers)) if ptr[w] < len(ops[w])]
    assert not stuck, f"pipeline schedule deadlocked at workers {stuck[:5]}"
    shape = [[0.0] * len(c) for c in micro_batches]
    end_s, busy_s, last_bwd = ([row[:] for row in shape] for _ in range(3))
    for w, (i, r) in enumerate(workers):
        end_s[i][r], busy_s[i][r] = free_at[w], busy[w]
        last_bwd[i][r] = backward_s[i][r] / v
    return SimResult(max(free_at), end_s, busy_s, last_bwd, _frame(rows) if timeline else None)
