"""Expert parallelism (plan `expert_parallel`): a mixture-of-experts model's routed experts sharded
over ep of a stage's replicas, their gradients reduced over the replicas / ep that hold the same
experts, tokens dispatched and combined by all-to-alls; the plan format, the engines, and the
search's bounds with it."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from catalog.formats import plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.experts import MOE_LOAD_IMBALANCE, dispatch_bytes
from planner.flops import expert_layer_params, expert_params, param_shards
from planner.engines import ENGINES
from planner.export import export_result
from planner.search import SearchOptions, search
from planner.search.search import expert_settings
from planner.types import InputError, Job, Plan, Precision, Recompute, Replica, Stage
from tests.bounds import check_bounds_below_evaluate
from tests.clusters import h100_nodes, random_cluster


def _plan(catalog, ep: int, replicas: int = 4, model: str = "mixtral-8x7b", tp: int = 4) -> Plan:
    m = catalog.model(model)
    reps = tuple(Replica("h100", tp, 8) for _ in range(replicas))
    return Plan(m, 8 * replicas, 4096, 1, Precision.BF16, (Stage(0, m.layers, reps),), zero_stage=1,
                recompute=Recompute.FULL, sequence_parallel=True, expert_parallel=ep, engine="megatron")


def test_experts_are_split_from_the_dense_weights_and_sharded_over_ep(catalog):
    model = catalog.model("mixtral-8x7b")
    per_layer = expert_layer_params(model)
    assert per_layer == model.experts * expert_params(model)         # every Mixtral layer is MoE
    dense, experts = param_shards(1e9, 2, model, 4, 8, expert_parallel=4)
    assert experts == (2 * per_layer / 16, 2) and dense == ((1e9 - 2 * per_layer) / 4, 8)
    assert param_shards(1e9, 2, model, 4, 8) == ((1e9 / 4, 8),)


def test_expert_parallelism_cuts_weight_memory_and_gradient_traffic_and_pays_in_all_to_alls(catalog):
    cluster = h100_nodes(catalog)
    one, four = evaluate(cluster, _plan(catalog, 1)), evaluate(cluster, _plan(catalog, 4))
    m1, m4 = one.replicas[0].memory, four.replicas[0].memory
    model = catalog.model("mixtral-8x7b")
    saved = model.layers * expert_layer_params(model) * (1 - 1 / 4) / 4 * 2        # 16-bit weights, tp 4
    assert m1.weights_bytes - m4.weights_bytes == pytest.approx(saved, rel=1e-6)
    assert four.breakdown["data_parallel_comm"].total_s < one.breakdown["data_parallel_comm"].total_s
    assert four.breakdown["expert_parallel_comm"].total_s > 0 == one.breakdown["expert_parallel_comm"].total_s
    assert any("expert parallel 4" in n for n in four.notes)


def test_dispatch_sends_each_tokens_top_k_copies(catalog):
    model = catalog.model("mixtral-8x7b")
    assert dispatch_bytes(model, 4096, 1, 4) == 2 * 4096 / 4 * model.top_k * model.hidden
    assert MOE_LOAD_IMBALANCE >= 1


def test_plan_files_carry_expert_parallel_and_refuse_what_cannot_shard(catalog):
    plan = _plan(catalog, 2)
    data = plan_to_dict(plan)
    assert data["expert_parallel"] == 2 and plan_from_dict(data, catalog) == plan
    with pytest.raises(InputError, match="divisor of 8"):
        plan_from_dict({**data, "expert_parallel": 3}, catalog)
    with pytest.raises(InputError, match="groups of expert_parallel"):
        plan_from_dict({**plan_to_dict(_plan(catalog, 1, replicas=3)), "expert_parallel": 2}, catalog)
    with pytest.raises(InputError, match="no experts"):
        plan_from_dict({**data, "model": "llama-3-8b"}, catalog)
    with pytest.raises(InputError, match="no expert parallelism"):
        plan_from_dict({**data, "engine": "deepspeed"}, catalog)


def test_search_tries_expert_parallel_degrees_for_moe_models(catalog):
    cluster = h100_nodes(catalog)
    job = Job(catalog.model("mixtral-8x7b"), 32, 4096, engine="megatron")
    assert expert_settings(cluster, job) == [1, 2, 4, 8]
    assert expert_settings(cluster, replace(job, engine="hetplan")) == [1]
    assert expert_settings(cluster, replace(job, model=catalog.model("llama-3-8b"))) == [1]
    result = search(cluster, job, baselines=False)
    assert any("expert parallelism (1, 2, 4, 8) searched" in n for n in result.notes)
    fixed = search(cluster, replace(job, expert_parallel=2), baselines=False, expert_parallel="fixed")
    assert fixed.plans[0].plan.expert_parallel == 2
    assert all(len(s.replicas) % 2 == 0 for s in fixed.plans[0].plan.stages)
    assert result.plans[0].estimate.tokens_per_s >= fixed.plans[0].estimate.tokens_per_s * (1 - 1e-9)
    with pytest.raises(InputError, match="no expert parallelism"):
        search(cluster, replace(job, engine="hetplan", expert_parallel=2), baselines=False)


@pytest.mark.parametrize("ep", [2, 4])
@pytest.mark.parametrize("seed", [1, 3, 5])
def test_bounds_and_floors_below_evaluate_with_expert_parallelism(catalog, ep, seed):
    rng = random.Random(seed)
    cluster = random_cluster(rng, catalog, ["h100-sxm", "a100-80gb-sxm", "h200-sxm"], nodes=(1, 2, 4),
                             gpus_per_node=(4, 8), between_pools_gbps=100)
    job = Job(catalog.model("mixtral-8x7b"), rng.choice((16, 32)), 2048, engine="megatron", expert_parallel=ep)

    def check_plan(plan, cand):
        assert plan.expert_parallel == ep

    if not check_bounds_below_evaluate(cluster, job, check_plan):
        pytest.skip("nothing fits this random case at this degree")


def test_torchtitan_runs_expert_parallelism_on_the_mesh_it_builds_tp_1_only(catalog):
    """torchtitan 0.3.0 forms ep groups from dp_shard x cp x tp with ep innermost and no expert tensor
    parallelism (parallel_dims.py lines 279, 336-340): with tp > 1 its experts would sit whole on the tp ranks,
    not split over tp with ep over replicas as planned. The profile refuses that plan and searches tp 1."""
    plan = replace(_plan(catalog, 2, model="qwen3-30b-a3b"), engine="torchtitan", zero_stage=3)
    problems = ENGINES["torchtitan"].violations(plan)
    assert any("expert tensor parallelism" in v and "tp 1" in v for v in problems)
    assert not any("expert" in v for v in ENGINES["torchtitan"].violations(replace(
        plan, stages=(Stage(0, plan.model.layers, tuple(Replica("h100", 1, 8) for _ in range(4))),),
        sequence_parallel=False)))
    cluster = h100_nodes(catalog)
    job = Job(catalog.model("qwen3-30b-a3b"), 32, 4096, engine="torchtitan", expert_parallel=2)
    found = search(cluster, job, baselines=False, expert_parallel="fixed",
                   options=SearchOptions(time_limit_s=3)).plans
    assert found and all(r.tp == 1 for sp in found for st in sp.plan.stages for r in st.replicas)
    assert all(sp.plan.expert_parallel == 2 and sp.plan.context_parallel == 1 for sp in found)
    exported = export_result(found[0].plan, cluster, "torchtitan")
    assert exported.closest_plan is None and not any("whole experts" in w for w in exported.warnings)


def test_deepseek_v3_is_statable_under_megatron_with_expert_parallelism(catalog):
    """DeepSeek-V3 (catalog: 61 layers, 3 dense, 256 routed + 1 shared expert, top-8, MLA) as a Megatron plan
    with ep 8 over 8 replicas of tp 8: evaluated, and exported with its MoE, MLA and EP arguments."""
    from catalog import cluster_from_dict
    m = catalog.model("deepseek-v3")
    assert (m.layers, m.experts, m.top_k, m.dense_layers, m.is_mla) == (61, 256, 8, 3, True)
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 64,
                                                         "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    reps = tuple(Replica("h100", 8, 8) for _ in range(8))
    bounds = [0, 8, 16, 24, 32, 40, 48, 55, 61]
    plan = Plan(m, 64, 4096, 1, Precision.BF16, tuple(Stage(a, b, reps) for a, b in zip(bounds, bounds[1:])),
                zero_stage=1, recompute=Recompute.FULL, sequence_parallel=True, expert_parallel=8, engine="megatron")
    assert ENGINES["megatron"].violations(plan) == []
    est = evaluate(cluster, plan)
    assert est.tokens_per_s > 0 and est.breakdown["expert_parallel_comm"].total_s > 0
    args = export_result(plan, cluster, "megatron", force=True).files["megatron_args.sh"]
    for flag in ("--num-experts 256", "--moe-router-topk 8", "--expert-model-parallel-size 8",
                 "--expert-tensor-parallel-size 8", "--multi-latent-attention", "--moe-layer-freq"):
        assert flag in args, flag
    assert plan_from_dict(plan_to_dict(plan), catalog) == plan


def test_expert_tensor_parallelism_below_tp_lets_ep_span_tp_ranks_not_just_replicas(catalog):
    """Megatron's --expert-tensor-parallel-size 1 with tp 8: an expert group of ep GPUs takes the tp ranks first,
    so DeepSeek-V3's ep 64 runs on 8 replicas of tp 8 (ep does not divide the 8 replicas), each GPU holding 4
    whole experts; the all-to-all of an ep 8 group stays on the node's NVLink."""
    from catalog import cluster_from_dict
    m = catalog.model("deepseek-v3")
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 64,
                                                         "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    reps = tuple(Replica("h100", 8, 8) for _ in range(8))
    bounds = [0, 8, 16, 24, 32, 40, 48, 55, 61]
    base = Plan(m, 64, 4096, 1, Precision.BF16, tuple(Stage(a, b, reps) for a, b in zip(bounds, bounds[1:])),
                zero_stage=1, recompute=Recompute.FULL, sequence_parallel=True, expert_parallel=8, engine="megatron")
    with pytest.raises(InputError, match="groups of expert_parallel 64"):
        replace(base, expert_parallel=64)
    wide = replace(base, expert_parallel=64, expert_tensor_parallel=1)
    assert ENGINES["megatron"].violations(wide) == []
    assert any("expert_tensor_parallel" in v for v in ENGINES["torchtitan"].violations(replace(wide, engine="torchtitan")))
    # memory: experts / (etp x ep) per GPU = 1/64 of them either way; the grad-reduce group 8 x 8 / 64 = 1
    experts = param_shards(1.0e9, 8, m, 8, 8, 64, 1)[1]
    assert experts == (pytest.approx(8 * expert_layer_params(m) / 64), 1)
    assert param_shards(1.0e9, 8, m, 8, 8, 8)[1] == (pytest.approx(8 * expert_layer_params(m) / 64), 1)
    # an ep 8 group within a replica's tp ranks: node links, not the 400 Gb/s data-parallel ring
    inside = replace(base, expert_tensor_parallel=1)
    a2a = lambda plan: evaluate(cluster, plan).breakdown["expert_parallel_comm"].total_s   # noqa: E731
    assert a2a(inside) < a2a(base)
    args = export_result(wide, cluster, "megatron", force=True).files["megatron_args.sh"]
    assert "--expert-model-parallel-size 64" in args and "--expert-tensor-parallel-size 1" in args
    assert plan_from_dict(plan_to_dict(wide), catalog) == wide


