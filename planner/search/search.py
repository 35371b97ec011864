"""`search`: best plans for an objective, scored by the one cost model, with baselines and reasons."""
from __future__ import annotations

import heapq
import math
import time
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from planner.cost import Kept, evaluate, stage_passes
from planner.search.explain import (describe_plan, explain_ranking, idle_reasons, infeasible_message,
                                    deadline_message)
from planner.search.objective import (check_objective, describe, estimate_key, estimate_key_of_fast, fast_key,
                                      fast_key_of_estimate, gain)
from planner.search.bound import Bounds
from planner.search.greedy import greedy_candidate
from planner.search.parallel import SharedBest, beat_now, run_each
from planner.search.planners import (BUDGET, EVALUATED, PLANNERS, SEARCH_SHARE, TIME_LIMIT, Clock, Considered,
                                      SearchOptions, partial_pools, shared_bounds, usable_pools)
from planner.search.space import count_families, micro_batch_sizes
from planner.engines import ENGINES
from planner.engines import get as engine_profile
from planner.engines.base import SWITCHES
from planner.engines.cover import Cover, cover
from planner.types import (MAX_SIMULATED_PASSES, Cluster, Estimate, InfeasibleError, InputError, Job, Objective,
                           Offload, Plan, TooManyPassesError)

BASELINES = ("megatron", "uniform")


@dataclass(frozen=True)
class ScoredPlan:
    plan: Plan
    estimate: Estimate
    gain_over: dict[str, float] = field(default_factory=dict)
    explanation: str = ""


@dataclass(frozen=True)
class SearchResult:
    plans: tuple[ScoredPlan, ...]
    pareto: tuple[ScoredPlan, ...]
    baselines: dict[str, ScoredPlan | None]
    idle: dict[str, str]
    search_time_s: float
    candidates_evaluated: int
    objective: Objective
    method: str = "hetplan"
    notes: tuple[str, ...] = ()
    complete: bool = True                # no plan of the space beats the answer by planner.cost.evaluate
    gap: float | None = 0.0              # how much better an unverified plan could be, by evaluate (0: complete)
    stopped_by: str | None = None        # "time limit" or "fast-score budget"; None when the search ran out
    guarantee: str = ""                  # what the answer is promised to be, in words
    baseline_status: dict[str, "BaselineStatus"] = field(default_factory=dict)   # how far each baseline's search got
    by_engine: dict[str, "SearchResult | str"] = field(default_factory=dict)   # with `engines`: each engine's own
    #                                     answer, or why it has none (the winner's is this result without it)


class Beaten(InfeasibleError):
    """A search given SearchOptions.beat found no plan that beats it: `complete` when no plan of its
    space can (every one not evaluated has a lower bound at least `beat`), else `gap`, how much
    better than `beat` one still could be (None: unknown)."""

    def __init__(self, message: str, complete: bool, gap: float | None):
        super().__init__(message)
        self.complete, self.gap = complete, gap

    def __reduce__(self):           # as built: a worker process sends it back (planner.search.parallel)
        return Beaten, (self.message, self.complete, self.gap)


@dataclass(frozen=True)
class BaselineStatus:
    """How far a baseline's own search got: complete, or stopped by a limit (`stopped_by`) with the
    gap it could not rule out on the fast estimate (None: unknown), so that a gain quoted against
    it can say how final it is."""
    complete: bool
    stopped_by: str | None = None
    gap: float | None = 0.0


# Offload is tried where GPU memory limits the plan without it: no plan fits, a pool stays idle,
# or the best plan fills some GPU's memory beyond this share.
OFFLOAD_MEMORY_SHARE = 0.9


# Context parallelism is searched for sequences of at least this many tokens, with each GPU keeping at
# least CP_MIN_TOKENS_PER_GPU of them: below that the ring's transfers outgrow the attention they hide
# behind (Megatron-LM and torchtitan recipes use it from 16k-32k tokens up).
CP_MIN_SEQ_LEN = 16384
CP_MIN_TOKENS_PER_GPU = 8192


# One CPU-time budget for a whole `search` call (issue 24, docs/reliability.md "Work bounded by the
# limits"): the search's limit plus its baselines'. Every phase, setting and engine asks it before
# starting more work, and the call answers with the best plan so far and its gap. Holds the clock
# and the CPU seconds kept for the baselines.
_WHOLE: ContextVar[tuple[Clock, float] | None] = ContextVar("hetplan_search_budget", default=None)


# The scorer and bounds of the best answer so far within one `search` call (its caches: pass times,
# links, memory caps, stage rates), by (cluster, job, cost options): the baselines of the winner of
# several searches (_attach_baselines) are searched with the winner's own, as _search_setting's are.
_WINNER_BOUNDS: ContextVar[dict | None] = ContextVar("hetplan_winner_bounds", default=None)


def _keep_bounds(cluster: Cluster, job: Job, options: SearchOptions, shared: Bounds, key: float) -> None:
    kept = _WINNER_BOUNDS.get()
    if kept is not None and key < kept.get("key", math.inf):
        kept.update(key=key, of=(cluster, job, options.cost_options), bounds=shared)


def _winner_bounds(cluster: Cluster, job: Job, options: SearchOptions) -> Bounds | None:
    kept = _WINNER_BOUNDS.get() or {}
    return kept["bounds"] if kept.get("of") == (cluster, job, options.cost_options) else None


def _whole_budget(options: SearchOptions, baselines: bool) -> tuple[Clock, float] | None:
    if options.time_limit_s is None or (baselines and options.baseline_time_limit_s is None):
        return None
    reserve = len(BASELINES) * options.baseline_time_limit_s if baselines else 0.0
    return Clock(options.time_limit_s + reserve), reserve


def _left_s(reserved: bool = False) -> float | None:
    """CPU seconds left of the whole call's budget, less the baselines' reserve with `reserved`
    (None: no limit)."""
    whole = _WHOLE.get()
    if whole is None:
        return None
    clock, reserve = whole
    return clock.limit_s - clock.elapsed() - (reserve if reserved else 0.0)


def _spent() -> bool:
    left = _left_s()
    return left is not None and left <= 0


def search(cluster: Cluster, job: Job, objective: Objective = Objective.THROUGHPUT,
           deadline_hours: float | None = None, top_k: int = 5, method: str = "hetplan",
           options: SearchOptions = SearchOptions(), baselines: bool = True,
           offload: str = "auto", context_parallel: str = "auto", expert_parallel: str = "auto",
           engines: tuple[str, ...] | None = None) -> SearchResult:
    """Ranked plans (best first) for `objective`; metrics are exactly planner.cost.evaluate's.
    Raises InfeasibleError when nothing fits (or nothing meets the deadline).

    `engines` (planner.engines.REAL for the default "best engine"): plan the job for each of these
    engines instead of `job.engine`, in turn, each a search of its own that prunes at the best plan
    of those before it (an engine none of whose plans can beat it is `Beaten`, and complete still
    means no plan of any engine's space beats the answer), each with the time limit that is left
    less ENGINE_RESERVE of it for each engine after it (its baselines keep theirs), and answer with
    the best by the objective: its plans, its baselines (searched once, under the same engine, so
    gains compare like with like) and `by_engine`, what each engine reached.

    Settings that change what a replica is are each a search of their own over the same space,
    with the setting fixed; the best answer by the objective wins, and it is complete when every
    one of them is:
    `context_parallel`: "auto" searches every context-parallel degree the engine runs that suits
      the sequence (context_settings), `job.context_parallel` included; "fixed": that one only.
    `expert_parallel`: "auto" searches every expert-parallel degree the engine runs for a
      mixture-of-experts model (expert_settings), `job.expert_parallel` included; "fixed": that one.
    `offload`: "auto" searches `job` as it is (its offload, usually none) and, where GPU memory
      limits that answer (OFFLOAD_MEMORY_SHARE) and the engine offloads, also each offload setting
      the engine runs. "fixed": `job.offload` only."""
    settings = dict(offload=offload, context_parallel=context_parallel, expert_parallel=expert_parallel)
    first = _FIRST.get()
    if first is not None and not engines and first[:2] == (cluster, job):     # search_after_first's, in hand
        _FIRST.set(None)
        return first[2]
    token = _WHOLE.set(_WHOLE.get() or _whole_budget(options, baselines))
    kept = _WINNER_BOUNDS.set(_WINNER_BOUNDS.get() if _WINNER_BOUNDS.get() is not None else {})
    evaluated = EVALUATED.set(EVALUATED.get() if EVALUATED.get() is not None else Kept())
    try:
        if engines:
            return _search_engines(cluster=cluster, job=job, names=tuple(engines), objective=objective,
                                   deadline_hours=deadline_hours, top_k=top_k, method=method, options=options,
                                   baselines=baselines, settings=settings)
        _check_job_kind(job)
        if Objective(objective) == Objective.ENERGY:
            return _search_energy(cluster, job, deadline_hours, top_k, method, options, baselines, settings)
        return _search_settings(cluster, job, objective, deadline_hours, top_k, method, options, baselines,
                                **settings)
    finally:
        _WHOLE.reset(token)
        _WINNER_BOUNDS.reset(kept)
        EVALUATED.reset(evaluated)


