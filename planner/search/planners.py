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
              Both baselines run the same best-first loop over their own spaces (the bounds cover
              even splits and shares too).
  exhaustive  (c) every layout and knob setting of the space, each scored by planner.cost.evaluate,
              no bounds; for clusters of at most `exhaustive_max_gpus` GPUs.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from planner.cost import CostOptions
from planner.search.bound import Bounds
from planner.search.objective import fast_key
from planner.search.score import Candidate, Scorer
from planner.search.space import (RECOMPUTES, ZERO_STAGES, Family, Knobs, Layout, knob_settings, layout_families,
                                  layouts)
from planner.types import Cluster, InputError, Job, Objective, Pool, Precision


@dataclass(frozen=True)
class SearchOptions:
    rescore: int = 24                      # fast-scored candidates re-scored by the cost model
    max_fast_scores: int = 200_000         # budget of fast scores (deterministic); reported when hit
    partial_pools: bool | None = None      # also try half, a quarter... of each pool; None: for cost/deadline
    exhaustive_max_gpus: int = 16
    cost_options: CostOptions = field(default_factory=CostOptions)


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
    precision_excluded: dict[str, str] = field(default_factory=dict)
    exact: bool = False                    # candidates were scored by the cost model directly


class Planner(Protocol):
    name: str

    def consider(self, cluster: Cluster, job: Job, objective: Objective, deadline_hours: float | None,
                 options: SearchOptions) -> Considered: ...


# ----------------------------------------------------------------------------- shared pieces

def usable_pools(cluster: Cluster, job: Job) -> tuple[tuple[Pool, ...], dict[str, str]]:
    if job.precision != Precision.BF16:
        return cluster.pools, {}
    excluded = {p.name: f"{p.gpu.id} has no bf16 and the job asks for bf16" for p in cluster.pools
                if not p.gpu.supports_bf16}
    return tuple(p for p in cluster.pools if p.name not in excluded), excluded


def precision_for(job: Job, subset: tuple[Pool, ...]) -> Precision:
    if job.precision is not None:
        return job.precision
    return Precision.BF16 if all(p.gpu.supports_bf16 for p in subset) else Precision.FP16


def layout_price(scorer: Scorer, layout: Layout | Family) -> float:
    return sum(n * scorer.pools[name].price_per_gpu_hour_usd for name, n in layout.gpus_by_pool().items())


class _Keeper:
    """The `limit` best candidates by fast key (ties: first found), and the fast Pareto front."""

    def __init__(self, considered: Considered, limit: int, objective: Objective, job: Job, deadline_hours):
        self.c, self.limit = considered, limit
        self.objective, self.job, self.deadline_hours = objective, job, deadline_hours
        self.order = 0

    def threshold(self) -> float:
        return self.c.kept[-1][0] if len(self.c.kept) >= self.limit else math.inf

    def add(self, cand: Candidate) -> None:
        key = fast_key(self.objective, self.job, cand.time_s, cand.price_per_hour_usd, self.deadline_hours)
        for name in cand.layout.gpus_by_pool():
            self.c.fits_with_pool.add(name)
            self.c.best_with_pool[name] = min(self.c.best_with_pool.get(name, math.inf), key)
        self._add_front(cand)
        if key == math.inf or key >= self.threshold():
            return
        self.order += 1
        kept = self.c.kept
        kept.append((key, self.order, cand))
        kept.sort(key=lambda e: (e[0], e[1]))
        del kept[self.limit:]

    def _add_front(self, cand: Candidate) -> None:
        cost = cand.time_s * cand.price_per_hour_usd
        for other in self.c.front:
            if other.time_s <= cand.time_s and other.time_s * other.price_per_hour_usd <= cost:
                return
        self.c.front = [o for o in self.c.front
                        if not (cand.time_s <= o.time_s and cost <= o.time_s * o.price_per_hour_usd)]
        self.c.front.append(cand)


