"""GPU speed per operation class from measured sources (issue 19, item 3): planner/compute.py.

Anchored to the reference measurements they come from: measured_matmul.csv (best measured bf16 and
fp8 matmul) and attention_kernels.csv (FlashAttention-2 forward + backward, causal), and to the
plan's `attention` field (flash or unfused).
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from catalog import load_cluster_file
from catalog.formats import plan_from_dict, plan_to_dict
from planner.compute import (UNMEASURED_FP8_OVER_BF16, flash_attention_flops_per_s, layer_forward_parts,
                             matmul_efficiency, speed_notes, stage_pass_times, StagePass)
from planner.cost import evaluate
from planner.engines import ENGINES
from planner.types import Attention, Precision, Recompute
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("gpu_id,head_dim,seq_len,tflops", [
    ("a100-80gb-sxm", 128, 4096, 173), ("a100-80gb-sxm", 64, 2048, 140),     # attention_kernels.csv, causal
    ("h100-sxm", 128, 4096, 294), ("h100-sxm", 64, 16384, 284)])
def test_flash_attention_at_the_measured_kernel_rate(catalog, gpu_id, head_dim, seq_len, tflops):
    # rel 1e-3: the catalog's efficiency is the measured matmul rate rounded to three figures
    assert flash_attention_flops_per_s(catalog.gpus[gpu_id], seq_len, head_dim) == pytest.approx(tflops * 1e12, rel=1e-3)


def test_flash_attention_between_and_beyond_the_measured_points(catalog):
    a100 = catalog.gpus["a100-80gb-sxm"]
    # log2 interpolation between 2k (155) and 4k (173) at head dim 128; held beyond 16k and below 512
    assert flash_attention_flops_per_s(a100, 2048 * 2 ** 0.5, 128) == pytest.approx(164e12, rel=1e-3)
    assert flash_attention_flops_per_s(a100, 131072, 128) == pytest.approx(189e12, rel=1e-3)
    assert flash_attention_flops_per_s(a100, 128, 64) == pytest.approx(88e12, rel=1e-3)
    assert flash_attention_flops_per_s(a100, 4096, 96) == pytest.approx((156 + 173) / 2 * 1e12, rel=1e-3)


def test_other_gpus_take_the_measured_fraction_of_their_own_matmul_rate(catalog):
    # one rule for all: the named GPU's kernel rate / its measured matmul rate x this GPU's measured matmul rate
    h100, h200, b200, v100 = (catalog.gpus[g] for g in ("h100-sxm", "h200-sxm", "b200", "v100-32gb-sxm"))
    fraction_h100 = 294 / 794.5
    assert flash_attention_flops_per_s(h200, 4096, 128) == pytest.approx(294e12, rel=1e-3)   # same matmul rate
    assert flash_attention_flops_per_s(b200, 4096, 128) == pytest.approx(
        fraction_h100 * b200.efficiency * b200.peak_flops)
    assert v100.attention_kernels_of == ""          # no measurement: A100's fractions stand in
    assert flash_attention_flops_per_s(v100, 4096, 128) == pytest.approx(
        173 / 271.2 * v100.efficiency * v100.peak_flops)
    assert h100.attention_kernels_of == "h100-sxm"


def test_fp8_gemms_at_the_measured_fp8_rate(catalog):
    h100, h100_pcie = catalog.gpus["h100-sxm"], catalog.gpus["h100-pcie"]
    assert matmul_efficiency(h100, fp8=True) == 0.709 and matmul_efficiency(h100) == 0.803
    assert matmul_efficiency(h100_pcie, fp8=True) == pytest.approx(h100_pcie.efficiency * UNMEASURED_FP8_OVER_BF16)
    m = catalog.model("llama-2-7b")
    bf16 = layer_forward_parts(m, h100, 4096, 1, 1, False, True, Precision.BF16)[0]
    fp8 = layer_forward_parts(m, h100, 4096, 1, 1, False, True, Precision.FP8)[0]
    # FP8 peak (1979) twice bf16's (989), reached at 0.709 against 0.803: a 1.77x speed-up, not 2x
    assert bf16 / fp8 == pytest.approx(1979 * 0.709 / (989 * 0.803), rel=1e-6)


def test_flash_backward_is_two_and_a_half_forwards(catalog):
    # FlashAttention's benchmark counts its backward as 2.5x its forward (it recomputes the scores)
    m, a100 = catalog.model("llama-2-7b"), catalog.gpus["a100-80gb-sxm"]
    proj, attn, elem = layer_forward_parts(m, a100, 4096, 1, 1, False, True)
    one_layer = stage_pass_times(StagePass(model=m, gpu=a100, num_layers=1, has_head=False, seq_len=4096, micro_batch=1,
                                            tp=1, sequence_parallel=False, recompute=Recompute.NONE,
                                            flash_attention=True, link_bw=1e12))
    assert one_layer.backward_s == pytest.approx(2 * proj + 2.5 * attn + 2 * elem)
    proj_u, attn_u, elem_u = layer_forward_parts(m, a100, 4096, 1, 1, False, False)
    unfused = stage_pass_times(StagePass(model=m, gpu=a100, num_layers=1, has_head=False, seq_len=4096, micro_batch=1,
                                         tp=1, sequence_parallel=False, recompute=Recompute.NONE,
                                         flash_attention=False, link_bw=1e12))
    assert unfused.backward_s == pytest.approx(2 * (proj_u + attn_u + elem_u))


@pytest.fixture(scope="module")
def single_node(catalog):
    return load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)


def test_unfused_attention_is_a_plan_field_that_costs_time_and_memory(catalog, single_node):
    plan_file = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    flash = plan_from_dict(plan_file, catalog)
    assert flash.attention == Attention.FLASH and "attention" not in plan_to_dict(flash)
    unfused = plan_from_dict({**plan_file, "attention": "unfused", "recompute": "none"}, catalog)
    assert unfused.attention == Attention.UNFUSED and plan_to_dict(unfused)["attention"] == "unfused"
    assert plan_from_dict(plan_to_dict(unfused), catalog) == unfused
    flash = replace(unfused, attention=Attention.FLASH)
    a, b = evaluate(single_node, flash), evaluate(single_node, unfused)
    assert b.iteration_time_s > a.iteration_time_s
    assert b.peak_memory_bytes > a.peak_memory_bytes        # Korthikanti eq. 2's 5as/h: the s^2 scores kept


def test_bad_attention_value_names_the_field(catalog):
    from planner.types import InputError
    plan_file = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    with pytest.raises(InputError, match="attention"):
        plan_from_dict({**plan_file, "attention": "xformers"}, catalog)


def test_tf32_as_each_engine_is_usually_launched():
    # Megatron-LM: the NGC PyTorch container's TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; the others PyTorch's default
    assert {name: e.execution.tf32(None) for name, e in ENGINES.items()
            if name in ("megatron", "torchtitan", "deepspeed", "flagscale", "hetplan")} == {
        "megatron": True, "torchtitan": False, "deepspeed": False, "flagscale": False, "hetplan": False}
    assert ENGINES["megatron"].execution.tf32(False) is False            # the plan's tf32 wins
    assert "tf32 default (fp32 plans)" in ENGINES["megatron"].sources


def test_plans_say_which_speeds_no_measurement_backs(catalog):
    h100, v100, gaudi3 = catalog.gpus["h100-sxm"], catalog.gpus["v100-32gb-sxm"], catalog.gpus["gaudi3"]
    assert speed_notes([h100], Precision.BF16, False, True) == ()
    assert speed_notes([h100], Precision.FP8, False, True) == ()        # fp8 measured too
    v100_note, = speed_notes([v100], Precision.FP16, False, True)
    assert "matmul rate" in v100_note and "attention kernels" in v100_note
    gaudi_note, = speed_notes([gaudi3], Precision.BF16, False, True)
    assert "matmul rate" not in gaudi_note and "attention kernels" in gaudi_note   # matmul measured since the refresh
    fp32 = speed_notes([h100], Precision.FP32, True, True)
    assert any("TF32" in n for n in fp32)


def test_lora_adds_its_rank_r_gemms_and_the_output_scale_and_add(catalog):
    # PEFT: result + lora_B(lora_A(dropout(x))) * scaling -> 5 passes forward, 2 backward over every adapted output
    from planner.compute import LORA_OUTPUT_PASSES_BACKWARD, LORA_OUTPUT_PASSES_FORWARD, adapter_output_elements_per_token, adapter_pass_s
    from planner.types import JobKind, Training
    m, a100 = catalog.model("llama-2-7b"), catalog.gpus["a100-80gb-sxm"]
    h, f = m.hidden, m.ffn
    assert adapter_output_elements_per_token(m) == 4 * h + 2 * f + h      # q, k, v, o (no GQA); gate, up; down
    lora = Training(JobKind.LORA, 16)
    with_outputs = adapter_pass_s(m, a100, 4096, 1, lora)
    passes = LORA_OUTPUT_PASSES_FORWARD + LORA_OUTPUT_PASSES_BACKWARD
    outputs_s = 2 * passes / 3 * 4096 * adapter_output_elements_per_token(m) / (a100.mem_bw_bytes_per_s * 0.8)
    assert with_outputs > outputs_s > 0
    # a rank-16 GEMM is memory-bound: far below the GEMM rate of the base layer's own
    assert adapter_pass_s(m, a100, 4096, 1, Training(JobKind.LORA, 64)) > with_outputs