def test_expert_tp_1_drops_the_moe_layers_tp_collectives_and_widens_their_gemms(catalog):
    """Megatron-Core's alltoall dispatcher gathers tokens and reduce-scatters them over the expert tp group only
    when it is wider than one GPU (token_dispatcher.py lines 741-752, 824-833): at etp 1 a MoE layer keeps the
    attention's tp collectives and drops the MLP's; a dense model's passes do not change."""
    from planner.compute import StagePass, stage_pass_times
    gpu = catalog.gpu("h100-sxm")
    def passes(model, etp):
        return stage_pass_times(StagePass(model=catalog.model(model), gpu=gpu, num_layers=4, has_head=False,
                                          seq_len=4096, micro_batch=1, tp=8, sequence_parallel=True,
                                          recompute=Recompute.NONE, flash_attention=True,
                                          link_bw=gpu.link_bw_bytes_per_s, expert_parallel=8, expert_tp=etp))
    moe_tp, one = passes("mixtral-8x7b", 0), passes("mixtral-8x7b", 1)
    assert one.tp_comm_s == pytest.approx(moe_tp.tp_comm_s / 2)       # every layer MoE: the MLP's half goes
    assert passes("llama-3-8b", 1) == passes("llama-3-8b", 0)


def test_the_search_chooses_expert_tp_1_where_ep_spans_tp_ranks_and_the_export_writes_it(catalog):
    """Mixtral 8x22B on 4 x 8 H100 at 100 Gb/s: with etp 1 an ep 8 group is 2 replicas x tp 4 (ep does not divide
    the 2 replicas of a stage), which the search finds; Megatron-LM's arguments carry it."""
    from catalog import cluster_from_dict
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 4,
                                                         "gpus_per_node": 8, "inter_node_gbps": 100}]}, catalog)
    job = Job(catalog.model("mixtral-8x22b"), 128, 4096, engine="megatron")
    plans = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=20)).plans
    best = plans[0].plan
    assert best.expert_tensor_parallel == 1 and best.expert_parallel > len(best.stages[0].replicas)
    assert ENGINES["megatron"].violations(best) == []
    args = export_result(best, cluster, "megatron").files["megatron_args.sh"]
    assert "--expert-tensor-parallel-size 1" in args and f"--expert-model-parallel-size {best.expert_parallel}" in args
