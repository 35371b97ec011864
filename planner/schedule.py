"""Discrete-event simulation of pipeline schedules with unequal stages and unequal replicas.

Each replica of each stage is a worker that executes a fixed list of operations: forward or
backward passes of one micro-batch (of one model chunk, when interleaved). An operation starts
when its worker is free and its input has arrived: the same pass of the micro-batch on the
previous stage (forward) or the next stage (backward), plus the point-to-point transfer time
between the two replicas. The simulation is the longest path through that graph, computed in
one pass with a ready queue, so it costs O(operations).

Orders per worker:
  GPipe            all forwards, then all backwards (Huang et al. 2019)
  1F1B             p - i - 1 warm-up forwards, then one forward / one backward, then cool-down
                   (Narayanan et al. 2021, PipeDream-Flush)
  interleaved 1F1B v chunks per worker, micro-batches in groups of p, warm-up
                   2 (p - i - 1) + (v - 1) p chunk-forwards (Narayanan et al. 2021, section 2.2.2;
                   the order of Megatron-LM's forward_backward_pipelining_with_interleaving)

A global micro-batch j is handled on stage i by one replica; replicas receive micro-batches in
proportion to their sample shares, interleaved (stride scheduling), so that replicas of equal
share form independent lanes.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from planner.elementwise import maximum, minimum
from planner.types import Schedule

FORWARD, BACKWARD = 0, 1
KIND_NAMES = ("forward", "backward")

# delay(from_stage, from_replica, to_stage, to_replica) -> seconds
LinkDelay = Callable[[int, int, int, int], float]

# simulate() takes every pass and transfer time up to a grid, a power of two chosen for its inputs
# (_grid): 2^-53 of EXACT_MARGIN times the iteration run serially, so that every sum of times on it that
# the simulation makes is exact in floating point. Two paths that end at the same instant then tie
# exactly, wherever their sums started (the order events were made decides, as the event loop says),
# and a lane's state, its times taken from a cut, recurs exactly (_simulate_lane). Without it a tie that
# rounding broke one way in one period and the other way in the next made an extrapolated lane differ
# from its full simulation by up to 0.6% (tests/test_schedule.py). Upward: no time is shortened; by at
# most a grid step, under 2^-48 of the serial iteration (each time).
EXACT_MARGIN = 16


def _grid(micro_batches, forward_s, backward_s, delay, v: int) -> float | None:
    """The grid of one simulate() call: EXACT_MARGIN times every micro-batch through every stage's
    slowest replica (each chunk crossing each link between replica 0 of neighbouring stages, and the
    wrap, each way) at 2^53 grid steps; None (times as given) when that is 0 or not finite."""
    p, total = len(micro_batches), sum(micro_batches[0])
    passes = sum(max(f + b for f, b in zip(fr, br)) for fr, br in zip(forward_s, backward_s))
    links = sum(delay(i, 0, i + 1, 0) + delay(i + 1, 0, i, 0) for i in range(p - 1))
    if v > 1 and p > 1:
        links += delay(p - 1, 0, 0, 0) + delay(0, 0, p - 1, 0)
    serial = total * (passes + v * links)
    return math.ldexp(1.0, math.frexp(EXACT_MARGIN * serial)[1] - 53) if 0 < serial < math.inf else None


def on_grid(seconds: float, grid: float | None) -> float:
    """`seconds` taken up to a multiple of `grid` (a power of two; None: as given); a time on it is kept."""
    return seconds if grid is None else math.ceil(seconds / grid) * grid


def _gridded(delay: LinkDelay, grid: float | None) -> LinkDelay:
    return delay if grid is None else (lambda i, r, i2, r2: on_grid(delay(i, r, i2, r2), grid))


@dataclass(frozen=True)
class SimResult:
    makespan_s: float
    end_s: list[list[float]]              # per stage, per replica: end of its last operation
    busy_s: list[list[float]]             # per stage, per replica: time spent computing
    last_backward_s: list[list[float]]    # per stage, per replica: duration of one backward
    timeline: object = None               # pandas DataFrame when asked for


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


def _worker_orders(schedule: Schedule, v: int, p: int, stages: np.ndarray, n: int, warmup=None):
    """The passes workers of these stages run, in order, each for n micro-batches of its own: arrays
    (kind, chunk, index of the micro-batch among the worker's own, in the order it received them), one
    row per worker.
      GPipe: every forward, then every backward.
      1F1B: min(p - i - 1, n) warm-up forwards (`warmup`, when given: each worker's own, its in-flight
        limit less one, at most n), then one forward and one backward, then the cool-down's backwards
        (Megatron-LM's forward_backward_pipelining_without_interleaving).
      interleaved: forwards in groups of p micro-batches (the last group may be shorter), each group
        through chunk 0, 1, .., v - 1, backwards through the chunks in reverse; a warm-up of
        min(v n, 2 (p - i - 1) + (v - 1) p) chunk-forwards, then one chunk-forward and one
        chunk-backward, then the cool-down's chunk-backwards."""
    index = np.arange(n)
    if schedule == Schedule.GPIPE or v == 1:
        chunk = np.zeros(n, dtype=np.int64)
        warmup = (np.full(len(stages), n) if schedule == Schedule.GPIPE
                  else np.minimum(p - stages - 1 if warmup is None else warmup, n))
    else:
        whole, left = divmod(n, p)
        chunk = np.concatenate([np.tile(np.repeat(np.arange(v), p), whole), np.repeat(np.arange(v), left)])
        index = np.concatenate([(np.arange(whole)[:, None, None] * p + np.arange(p)[None, None, :]
                                 + np.zeros((1, v, 1), dtype=np.int64)).ravel(),
                                np.tile(whole * p + np.arange(left), v)])
        warmup = np.minimum(2 * (p - stages - 1) + (v - 1) * p, len(chunk))
    back_chunk = chunk if schedule == Schedule.GPIPE else v - 1 - chunk
    forwards = len(chunk)
    q, w = np.arange(2 * forwards)[None, :], warmup[:, None]
    steady = q - w          # in the steady state forwards and backwards alternate
    tail = q >= 2 * forwards - w
    forward = (q < w) | (~tail & (steady % 2 == 0))
    at = np.where(q < w, q, np.where(tail, q - forwards, np.where(forward, w + steady // 2, steady // 2)))
    return np.where(forward, FORWARD, BACKWARD), np.where(forward, chunk[at], back_chunk[at]), index[at]


def _worker_order(schedule: Schedule, v: int, p: int, i: int, n: int):
    """_worker_orders of one worker of stage i."""
    return tuple(x[0] for x in _worker_orders(schedule, v, p, np.array([i]), n))


def in_flight_limit(replicas_per_stage: list[int], stage: int, own: int, total: int) -> int:
    """Micro-batches a 1F1B replica may hold between its forward and backward pass.

    Homogeneous 1F1B lets stage i of p hold p - i (Narayanan et al. 2021, section 2.2.1): one
    for itself and one per downstream stage. With replicated stages every downstream worker
    holds one, so stage i as a whole may hold W = sum of the replica counts of stages i..p-1,
    and a replica handling `own` of the `total` micro-batches gets its share, ceil(W own / total).
    """
    return window_in_flight_limit(sum(replicas_per_stage[stage:]), own, total)


def window_in_flight_limit(window: int, own: int, total: int) -> int:
    """in_flight_limit with W, the replicas of the stage and every later one, given."""
    return max(1, min(own, -(-window * own // total)))


def window_in_flight_floor(window_share, own):
    """window_in_flight_limit(window, own, total) from below, given window_share = window own / total
    as a float (the screen's windows, relaxed over positions; numbers or numpy arrays): the ceiling is
    taken a hair low so that rounding never lifts it above the exact limit."""
    return minimum(own, maximum(1.0, np.ceil(window_share * (1 - 1e-12))))


def window_in_flight_ceiling(window, own, total):
    """window_in_flight_limit from above, without its ceiling: window own / total + 1 (the bounds'
    (b7) and (b9), where more in flight means less time held; numbers or numpy arrays)."""
    return window * own / total + 1


def interleaved_in_flight(num_stages: int, stage: int, interleave: int, own: int) -> float:
    """Interleaved 1F1B with v chunks: stage i of p holds (2 (p - i - 1) + (v - 1) p + 1) chunks of
    1/v of the stage (Megatron-LM's warm-up plus the chunk in progress), which for i = 0 is
    Korthikanti's p (1 + (p - 1) / (p v)); in stage-equivalents, at most all of its own."""
    p, i, v = num_stages, stage, interleave
    return minimum(2 * (p - i - 1) + (v - 1) * p + 1, own * v) / v


def in_flight_micro_batches(schedule: Schedule, num_stages: int, stage: int, interleave: int, own: int,
                            window: int, total: int) -> float:
    """Micro-batches whose activations a replica holds at its peak: GPipe every one of its `own`;
    1F1B its window share (window_in_flight_limit); interleaved 1F1B interleaved_in_flight."""
    if schedule == Schedule.GPIPE:
        return own
    if interleave == 1:
        return window_in_flight_limit(window, own, total)
    return interleaved_in_flight(num_stages, stage, interleave, own)


def interleave_groups_fit(micro_batches_per_replica, num_stages: int) -> bool:
    """Interleaved 1F1B runs micro-batches in whole groups of p (Narayanan et al. 2021, section
    2.2.2; planner.types.Plan refuses other interleaved plans): every replica's count must be a
    multiple of the number of stages."""
    return all(n % num_stages == 0 for n in micro_batches_per_replica)


def simulate(micro_batches: list[list[int]], forward_s: list[list[float]], backward_s: list[list[float]],
             delay: LinkDelay, schedule: Schedule = Schedule.ONE_F_ONE_B, interleave: int = 1,
             timeline: bool = False, lanes: dict | None = None) -> SimResult:
    """Simulate one iteration. micro_batches[i][r]: how many micro-batches replica r of stage i
    handles (each stage's counts sum to the same total); forward_s/backward_s[i][r]: its time for
    one micro-batch through the whole stage (all chunks).

    1F1B, interleaved or not, runs Megatron-LM's fixed order per worker (_worker_orders: a warm-up of
    forwards, then one forward and one backward in turn, then the cool-down's backwards; a 1F1B
    worker's warm-up is its in-flight limit less one), each pass when its worker is free and its input
    has arrived, where every stage has the same replica counts (lanes). Where stages differ in replica
    counts, micro-batches cross between replicas and a fixed order can deadlock: 1F1B's workers there
    start the ready backward with the lowest index, else a ready forward while under their in-flight
    limit, an event simulation, as GPipe's (every forward before any backward).
    Without a timeline, a lane (one replica per stage, or one kind of lane) of many micro-batches
    is extrapolated from its periodic steady state, exactly (_simulate_lane).

    `lanes`: a dict the caller keeps across calls (planner.cost.evaluate's `kept`): each lane simulated
    without a timeline, by everything its simulation reads (_lane_key), so that a lane met again (another
    plan of the same stages, or the same plan's simulation asked again) is not simulated again.
    """
    totals = {sum(c) for c in micro_batches}
    assert len(totals) == 1, f"stages handle different numbers of micro-batches: {micro_batches}"
    grid = _grid(micro_batches, forward_s, backward_s, delay, interleave)
    forward_s = [[on_grid(x, grid) for x in row] for row in forward_s]
    backward_s = [[on_grid(x, grid) for x in row] for row in backward_s]
    delay = _gridded(delay, grid)
    lanes = None if timeline else lanes
    found = _simulate_lanes(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline, lanes, grid)
    if found is not None:
        return found
    if all(len(c) == 1 for c in micro_batches):
        m, p = micro_batches[0][0], len(micro_batches)
        limits = tuple(m if schedule == Schedule.GPIPE else in_flight_limit([1] * p, i, m, m) for i in range(p))
        key = None if lanes is None else _lane_key(schedule, interleave, (
            m, tuple(row[0] for row in forward_s), tuple(row[0] for row in backward_s),
            tuple([delay(i, 0, i + 1, 0) for i in range(p - 1)]), tuple([delay(i + 1, 0, i, 0) for i in range(p - 1)]),
            limits), delay, 0, grid)
        if key is not None and key in lanes:
            return lanes[key]
        sim = _simulate_lane(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline,
                             [[x] for x in limits], grid)
        if key is not None:
            lanes[key] = sim
        return sim
    lanes_apart = all(c == micro_batches[0] for c in micro_batches)    # replica r of every stage: lane r
    if interleave > 1 or (schedule == Schedule.ONE_F_ONE_B and lanes_apart):
        return _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, interleave, timeline,
                                grid=grid, limit=in_flight_limits(micro_batches))
    # stages of different replica counts pass micro-batches between lanes: there a fixed order of each worker's
    # own micro-batches can deadlock (a worker waits for a backward that waits for a forward it holds back),
    # so 1F1B's workers choose as they can, the ready backward first (_simulate_events)
    return _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline)


def in_flight_limits(micro_batches) -> list[list[int]]:
    """Each 1F1B worker's in-flight limit (in_flight_limit), [stage][replica]."""
    replicas, total = [len(c) for c in micro_batches], sum(micro_batches[0])
    return [[in_flight_limit(replicas, i, n, total) for n in c] for i, c in enumerate(micro_batches)]


def _lane_key(schedule, interleave, kind: tuple, delay, r: int, grid: float | None = None) -> tuple:
    """Everything the simulation of lane r (one replica per stage) reads: its schedule, its `kind` as
    _simulate_lanes groups lanes (micro-batches, pass times, delays between neighbours, in-flight limits)
    and, where interleaved chunks wrap around, the delays from the last stage back to the first and on;
    `simulate`'s `lanes` keeps lanes by it, with the `grid` its times are on (_grid)."""
    p = len(kind[1])
    wrap = (delay(p - 1, r, 0, r), delay(0, r, p - 1, r)) if interleave > 1 and p > 1 else ()
    return schedule, interleave, kind, wrap, grid


def _simulate_lanes(micro_batches, forward_s, backward_s, delay, schedule, interleave,
                    timeline: bool = False, memo: dict | None = None, grid: float | None = None) -> SimResult | None:
    """The same result from one simulation per kind of lane, when the replicas form lanes.

    When every stage has the same replica counts [n_0 .. n_{d-1}], micro-batch j has the same
    owner r on every stage (assign_micro_batches is deterministic), so replica r of every stage
    forms lane r, and no operation of one lane waits for another lane. Lanes with the same
    micro-batch count, pass times, in-flight limits and transfer delays run identically (their
    micro-batches keep their relative order), so each kind is simulated once as a one-replica
    pipeline and its figures are copied to its lanes; with `timeline`, so are its passes, each
    lane's j-th micro-batch being the j-th of the global micro-batches it owns. Each kind is one
    lane, extrapolated past its threshold (_simulate_lane), or taken from `memo` (simulate's `lanes`).
    None when the replicas do not form lanes, or every lane differs and none is long enough to
    extrapolate (nothing to save)."""
    p, counts = len(micro_batches), micro_batches[0]
    d = len(counts)
    if d < 2 or any(c != counts for c in micro_batches):
        return None
    total = sum(counts)
    gpipe = schedule == Schedule.GPIPE
    replicas = [d] * p
    kinds: dict[tuple, list[int]] = {}
    limits: dict[int, tuple[int, ...]] = {}          # a lane's in-flight limits follow from its count alone
    for r, (n, fwd_r, bwd_r) in enumerate(zip(counts, zip(*forward_s), zip(*backward_s))):
        if n not in limits:
            limits[n] = tuple(total if gpipe else in_flight_limit(replicas, i, n, total) for i in range(p))
        kind = (n, fwd_r, bwd_r, tuple([delay(i, r, i + 1, r) for i in range(p - 1)]),
                tuple([delay(i + 1, r, i, r) for i in range(p - 1)]), limits[n])
        kinds.setdefault(_lane_key(schedule, interleave, kind, delay, r, grid), []).append(r)
    if len(kinds) == d and max(counts) <= extrapolation_threshold(p):
        return None                     # every lane differs and none is long enough to extrapolate
    end_s = [[0.0] * d for _ in range(p)]
    busy_s = [[0.0] * d for _ in range(p)]
    last_bwd = [[0.0] * d for _ in range(p)]
    passes = []                 # with a timeline: each lane's kind's passes as columns, and the lane
    owned: list[list[int]] = [[] for _ in range(d)]
    for j, r in enumerate(assign_micro_batches(counts) if timeline else ()):
        owned[r].append(j)
    for key, lane in kinds.items():
        n, limits, r0 = key[2][0], key[2][5], lane[0]
        sim = memo.get(key) if memo is not None else None
        if sim is None:
            one = [[n] for _ in range(p)]
            fwd = [[forward_s[i][r0]] for i in range(p)]
            bwd = [[backward_s[i][r0]] for i in range(p)]
            link = (lambda i, _r, i2, _r2, r0=r0: delay(i, r0, i2, r0))
            sim = _simulate_lane(one, fwd, bwd, link, schedule, interleave, timeline, [[x] for x in limits], grid)
            if memo is not None:
                memo[key] = sim
        for r in lane:
            for i in range(p):
                end_s[i][r], busy_s[i][r], last_bwd[i][r] = sim.end_s[i][0], sim.busy_s[i][0], sim.last_backward_s[i][0]
        if timeline:
            columns = {name: sim.timeline[name].to_numpy() for name in sim.timeline.columns}
            passes += [(columns, r) for r in lane]
    return SimResult(max(max(row) for row in end_s), end_s, busy_s, last_bwd,
                     _lanes_frame(passes, owned) if timeline else None)


def _lanes_frame(passes, owned: list[list[int]]):
    """The timeline of lanes: each lane's kind's passes with the lane as their replica and its own
    micro-batches, the j-th of the kind's being the lane's j-th."""
    import pandas as pd   # lazy, as in _frame
    names = list(passes[0][0])
    rows = {name: [] for name in names}
    for columns, r in passes:
        for name in names:
            if name == "replica":
                rows[name].append(np.full(len(columns[name]), r, dtype=np.int64))
            elif name == "micro_batch":
                rows[name].append(np.asarray(owned[r], dtype=np.int64)[columns[name]])
            else:
                rows[name].append(columns[name])
    return pd.DataFrame({name: np.concatenate(rows[name]) for name in names})


# ----------------------------------------------------------------------------- one lane, extrapolated
#
# A one-replica-per-stage pipeline (a lane) with fixed pass and transfer times settles into a
# periodic steady state, so one of m micro-batches costs what a few times p of them cost:
#
#   1F1B and interleaved 1F1B (Megatron's fixed order). Worker i's ops for m micro-batches are those
#   of an endless stream up to its pair (F_k, B_{k - w_i}) with k = v m - 1, then a cool-down (w_i:
#   its warm-up). Interleaved, the pairs with k < v m - i on every worker i are closed under their
#   inputs (the chunk wrap from the last stage back to stage 0 reaches p - 2 pairs ahead, the 2-pair
#   skew between neighbours absorbs it); in 1F1B those with k < m, as the warm-ups do not grow down
#   the pipeline (B_{k - w_i} on stage i waits for stage i + 1's pair k - w_i + w_{i+1} <= k). So they
#   run as in the stream, and everything after them depends only on the end times of each worker's
#   last such pair. When those 2p ends (relative to one of them) recur after c groups (of p
#   micro-batches interleaved, of one in 1F1B), the stream repeats every c groups for ever, so m
#   ends as m' = g0 + (m - g0) mod c does (g0: where the ends first took that shape), q = (m - m') / c
#   periods of dt later, each worker q periods of busy time busier. Ends that do not recur within
#   the bound: the full simulation.
#   GPipe: both phases are flow shops of identical jobs, whose longest path spends every extra
#   micro-batch on the slowest stage so far: forward j ends on stage i at
#   sum_{s<=i} (t_f,s + d_s-1) + j max_{s<=i} t_f,s; the backwards start when the last stage's last
#   forward ends, X, and end at X + sum_{s>=i} (t_b,s + d'_s) + j max_{s>=i} t_b,s (closed form).
#
# Times are on the call's grid (_grid; simulate takes them there, and _static_passes an interleaved
# chunk's share), so the sums are exact and a state recurs when its times are equal; a lane whose
# times could pass 2^53 grid steps is simulated in full (_sums_exact). tests/test_schedule.py holds
# the extrapolation equal to the full simulation, ==.


def extrapolation_threshold(num_stages: int) -> int:
    """A lane of more micro-batches than twice this is extrapolated: its recurrence is searched for
    among this many, then twice as many, and so on up to half of them (a slowly settling lane), and
    a lane whose state does not recur by then is simulated in full: at most about twice the work of
    the full simulation, for any m. On exact times (the grid) the lanes of the 128-GPU benchmark's
    plans recur within 4 p micro-batches, interleaved ones within 4-8 p (it was 32 p while rounding
    could keep a state from recurring); `python benchmarks/lane_replay.py` replays them."""
    return max(32, 4 * num_stages)


def _detection_bounds(num_stages: int, m: int):
    bound = extrapolation_threshold(num_stages)
    while bound <= m // 2:
        yield bound
        bound *= 2


def _simulate_lane(micro_batches, forward_s, backward_s, delay, schedule, v, timeline, limit,
                   grid: float | None = None) -> SimResult:
    """One lane (one replica per stage), extrapolated past extrapolation_threshold micro-batches
    when no timeline is asked for (a timeline lists every pass) and its times, on `grid`, sum exactly
    (_sums_exact; without a grid, times as given)."""
    m, p = micro_batches[0][0], len(micro_batches)
    f, b = [row[0] for row in forward_s], [row[0] for row in backward_s]
    # (interleaved: in whole groups of p micro-batches, as _static_frontier counts them)
    if (not timeline and m > extrapolation_threshold(p) and not (v > 1 and m % p)
            and _sums_exact(m, f, b, delay, v, grid)):
        if schedule == Schedule.GPIPE:
            return _gpipe_lane(m, f, b, delay)
        for bound in _detection_bounds(p, m):
            found = _static_lane(m, f, b, delay, v, limit, bound, grid)
            if found is not None:
                return found
    if v > 1 or schedule == Schedule.ONE_F_ONE_B:
        return _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, v, timeline, grid=grid,
                                limit=limit)
    return _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline, limit)


def _sums_exact(m: int, f: list[float], b: list[float], delay, v: int, grid: float | None) -> bool:
    """Whether every time of the lane's simulation is below 2^53 steps of `grid` (so every sum is
    exact): at most every pass and transfer one after another (each micro-batch's chunks cross every
    link, the wrap included, each way). True without a grid (times as given)."""
    if grid is None:
        return True
    p = len(f)
    links = sum(delay(i, 0, (i + 1) % p, 0) + delay((i + 1) % p, 0, i, 0) for i in range(p if v > 1 else p - 1))
    return m * (sum(f) + sum(b) + v * links + 2 * p * v * grid) < math.ldexp(grid, 53)


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


def _shifted(sim: SimResult, periods: int, dt: float, dbusy: list[float]) -> SimResult:
    end = [[x + periods * dt for x in row] for row in sim.end_s]
    busy = [[x + periods * d for x in row] for row, d in zip(sim.busy_s, dbusy)]
    return SimResult(max(max(row) for row in end), end, busy, sim.last_backward_s)


def _static_frontier(end: list, groups: int, p: int, v: int, total: int, warmup: list[int]) -> list[float] | None:
    """The ends of each worker's last pair (F_k, B_{k - w_i}) of the ops a run of m micro-batches shares
    with an endless stream: k = v m - i - 1 interleaved (m = groups p), k = m - 1 in 1F1B (m = groups);
    w_i: worker i's warm-up. None while a warm-up lasts. `end`: each pass's end in a run of `total`
    micro-batches, by _pass_index."""
    out = []
    for i in range(p):
        k = v * groups * p - i - 1 if v > 1 else groups - 1
        kb = k - warmup[i]
        if kb < 0:
            return None
        out.append(end[_pass_index(FORWARD, (k % (v * p)) // p, i, k // (v * p) * p + k % p, v, p, total)])
        out.append(end[_pass_index(BACKWARD, v - 1 - (kb % (v * p)) // p, i, kb // (v * p) * p + kb % p, v, p,
                                   total)])
    return out


def _static_lane(m, f, b, delay, v, limit, bound, grid: float | None = None) -> SimResult | None:
    """m micro-batches through a 1F1B or interleaved lane (a fixed order), extrapolated from ends that
    recur within `bound` micro-batches (interleaved: in groups of p); None when they do not."""
    p = len(f)
    size = p if v > 1 else 1                  # micro-batches a group
    fwd, bwd = [[x] for x in f], [[x] for x in b]
    own_limit = None if v > 1 else limit      # 1F1B: each stage's warm-up is its in-flight limit less one
    warmup = [2 * (p - i - 1) + (v - 1) * p if v > 1 else limit[i][0] - 1 for i in range(p)]
    groups = bound // size
    end: list = []
    _simulate_static([[groups * size]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, False, end=end, grid=grid,
                     limit=own_limit)
    seen: list[tuple[int, float, np.ndarray]] = []
    for g in range(1, groups + 1):
        front = _static_frontier(end, g, p, v, groups * size, warmup)
        if front is None:
            continue
        rel = np.asarray(front) - front[0]
        match = next((x for x in seen if np.array_equal(rel, x[2])), None)
        if match is not None:
            g0, t0, _ = match
            c, dt = g - g0, front[0] - t0
            rest = g0 + (m // size - g0) % c
            base = _simulate_static([[rest * size]] * p, fwd, bwd, delay, Schedule.ONE_F_ONE_B, v, False, grid=grid,
                                    limit=own_limit)
            periods = (m // size - rest) // c
            chunks = [_chunk_s(f[i], v, grid) + _chunk_s(b[i], v, grid) for i in range(p)]   # as _static_passes
            return _shifted(base, periods, dt, [c * size * v * x for x in chunks])
        seen.append((g, front[0], rel))
    return None


def _workers(micro_batches) -> tuple[list[int], list[int], list[int]]:
    """The simulations number workers stage by stage: (first worker of each stage and one past the last,
    each worker's stage, each worker's replica)."""
    first = [0]
    for c in micro_batches:
        first.append(first[-1] + len(c))
    stage = [i for i, c in enumerate(micro_batches) for _ in c]
    replica = [r for c in micro_batches for r in range(len(c))]
    return first, stage, replica


def _owner_workers(micro_batches, first: list[int]) -> list[list[int]]:
    """Per stage, the worker that handles each global micro-batch (assign_micro_batches)."""
    return [[first[i]] * len(assign_micro_batches(c)) if len(c) == 1
            else [first[i] + r for r in assign_micro_batches(c)] for i, c in enumerate(micro_batches)]


def _by_stage(flat: list, first: list[int]) -> list[list]:
    return [flat[first[i]:first[i + 1]] for i in range(len(first) - 1)]


# event codes of the event simulation: an input arrives (forward, backward), a pass ends (forward,
# backward), a worker of stage 0 starts
_ARRIVES, _ENDS, _START = 0, 2, 4


def _simulate_events(micro_batches, forward_s, backward_s, delay, schedule, timeline, limit=None) -> SimResult:
    """GPipe's simulation, and 1F1B's where stages differ in replica counts: a worker starts the ready backward
    with the lowest index, else a ready forward while under its in-flight `limit` (lanes run 1F1B in Megatron-LM's
    fixed order, _simulate_static).

    Events are (time, sequence number, code, worker, micro-batch), processed in time order, ties in the
    order they were made; workers are numbered stage by stage (_workers)."""
    p = len(micro_batches)
    total = next(iter({sum(c) for c in micro_batches}))
    replicas = [len(c) for c in micro_batches]
    gpipe = schedule == Schedule.GPIPE
    if limit is None:
        limit = [[total] * len(c) for c in micro_batches] if gpipe else in_flight_limits(micro_batches)
    if not timeline and all(n == 1 for n in replicas):
        return _lane_events(total, forward_s, backward_s, delay, gpipe, limit)
    first, stage, replica = _workers(micro_batches)
    workers = first[-1]
    owner = _owner_workers(micro_batches, first)
    forward_to = [owner[i + 1] if i < p - 1 else None for i in stage]      # who gets a worker's outputs
    backward_to = [owner[i - 1] if i > 0 else None for i in stage]
    forward_link: list[dict[int, float]] = [{} for _ in range(workers)]  # the delay to each of them
    backward_link: list[dict[int, float]] = [{} for _ in range(workers)]
    fwd_s = [x for row in forward_s for x in row]
    bwd_s = [x for row in backward_s for x in row]
    held_max = [x for row in limit for x in row]
    ready_f: list[list[int]] = [[] for _ in range(workers)]
    ready_b: list[list[int]] = [[] for _ in range(workers)]
    in_flight = [0] * workers
    forwards_left = [n for c in micro_batches for n in c]
    busy_until: list[float | None] = [None] * workers    # None: idle
    end_s = [0.0] * workers
    busy_s = [0.0] * workers
    rows: list[tuple] = []
    for j, w in enumerate(owner[0]):
        ready_f[w].append(j)
    events = [(0.0, w, _START, w, 0) for w in range(replicas[0])]
    seq = len(events)
    push, pop = heapq.heappush, heapq.heappop
    f_arrives, b_arrives = _ARRIVES + FORWARD, _ARRIVES + BACKWARD      # as locals: read once an event
    f_ends, b_ends = _ENDS + FORWARD, _ENDS + BACKWARD
    while events:
        t, _, code, w, j = pop(events)
        if code == f_arrives:
            push(ready_f[w], j)
            if busy_until[w] is not None:
                continue
        elif code == b_arrives:
            push(ready_b[w], j)
            if busy_until[w] is not None:
                continue
        elif code == f_ends:
            busy_until[w] = None
            end_s[w] = t
            to = forward_to[w]
            if to is None:                 # the last stage turns its forward around
                push(ready_b[w], j)
            else:                          # the output leaves for its owner on the next stage
                w2 = to[j]
                link = forward_link[w].get(w2)
                if link is None:
                    link = forward_link[w][w2] = delay(stage[w], replica[w], stage[w2], replica[w2])
                if timeline and link > 0:
                    rows.append((stage[w2], replica[w2], j, 0, "p2p", t, t + link))
                push(events, (t + link, seq, f_arrives, w2, j))
                seq += 1
        elif code == b_ends:
            busy_until[w] = None
            end_s[w] = t
            in_flight[w] -= 1
            to = backward_to[w]
            if to is not None:             # the gradient leaves for its owner on the previous stage
                w2 = to[j]
                link = backward_link[w].get(w2)
                if link is None:
                    link = backward_link[w][w2] = delay(stage[w], replica[w], stage[w2], replica[w2])
                if timeline and link > 0:
                    rows.append((stage[w2], replica[w2], j, 0, "p2p", t, t + link))
                push(events, (t + link, seq, b_arrives, w2, j))
                seq += 1
        # the worker is idle: it starts its next pass, if it can
        queue = ready_b[w]
        if queue and not (gpipe and forwards_left[w]):
            j, duration, code = pop(queue), bwd_s[w], b_ends
        else:
            queue = ready_f[w]
            if not queue or in_flight[w] >= held_max[w]:
                continue
            j, duration, code = pop(queue), fwd_s[w], f_ends
            in_flight[w] += 1
            forwards_left[w] -= 1
        busy_until[w] = t + duration
        busy_s[w] += duration
        if timeline:
            rows.append((stage[w], replica[w], j, 0, KIND_NAMES[code - f_ends], t, t + duration))
        push(events, (t + duration, seq, code, w, j))
        seq += 1
    stuck = [(stage[w], replica[w]) for w in range(workers) if forwards_left[w] or in_flight[w]]
    assert not stuck, f"pipeline schedule deadlocked at workers {stuck[:5]}"
    last_bwd = [list(row) for row in backward_s]
    return SimResult(max(end_s), _by_stage(end_s, first), _by_stage(busy_s, first), last_bwd,
                     _frame(rows) if timeline else None)


def _lane_events(m: int, forward_s, backward_s, delay, gpipe: bool, limit) -> SimResult:
    """_simulate_events of one lane (one replica per stage), without a timeline: the same events
    in the same order, so the same floats, with less bookkeeping. A stage receives its forwards, and its
    backwards, in micro-batch order (the stage before it, or after it, runs them in that order: by induction
    from stage 0, whose forwards are all ready at once, and the last stage, which turns each forward around),
    so each ready queue is a count of passes arrived and one of passes started. An input that arrives while
    its stage is busy past its arrival (strictly: a pass ending at the same time ends first, its event made
    earlier) is counted at once instead of as an event: nothing reads that stage's queues before the pass
    ends, and the other events keep their relative order (times, then the order they were made)."""
    p = len(forward_s)
    fwd = [row[0] for row in forward_s]
    bwd = [row[0] for row in backward_s]
    to_next = [delay(i, 0, i + 1, 0) for i in range(p - 1)]
    to_prev = [0.0] + [delay(i, 0, i - 1, 0) for i in range(1, p)]
    held_max = [row[0] for row in limit]
    arrived_f, arrived_b = [m] + [0] * (p - 1), [0] * p
    started_f, started_b = [0] * p, [0] * p
    in_flight = [0] * p
    busy_until: list[float | None] = [None] * p
    end_s, busy_s = [0.0] * p, [0.0] * p
    last = p - 1
    f_arrives, b_arrives = _ARRIVES + FORWARD, _ARRIVES + BACKWARD
    f_ends, b_ends = _ENDS + FORWARD, _ENDS + BACKWARD
    events = [(0.0, 0, _START, 0)]
    seq = 1
    push, pop = heapq.heappush, heapq.heappop
    while events:
        t, _, code, w = pop(events)
        if code == f_arrives:
            arrived_f[w] += 1
            if busy_until[w] is not None:
                continue
        elif code == b_arrives:
            arrived_b[w] += 1
            if busy_until[w] is not None:
                continue
        elif code == f_ends:
            busy_until[w] = None
            end_s[w] = t
            if w == last:                  # the last stage turns its forward around
                arrived_b[w] += 1
            else:
                at = t + to_next[w]
                until = busy_until[w + 1]
                if until is not None and until > at:
                    arrived_f[w + 1] += 1
                else:
                    push(events, (at, seq, f_arrives, w + 1))
                    seq += 1
        elif code == b_ends:
            busy_until[w] = None
            end_s[w] = t
            in_flight[w] -= 1
            if w:
                at = t + to_prev[w]
                until = busy_until[w - 1]
                if until is not None and until > at:
                    arrived_b[w - 1] += 1
                else:
                    push(events, (at, seq, b_arrives, w - 1))
                    seq += 1
        # the stage is idle: it starts its next pass, if it can
        if arrived_b[w] > started_b[w] and not (gpipe and started_f[w] < m):
            started_b[w] += 1
            duration, code = bwd[w], b_ends
        elif arrived_f[w] > started_f[w] and in_flight[w] < held_max[w]:
            started_f[w] += 1
            in_flight[w] += 1
            duration, code = fwd[w], f_ends
        else:
            continue
        busy_until[w] = t + duration
        busy_s[w] += duration
        push(events, (t + duration, seq, code, w))
        seq += 1
    stuck = [(i, 0) for i in range(p) if started_f[i] < m or in_flight[i]]
    assert not stuck, f"pipeline schedule deadlocked at workers {stuck[:5]}"
    return SimResult(max(end_s), [[x] for x in end_s], [[x] for x in busy_s], [list(row) for row in backward_s])


def _pass_index(kind, chunk, stage, micro_batch, v: int, p: int, total: int):
    """Where _simulate_static keeps a pass's end: one slot per (kind, chunk, stage, global micro-batch)."""
    return ((kind * v + chunk) * p + stage) * total + micro_batch


def _chunk_s(seconds: float, v: int, grid: float | None) -> float:
    """One chunk's share of a pass of `seconds` through the whole stage: on `grid` where there is one."""
    return on_grid(seconds / v, grid)


def _static_passes(schedule, v: int, micro_batches, forward_s, backward_s, delay, timeline: bool,
                   grid: float | None = None, limit=None):
    """Each worker's passes in order (_workers' numbering), numbered worker after worker: (each worker's
    passes as (the number of its first, the number of the pass whose output each waits for (-1: none; the
    same micro-batch's pass on the previous stage, forward, or the next, backward, or across the chunk
    boundary between the last stage and the first; the number past the last pass for one that never
    runs), the transfer time of that output to this worker, its duration, and with `timeline` its
    (micro-batch, chunk, kind name)), the number of each (kind, chunk, stage, micro-batch) at its
    _pass_index). Workers of as many micro-batches are worked out together. `limit` (1F1B): each worker's
    in-flight limit, [stage][replica], its warm-up one less (_worker_orders)."""
    p, total = len(micro_batches), sum(micro_batches[0])
    first, stage, replica = _workers(micro_batches)
    owners = np.array([assign_micro_batches(c) for c in micro_batches])       # per stage, per micro-batch
    width = max(len(c) for c in micro_batches)
    alike: dict[int, list[int]] = {}
    for w, (i, r) in enumerate(zip(stage, replica)):
        alike.setdefault(micro_batches[i][r], []).append(w)
    base = np.cumsum([0] + [2 * v * micro_batches[i][r] for i, r in zip(stage, replica)])
    number = np.full(2 * v * p * total, base[-1])        # the pass at each _pass_index; unused: past the last
    groups = []
    for n, ws in alike.items():
        i, r = np.array([stage[w] for w in ws])[:, None], np.array([replica[w] for w in ws])[:, None]
        if all(len(micro_batches[stage[w]]) == 1 for w in ws):
            own = np.broadcast_to(np.arange(total), (len(ws), total))
        else:
            own = np.array([np.flatnonzero(owners[stage[w]] == replica[w]) for w in ws])
        warmup = (None if limit is None or v > 1 or schedule == Schedule.GPIPE
                  else np.array([limit[stage[w]][replica[w]] - 1 for w in ws]))
        kind, chunk, index = _worker_orders(schedule, v, p, i[:, 0], n, warmup)
        j = np.take_along_axis(own, index, axis=1)
        number[_pass_index(kind, chunk, i, j, v, p, total)] = base[ws][:, None] + np.arange(kind.shape[1])
        groups.append((ws, i, r, kind, chunk, j))
    passes: list[tuple] = [()] * len(stage)
    for ws, i, r, kind, chunk, j in groups:
        forward = kind == FORWARD
        # the dependency: forward from stage i - 1, or from the last stage's previous chunk at stage 0;
        # backward from stage i + 1, or from the first stage's next chunk at the last stage
        src = np.where(forward, np.where(i > 0, i - 1, p - 1), np.where(i < p - 1, i + 1, 0))
        src_chunk = chunk + np.where(forward, np.where(i > 0, 0, -1), np.where(i < p - 1, 0, 1))
        waits = (src_chunk >= 0) & (src_chunk < v)
        dep = np.where(waits, number[np.where(waits, _pass_index(kind, src_chunk, src, j, v, p, total), 0)], -1)
        # each transfer's (receiver, direction, sender) as one number; each asked of `delay` once
        crossing = waits & (src != i)
        pair = (((np.arange(len(ws))[:, None] * 2 + ~forward) * width + owners[src, j]))[crossing]
        used = np.zeros(2 * len(ws) * width, dtype=bool)
        used[pair] = True
        table = np.zeros(len(used))
        asked = np.flatnonzero(used)
        for x, row, back, sender in zip(asked.tolist(), (asked // width // 2).tolist(), (asked // width % 2).tolist(),
                                        (asked % width).tolist()):
            i2 = stage[ws[row]]
            table[x] = delay((i2 + 1 if i2 < p - 1 else 0) if back else (i2 - 1 if i2 > 0 else p - 1), sender,
                             i2, replica[ws[row]])
        link = np.zeros(kind.shape)
        link[crossing] = table[pair]
        times = np.array([[_chunk_s(forward_s[stage[w]][replica[w]], v, grid),
                           _chunk_s(backward_s[stage[w]][replica[w]], v, grid)] for w in ws])
        duration = np.where(forward, times[:, :1], times[:, 1:])
        rows = zip(base[ws].tolist(), dep.tolist(), link.tolist(), duration.tolist(),
                   zip(j.tolist(), chunk.tolist(), kind.tolist()) if timeline else [None] * len(ws))
        for w, (at, deps, links, durations, described) in zip(ws, rows):
            passes[w] = (at, deps, links, durations,
                         [(jj, c, KIND_NAMES[k]) for jj, c, k in zip(*described)] if timeline else None)
    return passes, number


def _simulate_static(micro_batches, forward_s, backward_s, delay, schedule, v, timeline,
                     end: list | None = None, grid: float | None = None, limit=None) -> SimResult:
    """Every worker runs its passes in their fixed order (_worker_order), each when the worker is free
    and its input has arrived: a longest path, worked out worker by worker, a worker that waits for an
    input resuming when the pass it waits for has run. `end`, when given, receives each pass's end, at
    its _pass_index (None for slots of no pass). `limit`: as _static_passes'."""
    first, stage, replica = _workers(micro_batches)
    workers = first[-1]
    passes, number = _static_passes(schedule, v, micro_batches, forward_s, backward_s, delay, timeline, grid, limit)
    done: list[float | None] = [None] * (sum(len(x[1]) for x in passes) + 1)   # each pass's end, one past: never
    waiter = [-1] * len(done)            # the worker waiting for a pass (each pass feeds one other pass)
    at, free_at, busy = [0] * workers, [0.0] * workers, [0.0] * workers
    rows: list[tuple] | None = [] if timeline else None
    _static_run(passes, done, waiter, (at, free_at, busy), stage, replica, rows)
    stuck = [(stage[w], replica[w]) for w in range(workers) if at[w] < len(passes[w][1])]
    assert not stuck, f"pipeline schedule deadlocked at workers {stuck[:5]}"
    if end is not None:
        end[:] = [done[x] for x in number.tolist()]
    last_bwd = [[x / v for x in row] for row in backward_s]
    return SimResult(max(free_at), _by_stage(free_at, first), _by_stage(busy, first), last_bwd,
                     _frame(rows) if timeline else None)


def _static_run(passes, done: list, waiter: list[int], state, stage, replica, rows: list | None) -> None:
    """_simulate_static's longest path: each worker runs its passes until one waits for an input, and
    resumes when that input's pass has run. `state`: each worker's passes run, end of its last and busy
    time, updated. Without a timeline any order that respects the inputs gives the same ends; with one
    (`rows`), each pass and transfer is a row in the order they are worked out."""
    if rows is None:
        return _static_ends(passes, done, waiter, state)
    at, free_at, busy = state
    ready = deque(range(len(passes)))
    while ready:
        w = ready.popleft()
        base, deps, links, durations, described = passes[w]
        k, n, free, spent = at[w], len(deps), free_at[w], busy[w]
        while k < n:
            start = free
            dep = deps[k]
            if dep >= 0:
                arrived = done[dep]
                if arrived is None:
                    waiter[dep] = w
                    break
                link = links[k]
                if rows is not None and link > 0:
                    j, chunk, _ = described[k]
                    rows.append((stage[w], replica[w], j, chunk, "p2p", arrived, arrived + link))
                arrived += link
                if arrived > start:
                    start = arrived
            duration = durations[k]
            free = start + duration
            slot = base + k
            done[slot] = free
            spent += duration
            if rows is not None:
                j, chunk, kind = described[k]
                rows.append((stage[w], replica[w], j, chunk, kind, start, free))
            if waiter[slot] >= 0:
                ready.append(waiter[slot])
            k += 1
        at[w], free_at[w], busy[w] = k, free, spent


def _static_ends(passes, done: list, waiter: list[int], state) -> None:
    """_static_run without a timeline: the same ends by the same sums (a pass starts at the later of its
    worker's last end and its input's end plus the transfer, and ends its duration later), in a tighter
    loop (the search simulates interleaved plans of 10^4 - 10^5 passes: about a quarter less time)."""
    at, free_at, busy = state
    ready = deque(range(len(passes)))
    popleft, append = ready.popleft, ready.append
    while ready:
        w = popleft()
        base, deps, links, durations, _ = passes[w]
        k, n, free, spent = at[w], len(deps), free_at[w], busy[w]
        for k in range(k, n):
            dep = deps[k]
            if dep >= 0:
                arrived = done[dep]
                if arrived is None:
                    waiter[dep] = w
                    break
                arrived += links[k]
                if arrived > free:
                    free = arrived
            duration = durations[k]
            free += duration
            slot = base + k
            done[slot] = free
            spent += duration
            if waiter[slot] >= 0:
                append(waiter[slot])
        else:
            k = n
        at[w], free_at[w], busy[w] = k, free, spent


def _frame(rows):
    # lazy: pandas costs about a second to import and only timelines (the app, --json) need it; the search
    # simulates schedules by the thousand without one
    import pandas as pd
    return pd.DataFrame(rows, columns=["stage", "replica", "micro_batch", "chunk", "kind", "start", "end"])


def closed_form_1f1b_s(num_micro_batches: int, num_stages: int, forward_s: float, backward_s: float,
                       interleave: int = 1) -> float:
    """(m + (p - 1) / v) (t_f + t_b): equal stages, no transfer time (Narayanan et al. 2021, eq. 1-2)."""
    return (num_micro_batches + (num_stages - 1) / interleave) * (forward_s + backward_s)
