"""Parameter counts and floating-point work of a decoder-only transformer.

Symbols: h hidden, f ffn, V vocabulary, s sequence length, b micro-batch, a heads,
g = kv_heads * head_dim (the key/value width, < h under grouped-query attention).
"""
from __future__ import annotations

from planner.types import MlpKind, Model, NormKind, PositionKind, Training


def _norm_params(model: Model) -> int:
    return 2 * model.hidden if model.norm == NormKind.LAYERNORM else model.hidden


def attention_weights(model: Model) -> int:
    """Weights of one layer's attention projections.
    Standard (grouped-query) attention: q (h x a d), k and v (h x g each), o (a d x h).
    Multi-head latent attention (DeepSeek-V2 paper, section 2.1; DeepSeek-V3 config.json): q through
    a rank-q_lora bottleneck to a heads of (d_nope + d_rope), k and v jointly compressed to kv_lora
    (plus the shared rope key d_rope), expanded to a heads of (d_nope + d_v), o from a d_v; the two
    bottleneck norms."""
    h, a, d = model.hidden, model.heads, model.head_dim
    if not model.is_mla:
        g = model.kv_heads * d
        return h * a * d + 2 * h * g + a * d * h
    qk, rope, v = d + model.qk_rope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    q = (h * model.q_lora_rank + model.q_lora_rank + model.q_lora_rank * a * qk if model.q_lora_rank
         else h * a * qk)
    kv = h * (model.kv_lora_rank + rope) + model.kv_lora_rank + model.kv_lora_rank * a * (d + v)
    return q + kv + a * v * h


def attention_params(model: Model) -> int:
    g = model.kv_heads * model.head_dim
    bias = ((model.heads * model.head_dim + 2 * g) if model.qkv_bias else 0) + (model.hidden if model.out_bias else 0)
    return attention_weights(model) + bias


def _mlp_params(model: Model, width: int) -> int:
    matrices = 3 if model.mlp == MlpKind.SWIGLU else 2
    bias = width + model.hidden if model.mlp_bias else 0
    return matrices * model.hidden * width + bias


def expert_params(model: Model) -> int:
    """One expert's MLP (`moe_ffn` wide, or `ffn` when unset)."""
    return _mlp_params(model, model.moe_ffn or model.ffn)


def total_layer_params(model: Model, active_only: bool = False) -> int:
    """Parameters of all transformer layers: dense layers (two norms, attention, an `ffn`-wide MLP)
    and MoE layers (two norms, attention, the routed experts (top_k of them when `active_only`),
    the shared experts and the router)."""
    base = 2 * _norm_params(model) + attention_params(model)
    moe = model.moe_layers
    routed = model.top_k if active_only else model.experts
    moe_layer = base + (routed + model.shared_experts) * expert_params(model) + model.hidden * model.experts
    return (model.layers - moe) * (base + _mlp_params(model, model.ffn)) + moe * moe_layer


def layer_params(model: Model, active_only: bool = False) -> float:
    """Parameters of one transformer layer; for models whose layers differ (dense and MoE layers),
    their mean: the planner treats layers as alike, so a stage of n layers holds n means (an
    approximation for DeepSeek-V3's first dense layers and Llama 4's alternation, exact in total)."""
    total = total_layer_params(model, active_only)
    return total // model.layers if total % model.layers == 0 else total / model.layers


def expert_layer_params(model: Model) -> float:
    """The routed experts' parameters of one layer, the mean over the layers (as layer_params); the
    part expert parallelism shards."""
    if not model.is_moe:
        return 0.0
    return model.moe_layers * model.experts * expert_params(model) / model.layers


