"""Megatron-DeepSpeed: pretrain_gpt.py arguments, a DeepSpeed config and the launch that places every rank.

Files: `megatron_deepspeed_args.sh` (a bash array MEGATRON_ARGS, one `--flag value` a line),
`ds_config.json`, `launch.sh` (torchrun agents with fixed node ranks, planner.export.launch) and
`hostfile`; with pipelining also `pipeline_parts.json` and `pretrain_gpt_planned.py` (the stage
boundaries, below). Read in microsoft/Megatron-DeepSpeed at planner.engines.sources.MEGATRON_DEEPSPEED
(megatron/arguments.py), the arguments its own Llama example passes
(examples_deepspeed/pretrain_llama2_distributed.sh lines 101-147):
  _add_network_size_args (lines 599-688): --num-layers --hidden-size --ffn-hidden-size
    --num-attention-heads --num-key-value-heads (GQA) --max-position-embeddings
    --use-rotary-position-embeddings --rotary-position-embeddings-theta (type int, default 10000)
    --make-vocab-size-divisible-by (default 128) --normalization {layernorm, rmsnorm}
    --layernorm-epsilon --swiglu --untie-embeddings-and-output-weights
  _add_regularization_args: --attention-dropout --hidden-dropout (default 0.1 each)
  _add_training_args: --micro-batch-size --global-batch-size --recompute-granularity {full, selective}
    --recompute-method uniform --recompute-num-layers --use-flash-attn-v2 --disable-bias-linear
    (all linear biases or none) --no-pipeline-parallel (line 954: GPTModel under DeepSpeed's engine,
    the only way to ZeRO-2/3, since the pipeline engine asserts ZeRO < 2) --sequence-parallel (line 972)
  _add_initialization_args: --init-method-std; _add_mixed_precision_args: --fp16 --bf16 (none: fp32)
  _add_distributed_args: --tensor-model-parallel-size --pipeline-model-parallel-size
  _add_zero_args: --zero-stage; _add_activation_checkpoint_args: --deepspeed-activation-checkpointing
  deepspeed.add_config_arguments: --deepspeed --deepspeed_config
validate_args: dp = world / (tp x pp) (lines 100-106); with --sequence-parallel on CUDA,
CUDA_DEVICE_MAX_CONNECTIONS must be 1 (lines 401-410: launch.sh exports it).
Ranks: GPTModelPipe's PipeModelDataParallelTopology(num_pp, num_mp, num_dp) (megatron/model/gpt_model.py
lines 455-458) has axes ['pipe', 'data', 'model'], model fastest (deepspeed/runtime/pipe/topology.py),
and megatron/core/parallel_state.py builds the same groups: rank = (stage x dp + replica) x tp + tp rank,
common.one_mesh_ranks with cp 1.
Stage boundaries: GPTModelPipe passes partition_method='type:transformer' (gpt_model.py line 463), an
even split of the transformer layers. Where the plan's split is not that one, pretrain_gpt_planned.py
replaces DeepSpeed's PipelineModule._partition_layers (as planner/export/deepspeed.py's
PlannedPipelineModule does) with the plan's first layer per stage, and runs pretrain_gpt.py.
TF32: the repository sets no allow_tf32; NVIDIA's PyTorch container sets TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
(planner.engines.sources). launch.sh of an fp32 plan exports it as the plan says (1: TF32 on, 0: off),
so the run does what the plan was costed for in any container.
"""
from __future__ import annotations

import json

from planner.engines.sources import MEGATRON_DEEPSPEED
from planner.export import launch
from planner.export.common import checkpoint_preamble, from_checkpoint, one_mesh_ranks, switched, uniform_tp_dp
from planner.export.megatron import CHECKPOINT_WORD, _number, args_script, vocab_divisor, vocab_note
from planner.engines import ENGINES
from planner.types import Attention, Cluster, MlpKind, NormKind, Plan, PositionKind, Precision, Recompute