def _search_engines(cluster: Cluster, job: Job, names: tuple[str, ...], objective, deadline_hours, top_k, method,
                    options: SearchOptions, baselines, settings: dict) -> SearchResult:
    """`search` for each engine of `names` (its docstring); an engine without a plan is a result too.
    With options.workers > 1, in that many processes (_engines_in_workers), the same answer."""
    for name in names:
        engine_profile(name, "engines")
    # the search's time shared; each baseline keeps its whole limit, so a gain is not over a baseline cut short
    results: dict[str, SearchResult] = {}
    why: dict[str, InputError] = {}
    covered: dict[str, tuple[str, ...]] = {}    # what of a beaten engine's space another engine's search vouched for
    clock = Clock(options.time_limit_s)
    parallel, known = options.workers > 1 and len(names) > 1, None
    if parallel:
        results, why, covered, known = _engines_in_workers(cluster, job, names, objective, deadline_hours, top_k,
                                                           method, options, settings, baselines=baselines)
    for k, name in enumerate(() if parallel else names):     # each engine after the first prunes at the best so far
        if results and _spent():
            why[name] = InputError("time_limit", "not searched: the time limit was spent on the engines before it")
            continue
        covers = _covers(name, job, results, why)
        share = replace(options, time_limit_s=_engine_share(clock, k, len(names)), covered=covers)
        try:
            results[name] = search(cluster, replace(job, engine=name), objective, deadline_hours, top_k, method,
                                   _beating(share, objective, deadline_hours, list(results.values())), False,
                                   **settings)
            if covers:
                results[name] = replace(results[name], notes=results[name].notes + _cover_notes(covers))
        except InputError as err:           # infeasible or not run under this engine: say so, try the next
            why[name] = err
            covered[name] = _cover_notes(covers)
    beaten = {n: e for n, e in why.items() if isinstance(e, Beaten)}
    if beaten and not results:      # only when options.beat came from outside: nothing here beats it
        raise Beaten("no engine has a plan that beats the best found elsewhere", all(b.complete for b in beaten.values()),
            _worst_gap(list(beaten.values())))
    if not results:
        errors = list(why.values())
        if all(type(e) is type(errors[0]) and e.field == errors[0].field for e in errors) \
                and not isinstance(errors[0], InfeasibleError):
            raise errors[0]
        if len({e.message for e in errors}) == 1:      # every engine short for the same reason: say it once
            raise errors[0]
        raise InfeasibleError("no engine has a plan: " + "; ".join(f"{ENGINES[n].title}: {e.message}"
                                                                   for n, e in why.items()))
    best = min(results, key=lambda n: estimate_key(objective, results[n].plans[0].estimate, deadline_hours))
    won = f"{ENGINES[best].title}'s plan"
    for name in beaten:
        why[name] = Beaten("; ".join((f"beaten: by its lower bounds, none of its plans beats {won} by "
                                      f"{describe(objective)}",) + covered.get(name, ())),
                           beaten[name].complete, beaten[name].gap)
    said = ", ".join(f"{ENGINES[n].title} " + (f"{results[n].plans[0].estimate.tokens_per_s:,.0f} tokens/s"
                                                if n in results else "beaten" if n in beaten else "none")
                     for n in names)
    note = (f"planned for the best of {len(names)} engines, each a search of its own that prunes at the best plan "
            f"of the engines before it, each with the time limit left less {ENGINE_RESERVE:.0%} of it for each "
            f"engine after it ({said}); the {ENGINES[best].title} plan is shown, baselines under the same engine")
    if parallel:
        note = (f"planned for the best of {len(names)} engines, each a search of its own that prunes at the best "
                f"plan the engines before it have evaluated so far, searched in {min(options.workers, len(names))} "
                f"processes that share those plans, each process with the time limit (its own CPU seconds) for "
                f"the engines it takes, less {ENGINE_RESERVE:.0%} of it for each it may still take ({said}); the "
                f"{ENGINES[best].title} plan is shown, baselines under the same engine")
    by_engine = {n: results[n] if n in results else _why(why[n]) for n in names}
    found = replace(_combine(objective, deadline_hours, list(results.values()), list(beaten.values())),
                    notes=_engine_notes(ENGINES[best].title, method, results[best].notes) + (note,),
                    by_engine=by_engine)
    if any(e.field == "time_limit" for e in why.values()):
        found = replace(found, complete=False)
    return (_attach_baselines(cluster, job, objective, deadline_hours, top_k, options, found, known) if baselines
            else found)


# The first engine's answer of a best-engine search, in hand (search_after_first): (cluster, job under that
# engine, its SearchResult); `search` answers it once instead of searching that engine again.
_FIRST: ContextVar[tuple | None] = ContextVar("hetplan_first_engine", default=None)


def search_after_first(cluster: Cluster, job: Job, first: SearchResult, engines: tuple[str, ...],
                       objective: Objective = Objective.THROUGHPUT, deadline_hours: float | None = None,
                       top_k: int = 5, method: str = "hetplan", options: SearchOptions = SearchOptions(),
                       baselines: bool = True, **settings) -> SearchResult:
    """`search(cluster, job, ..., engines=engines)` with the first engine's answer in hand: `first` is
    `search(cluster, replace(job, engine=engines[0]), ..., baselines=False)` with the same arguments (an app
    shows it while the others are searched). The engines after it are searched, pruned at it, and the answers
    combined as `search` combines them (_search_engines: the same plans, notes, by_engine, complete and gap;
    tests/test_search.py), each engine with the limit `search` leaves it after a first engine that took no
    time (options.workers 1; more searches it in a worker again). A `first` cut short by a limit (not
    complete) depends on that limit and is not used: every engine is searched then, as by `search`."""
    token = _FIRST.set((cluster, replace(job, engine=engines[0]), first) if first.complete else None)
    try:
        return search(cluster, job, objective, deadline_hours, top_k, method, options, baselines, engines=engines,
                      **settings)
    finally:
        _FIRST.reset(token)


def _covers(name: str, job: Job, results: dict, why: dict) -> tuple[Cover, ...]:
    """The parts of engine `name`'s search space that engines searched before it vouch for: each engine it names
    in covered_by whose search in this run was complete (its answer, or Beaten) holds them at no greater cost
    (planner.engines.cover), so none of them beats the best found before `name` either."""
    return _covers_by(name, job, [other for other in ENGINES[name].covered_by
                                  if getattr(results.get(other) or why.get(other), "complete", False)])


def _covers_by(name: str, job: Job, others) -> tuple[Cover, ...]:
    """The parts of engine `name`'s search space that the engines `others` hold at no greater cost."""
    found = (cover(ENGINES[name], ENGINES[other], replace(job, engine=name)) for other in others)
    return tuple(c for c in found if c)


def _cover_notes(covers: tuple[Cover, ...]) -> tuple[str, ...]:
    return tuple(c.describe(ENGINES[c.covered].title, ENGINES[c.covering].title) for c in covers)


def _engine_notes(title: str, method: str, notes: tuple[str, ...]) -> tuple[str, ...]:
    """The winning engine's own notes under the best of several engines: its stop and gap notes name the
    engine (its share of the limit, its own gap), so that they do not read as the whole search's, whose
    gap (over every engine) the result states."""
    out = []
    for text in notes:
        if text.startswith(f"the {method} search "):
            text = f"the {title} search " + text[len(f"the {method} search "):]
        elif text.startswith("optimality gap "):
            text = f"{title}'s own search: " + text
        out.append(text)
    return tuple(out)


def _why(err: InputError) -> str:
    """Why an engine has no plan, in words for a search: a plan with too many passes to simulate is
    the global batch's doing here (its own advice, a larger micro_batch, is for a plan file's field)."""
    if isinstance(err, TooManyPassesError):
        return err.message.split(";")[0] + "; a smaller global batch has fewer"
    return err.message


def _engine_share(clock: Clock, k: int, engines: int) -> float | None:
    """The time limit of the k-th of `engines` searches: what is left less ENGINE_RESERVE of the limit
    for each engine after it (at least an equal share of what is left). The first, with no plan to
    beat, needs the most; the others, pruned at the best so far, mostly need little, but one whose
    plans come close may need several seconds to be ruled out (FlagScale behind Megatron-LM at
    4,096 GPUs: 5.6 s left it a 5.6% gap), which an equal share of the rest did not leave it."""
    if clock.limit_s is None:
        return None
    left = max(1e-3, clock.limit_s - clock.elapsed())
    return max(left / (engines - k), left - (engines - k - 1) * ENGINE_RESERVE * clock.limit_s)


ENGINE_RESERVE = 0.05    # of the time limit kept for each engine still to search (_engine_share)


