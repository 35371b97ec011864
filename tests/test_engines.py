"""Engine profiles (planner.engines): the search searches each engine's space, and the cost model's
fast path stays one cost model under each engine's execution.

Held here, per engine: its execution costs at least hetplan's runtime's (which keeps the search's
bounds valid for all engines); the bounds and candidate floors stay below planner.cost.evaluate;
the fast scores stay near evaluate on the plans the search ranks; the search returns only plans the
engine runs, and `complete` means exhaustive search over the engine's space finds nothing better.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from catalog import load_catalog
from catalog.formats import plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.engines import DEFAULT, ENGINES, get
from planner.search import SearchOptions, search
from planner.search.bound import Bounds
from planner.search.planners import PLANNERS, precision_for, usable_pools
from planner.search.score import Scorer
from planner.search.screen import screen_s
from planner.search.space import knob_settings, layout_families
from planner.types import InfeasibleError, InputError, Objective, Precision, Recompute
from tests.test_one_cost_model import PIPELINE_TOLERANCE, _random_case, assert_holds_against_exhaustive

REAL_ENGINES = [name for name in ENGINES if name != DEFAULT]
# seed 19's 8-stage gpt3-2.7b plan: every torchtitan pass 0.6-1.3% longer, 1F1B 4.5% sooner (2.868 s against
# 3.004 s, bubble 0.856 s against 1.003 s) since attention runs at FlashAttention-2's measured rates (issue 19;
# 3.0% sooner before)
GRAHAM_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _engine_job(job, engine):
    return replace(job, engine=engine)


def test_every_engine_costs_at_least_hetplans_runtime():
    """The search's bounds are built for hetplan's runtime (the floor); every other engine's
    execution must cost at least as much in every term for them to stay lower bounds."""
    floor = ENGINES[DEFAULT].execution
    for engine in ENGINES.values():
        assert engine.execution.dominates(floor), engine.name
        assert engine.version and engine.summary, engine.name


def test_unknown_engine_names_the_known_ones():
    with pytest.raises(InputError) as e:
        get("megatorn")
    assert "megatron" in str(e.value) and "torchtitan" in str(e.value)


def _candidates(cluster, job):
    scorer = Scorer(cluster, job)
    bounds = Bounds(scorer)
    pools, _ = usable_pools(cluster, job)
    families = list(layout_families(pools, job.model, job.global_batch, partial=False, engine=job.engine,
                                    cp=job.context_parallel))
    for family, screen in zip(families, screen_s(scorer, families)):
        for order in family.orders():
            layout = family.layout(order)
            pipeline = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, engine=job.engine, job=job,
                                       gpus_per_node={p.name: p.gpus_per_node for p in cluster.pools}):
                cand = scorer.score(layout, knobs, precision_for(job, family.subset))
                if cand is not None:
                    key = (knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage)
                    yield cand, screen, pipeline.get(key, math.inf)


@pytest.mark.parametrize("engine", REAL_ENGINES)
@pytest.mark.parametrize("seed", [3, 19])
def test_bounds_floors_and_space_under_each_engine(catalog, engine, seed):
    """Every candidate of the engine's space: the engine runs it, the screen, pipeline bound and
    floor stay below evaluate under the engine, and evaluate under the engine is never faster nor
    smaller than under hetplan's runtime."""
    cluster, job = _random_case(random.Random(seed), catalog)
    job = _engine_job(job, engine)
    checked = 0
    for cand, screen, pipeline in _candidates(cluster, job):
        plan = cand.to_plan(job)
        assert plan.engine == engine and not ENGINES[engine].violations(plan), (cand.layout, cand.knobs)
        est = evaluate(cluster, plan, detail=False)
        assert screen <= est.iteration_time_s * (1 + 1e-9), (cand.layout, cand.knobs)
        assert cand.floor_s <= est.iteration_time_s * (1 + 1e-9), (cand.layout, cand.knobs)
        assert pipeline <= est.iteration_time_s * (1 + PIPELINE_TOLERANCE), (cand.layout, cand.knobs)
        # against hetplan's runtime with the same TF32 choice (an engine's TF32 default is not an overhead)
        tf32 = ENGINES[engine].execution.tf32(plan.tf32) if plan.precision == Precision.FP32 else None
        own = evaluate(cluster, replace(plan, engine=DEFAULT, tf32=tf32), detail=False)
        # Longer passes can end a greedy list schedule sooner (Graham 1969's timing anomalies): the
        # 1F1B event simulation then finishes up to about 3% earlier when some stages slow down more
        # than others (seed 19: an 8-stage torchtitan plan, every pass 0.5% longer than under hetplan's
        # runtime; GRAHAM_TOLERANCE has today's figures). What the
        # search needs, bounds below evaluate under the engine, is held exactly above.
        assert est.iteration_time_s >= own.iteration_time_s * (1 - GRAHAM_TOLERANCE)
        same_kind = (plan.recompute != Recompute.SELECTIVE or ENGINES[engine].execution.selective_recompute
                     == ENGINES[DEFAULT].execution.selective_recompute)
        if same_kind:       # torchtitan's op-level SAC keeps less than attention-core recomputation
            assert est.peak_memory_bytes >= own.peak_memory_bytes
        checked += 1
    assert checked > (10 if ENGINES[engine].space.pipeline_parallel else 2)   # one stage: few layouts


