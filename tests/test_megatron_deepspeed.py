"""Megatron-DeepSpeed (planner.engines.megatron_deepspeed): tensor parallelism inside DeepSpeed's pipeline
with ZeRO, TF32 on for fp32 runs as the engine is launched (NVIDIA's container). Issue 19: the fp32
A100/V100 runs of a heterogeneous-cluster study (Megatron-DeepSpeed, tp > 1) must be statable; the
deepspeed profile, without tensor parallelism, refuses them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from benchmarks.check_exports import exported_args

from catalog import cluster_from_dict
from planner.cost import evaluate
from planner.engines import ENGINES, REAL
from planner.export import export_result
from planner.search import SearchOptions, search
from planner.types import Attention, InputError, Job, Plan, Precision, Replica, Stage


def sailor_style(catalog):
    """The study's kind of run: fp32, A100 + V100, tp 2, a DeepSpeed pipeline of 2 stages, no FlashAttention."""
    cluster = cluster_from_dict({"name": "a100-v100", "pools": [
        {"name": "a100", "gpu": "a100-40gb-sxm", "nodes": 1, "gpus_per_node": 8, "inter_node_gbps": 200},
        {"name": "v100", "gpu": "v100-16gb-pcie", "nodes": 2, "gpus_per_node": 4, "inter_node_gbps": 100}],
        "between_pools_gbps": 100}, catalog)
    m = catalog.model("gpt3-1.3b")
    half = m.layers // 2
    plan = Plan(m, 32, 2048, 1, Precision.FP32,
                (Stage(0, half, tuple(Replica("a100", 2, 8) for _ in range(4))),
                 Stage(half, m.layers, tuple(Replica("v100", 2, 8) for _ in range(4)))),
                zero_stage=1, engine="megatron-deepspeed", attention=Attention.UNFUSED)
    return cluster, plan


def test_fp32_tp_plan_on_a100_and_v100_is_statable_with_tf32_on(catalog):
    cluster, plan = sailor_style(catalog)
    engine = ENGINES["megatron-deepspeed"]
    assert engine.violations(plan) == []
    assert any("tensor parallelism" in v for v in ENGINES["deepspeed"].violations(plan))
    assert engine.execution.tf32(None) and not ENGINES["deepspeed"].execution.tf32(None)
    on, off = evaluate(cluster, plan), evaluate(cluster, replace(plan, tf32=False))
    assert on.fits and on.iteration_time_s < off.iteration_time_s


def test_the_default_planning_includes_it_now_that_it_exports():
    assert "megatron-deepspeed" in REAL and "fsdp" in REAL
    assert all(ENGINES[n].exports for n in REAL)


def _args(files) -> list[str]:
    return exported_args(files["megatron_deepspeed_args.sh"])


def test_the_fp32_a100_v100_plan_exports_exactly_with_tf32_as_planned(catalog):
    cluster, plan = sailor_style(catalog)
    result = export_result(plan, cluster, "megatron-deepspeed")
    assert result.closest_plan is None and result.exported_plan == plan
    words = _args(result.files)
    assert words[words.index("--tensor-model-parallel-size") + 1] == "2"
    assert words[words.index("--pipeline-model-parallel-size") + 1] == "2"
    assert not {"--bf16", "--fp16", "--use-flash-attn-v2", "--no-pipeline-parallel"} & set(words)
    assert "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in result.files["launch.sh"]
    assert "pipeline_parts.json" not in result.files         # 12 + 12: Megatron-DeepSpeed's own even split
    off = export_result(replace(plan, tf32=False), cluster, "megatron-deepspeed").files["launch.sh"]
    assert "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0" in off
    cfg = json.loads(result.files["ds_config.json"])
    assert cfg["train_batch_size"] == 32 and cfg["gradient_accumulation_steps"] == 8    # 32 / (1 x dp 4)
    assert not cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]


def test_zero_3_runs_without_the_pipeline_engine(catalog):
    cluster, plan = sailor_style(catalog)
    one = replace(plan, precision=Precision.BF16, tf32=None, zero_stage=3,
                  stages=(Stage(0, plan.model.layers, tuple(Replica("a100", 1, 4) for _ in range(8))),))
    assert ENGINES["megatron-deepspeed"].violations(one) == []
    words = _args(export_result(one, cluster, "megatron-deepspeed").files)
    assert "--no-pipeline-parallel" in words and words[words.index("--zero-stage") + 1] == "3"
    assert ENGINES["megatron-deepspeed"].violations(replace(plan, zero_stage=3))     # not with the pipeline