def _engines_in_workers(cluster, job, names, objective, deadline_hours, top_k, method, options: SearchOptions,
                        settings: dict, baselines: bool) -> tuple[dict, dict, dict, tuple | None]:
    """_search_engines' results and errors by engine, the engines searched in options.workers processes
    (planner.search.parallel), each pruning at what the engines before it have evaluated so far; then
    held to the sequential rule, in order: an engine whose answer does not beat those before it (and
    options.beat) is beaten, complete when its own search proves it (no plan of its space beats them).
    Each skips the parts of its space that engines before it hold (_covers_by), as in turn, assuming
    their searches end complete; where one did not (a limit), it is searched again here, after them, as
    in turn (_engine_in_turn). Also the cover notes of the engines without an answer, by engine.
    The first engine's search (the largest) is split into parts where that pays (_first_parts), each a
    ticket over every n-th layout family, combined as its search in one process answers (_parts_answer).
    With `baselines`, the baselines under the first engine (the winner's, most often: its space is the
    largest) are searched too, as a ticket of their own (None in the tickets' names; this process's after the
    first engine's search or first part, where its caches are), beside the engines' searches rather than
    after them, unless that engine has ended beaten by then (SharedBest.beaten): (that job,
    _winner_baselines' answer) or None, for _attach_baselines, which searches them again, in turn, where
    another engine or setting wins."""
    parts = _first_parts(cluster, job, names[0], objective, method, options, settings)
    first = parts + (parts > 1)      # the first engine's tickets: its parts and its other offload settings
    tickets = (*((names[0], (k, parts)) for k in range(parts)), *(((names[0], None),) if parts > 1 else ()),
               *(((None, first),) if baselines else ()), *((name, (0, 1)) for name in names[1:]))
    outcomes = run_each(_engine_ticket, len(tickets), options.workers, options.time_limit_s,
                        (cluster, job, tickets, objective, deadline_hours, top_k, method, replace(options, workers=1),
                         settings), own=tuple(range(parts, first + baselines)),
                        after={parts: range(parts)} if parts > 1 else None,
                        sizes=_ticket_sizes(cluster, job, tickets, objective, options))
    known = outcomes.pop(first) if baselines else None
    if parts > 1:
        outcomes[:first] = [_parts_answer(cluster, job, names[0], objective, deadline_hours, top_k, method, options,
                                          settings=settings, outcomes=outcomes[:parts], offloads=outcomes[parts])]
    results, why, covered = {}, {}, {}
    beat = math.inf if options.beat is None else options.beat
    for k, (name, outcome) in enumerate(zip(names, outcomes)):
        covers = _covers_by(name, job, [other for other in ENGINES[name].covered_by if other in names[:k]])
        if any(not getattr(results.get(c.covering) or why.get(c.covering), "complete", False) for c in covers):
            outcome, covers = _engine_in_turn(cluster, job, name, objective, deadline_hours, top_k, method, options,
                                              settings=settings, results=results, why=why)
        outcome, beat = _held_to_turn(outcome, beat, objective, deadline_hours)
        if isinstance(outcome, SearchResult):
            results[name] = outcome
            continue
        why[name], covered[name] = outcome, _cover_notes(covers)
    return results, why, covered, known if isinstance(known, tuple) else None


def _ticket_sizes(cluster: Cluster, job: Job, tickets: list, objective, options: SearchOptions) -> list[float]:
    """Each engine ticket's estimated work for run_each's order: the layout families its engine's space
    lists (space.count_families; each is screened, and bounded where the screen lets it through), a part's
    share of them; 0 for the other tickets (run_each does not order them). A few milliseconds at 4,096 GPUs."""
    sizes = []
    for name, part in tickets:
        if name is None or part is None:
            sizes.append(0.0)
            continue
        engine_job = replace(job, engine=name)
        try:
            pools, _ = usable_pools(cluster, engine_job)
        except InputError:      # the engine has no plan at this precision: its ticket ends at once
            sizes.append(0.0)
            continue
        sizes.append(count_families(pools, job.model, job.global_batch, partial_pools(Objective(objective), options),
                                    engine=name, cp=job.context_parallel, ep=job.expert_parallel) / part[1])
    return sizes


def _engine_in_turn(cluster, job, name, objective, deadline_hours, top_k, method, options: SearchOptions,
                    settings: dict, results: dict, why: dict) -> tuple[SearchResult | InputError, tuple[Cover, ...]]:
    """Engine `name`'s search in this process, after the engines before it, as _search_engines runs it
    in turn: pruned at the best of `results` (and options.beat), skipping the parts of its space their
    complete searches hold, within what is left of the call's budget. Its answer (or why it has none)
    and the covers it used."""
    covers = _covers(name, job, results, why)
    if _spent():
        return InputError("time_limit", "not searched: the time limit was spent on the engines before it"), covers
    left = _left_s(reserved=True)
    share = replace(options, workers=1, time_limit_s=None if left is None else max(1e-3, left), covered=covers)
    try:
        found = search(cluster, replace(job, engine=name), objective, deadline_hours, top_k, method,
                       _beating(share, objective, deadline_hours, list(results.values())), False, **settings)
    except InputError as err:
        return err, covers
    return (replace(found, notes=found.notes + _cover_notes(covers)) if covers else found), covers


def _held_to_turn(outcome, beat: float, objective, deadline_hours) -> tuple[object, float]:
    """A search's outcome held to the sequential rule against `beat` (the best key of the searches before
    it): an answer that beats it stays, its key the new `beat`; one that does not is Beaten
    (_beaten_answer); why a search has no plan stays as it is. (outcome, beat)."""
    if not isinstance(outcome, SearchResult):
        return outcome, beat
    key = estimate_key(objective, outcome.plans[0].estimate, deadline_hours)
    return (outcome, key) if key < beat else (_beaten_answer(outcome, key, beat), beat)


def _beaten_answer(result: SearchResult, key: float, beat: float) -> Beaten:
    """A search's answer (estimate key `key`) that does not beat `beat`, as Beaten: complete when its
    floor (the best any plan of its space can be: key / (1 + gap)) is at least `beat`."""
    floor = key if result.complete else (None if result.gap is None else key / (1 + result.gap))
    complete = floor is not None and floor >= beat * (1 - 1e-9)
    return Beaten("no plan beats the best found elsewhere", complete,
                  0.0 if complete else (beat / floor - 1 if floor else None))


def _engine_ticket(k: int, shared: SharedBest, clock: Clock, still: int, searched_before: bool, cluster, job,
                   tickets, objective, deadline_hours, top_k, method, options: SearchOptions, settings: dict):
    """Ticket k's search in a worker process or this one (planner.search.parallel.run_each): its
    answer, or the InputError that says why it has none (Beaten among them); with the time limit
    left on this process's `clock` less ENGINE_RESERVE of it for each engine it may still take. A worker
    process has the first process's whole budget (_WHOLE: the limit and the baselines' reserve) on its
    own clock, so that it starts an engine, and cuts a search short, where the first process would. It skips
    the parts of its space the engines before it hold, as if their searches end complete (as in turn;
    _engines_in_workers checks). tickets[k]: (engine, (part, parts)), a part of that engine's search
    (SearchOptions.part: its offload setting alone); (engine, None): its other offload settings, once its parts
    have ended (_offloads_ticket); (None, n): the first engine's baselines instead, unless its n tickets have
    ended beaten (_engines_in_workers)."""
    name, part = tickets[k]
    token = _WHOLE.set(_WHOLE.get() or _process_budget(clock, options))
    try:
        if searched_before and _spent():
            return InputError("time_limit", "not searched: the time limit was spent on the engines before it")
        if part is None:
            return _offloads_ticket(shared, cluster, replace(job, engine=name), objective, deadline_hours, top_k,
                                    method, replace(options, time_limit_s=_engine_share(clock, 0, still)), settings)
        if name is None:       # the baselines have limits of their own: the engines' clock stops meanwhile
            if shared.beaten(part):
                return None
            first, before = replace(job, engine=tickets[0][0]), clock.elapsed()
            try:
                return first, _winner_baselines(cluster, first, objective, deadline_hours, options)
            finally:
                clock.start += clock.elapsed() - before
        before = [other for other, _ in tickets[:k] if other is not None]
        covers = _covers_by(name, job, [other for other in ENGINES[name].covered_by if other in before])
        if part[1] > 1:        # a part also prunes at the parts after it (ties to the first: SharedBest.ceiling)
            first = k - part[0]
            shared = SharedBest(shared.slots, shared.index, shared.done, peers=range(first, first + part[1]))
        share = replace(options, time_limit_s=_engine_share(clock, 0, still), shared_beat=shared, covered=covers,
                        part=part)
        found = search(cluster, replace(job, engine=name), objective, deadline_hours, top_k, method, share, False,
                       **(settings if part[1] == 1 else dict(settings, offload="fixed")))
    except InputError as err:
        return err
    finally:
        _WHOLE.reset(token)
    shared.offer(estimate_key(objective, found.plans[0].estimate, deadline_hours))
    if part[1] > 1 and settings["offload"] == "auto" and _offload_settings(replace(job, engine=name), found):
        shared.mark(OFFLOADS_ASKED)
    return replace(found, notes=found.notes + _cover_notes(covers)) if covers else found


def _first_parts(cluster: Cluster, job: Job, name: str, objective, method: str, options: SearchOptions,
                 settings: dict) -> int:
    """How many parts the first engine's search is split into with options.workers processes: one per
    process from FIRST_PARTS_FROM workers up, so that every process starts on it and the other engines
    start once it is (nearly) done, pruned at its answer; at 2 workers none: there the split gained nothing
    measurable (benchmarks/workers_benchmark.py at 1,024 GPUs, load 4-5, five runs each: 0.55-0.76 of one
    process's critical path split, 0.57-0.72 not) and one search keeps the whole ranking of one process
    (docs/performance.md, Worker processes). For hetplan's
    search of one context- and expert-parallel setting (each setting's offload decision reads its own
    answer: the parts search the job's offload, _parts_answer the others), not for the energy objective
    (searched on a cluster priced by power) nor the deadline's (a deadline no plan meets is explained by the
    fastest plan of the whole space), nor a search pruned at seeds (best_only)."""
    first = replace(job, engine=name)
    one = ((settings["context_parallel"] != "auto" or len(context_settings(cluster, first)) == 1)
           and (settings["expert_parallel"] != "auto" or len(expert_settings(cluster, first)) == 1))
    if (options.workers < FIRST_PARTS_FROM or not one or method != "hetplan" or options.best_only
            or Objective(objective) in (Objective.ENERGY, Objective.DEADLINE)):
        return 1
    return options.workers


FIRST_PARTS_FROM = 3      # workers from which the first engine's search is split (_first_parts)


OFFLOADS_ASKED = 2       # a part's ticket ends with its answer asking for the engine's offload settings (SharedBest.mark)


