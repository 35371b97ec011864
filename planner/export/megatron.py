"""Megatron-LM: pretrain_gpt.py arguments and the launch that places every rank, written together.

Files: `megatron_args.sh` (a bash array MEGATRON_ARGS, one `--flag value` a line), `launch.sh`
(torchrun agents with fixed node ranks, planner.export.launch) and `hostfile`, all for the same
plan, so the world size the launch starts is tp x cp x pp x dp of the arguments (Megatron asserts
eval_global_batch_size, by default the global batch, divisible by eval micro batch x dp:
megatron/training/arguments.py validate_args, lines 707-720 at the pinned commit; a launch of
another plan's world size is what broke that before).

Read in NVIDIA/Megatron-LM at planner.engines.sources.MEGATRON (megatron/training/arguments.py):
  _add_network_size_args: --num-layers --hidden-size --ffn-hidden-size --num-attention-heads
    --group-query-attention --num-query-groups --max-position-embeddings
    --position-embedding-type {learned_absolute, rope, mrope, relative, none}
    --normalization {LayerNorm, RMSNorm} --swiglu --untie-embeddings-and-output-weights
  _add_data_args: --seq-length
  _add_training_args: --micro-batch-size --global-batch-size --recompute-granularity {full, selective}
    --recompute-method {uniform, block} --recompute-num-layers --sequence-parallel
    --disable-bias-linear (dest add_bias_linear) --add-qkv-bias
  _add_mixed_precision_args: --fp16 --bf16
  _add_distributed_args: --tensor-model-parallel-size --pipeline-model-parallel-size
    --pipeline-model-parallel-layout --use-distributed-optimizer --overlap-grad-reduce (line 3121)
    --use-megatron-fsdp, --data-parallel-sharding-strategy {no_shard, optim, optim_grads,
    optim_grads_params} (lines 3190-3192)
  _add_checkpointing_args: --ckpt-format (fsdp_dtensor)
validate_args: with --use-megatron-fsdp, "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"
(assert, lines 1166-1167) and "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
(lines 1168-1169); Megatron-FSDP v1 turns on the distributed optimizer itself (lines 1118-1135).
Without FSDP, megatron/core/tensor_parallel/layers.py (lines 909-921) asks for
CUDA_DEVICE_MAX_CONNECTIONS=1 with sequence parallelism or tensor-parallel gradient all-reduce
(the kernels' order then matches the launch order that hides tp communication); Megatron's own
examples export it (examples/gpt3/train_gpt3_175b_distributed.sh line 5), so launch.sh does for tp > 1.
Rank order: megatron/training/initialize.py line 395, order 'tp-cp-ep-dp-pp' (tp fastest, pp
slowest; initialize_model_parallel, megatron/core/parallel_state.py line 617; the dense grid has ep 1):
global rank = ((stage * dp + replica) * cp + cp rank) * tp + tp rank (common.one_mesh_ranks); the
stage follows from the rank.
Context parallelism (plan.context_parallel = cp > 1): --context-parallel-size (ModelParallelConfig.
context_parallel_size, megatron/core/model_parallel_config.py line 100, a flag by ArgumentGroupFactory,
megatron/training/argument_utils.py lines 95-107) and --cp-comm-type p2p (arguments.py lines 3221-3226,
the default, written out: the key/value ring the cost model times). validate_args: dp = world /
(tp * pp * cp) (lines 424-448), seq_length % (2 * cp) == 0 (lines 1335-1338, which Plan checks), and
CUDA_DEVICE_MAX_CONNECTIONS=1 for tp > 1 or cp > 1 before Blackwell unless FSDP (lines 1453-1479).
CP runs in Transformer Engine's attention only ("Context parallelism is only supported by
TEDotProductAttention!", megatron/core/transformer/dot_product_attention.py line 59), the default
transformer_impl "transformer_engine" (megatron/core/transformer/transformer_config.py line 1314).
Mixture of experts (plan.model.experts > 1; same commit):
  --num-experts (arguments.py _add_moe_args line 3518; the TransformerConfig field num_moe_experts is
  left out of the generated flags, line 2356), --moe-router-topk (transformer_config.py line 760,
  default 2, written always), --moe-ffn-hidden-size (line 740; validate_args falls back to
  --ffn-hidden-size, arguments.py lines 1650-1652), --moe-shared-expert-intermediate-size ("num_shared_experts
  * ffn_size_of_each_shared_expert", transformer_config.py lines 701-704), --moe-layer-freq (arguments.py
  moe_freq_type lines 327-350: an int N puts experts in layers i with i % N == 0, gpt_layer_specs.py
  lines 647-650, which is not hetplan's "first dense_layers dense, then every moe_every-th layer MoE", so
  a model with dense layers gets the pattern as a Python list expression, checked by _eval_pattern
  (arguments.py lines 245-253: only , digits [ ] ( ) + *) and by length == --num-layers,
  gpt_layer_specs.py lines 651-657), and --moe-router-load-balancing-type aux_loss with
  --moe-aux-loss-coeff 1e-2 (arguments.py _add_moe_args: the coefficient's default is 0.0, i.e. no
  balancing; 1e-2 is the README's quick start, megatron/core/transformer/moe/README.md lines 92-104):
  the cost model's expert load assumes an auxiliary balancing loss (planner.experts.MOE_LOAD_IMBALANCE).
  Multi-head latent attention (DeepSeek): --multi-latent-attention (TransformerConfig.multi_latent_attention,
  line 288), --q-lora-rank --kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim --v-head-dim (arguments.py
  _add_mla_args); GQA flags are mutually exclusive with it (validate_args lines 1973-1974).
Expert parallelism (plan.expert_parallel = ep > 1): --expert-model-parallel-size ep
  (ModelParallelConfig.expert_model_parallel_size, model_parallel_config.py line 127),
  --expert-tensor-parallel-size tp (line 130; None means tp, arguments.py lines 587-588: written out),
  --moe-token-dispatcher-type alltoall (transformer_config.py line 891, default allgather; the MoE
  README's dispatcher table, line 309: alltoall for "Standard EP > 1 setups"; the all-to-all the cost
  model times, planner.experts). validate_args: num_experts % ep == 0 (arguments.py lines 1655-1658;
  Plan checks it). Ranks: initialize_model_parallel (parallel_state.py lines 859-905) builds the dense
  grid with ep=1 (line 861), so the dense rank placement above does not change, and a separate expert
  grid tp(etp)-ep-dp-pp with cp=1 (lines 887-895) whose pp groups must equal the dense ones (line 905):
  per stage etp x ep must divide tp x cp x dp, i.e. ep | cp x dp with etp = tp; the plan's ep | dp.
  ep groups are ep consecutive tp-blocks of a stage: with cp = 1 ep consecutive replicas, as the plan
  shards them; with cp > 1 the expert grid folds cp into ep (context_notes says so).
Layout syntax from megatron/core/transformer/pipeline_parallel_layer_layout.py: E embedding,
t decoder layer, L loss, `|` between stages, `x*N` repeats; part k is pp rank k mod p, virtual
stage k // p; exactly one E first, one L last, and as many t as --num-layers.
Architecture beyond the shapes (same commit), every value written out from the catalog model:
  --norm-epsilon (TransformerConfig.layernorm_epsilon, transformer_config.py lines 201-203, default 1e-5),
  --hidden-dropout and --attention-dropout (lines 188-191, default 0.1 each, where Llama, Mistral and Qwen
  train with 0), --init-method-std (line 400, default 0.02), --rotary-base (arguments.py line 2418, type
  int, default 10000, where Llama 3 uses 500000 and Mixtral 1e6), --use-rope-scaling and
  --rope-scaling-factor (lines 2424-2427: Llama 3.x scaling), --rope-type yarn (line 2906) with
  --rotary-scaling-factor (_add_mla_args line 3558) for YaRN; --make-vocab-size-divisible-by (line 2441,
  default 128): Megatron pads the tokenizer's vocabulary to a multiple of it x tp
  (megatron/training/vocab_utils.py line 58), so the export picks the divisor that pads the model's
  vocabulary to itself (vocab_divisor). Tied embeddings: --untie-embeddings-and-output-weights when untied.
Job kind and offload (same commit):
  full fine-tuning: --load DIR and --finetune, "Load model for finetuning. Do not load optimizer or rng
    state from checkpoint and set iteration to 0" (CheckpointConfig.load and .finetune,
    megatron/training/config/training_config.py lines 430 and 464-466, made flags by ArgumentGroupFactory,
    megatron/training/argument_utils.py line 106). DIR is launch.sh's CHECKPOINT, which it requires.
    Megatron-LM has no LoRA (planner.engines.sources "no LoRA"): such plans never reach this writer.
  optimizer offload: --optimizer-cpu-offload --optimizer-offload-fraction 1.0 (arguments.py lines
    2918-2923), which validate_args requires with --use-precision-aware-optimizer (lines 1884-1892;
    flag at line 3667), which needs the distributed optimizer (megatron/core/optimizer/__init__.py
    lines 1057-1060): the profile offloads with ZeRO-1 only, written as --use-distributed-optimizer.
    AdamW mode (decoupled_weight_decay, the default: optimizer_config.py line 250) is asserted there too
    (lines 510-512).
"""
from __future__ import annotations

