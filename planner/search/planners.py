"""The planners: hetplan's pruned search and the baselines, behind one protocol.

Each planner turns (cluster, job, objective) into fast-scored `Candidate`s; `rank` then re-scores
the most promising with planner.cost.evaluate, which alone decides the order and the metrics.

  hetplan     every layout of planner.search.space, best first by the lower bounds of
              planner.search.bound (capacity per family, then pipeline per pool order and knob
              setting: busiest stage under memory caps, fill and drain, transfers, ZeRO traffic and
              optimizer step); a layout or knob setting whose bound cannot beat the `rescore`-th best
              candidate found so far is skipped. Exact split and shares (planner.search.split).
  megatron    (a) Megatron-style: one GPU type (the best single pool), a d x pp x tp grid, layers
              split evenly, samples split evenly, best knobs.
  uniform     (b) every pool, one tp for all, layers split evenly and samples split evenly over
              all GPUs as if they were alike, best knobs.
              Both baselines run the same best-first loop over their own spaces, pruned at their own
              `rescore`-th fast score, with the even split's busiest stage as a tighter bound per family
              (Scorer.even_family_busiest_s) and, per pool order and knob setting, the even split's own
              bound and memory check in place of the pipeline bounds (_push_even_orders: Scorer.even_runs_s,
              even_fits); a baseline's plan is the best by
              planner.cost.evaluate of the `rescore` best fast scores of its space (their floors
              also bound every stage's end and tail, score._late_s, so that few are evaluated).
  exhaustive  (c) every layout and knob setting of the space, each scored by planner.cost.evaluate,
              no bounds; for clusters of at most `exhaustive_max_gpus` GPUs.

Limits (explicit, in SearchOptions): the deterministic fast-score budget `max_fast_scores`, and the
CPU-time `time_limit_s` (hetplan; `baseline_time_limit_s` for each baseline), of which SEARCH_SHARE
goes to the best-first loop and the rest to re-scoring. A planner cut short records which limit
stopped it and the smallest lower bound left unexplored, from which search reports the gap.

A candidate on spot pools is kept by its expected key (its wall time and dollars with the waits for
reclaimed pools, planner.spot), as objective.estimate_key ranks it; its bounds scale the same way, and
the layouts' bounds, on nominal figures, stay lower bounds of it.
"""
from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple, Protocol

from planner.cost import CostOptions, Kept, evaluate
from planner.engines import ENGINES
from planner.engines import get as engine_profile
from planner.numerics import supports
from planner.search.bound import Bounds
from planner.search.objective import estimate_key, fast_key, fast_key_of_estimate
from planner.search.score import Candidate, Scorer
from planner.search.screen import screen_by_setting_s
from planner.search.space import (INTERLEAVES, zero_stages, searched_recomputes, Family, Knobs, Layout, allows,
                                  expert_tp_settings, hybrid_shard_of, knob_settings, layout_families, layouts,
                                  micro_batch_sizes, tp_degrees)
from planner.spot import wall_time_and_price
from planner.types import Cluster, InputError, Job, Objective, Pool, Precision


DROPPED_KEPT = 4096     # scored candidates not kept that search may still verify with the cost model (6 pools of the
#                         growth benchmark: Megatron-LM's loop leaves 1,950 with a floor below the answer)


@dataclass(frozen=True)
class SearchOptions:
    rescore: int = 24                      # fast-scored candidates re-scored by the cost model
    max_fast_scores: int = 200_000         # budget of fast scores (deterministic); reported when hit
    partial_pools: bool | None = None      # also try half, a quarter... of each pool; None: for cost/deadline
    exhaustive_max_gpus: int = 16
    verify: int = DROPPED_KEPT             # most candidates re-scored after ranking to prove the answer best (default:
    #                                        every one remembered whose bound is below the answer's, within the time limit)
    cost_options: CostOptions = field(default_factory=CostOptions)
    time_limit_s: float | None = 20.0      # CPU-time limit of hetplan's search (Clock); None: no limit
    baseline_time_limit_s: float | None = 5.0   # the same, for each baseline (megatron, uniform)
    beat: float | None = None              # an estimate key found elsewhere (another engine or setting): hetplan's
    #                                        search prunes what cannot beat it (search raises Beaten when nothing does)
    workers: int = 1                       # processes for the engines' searches (planner.search.parallel); 1: in turn
    shared_beat: object = field(default=None, compare=False, repr=False)   # with workers: a SharedBest, the best
    #                                        keys the searches before this one evaluated so far, pruned at as `beat`
    covered: tuple = ()                    # planner.engines.cover.Cover of this engine's space that another engine's
    #                                        complete search vouches for: hetplan's search skips it (_uncovered)
    best_only: bool = False                # search answers with its best plan alone: no next plan re-scored or named
    #                                        in its explanation, no Pareto front (hetplan plan --engine all's text)
    seeds: tuple = ()                      # with best_only: plans found elsewhere (other engines' answers); the best
    #                                        of those this engine runs prunes its first setting (search._seeded)
    part: tuple[int, int] = (0, 1)         # (k, n): hetplan's search over every n-th layout family from the k-th
    #                                        only (its proof pass too), one part of a space split over worker processes
    #                                        (planner.search.search._first_parts); (0, 1): the whole space

    def __post_init__(self):
        for name in ("time_limit_s", "baseline_time_limit_s"):
            limit = getattr(self, name)
            if limit is not None and not limit > 0:
                raise InputError(name, f"must be a positive number of seconds (or None for no limit), got {limit!r}")
        if not (isinstance(self.workers, int) and not isinstance(self.workers, bool) and self.workers >= 1):
            raise InputError("workers", f"must be a whole number of at least 1, got {self.workers!r}")
        if not (len(self.part) == 2 and 0 <= self.part[0] < self.part[1]):
            raise InputError("part", f"must be (k, n) with 0 <= k < n, got {self.part!r}")


# What planner.cost.evaluate keeps within one `search` call (its `kept`): the passes and simulation of each plan
# evaluated without detail, which the search reports in detail afterwards for some (its top plans, the baselines'
# best), and the pipeline lanes simulated, which other plans repeat. None outside a search.
EVALUATED: ContextVar[Kept | None] = ContextVar("hetplan_evaluated", default=None)


TIME_LIMIT = "time limit"
SEARCH_SHARE = 0.75      # of a planner's time limit for the best-first loop; the rest re-scores with the cost model
BUDGET = "fast-score budget"
LISTING_SHARE = 0.3     # of the search loop's time at most for listing the families
LISTING_CLOCK_EVERY = 64  # families listed between two looks at the clock (one costs about as much as a family)
SCREEN_CELLS = 32768     # (pool, family) cells per vectorised screening pass; the clock is checked between
FIRST_SCREEN_CHUNK = 256  # families in the first screening pass; each next pass doubles, up to the cells' share
# (a pass costs about the same up to some hundreds of families, 15-30 ms, its numpy calls' fixed cost)
SHARED_READ_EVERY = 64   # thresholds between two reads of SearchOptions.shared_beat (a read: ~1 us)


