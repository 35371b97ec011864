"""Megatron-DeepSpeed (planner.engines.megatron_deepspeed): tensor parallelism inside DeepSpeed's pipeline
with ZeRO, TF32 on for fp32 runs as the engine is launched (NVIDIA's container). Issue 19: the fp32
A100/V100 runs of a heterogeneous-cluster study (Megatron-DeepSpeed, tp > 1) must be statable; the
deepspeed profile, without tensor parallelism, refuses them."""
from __future__ import annotations

from dataclasses import replace

from catalog import cluster_from_dict
from planner.cost import evaluate
from planner.engines import ENGINES, REAL
from planner.types import Plan, Precision, Replica, Stage


def _sailor_style(catalog):
    cluster = cluster_from_dict({"name": "a100-v100", "pools": [
        {"name": "a100", "gpu": "a100-40gb-sxm", "nodes": 1, "gpus_per_node": 8, "inter_node_gbps": 200},
        {"name": "v100", "gpu": "v100-16gb-pcie", "nodes": 2, "gpus_per_node": 4, "inter_node_gbps": 100}],
        "between_pools_gbps": 100}, catalog)
    m = catalog.model("gpt3-1.3b")
    half = m.layers // 2
    plan = Plan(m, 32, 2048, 1, Precision.FP32,
                (Stage(0, half, tuple(Replica("a100", 2, 8) for _ in range(4))),
                 Stage(half, m.layers, tuple(Replica("v100", 2, 8) for _ in range(4)))),
                zero_stage=1, engine="megatron-deepspeed")
    return cluster, plan


def test_fp32_tp_plan_on_a100_and_v100_is_statable_with_tf32_on(catalog):
    cluster, plan = _sailor_style(catalog)
    engine = ENGINES["megatron-deepspeed"]
    assert engine.violations(plan) == []
    assert any("tensor parallelism" in v for v in ENGINES["deepspeed"].violations(plan))
    assert engine.execution.tf32(None) and not ENGINES["deepspeed"].execution.tf32(None)
    on, off = evaluate(cluster, plan), evaluate(cluster, replace(plan, tf32=False))
    assert on.fits and on.iteration_time_s < off.iteration_time_s


def test_an_engine_without_an_export_is_not_in_the_default_planning():
    assert "megatron-deepspeed" not in REAL and "fsdp" in REAL
    assert all(ENGINES[n].exports for n in REAL)
