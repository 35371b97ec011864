"""Run Megatron-DeepSpeed's own argument parsing and validation on hetplan's Megatron-DeepSpeed exports, on a CPU.

    python benchmarks/check_megatron_deepspeed_exports.py --src DIR [--time-limit S]

Megatron-DeepSpeed is not a package: `--src` is a folder holding its `megatron/` and `tools/` (a checkout,
or extracted from the fetched snapshot at the pinned commit, planner.engines.sources.MEGATRON_DEEPSPEED:
`git --git-dir=<snapshot> archive HEAD megatron tools | tar -x -C DIR`). For each case (the fp32
A100 + V100 plan of a heterogeneous-cluster study's kind, with tp 2 and a DeepSpeed pipeline; the best
Megatron-DeepSpeed plan of a few example clusters; a ZeRO-3 plan without pipelining; a fine-tuning plan)
the script exports the plan with `--to megatron-deepspeed` and calls Megatron-DeepSpeed's `parse_args`
on the exported MEGATRON_ARGS (plus `--tokenizer-type NullTokenizer --vocab-size V`, which the user
replaces by theirs) and `validate_args`, with WORLD_SIZE the number of ranks launch.sh starts and the
environment launch.sh exports; then loads ds_config.json with DeepSpeed's DeepSpeedConfig at the
parsed data-parallel size, and compares the parsed model (layers, widths, heads and key/value heads,
norm and its epsilon, RoPE and its base, dropout, init std, tied embeddings, biases, the vocabulary as
Megatron-DeepSpeed pads it) and parallel sizes with the plan's.

Stubbed, exactly: the modules `transformers`, `six` and `regex` (imported by megatron/tokenizer, not
installed here; no tokenizer is built); DeepSpeed's accelerator name answered as "cuda" (so the
CUDA_DEVICE_MAX_CONNECTIONS check of validate_args runs as on a GPU machine); DeepSpeedConfig's
`dist.get_rank` (no process group on one CPU process). Nothing else: the parser, its types and choices,
and every assertion of validate_args are Megatron-DeepSpeed's own.
Prints one line per case and exits 1 if any export is refused or differs from the plan.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.check_exports import exported_args  # noqa: E402
from benchmarks.source_tree import require_module  # noqa: E402


def _stub_modules() -> None:
    for name, attrs in {"transformers": ("AutoTokenizer",), "six": (), "regex": ()}.items():
        if name not in sys.modules:
            module = types.ModuleType(name)
            for attr in attrs:
                setattr(module, attr, None)
            sys.modules[name] = module


def _stub_cuda() -> None:
    import deepspeed.accelerator as acc
    accelerator = acc.get_accelerator()
    accelerator.device_name = lambda *a, **k: "cuda"


class Mpu:          # what DeepSpeedConfig asks an mpu for: the data-parallel size
    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp


def mismatches(args, plan) -> list[str]:
    """Each field of the plan and its catalog model that the parsed arguments state otherwise."""
    m, tp = plan.model, plan.stages[0].replicas[0].tp
    expected = {"num_layers": m.layers, "hidden_size": m.hidden, "ffn_hidden_size": m.ffn,
                "num_attention_heads": m.heads, "num_key_value_heads": m.kv_heads, "seq_length": plan.seq_len,
                "layernorm_epsilon": m.norm_eps, "hidden_dropout": m.hidden_dropout,
                "attention_dropout": m.attention_dropout, "init_method_std": m.init_std,
                "untie_embeddings_and_output_weights": not m.tied_embeddings,
                "normalization": "rmsnorm" if m.norm.value == "rmsnorm" else "layernorm",
                "swiglu": m.mlp.value == "swiglu", "add_bias_linear": m.qkv_bias or m.out_bias or m.mlp_bias,
                "use_rotary_position_embeddings": m.position.value == "rope",
                "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": plan.num_stages,
                "data_parallel_size": len(plan.stages[0].replicas), "micro_batch_size": plan.micro_batch,
                "global_batch_size": plan.global_batch, "zero_stage": plan.zero_stage,
                "ds_pipeline_enabled": plan.num_stages > 1,
                "sequence_parallel": plan.sequence_parallel and tp > 1,
                "use_flash_attn_v2": plan.attention.value == "flash",
                "params_dtype": {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}[
                    plan.precision.value]}
    if m.position.value == "rope":
        expected["rope_theta"] = int(m.rope_theta)
    out = [f"{k} {getattr(args, k)!r}, the plan {v!r}" for k, v in expected.items() if str(getattr(args, k)) != str(v)]
    from megatron.tokenizer.tokenizer import _vocab_size_with_padding
    padded = _vocab_size_with_padding(m.vocab, args)
    if m.vocab % tp == 0 and padded != m.vocab:
        out.append(f"vocabulary {m.vocab} padded to {padded}")
    return out


def check_one(margs, plan, cluster) -> str:
    from deepspeed.runtime.config import DeepSpeedConfig
    import deepspeed.runtime.config as ds_config_module
    from planner.export import export_result
    from planner.export.megatron_deepspeed import launch_env
    result = export_result(plan, cluster, "megatron-deepspeed")
    assert result.closest_plan is None, result.reasons
    for name in ("CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"):
        os.environ.pop(name, None)
    os.environ.update(launch_env(plan), WORLD_SIZE=str(plan.num_gpus), RANK="0", LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt.py", *exported_args(result.files["megatron_deepspeed_args.sh"]),
                "--tokenizer-type", "NullTokenizer", "--vocab-size", str(plan.model.vocab)]
    args = margs.parse_args()
    margs.validate_args(args)
    wrong = mismatches(args, plan)
    ds_config_module.dist.get_rank = lambda: 0
    cfg = DeepSpeedConfig(json.loads(result.files["ds_config.json"]), mpu=Mpu(args.data_parallel_size))
    if (cfg.train_batch_size, cfg.zero_optimization_stage) != (plan.global_batch, plan.zero_stage):
        wrong.append(f"DeepSpeedConfig batch {cfg.train_batch_size} ZeRO {cfg.zero_optimization_stage}")
    if plan.overlap_grad_reduce is not None and plan.num_stages == 1 and cfg.zero_config.overlap_comm != plan.overlap_grad_reduce:
        wrong.append(f"DeepSpeedConfig overlap_comm {cfg.zero_config.overlap_comm}, the plan {plan.overlap_grad_reduce}")
    if wrong:
        raise ValueError("; ".join(wrong))
    tf32 = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "unset")
    return (f"accepted by parse_args, validate_args and DeepSpeedConfig (dp {args.data_parallel_size}, "
            f"{args.params_dtype}, TF32 override {tf32}); model, sizes and padded vocabulary the plan's")


def _cases(catalog, time_limit_s):
    """(label, cluster, plan)."""
    from dataclasses import replace
    from catalog.formats import load_cluster_file
    from planner.search import SearchOptions, search
    from planner.types import Attention, Job, JobKind, Precision, Recompute, Replica, Stage, Training
    from tests.test_megatron_deepspeed import sailor_style
    cluster, plan = sailor_style(catalog)
    yield "fp32 A100+V100, tp 2, DeepSpeed pipeline (even split)", cluster, plan
    yield "the same, uneven split", cluster, replace(plan, stages=(replace(plan.stages[0], layer_end=14),
                                                                     replace(plan.stages[1], layer_start=14)))
    a100 = tuple(Replica("a100", 1, 4) for _ in range(8))
    yield "bf16 ZeRO-3 without pipelining, full recompute", cluster, replace(
        plan, precision=Precision.BF16, stages=(Stage(0, plan.model.layers, a100),), zero_stage=3,
        recompute=Recompute.FULL, tf32=None, attention=Attention.FLASH, overlap_grad_reduce=True)
    options = SearchOptions(time_limit_s=time_limit_s)
    for name, model in (("a100-v100-16", "llama-3-8b"), ("h100-a100-v100-64", "llama-3-8b")):
        cluster = load_cluster_file(ROOT / "examples" / f"{name}.yaml", catalog)
        job = Job(catalog.models[model], 256, 4096, engine="megatron-deepspeed")
        yield f"{name} best plan ({model})", cluster, search(cluster, job, baselines=False, options=options).plans[0].plan
    cluster = load_cluster_file(ROOT / "examples" / "a100-v100-16.yaml", catalog)
    job = Job(catalog.models["llama-3-8b"], 64, 4096, engine="megatron-deepspeed",
              training=Training(JobKind.FULL_FINETUNE))
    yield "full fine-tune", cluster, search(cluster, job, baselines=False, options=options).plans[0].plan


def check(src: str, time_limit_s: float) -> int:
    from catalog import load_catalog
    _stub_modules()
    sys.path.insert(0, src)
    import megatron.arguments as margs
    _stub_cuda()
    failures = 0
    for label, cluster, plan in _cases(load_catalog(), time_limit_s):
        shape = (f"tp {plan.stages[0].replicas[0].tp} pp {plan.num_stages} dp {len(plan.stages[0].replicas)} "
                 f"ZeRO {plan.zero_stage} {plan.precision.value} {plan.recompute.value} {plan.training.kind.value} "
                 f"layers {[s.num_layers for s in plan.stages]}")
        try:
            print(f"{label}: {plan.num_gpus} ranks, {shape}: {check_one(margs, plan, cluster)}")
        except (AssertionError, ValueError, SystemExit, RuntimeError) as e:
            failures += 1
            print(f"{label}: {plan.num_gpus} ranks, {shape}: REFUSED: {type(e).__name__}: {e}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, metavar="DIR",
                        help="folder holding Megatron-DeepSpeed's megatron/ and tools/ (a checkout or the snapshot's)")
    parser.add_argument("--time-limit", type=float, default=2.0, help="search time per case (s)")
    args = parser.parse_args()
    require_module(parser, "--src", args.src, "megatron.arguments",
                   "give a Megatron-DeepSpeed checkout, or its megatron/ and tools/ extracted from the fetched snapshot "
                   "(the module docstring)")
    return check(args.src, args.time_limit)


if __name__ == "__main__":
    sys.exit(main())