@dataclass
class Considered:
    """What a planner saw: candidates kept for re-scoring, the fast Pareto front, bookkeeping."""
    kept: list[tuple[float, int, Candidate]] = field(default_factory=list)
    front: list[Candidate] = field(default_factory=list)
    fast_scores: int = 0
    budget_hit: bool = False
    best_with_pool: dict[str, float] = field(default_factory=dict)     # fast key of the best candidate using it
    bound_with_pool: dict[str, float] = field(default_factory=dict)    # best lower bound of layouts using it
    fits_with_pool: set[str] = field(default_factory=set)
    scored_with_pool: set[str] = field(default_factory=set)    # a setting of a layout using it was scored
    precision_excluded: dict[str, str] = field(default_factory=dict)
    exact: bool = False                    # candidates were scored by the cost model directly
    stopped_by: str | None = None          # TIME_LIMIT or BUDGET when the search did not finish; None: complete
    lower_bound: float = math.inf          # smallest fast-key bound of what was left unexplored
    pruned_floor: float = math.inf         # smallest fast-key bound of what the threshold pruned
    dropped: list = field(default_factory=list)   # (bound, tie, candidate) scored but not kept, smallest bounds
    dropped_floor: float = math.inf        # smallest bound of the scored candidates not kept in `dropped`
    time_limit_s: float | None = None      # the limit this run had
    rescored: int = 0                      # candidates re-scored with the cost model
    rescore_cut: bool = False              # the time limit stopped the re-scoring
    verified: int = 0                      # scored candidates search re-scored to prove the answer
    proof_pass: bool = False               # search ran a proof pass below the answer's key
    incumbents: list = field(default_factory=list)   # (plan, estimate) of new best candidates, evaluated
    evaluated: dict = field(default_factory=dict)    # plan -> its planner.cost.evaluate(detail=False) estimate
    method: str = ""                       # the planner that filled this in


class Clock:
    """The time limit of one planner run, in CPU seconds of the thread that searches
    (time.thread_time): other work on a busy machine, and other sessions of the app, do not cut a
    search shorter; `share` of it for a first phase."""

    def __init__(self, limit_s: float | None):
        self.start, self.limit_s = time.thread_time(), limit_s

    def elapsed(self) -> float:
        return time.thread_time() - self.start

    def expired(self, share: float = 1.0) -> bool:
        return self.limit_s is not None and time.thread_time() - self.start >= self.limit_s * share


class ListingStop:
    """Asked by layout_families as it lists (space.layout_families' `stop`): true once the listing
    has had its share of the time limit (as `_best_first` counts it); `hit` says it ended the list."""

    def __init__(self, limit_s: float | None):
        self.clock, self.hit = Clock(limit_s), False

    def __call__(self) -> bool:
        self.hit = self.hit or self.clock.expired(share=SEARCH_SHARE * LISTING_SHARE)
        return self.hit


class Planner(Protocol):
    name: str

    def consider(self, cluster: Cluster, job: Job, objective: Objective, deadline_hours: float | None,
                 options: SearchOptions, bounds: Bounds | None = None) -> Considered:
        """`bounds`: the scorer and bounds of this (cluster, job, options) to reuse (their caches), as
        the search shares them between its own planner, its proof pass and the baselines."""


# ----------------------------------------------------------------------------- shared pieces

def shared_bounds(cluster: Cluster, job: Job, options: SearchOptions) -> Bounds:
    """A scorer and its bounds for one (cluster, job, options); the planners given the same one
    share what it caches (pass times, shares, links, memory caps, per stage rates)."""
    return Bounds(Scorer(cluster, job, options.cost_options))


def usable_pools(cluster: Cluster, job: Job) -> tuple[tuple[Pool, ...], dict[str, str]]:
    """The pools that can train the job's precision under its engine, and why the others cannot."""
    engine = engine_profile(job.engine)
    if job.precision is not None and job.precision not in engine.space.precisions:
        others = [e for e in ENGINES.values() if job.precision in e.space.precisions]
        raise InputError("precision", f"{engine.title} does not train in {job.precision.value}; it offers "
                                      f"{', '.join(p.value for p in engine.space.precisions)}"
                                      + (f"; {' and '.join(e.title for e in others)} train in {job.precision.value} "
                                         f"(engine {' or '.join(e.name for e in others)})" if others else ""))
    if job.precision is not None:
        excluded = {p.name: f"{lack} and the job asks for {job.precision.value}" for p in cluster.pools
                    for lack in (supports(p.gpu, job.precision),) if lack}
    elif Precision.FP16 not in engine.space.precisions:     # a default precision: bf16 or fp16 per layout
        only = ", ".join(p.value for p in engine.space.precisions)
        excluded = {p.name: f"{p.gpu.id} has no bf16 and {engine.title} trains in {only} only"
                    for p in cluster.pools if not p.gpu.supports_bf16}
    else:
        return cluster.pools, {}
    return tuple(p for p in cluster.pools if p.name not in excluded), excluded


def precision_for(job: Job, subset: tuple[Pool, ...]) -> Precision:
    if job.precision is not None:
        return job.precision
    if Precision.FP16 not in engine_profile(job.engine).space.precisions:
        return Precision.BF16
    return Precision.BF16 if all(p.gpu.supports_bf16 for p in subset) else Precision.FP16


def layout_price(scorer: Scorer, layout: Layout | Family) -> float:
    return scorer.price_per_hour(layout)


