"""The scaled-down model a plan runs on: same family and depth, small width.

Kept from the planned model: layer count (hence the plan's split), gated vs plain MLP and its
activation, norm kind, position kind (learned / rotary), biases, tied embeddings, embedding norm,
final norm, and the grouped-query ratio heads / kv_heads (capped at 4). Shrunk: head count and
width (tensor-parallel degrees must divide the kv heads), vocabulary and sequence length (a multiple
of 2 x the context-parallel degree, which cuts it into that many chunks).
Not kept: mixture-of-experts (run as the dense model), ALiBi (run without positions),
OPT's embedding projection. `notes` says which of these applied.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from planner.types import InputError, MlpKind, Model, NormKind, Plan, PositionKind

HEAD_DIM = 8
MAX_GQA_RATIO = 4


@dataclass(frozen=True)
class TinyConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    mlp: str
    norm: str
    position: str
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    tied_embeddings: bool
    embed_norm: bool
    final_norm: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def to_dict(self) -> dict:
        return asdict(self)


def _lcm(values) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def scaled_config(plan: Plan, hidden: int | None = None, seq_len: int = 16, vocab: int = 96) -> tuple[TinyConfig, list[str]]:
    """The small model for `plan`, and notes on what of the real model it does not keep."""
    model: Model = plan.model
    tp_all = _lcm(r.tp for s in plan.stages for r in s.replicas)
    ratio = min(model.heads // model.kv_heads, MAX_GQA_RATIO)
    kv_heads = tp_all
    heads = kv_heads * ratio
    if hidden is None:
        hidden = heads * HEAD_DIM
    if hidden % heads:
        raise InputError("--hidden", f"{hidden} is not divisible by the small model's {heads} heads "
                                     f"(kv heads {kv_heads} = lcm of the plan's tp degrees, GQA ratio {ratio})")
    ffn = max(tp_all, round(model.ffn / model.hidden * hidden / tp_all) * tp_all)
    notes = []
    chunks = 2 * plan.context_parallel if plan.context_parallel > 1 else 1
    if seq_len % chunks:
        rounded = -(-seq_len // chunks) * chunks
        notes.append(f"sequence length {seq_len} rounded up to {rounded}: context parallelism of "
                     f"{plan.context_parallel} cuts it into {chunks} equal chunks")
        seq_len = rounded
    if model.is_moe:
        notes.append(f"{model.id} is a mixture of experts; the scaled model is dense (one expert)")
    if model.position == PositionKind.ALIBI:
        notes.append("ALiBi is not implemented in the runner; the scaled model has no position encoding")
    if model.embed_proj_dim:
        notes.append("the embedding projection (embed_proj_dim) is left out")
    position = model.position.value if model.position != PositionKind.ALIBI else "none"
    cfg = TinyConfig(layers=model.layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                     vocab=max(vocab, 8), seq_len=seq_len, mlp=MlpKind(model.mlp).value,
                     norm=NormKind(model.norm).value, position=position, qkv_bias=model.qkv_bias,
                     out_bias=model.out_bias, mlp_bias=model.mlp_bias, tied_embeddings=model.tied_embeddings,
                     embed_norm=model.embed_norm, final_norm=model.final_norm)
    return cfg, notes