def _offloads_ticket(shared: SharedBest, cluster: Cluster, job: Job, objective, deadline_hours, top_k, method,
                     options: SearchOptions, settings: dict) -> dict | None:
    """The first engine's offload settings after its parts (the tickets before this one, all ended: run_each's
    `after`), as one process searches them after its first setting's answer (_offloads_after), here while the
    other engines search, so that they prune at these plans too: where the best part's answer (the least key,
    ties to the first part: the parts' answer, _parts_answer) asks for them (OFFLOADS_ASKED) or no part has a
    plan, each setting pruned at that answer and the settings before it. Offload -> (its answer or None, why
    none or None); None where none is asked for."""
    said, keys = list(shared.done[:shared.index]), list(shared.slots[:shared.index])
    best = min(range(len(keys)), key=lambda k: (keys[k], k))
    if keys[best] < math.inf and said[best] != OFFLOADS_ASKED:
        return None
    tries = _offload_settings(job, None) if settings["offload"] == "auto" else []
    done, beat = {}, [keys[best]] + ([] if options.beat is None else [options.beat])
    for setting in tries:
        share = replace(options, beat=None if min(beat) == math.inf else min(beat), shared_beat=shared)
        found, err = _search_or_error(cluster, replace(job, offload=setting), objective, deadline_hours, top_k,
                                      method, share, False)
        if found is not None:
            beat.append(estimate_key(objective, found.plans[0].estimate, deadline_hours))
            shared.offer(beat[-1])
        done[setting] = (found, err)
    return done


def _parts_answer(cluster: Cluster, job: Job, name: str, objective, deadline_hours, top_k, method,
                  options: SearchOptions, settings: dict, outcomes: list,
                  offloads: dict | None = None) -> SearchResult | InputError:
    """Engine `name`'s answer from its parts' (SearchOptions.part, each pruned at the others' best plans so
    far, SharedBest.peers), as its search in one process answers: each part held to the sequential rule in part order (one whose
    answer does not beat the parts before it is Beaten, complete when its own search proves it), the
    best answer of them (_combine: ties to the first part, complete when every part is, the worst gap),
    then its offload settings after it where that answer calls for them (_offloads_after, as in one process:
    the trigger reads the best plan alone), as `offloads` (_offloads_ticket) searched them. Or why it has no
    plan."""
    results, errors, beat = [], [], math.inf if options.beat is None else options.beat
    for outcome in outcomes:
        outcome, beat = _held_to_turn(outcome, beat, objective, deadline_hours)
        (results if isinstance(outcome, SearchResult) else errors).append(outcome)
    first, error = None, None
    try:
        first = _combine(objective, deadline_hours, results, errors)
    except InputError as err:
        error = err
    if first is not None:
        answers = [o for o in outcomes if isinstance(o, SearchResult)]
        first = replace(_merged_ranking(objective, deadline_hours, top_k, first, answers),
                        candidates_evaluated=sum(r.candidates_evaluated for r in answers))
        if any(isinstance(e, InputError) and e.field == "time_limit" for e in errors):
            first = replace(first, complete=False, gap=None)
    left = _left_s(reserved=True)
    share = replace(options, workers=1, time_limit_s=None if left is None else max(1e-3, left))
    try:
        found = _offloads_after(cluster, replace(job, engine=name), objective, deadline_hours, top_k, method, share,
                                first=first, error=error, offload=settings["offload"],
                                done=offloads if isinstance(offloads, dict) else None)
    except InputError as err:
        return err
    return replace(found, notes=found.notes + (
        f"{ENGINES[name].title}'s space with the job's offload setting searched in {len(outcomes)} parts (part k: "
        f"the layout families k, k + {len(outcomes)}, k + {2 * len(outcomes)}, ...) in worker processes, each "
        f"pruned at the best plan of the others (ties to the first part); the best of their answers",))


def _merged_ranking(objective, deadline_hours, top_k: int, best: SearchResult, answers: list) -> SearchResult:
    """`best`, the best of the parts' answers, with the plans and front of all of them: their plans ranked
    together by key (ties: part order, then each part's own; a plan in two parts' answers once), each
    explained against the plan after it there, and the front over all their fronts' points."""
    ranked, seen = [], set()
    for _, _, _, sp in sorted((estimate_key(objective, sp.estimate, deadline_hours), k, j, sp)
                              for k, answer in enumerate(answers) for j, sp in enumerate(answer.plans)
                              if sp.plan not in seen and not seen.add(sp.plan)):
        ranked.append((sp.plan, sp.estimate))
    assert ranked[0][0] == best.plans[0].plan, "the best part's first plan leads the merged ranking"
    top = ranked[:top_k]
    texts = explain_ranking(objective, top, ranked)
    front = _front([(sp.plan, sp.estimate) for answer in answers for sp in answer.pareto])
    return replace(best, plans=tuple(ScoredPlan(p, e, {}, text) for (p, e), text in zip(top, texts)),
                   pareto=tuple(ScoredPlan(p, e, {}, describe_plan(p)) for p, e in front))


def _process_budget(clock: Clock, options: SearchOptions) -> tuple[Clock, float] | None:
    """_whole_budget(options, baselines=True) counted from `clock`'s start."""
    whole = _whole_budget(options, True)
    if whole is not None:
        whole[0].start = clock.start
    return whole


def _search_settings(cluster: Cluster, job: Job, objective: Objective, deadline_hours, top_k, method, options,
                     baselines, offload: str, context_parallel: str, expert_parallel: str) -> SearchResult:
    """`search` for a cluster as given (its docstring: each setting a search of its own)."""
    cps = context_settings(cluster, job) if context_parallel == "auto" else [job.context_parallel]
    eps = expert_settings(cluster, job) if expert_parallel == "auto" else [job.expert_parallel]
    if len(cps) == len(eps) == 1:
        return _search_offloads(cluster, job, objective, deadline_hours, top_k, method, options, baselines, offload)
    results, errors, skipped = [], [], []
    for cp in cps:
        for ep in eps:
            if results and _spent():
                skipped.append(f"context {cp} x expert {ep}")
                continue
            try:
                results.append(_search_offloads(cluster, replace(job, context_parallel=cp, expert_parallel=ep),
                                                objective, deadline_hours, top_k, method,
                                                _beating(options, objective, deadline_hours, results), False, offload))
            except InfeasibleError as err:
                errors.append(err)
    best = _combine(objective, deadline_hours, results, errors)
    said = [f"context parallelism ({', '.join(map(str, cps))})"] if len(cps) > 1 else []
    said += [f"expert parallelism ({', '.join(map(str, eps))})"] if len(eps) > 1 else []
    note = (f"{' and '.join(said)} searched, each setting a search of its own, pruned by the best answer so far; "
            f"the best answer is shown")
    best = replace(best, notes=best.notes + (note,) + _skipped_note(skipped))
    if skipped:
        best = replace(best, complete=False, gap=None)
    return _attach_baselines(cluster, job, objective, deadline_hours, top_k, options, best) if baselines else best


def _search_energy(cluster: Cluster, job: Job, deadline_hours, top_k, method, options, baselines,
                   settings: dict) -> SearchResult:
    """The energy objective: the search of the cost objective on the cluster with each GPU priced at its
    board power in kW, so that every dollar figure it ranks by is a kWh figure (planner.energy counts
    the GPUs used at board power for the whole iteration); the answer's plans are then evaluated on
    the cluster as it is, for their real prices."""
    powered = _powered(cluster)
    found = _search_settings(powered, job, Objective.ENERGY, deadline_hours, top_k, method, options, baselines,
                             **settings)

    def real(sp: ScoredPlan | None) -> ScoredPlan | None:
        if sp is None:
            return None
        return replace(sp, estimate=evaluate(cluster, sp.plan, job.tokens_to_train, options.cost_options))

    base = {name: real(sp) for name, sp in found.baselines.items()}
    plans = tuple(replace(real(sp), gain_over=_gains(Objective.ENERGY, sp.estimate, base)) for sp in found.plans)
    return replace(found, plans=plans, baselines=base, pareto=tuple(real(sp) for sp in found.pareto))


def _powered(cluster: Cluster) -> Cluster:
    """The cluster with each GPU priced at its board power in kW (the energy objective's search)."""
    return replace(cluster, pools=tuple(replace(p, price_per_gpu_hour_usd=p.gpu.power_w / 1000) for p in cluster.pools))


# Expert-parallel degrees searched: powers of two dividing the experts, up to this many
MAX_SEARCHED_EXPERT_PARALLEL = 16


def expert_settings(cluster: Cluster, job: Job) -> list[int]:
    """The expert-parallel degrees worth a search: 1 (or the job's own) and, for a mixture-of-experts
    model under an engine with expert parallelism, each power of two up to
    MAX_SEARCHED_EXPERT_PARALLEL that divides the experts (a stage needs that many replicas)."""
    degrees = [job.expert_parallel]
    if not job.model.is_moe or not engine_profile(job.engine).space.expert_parallel:
        return degrees
    ep = 2
    while ep <= min(MAX_SEARCHED_EXPERT_PARALLEL, cluster.num_gpus) and job.model.experts % ep == 0:
        if ep not in degrees:
            degrees.append(ep)
        ep *= 2
    return degrees


def context_settings(cluster: Cluster, job: Job) -> list[int]:
    """The context-parallel degrees worth a search for this job: 1 (or the job's own) and, where the
    engine has context parallelism and the sequence is long (CP_MIN_SEQ_LEN), each power of two
    that splits it into chunks of CP_MIN_TOKENS_PER_GPU or more and fits some pool."""
    degrees = [job.context_parallel]
    if not engine_profile(job.engine).space.context_parallel or job.seq_len < CP_MIN_SEQ_LEN:
        return degrees
    most = max(p.num_gpus for p in cluster.pools)
    cp = 2
    while job.seq_len // cp >= CP_MIN_TOKENS_PER_GPU and cp <= most and job.seq_len % (2 * cp) == 0:
        if cp not in degrees:
            degrees.append(cp)
        cp *= 2
    return degrees