STUB_PRETRAIN = """
from deepspeed.runtime.pipe.module import LayerSpec, PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
import torch

class ParallelTransformerLayerPipe(torch.nn.Linear):
    pass

class GPTModelPipe(PipelineModule):          # the attributes _partition_layers reads, as PipelineModule sets them
    pass

layers = {layers}
for rank in range({stages}):
    m = object.__new__(GPTModelPipe)
    torch.nn.Module.__init__(m)
    m._layer_specs = [lambda x: x, LayerSpec(torch.nn.Embedding, 8, 4)] + [
        LayerSpec(ParallelTransformerLayerPipe, 4, 4) for _ in range(layers)] + [LayerSpec(torch.nn.LayerNorm, 4)]
    m._topo = PipeModelDataParallelTopology(num_pp={stages}, num_mp=1, num_dp=1)
    m.global_rank = rank
    m._partition_layers(method="type:transformer")
    print(rank, m.parts, m._local_start, m._local_stop)
"""


def test_the_uneven_split_wrapper_sets_deepspeeds_stage_bounds(catalog, tmp_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (requirements-dev.txt installs it)")
    cluster, plan = sailor_style(catalog)
    uneven = replace(plan, stages=(replace(plan.stages[0], layer_end=14), replace(plan.stages[1], layer_start=14)))
    files = export_result(uneven, cluster, "megatron-deepspeed").files
    assert "pretrain_gpt_planned.py" in files["launch.sh"]
    for name in ("pretrain_gpt_planned.py", "pipeline_parts.json"):
        (tmp_path / name).write_text(files[name])
    (tmp_path / "mds").mkdir()
    (tmp_path / "mds" / "pretrain_gpt.py").write_text(STUB_PRETRAIN.format(layers=plan.model.layers, stages=2))
    out = subprocess.run([sys.executable, str(tmp_path / "pretrain_gpt_planned.py")], capture_output=True, text=True,
                         env={**os.environ, "MEGATRON_DEEPSPEED_DIR": str(tmp_path / "mds")}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    # specs: [cast, embedding, layer 0 .. layer 23, norm]; stage 1 starts at layer 14 = spec 16
    assert [line for line in out.stdout.splitlines() if line[:2] in ("0 ", "1 ")] == ["0 [0, 16, 27] 0 16", "1 [0, 16, 27] 16 27"]


def test_moe_models_are_refused_by_name_and_the_search_says_so(catalog):
    cluster, _ = sailor_style(catalog)
    mixtral = catalog.model("mixtral-8x7b")
    engine = ENGINES["megatron-deepspeed"]
    assert any("dense models only" in v for v in engine.model_violations(mixtral))
    with pytest.raises(InputError, match="dense models only"):
        search(cluster, Job(mixtral, 32, 4096, engine="megatron-deepspeed"), baselines=False,
               options=SearchOptions(time_limit_s=1))


def test_the_search_plans_fp32_on_a100_and_v100_for_it_and_the_plan_exports_exactly(catalog):
    cluster, plan = sailor_style(catalog)
    job = Job(plan.model, 32, 2048, Precision.FP32, engine="megatron-deepspeed")
    found = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=3)).plans[0]
    assert found.plan.precision == Precision.FP32 and found.plan.engine == "megatron-deepspeed"
    assert found.estimate.fits and ENGINES["megatron-deepspeed"].violations(found.plan) == []
    result = export_result(found.plan, cluster, "megatron-deepspeed")
    assert result.closest_plan is None and "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in result.files["launch.sh"]
    # the fp32 matmuls are costed on TF32, as the launch runs them
    assert evaluate(cluster, replace(found.plan, tf32=False)).iteration_time_s > found.estimate.iteration_time_s


def test_flash_attention_on_v100_is_said_to_fail(catalog):
    cluster, plan = sailor_style(catalog)
    assert not any("FlashAttention-2" in w for w in export_result(plan, cluster, "megatron-deepspeed").warnings)
    flash = export_result(replace(plan, attention=Attention.FLASH), cluster, "megatron-deepspeed")
    assert any("FlashAttention-2" in w and "v100" in w for w in flash.warnings)
