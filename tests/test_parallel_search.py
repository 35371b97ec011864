"""SearchOptions.workers (`hetplan plan --workers N`): the engines' searches in several processes
that share one threshold give the answer of the searches in turn (planner/search/parallel.py)."""
from __future__ import annotations

import contextvars
import importlib
import json
import math
import multiprocessing
import os
import signal
from dataclasses import replace

import pytest

from catalog.formats import load_cluster_file
from planner.cli import main
from planner.engines import REAL, RUNTIME
from planner.search import SearchOptions, search
from planner.search.objective import estimate_key
from planner.search import parallel
from planner.search.parallel import SharedBest, beat_now
from planner.workers import ended_by_signals, worker_pool
from planner.types import InputError, Job, Objective
from tests.conftest import EXAMPLES

search_module = importlib.import_module("planner.search.search")     # the package exports the function `search`

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lab_job(catalog):
    """lab-mix, llama-3-8b: FlagScale, the fourth engine searched, wins (about 1 s CPU in turn)."""
    cluster = load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog)
    return cluster, Job(model=catalog.model("llama-3-8b"), global_batch=256, seq_len=4096, engine=RUNTIME)


def _best_of_engines(lab_job, workers: int):
    cluster, job = lab_job
    return search(cluster, job, options=SearchOptions(time_limit_s=None, workers=workers), engines=REAL,
                  baselines=False)


@pytest.fixture(scope="module")
def in_turn(lab_job):
    return _best_of_engines(lab_job, 1)


def test_two_workers_give_the_answer_of_one(lab_job, in_turn):
    assert in_turn.plans[0].plan.engine != REAL[0], "the case is one where a later engine wins (FlagScale)"
    for workers in (2,):
        spread = _best_of_engines(lab_job, workers)
        assert [(sp.plan, sp.estimate.tokens_per_s) for sp in spread.plans[:1]] == \
               [(sp.plan, sp.estimate.tokens_per_s) for sp in in_turn.plans[:1]], workers
        assert (spread.complete, spread.gap) == (in_turn.complete, in_turn.gap) == (True, 0.0)
        # each engine beats those before it or is beaten, as in turn
        assert {n: isinstance(r, str) for n, r in spread.by_engine.items()} == \
               {n: isinstance(r, str) for n, r in in_turn.by_engine.items()}
        assert f"searched in {workers} processes" in spread.notes[-1]
    assert "prunes at the best plan of the engines before it" in in_turn.notes[-1]


def test_a_search_pruned_by_a_shared_key_is_beaten_not_infeasible(lab_job, in_turn):
    """The engines before it evaluated a plan no plan of its space beats: its search prunes all and
    says Beaten, complete (what a worker's search reads from the others mid-search)."""
    cluster, job = lab_job
    best = estimate_key(Objective.THROUGHPUT, in_turn.plans[0].estimate, None)
    shared = SharedBest([best, math.inf], 1)
    with pytest.raises(search_module.Beaten) as beaten:
        search(cluster, replace(job, engine="deepspeed"), options=SearchOptions(time_limit_s=None, shared_beat=shared),
               baselines=False)
    assert beaten.value.complete and beaten.value.gap == 0.0


def test_shared_best_reads_the_searches_before_it_only():
    slots = [3.0, 1.0, 2.0, math.inf]
    assert SharedBest(slots, 0).ceiling() == math.inf
    assert SharedBest(slots, 1).ceiling() == 3.0
    assert SharedBest(slots, 3).ceiling() == 1.0
    mine = SharedBest(slots, 2)
    mine.offer(2.5)                   # worse than its own best so far: kept as it was
    mine.offer(0.5)
    assert slots == [3.0, 1.0, 0.5, math.inf]
    assert beat_now(SearchOptions(shared_beat=SharedBest(slots, 2))).beat == 1.0
    assert beat_now(SearchOptions(beat=0.9, shared_beat=SharedBest(slots, 2))).beat == 0.9
    assert beat_now(SearchOptions(shared_beat=SharedBest(slots, 0))).beat is None


def test_a_part_prunes_at_the_parts_after_it_a_hair_above_their_keys():
    """The parts of one search (SharedBest.peers) read each other's keys, those after it a hair above (ties go to
    the first part); the engines after them read every part's key as it is."""
    slots = [3.0, 2.0, math.inf, 1.0]          # tickets 0-2: one search's 3 parts; 3: the next engine
    part0 = SharedBest(slots, 0, peers=range(0, 3))
    assert part0.ceiling() == pytest.approx(2.0) and part0.ceiling() > 2.0
    assert SharedBest(slots, 1, peers=range(0, 3)).ceiling() == 3.0
    assert SharedBest(slots, 3).ceiling() == 2.0
    slots[1] = 0.0                             # a key of 0 (free GPUs) would prune its ties too: not read after
    assert part0.ceiling() == math.inf


def test_an_answer_that_does_not_beat_those_before_it_is_beaten_truly(in_turn):
    """A worker's own answer, held to the sequential rule: complete only when its space's floor
    (its key, or its key / (1 + gap)) is no better than what it had to beat."""
    key = estimate_key(Objective.THROUGHPUT, in_turn.plans[0].estimate, None)
    proven = search_module._beaten_answer(in_turn, key, key * 0.99)
    assert proven.complete and proven.gap == 0.0
    cut = replace(in_turn, complete=False, gap=0.05)          # its space may hold a plan 5% better than its answer
    assert search_module._beaten_answer(cut, key, key).complete is False
    assert search_module._beaten_answer(cut, key, key).gap == pytest.approx(0.05)
    assert search_module._beaten_answer(cut, key, key / 1.05).complete
    assert search_module._beaten_answer(replace(cut, gap=None), key, key).gap is None


def test_workers_must_be_a_whole_number_from_one(capsys):
    with pytest.raises(InputError, match="workers"):
        SearchOptions(workers=0)
    rc = main(["plan", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--model", "llama-3-8b", "--global-batch", "256",
               "--seq-len", "4096", "--workers", "0"])
    assert rc == 2 and "--workers" in capsys.readouterr().err


def test_engine_all_with_two_workers_prints_what_one_does(capsys):
    """`--engine all --workers 2`: each engine's own search, in two processes; the same JSON but the
    search times."""
    def engines(workers: int) -> dict:
        assert main(["plan", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--model", "llama-2-7b",
                     "--global-batch", "32", "--seq-len", "2048", "--engine", "all", "--workers", str(workers),
                     "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        for answer in out["engines"].values():
            answer.pop("search_time_s", None)
        return out
    assert engines(2) == engines(1)


def _answer(result, ranked: int | None = None) -> tuple:
    """What a search answers, but the notes that say how it was searched: the plans ranked (the first
    `ranked`) with their gains, the baselines and how far each got, complete and gap, and which engines
    are beaten."""
    return ([(sp.plan, sp.estimate.tokens_per_s, sp.gain_over) for sp in result.plans[:ranked]],
            {n: b and (b.plan, b.estimate.tokens_per_s) for n, b in result.baselines.items()},
            result.baseline_status, result.complete, result.gap,
            {n: isinstance(r, str) for n, r in result.by_engine.items()})


@pytest.fixture(scope="module")
def job_64(catalog):
    """h100-a100-v100-64, llama-2-70b: Megatron-LM, the first engine searched, wins (about 1 s CPU in turn)."""
    cluster = load_cluster_file(EXAMPLES / "h100-a100-v100-64.yaml", catalog)
    return cluster, Job(model=catalog.model("llama-2-70b"), global_batch=256, seq_len=4096, engine=RUNTIME)


@pytest.mark.parametrize("case", ["job_64", "lab_job"])
def test_baselines_searched_beside_the_engines_are_those_searched_after_them(case, request):
    """With workers the first engine's baselines are searched as a ticket of their own, beside the
    engines (used where that engine wins: job_64); where another engine wins (lab_job: FlagScale) they
    are searched again for it, after the engines, as in turn. The same answer, baselines included (the
    plans after the first can differ where a later engine wins: docs/performance.md, Worker processes)."""
    cluster, job = request.getfixturevalue(case)
    answers = [search(cluster, job, options=SearchOptions(time_limit_s=None, workers=workers), engines=REAL)
               for workers in (1, 2)]
    assert (answers[0].plans[0].plan.engine == REAL[0]) == (case == "job_64")
    ranked = None if case == "job_64" else 1
    assert _answer(answers[1], ranked) == _answer(answers[0], ranked)
    assert all(answers[0].baselines.values())


def test_spawned_workers_give_the_answer_of_forked_ones(lab_job, in_turn, monkeypatch):
    """Where forking is not safe (threads: a server) the workers are spawned: the same answer."""
    monkeypatch.setattr(parallel, "worker_context", lambda: multiprocessing.get_context("spawn"))
    for workers in (2, 3):                   # 3: Megatron-LM's search in parts, its offload ticket after them
        assert _answer(_best_of_engines(lab_job, workers), 1) == _answer(in_turn, 1), workers


_PROBE: contextvars.ContextVar = contextvars.ContextVar("probe", default=None)


def _probe() -> tuple:
    return os.getpid(), _PROBE.get(), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)


def test_a_forked_worker_holds_none_of_the_callers_context_nor_its_signal_handlers():
    """A forked worker starts as a spawned one would: no context variable of the caller's (a search's
    budget, its winner's caches), SIGTERM and SIGHUP at their defaults (the caller's raise Ended)."""
    token = _PROBE.set("the caller's")
    try:
        with ended_by_signals():
            pool = worker_pool(1)
            try:
                pid, probe, term, hup = pool.submit(_probe).result(timeout=60)
            finally:
                pool.shutdown()
    finally:
        _PROBE.reset(token)
    assert pid != os.getpid()
    assert (probe, term, hup) == (None, signal.SIG_DFL, signal.SIG_DFL)


def test_an_engine_that_assumed_a_search_complete_that_was_not_is_searched_again_in_turn(lab_job, monkeypatch):
    """In a worker, DeepSpeed, FlagScale and Megatron-DeepSpeed skip the parts of their spaces that
    Megatron-LM's holds (planner.engines.cover), as if its search ends complete; under a limit that
    cuts it short they are searched again after it, in turn, and none says it skipped a part."""
    calls = []
    in_turn = search_module._engine_in_turn

    def spy(cluster, job, name, *args, **kwargs):
        calls.append(name)
        return in_turn(cluster, job, name, *args, **kwargs)

    monkeypatch.setattr(search_module, "_engine_in_turn", spy)
    cluster, job = lab_job
    found = search(cluster, job, options=SearchOptions(time_limit_s=0.05, workers=2), engines=REAL, baselines=False)
    megatron = found.by_engine[REAL[0]]
    assert not isinstance(megatron, str) and not megatron.complete, "the case is one where the limit cuts it short"
    assert calls == ["deepspeed", "flagscale", "megatron-deepspeed"]
    assert not any("its search was complete" in (r if isinstance(r, str) else " ".join(r.notes))
                   for r in found.by_engine.values())


def test_a_process_takes_the_first_ticket_of_its_order_not_yet_taken():
    """run_each's order: the first process takes 0, its `own` ticket, then the others; a worker the others, then the
    `own` one it has not started (here ticket 1, the baselines' in a search)."""
    taken, mine, workers = multiprocessing.Array("b", 4), [0, 1, 2, 3], [2, 3, 1]
    assert parallel._take(taken, mine) == (0, 4)          # (the ticket, how many were left with it)
    assert parallel._take(taken, workers) == (2, 3)
    assert parallel._take(taken, mine) == (1, 2)          # its own, after ticket 0
    assert parallel._take(taken, workers) == (3, 1)
    assert parallel._take(taken, mine) is None and parallel._take(taken, workers) is None
    stolen = multiprocessing.Array("b", 4)
    for ticket in (0, 2, 3):
        stolen[ticket] = 1
    assert parallel._take(stolen, workers) == (1, 1)      # every other ticket taken: a worker starts it


def test_the_tickets_after_the_first_and_own_are_taken_largest_first():
    """run_each's `sizes`: the other tickets in order of their estimated work, largest first, ties in order,
    for both the first process and a worker; ticket 0 and the `own` tickets keep their places."""
    assert parallel._orders(5, (1,), None) == ([0, 1, 2, 3, 4], [2, 3, 4, 1])
    assert parallel._orders(5, (1,), [9.0, 0.0, 3.0, 7.0, 3.0]) == ([0, 1, 3, 2, 4], [3, 2, 4, 1])


def test_the_engines_tickets_are_sized_by_their_listings(catalog):
    """_ticket_sizes: an engine ticket's size is the count of its space's families (a part's share); FlagScale's
    space, a tensor-parallel degree per stage, is the largest at 4,096 GPUs, so a worker takes it first."""
    cluster = load_cluster_file(EXAMPLES / "big-4types-4096.yaml", catalog)
    job = Job(model=catalog.model("llama-3.1-405b"), global_batch=2048, seq_len=8192, engine=RUNTIME)
    names = list(REAL)
    tickets = [(names[0], (0, 2)), (names[0], (1, 2)), (names[0], None), (None, 3), *((n, (0, 1)) for n in names[1:])]
    sizes = search_module._ticket_sizes(cluster, job, tickets, Objective.THROUGHPUT, SearchOptions())
    assert sizes[0] == sizes[1] > 0 and sizes[2] == sizes[3] == 0
    largest = max(range(len(tickets)), key=lambda k: sizes[k])
    assert tickets[largest][0] == "flagscale"


def test_the_baselines_ticket_is_skipped_only_once_the_first_engine_has_ended_beaten():
    """SharedBest.beaten (the baselines' ticket, after the first engine's 2 parts): true only when both parts have
    ended and a ticket after it has evaluated a plan better than each of theirs."""
    slots, done = [2.0, 3.0, math.inf, 1.5, 4.0], [1, 0, 0, 1, 0]
    assert not SharedBest(slots, 2, done).beaten(2)          # part 1 still searching
    done[1] = 1
    assert SharedBest(slots, 2, done).beaten(2)
    slots[3] = 2.0                                            # a tie goes to the first engine
    assert not SharedBest(slots, 2, done).beaten(2)
    assert not SharedBest(slots, 2).beaten(2)                 # no record of which tickets ended: never skipped


def test_parts_of_a_search_hold_its_answer(job_64):
    """SearchOptions.part: the parts' spaces (every n-th layout family) together are the space: the best of the
    parts' answers, searched alone, is the whole search's answer, each part complete."""
    cluster, job = job_64
    job = replace(job, engine=REAL[0])
    whole = search(cluster, job, options=SearchOptions(time_limit_s=None), baselines=False)
    parts = [search(cluster, job, options=SearchOptions(time_limit_s=None, part=(k, 3)), baselines=False)
             for k in range(3)]
    key = lambda r: estimate_key(Objective.THROUGHPUT, r.plans[0].estimate, None)
    assert all(p.complete for p in parts)
    assert min(parts, key=key).plans[0].plan == whole.plans[0].plan
    assert len({p.plans[0].plan for p in parts}) > 1, "the parts search different families"
    with pytest.raises(InputError, match="part"):
        SearchOptions(part=(2, 2))


@pytest.mark.parametrize("case", ["job_64", "lab_job"])
def test_the_first_engine_split_in_parts_gives_the_answer_of_one_process(case, request):
    """With 3 and 4 workers Megatron-LM's search is split into 3 and 4 parts (every n-th layout family each,
    _first_parts): the best plan, its tokens/s, complete and gap, the baselines, their status and the gains over
    them, and which engines are beaten, as with 1 process (the plans after the first may differ)."""
    cluster, job = request.getfixturevalue(case)
    one = search(cluster, job, options=SearchOptions(time_limit_s=None), engines=REAL)
    for workers in (3, 4):
        spread = search(cluster, job, options=SearchOptions(time_limit_s=None, workers=workers), engines=REAL)
        assert _answer(spread, 1) == _answer(one, 1), workers
        first = spread.by_engine[REAL[0]]
        notes = first.notes if not isinstance(first, str) else spread.notes
        assert isinstance(first, str) or any(f"searched in {workers} parts" in n for n in notes), notes


def test_the_first_engine_is_split_from_three_workers_one_part_each(job_64, catalog):
    """_first_parts: one part per process from 3 workers; none at 2, for the energy and deadline objectives, for
    another planner, for a search pruned at seeds, or where the engine has several expert-parallel settings."""
    cluster, job = job_64
    auto = dict(offload="auto", context_parallel="auto", expert_parallel="auto")

    def parts(workers, objective=Objective.THROUGHPUT, method="hetplan", model=job.model, **options):
        return search_module._first_parts(cluster, replace(job, model=model), REAL[0], objective, method,
                                          SearchOptions(workers=workers, **options), auto)
    assert [parts(w) for w in (1, 2, 3, 4)] == [1, 1, 3, 4]
    assert parts(4, Objective.COST) == 4
    assert parts(4, Objective.ENERGY) == parts(4, Objective.DEADLINE) == parts(4, method="megatron") == 1
    assert parts(4, best_only=True) == 1
    assert parts(4, model=catalog.model("mixtral-8x7b")) == 1      # expert-parallel degrees 1, 2, 4, 8


def test_the_first_engines_offload_settings_are_searched_beside_the_other_engines(catalog):
    """single-node-8, llama-2-7b: Megatron-LM's answer fills its GPUs' memory, so its offload settings are searched
    after its first setting. With 3 workers that is a ticket of its own once the parts have ended (_offloads_ticket,
    beside the other engines, which prune at its plans), used by the parts' answer as one process searches them:
    the same answer as 1 process. The ticket searches them only where the best part (the least key, ties to the
    first) asked for them."""
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    job = Job(model=catalog.model("llama-2-7b"), global_batch=32, seq_len=2048, engine=RUNTIME)
    one = search(cluster, job, options=SearchOptions(time_limit_s=None), engines=REAL)
    spread = search(cluster, job, options=SearchOptions(time_limit_s=None, workers=3), engines=REAL)
    assert _answer(spread, 1) == _answer(one, 1)
    assert any(n.startswith("offload searched") for n in one.notes)
    assert any(n.startswith("offload searched") for n in spread.notes)
    assert any("searched in 3 parts" in n for n in spread.notes)
    first = replace(job, engine=REAL[0])
    key = estimate_key(Objective.THROUGHPUT, one.plans[0].estimate, None)
    auto = dict(offload="auto", context_parallel="auto", expert_parallel="auto")

    def ticket(done):          # two parts that ended with these flags, the best (ties: the first) at `key`
        shared = SharedBest([key, key, math.inf], 2, done)
        return search_module._offloads_ticket(shared, cluster, first, Objective.THROUGHPUT, None, 5, "hetplan",
                                              SearchOptions(time_limit_s=None), auto)
    asked = search_module.OFFLOADS_ASKED
    assert ticket([1, asked, 0]) is None                                   # the first part did not ask
    searched = ticket([asked, 1, 0])
    assert list(searched) == search_module._offload_settings(first, None)


def test_a_ticket_waits_for_those_it_comes_after_without_a_process_waiting():
    """run_each's `after`: a process skips a ticket whose tickets before it have not ended (it takes another, or
    ends); the one that ends the last of them takes it."""
    taken, ended = multiprocessing.Array("b", 3), [0, 0, 0]
    ready = lambda k: k != 2 or all(ended[:2])      # noqa: E731   ticket 2 after tickets 0 and 1
    assert parallel._take(taken, [0, 2, 1], ready) == (0, 3)
    assert parallel._take(taken, [0, 2, 1], ready) == (1, 2)       # 2 is not ready: 1 instead
    assert parallel._take(taken, [0, 2, 1], ready) is None         # nothing ready: this process ends
    ended[:2] = [1, 1]
    assert parallel._take(taken, [2], ready) == (2, 1)


def test_a_part_cut_short_leaves_the_answer_incomplete(job_64):
    """_parts_answer: a part not searched (the time limit spent) or Beaten without proof makes the first engine's
    answer incomplete, as a setting not searched does in one process."""
    cluster, job = job_64
    job = replace(job, engine=REAL[0])
    settings = dict(offload="fixed", context_parallel="fixed", expert_parallel="fixed")
    found = search(cluster, job, options=SearchOptions(time_limit_s=None, part=(0, 2)), baselines=False)
    parts = search_module._parts_answer
    args = (cluster, job, REAL[0], Objective.THROUGHPUT, None, 5, "hetplan", SearchOptions(time_limit_s=None))
    assert parts(*args, settings=settings, outcomes=[found, search_module.Beaten("beaten", True, 0.0)]).complete
    cut = parts(*args, settings=settings, outcomes=[found, InputError("time_limit", "not searched")])
    assert not cut.complete and cut.gap is None
    unproven = parts(*args, settings=settings, outcomes=[found, search_module.Beaten("beaten", False, 0.02)])
    assert not unproven.complete and unproven.gap == pytest.approx(0.02)


def test_plan_json_with_two_workers_is_that_of_one_but_how_it_was_searched(capsys):
    """`hetplan plan --workers 2 --json` where the first engine wins (its baselines searched beside the other
    engines): the plans, front, baselines and gains, complete and gap of `--workers 1`; only the search time,
    the count of candidates evaluated and the notes that say how it was searched differ."""
    def answer(workers: int) -> dict:
        assert main(["plan", "--cluster", str(EXAMPLES / "h100-a100-v100-64.yaml"), "--model", "llama-2-70b",
                     "--global-batch", "256", "--seq-len", "4096", "--workers", str(workers), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        for key in ("search_time_s", "candidates_evaluated", "notes"):
            out.pop(key)
        return out
    one = answer(1)
    assert one["plans"][0]["engine"] == REAL[0] and one["baselines"]
    assert answer(2) == one
