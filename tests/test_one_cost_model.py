"""One cost model: the search's fast scores, bounds and screen against planner.cost.evaluate.

The fast path restates nothing of the cost model's formulas (they are called, from
planner.memory, planner.dataparallel, planner.flops, planner.schedule and planner.placement);
what it must still be held to: its link figures equal the placement's, its bounds stay below
what evaluate reports, its scores stay near evaluate's on the plans it ranks, and `complete`
means that no candidate of the space beats the answer by evaluate.
"""
from __future__ import annotations

import math
import random

import pytest

from catalog import cluster_from_dict, load_catalog
from planner.comm import ring_s_per_byte
from planner.compute import ACT_BYTES
from planner.cost import evaluate
from planner.dataparallel import zero_per_micro_batch_floor, zero_per_micro_batch_s
from planner.placement import Links, place_structure
from planner.search import SearchOptions, search
from planner.search.bound import Bounds
from planner.search.links import LinkFigures
from planner.search.planners import precision_for
from planner.search import score as score_module
from planner.search.score import Scorer
from planner.search.screen import screen_by_setting_s
from planner.search.space import Group, Knobs, Layout, knob_settings, layout_families
from planner.types import InfeasibleError, Job, Objective, Recompute

# small nodes (1-4 GPUs), slow networks (10-400 Gb/s) and small GPUs: where the placement decides
GPUS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "l40s", "rtx-4090", "a10g", "t4"]
MODELS = ["opt-350m", "gpt3-1.3b", "gpt3-2.7b", "llama-2-7b"]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _random_case(rng: random.Random, catalog, most_gpus: int = 16):
    while True:
        pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((1, 2, 3)), "gpus_per_node": rng.choice((1, 2, 4)),
                  "inter_node_gbps": rng.choice((10, 25, 100, 400))}
                 for j, gpu in enumerate(rng.sample(GPUS, rng.choice((1, 2, 3))))]
        cluster = cluster_from_dict({"name": "random", "pools": pools,
                                     "between_pools_gbps": rng.choice((10, 25, 100))}, catalog)
        if cluster.num_gpus <= most_gpus:
            return cluster, Job(catalog.model(rng.choice(MODELS)), rng.choice((8, 16, 32, 64)), rng.choice((1024, 2048)))


def test_zero_collective_floor_is_the_collectives_without_latency():
    rng = random.Random(0)
    for _ in range(500):
        zero, d = rng.choice((0, 1, 2, 3)), rng.randint(1, 64)
        size, bw, lat = rng.uniform(1e3, 1e10), rng.uniform(1e8, 1e12), rng.uniform(0, 1e-4)
        exact = zero_per_micro_batch_s(zero, size, d, bw, lat)
        floor = zero_per_micro_batch_floor(zero, size, d, ring_s_per_byte(d, bw)) if d > 1 else (0.0, 0.0)
        no_latency = zero_per_micro_batch_s(zero, size, d, bw, 0.0)
        for f, e, n in zip(floor, exact, no_latency):
            assert f <= e * (1 + 1e-12)
            assert f == pytest.approx(n, rel=1e-12)


def test_chain_links_joined_from_runs_equal_the_whole_layouts_placement(catalog):
    """Scorer.layout_links places a chain's runs one at a time and joins them; the figures must be
    those of placing the whole layout as planner.cost.evaluate does."""
    rng = random.Random(1)
    checked = 0
    for _ in range(60):
        cluster, job = _random_case(rng, catalog, most_gpus=48)
        scorer = Scorer(cluster, job)
        for family in layout_families(cluster.pools, job.model, job.global_batch, partial=False):
            if family.kind != "chain" or len(family.subset) < 2 or rng.random() < 0.7:
                continue
            for order in family.orders()[:2]:
                layout = family.layout(order)
                structure = tuple(tuple((g.pool, g.tp) for g in groups for _ in range(g.count))
                                  for groups in layout.stages)
                whole = Links(cluster, structure, place_structure(cluster, structure), 0.0)
                for mb in (1, 4):
                    size = ACT_BYTES * job.seq_len * mb * job.model.hidden
                    assert scorer.layout_links(layout, mb) == LinkFigures.of(whole, layout).at(size)
                    checked += 1
    assert checked > 20


def _candidates(cluster, job):
    scorer = Scorer(cluster, job)
    bounds = Bounds(scorer)
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=False))
    _, by_setting, settings = screen_by_setting_s(scorer, families)     # each family's screen per (mb, recompute)
    for family, row in zip(families, by_setting):
        capacity = bounds.capacity_s(family)
        for order in family.orders():
            layout = family.layout(order)
            pipeline = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers):
                cand = scorer.score(layout, knobs, precision_for(job, family.subset))
                if cand is not None:
                    key = (knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage)
                    screen = row[settings.index((knobs.micro_batch, knobs.recompute))]
                    yield cand, screen, capacity, pipeline.get(key, math.inf)


# The pipeline bounds include bound.FILL_SLACK for Narayanan's fill, which the simulated
# schedule beats by up to about 1% on a few single-replica pipelines: with it they stay below.
PIPELINE_TOLERANCE = 1e-9


