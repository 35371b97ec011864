"""Searches spread over worker processes that share one threshold (SearchOptions.workers).

`search` for the best of several engines searches each engine's space in turn, each search pruning
at the best plan of the engines before it (planner.search.search._search_engines). With `workers`
N > 1 the searches are tickets 0, 1, ... that N processes take in order as each gets free: this one
and N - 1 workers (planner.workers: forked where that is safe, so that they start in milliseconds with
this process's modules; they end with this process, on every signal). Search k
prunes at the best key that searches 0 .. k-1 have evaluated *so far* (`SharedBest`: one slot per
search in memory the processes share, written only by the process that runs that search, at each
new incumbent and at its answer), read as it searches. So it prunes at what it would prune at in
turn, or at less (a key not yet lowered), never at a plan of a search after it: the answer of
complete searches is the optimum over the union of their spaces, ties to the first search, as in
turn; `search` then holds every search to the sequential rule (one whose answer does not beat
those before it is beaten).

Each process has its own clock (planner.search.planners.Clock: its thread's CPU time), the time
limit for the searches it takes, shared among them as the sequential loop shares it (the caller's
`task` gets the clock and how many searches the process may still take), so a worker process's
search has the CPU seconds it would have had in turn: the whole call may spend up to N times the
limit in CPU seconds, in about the wall time of one.

A ticket may be other work than a search (the baselines under the first engine, planner.search.search),
or a part of one engine's search (every n-th layout family, SearchOptions.part). The `own` tickets
are this process's, after ticket 0, so that they find its caches (the baselines after the first engine's
search or its first part), unless a worker, every other ticket taken, starts one first.

One engine's search may be split into parts (the first engine's, from 3 workers: planner.search.search
._first_parts), tickets over every n-th layout family each, which prune at the parts before them as the
engines do; their answers are combined as one search's (search._parts_answer: ties to the first part).

`hetplan plan --engine all --workers N` runs each engine's own search through `run_each` too, with
no threshold shared (each engine's best is an answer of its own there).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from planner.search.planners import Clock, SearchOptions
from planner.workers import stop_pool, worker_context, worker_pool


class SharedBest:
    """The best evaluated estimate key of each of a call's searches so far, in shared memory (inf:
    none yet); search `index` reads the best of those before it and writes its own slot. One writer
    a slot, so no lock: a slot is an aligned double, read and written whole."""

    def __init__(self, slots, index: int, done=None, peers: range = range(0)):
        self.slots, self.index, self.done = slots, index, done     # done: 1 for each ticket that has ended
        self.peers = peers      # the tickets of the same search's parts (this one among them)

    def ceiling(self) -> float:
        """The best key the searches before this one have evaluated so far (inf: none), and the parts
        of its search after it, each a hair above its key (PEER_TIE_MARGIN; a key of 0 not at all),
        so that a plan of this part that ties one of theirs is kept: ties go to the first part."""
        after = [key * (1 + PEER_TIE_MARGIN) for key in self.slots[self.index + 1:self.peers.stop] if key > 0]
        return min([*self.slots[:self.index], *after], default=math.inf)

    def beaten(self, first: int) -> bool:
        """Whether tickets 0 .. first - 1 (the parts of the first search) have all ended and a ticket
        after this one has evaluated a plan better than each of theirs: that search cannot win."""
        if self.done is None or not all(self.done[:first]):
            return False
        return min(self.slots[self.index + 1:], default=math.inf) < min(self.slots[:first], default=math.inf)

    def mark(self, flag: int) -> None:
        """Say, as this ticket ends, something more than that it ended (`done`: 1 ended, here `flag` > 1)."""
        if self.done is not None:
            self.done[self.index] = flag

    def offer(self, key: float) -> None:
        """A plan of this search, evaluated: its key, kept when it is this search's best so far."""
        if key < self.slots[self.index]:
            self.slots[self.index] = key


PEER_TIE_MARGIN = 1e-9     # above a later part's key, where a part prunes (SharedBest.ceiling); as search's tolerances


def beat_now(options: SearchOptions) -> SearchOptions:
    """`options` with `beat` lowered to what its searches before it have evaluated by now
    (SearchOptions.shared_beat), for deciding whether the search beat them: its pruning read
    that value or a larger one, so what it pruned cannot beat it either."""
    key = math.inf if options.shared_beat is None else options.shared_beat.ceiling()
    if key == math.inf or (options.beat is not None and options.beat <= key):
        return options
    return replace(options, beat=key)


