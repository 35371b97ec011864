"""Overlaps a plan switches (issue 19, item 4): Megatron-Core's tensor-parallel communication overlap
(--tp-comm-overlap, with sequence parallelism) is a plan setting (`Plan.tp_comm_overlap`) that the
engine's space offers, the search turns on where it applies, the cost model reads and the export writes."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from catalog import cluster_from_dict
from catalog.formats import plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.engines import ENGINES
from planner.export import export_result
from planner.search import SearchOptions, search
from planner.types import InputError, Job, Recompute, Replica, Stage


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


# --- overlaps as plan switches (Plan.overlap_grad_reduce, overlap_param_gather, prefetch) -----------------------

def _best(catalog, engine, model="llama-3-8b", batch=64):
    cluster = _cluster(catalog)
    job = Job(catalog.model(model), batch, 4096, engine=engine)
    return cluster, search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=3)).plans[0].plan


def _slower(cluster, plan, **off) -> bool:
    return evaluate(cluster, replace(plan, **off)).iteration_time_s > evaluate(cluster, plan).iteration_time_s


def test_megatron_zero1_plans_overlap_the_param_gather_and_the_export_writes_both_flags(catalog):
    cluster, plan = _best(catalog, "megatron")
    plan = replace(plan, zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True)
    assert ENGINES["megatron"].violations(plan) == []
    assert _slower(cluster, plan, overlap_param_gather=False) and _slower(cluster, plan, overlap_grad_reduce=False,
                                                                           overlap_param_gather=False)
    args = export_result(plan, cluster, "megatron").files["megatron_args.sh"]
    assert "--overlap-param-gather" in args and "--overlap-grad-reduce" in args
    off = export_result(replace(plan, overlap_grad_reduce=False, overlap_param_gather=False), cluster,
                        "megatron").files["megatron_args.sh"]
    assert "--overlap-param-gather" not in off and "--overlap-grad-reduce" not in off
    assert plan_from_dict(plan_to_dict(plan), catalog) == plan
    # Megatron asserts --overlap-param-gather needs --overlap-grad-reduce and the distributed optimizer
    assert any("only with overlap_grad_reduce on" in v for v in
               ENGINES["megatron"].violations(replace(plan, overlap_grad_reduce=False)))
    assert any("overlap_param_gather" in v for v in ENGINES["megatron"].violations(replace(plan, zero_stage=0)))


def test_the_search_turns_on_each_switch_the_engine_offers_for_the_plans_shape(catalog):
    _, plan = _best(catalog, "megatron")
    assert plan.overlap_grad_reduce is True
    assert plan.overlap_param_gather is (True if plan.zero_stage == 1 else None)
    _, fsdp = _best(catalog, "fsdp")
    assert fsdp.prefetch is (True if fsdp.zero_stage == 3 else None) and fsdp.overlap_grad_reduce is None
    _, titan = _best(catalog, "torchtitan")
    assert (titan.overlap_grad_reduce, titan.overlap_param_gather, titan.prefetch) == (None, None, None)


def _one_stage(catalog, engine, zero):
    cluster, plan = _best(catalog, "hetplan")
    h100 = tuple(Replica("h100", 1, 4) for _ in range(16))
    return cluster, replace(plan, engine=engine, stages=(Stage(0, plan.model.layers, h100),), zero_stage=zero,
                            micro_batch=1, global_batch=64, interleave=1, tp_comm_overlap=False,
                            sequence_parallel=False, context_parallel=1, overlap_grad_reduce=None,
                            overlap_param_gather=None, prefetch=None)


def test_deepspeeds_overlap_comm_is_a_plan_switch_without_the_pipeline(catalog, monkeypatch):
    cluster, plan = _one_stage(catalog, "deepspeed", 2)
    on = replace(plan, overlap_grad_reduce=True, recompute=Recompute.FULL)
    assert ENGINES["deepspeed"].violations(on) == [] and _slower(cluster, on, overlap_grad_reduce=False)
    cfg = json.loads(export_result(on, cluster, "deepspeed").files["ds_config.json"])
    assert cfg["zero_optimization"]["overlap_comm"] is True
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (requirements-dev.txt installs it)")
    from deepspeed.runtime.config import DeepSpeedConfig
    import deepspeed.runtime.config as ds_config_module
    monkeypatch.setattr(ds_config_module.dist, "get_rank", lambda: 0, raising=False)
    monkeypatch.setattr(ds_config_module.dist, "get_world_size", lambda: 16, raising=False)
    assert DeepSpeedConfig(cfg).zero_config.overlap_comm is True      # DeepSpeed's own reading of the key
    # the pipeline engine reduces after the flush: no switch there
    _, piped = _best(catalog, "deepspeed")
    if piped.num_stages > 1:
        assert any("overlap_grad_reduce" in v for v in
                   ENGINES["deepspeed"].violations(replace(piped, overlap_grad_reduce=True)))


def test_fsdp_prefetch_is_a_plan_switch_costed_and_written(catalog):
    cluster, plan = _one_stage(catalog, "fsdp", 3)
    plan = replace(plan, prefetch=True, micro_batch=4,     # compute long enough to hide the collectives behind
                   recompute=Recompute.FULL)
    assert ENGINES["fsdp"].violations(plan) == [] and _slower(cluster, plan, prefetch=False)
    on = yaml.safe_load(export_result(plan, cluster, "fsdp").files["accelerate_fsdp.yaml"])["fsdp_config"]
    off = yaml.safe_load(export_result(replace(plan, prefetch=False), cluster,
                                       "fsdp").files["accelerate_fsdp.yaml"])["fsdp_config"]
    assert (on["fsdp_backward_prefetch"], on["fsdp_forward_prefetch"]) == ("BACKWARD_PRE", True)
    assert (off["fsdp_backward_prefetch"], off["fsdp_forward_prefetch"]) == ("NO_PREFETCH", False)
    assert plan_from_dict(plan_to_dict(replace(plan, prefetch=False)), catalog).prefetch is False
    assert any("prefetch" in v for v in ENGINES["torchtitan"].violations(replace(plan, engine="torchtitan",
                                                                                  prefetch=False)))
    with pytest.raises(InputError, match="prefetch"):
        replace(plan, prefetch="yes")


def test_fsdp_hybrid_shard_trades_memory_for_node_local_collectives_and_is_written(catalog):
    """HYBRID_SHARD (Plan.hybrid_shard = a node's GPUs): states sharded over 8 GPUs, not 16 (more memory), ZeRO-3's
    all-gathers and reduce-scatters on NVLink, each shard's gradients all-reduced across the 2 nodes."""
    cluster, plan = _one_stage(catalog, "fsdp", 3)
    plan = replace(plan, recompute=Recompute.FULL)     # micro-batch 1: ZeRO-3's collectives outlast its compute
    hybrid = replace(plan, hybrid_shard=8)
    assert ENGINES["fsdp"].violations(hybrid) == []
    full, hyb = evaluate(cluster, plan), evaluate(cluster, hybrid)
    mem = lambda est: max(r.memory.total_bytes for r in est.replicas)         # noqa: E731
    assert mem(hyb) > mem(full)                                       # states over 8 ranks, not 16
    assert hyb.iteration_time_s < full.iteration_time_s               # 400 Gb/s between nodes, NVLink within
    cfg = yaml.safe_load(export_result(hybrid, cluster, "fsdp").files["accelerate_fsdp.yaml"])["fsdp_config"]
    assert cfg["fsdp_sharding_strategy"] == "HYBRID_SHARD"
    zero2 = replace(hybrid, zero_stage=2)
    cfg2 = yaml.safe_load(export_result(zero2, cluster, "fsdp", force=True).files["accelerate_fsdp.yaml"])
    assert cfg2["fsdp_config"]["fsdp_sharding_strategy"] == "HYBRID_SHARD_ZERO2"
    assert plan_from_dict(plan_to_dict(hybrid), catalog) == hybrid
    with pytest.raises(InputError, match="hybrid_shard"):
        replace(plan, hybrid_shard=3)                                 # 16 replicas are not groups of 3
    assert any("hybrid sharding" in v for v in ENGINES["deepspeed"].violations(replace(hybrid, engine="deepspeed")))
    # a group that is not one host's GPUs: FSDP would build another; the export searches again
    assert export_result(replace(hybrid, hybrid_shard=4), cluster, "fsdp").closest_plan is not None


def test_torchtitan_hybrid_shard_is_hsdp_replicate_times_shard(catalog):
    """torchtitan's HSDP: data_parallel_shard_degree = the plan's group, data_parallel_replicate_degree the rest;
    its mesh (pp, dp_replicate, dp_shard, cp, tp) makes a shard group consecutive replicas, as the plan groups them."""
    from planner.export.torchtitan import parallelism
    cluster, plan = _one_stage(catalog, "torchtitan", 3)
    hybrid = replace(plan, recompute=Recompute.FULL, hybrid_shard=8)
    assert ENGINES["torchtitan"].violations(hybrid) == []
    out = parallelism(hybrid, "0.3")
    assert (out["data_parallel_shard_degree"], out["data_parallel_replicate_degree"]) == (8, 2)
    assert export_result(hybrid, cluster, "torchtitan").closest_plan is None
    # a group wider than a node runs on the data-parallel ring: no faster than full sharding over both nodes
    wide = replace(hybrid, stages=(replace(hybrid.stages[0], replicas=tuple(Replica("h100", 2, 8) for _ in range(8))),),
                   hybrid_shard=8, sequence_parallel=True)
    assert evaluate(cluster, wide).iteration_time_s >= evaluate(cluster, replace(wide, hybrid_shard=0)).iteration_time_s
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (requirements-dev.txt installs it)")
    from torchtitan.distributed.parallel_dims import ParallelDims
    dims = ParallelDims(dp_replicate=out["data_parallel_replicate_degree"], dp_shard=out["data_parallel_shard_degree"],
                        cp=1, tp=1, pp=1, ep=1, world_size=hybrid.num_gpus)       # its own size checks run
    assert dims.dp_replicate == 2 and dims.dp_shard == 8 and dims.fsdp_enabled


def _slow_nodes(catalog):
    """4 nodes of 8 A100-40GB joined at 25 Gb/s: ZeRO-3 over all 32 GPUs waits on the network."""
    return cluster_from_dict({"name": "slow", "pools": [{"name": "a100", "gpu": "a100-40gb-sxm", "nodes": 4,
                                                        "gpus_per_node": 8, "inter_node_gbps": 25}]}, catalog)


@pytest.mark.parametrize("engine,batch", [("fsdp", 64), ("torchtitan", 256)])
def test_the_search_chooses_hybrid_shard_across_slow_nodes_and_the_export_writes_it(catalog, engine, batch):
    """The search tries hybrid_shard (a node's replicas) beside full sharding: across 25 Gb/s nodes it wins, on
    all 32 GPUs, and the engine's export writes it (HYBRID_SHARD; torchtitan's dp_shard x dp_replicate)."""
    cluster = _slow_nodes(catalog)
    job = Job(catalog.model("llama-3-8b"), batch, 4096, engine=engine)
    best = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=10)).plans[0].plan
    assert best.hybrid_shard == 8 and best.zero_stage >= 2 and best.num_gpus == 32
    full = evaluate(cluster, replace(best, hybrid_shard=0))
    assert evaluate(cluster, best).iteration_time_s < full.iteration_time_s
    exported = export_result(best, cluster, engine)
    assert exported.closest_plan is None
    if engine == "fsdp":
        cfg = yaml.safe_load(exported.files["accelerate_fsdp.yaml"])["fsdp_config"]
        assert cfg["fsdp_sharding_strategy"] == {3: "HYBRID_SHARD", 2: "HYBRID_SHARD_ZERO2"}[best.zero_stage]
    else:
        toml = exported.files["torchtitan.toml"]
        assert "data_parallel_shard_degree = 8" in toml and "data_parallel_replicate_degree = 4" in toml
