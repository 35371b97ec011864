"""Property tests over random clusters, jobs and plans (Hypothesis).

- the search never raises anything but InfeasibleError, and every plan it returns can run: GPUs
  used <= GPUs in each pool, layers covered exactly once, each stage's samples add up to the
  global batch, no replica without samples, memory fits, every metric finite and positive;
- `evaluate` of a returned plan reproduces its estimate;
- the cost model answers any valid hand-built plan with finite, positive metrics;
- plan file, cluster file and URL state round trips give back what went in.

Counts: see docs/reliability.md; the "ci" profile (tests/conftest.py) makes them deterministic.
"""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from catalog import (builtin_catalog, check_plan_against_cluster, cluster_from_dict, cluster_to_dict,
                     cluster_to_yaml, plan_from_dict, plan_to_dict, plan_to_json)
from catalog.files import parse_json, parse_yaml
from planner.cost import evaluate
from planner.types import (Estimate, InfeasibleError, Job, Objective, Plan, Precision, Recompute, Replica,
                           Schedule, Stage)
from tests.conftest import PROFILE, examples

# fuzz-long runs for many minutes; each call keeps its own bound there
pytestmark = pytest.mark.timeout(0 if PROFILE == "fuzz-long" else 300)

CATALOG = builtin_catalog()
GPU_IDS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "t4", "l4", "rtx-4090", "mi300x"]
SMALL_MODELS = ["opt-350m", "gpt3-1.3b", "gpt-neo-2.7b", "llama-2-7b", "qwen2.5-7b"]
GBPS = [10, 25, 100, 200, 400, 800]


# ----------------------------------------------------------------------------- strategies

@st.composite
def cluster_dicts(draw, max_pools: int = 3, max_nodes: int = 4):
    """A cluster in the file format: 1-3 pools of catalog GPUs, small sizes."""
    n = draw(st.integers(1, max_pools))
    pools = []
    for k in range(n):
        pool = {"name": f"p{k}", "gpu": draw(st.sampled_from(GPU_IDS)), "nodes": draw(st.integers(1, max_nodes)),
                "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])), "inter_node_gbps": draw(st.sampled_from(GBPS))}
        if draw(st.booleans()):
            pool["price_per_gpu_hour"] = draw(st.floats(0.05, 20).map(lambda x: round(x, 2)))
        pools.append(pool)
    data = {"name": draw(st.text(min_size=1, max_size=12)), "pools": pools}
    if n > 1 and draw(st.booleans()):
        data["between_pools_gbps"] = draw(st.sampled_from(GBPS))
    return data


clusters = cluster_dicts().map(lambda d: cluster_from_dict(d, CATALOG))


@st.composite
def jobs(draw):
    model = CATALOG.models[draw(st.sampled_from(SMALL_MODELS))]
    tokens = draw(st.one_of(st.none(), st.sampled_from([1e9, 3e10, 1e12])))
    return Job(model=model, global_batch=draw(st.sampled_from([1, 2, 3, 7, 8, 16, 48, 64, 128, 512])),
               seq_len=draw(st.sampled_from([128, 512, 2048, 4096])),
               precision=draw(st.sampled_from([None, None, Precision.BF16, Precision.FP16])),
               tokens_to_train=tokens)


def _splits_the_model(model, tp: int) -> bool:
    """tp divides the heads and the ffn, and divides the kv heads or is a multiple of them (Plan's own rule)."""
    return model.heads % tp == 0 and model.ffn % tp == 0 and (model.kv_heads % tp == 0 or tp % model.kv_heads == 0)


@st.composite
def plans_on(draw, cluster):
    """A valid hand-built plan on `cluster` (not necessarily a good one, nor one that fits)."""
    model = CATALOG.models[draw(st.sampled_from(SMALL_MODELS))]
    left = {p.name: p.num_gpus for p in cluster.pools}
    num_stages = draw(st.integers(1, min(4, model.layers)))
    cuts = sorted(draw(st.sets(st.integers(1, model.layers - 1), min_size=num_stages - 1,
                               max_size=num_stages - 1))) if num_stages > 1 else []
    bounds = [0, *cuts, model.layers]
    shapes = []
    for i in range(num_stages):
        replicas = []
        for _ in range(draw(st.integers(1, 3))):
            pool = cluster.pool(draw(st.sampled_from(list(left))))
            tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if pool.gpus_per_node % t == 0
                                       and _splits_the_model(model, t)]))
            if left[pool.name] >= tp:
                left[pool.name] -= tp
                replicas.append((pool.name, tp))
        assume(replicas)
        shapes.append(replicas)
    micro_batch = draw(st.sampled_from([1, 2, 4]))
    most = max(len(r) for r in shapes)
    micro_batches = draw(st.integers(most, most + 12))
    stages = []
    for i, replicas in enumerate(shapes):
        counts = [1] * len(replicas)
        for _ in range(micro_batches - len(replicas)):
            counts[draw(st.integers(0, len(replicas) - 1))] += 1
        stages.append(Stage(bounds[i], bounds[i + 1],
                            tuple(Replica(p, tp, c * micro_batch) for (p, tp), c in zip(replicas, counts))))
    used = {r.pool for s in stages for r in s.replicas}
    bf16_ok = all(cluster.pool(name).gpu.supports_bf16 for name in used)
    precision = draw(st.sampled_from([Precision.BF16, Precision.FP16])) if bf16_ok else Precision.FP16
    return Plan(model=model, global_batch=micro_batches * micro_batch, seq_len=draw(st.sampled_from([128, 1024, 4096])),
                micro_batch=micro_batch, precision=precision, stages=tuple(stages),
                zero_stage=draw(st.sampled_from([0, 1, 2, 3])), recompute=draw(st.sampled_from(list(Recompute))),
                sequence_parallel=draw(st.booleans()), schedule=draw(st.sampled_from(list(Schedule))))