FILES = ("megatron_deepspeed_args.sh", "ds_config.json", "pipeline_parts.json", "pretrain_gpt_planned.py",
         "launch.sh", "hostfile")   # every file `export` may write
TF32_VARIABLE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def model_arguments(plan: Plan, tp: int) -> list[tuple]:
    """The model's shape and kind as Megatron-DeepSpeed's GPT arguments state it, every numeric value written
    out (its defaults, dropout 0.1 and RoPE base 10000, are not every model's)."""
    m = plan.model
    args = [("--num-layers", m.layers), ("--hidden-size", m.hidden), ("--ffn-hidden-size", m.ffn),
            ("--num-attention-heads", m.heads), ("--seq-length", plan.seq_len),
            ("--max-position-embeddings", max(plan.seq_len, m.max_positions))]
    if m.kv_heads != m.heads:
        args += [("--num-key-value-heads", m.kv_heads)]
    if m.mlp == MlpKind.SWIGLU:
        args += [("--swiglu",)]
    args += [("--normalization", "rmsnorm" if m.norm == NormKind.RMSNORM else "layernorm"),
             ("--layernorm-epsilon", _number(m.norm_eps))]
    if m.position == PositionKind.ROPE:
        args += [("--use-rotary-position-embeddings",), ("--rotary-position-embeddings-theta", int(m.rope_theta))]
    if not m.tied_embeddings:
        args += [("--untie-embeddings-and-output-weights",)]
    if not (m.qkv_bias or m.out_bias or m.mlp_bias):
        args += [("--disable-bias-linear",)]
    return args + [("--hidden-dropout", _number(m.hidden_dropout)), ("--attention-dropout", _number(m.attention_dropout)),
                   ("--init-method-std", _number(m.init_std)),
                   ("--make-vocab-size-divisible-by", vocab_divisor(m.vocab, tp))]


def training_arguments(plan: Plan, tp: int) -> list[tuple]:
    """Parallelism, batch, precision, recompute, attention kernels and the DeepSpeed engine."""
    args = [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", plan.num_stages)]
    if plan.num_stages == 1:
        args += [("--no-pipeline-parallel",)]
    args += [("--micro-batch-size", plan.micro_batch), ("--global-batch-size", plan.global_batch)]
    args += {Precision.BF16: [("--bf16",)], Precision.FP16: [("--fp16",)], Precision.FP32: []}[plan.precision]
    if plan.recompute == Recompute.FULL:
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1), ("--deepspeed-activation-checkpointing",)]
    elif plan.recompute == Recompute.SELECTIVE:
        args += [("--recompute-granularity", "selective")]
    if plan.sequence_parallel and tp > 1:
        args += [("--sequence-parallel",)]
    if plan.attention == Attention.FLASH:
        args += [("--use-flash-attn-v2",)]
    if from_checkpoint(plan):
        args += [("--load", CHECKPOINT_WORD), ("--finetune",)]
    return args + [("--deepspeed",), ("--deepspeed_config", "ds_config.json"), ("--zero-stage", plan.zero_stage)]


def arguments(plan: Plan) -> list[tuple[str, ...]]:
    """(flag,) or (flag, value) pairs, in the order they are written."""
    tp, _ = uniform_tp_dp(plan)
    args = model_arguments(plan, tp) + training_arguments(plan, tp)
    return [tuple(x if isinstance(x, str) else str(x) for x in a) for a in args]


def ds_config(plan: Plan) -> dict:
    """DeepSpeed's config: the batch identity over dp = world / (tp x pp), ZeRO, the training dtype."""
    _, dp = uniform_tp_dp(plan)
    zero = {"stage": plan.zero_stage}
    if "overlap_grad_reduce" in switched(plan):      # DeepSpeed's overlap_comm, without the pipeline engine
        zero["overlap_comm"] = plan.overlap_grad_reduce
    return {"train_batch_size": plan.global_batch,
            "train_micro_batch_size_per_gpu": plan.micro_batch,
            "gradient_accumulation_steps": plan.global_batch // (plan.micro_batch * dp),
            "zero_optimization": zero,
            "bf16": {"enabled": plan.precision == Precision.BF16},
            "fp16": {"enabled": plan.precision == Precision.FP16},
            "steps_per_print": 10}