import shlex

from planner.export.common import (CHECKPOINT_VARIABLE, checkpoint_preamble, from_checkpoint, layer_segments,
                                   one_mesh_ranks, uniform_tp_dp)
from planner.engines import ENGINES
from planner.export import launch
from planner.types import Cluster, MlpKind, Model, NormKind, Offload, Plan, PositionKind, Recompute

FILES = ("megatron_args.sh", "launch.sh", "hostfile")   # every file `export` may write

POSITION_TYPES = {PositionKind.LEARNED: "learned_absolute", PositionKind.ROPE: "rope"}
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}   # ZeRO stage -> --data-parallel-sharding-strategy
# Precision -> flags: --bf16 / --fp16 (mutually exclusive, arguments.py lines 1194-1216), none for fp32
# (params_dtype stays torch.float; Megatron has no TF32 flag), FP8 GEMMs with the rest in bf16:
# --fp8-format hybrid (TransformerConfig.fp8, megatron/core/transformer/transformer_config.py lines 587-600).
PRECISION_FLAGS = {"bf16": [("--bf16",)], "fp16": [("--fp16",)], "fp32": [],
                   "fp8": [("--bf16",), ("--fp8-format", "hybrid")]}


class ShellWord(str):
    """A word args_script writes as it is, not quoted: a variable launch.sh sets, e.g. "$CHECKPOINT"."""