@pytest.mark.parametrize("seed", [3, 9, 19, 36, 84, 94])   # 84, 94: deep and interleaved pipelines the fill misjudges
def test_bounds_and_floors_never_above_evaluate(catalog, seed):
    """Screen, capacity and pipeline bounds, and each candidate's own floor, against
    planner.cost.evaluate on every candidate of random clusters with small nodes, slow links and
    ZeRO-3 (the bounds prune what could win only if they exceed evaluate)."""
    cluster, job = _random_case(random.Random(seed), catalog)
    checked = zero3 = 0
    for cand, screen, capacity, pipeline in _candidates(cluster, job):
        est = evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s
        assert screen <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        assert capacity <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        assert cand.floor_s <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        assert pipeline <= est * (1 + PIPELINE_TOLERANCE), (cand.layout, cand.knobs)
        checked += 1
        zero3 += cand.knobs.zero_stage == 3
    assert checked > 50 and zero3 > 0


@pytest.mark.parametrize("seed", [0, 4, 11, 27])
def test_fast_score_near_evaluate_on_the_plans_it_ranks(catalog, seed):
    """The candidates the search keeps for re-scoring: fast score / evaluate within [0.70, 1.15]
    (measured on 40 random clusters: 0.735 to 1.080; median 1.000)."""
    from planner.search.planners import PLANNERS
    cluster, job = _random_case(random.Random(seed), catalog)
    considered = PLANNERS["hetplan"].consider(cluster, job, Objective.THROUGHPUT, None, SearchOptions(time_limit_s=None))
    assert considered.kept
    for _, _, cand, _ in considered.kept:
        est = evaluate(cluster, cand.to_plan(job), detail=False)
        assert 0.70 <= cand.time_s / est.iteration_time_s <= 1.15, (cand.layout, cand.knobs)


def test_a_ring_spread_over_two_nodes_is_scored_as_evaluate_places_it(catalog):
    """The issue's worst case: 2 stages x 3 H100s with ZeRO-3 on 4-GPU nodes. The placement puts
    stage 1's ring across two nodes; the fast score once assumed NVLink there (0.080 s fast,
    2.459 s by evaluate)."""
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                         "gpus_per_node": 4, "inter_node_gbps": 25}]}, catalog)
    job = Job(catalog.model("llama-2-7b"), 48, 2048)
    scorer = Scorer(cluster, job)
    layout = Layout("chain", ((Group("h100", 1, 3),), (Group("h100", 1, 3),)))
    cand = scorer.score(layout, Knobs(1, 3, Recompute.FULL, 1), precision_for(job, cluster.pools))
    assert cand is not None
    est = evaluate(cluster, cand.to_plan(job), detail=False)
    assert cand.time_s == pytest.approx(est.iteration_time_s, rel=0.1)
    assert cand.floor_s <= est.iteration_time_s * (1 + 1e-9)


@pytest.mark.parametrize("gbps", [5, 25])
def test_a_slow_boundary_mid_pipeline_is_in_the_floor(catalog, monkeypatch, gbps):
    """1F1B in Megatron-LM's fixed order: stages 1 and 2 (A100 | H100, a slow link between the pools) hold a
    loop that carries each transfer once per two micro-batches (score._pairs_s), which the in-flight window
    over the whole way down spreads over four stages. The floor stays below evaluate and comes within 5% of
    it; without the loops it was 27% below at 5 Gb/s (a search whose answer such floors sit below must
    evaluate those candidates to prove it: 912 at 5 pools of growth_benchmark, 119 with the loops)."""
    cluster = cluster_from_dict({"name": "two", "between_pools_gbps": gbps, "pools": [
        {"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 8, "inter_node_gbps": 200},
        {"name": "h100", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    job = Job(catalog.model("llama-2-7b"), 64, 4096, engine="megatron")
    layout = Layout("chain", tuple((Group(pool, 4, 1),) for pool in ("a100", "a100", "h100", "h100")))

    def floor_and_evaluate():
        cand = Scorer(cluster, job).score(layout, Knobs(1, 1, Recompute.NONE, 1), precision_for(job, cluster.pools))
        return cand.floor_s, evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s

    floor, est = floor_and_evaluate()
    assert 0.95 * est <= floor <= est * (1 + 1e-9)
    monkeypatch.setattr(score_module, "SEGMENT", 1)      # no loops of neighbouring stages
    without, _ = floor_and_evaluate()
    assert without < 0.9 * est


@pytest.mark.parametrize("seed", [2, 5, 8])
def test_complete_means_no_candidate_of_the_space_beats_the_answer(catalog, seed):
    """When search says complete, exhaustive search (every candidate of the same space scored by
    planner.cost.evaluate) finds nothing better; when it does not, the gap it states holds."""
    cluster, job = _random_case(random.Random(seed), catalog, most_gpus=10)
    try:
        ours = search(cluster, job, baselines=False)
    except InfeasibleError:
        pytest.skip("nothing fits this random case")
    assert_holds_against_exhaustive(cluster, job, ours)
    assert ours.guarantee


def assert_holds_against_exhaustive(cluster, job, ours) -> None:
    """Exhaustive search of the same space (every candidate scored by planner.cost.evaluate) finds
    nothing better than a complete answer, and nothing better than the stated gap allows otherwise."""
    best = search(cluster, job, method="exhaustive", baselines=False).plans[0].estimate
    got = ours.plans[0].estimate.tokens_per_s
    if ours.complete:
        assert got >= best.tokens_per_s * (1 - 1e-9)
    else:
        assert ours.gap is not None and got * (1 + ours.gap) >= best.tokens_per_s * (1 - 1e-9)