def param_shards(params: float, num_layers: int, model: Model, tp: int, ranks: int,
                 expert_parallel: int = 1, expert_tp: int = 0) -> tuple[tuple[float, int], ...]:
    """A stage's `params` as (parameters per GPU, ranks that hold the same ones and reduce and shard
    them together) for a replica of `tp` GPUs among `ranks` data-parallel (x context-parallel)
    ranks. Expert parallelism over `expert_parallel` of them keeps 1/ep of the routed experts on
    each, reduced and sharded over ranks / ep (Megatron-LM's expert-data-parallel group), each expert
    split over `expert_tp` GPUs (0: tp, Megatron's default): an expert group is etp x ep of the stage's
    tp x ranks GPUs, so tp x ranks / (etp x ep) of them hold the same expert shard."""
    if expert_parallel == 1 and expert_tp in (0, tp):
        return ((params / tp, ranks),)
    etp = expert_tp or tp
    experts = num_layers * expert_layer_params(model)
    return (((params - experts) / tp, ranks), (experts / (etp * expert_parallel), ranks * tp // (etp * expert_parallel)))


def expert_matmul_share(model: Model) -> float:
    """The share of a layer's projection FLOPs (the mean layer's) that routed experts do."""
    if not model.is_moe:
        return 0.0
    matrices = 3 if model.mlp == MlpKind.SWIGLU else 2
    routed = model.moe_layers / model.layers * model.top_k * matrices * model.hidden * (model.moe_ffn or model.ffn)
    return 2 * routed / layer_matmul_flops_per_token(model)


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
    return embedding_params(model) + total_layer_params(model, active_only) + head_params(model)


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
    """Forward matmul FLOPs of one layer per token: 2 per active weight (Kaplan et al. 2020, 2N),
    the mean over the layers when dense and MoE layers differ."""
    matrices = 3 if model.mlp == MlpKind.SWIGLU else 2
    h, moe, L = model.hidden, model.moe_layers, model.layers
    dense_mlp = matrices * h * model.ffn
    moe_mlp = (model.top_k + model.shared_experts) * matrices * h * (model.moe_ffn or model.ffn) + h * model.experts
    mlp = ((L - moe) * dense_mlp + moe * moe_mlp) / L if moe else dense_mlp
    return 2 * (attention_weights(model) + mlp)


def layer_attention_flops_per_token(model: Model, seq_len: int) -> float:
    """Forward FLOPs of Q·K^T and scores·V per token: 2·s·h each (h = heads x head width), no
    causal discount (the convention of Narayanan et al. 2021 and PaLM, Chowdhery et al. 2022,
    appendix B); latent attention: q·k over d_nope + d_rope and scores·v over d_v."""
    a, d = model.heads, model.head_dim
    if model.is_mla:
        return 2 * seq_len * a * (d + model.qk_rope_head_dim) + 2 * seq_len * a * model.v_head_dim
    return 4 * seq_len * a * d


def layer_forward_flops(model: Model, seq_len: int, tokens: float) -> float:
    return tokens * (layer_matmul_flops_per_token(model) + layer_attention_flops_per_token(model, seq_len))


def head_forward_flops(model: Model, tokens: float) -> float:
    """Logits: 2·h·V per token (Narayanan et al. 2021, eq. 3's V/(16 l h) term)."""
    return tokens * 2 * model.hidden * model.vocab


def model_flops_factor(training: Training) -> float:
    """Model FLOPs per iteration in forwards: 3 (forward, backward twice the forward), or 2 for
    adapter jobs (forward and the input gradients; the adapters' own work is negligible)."""
    return 2.0 if training.adapters else 3.0


def model_flops_per_iteration(model: Model, seq_len: int, global_batch: int, training=None) -> float:
    """Model FLOPs (no recomputation): 3× the forward pass, backward being twice the forward; for
    adapter jobs 2x (model_flops_factor: no weight gradients for the frozen base)."""
    tokens = global_batch * seq_len
    forward = model.layers * layer_forward_flops(model, seq_len, tokens) + head_forward_flops(model, tokens)
    return (3 if training is None else model_flops_factor(training)) * forward


def megatron_flops_with_recompute(layers: int, hidden: int, vocab: int, seq_len: int, batch: int) -> float:
    """Narayanan et al. 2021 (SC21), eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)),
    counting the full-recompute forward; used to compare with that paper's TFLOP/s."""
    B, s, l, h, V = batch, seq_len, layers, hidden, vocab
    return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