def _search_offloads(cluster: Cluster, job: Job, objective, deadline_hours, top_k, method, options, baselines,
                     offload: str) -> SearchResult:
    """`search` with the context-parallel degree fixed (its `offload` argument as there). Each offload
    setting after the first prunes at the best answer so far (SearchOptions.beat); the baselines are
    searched once, for the winner."""
    first, error = _search_first(cluster, job, objective, deadline_hours, top_k, method, options)
    best = _offloads_after(cluster, job, objective, deadline_hours, top_k, method, options, first=first, error=error,
                           offload=offload)
    return _attach_baselines(cluster, job, objective, deadline_hours, top_k, options, best) if baselines else best


def _offloads_after(cluster: Cluster, job: Job, objective, deadline_hours, top_k, method, options,
                    first: SearchResult | None, error: InputError | None, offload: str,
                    done: dict | None = None) -> SearchResult:
    """_search_offloads after its first setting's answer `first` (or `error`): the other offload settings,
    those of `done` (Offload -> (answer, error): _offloads_ticket) as searched there."""
    tries = _offload_settings(job, first) if offload == "auto" else []
    done = done if done is not None and list(done) == tries else {}     # searched as this answer asks, or not used
    results, errors = [] if first is None else [first], [error]
    skipped = [o.value for o in tries if results and _spent() and o not in done]
    for setting in [o for o in tries if o.value not in skipped]:
        found, err = done.get(setting) or _search_or_error(
            cluster, replace(job, offload=setting), objective, deadline_hours, top_k, method,
            _beating(options, objective, deadline_hours, results), False)
        results, errors = results + [found] * (found is not None), errors + [err]
    best = _combine(objective, deadline_hours, results, errors)
    if tries:
        searched = ", ".join(o.value for o in [job.offload, *tries])
        best = replace(best, notes=best.notes + (f"offload searched ({searched}) because {_offload_reason(first)}; "
                                                 f"each setting is a search of its own, pruned by the "
                                                 f"best answer so far; the best answer is shown",)
                    + _skipped_note(skipped))
    if skipped:
        best = replace(best, complete=False, gap=None)
    return best


def _search_first(cluster: Cluster, job: Job, objective, deadline_hours, top_k, method,
                  options: SearchOptions) -> tuple[SearchResult | None, InputError | None]:
    """_search_or_error of the job as given (the first setting of _search_offloads), pruned at its seed where
    it has one (_seeded); where nothing beats the seed, searched again without it. The same answer either
    way (tests/test_search.py): an answer that beats the seed's threshold is visited, and what the threshold
    prunes cannot beat it."""
    seeded = _seeded(cluster, job, objective, deadline_hours, options)
    found, error = _search_or_error(cluster, job, objective, deadline_hours, top_k, method, seeded, False)
    if isinstance(error, Beaten) and seeded is not options:
        return _search_or_error(cluster, job, objective, deadline_hours, top_k, method, options, False)
    return found, error


# A seed prunes at its key this much above it: the search's answer may tie it (the same plan), or lose to it by
# a little (the same layout and knobs with the seed engine's layer split, balanced on other pass times: 0.02% under
# the cost objective on the 64-GPU job), and a search Beaten at the seed is searched again. Any margin keeps the
# answer; a wider one visits more (benchmarks/engine_all.py: 1e-9, 1e-3 and 1e-2 in docs/performance.md).
SEED_MARGIN = 1e-3


def _seeded(cluster: Cluster, job: Job, objective, deadline_hours, options: SearchOptions) -> SearchOptions:
    """`options` that prune (SearchOptions.beat) at the best seed plan under the job's engine (options.seeds,
    each as that engine's search writes it, _as_searched), evaluated by the cost model on this cluster; only
    for a best_only search, whose answer is its best plan alone: pruning at it leaves that plan, but not
    the plans after it, the front or the fast scores counted (and the reasons given for idle pools are
    what this search saw). A seed is not the answer: with it, the search runs without its greedy first
    plan, and a search that finds no plan beating it is run again without it (_search_first)."""
    if not options.best_only or not options.seeds:
        return options
    plans = [plan for plan in (_as_searched(seed, job) for seed in options.seeds) if plan is not None]
    key = min((estimate_key(objective, _evaluate_plan(cluster, job, plan, options), deadline_hours)
               for plan in dict.fromkeys(plans)), default=math.inf)
    if key == math.inf or (options.beat is not None and key * (1 + SEED_MARGIN) >= options.beat):
        return options
    return replace(options, beat=key * (1 + SEED_MARGIN))


def _as_searched(plan: Plan, job: Job) -> Plan | None:
    """`plan` as the search of `job` under its engine writes it (the engine's tp-communication overlap and
    switches, as Candidate.to_plan sets them), or None where it is not of that search's setting (model,
    batch, sequence, job kind, offload, context and expert parallelism) or the engine cannot run it."""
    engine = engine_profile(job.engine)
    if (plan.model, plan.global_batch, plan.seq_len, plan.training, plan.offload, plan.context_parallel,
            plan.expert_parallel) != (job.model, job.global_batch, job.seq_len, job.training, job.offload,
                                      job.context_parallel, job.expert_parallel):
        return None
    switches = {**dict.fromkeys(SWITCHES), **engine.search_switches(plan.num_stages, plan.zero_stage)}
    try:
        plan = replace(plan, engine=job.engine, tp_comm_overlap=plan.sequence_parallel and engine.space.tp_comm_overlap,
                       **switches)
    except InputError:
        return None
    return None if engine.violations(plan) else plan


def _skipped_note(skipped: list[str]) -> tuple[str, ...]:
    return (f"not searched, the time limit spent: {', '.join(skipped)}",) if skipped else ()


def _beating(options: SearchOptions, objective, deadline_hours, results: list[SearchResult]) -> SearchOptions:
    """`options` for one more search of a union of spaces: prune at the best answer so far."""
    keys = [estimate_key(objective, r.plans[0].estimate, deadline_hours) for r in results]
    if options.beat is not None:
        keys.append(options.beat)
    return replace(options, beat=min(keys)) if keys else options


def _combine(objective, deadline_hours, results: list[SearchResult], errors: list) -> SearchResult:
    """The best of searches over parts of one space (settings, engines), each run with the best so far to
    beat: complete when every part is, its own answer or beaten (Beaten), with the worst gap of them (each
    part's gap is against the best it knew, never better than the final answer, so the worst bounds the
    true gap). Raises Beaten when no part beats options.beat, else the first part's error when none has a plan."""
    beaten = [e for e in errors if isinstance(e, Beaten)]
    gaps = [r.gap for r in results] + [b.gap for b in beaten]
    complete = all(r.complete for r in results) and all(b.complete for b in beaten)
    gap = 0.0 if complete else (None if any(g is None for g in gaps) else max(gaps))
    if not results:
        if beaten:
            raise Beaten(beaten[0].message, complete, gap)
        raise next(e for e in errors if e is not None)
    best = min(results, key=lambda r: estimate_key(objective, r.plans[0].estimate, deadline_hours))
    return best if len(results) == 1 and not beaten else replace(best, complete=complete, gap=gap)


def attach_baselines(cluster: Cluster, job: Job, result: SearchResult, objective: Objective = Objective.THROUGHPUT,
                     deadline_hours: float | None = None, top_k: int = 5,
                     options: SearchOptions = SearchOptions()) -> SearchResult:
    """`result`, a `search(..., baselines=False)` answer for `cluster` and `job` with the same arguments, with
    the baselines `search(..., baselines=True)` would have attached (each within options.baseline_time_limit_s),
    the gains over them and any baseline plan better than the answer ranked in: the same answer as the one
    call, except under one engine with the energy objective (that search attaches them on the cluster priced
    by power) and where a limit cut the search short (its time was not shared with the baselines')."""
    limit_s = options.baseline_time_limit_s
    token = _WHOLE.set(None if limit_s is None else (Clock(len(BASELINES) * limit_s), 0.0))
    try:
        return _attach_baselines(cluster, job, Objective(objective), deadline_hours, top_k, options, result)
    finally:
        _WHOLE.reset(token)


def _attach_baselines(cluster, job, objective, deadline_hours, top_k, options, result: SearchResult,
                      known: tuple | None = None) -> SearchResult:
    """The baselines of the winner of several searches (each run without them), searched under the
    winner's engine and settings, so that a gain compares like with like; as in _search_setting, a
    baseline plan better than the answer (a limit cut the search short) joins the ranking, and the
    baselines' plans join the Pareto front. `known`: (a job, its _winner_baselines), searched already
    (_engines_in_workers), used when that job is the winner's."""
    plan = result.plans[0].plan
    job = replace(job, engine=plan.engine, offload=plan.offload, context_parallel=plan.context_parallel,
                  expert_parallel=plan.expert_parallel)
    base, base_notes, base_status = (known[1] if known is not None and known[0] == job
                                     else _winner_baselines(cluster, job, objective, deadline_hours, options))
    ranked, adopted = _adopt_baselines(objective, deadline_hours, [(sp.plan, sp.estimate) for sp in result.plans], base)
    texts = [sp.explanation for sp in result.plans]
    gap = result.gap
    if adopted:
        base_notes += (f"a limit cut the search short of the {', '.join(adopted)} baseline's plan, which is in "
                       f"its space; that plan is ranked with the search's own",)
        texts = explain_ranking(objective, ranked[:top_k], ranked)
        if gap is not None and not result.complete:     # the unverified floor, against the better answer
            floor = estimate_key(objective, result.plans[0].estimate, deadline_hours) / (1 + gap)
            gap = max(0.0, estimate_key(objective, ranked[0][1], deadline_hours) / floor - 1)
    plans = tuple(ScoredPlan(p, e, _gains(objective, e, base), text) for (p, e), text in zip(ranked[:top_k], texts))
    points = [(sp.plan, sp.estimate) for sp in result.pareto] + [(b.plan, b.estimate) for b in base.values() if b]
    pareto = tuple(ScoredPlan(p, e, {}, describe_plan(p)) for p, e in _front(points))
    return replace(result, plans=plans, pareto=pareto, baselines=base, baseline_status=base_status,
                   notes=result.notes + base_notes, gap=gap)