# ----------------------------------------------------------------------------- invariants

def assert_metrics_finite_and_positive(est: Estimate, tokens: float | None) -> None:
    for name in ("iteration_time_s", "pipeline_time_s", "tokens_per_s", "mfu", "cost_per_hour_usd",
                 "cost_per_million_tokens_usd"):
        value = getattr(est, name)
        assert math.isfinite(value) and value > 0, (name, value)
    assert est.mfu < 1, est.mfu
    assert est.pipeline_time_s <= est.iteration_time_s * (1 + 1e-9)
    for name, term in est.breakdown.items():
        assert math.isfinite(term.total_s) and term.total_s >= 0, (name, term)
        assert math.isfinite(term.exposed_s) and 0 <= term.exposed_s <= term.total_s * (1 + 1e-9) + 1e-12, (name, term)
    for r in est.replicas:
        assert r.forward_s > 0 and r.backward_s > 0 and math.isfinite(r.forward_s + r.backward_s), r
        assert math.isfinite(r.memory.total_bytes) and r.memory.total_bytes > 0, r
    assert est.fits == all(r.memory.fits for r in est.replicas)
    if tokens:
        assert math.isfinite(est.train_time_s) and est.train_time_s > 0
        assert math.isfinite(est.train_cost_usd) and est.train_cost_usd > 0


def assert_plan_can_run(plan: Plan, cluster, job: Job | None = None) -> None:
    used = plan.gpus_by_pool()
    for name, n in used.items():
        assert n <= cluster.pool(name).num_gpus, (name, n)                         # GPUs used <= GPUs in the pool
    assert plan.stages[0].layer_start == 0                                         # layers covered exactly once
    for a, b in zip(plan.stages, plan.stages[1:]):
        assert a.layer_end == b.layer_start and a.layer_start < a.layer_end
    assert plan.stages[-1].layer_end == plan.model.layers
    for s in plan.stages:
        assert sum(r.samples for r in s.replicas) == plan.global_batch              # samples add up
        for r in s.replicas:
            assert r.samples > 0 and r.samples % plan.micro_batch == 0               # no idle replica
    check_plan_against_cluster(plan, cluster)                                      # tp in a node, bf16 support
    if job is not None:
        assert plan.model == job.model and plan.global_batch == job.global_batch and plan.seq_len == job.seq_len
        if job.precision is not None:
            assert plan.precision == job.precision


def assert_plan_round_trips(plan: Plan) -> None:
    text = plan_to_json(plan, CATALOG, metrics={"note": "ignored on load"})
    assert plan_from_dict(parse_json(text, "plan.json"), CATALOG) == plan


# ----------------------------------------------------------------------------- the search

def _search():
    try:
        from planner.search import search
    except ImportError:
        pytest.skip("planner.search is not built yet")
    return search


@settings(max_examples=examples(40))
@given(cluster=clusters, job=jobs(), objective=st.sampled_from([Objective.THROUGHPUT, Objective.COST,
                                                                Objective.DEADLINE]),
       top_k=st.integers(1, 4), method=st.sampled_from(["hetplan", "hetplan", "hetplan", "megatron", "uniform"]))
def test_search_returns_only_plans_that_can_run(cluster, job, objective, top_k, method):
    search = _search()
    deadline = None
    if objective == Objective.DEADLINE:
        assume(job.tokens_to_train is not None)
        deadline = 24.0 * 30
    try:
        result = search(cluster, job, objective=objective, deadline_hours=deadline, top_k=top_k, method=method)
    except InfeasibleError as e:
        assert str(e), "an infeasible answer must say why"
        event("infeasible")
        return
    event("plans returned")
    assert 1 <= len(result.plans) <= top_k
    for scored in result.plans:
        plan, est = scored.plan, scored.estimate
        assert_plan_can_run(plan, cluster, job)
        assert est.fits, est.oom                                                    # memory fits
        assert_metrics_finite_and_positive(est, job.tokens_to_train)
        again = evaluate(cluster, plan, tokens_to_train=job.tokens_to_train)
        assert again == est                                                         # evaluate reproduces it
        assert_plan_round_trips(plan)


# ----------------------------------------------------------------------------- the cost model alone

@settings(max_examples=examples(300))
@given(data=st.data(), cluster=clusters)
def test_cost_model_answers_any_valid_plan(data, cluster):
    plan = data.draw(plans_on(cluster))
    tokens = data.draw(st.one_of(st.none(), st.just(1e11)))
    est = evaluate(cluster, plan, tokens_to_train=tokens)
    assert_plan_can_run(plan, cluster)
    assert_metrics_finite_and_positive(est, tokens)
    assert est.num_gpus == plan.num_gpus
    assert evaluate(cluster, plan, tokens_to_train=tokens) == est                  # deterministic
    assert_plan_round_trips(plan)


# ----------------------------------------------------------------------------- round trips

@settings(max_examples=examples(100))
@given(data=cluster_dicts(max_pools=6, max_nodes=64))
def test_cluster_round_trip(data):
    cluster = cluster_from_dict(data, CATALOG)
    assert cluster_from_dict(cluster_to_dict(cluster), CATALOG) == cluster
    assert cluster_from_dict(parse_yaml(cluster_to_yaml(cluster), "c.yaml"), CATALOG) == cluster


def _url_state():
    try:
        from ui.state import AppState, decode, encode
    except ImportError:
        pytest.skip("ui/state.py is not built yet")
    return AppState, decode, encode


@settings(max_examples=examples(60))
@given(data=st.data(), cluster=cluster_dicts())
def test_url_state_round_trip(data, cluster):
    AppState, decode, encode = _url_state()
    plan = None
    if data.draw(st.booleans()):
        plan = plan_to_dict(data.draw(plans_on(cluster_from_dict(cluster, CATALOG))), CATALOG)
    state = AppState(cluster=cluster, model=data.draw(st.sampled_from(SMALL_MODELS)),
                     global_batch=data.draw(st.integers(1, 10_000)), seq_len=data.draw(st.integers(1, 65_536)),
                     precision=data.draw(st.sampled_from(["auto", "bf16", "fp16"])),
                     tokens_to_train=data.draw(st.one_of(st.none(), st.floats(1e6, 1e13))),
                     objective=data.draw(st.sampled_from(["throughput", "cost", "deadline"])),
                     deadline_hours=data.draw(st.one_of(st.none(), st.floats(0.5, 1e4))), plan=plan)
    params = encode(state)
    assert all(isinstance(v, str) for v in params.values())
    assert decode(params) == (state, [])
    assert decode(json.loads(json.dumps(params))) == (state, [])
