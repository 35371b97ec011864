"""planner.engines.cover: an engine's search space holds part of another's at no greater cost.

The search skips the covered part of an engine's space when the covering engine's search in the same run
was complete (planner.search.search, `_search_engines`), so `complete` still means that no plan of any
engine's search space beats the answer by planner.cost.evaluate. These tests hold the relation to the cost
model on random small clusters, and fail when the engine profiles drift apart.
"""
from __future__ import annotations

import importlib
import random
from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import load_catalog, load_cluster_file
from planner.cost import evaluate
from planner.engines import ENGINES, REAL
from planner.engines.base import Execution, Space
from planner.engines import cover as cover_module
from planner.engines.cover import cover
from planner.search import SearchOptions, search
from planner.search.planners import PLANNERS, precision_for, usable_pools
from planner.search.score import Scorer
from planner.search.space import knob_settings, layout_families
from planner.types import Job, JobKind, Objective, Offload, Precision, Training
from tests.test_one_cost_model import _random_case

search_impl = importlib.import_module("planner.search.search")     # the package's `search` is the function
PAIRS = [(name, other) for name, e in ENGINES.items() for other in e.covered_by]
# cover() is worked out for any two engines: the pairs it finds a cover for, declared or not
FOUND = [(a, b) for a in ENGINES for b in ENGINES if a != b
         and cover(ENGINES[a], ENGINES[b], Job(load_catalog().model("llama-2-7b"), 64, 2048, engine=a))]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_every_profile_field_has_a_rule():
    """A new Space or Execution field must be placed in one of cover.py's rules (a decision, not a default)."""
    space = {n for group in (cover_module.SPACE_EQUAL, cover_module.SPACE_TP, cover_module.SPACE_KNOBS,
                             cover_module.SPACE_JOB, cover_module.SPACE_NOT_SEARCHED, cover_module.SPACE_OUTSIDE)
             for n in group}
    execution = {n for group in (cover_module.EXECUTION_PASSES, cover_module.EXECUTION_MEMORY,
                                 cover_module.EXECUTION_NO_WORSE, cover_module.EXECUTION_OUTSIDE,
                                 cover_module.EXECUTION_WORDS) for n in group}
    assert space == {f.name for f in fields(Space)}
    assert execution == {f.name for f in fields(Execution)}


@pytest.mark.parametrize("covered,covering", PAIRS)
def test_declared_covers_hold_and_come_first(catalog, covered, covering):
    """Each engine's covered_by holds for an fp16 pretraining job (profiles that drift apart make it
    vanish), and the covering engine is searched before the covered one by default."""
    job = Job(catalog.model("llama-2-7b"), 64, 2048, engine=covered, precision=Precision.FP16)
    found = cover(ENGINES[covered], ENGINES[covering], job)
    assert found is not None and any(p == Precision.FP16 for p, _, _ in found.settings)
    assert REAL.index(covering) < REAL.index(covered)


def _covered_candidates(cluster, job, found, rng, most):
    """Candidates of the covered engine's search space that `found` holds, with their layout and knobs."""
    pools, _ = usable_pools(cluster, job)
    scorer = Scorer(cluster, job)
    out = []
    for family in layout_families(pools, job.model, job.global_batch, partial=False, engine=job.engine):
        precision = precision_for(job, family.subset)
        for order in family.orders()[:2]:
            layout = family.layout(order)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, engine=job.engine, job=job,
                                       gpus_per_node={p.name: p.gpus_per_node for p in cluster.pools}):
                if found.holds(precision, layout.num_stages, knobs.zero_stage, family.tps):
                    out.append((family, layout, knobs, precision, scorer))
    rng.shuffle(out)
    return out[:most]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), pair=st.sampled_from(sorted(set(PAIRS) | set(FOUND))),
       precision=st.sampled_from([None, Precision.FP16, Precision.BF16, Precision.FP32]),
       tf32=st.sampled_from([None, True, False]), kind=st.sampled_from([JobKind.PRETRAIN, JobKind.FULL_FINETUNE]))