# Task = task(k, shared, clock, still, searched_before, *args): the outcome of search k (picklable),
# `shared` its SharedBest, `clock` the process's clock, `still` how many searches this process may
# still take (this one included), `searched_before` whether it has run one already.
Task = Callable[..., object]


def run_each(task: Task, count: int, workers: int, limit_s: float | None, args: tuple,
             own: tuple[int, ...] = (), after: dict[int, range] | None = None,
             sizes: list[float] | None = None) -> list:
    """The outcomes of task(k, ...) for k = 0 .. count - 1, in order, run by up to `workers`
    processes (this one among them) that take the searches in order; `limit_s`: each process's
    clock. `task` is a module-level function (it is sent to the workers by name). An exception
    (a signal among them) ends the workers at once. Ticket 0 is this process's, and the tickets `own`
    too, right after it, unless a worker, every other ticket taken, finds one not yet started. A ticket of
    `after` is taken only once the tickets it names have ended (none waits for it: a process with no other
    ticket left ends, and the one that ends the last of them takes it). `sizes`: each ticket's estimated
    work; the tickets after ticket 0 and `own` are then taken largest first (ties in order), so that the
    longest does not start last and run alone (FlagScale's search at 4,096 GPUs, half the command's work,
    was the fifth of seven tickets). Which process runs a ticket changes no answer of a search that ends
    before its limit: each prunes at the tickets before it in order, whenever it runs."""
    context = worker_context()
    taken, slots = context.Array("b", count), context.RawArray("d", [math.inf] * count)
    ended = context.RawArray("b", count)
    helpers = min(workers, count) - 1
    pool = worker_pool(helpers, _inherit, (taken, slots, ended), context)
    try:
        mine, order = _orders(count, own, sizes)
        futures = [pool.submit(_drain_inherited, task, count, workers, limit_s, args, order, after)
                   for _ in range(helpers)]
        done = _drain(task, count, workers, limit_s, args, taken, slots, ended, mine, after=after)
        for future in futures:
            done += future.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()
    return [outcome for _, outcome in sorted(done, key=lambda e: e[0])]


def _orders(count: int, own: tuple[int, ...], sizes: list[float] | None) -> tuple[list[int], list[int]]:
    """The order in which this process and a worker take the tickets (run_each): this one ticket 0, its `own`
    tickets, then the others; a worker the others, then the `own` tickets from the last; the others largest
    first by `sizes` where given (ties in order)."""
    others = [k for k in range(1, count) if k not in own]
    if sizes is not None:
        others.sort(key=lambda k: -sizes[k])
    return [0, *own, *others], [*others, *reversed(own)]


def _drain(task: Task, count: int, workers: int, limit_s: float | None, args: tuple, taken, slots, ended,
           order, after: dict | None = None) -> list:
    """Take the first search of `order` not yet taken (and ready: run_each's `after`) and run it, until none
    is left: [(k, outcome)]."""
    clock, done = Clock(limit_s), []
    while (took := _take(taken, order, lambda k: all(ended[j] for j in (after or {}).get(k, ())))) is not None:
        k, left = took
        try:
            done.append((k, task(k, SharedBest(slots, k, ended), clock, math.ceil(left / workers), bool(done),
                                 *args)))
        finally:
            ended[k] = ended[k] or 1
    return done


def _take(taken, order, ready=lambda k: True) -> tuple[int, int] | None:
    """The first ticket of `order` not yet taken and `ready`, now taken, and how many were left (it among them)."""
    with taken.get_lock():
        k = next((k for k in order if not taken[k] and ready(k)), None)
        if k is None:
            return None
        taken[k] = 1
        return k, len(taken) - sum(taken[:]) + 1


_inherited: dict = {}      # in a worker process: the call's taken tickets and slots, inherited at its start


def _inherit(taken, slots, ended) -> None:
    """A worker's initializer: shared memory reaches a spawned process only by inheritance."""
    _inherited.update(taken=taken, slots=slots, ended=ended)


def _drain_inherited(task: Task, count: int, workers: int, limit_s: float | None, args: tuple, order: list,
                     after: dict | None = None) -> list:
    return _drain(task, count, workers, limit_s, args, _inherited["taken"], _inherited["slots"], _inherited["ended"],
                  order, after=after)