def even_split(layers: int, stages: int) -> list[int]:
    """Layers per stage as partition_method 'type:transformer' splits them (DeepSpeed's partition_balanced
    over one weight per transformer layer: the first `layers % stages` stages one layer more)."""
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


WRAPPER = '''# Runs Megatron-DeepSpeed's pretrain_gpt.py with the plan's pipeline stage boundaries
# (`hetplan export --to megatron-deepspeed`). GPTModelPipe splits its transformer layers evenly
# (partition_method='type:transformer', megatron/model/gpt_model.py); this replaces DeepSpeed's
# PipelineModule._partition_layers so that stage k starts at transformer layer first_layers[k] of
# pipeline_parts.json (the embedding with stage 0, the final norm and head with the last stage). It
# relies on DeepSpeed internals (`_topo`, `global_rank`, `_layer_specs`, `_set_bounds`, `parts`);
# recheck them when upgrading DeepSpeed (written for {version}).
import json
import os
import runpy
import sys

from deepspeed.runtime.pipe.module import PipelineModule

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "pipeline_parts.json")) as f:
    PLAN = json.load(f)


def _partition_layers(self, method="uniform"):
    blocks = [i for i, spec in enumerate(self._layer_specs)
              if getattr(getattr(spec, "typename", None), "__name__", "") == "ParallelTransformerLayerPipe"]
    starts, num_stages = PLAN["first_layers"], self._topo.get_dim("pipe")
    if len(blocks) != PLAN["layers"] or len(starts) != num_stages:
        raise ValueError(f"pipeline_parts.json plans {{PLAN['layers']}} layers on {{len(starts)}} stages; the model "
                         f"has {{len(blocks)}} on {{num_stages}}")
    self.parts = [0] + [blocks[s] for s in starts[1:]] + [len(self._layer_specs)]
    stage_id = self._topo.get_coord(self.global_rank).pipe
    self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])


PipelineModule._partition_layers = _partition_layers
_SCRIPT = os.path.join(os.environ["MEGATRON_DEEPSPEED_DIR"], "pretrain_gpt.py")
sys.path.insert(0, os.path.dirname(_SCRIPT))
sys.argv[0] = _SCRIPT
runpy.run_path(_SCRIPT, run_name="__main__")
'''


def uneven(plan: Plan) -> bool:
    return [s.num_layers for s in plan.stages] != even_split(plan.model.layers, plan.num_stages)


def launch_env(plan: Plan) -> dict[str, str]:
    """Variables launch.sh exports: CUDA_DEVICE_MAX_CONNECTIONS=1 with sequence parallelism (validate_args),
    the TF32 override for fp32 plans (module docstring)."""
    tp, _ = uniform_tp_dp(plan)
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 else {}
    if plan.precision == Precision.FP32:
        env[TF32_VARIABLE] = "1" if ENGINES["megatron-deepspeed"].execution.tf32(plan.tf32) else "0"
    return env


def model_warnings(plan: Plan) -> list[str]:
    """Model features Megatron-DeepSpeed's GPT arguments cannot state (the run would differ from the plan)."""
    m, out = plan.model, []
    if m.position not in (PositionKind.ROPE, PositionKind.LEARNED):
        out.append(f"Megatron-DeepSpeed has learned or rotary position embeddings only; {m.id} needs a custom model")
    if m.mlp == MlpKind.RELU:
        out.append(f"Megatron-DeepSpeed has no plain ReLU MLP (gelu or --swiglu); {m.id} needs a custom model")
    if any((m.qkv_bias, m.out_bias, m.mlp_bias)) and not all((m.qkv_bias, m.out_bias, m.mlp_bias)):
        out.append(f"Megatron-DeepSpeed sets biases on all linear layers or none (--disable-bias-linear); {m.id} has "
                   f"qkv/out/mlp bias {[m.qkv_bias, m.out_bias, m.mlp_bias]}: written with all")
    if m.position == PositionKind.ROPE and (m.rope_scaling or m.rope_theta != int(m.rope_theta)):
        out.append(f"Megatron-DeepSpeed's RoPE has a whole-number base and no scaling; {m.id}'s is written as base "
                   f"{int(m.rope_theta)} without scaling")
    return out