@pytest.mark.parametrize("engine", REAL_ENGINES)
@pytest.mark.parametrize("seed", [0, 11])
def test_fast_score_near_evaluate_under_each_engine(catalog, engine, seed):
    """The candidates the search keeps for re-scoring: fast score / evaluate within the band the
    hetplan runtime is held to (tests/test_one_cost_model.py), [0.70, 1.15]."""
    cluster, job = _random_case(random.Random(seed), catalog)
    job = _engine_job(job, engine)
    try:
        considered = PLANNERS["hetplan"].consider(cluster, job, Objective.THROUGHPUT, None,
                                                  SearchOptions(time_limit_s=None))
    except InputError:
        pytest.skip(f"{engine} cannot train this random case's precision")
    for _, _, cand, _ in considered.kept:
        est = evaluate(cluster, cand.to_plan(job), detail=False)
        assert 0.70 <= cand.time_s / est.iteration_time_s <= 1.15, (cand.layout, cand.knobs)


@pytest.mark.parametrize("engine", REAL_ENGINES)
@pytest.mark.parametrize("seed", [2, 8])
def test_search_under_an_engine_is_complete_over_its_space(catalog, engine, seed):
    """Search under an engine returns a plan the engine runs; when it says complete, exhaustive
    search over the same engine's space finds nothing better by evaluate."""
    cluster, job = _random_case(random.Random(seed), catalog, most_gpus=10)
    job = _engine_job(job, engine)
    try:
        ours = search(cluster, job, baselines=False)
    except (InfeasibleError, InputError):
        pytest.skip(f"nothing {engine} runs fits this random case")
    for sp in ours.plans:
        assert sp.plan.engine == engine and not ENGINES[engine].violations(sp.plan)
    assert_holds_against_exhaustive(cluster, job, ours)


def test_an_engines_space_is_a_subset_of_hetplans(catalog):
    """hetplan's runtime runs every plan: its best is at least every engine's on the same job."""
    cluster, job = _random_case(random.Random(5), catalog, most_gpus=16)
    mine = search(cluster, job, baselines=False).plans[0].estimate.tokens_per_s
    for engine in REAL_ENGINES:
        try:
            theirs = search(cluster, _engine_job(job, engine), baselines=False)
        except (InfeasibleError, InputError):
            continue
        # their plan as hetplan's runtime runs it (no tp-communication overlap and the runtime's own
        # overlaps, not the engine's switches; the same TF32 choice)
        plan = theirs.plans[0].plan
        tf32 = ENGINES[engine].execution.tf32(plan.tf32) if plan.precision == Precision.FP32 else None
        as_runtime = evaluate(cluster, replace(plan, engine=DEFAULT, tp_comm_overlap=False, tf32=tf32,
                                               overlap_grad_reduce=None, overlap_param_gather=None, prefetch=None))
        assert as_runtime.tokens_per_s <= mine * (1 + 1e-9), engine


def test_torchtitan_leaves_out_gpus_without_bf16(catalog):
    """torchtitan trains in bf16 (FSDP2 has no fp16 loss scaling): V100s stay idle, with the reason."""
    from catalog import cluster_from_dict
    from planner.types import Job
    cluster = cluster_from_dict({"name": "mix", "pools": [
        {"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 8},
        {"name": "v100", "gpu": "v100-32gb-sxm", "nodes": 1, "gpus_per_node": 8}]}, catalog)
    job = Job(catalog.model("llama-2-7b"), 64, 2048, engine="torchtitan")
    result = search(cluster, job, baselines=False)
    assert set(result.plans[0].plan.gpus_by_pool()) == {"a100"}
    assert result.plans[0].plan.precision == Precision.BF16
    assert "bf16" in result.idle["v100"]
    with pytest.raises(InputError, match="torchtitan does not train in fp16"):
        search(cluster, replace(job, precision=Precision.FP16), baselines=False)


def test_plan_files_name_their_engine_and_refuse_what_it_cannot_run(catalog):
    plan = plan_from_dict(json.loads(open("examples/plans/lab-mix-llama-2-70b.json").read()), catalog)
    assert plan.engine == DEFAULT and "engine" not in plan_to_dict(plan)      # old plans keep their meaning
    data = plan_to_dict(plan)
    with pytest.raises(InputError) as e:
        plan_from_dict({**data, "engine": "megatron"}, catalog)
    assert "engine" in e.value.field and "Megatron-LM cannot run this plan" in e.value.message
    assert "hetplan plan --engine megatron" in e.value.message
    with pytest.raises(InputError, match="unknown engine"):
        plan_from_dict({**data, "engine": "jax"}, catalog)
    uniform = {**data, "stages": [{"layers": [0, 40], "replicas": [{"pool": "a100", "tp": 8}] * 2},
                                  {"layers": [40, 80], "replicas": [{"pool": "a100", "tp": 8}] * 2}]}
    for engine in ("megatron", "flagscale"):
        again = plan_from_dict({**uniform, "engine": engine}, catalog)
        assert again.engine == engine and plan_to_dict(again)["engine"] == engine
        assert plan_from_dict(plan_to_dict(again), catalog) == again


def _hetplan(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=600)


def test_catalog_engines_lists_every_profile():
    out = _hetplan("catalog", "engines", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    assert set(rows) == set(ENGINES)
    assert "fp16" not in rows["torchtitan"]["precisions"] and rows["flagscale"]["tp_per_stage"] is True


def test_plan_engine_all_text_shows_each_engines_best_plan_as_json_does():
    """--engine all's text searches each engine for its best plan alone (SearchOptions.best_only): the
    same plan, figures and completeness as --json's plans[0], which ranks several."""
    from planner.search.explain import describe_plan
    job = ("plan", "--cluster", "examples/single-node-8.yaml", "--model", "gpt3-1.3b", "--global-batch", "32",
           "--seq-len", "2048", "--engine", "all")
    text, out = _hetplan(*job), _hetplan(*job, "--json")
    assert text.returncode == 0 and out.returncode == 0, text.stderr + out.stderr
    catalog = load_catalog()
    for name, result in json.loads(out.stdout)["engines"].items():
        if "error" in result:
            assert f"no plan: {result['error']}" in text.stdout, name
            continue
        best, m = result["plans"][0], result["plans"][0]["metrics"]
        proof = "complete" if result["complete"] else f"gap {result['gap']:.1%}"
        assert (f"{ENGINES[name].title:16s} {m['tokens_per_s']:12,.0f} tokens/s  "
                f"${m['cost_per_million_tokens_usd']:.3f}/M  {m['num_gpus']} GPUs  ({proof}") in text.stdout, name
        assert f"    {describe_plan(plan_from_dict(best, catalog))}\n" in text.stdout + "\n", name


def test_plan_engine_all_side_by_side(tmp_path):
    """--engine all: each engine's best plan (or why it has none), each one the engine runs, and
    hetplan's runtime at least as good as every other (its space holds theirs)."""
    out = _hetplan("plan", "--cluster", "examples/a100-v100-16.yaml", "--model", "llama-2-7b", "--global-batch",
                   "64", "--seq-len", "2048", "--engine", "all", "--json", "--out", str(tmp_path / "best.json"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["engine"] == "all" and set(data["engines"]) == set(ENGINES)
    rates = {}
    for name, result in data["engines"].items():
        if "error" in result:
            assert result["error"], name
            continue
        best = result["plans"][0]
        assert best.get("engine", DEFAULT) == name
        rates[name] = best["metrics"]["tokens_per_s"]
        assert best["metrics"]["engine"] == name
    assert DEFAULT in rates
    for name, rate in rates.items():
        # hetplan's runtime runs every plan, but overlaps no tensor-parallel communication and keeps TF32 off:
        # a plan that uses an engine's overlap (Megatron-LM's --tp-comm-overlap) or its TF32 default may beat it
        plan = data["engines"][name]["plans"][0]
        if not plan.get("tp_comm_overlap") and not ENGINES[name].execution.tf32_default:
            assert rate <= rates[DEFAULT] * (1 + 1e-9), name
    saved = json.loads((tmp_path / "best.json").read_text())
    assert saved.get("engine", DEFAULT) == data["best"]
    again = _hetplan("evaluate", "--cluster", "examples/a100-v100-16.yaml", "--plan", str(tmp_path / "best.json"))
    assert again.returncode == 0, again.stderr