def _partial(objective: Objective, options: SearchOptions) -> bool:
    if options.partial_pools is not None:
        return options.partial_pools
    return objective != Objective.THROUGHPUT


# ----------------------------------------------------------------------------- best-first search

Scan = Callable[[Scorer, Layout, Precision, _Keeper, dict], None]


def _best_first(scorer: Scorer, families: Iterable[Family], keeper: _Keeper, options: SearchOptions,
                scan: Scan) -> None:
    """Visit layouts in order of their lower bound (planner.search.bound) and stop at the first
    whose bound cannot beat the `rescore`-th best fast score found so far.

    Every family enters a heap with its capacity bound; when one comes out, each of its pool
    orders goes back with its pipeline bound (per micro-batch size and interleave); when a layout
    comes out, `scan` scores its knob settings whose own bound can still win. Both bounds hold
    for every candidate they cover, so what is skipped could not have been kept."""
    c, job, objective, deadline = keeper.c, scorer.job, keeper.objective, keeper.deadline_hours
    bounds = Bounds(scorer)
    heap = []
    for family in families:
        key = fast_key(objective, job, bounds.capacity_s(family), layout_price(scorer, family), deadline)
        for name in family.gpus_by_pool():
            c.bound_with_pool[name] = min(c.bound_with_pool.get(name, math.inf), key)
        if key < math.inf:
            heap.append((key, len(heap), None, family))
    heapq.heapify(heap)
    pushed = len(heap)
    while heap:
        key, _, detail, family = heapq.heappop(heap)
        if key >= keeper.threshold():
            return
        if detail is None:
            price = layout_price(scorer, family)
            for order in family.orders():
                per_knob = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage)
                keyed = {k: fast_key(objective, job, b, price, deadline) for k, b in per_knob.items() if b < math.inf}
                best = min(keyed.values(), default=math.inf)
                if best < math.inf:
                    heapq.heappush(heap, (best, pushed, (order, keyed), family))
                    pushed += 1
            continue
        if c.fast_scores >= options.max_fast_scores:
            c.budget_hit = True
            return
        order, keyed = detail
        scan(scorer, family.layout(order), precision_for(job, family.subset), keeper, keyed)


def _promising(keyed: dict, keeper: _Keeper, layout: Layout, scorer: Scorer) -> Iterator[tuple[int, int]]:
    """(micro-batch, interleave) pairs best bound first, while the bound can still win; skips
    micro-batch sizes from the first whose most memory-frugal setting cannot hold the model
    (activations only grow with the micro-batch)."""
    best: dict[tuple[int, int], float] = {}
    for (mb, v, _, _), key in keyed.items():
        best[(mb, v)] = min(best.get((mb, v), math.inf), key)
    too_big = math.inf
    for (mb, v), key in sorted(best.items(), key=lambda kv: (kv[1], kv[0])):
        if key >= keeper.threshold():
            return
        if mb >= too_big:
            continue
        if not scorer.could_fit(layout, mb, 1):
            too_big = mb
            continue
        if v > 1 and not scorer.could_fit(layout, mb, v):
            continue
        yield mb, v


# ----------------------------------------------------------------------------- hetplan

class HetplanPlanner:
    name = "hetplan"

    def consider(self, cluster, job, objective, deadline_hours, options) -> Considered:
        scorer = Scorer(cluster, job, options.cost_options)
        pools, excluded = usable_pools(cluster, job)
        considered = Considered(precision_excluded=excluded)
        keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours)
        families = layout_families(pools, job.model, job.global_batch, _partial(objective, options))
        _best_first(scorer, families, keeper, options, _scan_layout)
        return considered


