"""Job kinds (pretraining, full fine-tuning, LoRA, QLoRA) and CPU offload (planner.training,
planner.offload): memory against published figures, time against the cost model's own terms, the
plan format, the engines that run each, and the search's bounds and completeness with them."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from catalog import cluster_from_dict, load_catalog
from catalog.formats import plan_from_dict, plan_to_dict
from planner.cost import evaluate
from planner.flops import model_params
from planner.search import search
from planner.training import NF4_BYTES_PER_PARAM, adapter_params, model_states, trainable_share
from planner.types import (InfeasibleError, InputError, Job, JobKind, Model, Offload, Plan, Precision, Recompute,
                           Replica, Stage, Training)
from tests.test_engines import _candidates
from tests.test_one_cost_model import PIPELINE_TOLERANCE, _random_case, assert_holds_against_exhaustive

LORA = Training(JobKind.LORA, 16)
QLORA = Training(JobKind.QLORA, 16)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _one_gpu(catalog, gpu: str, host_gib: float | None = None):
    pool = {"name": "g", "gpu": gpu, "nodes": 1, "gpus_per_node": 1}
    if host_gib:
        pool["host_memory_gib"] = host_gib
    return cluster_from_dict({"name": "one", "pools": [pool]}, catalog)


def _single(model: Model, training: Training, seq_len: int = 512, **kw) -> Plan:
    """One GPU holding the whole model: micro-batch 1, full recomputation."""
    knobs = dict(recompute=Recompute.FULL, zero_stage=0)
    knobs.update(kw)
    return Plan(model, 1, seq_len, 1, Precision.BF16, (Stage(0, model.layers, (Replica("g", 1, 1),)),),
                training=training, **knobs)


# LLaMA 65B (Touvron et al. 2023, table 2: 80 layers, hidden 8192, 64 heads; MLP 22016, vocabulary 32000)
LLAMA_65B = Model("llama-65b", "LLaMA 65B", layers=80, hidden=8192, heads=64, kv_heads=64, ffn=22016, vocab=32000)


def test_qlora_fits_65b_on_one_48gb_gpu_where_full_finetuning_needs_over_780gb(catalog):
    """Dettmers et al. 2023 (QLoRA), abstract and section 1: QLoRA 'reduces memory usage enough to
    finetune a 65B parameter model on a single 48GB GPU'; 'regular 16-bit finetuning of a LLaMA 65B
    parameter model requires more than 780 GB of GPU memory'. Both with a short sequence and full
    recomputation, as the paper trains with gradient checkpointing."""
    cluster = _one_gpu(catalog, "a100-80gb-sxm")
    full = evaluate(cluster, _single(LLAMA_65B, Training(JobKind.FULL_FINETUNE))).replicas[0].memory
    qlora = evaluate(cluster, _single(LLAMA_65B, QLORA)).replicas[0].memory
    assert full.total_bytes > 780e9
    assert qlora.total_bytes < 48e9
    # the 4-bit base alone: 65.3 B parameters x 4.127 bits
    assert qlora.weights_bytes == pytest.approx(model_params(LLAMA_65B) * NF4_BYTES_PER_PARAM, rel=0.02)


def test_lora_memory_on_an_8b_model_is_far_below_full_finetuning_and_qlora_below_lora(catalog):
    """Llama 3 8B on one GPU: full fine-tuning keeps 16 + 2 bytes of mixed-precision Adam state per
    parameter (144 GB: Rajbhandari et al. 2020, section 3.1: 16 bytes plus the 16-bit gradient's
    fp32 copy), LoRA the 16-bit base (16 GB, Hu et al. 2021: 'no need to store the optimizer states
    for the frozen parameters'), QLoRA the 4-bit base (4.1 GB)."""
    model = catalog.model("llama-3-8b")
    cluster = _one_gpu(catalog, "h200-sxm" if "h200-sxm" in catalog.gpus else "h100-sxm")
    mem = {kind: evaluate(cluster, _single(model, Training(kind, 16))).replicas[0].memory
           for kind in (JobKind.FULL_FINETUNE, JobKind.LORA, JobKind.QLORA)}
    full, lora, qlora = (mem[k].total_bytes for k in (JobKind.FULL_FINETUNE, JobKind.LORA, JobKind.QLORA))
    assert full > 5 * lora and lora > 2.5 * qlora
    states = lambda m: m.weights_bytes + m.gradients_bytes + m.optimizer_bytes     # noqa: E731
    assert states(mem[JobKind.FULL_FINETUNE]) == pytest.approx(18 * model_params(model), rel=0.01)
    adapters = adapter_params(model, 16)         # each with its full 18 bytes of mixed-precision Adam state
    assert states(mem[JobKind.LORA]) == pytest.approx(2 * model_params(model) + 18 * adapters, rel=1e-6)
    assert states(mem[JobKind.QLORA]) == pytest.approx(NF4_BYTES_PER_PARAM * model_params(model) + 18 * adapters, rel=1e-6)


def test_adapters_are_rank_times_the_sum_of_each_projections_sides(catalog):
    """Llama 2 7B, rank 8 on q, k, v, o, gate, up, down: 8 x (4 x 2 x 4096 + 3 x (4096 + 11008)) x 32
    = 19,988,480 (the figure PEFT prints for this configuration)."""
    model = catalog.model("llama-2-7b")
    assert adapter_params(model, 8) == 8 * (4 * 2 * 4096 + 3 * (4096 + 11008)) * 32 == 19_988_480
    assert 0 < trainable_share(model, LORA) < 0.01


def test_lora_iteration_is_faster_than_full_finetuning_and_qlora_pays_for_dequantisation(catalog):
    model = catalog.model("llama-3-8b")
    cluster = _one_gpu(catalog, "h100-sxm")
    est = {kind: evaluate(cluster, _single(model, Training(kind, 16), seq_len=4096, recompute=Recompute.NONE))
           for kind in JobKind}
    passes = {kind: e.replicas[0].forward_s + e.replicas[0].backward_s for kind, e in est.items()}
    assert est[JobKind.FULL_FINETUNE].iteration_time_s == est[JobKind.PRETRAIN].iteration_time_s
    # no weight gradients for the base: the backward's projection GEMMs halve (about 1/3 less work),
    # the adapters' thin GEMMs give a little of it back
    assert 0.6 < passes[JobKind.LORA] / passes[JobKind.FULL_FINETUNE] < 0.85
    assert passes[JobKind.QLORA] > passes[JobKind.LORA]
    # and the optimizer step runs over the adapters alone
    assert est[JobKind.LORA].breakdown["optimizer_step"].total_s < 0.01 * est[JobKind.PRETRAIN].breakdown[
        "optimizer_step"].total_s


def test_offload_moves_optimizer_states_to_the_host_and_costs_time(catalog):
    model = catalog.model("llama-3-8b")
    cluster = _one_gpu(catalog, "h100-sxm", host_gib=512)
    plan = _single(model, Training(), zero_stage=1)
    base = evaluate(cluster, plan)
    off = evaluate(cluster, replace(plan, offload=Offload.OPTIMIZER))
    m0, m1 = base.replicas[0].memory, off.replicas[0].memory
    assert m1.optimizer_bytes == 0 and m1.host_bytes == pytest.approx(16 * model_params(model), rel=0.01)
    assert m1.total_bytes < m0.total_bytes - 12 * model_params(model) * 0.99
    assert off.iteration_time_s > base.iteration_time_s
    params = replace(plan, zero_stage=3, offload=Offload.OPTIMIZER_PARAMS)
    assert evaluate(cluster, params).replicas[0].memory.weights_bytes == 0
    small_host = evaluate(_one_gpu(catalog, "h100-sxm", host_gib=64), replace(plan, offload=Offload.OPTIMIZER))
    assert not small_host.fits and "CPU memory" in small_host.oom and "host_memory_gib" in small_host.oom


def test_plan_files_carry_job_and_offload(catalog):
    model = catalog.model("llama-2-7b")
    for plan in (_single(model, LORA), _single(model, Training(JobKind.QLORA, 64)),
                 replace(_single(model, Training(), zero_stage=1), offload=Offload.OPTIMIZER, engine="deepspeed",
                         recompute=Recompute.FULL)):
        data = plan_to_dict(plan)
        assert plan_from_dict(data, catalog) == plan
    pretrain = plan_to_dict(_single(model, Training()))
    assert "job" not in pretrain and "offload" not in pretrain        # old plans stay as they were
    with pytest.raises(InputError, match=r"job\.kind"):
        plan_from_dict({**pretrain, "job": {"kind": "dpo"}}, catalog)
    with pytest.raises(InputError, match="lora_rank"):
        plan_from_dict({**pretrain, "job": {"kind": "lora", "lora_rank": 0}}, catalog)
    with pytest.raises(InputError, match="ZeRO stage 1"):
        plan_from_dict({**pretrain, "offload": "optimizer", "zero_stage": 0, "engine": "deepspeed"}, catalog)
    with pytest.raises(InputError, match="megatron.*does not run qlora|Megatron-LM does not run qlora"):
        plan_from_dict({**pretrain, "job": {"kind": "qlora"}, "engine": "megatron"}, catalog)


def test_engines_run_the_job_kinds_and_offloads_they_have(catalog):
    from planner.engines import get
    model = catalog.model("llama-2-7b")
    lora = _single(model, LORA, recompute=Recompute.NONE)
    assert not get("torchtitan").violations(replace(lora, engine="torchtitan"))
    assert any("lora" in v for v in get("megatron").violations(replace(lora, engine="megatron")))
    assert any("recomputation" in v for v in get("flagscale").violations(replace(lora, recompute=Recompute.FULL)))
    off = replace(_single(model, Training(), zero_stage=1), offload=Offload.OPTIMIZER)
    assert not get("deepspeed").violations(off) and not get("megatron").violations(off)
    assert any("offload" in v for v in get("torchtitan").violations(off))
    assert any("offload" in v for v in get("hetplan").violations(off))


def test_search_offloads_where_gpu_memory_is_the_limit(catalog):
    """Full fine-tuning of Llama 2 7B on one node of four 24 GB GPUs: 113 GiB of states do not fit
    in 96 GiB without offload; DeepSpeed's ZeRO-Offload fits them, hetplan's runtime (no offload)
    says so and points at the engines that offload."""
    cluster = cluster_from_dict({"name": "lab", "pools": [{"name": "rtx4090", "gpu": "rtx-4090", "nodes": 1,
                                                           "gpus_per_node": 4}]}, catalog)
    job = Job(catalog.model("llama-2-7b"), 32, 2048, training=Training(JobKind.FULL_FINETUNE))
    with pytest.raises(InfeasibleError, match="offload"):
        search(cluster, job, baselines=False)
    result = search(cluster, replace(job, engine="deepspeed"), baselines=False)
    best = result.plans[0]
    assert best.plan.offload == Offload.OPTIMIZER and best.estimate.fits
    assert any("offload searched" in n for n in result.notes)
    assert best.estimate.replicas[0].memory.host_bytes > 0


def test_search_plans_lora_where_full_finetuning_cannot_fit(catalog):
    cluster = cluster_from_dict({"name": "lab", "pools": [{"name": "rtx4090", "gpu": "rtx-4090", "nodes": 1,
                                                           "gpus_per_node": 2}]}, catalog)
    job = Job(catalog.model("llama-3-8b"), 16, 2048, training=LORA)
    best = search(cluster, job, baselines=False).plans[0]
    assert best.plan.training == LORA and best.estimate.fits
    with pytest.raises(InfeasibleError):
        search(cluster, replace(job, training=Training(JobKind.FULL_FINETUNE)), baselines=False)
    with pytest.raises(InputError, match="job.kind"):
        search(cluster, replace(job, engine="megatron"), baselines=False)


@pytest.mark.parametrize("training,offload,engine", [(LORA, Offload.NONE, "hetplan"), (QLORA, Offload.NONE, "hetplan"),
                                                     (Training(), Offload.OPTIMIZER, "deepspeed"),
                                                     (Training(), Offload.OPTIMIZER, "megatron"),
                                                     (Training(), Offload.OPTIMIZER_PARAMS, "torchtitan")])
@pytest.mark.parametrize("seed", [3, 19])
def test_bounds_and_floors_below_evaluate_for_each_job_kind_and_offload(catalog, training, offload, engine, seed):
    """The search prunes with the same model states and step times evaluate reports."""
    cluster, job = _random_case(random.Random(seed), catalog)
    job = replace(job, training=training, offload=offload, engine=engine)
    checked = 0
    for cand, screen, pipeline in _candidates(cluster, job):
        est = evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s
        assert screen <= est * (1 + 1e-9) and cand.floor_s <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        assert pipeline <= est * (1 + PIPELINE_TOLERANCE), (cand.layout, cand.knobs)
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("training", [LORA, QLORA])
@pytest.mark.parametrize("seed", [2, 5])
def test_complete_lora_answers_hold_against_exhaustive_search(catalog, training, seed):
    cluster, job = _random_case(random.Random(seed), catalog, most_gpus=10)
    job = replace(job, training=training)
    try:
        ours = search(cluster, job, baselines=False)
    except InfeasibleError:
        pytest.skip("nothing fits this random case")
    assert_holds_against_exhaustive(cluster, job, ours)


def test_model_states_per_parameter():
    full = model_states(Precision.BF16)
    assert (full.weight_bytes, full.grad_bytes, full.optimizer_bytes, full.host_bytes) == (2, 4, 12, 0)
    off = model_states(Precision.BF16, offload=Offload.OPTIMIZER)
    assert (off.weight_bytes, off.grad_bytes, off.optimizer_bytes, off.host_bytes) == (2, 2, 0, 16)
    megatron = model_states(Precision.BF16, offload=Offload.OPTIMIZER, offload_grad_bytes=4)
    assert megatron.grad_bytes == 4
    both = model_states(Precision.BF16, offload=Offload.OPTIMIZER_PARAMS)
    assert both.weight_bytes == 0 and both.host_bytes == 18
