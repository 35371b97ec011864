"""Context parallelism (plan `context_parallel`): each replica spans tp x cp GPUs holding s / cp of
the sequence; the cost model, placement across nodes, the plan format, the engines that run it,
and the search's bounds and completeness with it."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from catalog.formats import check_plan_against_cluster, plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.memory import activation_bytes_per_layer
from planner.placement import place
from planner.search import search
from planner.search.search import context_settings
from planner.types import InfeasibleError, InputError, Job, Plan, Precision, Recompute, Replica, Stage
from tests.bounds import check_bounds_below_evaluate
from tests.clusters import h100_nodes, random_cluster
from tests.test_one_cost_model import assert_holds_against_exhaustive


def _plan(catalog, cp: int, tp: int = 2, seq_len: int = 131072, engine: str = "megatron", replicas: int = 1) -> Plan:
    model = catalog.model("llama-3-8b")
    reps = tuple(Replica("h100", tp, 1) for _ in range(replicas))
    return Plan(model, replicas, seq_len, 1, Precision.BF16, (Stage(0, model.layers, reps),), zero_stage=1,
                recompute=Recompute.FULL, sequence_parallel=tp > 1, context_parallel=cp, engine=engine)


def test_activations_fall_by_the_context_parallel_degree(catalog):
    model = catalog.model("llama-3-8b")
    one = activation_bytes_per_layer(model, 131072, 1, 2, True, Recompute.NONE, True)
    for cp in (2, 4, 8):
        assert activation_bytes_per_layer(model, 131072, 1, 2, True, Recompute.NONE, True, cp=cp) == \
            pytest.approx(one / cp)


def test_a_replica_spans_tp_x_cp_gpus_and_whole_nodes_when_wider(catalog):
    cluster = h100_nodes(catalog)
    plan = _plan(catalog, cp=8)                   # 2 x 8 = 16 GPUs: both nodes
    assert plan.num_gpus == 16 and plan.gpus_by_pool() == {"h100": 16}
    slot = place(cluster, plan).slots[(0, 0)]
    assert slot.tp == 16 and slot.first_gpu == 0
    with pytest.raises(InputError, match="context_parallel"):
        check_plan_against_cluster(_plan(catalog, cp=3, tp=2, seq_len=131070 - 131070 % 6), cluster)


def test_context_parallelism_cuts_time_and_memory_per_gpu_at_long_sequences(catalog):
    """Llama 3 8B at 131,072 tokens on H100s: cp 1 does not fit one replica of tp 2; each doubling
    of cp halves the work per GPU (load-balanced causal attention), and over NVLink the ring's
    transfers hide behind attention: what is left of them is the slowdown of the attention beside them
    (planner.comm.OVERLAP_COMPUTE_SLOWDOWN), a thousandth of the iteration."""
    cluster = h100_nodes(catalog)
    est = {cp: evaluate(cluster, _plan(catalog, cp)) for cp in (1, 2, 4)}
    assert not est[1].fits and est[2].fits and est[4].fits
    assert est[4].peak_memory_bytes < est[2].peak_memory_bytes
    assert est[4].iteration_time_s == pytest.approx(est[2].iteration_time_s / 2, rel=0.1)
    assert 0.0 < est[4].breakdown["context_parallel_comm"].exposed_s < 0.005 * est[4].iteration_time_s


def test_the_ring_shows_where_the_network_is_slow_and_the_sequence_short(catalog):
    slow = h100_nodes(catalog, nodes=2, gbps=10)
    est = evaluate(slow, _plan(catalog, cp=8, seq_len=16384))        # the ring crosses 10 Gb/s between nodes
    assert est.breakdown["context_parallel_comm"].exposed_s > 0
    fast = evaluate(h100_nodes(catalog, nodes=2, gbps=3200), _plan(catalog, cp=8, seq_len=16384))
    assert fast.iteration_time_s < est.iteration_time_s


def test_plan_files_carry_context_parallel_and_engines_refuse_it(catalog):
    plan = _plan(catalog, cp=4)
    data = plan_to_dict(plan)
    assert data["context_parallel"] == 4 and plan_from_dict(data, catalog) == plan
    assert "context_parallel" not in plan_to_dict(_plan(catalog, cp=1))
    with pytest.raises(InputError, match="2 x 4 equal chunks"):
        plan_from_dict({**data, "seq_len": 131068}, catalog)
    for engine in ("deepspeed", "flagscale"):
        with pytest.raises(InputError, match="no context parallelism"):
            plan_from_dict({**data, "engine": engine}, catalog)
    assert plan_from_dict({**data, "engine": "hetplan"}, catalog).context_parallel == 4     # run-local runs it
    assert plan_from_dict({**data, "engine": "torchtitan", "zero_stage": 3}, catalog).context_parallel == 4


def test_search_tries_context_parallel_degrees_for_long_sequences(catalog):
    cluster = h100_nodes(catalog)
    job = Job(catalog.model("llama-3-8b"), 8, 131072, engine="megatron")
    assert context_settings(cluster, job) == [1, 2, 4, 8, 16]
    assert context_settings(cluster, replace(job, seq_len=8192)) == [1]
    assert context_settings(cluster, replace(job, engine="deepspeed")) == [1]
    result = search(cluster, job, baselines=False)
    best = result.plans[0]
    assert best.plan.context_parallel > 1 and best.estimate.fits
    assert any("context parallelism (1, 2, 4, 8, 16) searched" in n for n in result.notes)
    fixed = search(cluster, replace(job, context_parallel=2), baselines=False, context_parallel="fixed")
    assert fixed.plans[0].plan.context_parallel == 2
    assert best.estimate.tokens_per_s >= fixed.plans[0].estimate.tokens_per_s * (1 - 1e-9)
    with pytest.raises(InputError, match="no context parallelism"):
        search(cluster, replace(job, engine="deepspeed", context_parallel=2), baselines=False)


def _long_case(rng: random.Random, catalog):
    cluster = random_cluster(rng, catalog, ["h100-sxm", "a100-80gb-sxm", "l40s", "a100-40gb-sxm"], nodes=(1, 2),
                             gpus_per_node=(2, 4), between_pools_gbps=25)
    model = catalog.model(rng.choice(["gpt3-1.3b", "llama-2-7b"]))
    return cluster, Job(model, rng.choice((4, 8)), rng.choice((16384, 32768)), engine="megatron")


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("seed", [1, 7, 12])
def test_bounds_and_floors_below_evaluate_with_context_parallelism(catalog, cp, seed):
    cluster, job = _long_case(random.Random(seed), catalog)
    job = replace(job, context_parallel=cp)

    def check_plan(plan, cand):
        assert plan.context_parallel == cp and plan.num_gpus == sum(cand.layout.gpus_by_pool().values())

    if not check_bounds_below_evaluate(cluster, job, check_plan):
        pytest.skip("nothing fits this random case at this degree")


@pytest.mark.parametrize("seed", [1, 7])
def test_complete_context_parallel_answers_hold_against_exhaustive_search(catalog, seed):
    cluster, job = _long_case(random.Random(seed), catalog)
    if cluster.num_gpus > 16:
        pytest.skip("exhaustive search is for 16 GPUs at most")
    job = replace(job, context_parallel=2)
    try:
        ours = search(cluster, job, baselines=False, context_parallel="fixed")
    except InfeasibleError:
        pytest.skip("nothing fits this random case")
    assert_holds_against_exhaustive(cluster, job, ours)