CHECKPOINT_WORD = ShellWord(f'"${CHECKPOINT_VARIABLE}"')


def layout_string(plan: Plan) -> str:
    """e.g. "Et*5|t*7|t*9|t*11L" for stages of 5, 7, 9 and 11 layers."""
    parts = []
    segments = layer_segments(plan)
    for k, (_, _, a, b) in enumerate(segments):
        n = b - a
        text = "t" if n == 1 else f"t*{n}"
        if k == 0:
            text = "E" + text
        if k == len(segments) - 1:
            text += "L"
        parts.append(text)
    return "|".join(parts)


def model_arguments(plan: Plan) -> list[tuple]:
    """The model's shape and kind, as Megatron-LM's GPT arguments state it."""
    m = plan.model
    args = [("--num-layers", m.layers), ("--hidden-size", m.hidden), ("--ffn-hidden-size", m.ffn),
            ("--num-attention-heads", m.heads), ("--seq-length", plan.seq_len),
            ("--max-position-embeddings", max(plan.seq_len, m.max_positions))]
    if m.kv_heads != m.heads and not m.is_mla:
        args += [("--group-query-attention",), ("--num-query-groups", m.kv_heads)]
    if m.mlp == MlpKind.SWIGLU:
        args += [("--swiglu",)]
    if m.norm == NormKind.RMSNORM:
        args += [("--normalization", "RMSNorm")]
    if m.position in POSITION_TYPES:
        args += [("--position-embedding-type", POSITION_TYPES[m.position])]
    if not m.tied_embeddings:
        args += [("--untie-embeddings-and-output-weights",)]
    if not (m.qkv_bias or m.out_bias or m.mlp_bias):
        args += [("--disable-bias-linear",)]
    elif m.qkv_bias and not (m.out_bias or m.mlp_bias):
        args += [("--disable-bias-linear",), ("--add-qkv-bias",)]
    return args + numeric_arguments(m) + moe_arguments(m)