def _winner_baselines(cluster, job, objective, deadline_hours, options):
    """_baselines under `job` (the winner's engine and settings) and its scorer's caches where this
    call has them; for the energy objective on the cluster priced by power, as _search_energy searches,
    their plans then evaluated on the cluster as it is."""
    powered = _powered(cluster) if objective == Objective.ENERGY else cluster
    base, notes, status = _baselines(powered, job, objective, deadline_hours, options,
                                     _winner_bounds(powered, job, options))
    if powered != cluster:
        base = {name: sp and replace(sp, estimate=evaluate(cluster, sp.plan, job.tokens_to_train, options.cost_options))
                for name, sp in base.items()}
    return base, notes, status


def _check_job_kind(job: Job) -> None:
    space = engine_profile(job.engine).space
    if job.training.kind not in space.job_kinds:
        others = [e.name for e in ENGINES.values() if job.training.kind in e.space.job_kinds]
        raise InputError("job.kind", f"{engine_profile(job.engine).title} does not run {job.training.kind.value} "
                                     f"jobs; plan it for {', '.join(others) or 'another engine'} (--engine)")
    if (job.model.is_moe and not space.mixture_of_experts) or (job.model.is_mla and not space.latent_attention):
        others = [e.name for e in ENGINES.values() if e.space.mixture_of_experts and e.space.latent_attention]
        raise InputError("engine", f"{engine_profile(job.engine).title} cannot run {job.model.id} (" + "; ".join(
            engine_profile(job.engine).model_violations(job.model)) + f"); plan it for {', '.join(others)} (--engine)")
    if job.expert_parallel > 1 and not space.expert_parallel:
        others = [e.name for e in ENGINES.values() if e.space.expert_parallel]
        raise InputError("expert_parallel", f"{engine_profile(job.engine).title} has no expert parallelism; plan "
                                            f"it for {', '.join(others)} (--engine), or set it to 1")
    if job.context_parallel > 1 and not space.context_parallel:
        others = [e.name for e in ENGINES.values() if e.space.context_parallel]
        raise InputError("context_parallel", f"{engine_profile(job.engine).title} has no context parallelism; plan "
                                             f"it for {', '.join(others)} (--engine), or set it to 1")
    if job.offload != Offload.NONE and not space.offload_zero_stages(job.offload):
        raise InputError("offload", f"{engine_profile(job.engine).title} does not offload {job.offload.value}; "
                                    f"use --offload auto or none, or another --engine")


def _search_or_error(*args) -> tuple[SearchResult | None, InputError | None]:
    try:
        return _search_setting(*args), None
    except InfeasibleError as err:
        return None, err


def _offload_reason(first: SearchResult | None) -> str:
    """Which of _offload_settings' triggers held, in words."""
    if first is None:
        return "no plan fits in GPU memory without it"
    if first.idle:
        return "GPUs stay idle without it (offload may give them room for a stage)"
    return f"the fullest GPU holds more than {OFFLOAD_MEMORY_SHARE:.0%} of its memory without it"


def _offload_settings(job: Job, first: SearchResult | None) -> list[Offload]:
    """The offload settings worth a search of their own after `first` (module constant above)."""
    space = engine_profile(job.engine).space
    if job.offload != Offload.NONE or not space.offloads or job.training.adapters:
        return []
    if first is not None and not first.idle:
        peak = max(r.memory.total_bytes / r.memory.capacity_bytes for r in first.plans[0].estimate.replicas)
        if peak <= OFFLOAD_MEMORY_SHARE:
            return []
    return [o for o, _ in space.offloads]


def _worst_gap(results: list[SearchResult]) -> float | None:
    gaps = [r.gap for r in results]
    return None if any(g is None for g in gaps) else max(gaps)


def _search_setting(cluster: Cluster, job: Job, objective: Objective = Objective.THROUGHPUT,
                    deadline_hours: float | None = None, top_k: int = 5, method: str = "hetplan",
                    options: SearchOptions = SearchOptions(), baselines: bool = True) -> SearchResult:
    """`search` with the job's offload setting fixed."""
    objective = Objective(objective)
    check_objective(objective, job, deadline_hours)
    if method not in PLANNERS:
        raise InputError("method", f"unknown planner {method!r}; known: {sorted(PLANNERS)}")
    if not isinstance(top_k, int) or top_k < 1:
        raise InputError("top_k", f"must be a positive whole number, got {top_k!r}")
    start = time.perf_counter()
    options = _within_whole(options)
    clock = Clock(options.time_limit_s)
    shared = shared_bounds(cluster, job, options)    # one scorer's caches for the search, its proof and baselines
    first = _greedy_first(cluster, job, objective, deadline_hours, options, shared, method, clock)
    considered = PLANNERS[method].consider(cluster, job, objective, deadline_hours, _with_first(options, first, clock),
                                           shared)
    if first is not None:            # ranked with the search's own plans, not evaluated again
        considered.incumbents.append(first[:2])
        considered.evaluated[first[0]] = first[1]
    options = beat_now(options)      # with workers: what the searches before this one found meanwhile
    if considered.exact:       # the exhaustive planner is bounded by exhaustive_max_gpus, not by the clock
        clock = None
    if not considered.kept and considered.stopped_by == TIME_LIMIT and options.beat is None and first is None:
        limit = options.time_limit_s or considered.time_limit_s     # the search's, the greedy plan's share included
        raise InputError("time_limit", f"no plan found within {limit:g} s on this "
                                       f"{cluster.num_gpus:,}-GPU cluster; raise the time limit (--time-limit, "
                                       f"SearchOptions.time_limit_s) or plan on fewer pools or GPUs")
    full: dict[Plan, Estimate] = {}
    pruning = _with_first(options, first)       # what to beat: options.beat, or the greedy plan when better
    shown = 1 if options.best_only else top_k      # plans the answer holds
    ranked = _rank(cluster, job, objective, deadline_hours, considered, pruning, clock,
                   0 if options.best_only else top_k, full)
    if not ranked and options.beat is None and first is None:
        _raise_infeasible(cluster, job, objective, deadline_hours, considered, options)
    ranked, floor = _verify(cluster, job, objective, deadline_hours, considered, pruning, ranked, clock, shared)
    if options.beat is not None and (not ranked or estimate_key(objective, ranked[0][1], deadline_hours) >= options.beat):
        complete = floor >= options.beat * (1 - 1e-9)
        raise Beaten("no plan beats the best found elsewhere", complete,
                     0.0 if complete else (options.beat / floor - 1 if floor > 0 else None))
    search_time = time.perf_counter() - start
    base, base_notes, base_status = (_baselines(cluster, job, objective, deadline_hours, options, shared) if baselines
                                     else ({}, (), {}))
    ranked, adopted = _adopt_baselines(objective, deadline_hours, ranked, base)
    if adopted:
        base_notes += (f"a limit cut the search short of the {', '.join(adopted)} baseline's plan, which is in "
                       f"its space; that plan is ranked with the search's own",)
    full.update({b.plan: b.estimate for b in base.values() if b is not None})
    top = ranked[:_evaluate_shown(cluster, job, ranked, shown, options, full, after=not options.best_only)]
    if len(top) < min(shown, len(ranked)):
        base_notes += (f"the time limit left room to evaluate in full only {len(top)} of the "
                       f"{min(shown, len(ranked))} best plans; the others are not shown",)
    explanations = explain_ranking(objective, top, None if options.best_only else ranked)
    plans = tuple(ScoredPlan(plan, est, _gains(objective, est, base), text)
                  for (plan, est), text in zip(top, explanations))
    pareto = () if options.best_only else _pareto(cluster, job, considered, options, ranked + [
        (b.plan, b.estimate) for b in base.values() if b is not None], clock, full)
    best = estimate_key(objective, ranked[0][1], deadline_hours)
    # a search a limit cut short is still complete when what it left has bounds no better than the answer
    complete = considered.exact or floor >= best * (1 - 1e-9)
    gap = 0.0 if complete else (best / floor - 1 if floor > 0 else None)
    notes = tuple(_stop_notes(method, considered, options, gap)) + base_notes
    idle = idle_reasons(cluster, objective, plans[0], considered)
    _keep_bounds(cluster, job, options, shared, best)
    return SearchResult(plans=plans, pareto=pareto, baselines=base, idle=idle, search_time_s=search_time,
                        candidates_evaluated=considered.fast_scores, objective=objective, method=method, notes=notes,
                        complete=complete, gap=gap, stopped_by=considered.stopped_by,
                        guarantee=_guarantee(method, complete, gap, considered), baseline_status=base_status)