def _scan_layout(scorer: Scorer, layout: Layout, precision: Precision, keeper: _Keeper, keyed: dict) -> None:
    """Score every knob setting of the layout that could win, skipping three kinds of loser:
    (micro-batch, interleave, recompute, ZeRO) settings whose pipeline bound cannot beat the threshold
    or that cannot fit in memory even under ZeRO-3; a micro-batch
    size (and all larger ones) whose most memory-frugal setting cannot hold the model; and
    selective or full recomputation when the same setting without recomputation fits and memory
    does not limit its split (recomputation then only adds time)."""
    for mb, v in _promising(keyed, keeper, layout, scorer):
        for zero in ZERO_STAGES:
            if zero > 0 and layout.max_replicas_per_stage == 1:
                continue
            for recompute in RECOMPUTES:
                if keyed.get((mb, v, recompute, zero), math.inf) >= keeper.threshold():
                    continue
                keeper.c.fast_scores += 1
                cand = scorer.score(layout, Knobs(mb, zero, recompute, v), precision)
                if cand is not None:
                    keeper.add(cand)
                    if not cand.memory_binds:
                        break


# ----------------------------------------------------------------------------- baselines

class MegatronPlanner:
    """(a) The best uniform plan on a single GPU type."""
    name = "megatron"

    def consider(self, cluster, job, objective, deadline_hours, options) -> Considered:
        pools, excluded = usable_pools(cluster, job)
        single = (f for f in layout_families(pools, job.model, job.global_batch, _partial(objective, options))
                  if len(f.subset) == 1)
        return _uniform_search(cluster, job, objective, deadline_hours, options, excluded, single)


class UniformPlanner:
    """(b) All GPUs, one tp, layers and samples split evenly as if the GPUs were alike."""
    name = "uniform"

    def consider(self, cluster, job, objective, deadline_hours, options) -> Considered:
        pools, excluded = usable_pools(cluster, job)
        everything = tuple(pools)
        every_pool_one_tp = (f for f in layout_families(everything, job.model, job.global_batch, False)
                             if len(f.subset) == len(everything) and len(set(f.tps)) == 1)
        return _uniform_search(cluster, job, objective, deadline_hours, options, excluded, every_pool_one_tp)


def _uniform_search(cluster, job, objective, deadline_hours, options, excluded,
                    families: Iterable[Family]) -> Considered:
    """The baselines' plans are pruned by the same bounds (an even split or even shares is one of
    the splits and shares the bounds cover)."""
    scorer = Scorer(cluster, job, options.cost_options)
    considered = Considered(precision_excluded=excluded)
    keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours)
    _best_first(scorer, families, keeper, options, _scan_uniform)
    return considered


def _scan_uniform(scorer: Scorer, layout: Layout, precision: Precision, keeper: _Keeper, keyed: dict) -> None:
    for knobs in knob_settings(scorer.job.global_batch, layout, scorer.model.layers):
        if keyed.get((knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage),
                     math.inf) >= keeper.threshold():
            continue
        keeper.c.fast_scores += 1
        cand = scorer.score(layout, knobs, precision, uniform=True)
        if cand is not None:
            keeper.add(cand)


class ExhaustivePlanner:
    """(c) Every candidate of the space scored by planner.cost.evaluate; small clusters only."""
    name = "exhaustive"

    def consider(self, cluster, job, objective, deadline_hours, options) -> Considered:
        from planner.cost import evaluate
        from planner.search.objective import estimate_key
        if cluster.num_gpus > options.exhaustive_max_gpus:
            raise InputError("method", f"exhaustive search is for clusters of at most {options.exhaustive_max_gpus} "
                                       f"GPUs; this one has {cluster.num_gpus}")
        scorer = Scorer(cluster, job, options.cost_options)
        pools, excluded = usable_pools(cluster, job)
        considered = Considered(precision_excluded=excluded, exact=True)
        keeper = _Keeper(considered, options.rescore, objective, job, deadline_hours)
        for subset, layout in layouts(pools, job.model, job.global_batch, _partial(objective, options)):
            precision = precision_for(job, subset)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers):
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