def numeric_arguments(m: Model) -> list[tuple]:
    """What the weights mean beyond their shapes (module docstring, "Architecture"): each value written out,
    since Megatron's defaults (dropout 0.1, RoPE base 10000) are not every model's."""
    args = [("--norm-epsilon", _number(m.norm_eps)), ("--hidden-dropout", _number(m.hidden_dropout)),
            ("--attention-dropout", _number(m.attention_dropout)), ("--init-method-std", _number(m.init_std))]
    if m.position == PositionKind.ROPE:
        args += [("--rotary-base", int(m.rope_theta))]
        if m.rope_scaling == "llama3":
            args += [("--use-rope-scaling",), ("--rope-scaling-factor", _number(m.rope_scaling_factor))]
        elif m.rope_scaling == "yarn":
            args += [("--rope-type", "yarn"), ("--rotary-scaling-factor", _number(m.rope_scaling_factor))]
    return args


def _number(x: float) -> str:
    """A float as the shortest text that reads back as the same float (1e-05, 0.02, 0.0, 8.0)."""
    return repr(float(x))


def vocab_divisor(vocab: int, tp: int) -> int:
    """--make-vocab-size-divisible-by: the largest power of two up to Megatron's default 128 whose multiple by
    tp divides the vocabulary, so that Megatron pads a tokenizer of `vocab` entries to itself (padded size =
    ceil(vocab / (divisor x tp)) x divisor x tp, megatron/training/vocab_utils.py line 58); 1 when tp does not
    divide it (then the padding is the least Megatron can do)."""
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return 1