def _greedy_first(cluster, job, objective, deadline_hours, options: SearchOptions, shared: Bounds, method: str,
                  clock: Clock) -> tuple[Plan, Estimate, float] | None:
    """The greedy first plan (planner.search.greedy), evaluated, and its estimate key: for hetplan's
    search when it has no plan to beat from elsewhere (the first engine or setting searched; with
    workers, the first ticket), else None. The search then prunes at it from its start, and a short
    time limit answers with at least it."""
    if method != "hetplan" or options.beat is not None or getattr(options.shared_beat, "index", 0):
        return None
    cand = greedy_candidate(shared, objective, deadline_hours, options.time_limit_s)
    if cand is None or clock.expired(share=SEARCH_SHARE):
        return None
    plan = cand.to_plan(job)
    est = _evaluate_plan(cluster, job, plan, options)
    key = estimate_key(objective, est, deadline_hours)
    if key == math.inf:
        return None
    if options.shared_beat is not None:          # the searches after this one prune at it at once
        options.shared_beat.offer(key)
    return plan, est, key


def _with_first(options: SearchOptions, first: tuple[Plan, Estimate, float] | None,
                clock: Clock | None = None) -> SearchOptions:
    """`options` that prune at the greedy first plan as well (SearchOptions.beat), and with `clock`
    the time limit that is left after choosing and evaluating it (or trying to)."""
    if clock is not None and options.time_limit_s is not None:
        options = replace(options, time_limit_s=max(1e-3, options.time_limit_s - clock.elapsed()))
    if first is None:
        return options
    return replace(options, beat=min(first[2], math.inf if options.beat is None else options.beat))


def _within_whole(options: SearchOptions) -> SearchOptions:
    """`options` with the search's limit cut to what is left of the whole call's budget, the
    baselines' share kept (at least 1 ms: a search always finds its first plan)."""
    left = _left_s(reserved=True)
    if left is None or options.time_limit_s is None:
        return options
    return replace(options, time_limit_s=max(1e-3, min(options.time_limit_s, left)))


def _evaluate_shown(cluster, job, ranked: list, top_k: int, options, full: dict, after: bool = True) -> int:
    """Evaluate in full (`_full`) the plans shown and (`after`) the one after them, best first, the first
    even past the whole budget; returns how many are shown (the plans evaluated, at most top_k)."""
    done = 0
    for k, (plan, _) in enumerate(ranked[:top_k + after]):
        if k and _spent():
            break
        ranked[k] = (plan, _full(cluster, job, plan, options, full))
        done += 1
    return min(top_k, done)


def _verify(cluster, job, objective, deadline_hours, considered: Considered, options, ranked,
            clock: Clock | None, shared: Bounds | None = None) -> tuple[list, float]:
    """Make the answer checkable by the cost model itself. Every setting the search skipped or
    scored without re-scoring has a lower bound that also bounds planner.cost.evaluate
    (planner.search.bound, Candidate.floor_s; tests/test_one_cost_model.py). When what the search
    pruned could still beat the answer by those bounds, a proof pass visits everything below the
    answer's key (hetplan's planner, while the clock has time); then the scored candidates not
    re-scored whose bound is below the answer's evaluated key are re-scored, smallest bound first
    (at most options.verify of them), and join the ranking when they win. Returns the ranking and
    the smallest bound, as an estimate key, of what is still unverified: the answer is proven best
    in the space when that is at least its key."""
    if considered.exact:
        return ranked, math.inf
    seen = {plan for plan, _ in ranked}
    ranked += [(plan, est) for plan, est in considered.incumbents if plan not in seen]   # evaluated in the search
    seen.update(plan for plan, _ in considered.incumbents)
    seen.update(considered.evaluated)         # incumbents that do not fit were evaluated too: not again
    ranked.sort(key=lambda pe: estimate_key(objective, pe[1], deadline_hours))
    best = min(estimate_key(objective, ranked[0][1], deadline_hours) if ranked else math.inf,
               math.inf if options.beat is None else options.beat)
    floor = min(considered.pruned_floor, considered.lower_bound if considered.stopped_by is not None else math.inf)
    dropped, dropped_floor = considered.dropped, considered.dropped_floor
    if (estimate_key_of_fast(objective, job, floor) < best * (1 - 1e-9) and considered.stopped_by is None
            and considered.method == "hetplan" and (clock is None or not clock.expired())):
        left = None if clock is None or clock.limit_s is None else max(1e-3, clock.limit_s - clock.elapsed())
        proof = PLANNERS["hetplan"].consider(cluster, job, objective, deadline_hours, options, shared,
                                             prove_below=fast_key_of_estimate(objective, job, best), time_limit_s=left)
        if proof.stopped_by is None:
            floor, dropped, dropped_floor = proof.pruned_floor, proof.dropped, proof.dropped_floor
            considered.proof_pass = True
    floor = estimate_key_of_fast(objective, job, min(floor, dropped_floor))
    checked = 0
    for bound, _, cand in sorted(((-neg, tie, cand) for neg, tie, cand in dropped), key=lambda e: (e[0], e[1])):
        bound = estimate_key_of_fast(objective, job, bound)
        if bound >= best * (1 - 1e-9):
            break
        plan = cand.to_plan(job)
        if plan in seen:
            continue
        if checked >= options.verify or (clock is not None and clock.expired()):
            floor = min(floor, bound)
            break
        est = _evaluate_plan(cluster, job, plan, options)
        checked += 1
        seen.add(plan)
        key = estimate_key(objective, est, deadline_hours)
        if key < math.inf:
            ranked.append((plan, est))
        best = min(best, key)
    considered.verified = checked
    ranked.sort(key=lambda pe: estimate_key(objective, pe[1], deadline_hours))     # stable: ties keep their order
    return ranked, floor


def _guarantee(method: str, complete: bool, gap: float | None, considered: Considered) -> str:
    space = ("every layout and knob setting of the search space, each with the layer split and sample "
             "shares the search's balancing gives it")
    if considered.exact:
        return f"best by the cost model over {space}: every candidate was evaluated ({method} search)"
    if complete:
        return (f"best by the cost model (planner.cost.evaluate) over {space}: every candidate not evaluated has a "
                f"lower bound on its evaluated time at least the answer's")
    if gap is None:
        return "no promise: the search stopped before it could bound what it did not reach"
    return (f"within {gap:.1%} of the best over {space}, by the cost model: no candidate not evaluated can beat "
            f"the answer by more (lower bounds on evaluated times)")


def _adopt_baselines(objective, deadline_hours, ranked, base):
    """The baselines' plans lie in the search's space, so the search never answers worse than
    they do: when a limit cut it short of one, that plan joins the ranking (the search's own plans
    first on ties). Returns the ranking and the names of the baselines adopted."""
    best = estimate_key(objective, ranked[0][1], deadline_hours)
    adopted = [name for name, b in base.items()
               if b is not None and estimate_key(objective, b.estimate, deadline_hours) < best
               and all(b.plan != plan for plan, _ in ranked)]
    if not adopted:
        return ranked, []
    merged = ranked + [(base[name].plan, base[name].estimate) for name in adopted]
    order = {id(pe): k for k, pe in enumerate(merged)}
    merged.sort(key=lambda pe: (estimate_key(objective, pe[1], deadline_hours), order[id(pe)]))
    return merged, adopted


def optimality_gap(considered: Considered) -> float | None:
    """How much better than the best candidate found an unexplored plan could still be, on the
    search's fast estimate: best fast key / smallest lower bound left - 1 (0: proven best within
    the search space; None: nothing found). Bounds and keys are per iteration (throughput) or
    per dollar-iteration (cost), smaller is better."""
    if not considered.kept:
        return None
    best = considered.kept[0][0]
    if considered.stopped_by is None or considered.lower_bound >= best:
        return 0.0
    return best / considered.lower_bound - 1


def _stop_notes(method: str, considered: Considered, options: SearchOptions, gap: float | None):
    if considered.stopped_by == BUDGET:
        yield (f"the {method} search stopped at its budget of {options.max_fast_scores:,} fast scores (deterministic); "
               f"raise SearchOptions.max_fast_scores for a complete search")
    elif considered.stopped_by == TIME_LIMIT:
        limit = considered.time_limit_s or options.time_limit_s
        yield (f"the {method} search stopped at its time limit of {limit:.3g} CPU seconds (a busy machine does not "
               f"cut it shorter, a slower one does); raise --time-limit / SearchOptions.time_limit_s for a complete "
               f"search")
    if considered.rescore_cut:
        yield (f"the time limit left room to re-score only {considered.rescored} of the {len(considered.kept)} best "
               f"candidates with the cost model")
    if considered.stopped_by is not None and gap is not None:
        yield (f"optimality gap {gap:.1%}: no unexplored plan can be more than {gap:.1%} better than the best found "
               f"(on the search's fast estimate)")


def _evaluate_plan(cluster: Cluster, job: Job, plan: Plan, options: SearchOptions) -> Estimate:
    return evaluate(cluster, plan, job.tokens_to_train, options.cost_options, detail=False, kept=EVALUATED.get())


def _full(cluster: Cluster, job: Job, plan: Plan, options: SearchOptions,
          memo: dict[Plan, Estimate] | None = None) -> Estimate:
    """Exactly what `planner.cost.evaluate(cluster, plan)` reports: the metrics a returned plan
    carries. `memo` keeps those already computed, as the front repeats the top plans and baselines; a
    plan this search evaluated without detail (planners.EVALUATED) is finished from what that evaluation kept."""
    if memo is None:
        return evaluate(cluster, plan, job.tokens_to_train, options.cost_options, kept=EVALUATED.get())
    if plan not in memo:
        memo[plan] = evaluate(cluster, plan, job.tokens_to_train, options.cost_options, kept=EVALUATED.get())
    return memo[plan]


def _rank(cluster, job, objective, deadline_hours, considered: Considered, options,
          clock: Clock | None = None, top_k: int | None = None,
          full: dict[Plan, Estimate] | None = None) -> list[tuple[Plan, Estimate]]:
    """Re-score the kept candidates with the cost model; best first, ties by the search's order.
    Past the `clock`'s limit, stops once one plan that fits is scored (by fast score, the best
    candidates come first); `considered.rescored` says how many were. A candidate the search
    already evaluated as an incumbent (`considered.evaluated`) is not evaluated again, nor (with
    `top_k`) one whose lower bound cannot enter the top_k + 1 scored so far or beat options.beat.
    Until one plan fits, each is evaluated in full at once (into `full`): the best is shown, and is
    not evaluated twice."""
    scored, shown = [], []          # shown: the top_k + 1 smallest keys so far, negated (a max-heap)
    beat = math.inf if options.beat is None else options.beat
    for order, (_, _, cand, bound) in enumerate(considered.kept):
        if scored and clock is not None and clock.expired():
            considered.stopped_by, considered.rescore_cut = considered.stopped_by or TIME_LIMIT, True
            considered.lower_bound = min([considered.lower_bound] + [b for _, _, _, b in considered.kept[order:]])
            break
        plan = cand.to_plan(job)
        est = considered.evaluated.get(plan)
        if est is None and top_k is not None and estimate_key_of_fast(objective, job, bound) >= min(
                beat, -shown[0] if len(shown) > top_k else math.inf):
            continue
        est = est or (_full(cluster, job, plan, options, full) if not scored and full is not None
                      else _evaluate_plan(cluster, job, plan, options))
        if top_k is not None:
            heapq.heappush(shown, -estimate_key(objective, est, deadline_hours))
            if len(shown) > top_k + 1:
                heapq.heappop(shown)
        considered.rescored += 1
        key = estimate_key(objective, est, deadline_hours)
        if key < math.inf:
            scored.append((key, order, plan, est))
    scored.sort(key=lambda e: (e[0], e[1]))
    return [(plan, est) for _, _, plan, est in scored]


def _pareto(cluster, job, considered: Considered, options, ranked, clock: Clock | None = None,
            full: dict[Plan, Estimate] | None = None) -> tuple[ScoredPlan, ...]:
    """Throughput/cost front over the re-scored plans, the baselines and the search's fast front,
    on the cost model's numbers (the fast front's points only while the `clock` has time)."""
    points = list(ranked)
    known = {**considered.evaluated, **dict(ranked)}     # the same estimates, not computed again
    for cand in considered.front:
        if clock is not None and clock.expired():
            break
        plan = cand.to_plan(job)
        est = known.get(plan) or _evaluate_plan(cluster, job, plan, options)
        if est.fits:
            points.append((plan, est))
    full = {} if full is None else full          # past the whole budget, only points already evaluated in full
    return tuple(ScoredPlan(plan, _full(cluster, job, plan, options, full), {}, describe_plan(plan))
                 for plan, _ in _front(points) if plan in full or not _spent())


def _front(points: list[tuple[Plan, Estimate]]) -> list[tuple[Plan, Estimate]]:
    """The points no other beats on both throughput and cost, fastest first."""
    front = []
    for plan, est in points:
        dominated = any(o.tokens_per_s >= est.tokens_per_s and o.cost_per_million_tokens_usd <= est.cost_per_million_tokens_usd
                        and (o.tokens_per_s > est.tokens_per_s or o.cost_per_million_tokens_usd < est.cost_per_million_tokens_usd)
                        for _, o in points)
        if not dominated and all(plan != p for p, _ in front):
            front.append((plan, est))
    front.sort(key=lambda pe: -pe[1].tokens_per_s)
    return front


def _baselines(cluster, job, objective, deadline_hours, options, shared: Bounds | None = None):
    """Each baseline's best plan (None when none fits), and notes on baselines a limit cut short."""
    out: dict[str, ScoredPlan | None] = {}
    notes, status = [], {}
    for name in BASELINES:
        left = _left_s()          # each within what is left of the whole budget; none once it is spent
        if left is not None and left <= 0:
            out[name], status[name] = None, BaselineStatus(False, TIME_LIMIT, None)
            notes.append(f"the {name} baseline was not run: the time limit was spent before it")
            continue
        if left is not None and options.baseline_time_limit_s is not None:
            options = replace(options, baseline_time_limit_s=min(options.baseline_time_limit_s, left))
        clock, full = Clock(options.baseline_time_limit_s), {}
        considered = PLANNERS[name].consider(cluster, job, objective, deadline_hours, options, shared)
        best = _best_of(cluster, job, objective, deadline_hours, considered, options, clock, full)
        out[name] = (ScoredPlan(best[0], _full(cluster, job, best[0], options, full), {},
                                f"{name} baseline: {describe_plan(best[0])}") if best else None)
        notes += [n.replace(f"the {name} search", f"the {name} baseline")
                  .replace("optimality gap ", f"the {name} baseline's optimality gap ", 1)
                  for n in _stop_notes(name, considered, options, optimality_gap(considered))]
        stopped = considered.stopped_by
        status[name] = BaselineStatus(stopped is None, stopped, 0.0 if stopped is None else optimality_gap(considered))
    return out, tuple(notes), status


def _best_of(cluster, job, objective, deadline_hours, considered: Considered, options,
             clock: Clock | None = None, full: dict[Plan, Estimate] | None = None) -> tuple[Plan, Estimate] | None:
    """What `_rank` would put first (the best by evaluate, ties by the kept order), re-scoring only
    candidates that could still beat the best so far: not one whose lower bound (the search's,
    _Keeper.add) cannot, and no iteration is shorter than its busiest replica's compute (the cost
    model's own pass times, without communication), so a candidate whose compute alone cannot win is
    not simulated. The best fast score is evaluated first (past the clock it is the answer, as in
    `_rank`); the others smallest bound first, so that the best is met early and the rest ruled out by
    their bounds. The answer is then evaluated in full (into `full`), from what its first evaluation
    kept (planners.EVALUATED): a first candidate that loses costs no detail."""
    margin = 1 - 1e-12          # floors sum in another order than evaluate: they may reach it to the last bits
    floors = [(estimate_key_of_fast(objective, job, bound * margin), order, cand)
              for order, (_, _, cand, bound) in enumerate(considered.kept)]
    best, best_key, best_order = None, math.inf, -1

    def loses(floor: float, order: int) -> bool:     # cannot beat the best so far, nor tie it earlier in order
        return floor > best_key or (floor == best_key and order > best_order)

    for floor, order, cand in floors[:1] + sorted(floors[1:], key=lambda e: (e[0], e[1])):
        if best is not None and clock is not None and clock.expired():
            considered.stopped_by, considered.rescore_cut = considered.stopped_by or TIME_LIMIT, True
            break
        if loses(floor, order):
            if order and floor > best_key:
                break                   # the bounds after it are no smaller
            continue
        plan = cand.to_plan(job)
        if loses(estimate_key_of_fast(objective, job, fast_key(objective, job, _busiest_compute_s(
                cluster, plan, options) * margin, cand.price_per_hour_usd, deadline_hours)), order):
            continue
        est = _evaluate_plan(cluster, job, plan, options)
        considered.rescored += 1
        key = estimate_key(objective, est, deadline_hours)
        if key < best_key or (key == best_key and order < best_order):
            best, best_key, best_order = (plan, est), key, order
    if best is not None and full is not None:
        _full(cluster, job, best[0], options, full)
    return best


def _busiest_compute_s(cluster, plan: Plan, options) -> float:
    """The most compute any replica does in an iteration (planner.cost.stage_passes, as evaluate: once
    per pool and tp of a stage, whose replicas share it; thousands at scale)."""
    worst = 0.0
    for stage in plan.stages:
        most: dict[tuple[str, int], int] = {}         # (pool, tp) -> the most samples one replica takes
        for rep in stage.replicas:
            most[(rep.pool, rep.tp)] = max(most.get((rep.pool, rep.tp), 0), rep.samples)
        for (pool, tp), samples in most.items():
            t = stage_passes(plan, stage, cluster.pool(pool), tp, options.cost_options)
            worst = max(worst, samples // plan.micro_batch * (t.forward_s + t.backward_s))
    return worst


def _gains(objective: Objective, est: Estimate, base: dict[str, ScoredPlan | None]) -> dict[str, float]:
    return {name: gain(objective, est, b.estimate) for name, b in base.items() if b is not None}


def _raise_infeasible(cluster, job, objective, deadline_hours, considered: Considered, options) -> None:
    fewest = job.global_batch // max(micro_batch_sizes(job.global_batch))    # one stage, the largest micro-batch
    if fewest > MAX_SIMULATED_PASSES:        # the space holds no plan whose schedule can be simulated (space.allows)
        raise TooManyPassesError("micro_batch", f"1 stage x {fewest:,} micro-batches x interleave 1 = {fewest:,} "
                                                f"passes to simulate at the least, over the limit of "
                                                f"{MAX_SIMULATED_PASSES:,}; use a larger micro_batch")
    if len(considered.precision_excluded) == len(cluster.pools):
        raise InfeasibleError("no pool can train this job's precision: " + "; ".join(
            f"{name}: {why}" for name, why in considered.precision_excluded.items()))
    if objective == Objective.DEADLINE:
        fastest = PLANNERS["hetplan"].consider(cluster, job, Objective.THROUGHPUT, None, options)
        ranked = _rank(cluster, job, Objective.THROUGHPUT, None, fastest, options)
        if ranked:
            raise InfeasibleError(deadline_message(job, deadline_hours, *ranked[0]))
    raise InfeasibleError(infeasible_message(cluster, job))
