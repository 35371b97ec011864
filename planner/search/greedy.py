"""A first plan before the search: the pools balanced greedily (issue 22, "good plans in one second").

`search` evaluates it before the best-first loop and prunes at it from the start (as at the best
plan of an engine searched before), so a short time limit answers with at least this plan, and the
loop spends its time on what could beat it. It is one plan of the search space, chosen, not bounded:
`complete` keeps its meaning (no plan of the space beats the answer by planner.cost.evaluate).
"""
from __future__ import annotations

import math

from planner.search.bound import Bounds
from planner.search.planners import (Clock, Considered, _Keeper, _keyed_bounds, _scan_layout, layout_price,
                                      precision_for, usable_pools)
from planner.search.score import Candidate
from planner.search.space import Family, layout_families, micro_batch_sizes
from planner.types import Objective

GREEDY_FAMILIES = 4     # chains bounded, best capacity bound first, among those that hold the model
GREEDY_SIZES = 2        # sets of pools tried: the largest that holds the model and the next smaller one
GREEDY_SHARE = 0.5      # of the search's time limit at most for choosing the plan (its evaluation aside)
# Above this many GPUs no greedy plan: evaluating one plan takes seconds there (10^5 replicas to place,
# docs/reliability.md), more than a short limit has, and the search evaluates its own first plan anyway.
GREEDY_MAX_GPUS = 65_536
# More pools than this, no greedy plan: it bounds n^2 / 2 pool orders and n + 1 sets of pools, each bound
# of an n-pool chain longer (64 pools of one node each: past a 0.5 s limit, which the loop then lacked).
GREEDY_MAX_POOLS = 8


def greedy_candidate(bounds: Bounds, objective: Objective, deadline_hours: float | None,
                     time_limit_s: float | None) -> Candidate | None:
    """The greedy plan of `bounds.scorer`'s job under its engine, for the throughput objective:
    (1) pools: the largest set of usable pools on which a chain of each pool's widest tensor-parallel
        replicas (a node's width where the model allows it) holds the model with its most
        memory-frugal knobs (Scorer.could_fit), all of each pool's GPUs in whole stages, and the sets
        one pool smaller (a slow pool can hold a pipeline back more than its GPUs add);
    (2) replicas per stage: for each size, of those chains the GREEDY_FAMILIES with the best capacity
        bound, and of them the one with the smallest pipeline bound (planner.search.bound) in the
        listed order;
    (3) each such chain's pool order with the smallest pipeline bound;
    (4) knobs: that layout's settings scored as the search scores them (layers split by each stage's
        speed, samples by its shares); the best fast score of the chains.
    None for another objective, on more than GREEDY_MAX_GPUS GPUs or GREEDY_MAX_POOLS pools, when no
    chain holds the model, or when GREEDY_SHARE of the time limit is spent first."""
    cluster = bounds.scorer.cluster
    if objective != Objective.THROUGHPUT or cluster.num_gpus > GREEDY_MAX_GPUS or len(cluster.pools) > GREEDY_MAX_POOLS:
        return None
    scorer, clock = bounds.scorer, Clock(None if time_limit_s is None else time_limit_s * GREEDY_SHARE)
    keeper = _Keeper(Considered(), 1, objective, scorer.job, deadline_hours, scorer.cluster)
    keeper.incumbent = -math.inf    # no incumbent evaluated: prune at the best fast score so far
    pools, _ = usable_pools(scorer.cluster, scorer.job)
    chains = []
    for size in range(len(pools), 0, -1):
        family = _best_chain(bounds, keeper, pools, size, clock)
        if clock.expired():
            return None
        if family is not None:
            chains.append(family)
        if len(chains) == GREEDY_SIZES or (chains and size == len(chains[0].subset) - GREEDY_SIZES + 1):
            break
    for family in chains:          # the keeper holds the best fast score so far: a later scan prunes at it
        _best_order(bounds, keeper, family, clock)
    return keeper.c.kept[0][2] if keeper.c.kept and not clock.expired() else None


def _best_chain(bounds: Bounds, keeper: _Keeper, pools, size: int, clock: Clock) -> Family | None:
    """Steps (1) and (2) of greedy_candidate for the sets of `size` pools."""
    s, job = bounds.scorer, bounds.scorer.job
    chains = [f for f in layout_families(pools, job.model, job.global_batch, False, subset_sizes=(size,),
                                         engine=job.engine, cp=job.context_parallel, stop=clock.expired,
                                         ep=job.expert_parallel, widest_tp=True) if f.kind == "chain"]
    chains.sort(key=bounds.capacity_s)
    best, best_key, tried = None, math.inf, 0
    for family in chains:
        if tried == GREEDY_FAMILIES or clock.expired():
            break
        order = tuple(range(len(family.subset)))
        if not s.could_fit(family.layout(order), min(micro_batch_sizes(job.global_batch)), 1):
            continue
        keyed = _keyed_bounds(s, bounds, family, layout_price(s, family), keeper, order)
        if keyed:
            tried += 1
            if min(keyed.values()) < best_key:
                best, best_key = family, min(keyed.values())
    return best


def _best_order(bounds: Bounds, keeper: _Keeper, family: Family, clock: Clock) -> None:
    """Steps (3) and (4) of greedy_candidate, the order chosen a position at a time: the pool whose
    pipeline bound with the positions so far fixed (bound.pipeline_s's `fixed`; the rest in any
    order) is smallest (n^2 / 2 bounds where a chain of n pools has n! orders); the best fast score
    of the layout in that order goes to `keeper`."""
    s = bounds.scorer
    price = layout_price(s, family)
    order = tuple(range(len(family.subset)))
    for k in range(1, len(order)):
        if clock.expired():
            return
        options = [order[:k - 1] + (j,) + tuple(i for i in order[k - 1:] if i != j) for j in order[k - 1:]]
        keyed = [(min(found.values(), default=math.inf), o) for o in options
                 for found in (_keyed_bounds(s, bounds, family, price, keeper, o, fixed=k),)]
        order = min(keyed, key=lambda e: e[0])[1]
    keyed = _keyed_bounds(s, bounds, family, price, keeper, order)
    if keyed:
        _scan_layout(s, family.layout(order), precision_for(s.job, family.subset), keeper, keyed)
