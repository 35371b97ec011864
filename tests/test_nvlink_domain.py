"""NVLink domains that span nodes (Gpu.nvlink_domain_gpus): a GB200 NVL72 rack is 18 trays of 4 GPUs on
one NVLink switch fabric, so a tensor-parallel group of 8 spans two trays at NVLink speed (NVIDIA GB200
NVL72 datasheet; catalog/gpus.yaml). Issue 19: TP 8 must be statable on GB200."""
from __future__ import annotations

import pytest

from catalog import cluster_from_dict
from catalog.formats import check_plan_against_cluster
from planner.cost import evaluate
from planner.search.space import tp_degrees
from planner.types import InputError, Plan, Precision, Replica, Stage


def _rack(catalog, gpu="gb200"):
    return cluster_from_dict({"name": "nvl72", "pools": [
        {"name": "rack", "gpu": gpu, "nodes": 18, "gpus_per_node": 4, "inter_node_gbps": 28800}]}, catalog)


def _plan(catalog, tp: int) -> Plan:
    m = catalog.model("llama-3-70b")
    return Plan(m, 64, 4096, 1, Precision.BF16, (Stage(0, m.layers, tuple(Replica("rack", tp, 64 // (16 // tp))
                                                                          for _ in range(16 // tp))),),
                zero_stage=1, engine="megatron")


def test_gb200_rack_states_tp_8_across_two_trays(catalog):
    rack = _rack(catalog)
    assert catalog.gpu("gb200").nvlink_domain_gpus == 72
    assert 8 in tp_degrees(rack.pools[0], catalog.model("llama-3-70b"))
    plan = _plan(catalog, 8)
    check_plan_against_cluster(plan, rack)
    est = evaluate(rack, plan)
    assert est.fits and est.tokens_per_s > 0


def test_tp_beyond_the_node_without_an_nvlink_domain_is_refused(catalog):
    cluster = cluster_from_dict({"name": "h100", "pools": [
        {"name": "rack", "gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 4, "inter_node_gbps": 3200}]}, catalog)
    assert 8 not in tp_degrees(cluster.pools[0], catalog.model("llama-3-70b"))
    with pytest.raises(InputError, match="stays inside a node"):
        check_plan_against_cluster(_plan(catalog, 8), cluster)