def flash_note(plan: Plan, cluster: Cluster) -> list[str]:
    """--use-flash-attn-v2 on GPUs FlashAttention-2 does not run on: its kernels need Ampere or newer
    (flash-attn README), the NVIDIA GPUs with bf16 (Gpu.supports_bf16)."""
    old = sorted({r.pool for st in plan.stages for r in st.replicas
                  if cluster.pool(r.pool).gpu.vendor == "nvidia" and not cluster.pool(r.pool).gpu.supports_bf16})
    if plan.attention != Attention.FLASH or not old:
        return []
    return [f"--use-flash-attn-v2: FlashAttention-2 needs an Ampere or newer GPU; pool(s) {', '.join(old)} have "
            f"none, so that run fails: plan with attention unfused (Megatron-DeepSpeed's default attention, more "
            f"activation memory) for them"]


def export(plan: Plan, cluster: Cluster):
    tp, dp = uniform_tp_dp(plan)
    notes = model_warnings(plan) + vocab_note(plan.model, tp) + flash_note(plan, cluster)
    script = '"$MEGATRON_DEEPSPEED_DIR/pretrain_gpt.py"'
    files = {"megatron_deepspeed_args.sh": "", "ds_config.json": json.dumps(ds_config(plan), indent=2) + "\n"}
    if plan.num_stages > 1 and uneven(plan):
        files["pipeline_parts.json"] = json.dumps({"layers": plan.model.layers,
                                                   "first_layers": [s.layer_start for s in plan.stages]}, indent=2) + "\n"
        files["pretrain_gpt_planned.py"] = WRAPPER.format(version=MEGATRON_DEEPSPEED)
        script = "pretrain_gpt_planned.py"
        notes.append("pretrain_gpt_planned.py runs pretrain_gpt.py with the plan's uneven stage boundaries "
                     "(pipeline_parts.json) in place of Megatron-DeepSpeed's even split")
    if from_checkpoint(plan):
        notes.append(f"{plan.training.kind.value}: launch.sh requires CHECKPOINT, the Megatron-DeepSpeed checkpoint "
                     f"the run starts from (--load with --finetune: weights only, iteration 0)")
    if plan.precision == Precision.FP32:
        on = launch_env(plan)[TF32_VARIABLE] == "1"
        notes.append(f"fp32: launch.sh sets {TF32_VARIABLE}={int(on)}, so fp32 matmuls run "
                     f"{'on TF32 tensor cores, as in NVIDIA' + chr(39) + 's PyTorch container' if on else 'in full fp32'}")
    files["megatron_deepspeed_args.sh"] = args_script(arguments(plan), notes, "megatron-deepspeed")
    agents = launch.units(one_mesh_ranks(cluster, plan))
    preamble = ['export MEGATRON_DEEPSPEED_DIR="${MEGATRON_DEEPSPEED_DIR:?set MEGATRON_DEEPSPEED_DIR to your '
                'Megatron-DeepSpeed checkout}"',
                *(checkpoint_preamble("the Megatron-DeepSpeed checkpoint directory to fine-tune from (--load)")
                  if from_checkpoint(plan) else []),
                "source ./megatron_deepspeed_args.sh"]
    files["launch.sh"] = launch.script(agents, [script, '"${MEGATRON_ARGS[@]}"'],
                                       "Megatron-DeepSpeed launch written by `hetplan export --to megatron-deepspeed`",
                                       launch_env(plan), preamble)
    files["hostfile"] = launch.hostfile(agents)
    return files, notes + ["add data and tokenizer arguments (--data-path, --tokenizer-type, ...) on launch.sh's "
                           "command line"]


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []
