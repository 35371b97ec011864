"""Megatron-LM launch arguments (pretrain_gpt.py).

Option names checked against Megatron-LM's megatron/training/arguments.py and its docs
(docs: "Custom Pipeline Model Parallel Layout", `--pipeline-model-parallel-layout`, experimental:
E embedding, t transformer layer, L loss/head, `|` between (virtual) stages, `*N` repetition,
stages listed virtual-stage-major, so with v chunks per rank the layout has p * v parts and
implies v). Recompute: --recompute-granularity full|selective, --recompute-method uniform|block,
--recompute-num-layers. ZeRO-1: --use-distributed-optimizer.
"""
from __future__ import annotations

import shlex

from planner.export.common import Capabilities, layer_segments, resolve
from planner.types import Cluster, MlpKind, NormKind, Plan, PositionKind, Precision, Recompute

CAPS = Capabilities(gpipe=False, zero_stages=(0, 1))


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


def arguments(plan: Plan) -> list[str]:
    m, tp = plan.model, plan.stages[0].replicas[0].tp
    args = ["--num-layers", m.layers, "--hidden-size", m.hidden, "--ffn-hidden-size", m.ffn,
            "--num-attention-heads", m.heads, "--seq-length", plan.seq_len,
            "--max-position-embeddings", max(plan.seq_len, m.max_positions),
            "--tensor-model-parallel-size", tp, "--pipeline-model-parallel-size", plan.num_stages,
            "--micro-batch-size", plan.micro_batch, "--global-batch-size", plan.global_batch]
    if plan.num_stages > 1:
        args += ["--pipeline-model-parallel-layout", layout_string(plan)]
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", "--num-query-groups", m.kv_heads]
    args += ["--bf16"] if plan.precision == Precision.BF16 else ["--fp16"]
    if plan.recompute == Recompute.FULL:
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    elif plan.recompute == Recompute.SELECTIVE:
        args += ["--recompute-granularity", "selective"]
    if plan.sequence_parallel and tp > 1:
        args += ["--sequence-parallel"]
    if plan.zero_stage == 1:
        args += ["--use-distributed-optimizer"]
    if m.mlp == MlpKind.SWIGLU:
        args += ["--swiglu"]
    if m.norm == NormKind.RMSNORM:
        args += ["--normalization", "RMSNorm"]
    if m.position == PositionKind.ROPE:
        args += ["--position-embedding-type", "rope"]
    if not m.tied_embeddings:
        args += ["--untie-embeddings-and-output-weights"]
    if not (m.qkv_bias or m.out_bias or m.mlp_bias):
        args += ["--disable-bias-linear"]
    elif m.qkv_bias and not (m.out_bias or m.mlp_bias):
        args += ["--disable-bias-linear", "--add-qkv-bias"]
    return [str(a) for a in args]


def export(plan: Plan, cluster: Cluster):
    target, warnings, closest, est = resolve(plan, cluster, CAPS, "Megatron-LM")
    args = arguments(target)
    lines = ["#!/usr/bin/env bash", "# Megatron-LM arguments written by `hetplan export --to megatron`.",
             "# Pass them to pretrain_gpt.py under torchrun (see torchrun export for the launch).",
             *[f"# note: {w}" for w in warnings],
             "MEGATRON_ARGS=(", *[f"  {shlex.quote(a)}" for a in args], ")", ""]
    return {"megatron_args.sh": "\n".join(lines)}, warnings, target, closest, est