class _Keeper:
    """The `limit` best candidates by fast key (ties: first found), and the fast Pareto front."""

    def __init__(self, considered: Considered, limit: int, objective: Objective, job: Job, deadline_hours,
                 cluster: Cluster):
        self.c, self.limit = considered, limit
        self.objective, self.job, self.deadline_hours = objective, job, deadline_hours
        self.cluster = cluster
        self.spot = objective != Objective.ENERGY and any(p.spot for p in cluster.pools)
        self.order = 0

    fixed_threshold: float | None = None    # a proof pass: prune at this key, keep nothing (all to `dropped`)
    # evaluates a new best candidate with the cost model: returns its estimate key as a fast key
    evaluate_incumbent: Callable[[Candidate], float] | None = None
    incumbent: float = math.inf               # the best such key so far
    ceiling: float = math.inf                 # prune at this fast key whatever is kept (SearchOptions.beat)

    def threshold(self) -> float:
        """Prune bounds at or above this fast key: the `limit`-th best fast key, but never below the
        best evaluated key so far (fast keys can be optimistic; what could beat the incumbent by the
        cost model is visited, so that search can prove its answer without a second pass)."""
        if self.fixed_threshold is not None:
            return self.fixed_threshold
        if self.shared is not None:
            self._read_shared()
        kth = self.c.kept[-1][0] if len(self.c.kept) >= self.limit else math.inf
        return min(self.ceiling, max(kth, self.incumbent) if kth < math.inf else kth)

    covered: tuple = ()                       # SearchOptions.covered: settings another engine's search vouches for
    shared = None                             # SearchOptions.shared_beat: read every SHARED_READ_EVERY thresholds
    reads = 0

    def _read_shared(self) -> None:
        """Lower the ceiling to the best key the searches before this one have evaluated by now (it
        only falls, as the threshold must: see _visit's pruned_floor)."""
        if self.reads % SHARED_READ_EVERY == 0:
            self.ceiling = min(self.ceiling, fast_key_of_estimate(self.objective, self.job, self.shared.ceiling()))
        self.reads += 1

    def add(self, cand: Candidate, bound: float = -math.inf) -> None:
        """`bound`: the fast-key lower bound the search had for the candidate's setting (its
        pipeline bound), which also bounds planner.cost.evaluate (tests/test_one_cost_model.py);
        candidates that are not kept are remembered with it for search's verification."""
        key = self._key(cand, cand.time_s)
        bound = max(bound, self._key(cand, cand.floor_s))
        for name in cand.layout.gpus_by_pool():
            self.c.fits_with_pool.add(name)
            self.c.best_with_pool[name] = min(self.c.best_with_pool.get(name, math.inf), key)
        self._add_front(cand)
        if key == math.inf:
            return
        self.order += 1
        if key >= self.threshold() or self.fixed_threshold is not None:
            self._drop(bound, cand)
            return
        kept = self.c.kept
        kept.append((key, self.order, cand, bound))
        kept.sort(key=lambda e: (e[0], e[1]))
        if kept[0][2] is cand and self.evaluate_incumbent is not None:
            self.incumbent = min(self.incumbent, self.evaluate_incumbent(cand))
        for _, _, evicted, evicted_bound in kept[self.limit:]:
            self._drop(evicted_bound, evicted)
        del kept[self.limit:]

    def enough(self, layout: Layout, busiest_s: float, price: float) -> bool:
        """Whether add() would keep nothing of a candidate of `layout` at `price` whose iteration takes
        at least `busiest_s` but its place among the dropped (Scorer.score's `enough`): its key cannot
        beat the threshold (so neither can its bound, and search never verifies it), the fast front
        has one at least as fast and as cheap, and each pool it uses a best key at least as good."""
        if self.spot:
            return False
        key = fast_key(self.objective, self.job, busiest_s, price, self.deadline_hours)
        if key < self.threshold() or any(self.c.best_with_pool.get(name, math.inf) > key
                                         for name in layout.gpus_by_pool()):
            return False
        cost = busiest_s * price
        return any(o.time_s <= busiest_s and o.time_s * o.price_per_hour_usd <= cost for o in self.c.front)

    def _key(self, cand: Candidate, time_s: float) -> float:
        """The fast key of the candidate at this iteration time; on spot pools by its expected wall time and
        dollars (planner.spot), as objective.estimate_key ranks (energy stays nominal there too)."""
        price = cand.price_per_hour_usd
        if self.spot:
            time_s, price = wall_time_and_price(self.cluster, cand.layout.gpus_by_pool(), time_s, price)
        return fast_key(self.objective, self.job, time_s, price, self.deadline_hours)

    def _drop(self, bound: float, cand: Candidate) -> None:
        """Remember the DROPPED_KEPT candidates with the smallest bounds; the rest only by their
        smallest bound."""
        self.order += 1
        heapq.heappush(self.c.dropped, (-bound, self.order, cand))
        if len(self.c.dropped) > DROPPED_KEPT:
            worst, _, _ = heapq.heappop(self.c.dropped)
            self.c.dropped_floor = min(self.c.dropped_floor, -worst)

    def _add_front(self, cand: Candidate) -> None:
        cost = cand.time_s * cand.price_per_hour_usd
        for other in self.c.front:
            if other.time_s <= cand.time_s and other.time_s * other.price_per_hour_usd <= cost:
                return
        self.c.front = [o for o in self.c.front
                        if not (cand.time_s <= o.time_s and cost <= o.time_s * o.price_per_hour_usd)]
        self.c.front.append(cand)


def partial_pools(objective: Objective, options: SearchOptions) -> bool:
    """Whether the search also lists half, a quarter, ... of each pool (SearchOptions.partial_pools)."""
    if options.partial_pools is not None:
        return options.partial_pools
    return objective != Objective.THROUGHPUT


# ----------------------------------------------------------------------------- best-first search

Scan = Callable[[Scorer, Layout, Precision, _Keeper, dict], "dict | None"]   # returns settings left to score


