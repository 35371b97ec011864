"""Megatron-LM launch arguments (pretrain_gpt.py), one `--flag value` per line of a bash array.

Every option name and choice below was read in NVIDIA/Megatron-LM
`megatron/training/arguments.py` (stored copy, commit 000c4ac):
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
    --pipeline-model-parallel-layout --use-distributed-optimizer
validate_args: at most one of --pipeline-model-parallel-layout, --num-layers-per-virtual-pipeline-stage,
--num-virtual-stages-per-pipeline-rank; a layout of k parts gives vpp = k / pp; selective recompute
takes no --recompute-method; --add-qkv-bias only matters with --disable-bias-linear.
Layout syntax from megatron/core/transformer/pipeline_parallel_layer_layout.py (commit 00caa53):
E embedding, t decoder layer, L loss, `|` between stages, `x*N` repeats; part k is pp rank k mod p,
virtual stage k // p; exactly one E first, one L last, and as many t as --num-layers.
"""
from __future__ import annotations

import shlex

from planner.export.common import Capabilities, layer_segments, resolve
from planner.types import Cluster, MlpKind, NormKind, Plan, PositionKind, Precision, Recompute

CAPS = Capabilities(gpipe=False, zero_stages=(0, 1))
POSITION_TYPES = {PositionKind.LEARNED: "learned_absolute", PositionKind.ROPE: "rope"}


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


def arguments(plan: Plan) -> list[tuple[str, ...]]:
    """(flag,) or (flag, value) pairs, in the order they are written."""
    m, tp = plan.model, plan.stages[0].replicas[0].tp
    args = [("--num-layers", m.layers), ("--hidden-size", m.hidden), ("--ffn-hidden-size", m.ffn),
            ("--num-attention-heads", m.heads), ("--seq-length", plan.seq_len),
            ("--max-position-embeddings", max(plan.seq_len, m.max_positions)),
            ("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", plan.num_stages),
            ("--micro-batch-size", plan.micro_batch), ("--global-batch-size", plan.global_batch)]
    if plan.num_stages > 1:
        args += [("--pipeline-model-parallel-layout", layout_string(plan))]
    if m.kv_heads != m.heads:
        args += [("--group-query-attention",), ("--num-query-groups", m.kv_heads)]
    args += [("--bf16",)] if plan.precision == Precision.BF16 else [("--fp16",)]
    if plan.recompute == Recompute.FULL:
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    elif plan.recompute == Recompute.SELECTIVE:
        args += [("--recompute-granularity", "selective")]
    if plan.sequence_parallel and tp > 1:
        args += [("--sequence-parallel",)]
    if plan.zero_stage == 1:
        args += [("--use-distributed-optimizer",)]
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
    return [tuple(str(x) for x in a) for a in args]


def model_warnings(plan: Plan) -> list[str]:
    """Model features Megatron-LM's GPT arguments have no choice for (the run would differ from the plan)."""
    m, out = plan.model, []
    if m.position not in POSITION_TYPES:
        out.append(f"Megatron-LM's --position-embedding-type has no {m.position.value}; {m.id} needs a custom model")
    if m.mlp == MlpKind.RELU:
        out.append(f"Megatron-LM has no plain ReLU MLP (only gelu, --swiglu, --squared-relu); {m.id} needs a custom model")
    biased = (m.qkv_bias, m.out_bias, m.mlp_bias)
    if any(biased) and not all(biased) and biased != (True, False, False):
        out.append(f"Megatron-LM sets biases for all linear layers or, with --add-qkv-bias, for QKV only; "
                   f"{m.id} has qkv/out/mlp bias {list(biased)}")
    return out


def script(args: list[tuple[str, ...]], notes: list[str]) -> str:
    lines = ["#!/usr/bin/env bash", "# Megatron-LM arguments written by `hetplan export --to megatron`.",
             "# Pass them to pretrain_gpt.py under torchrun (see the torchrun export for the launch):",
             '#   torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" --data-path ... --tokenizer-type ...',
             *[f"# note: {w}" for w in notes],
             "MEGATRON_ARGS=(", *["  " + " ".join(shlex.quote(x) for x in a) for a in args], ")", ""]
    return "\n".join(lines)


def export(plan: Plan, cluster: Cluster):
    target, warnings, closest, est = resolve(plan, cluster, CAPS, "Megatron-LM")
    notes = warnings + model_warnings(target)
    return {"megatron_args.sh": script(arguments(target), notes)}, notes, target, closest, est
