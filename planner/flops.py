"""Parameter counts and floating-point work of a decoder-only transformer.

Symbols: h hidden, f ffn, V vocabulary, s sequence length, b micro-batch, a heads,
g = kv_heads * head_dim (the key/value width, < h under grouped-query attention).
"""
from __future__ import annotations

from planner.types import MlpKind, Model, NormKind, PositionKind


def _norm_params(model: Model) -> int:
    return 2 * model.hidden if model.norm == NormKind.LAYERNORM else model.hidden


def attention_params(model: Model) -> int:
    h, g = model.hidden, model.kv_heads * model.head_dim
    weights = h * h + 2 * h * g + h * h          # q, k, v, o projections
    bias = (h + 2 * g if model.qkv_bias else 0) + (h if model.out_bias else 0)
    return weights + bias


def expert_params(model: Model) -> int:
    h, f = model.hidden, model.ffn
    matrices = 3 if model.mlp == MlpKind.SWIGLU else 2
    bias = f + h if model.mlp_bias else 0
    return matrices * h * f + bias


def layer_params(model: Model, active_only: bool = False) -> int:
    """Parameters of one transformer layer (two norms, attention, MLP or experts + router)."""
    experts = model.top_k if active_only else model.experts
    router = model.hidden * model.experts if model.is_moe else 0
    return 2 * _norm_params(model) + attention_params(model) + experts * expert_params(model) + router


def embedding_params(model: Model) -> int:
    """Token (and learned position) embeddings, held by the first stage."""
    h = model.hidden
    width = model.embed_proj_dim or h
    tokens = model.vocab * width
    positions = model.max_positions * h if model.position == PositionKind.LEARNED else 0
    projection = 2 * width * h if model.embed_proj_dim else 0   # OPT-350m project_in / project_out
    embed_norm = _norm_params(model) if model.embed_norm else 0
    return tokens + positions + projection + embed_norm


def head_params(model: Model) -> int:
    """Final norm and output projection, held by the last stage (shares the embedding when tied)."""
    final_norm = _norm_params(model) if model.final_norm else 0
    output = 0 if model.tied_embeddings else model.vocab * model.hidden
    return final_norm + output


def model_params(model: Model, active_only: bool = False) -> int:
    return (embedding_params(model) + model.layers * layer_params(model, active_only)
            + head_params(model))


def stage_params(model: Model, layer_start: int, layer_end: int, num_stages_total: int) -> int:
    """Parameters a pipeline stage holds (stage_param_count of its range)."""
    return stage_param_count(model, layer_end - layer_start, layer_start == 0, layer_end == model.layers,
                             num_stages_total)


def stage_param_count(model: Model, num_layers: int, first: bool, last: bool, num_stages_total: int) -> int:
    """Parameters of a stage of `num_layers` layers; the first holds the embedding, the last the
    head. With tied embeddings and more than one stage, the last stage keeps its own copy of the
    word embedding for the head (as Megatron-LM does)."""
    return num_layers * layer_params(model) + edge_param_count(model, first, last, num_stages_total)


def edge_param_count(model: Model, first: bool, last: bool, num_stages_total: int) -> int:
    """The parameters of stage_param_count other than its layers."""
    n = embedding_params(model) if first else 0
    if last:
        n += head_params(model)
        if model.tied_embeddings and num_stages_total > 1:
            n += model.vocab * (model.embed_proj_dim or model.hidden)
    return n


# ----------------------------------------------------------------------------- FLOPs

def layer_matmul_flops_per_token(model: Model) -> float:
    """Forward matmul FLOPs of one layer per token: 2 per active weight (Kaplan et al. 2020, 2N)."""
    h, g = model.hidden, model.kv_heads * model.head_dim
    attention = 2 * (2 * h * h + 2 * h * g)
    mlp = 2 * model.top_k * (3 if model.mlp == MlpKind.SWIGLU else 2) * h * model.ffn
    router = 2 * h * model.experts if model.is_moe else 0
    return attention + mlp + router


def layer_attention_flops_per_token(model: Model, seq_len: int) -> float:
    """Forward FLOPs of Q·K^T and scores·V per token: 2·s·h each, no causal discount
    (the convention of Narayanan et al. 2021 and PaLM, Chowdhery et al. 2022, appendix B)."""
    return 4 * seq_len * model.hidden


def layer_forward_flops(model: Model, seq_len: int, tokens: float) -> float:
    return tokens * (layer_matmul_flops_per_token(model) + layer_attention_flops_per_token(model, seq_len))


def head_forward_flops(model: Model, tokens: float) -> float:
    """Logits: 2·h·V per token (Narayanan et al. 2021, eq. 3's V/(16 l h) term)."""
    return tokens * 2 * model.hidden * model.vocab


def model_flops_per_iteration(model: Model, seq_len: int, global_batch: int) -> float:
    """Model FLOPs (no recomputation): 3× the forward pass, backward being twice the forward."""
    tokens = global_batch * seq_len
    forward = model.layers * layer_forward_flops(model, seq_len, tokens) + head_forward_flops(model, tokens)
    return 3 * forward


def megatron_flops_with_recompute(layers: int, hidden: int, vocab: int, seq_len: int, batch: int) -> float:
    """Narayanan et al. 2021 (SC21), eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)),
    counting the full-recompute forward; used to compare with that paper's TFLOP/s."""
    B, s, l, h, V = batch, seq_len, layers, hidden, vocab
    return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
