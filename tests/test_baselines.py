"""The megatron and uniform baselines (planner.search.planners) against brute force over their own
spaces: every layout and knob setting scored, the `rescore` best fast scores kept, and the best of
those by planner.cost.evaluate reported. The baselines' best-first loop prunes at the `rescore`-th
fast score (the bounds are below every fast score, tests/test_search_bounds.py), so it must keep
the same candidates while scoring far fewer."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from catalog import cluster_from_dict, load_catalog
from planner.cost import evaluate
from planner.search import PLANNERS, SearchOptions, search
from planner.search.objective import estimate_key, fast_key
from planner.search.planners import precision_for, usable_pools
from planner.search.search import _best_of, _busiest_compute_s
from planner.search.score import Scorer
from planner.search.space import INTERLEAVES, RECOMPUTES, knob_settings, layout_families
from planner.search.split import even_split
from planner.types import InfeasibleError, Job, JobKind, Objective, Offload, Training
from tests.test_search_bounds import TIGHT_GPUS, TIGHT_MODELS, _random_case


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _cluster(catalog):
    return cluster_from_dict({"name": "three", "between_pools_gbps": 100, "pools": [
        {"name": "h", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4},
        {"name": "a", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 8},
        {"name": "v", "gpu": "v100-32gb-sxm", "nodes": 1, "gpus_per_node": 8}]}, catalog)


def _space(name: str, cluster, job: Job, objective: Objective):
    """The baseline's families, as its planner lists them."""
    pools, _ = usable_pools(cluster, job)
    if name == "megatron":
        return layout_families(pools, job.model, job.global_batch, objective != Objective.THROUGHPUT,
                               subset_sizes=(1,), engine=job.engine)
    return layout_families(pools, job.model, job.global_batch, False, subset_sizes=(len(pools),), one_tp=True,
                           engine=job.engine)


def _brute_force(name: str, cluster, job: Job, objective: Objective):
    """Every candidate of the baseline's space, fast-scored with its even split: (fast key, plan)."""
    scorer, out = Scorer(cluster, job), []
    for family in _space(name, cluster, job, objective):
        for order in family.orders():
            layout = family.layout(order)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, scorer.options.flash_attention,
                                       job.engine, job, {p.name: p.gpus_per_node for p in cluster.pools}):
                cand = scorer.score(layout, knobs, precision_for(job, family.subset), uniform=True)
                if cand is not None:
                    assert scorer.even_busiest_s(layout, knobs) <= cand.time_s * (1 + 1e-12), (layout, knobs)
                    assert scorer.even_family_busiest_s(family) <= cand.time_s * (1 + 1e-12), (layout, knobs)
                    out.append((fast_key(objective, job, cand.time_s, cand.price_per_hour_usd, None),
                                cand.to_plan(job)))
    return out


@pytest.mark.parametrize("engine,objective", [("megatron", Objective.THROUGHPUT), ("hetplan", Objective.THROUGHPUT),
                                              ("torchtitan", Objective.THROUGHPUT), ("megatron", Objective.COST)])
@pytest.mark.parametrize("name", ["megatron", "uniform"])
def test_baseline_keeps_the_best_fast_scores_of_its_space_and_reports_the_best_of_them(catalog, name, engine,
                                                                                       objective):
    cluster = _cluster(catalog)
    job = Job(catalog.model("llama-2-7b"), 32, 2048, engine=engine)
    options = SearchOptions(time_limit_s=None, baseline_time_limit_s=None)
    considered = PLANNERS[name].consider(cluster, job, objective, None, options)
    every = _brute_force(name, cluster, job, objective)
    best = sorted(key for key, _ in every)[:options.rescore]
    assert len(every) > 2 * options.rescore                       # a space worth pruning
    assert [k for k, _, _, _ in considered.kept] == pytest.approx(best, rel=1e-12)
    assert considered.fast_scores < len(every) / 2, (considered.fast_scores, len(every))
    assert considered.stopped_by is None
    kept = [plan for key, plan in every if key <= best[-1]]
    exact = min(estimate_key(objective, evaluate(cluster, plan, job.tokens_to_train), None) for plan in kept)
    reported = search(cluster, job, objective, options=options, offload="fixed").baselines[name]
    assert estimate_key(objective, reported.estimate, None) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_even_busiest_replica_bounds_the_even_fast_score(catalog, seed):
    """Scorer.even_busiest_s, by which the baselines order and prune their knob settings, and
    Scorer.even_family_busiest_s, by which they order and prune families, are at most the fast
    score of the even split (score(..., uniform=True)) on random clusters and jobs, chains and
    mixed stages."""
    cluster, job = _random_case(random.Random(seed), catalog)
    scorer, checked = Scorer(cluster, job), 0
    for family in layout_families(cluster.pools, job.model, job.global_batch, partial=False):
        for order in family.orders():
            layout = family.layout(order)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, scorer.options.flash_attention):
                cand = scorer.score(layout, knobs, job.precision, uniform=True)
                if cand is not None:
                    assert scorer.even_busiest_s(layout, knobs) <= cand.time_s * (1 + 1e-12), (layout, knobs)
                    assert scorer.even_family_busiest_s(family) <= cand.time_s * (1 + 1e-12), (layout, knobs)
                    checked += 1
    assert checked > 0


def _even_busiest_every_stage(scorer, layout, knobs) -> float:
    """Scorer.even_busiest_s as its docstring states it, every stage and group in turn."""
    m = scorer.job.global_batch // knobs.micro_batch
    layers = even_split(scorer.model.layers, layout.num_stages, knobs.interleave)
    if layers is None:
        return math.inf
    sp = any(g.tp > 1 for stage in layout.stages for g in stage)
    busiest, last = 0.0, layout.num_stages - 1
    for i, (groups, num_layers) in enumerate(zip(layout.stages, layers)):
        base, extra = divmod(m, sum(g.count for g in groups))
        if base == 0 or (extra and not scorer.engine.space.mixed_stages):
            return math.inf
        first = 0
        for g in groups:
            n = base + (first < extra)
            first += g.count
            f, b, hf, hb = scorer.pass_times(scorer.pools[g.pool], g.tp, knobs.micro_batch, knobs.recompute, sp)
            busiest = max(busiest, n * (num_layers * (f + b) + (hf + hb if i == last else 0.0)))
    return busiest


def _even_family_busiest_every_setting(scorer, family) -> float:
    """Scorer.even_family_busiest_s as its docstring states it, every micro-batch, recompute and interleave."""
    L, B, p = scorer.model.layers, scorer.job.global_batch, family.num_stages
    sp, replicas, best = any(t > 1 for t in family.tps), family.max_replicas_per_stage, math.inf
    for mb in (mb for mb in range(1, B + 1) if B % mb == 0 and mb & (mb - 1) == 0):
        m = B // mb
        if m < replicas:
            continue
        n = -(-m // replicas) if family.kind == "chain" else m // replicas
        for recompute in RECOMPUTES:
            taus = [sum(scorer.pass_times(pool, t, mb, recompute, sp)[:2]) for pool, t in zip(family.subset, family.tps)]
            stages = sorted(tau for tau, w in zip(taus, family.width) for _ in range(w)) if family.kind == "chain" \
                else [max(taus)] * p
            for v in INTERLEAVES:
                if L % v or L // v < p:
                    continue
                fewest, extra = (L // v) // p * v, (L // v) % p
                more = stages[extra - 1] * (fewest + v) if extra else 0.0
                best = min(best, n * max(stages[-1] * fewest, more))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_even_bounds_equal_their_every_stage_formulas(catalog, seed):
    """even_busiest_s skips the stages whose figures repeat and even_family_busiest_s the recompute
    settings no faster anywhere than another's (cached per pools and tps): both equal their formulas
    computed in full, to the last bit, on random clusters and jobs, chains and mixed stages."""
    cluster, job = _random_case(random.Random(seed), catalog)
    scorer, checked = Scorer(cluster, job), 0
    for family in layout_families(cluster.pools, job.model, job.global_batch, partial=False):
        assert scorer.even_family_busiest_s(family) == _even_family_busiest_every_setting(scorer, family), family
        for order in family.orders()[:2]:
            layout = family.layout(order)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, scorer.options.flash_attention):
                assert scorer.even_busiest_s(layout, knobs) == _even_busiest_every_stage(scorer, layout, knobs)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("seed,tight", [(seed, False) for seed in range(6)] + [(seed, True) for seed in range(4)])
@pytest.mark.parametrize("name", ["megatron", "uniform"])
def test_rescoring_skips_only_candidates_that_cannot_win(catalog, name, seed, tight):
    """search._best_of re-scores a kept candidate only when neither its lower bound (with the
    baselines' late floor: every stage's own end and tail, score._late_s) nor its busiest replica's
    compute (search._busiest_compute_s, evaluate's own pass times) rules it out: on random clusters
    and jobs, both floors stay at or below planner.cost.evaluate for every kept candidate, and the
    plan it returns is the brute-force best by evaluate of all of them (ties: the kept order), so
    skipping changes no baseline."""
    rng = random.Random(seed)
    cluster, job = (_random_case(rng, catalog, TIGHT_GPUS, TIGHT_MODELS, (1024, 2048, 4096)) if tight
                    else _random_case(rng, catalog))
    options = SearchOptions(time_limit_s=None, baseline_time_limit_s=None)
    considered = PLANNERS[name].consider(cluster, job, Objective.THROUGHPUT, None, options)
    best, best_key = None, math.inf
    for _, _, cand, bound in considered.kept:
        plan = cand.to_plan(job)
        est = evaluate(cluster, plan, job.tokens_to_train, detail=False)
        assert _busiest_compute_s(cluster, plan, options) <= est.iteration_time_s * (1 + 1e-12), plan
        assert bound <= fast_key(Objective.THROUGHPUT, job, est.iteration_time_s, 0.0, None) * (1 + 1e-9), plan
        key = estimate_key(Objective.THROUGHPUT, est, None)
        if key < best_key:
            best, best_key = plan, key
    found = _best_of(cluster, job, Objective.THROUGHPUT, None, considered, options)
    assert (found and found[0]) == best
    assert considered.rescored <= len(considered.kept)


def test_uniform_baseline_without_a_pool_for_the_precision_says_why(catalog):
    """`hetplan plan --baseline uniform` where no pool trains the engine's precision: the same
    message as the other planners (it listed families over no pool, an internal error)."""
    cluster = cluster_from_dict({"name": "old", "between_pools_gbps": 100, "pools": [
        {"name": "v", "gpu": "v100-32gb-sxm", "nodes": 1, "gpus_per_node": 8},
        {"name": "t", "gpu": "t4", "nodes": 1, "gpus_per_node": 4}]}, catalog)
    job = Job(catalog.model("llama-2-7b"), 16, 2048, engine="torchtitan")
    for method in ("uniform", "megatron"):
        with pytest.raises(InfeasibleError, match="no pool can train this job's precision"):
            search(cluster, job, method=method, offload="fixed")


@pytest.mark.parametrize("seed,kind", [(seed, "random") for seed in range(12)] + [(seed, "tight") for seed in range(12)]
                         + [(seed, kind) for kind in ("moe", "cp", "offload", "lora") for seed in range(3)])
def test_even_keys_fit_exactly_and_bound_the_even_score_and_evaluate(catalog, seed, kind):
    """The baselines' keys per pool order and knob setting (planners._even_queue): Scorer.even_fits is
    exactly whether score(..., uniform=True) yields a candidate (its memory check on one stage a run),
    and Scorer.even_runs_s (the busiest replica and the fill before it) is at most that candidate's fast
    score and planner.cost.evaluate's iteration time of its plan, on random clusters and jobs under
    every engine (chains and mixed stages, interleaved, ZeRO, hybrid-shard and expert-tp settings; tight
    memory, expert and context parallelism, offloaded optimizer states, LoRA); and without its fill it is
    even_busiest_s to the last bit."""
    rng = random.Random(seed)
    tight = kind == "tight"
    cluster, job = (_random_case(rng, catalog, TIGHT_GPUS, TIGHT_MODELS, (1024, 2048, 4096)) if tight
                    else _random_case(rng, catalog, ["h100-sxm", "h200-sxm", "a100-80gb-sxm", "b200"]) if kind == "moe"
                    else _random_case(rng, catalog))
    job = replace(job, engine=rng.choice(("megatron", "hetplan") if kind in ("moe", "cp") else ("deepspeed",)
                                         if kind == "offload" else ("hetplan", "megatron", "torchtitan", "deepspeed")))
    if kind == "moe":
        job = replace(job, model=catalog.model("mixtral-8x7b"), expert_parallel=2)
    elif kind == "cp":
        job = replace(job, context_parallel=2)
    elif kind == "offload":
        job = replace(job, offload=Offload.OPTIMIZER)
    elif kind == "lora":
        job = replace(job, training=Training(JobKind.LORA))
    scorer, checked, fits, evaluated = Scorer(cluster, job), 0, 0, 0
    pools, _ = usable_pools(cluster, job)
    nodes = {p.name: p.gpus_per_node for p in cluster.pools}
    for family in layout_families(pools, job.model, job.global_batch, partial=False, engine=job.engine,
                                  cp=job.context_parallel, ep=job.expert_parallel):
        for order in family.orders():
            layout, runs = family.layout(order), family.runs(order)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, scorer.options.flash_attention,
                                       job.engine, job, nodes):
                cand = scorer.score(layout, knobs, precision_for(job, family.subset), uniform=True)
                assert scorer.even_fits(runs, knobs) == (cand is not None), (layout, knobs)
                checked += 1
                bound = scorer.even_runs_s(runs, knobs)
                assert scorer.even_runs_s(runs, knobs, fill=False) == scorer.even_busiest_s(layout, knobs) <= bound
                if cand is None:
                    continue
                fits += 1
                assert bound <= cand.time_s * (1 + 1e-12), (layout, knobs, bound, cand.time_s)
                if fits % 3 == 1:
                    est = evaluate(cluster, cand.to_plan(job), job.tokens_to_train, detail=False)
                    assert bound <= est.iteration_time_s * (1 + 1e-12), (layout, knobs, bound, est.iteration_time_s)
                    evaluated += 1
    assert checked > 0 and (evaluated > 0 or tight)       # the tight cases' memory holds few even splits or none