def _best_first(shared: Bounds, families: Iterable[Family], keeper: _Keeper, options: SearchOptions,
                scan: Scan, pools: tuple[Pool, ...], time_limit_s: float | None, even: bool = False,
                listing: ListingStop | None = None) -> None:
    """Visit layouts in order of their lower bound (planner.search.bound) and stop at the first
    whose bound cannot beat the `rescore`-th best fast score found so far.

    Families are listed with their capacity bound and screened, cheapest first and a vectorised
    chunk at a time, when the heap reaches them (planner.search.screen: a bound for all their pool
    orders); a screened family that comes out is bounded in Python for all its orders at once
    (chains of several pools), then per first pool and per order (planner.search.bound, per knob
    setting); when a layout comes out, `scan` scores its knob settings whose own bound can still
    win. Every bound holds for every candidate it covers, so what is skipped could not have been
    kept.

    Two limits cut the search short, and `keeper.c` records which (`stopped_by`) and the smallest
    bound of what was left (`lower_bound`, for the optimality gap): the deterministic fast-score
    budget, and the CPU-time `time_limit_s` (Clock), checked per family listed, per pool order bounded
    and per layout scanned. Listing the families may use at most LISTING_SHARE of the loop's time;
    the families not listed are then bounded by `_whole_cluster_key` (every GPU at its best rate)."""
    scorer = shared.scorer
    c, job, objective, deadline = keeper.c, scorer.job, keeper.objective, keeper.deadline_hours
    clock = Clock(None if time_limit_s is None else time_limit_s * SEARCH_SHARE)
    c.time_limit_s = time_limit_s
    bounds = shared.sharing(even)      # even: the baselines' even layer splits
    unlisted, listed = math.inf, []
    for k, family in enumerate(families):
        if k % LISTING_CLOCK_EVERY == 0 and clock.expired(share=LISTING_SHARE):
            unlisted, c.stopped_by = _whole_cluster_key(scorer, pools, objective, deadline), TIME_LIMIT
            break
        price = layout_price(scorer, family) if objective != Objective.THROUGHPUT else 0.0   # its key reads no price
        capacity = bounds.capacity_s(family)
        if even:        # the baselines' even splits: a stage's layers are known up to the pool order
            capacity = max(capacity, scorer.even_family_busiest_s(family))
        key = fast_key(objective, job, capacity, price, deadline)
        if key < math.inf:
            listed.append((key, len(listed), family, price))
    if listing is not None and listing.hit and unlisted == math.inf:     # the listing ended itself at the limit
        unlisted, c.stopped_by = _whole_cluster_key(scorer, pools, objective, deadline), TIME_LIMIT
    frontier = _Frontier(scorer, keeper, listed, max(64, SCREEN_CELLS // max(1, len(pools))), screened=not even)
    try:
        _visit(scorer, bounds, frontier, keeper, options, scan, clock, unlisted)
    finally:
        frontier.record_pool_bounds(c)


def _first_plan(scorer: Scorer, bounds: Bounds, listed: list, keeper: _Keeper, scan: Scan) -> None:
    """A plan for a search whose limit came before its first one, so that any limit answers: the
    families in order of their capacity bound, each in its first pool order, until one whose most
    memory-frugal knobs hold the model (Scorer.could_fit, a few dictionary look-ups for those that
    do not) yields a candidate. The families that do not fit have the best capacity bounds at
    scale (big models on many GPUs), which is why the loop finds its first plan late there; its
    work past the limit is one layout's knob settings. Run only then: before the loop, it costs a
    search with time to spare the plans it would have reached instead (4,096 GPUs at a 10 s limit:
    129,014 against 263,031 tokens/s)."""
    job = scorer.job
    keeper.evaluate_incumbent = None     # past the limit: no cost-model run per new best (seconds each at 10^6 GPUs)
    for _, _, family, _ in listed:
        if keeper.c.kept:
            return
        order = tuple(range(len(family.subset)))     # its first order (orders() would list them all: n!)
        layout = family.layout(order)
        if not scorer.could_fit(layout, min(micro_batch_sizes(job.global_batch)), 1):
            continue
        keyed = _keyed_bounds(scorer, bounds, family, layout_price(scorer, family), keeper, order)
        if keyed:
            scan(scorer, layout, precision_for(job, family.subset), keeper, keyed)


class _Frontier:
    """The best-first heap of (key, tie, detail, family) entries. Families are screened lazily
    (planner.search.screen), cheapest capacity bound first, a vectorised chunk at a time: one
    sentinel entry, keyed by the smallest capacity bound not yet screened, stands for the rest, so
    families whose capacity bound cannot win are never screened."""

    def __init__(self, scorer: Scorer, keeper: _Keeper, listed: list, chunk_size: int, screened: bool = True):
        self.scorer, self.keeper, self.chunk_size = scorer, keeper, chunk_size
        # the baselines' even splits are not screened: their orders' keys (_push_even_orders) cost less than the
        # screen saves them (uniform baseline, 128 / 4,096 GPUs: 0.09 -> 0.06, 0.31 -> 0.21 CPU s)
        self.screened = screened
        self.listed = sorted(listed)                      # (capacity key, tie, family, price)
        self.bound = [entry[0] for entry in self.listed]  # each family's best key so far
        self.capacity = list(self.bound)                  # each family's capacity key, ascending
        self.heap: list = []
        self.ties = itertools.count()
        self.next = 0
        self.chunk = min(FIRST_SCREEN_CHUNK, chunk_size)
        self.kept_size = 0
        self.by_setting: dict[int, tuple] = {}    # id(family) -> (its screen per setting, the settings), until used
        if self.listed:
            self.push(self.listed[0][0], UNSCREENED, None)

    def push(self, key: float, detail, family: Family | None) -> None:
        heapq.heappush(self.heap, (key, next(self.ties), detail, family))

    def pop(self):
        return heapq.heappop(self.heap)

    def screen_next(self) -> None:
        """Screen the next chunk of listed families and put those that can still win on the heap."""
        s, keeper = self.scorer, self.keeper
        threshold = keeper.threshold()
        size = self.chunk
        if threshold < math.inf:     # no first plan to hurry: every family whose capacity bound can win, at once
            size = max(1, min(self.chunk_size, bisect.bisect_left(self.capacity, threshold) - self.next))
        start, chunk = self.next, self.listed[self.next:self.next + size]
        self.next += len(chunk)
        self.chunk = min(2 * self.chunk, self.chunk_size)   # small first chunks: a first plan comes early
        values, by_setting, settings = (screen_by_setting_s(s, [family for _, _, family, _ in chunk])
                                        if self.screened else (None, None, None))
        values = None if values is None else values.tolist()
        for j, (capacity_key, _, family, price) in enumerate(chunk):
            key = capacity_key if values is None else max(capacity_key, fast_key(keeper.objective, s.job, values[j],
                                                                                 price, keeper.deadline_hours))
            self.bound[start + j] = key
            if key < threshold:
                self.push(key, None, family)
                if by_setting is not None and _bounded_in_any_order(family):     # the families _visit asks
                    self.by_setting[id(family)] = (by_setting[j], settings)
        if self.next < len(self.listed):
            self.push(self.listed[self.next][0], UNSCREENED, None)

    def live_settings(self, family: Family, price: float) -> frozenset | None:
        """The (micro-batch, interleave, recompute, ZeRO stage) settings of `family` whose screen at its
        (micro-batch, recompute) setting can still beat the threshold (screen_by_setting_s), for its
        pipeline bounds to leave the others out; None where the family was not screened, or was asked before."""
        found = self.by_setting.pop(id(family), None)
        if found is None:
            return None
        row, settings = found
        k, job = self.keeper, self.scorer.job
        threshold = k.threshold()
        zeros = zero_stages(job.offload, family.max_replicas_per_stage * self.scorer.cp)
        return frozenset((mb, v, rc, zero) for (mb, rc), bound in zip(settings, row.tolist())
                         if fast_key(k.objective, job, bound, price, k.deadline_hours) < threshold
                         for v in INTERLEAVES for zero in zeros)

    def drop_losers(self) -> None:
        """Drop the entries that can no longer win, once the heap has grown: memory stays bounded."""
        if len(self.heap) > 2 * self.kept_size + 1024:
            threshold = self.keeper.threshold()
            self.heap = [e for e in self.heap if e[0] < threshold]
            heapq.heapify(self.heap)
            self.kept_size = len(self.heap)

    def record_pool_bounds(self, c: Considered) -> None:
        """The least bound of the families on each pool (every pool of a family's subset has GPUs in it), by
        way of the least of each subset's families (the listing shares one subset tuple among its families)."""
        least: dict[int, tuple[float, tuple]] = {}
        for (_, _, family, _), key in zip(self.listed, self.bound):
            seen = least.get(id(family.subset))
            if seen is None or key < seen[0]:
                least[id(family.subset)] = (key, family.subset)
        for key, subset in least.values():
            for pool in subset:
                c.bound_with_pool[pool.name] = min(c.bound_with_pool.get(pool.name, math.inf), key)


UNSCREENED = ("not screened",)   # heap sentinel: the families not yet screened


def _visit(scorer: Scorer, bounds: Bounds, frontier: _Frontier, keeper: _Keeper, options: SearchOptions,
           scan: Scan, clock: Clock, unlisted: float) -> None:
    """The best-first loop of _best_first."""
    c, job = keeper.c, scorer.job
    while frontier.heap:
        key, _, detail, family = frontier.pop()
        if key >= keeper.threshold():
            # every prune compared a bound with the threshold of its moment, which only falls:
            # whatever was pruned has a bound of at least the final one
            c.pruned_floor = min(keeper.threshold(), unlisted)
            break
        if _out_of_time(clock, c) or c.fast_scores >= options.max_fast_scores:
            c.stopped_by = TIME_LIMIT if _out_of_time(clock, c) else BUDGET
            c.budget_hit = c.stopped_by == BUDGET
            c.lower_bound = min(key, unlisted)
            if not c.kept and keeper.ceiling == math.inf:   # any limit answers (a plan beaten elsewhere needs none)
                _first_plan(scorer, bounds, frontier.listed, keeper, scan)
            return
        if detail is UNSCREENED:
            frontier.screen_next()
            continue
        if detail is None and _bounded_in_any_order(family) and keeper.threshold() < math.inf and not bounds.even:
            live = frontier.live_settings(family, layout_price(scorer, family))
            any_order, settings = _any_order_key(scorer, bounds, family, keeper, live)   # one bound for all its orders first
            if any_order < keeper.threshold():
                frontier.push(max(key, any_order), AnyOrder(settings), family)
            continue
        if detail is None or isinstance(detail, AnyOrder):
            dive = keeper.threshold() == math.inf
            only = detail.settings if isinstance(detail, AnyOrder) else None
            best = (_push_even_orders(scorer, family, key, keeper, frontier, clock, dive) if bounds.even else
                    _push_orders(scorer, bounds, family, key, keeper, frontier, clock, dive, only))
            if best is not None:   # no incumbent yet: scan the family's most promising order now (anytime)
                _requeue(frontier, family, best[0],
                         scan(scorer, family.layout(best[0]), precision_for(job, family.subset), keeper, best[1]))
            frontier.drop_losers()
            continue
        order, keyed = detail
        _requeue(frontier, family, order, scan(scorer, family.layout(order), precision_for(job, family.subset), keeper,
                                               keyed))
    c.lower_bound = unlisted
    if keeper.threshold() < math.inf:        # the heap ran out: what was pruned on the way still was
        c.pruned_floor = min(keeper.threshold(), unlisted)


def _requeue(frontier: _Frontier, family: Family, order: tuple[int, ...], rest: _Unscored | None) -> None:
    """A scan that left knob settings of its layout unscored (`rest`) puts them back on the heap
    under the smallest of their bounds."""
    if rest:
        frontier.push(rest.smallest(), (order, rest), family)


def _seconds(keeper: _Keeper, price_per_hour: float) -> float:
    """The iteration time at which a layout of this price stops beating the threshold: the
    fast key is the time (throughput) or the time times the price (cost, deadline)."""
    threshold = keeper.threshold()
    if keeper.objective == Objective.THROUGHPUT or threshold == math.inf:
        return threshold
    return threshold / price_per_hour if price_per_hour > 0 else math.inf


def _out_of_time(clock: Clock, c: Considered) -> bool:
    """The loop's share of the time limit is spent; until it has a plan, it may also use the
    re-scoring share (there is nothing to re-score yet), so that a short limit still answers."""
    return clock.expired(share=1.0 if c.kept else 1 / SEARCH_SHARE)


def _bounded_in_any_order(family: Family) -> bool:
    """Whether `family` gets one pipeline bound for all its pool orders (_any_order_key) before them:
    a chain of two or more pools."""
    return family.kind == "chain" and len(family.subset) > 1


class AnyOrder(NamedTuple):
    """Heap entry detail of a chain family bounded for all its pool orders at once: the knob
    settings whose any-order bound could still win (no order can do better with the others)."""
    settings: frozenset


def _any_order_key(scorer: Scorer, bounds: Bounds, family: Family, keeper: _Keeper,
                   only: frozenset | None = None) -> tuple[float, frozenset]:
    """The smallest fast key of bound.pipeline_s(any_order=True) over the knob settings that can
    still win (inf when none can), a lower bound for every pool order of the family for one call
    instead of one per order, and those settings; `only` (_Frontier.live_settings): the settings
    whose screen can still win, the others left out (at 128 GPUs 526 of the 4,425 (micro-batch,
    recompute) settings of the families asked; their pipeline bounds cost a third as much)."""
    keyed = _keyed_bounds(scorer, bounds, family, layout_price(scorer, family), keeper,
                          tuple(range(len(family.subset))), fixed=0, only=only)
    return min(keyed.values(), default=math.inf), frozenset(keyed)


def _keyed_bounds(scorer: Scorer, bounds: Bounds, family: Family, price: float, keeper: _Keeper,
                  order: tuple[int, ...], fixed: int | None = None, only: frozenset | None = None) -> dict:
    """bound.pipeline_s of the family's runs in `order` (the first `fixed` of them fixed, all when
    None) as fast keys, for the knob settings whose key beats the threshold."""
    per_knob = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage,
                                 limit=_seconds(keeper, price), only=only, fixed=fixed)
    threshold, space, p = keeper.threshold(), scorer.engine.space, family.num_stages
    covers = [c for c in keeper.covered if c.takes(family.tps)]
    precision = precision_for(scorer.job, family.subset) if covers else None
    return {k: key for k, b in per_knob.items() if b < math.inf and allows(space, p, k, scorer.job)
            and not any(c.holds(precision, p, k[3], family.tps) for c in covers)
            for key in (fast_key(keeper.objective, scorer.job, b, price, keeper.deadline_hours),) if key < threshold}


def _push_orders(scorer: Scorer, bounds: Bounds, family: Family, capacity_key: float, keeper: _Keeper,
                 frontier: _Frontier, clock: Clock, dive: bool = False, only: frozenset | None = None):
    """Each pool order of `family` back on the heap with its pipeline bound per knob setting,
    keeping only the settings that can still beat the threshold. Out of time, the family goes
    back whole with its capacity bound, which still bounds its orders not yet pushed.
    With `dive`, the order with the smallest bound is returned instead of pushed, for scanning
    at once: until `rescore` candidates are kept nothing is pruned, and an early incumbent lets
    a search cut short by its time limit return a plan. Returns that (order, settings) or None."""
    price = layout_price(scorer, family)

    def keyed_bounds(order, fixed, settings):
        return _keyed_bounds(scorer, bounds, family, price, keeper, order, fixed, settings)

    entries = []
    for order, settings in _orders_worth_bounding(family, only, keyed_bounds):
        if _out_of_time(clock, keeper.c):
            for best, detail in entries:
                frontier.push(best, detail, family)
            frontier.push(capacity_key, None, family)
            return None
        keyed = keyed_bounds(order, None, settings)
        if keyed:
            entries.append((min(keyed.values()), (order, keyed)))
    first = min(entries, key=lambda e: e[0]) if dive and entries else None     # the first of the smallest
    for entry in entries:
        if entry is not first:
            frontier.push(*entry, family)
    return first[1] if first else None


def _push_even_orders(scorer: Scorer, family: Family, capacity_key: float, keeper: _Keeper, frontier: _Frontier,
                      clock: Clock, dive: bool = False):
    """_push_orders for the baselines' even splits: each pool order back on the heap with its knob
    settings that can still win (_even_queue) instead of its pipeline bounds, which optimise a layer
    split that the even one does not have, at a cost per order that was most of these searches."""
    price, job = layout_price(scorer, family), scorer.job
    first_order = tuple(range(len(family.subset)))
    settings = _even_settings(scorer, family, family.runs(first_order))
    if not settings:
        return None
    # family.orders()'s, lazily: a chain of n pools has n! (listing 64! took all memory, tests/test_search.py)
    orders = itertools.permutations(first_order) if family.kind == "chain" else (first_order,)
    entries = []
    for order in orders:
        if _out_of_time(clock, keeper.c):
            for best, detail in entries:
                frontier.push(best, detail, family)
            frontier.push(capacity_key, None, family)
            return None
        queue = _even_queue(scorer, family.runs(order), settings, price, keeper)
        if queue:
            entries.append((queue.smallest(), (order, queue)))
    first = min(entries, key=lambda e: e[0]) if dive and entries else None     # the first of the smallest
    for entry in entries:
        if entry is not first:
            frontier.push(*entry, family)
    return first[1] if first else None


def _even_settings(scorer: Scorer, family: Family, runs) -> list[Knobs]:
    """The knob settings of `family` that split evenly (Scorer.even_splits), the same in every pool order:
    the orders have the same stages, which knob_settings and even_splits read as a set. Most families of
    a large cluster have none (their lanes divide no micro-batch count): even_splits' shares, the least
    it asks of any setting, are checked first, before listing them."""
    job, mixed = scorer.job, scorer.engine.space.mixed_stages
    replicas = {sum(g.count for g in groups) for groups, _ in runs}
    if not any(all(m >= r and (mixed or m % r == 0) for r in replicas)
               for m in (job.global_batch // mb for mb in micro_batch_sizes(job.global_batch))):
        return []
    splits, out = {}, []
    for knobs in knob_settings(job.global_batch, family.layout(tuple(range(len(family.subset)))), scorer.model.layers,
                               scorer.options.flash_attention, job.engine, job,
                               {n: p.gpus_per_node for n, p in scorer.pools.items()}):
        key = (knobs.micro_batch, knobs.interleave, knobs.expert_tensor_parallel)   # what even_splits reads
        if key not in splits:
            splits[key] = scorer.even_splits(runs, knobs)
        if splits[key]:
            out.append(knobs)
    return out


def _even_queue(scorer: Scorer, runs, settings: list[Knobs], price: float, keeper: _Keeper) -> "_Unscored":
    """The knob settings (those that split evenly) of the layout of these runs whose bound
    (Scorer.even_runs_s: the busiest replica and the fill before it, a lower bound on the fast score and
    on evaluate's time) can beat the threshold, smallest first (ties: knob_settings' order), each with
    that bound as its key and as the bound the keeper remembers; whether its even split fits memory
    (Scorer.even_holds: with even_splits, exactly where score(..., uniform=True) yields a candidate) is
    left to _scan_uniform, which reaches few of them."""
    job, threshold = scorer.job, keeper.threshold()
    queue, busiest = [], {}       # busiest: per (micro-batch, interleave, recompute); ZeRO does not change it
    for knobs in settings:
        setting = (knobs.micro_batch, knobs.interleave, knobs.recompute)
        key = busiest.get(setting)
        if key is None:
            key = busiest[setting] = fast_key(keeper.objective, job, scorer.even_runs_s(runs, knobs), price,
                                              keeper.deadline_hours)
        if key < threshold:
            queue.append((knobs, (key, key)))
    queue.sort(key=lambda e: e[1][0])
    return _Unscored(queue, runs)


def _orders_worth_bounding(family: Family, only, keyed_bounds) -> Iterator[tuple[tuple[int, ...], frozenset | None]]:
    """The pool orders of `family` with the knob settings still open for each. A chain of three
    or more pools is first bounded per first pool (bound.pipeline_s with fixed=1: that run's
    exact positions, the rest in any order); the orders behind a first pool whose bound cannot
    win are skipped, and the others carry only the settings that bound left open."""
    if family.kind != "chain" or len(family.subset) < 3:
        yield from ((order, only) for order in family.orders())
        return
    for head in range(len(family.subset)):
        rest = tuple(j for j in range(len(family.subset)) if j != head)
        settings = frozenset(keyed_bounds((head,) + rest, 1, only))
        if settings:      # lazily, in family.orders()'s order: a chain of n pools has n! of them
            yield from (((head,) + tail, settings) for tail in itertools.permutations(rest))


def _whole_cluster_key(scorer: Scorer, pools: tuple[Pool, ...], objective: Objective,
                       deadline_hours: float | None) -> float:
    """A fast-key lower bound for every layout on `pools`: all the work at every GPU's best
    per-sample rate (the capacity bound with every GPU used). For cost, time x price >=
    B L min_k (price_k / rate_k) (a ratio of sums is at least the smallest ratio)."""
    s = scorer
    rates = {}
    for pool in pools:      # a pool with no tensor-parallel degree here (the context-parallel width past its GPUs) hosts no replica
        degrees = tp_degrees(pool, s.model, s.cp)
        if degrees:
            rates[pool.name] = max(1 / (t * s.best_sample_layer_s(pool, t, sp)) for t in degrees for sp in (False, True))
    work = s.job.global_batch * s.model.layers
    if not rates:
        return math.inf
    hosts = [p for p in pools if p.name in rates]
    if objective == Objective.THROUGHPUT:
        return work / sum(p.num_gpus * rates[p.name] for p in hosts)
    return work * min(p.price_per_gpu_hour_usd / rates[p.name] for p in hosts)


def _promising(keyed: dict, keeper: _Keeper, layout: Layout, scorer: Scorer) -> Iterator[tuple[int, int]]:
    """(micro-batch, interleave) pairs best bound first, while the bound can still win; skips
    micro-batch sizes from the first whose most memory-frugal setting cannot hold the model
    (activations only grow with the micro-batch)."""
    best: dict[tuple[int, int], float] = {}
    for (mb, v, _, _), key in keyed.items():
        best[(mb, v)] = min(best.get((mb, v), math.inf), key)
    too_big, fits = math.inf, set()      # fits: micro-batch sizes whose most frugal setting holds the model
    for (mb, v), key in sorted(best.items(), key=lambda kv: (kv[1], kv[0])):
        if key >= keeper.threshold():
            return
        if mb >= too_big:
            continue
        if mb not in fits and not scorer.could_fit(layout, mb, 1):
            too_big = mb
            continue
        fits.add(mb)
        if v > 1 and not scorer.could_fit(layout, mb, v):
            continue
        yield mb, v


# ----------------------------------------------------------------------------- hetplan

class HetplanPlanner:
    name = "hetplan"

    def consider(self, cluster, job, objective, deadline_hours, options, bounds: Bounds | None = None,
                 prove_below: float | None = None, time_limit_s: float | None = None) -> Considered:
        """`prove_below`: a proof pass instead: visit everything whose bound is below this fast key
        and keep nothing; every candidate scored goes to `dropped` with its bound, for search's
        verification with the cost model."""
        bounds = bounds or shared_bounds(cluster, job, options)
        pools, excluded = usable_pools(cluster, job)
        considered = Considered(precision_excluded=excluded)
        keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours, cluster)
        keeper.fixed_threshold = prove_below
        if options.beat is not None:
            keeper.ceiling = fast_key_of_estimate(objective, job, options.beat)
        keeper.shared = options.shared_beat
        limit = options.time_limit_s if time_limit_s is None else time_limit_s
        if prove_below is None:
            keeper.evaluate_incumbent = _incumbent_evaluator(cluster, job, objective, deadline_hours, options, considered,
                                                             Clock(limit))
        considered.method = self.name
        stop = ListingStop(limit)
        families = layout_families(pools, job.model, job.global_batch, partial_pools(objective, options),
                                   engine=job.engine, cp=job.context_parallel, stop=stop, ep=job.expert_parallel)
        if options.part[1] > 1:     # every n-th family, in listing order: each part a mix of subsets and sizes
            families = itertools.islice(families, options.part[0], None, options.part[1])
        keeper.covered = tuple(c for c in options.covered if c.job == job)    # not another setting's search
        _best_first(bounds, _uncovered(families, job, keeper.covered) if keeper.covered else families, keeper,
                    options, _scan_layout, pools, limit, listing=stop)
        return considered


def _uncovered(families: Iterable[Family], job: Job, covers: tuple) -> Iterator[Family]:
    """The families of which some knob setting is not covered (SearchOptions.covered); _keyed_bounds leaves
    out the covered settings of the others."""
    space = engine_profile(job.engine).space
    # the answer by what it reads: the subset (its precision), tps, p > 1 and the ZeRO stages open (replicas > 1);
    # each entry keeps its subset alive, so that no other subset tuple takes its id
    covered: dict[tuple, tuple[bool, tuple]] = {}
    for family in families:
        p, replicas = family.num_stages, family.max_replicas_per_stage * job.context_parallel
        seen = (id(family.subset), family.tps, p > 1, replicas > 1)
        held = covered.get(seen)
        if held is None:
            taking = [c for c in covers if c.takes(family.tps)]
            opened = [z for z in zero_stages(job.offload, replicas) if space.zero_allowed(z, p)]
            held = covered[seen] = (bool(taking) and any(
                c.holds_all(precision_for(job, family.subset), p, opened, family.tps) for c in taking), family.subset)
        if not held[0]:
            yield family


def _incumbent_evaluator(cluster, job, objective, deadline_hours, options, considered: Considered,
                         clock: Clock | None = None):
    """Evaluate a new best candidate with the cost model (planner.cost.evaluate, as search ranks);
    the plan and estimate are kept in `considered.incumbents` for the ranking. Once `clock` has
    spent the search's share, no more: an incumbent only tightens the threshold, and one evaluate
    of a large plan takes seconds (10^6 micro-batches to simulate, 10^5 replicas to place)."""

    def evaluated(cand: Candidate) -> float:
        if clock is not None and clock.expired(share=SEARCH_SHARE):
            return math.inf
        plan = cand.to_plan(job)
        est = evaluate(cluster, plan, job.tokens_to_train, options.cost_options, detail=False, kept=EVALUATED.get())
        considered.evaluated[plan] = est
        key = estimate_key(objective, est, deadline_hours)
        if key < math.inf:
            considered.incumbents.append((plan, est))
            if options.shared_beat is not None:       # the searches after this one prune at it at once
                options.shared_beat.offer(key)
        return fast_key_of_estimate(objective, job, key)
    return evaluated


def _scan_layout(scorer: Scorer, layout: Layout, precision: Precision, keeper: _Keeper, keyed: dict) -> None:
    """Score every knob setting of the layout that could win, skipping three kinds of loser:
    (micro-batch, interleave, recompute, ZeRO) settings whose pipeline bound cannot beat the threshold
    or that cannot fit in memory even under ZeRO-3; a micro-batch
    size (and all larger ones) whose most memory-frugal setting cannot hold the model; and
    selective or full recomputation when the same setting without recomputation fits and memory
    does not limit its split (recomputation then only adds time)."""
    zeros = zero_stages(scorer.job.offload, layout.max_replicas_per_stage * scorer.cp)
    variants = {zero: _knob_variants(scorer, layout, zero) for zero in zeros}
    for mb, v in _promising(keyed, keeper, layout, scorer):
        for zero in zeros:
            for recompute in searched_recomputes(scorer.options.flash_attention, layout.family == "mixed", scorer.job.engine):
                if keyed.get((mb, v, recompute, zero), math.inf) >= keeper.threshold():
                    continue
                unbound = True      # every variant fits with memory not limiting its split
                keeper.c.scored_with_pool.update(layout.gpus_by_pool())    # explain.idle_reasons
                for etp, hybrid in variants[zero]:
                    for hs in (0, hybrid) if hybrid else (0,):
                        keeper.c.fast_scores += 1
                        cand = scorer.score(layout, Knobs(mb, zero, recompute, v, hs, etp), precision,
                                            uniform=not scorer.engine.space.uneven_layers, enough=keeper.enough)
                        unbound &= cand is not None and not cand.memory_binds
                        if cand is None:
                            break   # hybrid sharding holds more than full sharding: it does not fit either
                        keeper.add(cand, keyed[(mb, v, recompute, zero)])
                if unbound:
                    break


def _knob_variants(scorer: Scorer, layout: Layout, zero: int) -> list[tuple[int, int]]:
    """(expert_tensor_parallel, hybrid-shard group or 0) of the layout at this ZeRO stage that the search
    scores (space.expert_tp_settings, space.hybrid_shard_of); one bound covers them all (bound.py)."""
    job, space = scorer.job, scorer.engine.space
    hybrid = hybrid_shard_of(layout, {name: p.gpus_per_node for name, p in scorer.pools.items()}, zero, space,
                             job.expert_parallel)
    etps = (expert_tp_settings(layout, space, job.model, job.expert_parallel, job.context_parallel)
            if job.expert_parallel > 1 else (0,))
    return [(etp, hybrid) for etp in etps]


# ----------------------------------------------------------------------------- baselines

class MegatronPlanner:
    """(a) The best uniform plan on a single GPU type."""
    name = "megatron"

    def consider(self, cluster, job, objective, deadline_hours, options, bounds: Bounds | None = None) -> Considered:
        pools, excluded = usable_pools(cluster, job)
        stop = ListingStop(options.baseline_time_limit_s)
        single = layout_families(pools, job.model, job.global_batch, partial_pools(objective, options), subset_sizes=(1,),
                                 engine=job.engine, cp=job.context_parallel, stop=stop, ep=job.expert_parallel)
        return _uniform_search(cluster=cluster, job=job, objective=objective, deadline_hours=deadline_hours,
                               options=options, excluded=excluded, families=single, pools=pools, bounds=bounds,
                               listing=stop)


class UniformPlanner:
    """(b) All GPUs, one tp, layers and samples split evenly as if the GPUs were alike."""
    name = "uniform"

    def consider(self, cluster, job, objective, deadline_hours, options, bounds: Bounds | None = None) -> Considered:
        pools, excluded = usable_pools(cluster, job)
        if not pools:       # no pool trains the job's precision: no family to list (search says why)
            return Considered(precision_excluded=excluded, method=self.name)
        everything = tuple(pools)
        stop = ListingStop(options.baseline_time_limit_s)
        every_pool_one_tp = layout_families(everything, job.model, job.global_batch, False,
                                            subset_sizes=(len(everything),), one_tp=True, engine=job.engine,
                                            cp=job.context_parallel, stop=stop, ep=job.expert_parallel)
        return _uniform_search(cluster=cluster, job=job, objective=objective, deadline_hours=deadline_hours,
                               options=options, excluded=excluded, families=every_pool_one_tp, pools=everything,
                               bounds=bounds, listing=stop)


def _uniform_search(cluster, job, objective, deadline_hours, options, excluded,
                    families: Iterable[Family], pools: tuple[Pool, ...], bounds: Bounds | None = None,
                    listing: ListingStop | None = None) -> Considered:
    """The baselines' plans are pruned by the same capacity bound (even shares are shares it covers), and
    per pool order and knob setting by the even split's own bound and memory check (_push_even_orders)."""
    considered = Considered(precision_excluded=excluded)
    keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours, cluster)
    keeper.incumbent = -math.inf    # no incumbent evaluated: prune at the `rescore`-th fast key alone
    _best_first(bounds or shared_bounds(cluster, job, options), families, keeper, options, _scan_uniform, pools,
                options.baseline_time_limit_s, even=True, listing=listing)
    return considered


def _scan_uniform(scorer: Scorer, layout: Layout, precision: Precision, keeper: _Keeper,
                  keyed: dict) -> _Unscored | None:
    """Score the layout's knob settings (evenly split) smallest bound first until one is kept, and
    return the rest (`_Unscored`) for the heap: the baselines' loop so scores candidates across all
    its layouts smallest bound first, and stops at the first bound that cannot beat the threshold.
    A setting's bound is Scorer.even_runs_s (_even_queue, whose settings' memory check is left to
    this scan: one that does not fit is skipped, and the rest go back on the heap under their own
    key), or from `keyed` (_first_plan: the pipeline bounds) the larger of its pipeline bound and
    its even split's busiest replica (Scorer.even_busiest_s); ties keep knob_settings' order."""
    runs = None
    if isinstance(keyed, _Unscored):
        queue, runs = list(keyed.items()), keyed.runs
    else:
        price, job = layout_price(scorer, layout), scorer.job
        queue, busiest = [], {}        # busiest: per (micro-batch, interleave, recompute); ZeRO does not change it
        for knobs in knob_settings(job.global_batch, layout, scorer.model.layers, scorer.options.flash_attention,
                                   job.engine, job, {n: p.gpus_per_node for n, p in scorer.pools.items()}):
            setting = (knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage)
            if setting in keyed:
                if setting[:3] not in busiest:
                    busiest[setting[:3]] = fast_key(keeper.objective, job, scorer.even_busiest_s(layout, knobs),
                                                    price, keeper.deadline_hours)
                queue.append((knobs, (max(keyed[setting], busiest[setting[:3]]), keyed[setting])))
        queue.sort(key=lambda e: e[1][0])
    skipped = False
    for k, (knobs, (key, bound)) in enumerate(queue):
        if key >= keeper.threshold():
            return None
        if runs is not None and not scorer.even_holds(runs, knobs):
            skipped = True          # score would find it does not fit
            continue
        if skipped:                 # back on the heap under its own key: other layouts' may be smaller
            return _Unscored(queue[k:], runs)
        keeper.c.fast_scores += 1
        cand = scorer.score(layout, knobs, precision, uniform=True, late=True)   # late: fewer re-scored (_best_of)
        if cand is not None:
            keeper.add(cand, bound)
            return _Unscored(queue[k + 1:], runs)
    return None


class _Unscored(dict):
    """Knob settings of one layout still to score (_scan_uniform): Knobs -> (its bound as a fast
    key, its pipeline bound), in scoring order; `runs`: the layout's runs where whether its even split
    fits memory (Scorer.even_holds) is left to the scan (_even_queue), else None."""

    def __init__(self, items=(), runs=None):
        super().__init__(items)
        self.runs = runs

    def smallest(self) -> float:
        return next(iter(self.values()))[0]


class ExhaustivePlanner:
    """(c) Every candidate of the space scored by planner.cost.evaluate; small clusters only."""
    name = "exhaustive"

    def consider(self, cluster, job, objective, deadline_hours, options, bounds: Bounds | None = None) -> Considered:
        if cluster.num_gpus > options.exhaustive_max_gpus:
            raise InputError("method", f"exhaustive search is for clusters of at most {options.exhaustive_max_gpus} "
                                       f"GPUs; this one has {cluster.num_gpus}")
        scorer = (bounds or shared_bounds(cluster, job, options)).scorer
        pools, excluded = usable_pools(cluster, job)
        considered = Considered(precision_excluded=excluded, exact=True)
        keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours, cluster)
        for subset, layout in layouts(pools, job.model, job.global_batch, partial_pools(objective, options), job.engine,
                                      job.context_parallel):
            precision = precision_for(job, subset)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, options.cost_options.flash_attention,
                                       job.engine, job, {p.name: p.gpus_per_node for p in cluster.pools}):
                cand = scorer.score(layout, knobs, precision)
                if cand is None:
                    continue
                considered.fast_scores += 1
                est = evaluate(cluster, cand.to_plan(job), job.tokens_to_train, options.cost_options)
                if estimate_key(objective, est, deadline_hours) == math.inf and objective != Objective.DEADLINE:
                    continue
                if not est.fits:
                    continue
                exact = Candidate(cand.layout, cand.knobs, cand.precision, cand.layers, cand.shares,
                                  est.iteration_time_s, cand.price_per_hour_usd)
                keeper.add(exact)
        return considered


PLANNERS: dict[str, Planner] = {
    "hetplan": HetplanPlanner(),
    "megatron": MegatronPlanner(),
    "uniform": UniformPlanner(),
    "exhaustive": ExhaustivePlanner(),
}