def test_covered_candidates_cost_no_less_under_the_covering_engine(catalog, seed, pair, precision, tf32, kind):
    """Every candidate the cover holds: the covering engine's search scores the same layout and knobs into
    the same layer split and shares, a plan it runs, on the same GPUs, that fits where the covered one
    fits and whose evaluated iteration is no longer."""
    rng = random.Random(seed)
    cluster, job = _random_case(rng, catalog)
    covered, covering = pair
    job = replace(job, engine=covered, precision=precision, tf32=tf32 if precision == Precision.FP32 else None,
                  training=Training(kind))
    found = cover(ENGINES[covered], ENGINES[covering], job)
    if found is None:
        return
    other = replace(job, engine=covering)
    other_scorer = Scorer(cluster, other)
    other_families = set(layout_families(usable_pools(cluster, other)[0], other.model, other.global_batch,
                                         partial=False, engine=covering))
    for family, layout, knobs, prec, scorer in _covered_candidates(cluster, job, found, rng, 24):
        assert family in other_families, (covered, covering, family)
        assert knobs in set(knob_settings(other.global_batch, layout, other.model.layers, engine=covering, job=other,
                                          gpus_per_node={p.name: p.gpus_per_node for p in cluster.pools}))
        mine, theirs = scorer.score(layout, knobs, prec), other_scorer.score(layout, knobs, prec)
        assert (mine is None) == (theirs is None), (layout, knobs)
        if mine is None:
            continue
        assert (mine.layers, mine.shares) == (theirs.layers, theirs.shares)
        plan, their_plan = mine.to_plan(job), theirs.to_plan(other)
        assert ENGINES[covering].violations(their_plan) == []
        est, their_est = evaluate(cluster, plan, detail=False), evaluate(cluster, their_plan, detail=False)
        assert their_est.iteration_time_s <= est.iteration_time_s * (1 + 1e-12), (covered, covering, layout, knobs)
        assert their_est.num_gpus == est.num_gpus and their_est.cost_per_hour_usd == est.cost_per_hour_usd
        assert their_est.fits or not est.fits
        assert [r.memory.total_bytes for r in their_est.replicas] == [r.memory.total_bytes for r in est.replicas]


def test_search_with_covers_answers_as_without(catalog, monkeypatch):
    """The default search over every engine: the same answer, as complete, with the covered parts skipped,
    and the skipping said."""
    cluster = load_cluster_file("examples/a100-v100-16.yaml", catalog)
    job = Job(catalog.model("llama-2-7b"), 64, 4096)
    with_covers = search(cluster, job, engines=REAL, baselines=False)
    monkeypatch.setattr(search_impl, "_covers", lambda *a: ())
    without = search(cluster, job, engines=REAL, baselines=False)
    assert with_covers.plans[0].plan == without.plans[0].plan
    assert with_covers.plans[0].estimate.tokens_per_s == without.plans[0].estimate.tokens_per_s
    assert with_covers.complete and without.complete
    said = [text for r in with_covers.by_engine.values() for text in
            (r.notes if not isinstance(r, str) else (r,)) if "not searched: " in text]
    assert said, with_covers.by_engine


def test_a_cover_holds_for_its_own_job_only(catalog):
    """The search skips covered settings of the job the cover was worked out for, not of the same engine's
    search of another setting (an offload: other memory, so other candidates)."""
    cluster = load_cluster_file("examples/a100-v100-16.yaml", catalog)
    job = Job(catalog.model("llama-2-7b"), 64, 4096, engine="deepspeed")
    found = cover(ENGINES["deepspeed"], ENGINES["megatron"], job)
    options = SearchOptions(time_limit_s=None)

    def scores(job, covered):
        return PLANNERS["hetplan"].consider(cluster, job, Objective.THROUGHPUT, None,
                                            replace(options, covered=covered)).fast_scores

    assert scores(job, (found,)) < scores(job, ())
    offloaded = replace(job, offload=Offload.OPTIMIZER)
    assert scores(offloaded, (found,)) == scores(offloaded, ())