def padded_vocab(vocab: int, tp: int) -> int:
    multiple = vocab_divisor(vocab, tp) * tp
    return -(-vocab // multiple) * multiple


def vocab_arguments(m: Model, tp: int) -> list[tuple]:
    return [("--make-vocab-size-divisible-by", vocab_divisor(m.vocab, tp))]


def moe_layer_freq(model: Model) -> str:
    """--moe-layer-freq: "1" when every layer is MoE, else the Python list expression of the pattern
    (1 MoE, 0 dense): dense_layers zeros, then in each run of moe_every layers the last one MoE, e.g.
    "([0]*3+[1]*58)" for DeepSeek-V3, "(([0]*1+[1])*24)" for Llama 4 Maverick."""
    d, e = model.dense_layers, model.moe_every
    n, rest = divmod(model.layers - d, e)
    if d == 0 and e == 1:
        return "1"
    parts = [f"[0]*{d}"] if d else []
    parts.append(f"[1]*{n}" if e == 1 else f"([0]*{e - 1}+[1])*{n}")
    if rest:
        parts.append(f"[0]*{rest}")
    return "(" + "+".join(parts) + ")"


def moe_layer_pattern(model: Model) -> list[int]:
    """Which layers hold experts (1) in hetplan's convention (planner.types.Model.moe_layers)."""
    d, e = model.dense_layers, model.moe_every
    return [int(i >= d and (i - d + 1) % e == 0) for i in range(model.layers)]


def moe_arguments(model: Model) -> list[tuple]:
    """Experts, routing and multi-head latent attention (module docstring); none for a dense model."""
    args = []
    if model.is_moe:
        expert_ffn = model.moe_ffn or model.ffn
        args += [("--num-experts", model.experts), ("--moe-router-topk", model.top_k),
                 ("--moe-ffn-hidden-size", expert_ffn), ("--moe-layer-freq", moe_layer_freq(model)),
                 ("--moe-router-load-balancing-type", "aux_loss"), ("--moe-aux-loss-coeff", "1e-2")]
        if model.shared_experts:
            args += [("--moe-shared-expert-intermediate-size", model.shared_experts * expert_ffn)]
    if model.is_mla:
        args += [("--multi-latent-attention",)]
        args += [("--q-lora-rank", model.q_lora_rank)] if model.q_lora_rank else []
        args += [("--kv-lora-rank", model.kv_lora_rank), ("--qk-head-dim", model.head_dim),
                 ("--qk-pos-emb-head-dim", model.qk_rope_head_dim), ("--v-head-dim", model.v_head_dim or model.head_dim)]
    return args


def expert_parallel_arguments(plan: Plan, tp: int) -> list[tuple]:
    """--expert-model-parallel-size and its dispatcher (module docstring); none for ep 1."""
    if plan.expert_parallel == 1 and plan.expert_tensor_parallel in (0, tp):
        return []
    return [("--expert-model-parallel-size", plan.expert_parallel),
            ("--expert-tensor-parallel-size", plan.expert_tensor_parallel or tp),
            ("--moe-token-dispatcher-type", "alltoall")]


def training_arguments(plan: Plan, tp: int) -> list[tuple]:
    """Batch, precision, recompute, sequence parallelism and data-parallel sharding."""
    args = [("--micro-batch-size", plan.micro_batch), ("--global-batch-size", plan.global_batch)]
    args += PRECISION_FLAGS[plan.precision.value]
    if plan.precision.value == "fp8" and plan.zero_stage >= 1:
        # the compute weight kept in FP8 in place of bf16 (arguments.py lines 2016-2018; it needs the
        # distributed optimizer or Megatron-FSDP, lines 1095-1097), as planner.numerics counts FP8 weights
        args += [("--fp8-param-gather",)]
    if plan.recompute == Recompute.FULL:
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    elif plan.recompute == Recompute.SELECTIVE:
        args += [("--recompute-granularity", "selective")]
    if plan.sequence_parallel and tp > 1:
        args += [("--sequence-parallel",)]
    if plan.tp_comm_overlap:         # the plan's tp-communication overlap (needs --sequence-parallel, arguments.py
        args += [("--tp-comm-overlap",)]   # lines 1441-1442; Transformer Engine userbuffers, initialize.py line 164)
    if plan.zero_stage == 1:
        args += [("--use-distributed-optimizer",)]
    elif plan.zero_stage in FSDP_STRATEGY:
        args += [("--use-megatron-fsdp",), ("--data-parallel-sharding-strategy", FSDP_STRATEGY[plan.zero_stage]),
                 ("--ckpt-format", "fsdp_dtensor")]
    run = ENGINES[plan.engine].execution_for(plan)     # the plan's overlap switches (planner.engines.megatron)
    args += [("--overlap-grad-reduce",)] if run.overlap_grad_reduce else []
    args += [("--overlap-param-gather",)] if run.overlap_param_gather else []   # arguments.py lines 1024-1029
    return args + job_arguments(plan)


def job_arguments(plan: Plan) -> list[tuple]:
    """Where the weights come from and where the optimizer runs (module docstring)."""
    args = []
    if from_checkpoint(plan):
        args += [("--load", CHECKPOINT_WORD), ("--finetune",)]
    if plan.offload == Offload.OPTIMIZER:
        assert plan.zero_stage == 1, "Megatron-LM offloads the distributed optimizer's shards (ZeRO-1)"
        args += [("--optimizer-cpu-offload",), ("--optimizer-offload-fraction", "1.0"),
                 ("--use-precision-aware-optimizer",)]
    assert plan.offload != Offload.OPTIMIZER_PARAMS, "Megatron-LM has no parameter offload"
    return args


def arguments(plan: Plan) -> list[tuple[str, ...]]:
    """(flag,) or (flag, value) pairs, in the order they are written."""
    tp, _ = uniform_tp_dp(plan)
    args = model_arguments(plan)[:6] + [("--tensor-model-parallel-size", tp),
                                        ("--pipeline-model-parallel-size", plan.num_stages)]
    if plan.context_parallel > 1:
        args += [("--context-parallel-size", plan.context_parallel), ("--cp-comm-type", "p2p")]
    args += expert_parallel_arguments(plan, tp)
    if plan.num_stages > 1:
        args += [("--pipeline-model-parallel-layout", layout_string(plan))]
    args += training_arguments(plan, tp) + model_arguments(plan)[6:] + vocab_arguments(plan.model, tp)
    return [tuple(x if isinstance(x, str) else str(x) for x in a) for a in args]


def vocab_note(m: Model, tp: int) -> list[str]:
    """Where Megatron must pad the vocabulary (tp does not divide it): the size it trains; none otherwise
    (--make-vocab-size-divisible-by keeps a tokenizer of the model's vocabulary unpadded: vocab_divisor)."""
    padded = padded_vocab(m.vocab, tp)
    if padded == m.vocab:
        return []
    return [f"vocabulary: tp {tp} does not divide {m.id}'s {m.vocab:,} entries, so Megatron pads the tokenizer's "
            f"vocabulary to {padded:,} (--make-vocab-size-divisible-by {vocab_divisor(m.vocab, tp)}; unused rows)"]


def model_warnings(plan: Plan) -> list[str]:
    """Model features Megatron-LM's GPT arguments have no choice for (the run would differ from the plan)."""
    m, out = plan.model, []
    if m.position not in POSITION_TYPES:
        out.append(f"Megatron-LM's --position-embedding-type has no {m.position.value}; {m.id} needs a custom model")
    if m.mlp == MlpKind.RELU:
        out.append(f"Megatron-LM has no plain ReLU MLP (only gelu, --swiglu, --squared-relu); {m.id} needs a custom model")
    if m.position == PositionKind.ROPE and m.rope_theta != int(m.rope_theta):
        out.append(f"Megatron-LM's --rotary-base is a whole number; {m.id}'s RoPE base {m.rope_theta:g} is written as "
                   f"{int(m.rope_theta)}")
    biased = (m.qkv_bias, m.out_bias, m.mlp_bias)
    if any(biased) and not all(biased) and biased != (True, False, False):
        out.append(f"Megatron-LM sets biases for all linear layers or, with --add-qkv-bias, for QKV only; "
                   f"{m.id} has qkv/out/mlp bias {list(biased)}")
    return out


def _word(x: str) -> str:
    return x if isinstance(x, ShellWord) else shlex.quote(x)


def args_script(args: list[tuple[str, ...]], notes: list[str], tool: str = "megatron") -> str:
    lines = ["#!/usr/bin/env bash", f"# Arguments written by `hetplan export --to {tool}`, for the plan launch.sh starts",
             "# (sourced by launch.sh; add data and tokenizer arguments on launch.sh's command line).",
             *[f"# note: {w}" for w in notes],
             "MEGATRON_ARGS=(", *["  " + " ".join(_word(x) for x in a) for a in args], ")", ""]
    return "\n".join(lines)


def megatron_ranks(cluster: Cluster, plan: Plan) -> list[tuple[str, int]]:
    """(host, GPU) of each Megatron global rank, in rank order (order tp-cp-ep-dp-pp)."""
    return one_mesh_ranks(cluster, plan)


def launch_env(plan: Plan) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables to export, variables to unset) for launch.sh."""
    tp, _ = uniform_tp_dp(plan)
    if plan.zero_stage in FSDP_STRATEGY:
        return {}, ("CUDA_DEVICE_MAX_CONNECTIONS",)
    return ({"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 or plan.context_parallel > 1 else {}), ()


def job_notes(plan: Plan) -> list[str]:
    """What a fine-tuning or offloading run needs beyond the arguments (shared with FlagScale)."""
    notes = []
    if from_checkpoint(plan):
        notes.append(f"{plan.training.kind.value}: launch.sh requires {CHECKPOINT_VARIABLE}, the checkpoint directory "
                     f"the run starts from (--load with --finetune: model weights only, iteration 0)")
    if plan.offload == Offload.OPTIMIZER:
        notes.append("optimizer offload: Adam runs on the CPU (Megatron's HybridDeviceOptimizer), through the "
                     "precision-aware optimizer, which needs Transformer Engine")
    return notes


def context_notes(plan: Plan) -> list[str]:
    """What context parallelism needs beyond its flags (module docstring)."""
    if plan.context_parallel == 1:
        return []
    tp, dp = uniform_tp_dp(plan)
    return [f"context parallelism: each replica is tp {tp} x cp {plan.context_parallel} = "
            f"{tp * plan.context_parallel} ranks (rank order tp, cp, dp, pp); it needs Transformer Engine's "
            f"attention (the default --transformer-impl transformer_engine)"]


def expert_notes(plan: Plan) -> list[str]:
    """What the MoE flags leave to the user, and where Megatron places the expert groups (module docstring)."""
    m = plan.model
    if not m.is_moe:
        return []
    notes = [f"mixture of experts: {m.experts} experts, top-{m.top_k}, {m.moe_layers} of {m.layers} layers MoE "
             f"(--moe-layer-freq); aux-loss balancing at 1e-2 (Megatron's default coefficient is 0); add "
             f"--moe-grouped-gemm (Transformer Engine) for speed"]
    if m.is_mla:
        notes.append("multi-head latent attention: --rope-type and --rotary-scaling-factor are the model's; YaRN's "
                     "--mscale, --mscale-all-dim and --yarn-original-max-position-embeddings are left at Megatron's "
                     "defaults: set them to the checkpoint's")
    ep = plan.expert_parallel
    if ep > 1:
        tp, _ = uniform_tp_dp(plan)
        etp = plan.expert_tensor_parallel or tp
        grid = (f"each expert group is {ep} consecutive replicas of a stage" if plan.context_parallel == 1 and etp == tp
                else f"each expert group is {etp * ep} consecutive ranks (etp fastest, then ep), tp ranks first"
                if etp != tp else
                f"Megatron's expert grid has no cp axis, so each expert group of {ep} spans the cp ranks of a "
                f"replica first (the plan shards experts over replicas; the all-to-all volume is the same)")
        notes.append(f"expert parallelism {ep}: {m.experts // ep} experts per GPU, tensor-parallel over {etp} "
                     f"(--expert-tensor-parallel-size {etp}); dense ranks keep their order (tp, cp, dp, pp); {grid}")
    return notes


def export(plan: Plan, cluster: Cluster):
    tp, _ = uniform_tp_dp(plan)
    notes = (model_warnings(plan) + vocab_note(plan.model, tp) + job_notes(plan) + context_notes(plan)
             + expert_notes(plan))
    agents = launch.units(megatron_ranks(cluster, plan))
    env, unset = launch_env(plan)
    preamble = ['MEGATRON_DIR="${MEGATRON_DIR:?set MEGATRON_DIR to your Megatron-LM checkout}"',
                *(checkpoint_preamble("the Megatron-LM checkpoint directory to fine-tune from (--load)")
                  if from_checkpoint(plan) else []),
                "source ./megatron_args.sh"]
    command = ['"$MEGATRON_DIR/pretrain_gpt.py"', '"${MEGATRON_ARGS[@]}"']
    files = {"megatron_args.sh": args_script(arguments(plan), notes),
             "launch.sh": launch.script(agents, command, "Megatron-LM launch written by `hetplan export --to megatron`",
                                        env, preamble, unset),
             "hostfile": launch.hostfile(agents)}
    return files, notes


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []
