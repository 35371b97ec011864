"""Overlaps a plan switches (issue 19, item 4): Megatron-Core's tensor-parallel communication overlap
(--tp-comm-overlap, with sequence parallelism) is a plan setting (`Plan.tp_comm_overlap`) that the
engine's space offers, the search turns on where it applies, the cost model reads and the export writes."""
from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import cluster_from_dict
from catalog.formats import plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.engines import ENGINES
from planner.export import export_result
from planner.search import SearchOptions, search
from planner.types import InputError, Job


def _cluster(catalog):
    return cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                     "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)


def _megatron_tp_plan(catalog):
    cluster = _cluster(catalog)
    job = Job(catalog.model("llama-3-70b"), 64, 4096, engine="megatron")
    plans = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=5)).plans
    plan = next(sp.plan for sp in plans if max(r.tp for st in sp.plan.stages for r in st.replicas) > 1)
    return cluster, plan


def test_the_search_turns_on_megatrons_tp_overlap_and_the_export_writes_it(catalog):
    cluster, plan = _megatron_tp_plan(catalog)
    assert plan.sequence_parallel and plan.tp_comm_overlap
    assert evaluate(cluster, plan).iteration_time_s < evaluate(cluster, replace(plan, tp_comm_overlap=False)).iteration_time_s
    args = export_result(plan, cluster, "megatron").files["megatron_args.sh"]
    assert "--tp-comm-overlap" in args and "--sequence-parallel" in args
    off = export_result(replace(plan, tp_comm_overlap=False), cluster, "megatron").files["megatron_args.sh"]
    assert "--tp-comm-overlap" not in off
    assert plan_from_dict(plan_to_dict(plan), catalog) == plan          # the plan file carries it


def test_an_engine_without_the_overlap_refuses_a_plan_that_uses_it(catalog):
    cluster, plan = _megatron_tp_plan(catalog)
    assert any("communication overlap" in v for v in ENGINES["torchtitan"].violations(replace(plan, engine="torchtitan")))
    assert any("sequence parallelism" in v
               for v in ENGINES["megatron"].violations(replace(plan, sequence_parallel=False)))
    with pytest.raises(InputError, match="tp_comm_overlap"):
        replace(plan, tp_comm_overlap="yes")
