"""Generation (rollout) time of one engine replica: `tp` GPUs of one pool holding the whole model.

Prefill (the prompts' forward pass) is matmul-bound: it runs at the training cost model's rates
(planner.compute.layer_forward_parts: GEMMs at the GPU's measured matmul ceiling with the small-GEMM
roll-off, element-wise work at memory bandwidth), once per prompt when the engine caches prefixes
(the G samples of a prompt share it), without the output head but for one token.

Decode is one forward step for every running sequence, one token each. Its time is a roofline
(Williams et al., CACM 2009) of two terms, per GPU of the replica:

    bytes  = W / t + b * c * kv / t_kv         weights once per step, each sequence's KV cache
    flops  = b * (2 N_active + attention(c)) / t
    step   = max(bytes / (B_mem * 0.8), flops / (P * e)) + 2 L all-reduce(b * h * 2 bytes, t)

(W: 16-bit weight bytes, c: a sequence's mean context, kv: KV bytes per token, P * e: the GPU's
measured matmul ceiling, B_mem * 0.8: the streaming bandwidth the cost model uses). The batch b is
bounded by the engine's `max_num_seqs` and by the KV cache, paged (Kwon et al. SOSP 2023): the
memory the engine may fill (gpu_memory_utilization) less the weights, activations of a prefill
chunk and what else stays resident (the training states of a colocated actor), over the KV bytes a
running sequence holds on average (its share of the prompt and half its response).

Steps: continuous batching keeps b sequences running; n sequences of mean response R and longest
R_max take S = R_max steps when they all fit at once, otherwise S = max(R_max, n R / b + R_max - R):
the slots drain the n R tokens b at a time, and the longest response holds its slot R_max - R
steps after the mean one would have (the synchronous step waits for it). The batch over those S
steps averages n R / S, at which the step time is taken (affine in b in both roofline terms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.comm import INTRA_NODE_LATENCY_S, all_reduce_s
from planner.compute import MEM_BW_EFFICIENCY, layer_forward_parts
from planner.flops import embedding_params, layer_attention_flops_per_token, layer_matmul_flops_per_token, model_params
from planner.rl.engines import VLLM, RolloutEngine
from planner.types import InputError, Model, Pool, Precision

WEIGHT_BYTES = 2               # 16-bit rollout weights (verl rollout dtype: bfloat16)
KV_ELEMENT_BYTES = 2           # 16-bit KV cache
# Activations of one prefill chunk (vLLM profiles a forward of max_num_batched_tokens and reserves
# its peak): the hidden states and the MLP's intermediate of every chunk token, 16-bit, twice for
# the layer's input and output (an assumption of the live tensors' count).
ACTIVATION_TENSORS = 2


def kv_bytes_per_token(model: Model, tp: int) -> float:
    """KV-cache bytes one token holds on each GPU of a tp-wide replica: keys and values of every
    layer, the KV heads split over tp (replicated when fewer heads than GPUs, as vLLM does);
    latent attention caches the compressed kv and the rotary key, on every GPU."""
    if model.is_mla:
        return model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * KV_ELEMENT_BYTES
    heads_per_gpu = max(1, model.kv_heads // tp) if model.kv_heads >= tp else 1
    return 2 * model.layers * heads_per_gpu * model.head_dim * KV_ELEMENT_BYTES


def weight_bytes_per_gpu(model: Model, tp: int) -> float:
    return WEIGHT_BYTES * model_params(model) / tp


@dataclass(frozen=True)
class Generation:
    """One replica's rollout of `sequences` samples."""
    sequences: int
    prefill_s: float
    decode_s: float
    batch: float                  # sequences running together (the engine's concurrency)
    kv_capacity_tokens: float     # KV-cache tokens each replica holds
    steps: float                  # decode steps
    step_s: float                 # one decode step at the mean batch
    tp_comm_s: float              # the decode's tensor-parallel all-reduces, included in decode_s

    @property
    def time_s(self) -> float:
        return self.prefill_s + self.decode_s


def kv_capacity_tokens(model: Model, pool: Pool, tp: int, engine: RolloutEngine = VLLM,
                       resident_bytes: float = 0.0) -> float:
    """KV-cache tokens a replica holds: the engine's share of memory less weights, a prefill
    chunk's activations and `resident_bytes` per GPU, over the KV bytes per token."""
    act = ACTIVATION_TENSORS * engine.max_num_batched_tokens * (model.hidden + model.ffn) * WEIGHT_BYTES / tp
    free = engine.gpu_memory_utilization * pool.gpu.mem_bytes - weight_bytes_per_gpu(model, tp) - act - resident_bytes
    return max(0.0, free / kv_bytes_per_token(model, tp))


def decode_step_s(model: Model, pool: Pool, tp: int, batch: float, context: float) -> tuple[float, float]:
    """(one decode step's time, its tensor-parallel part) for `batch` sequences of mean `context`."""
    gpu, b, t, L = pool.gpu, batch, tp, model.layers
    weights = WEIGHT_BYTES * (model_params(model) - embedding_params(model)) / t   # embedding: rows looked up
    kv_read = b * context * kv_bytes_per_token(model, t)
    memory_s = (weights + kv_read) / (gpu.mem_bw_bytes_per_s * MEM_BW_EFFICIENCY)
    flops = b * (L * (layer_matmul_flops_per_token(model) + layer_attention_flops_per_token(model, context))
                 + 2 * model.hidden * model.vocab) / t
    compute_s = flops / (gpu.peak_flops * gpu.efficiency)
    tp_s = 2 * L * all_reduce_s(b * model.hidden * WEIGHT_BYTES, t, gpu.link_bw_bytes_per_s, INTRA_NODE_LATENCY_S)
    return max(memory_s, compute_s) + tp_s, tp_s


def prefill_s(model: Model, pool: Pool, tp: int, prompts: int, prompt_len: int, engine: RolloutEngine = VLLM) -> float:
    """Prefill of `prompts` prompts in chunks of the engine's batched tokens: the layers' forward at
    the training cost model's rates and two all-reduces of the chunk's hidden states per layer."""
    if prompts <= 0:
        return 0.0
    chunk = max(1, min(prompts, engine.max_num_batched_tokens // prompt_len))     # whole prompts per chunk
    parts = layer_forward_parts(model, pool.gpu, prompt_len, chunk, tp, False, True, Precision.BF16)
    comm = 2 * all_reduce_s(chunk * prompt_len * model.hidden * WEIGHT_BYTES, tp, pool.gpu.link_bw_bytes_per_s,
                            INTRA_NODE_LATENCY_S)
    chunks = prompts / chunk
    return chunks * model.layers * (sum(parts) + comm)


def generation(model: Model, pool: Pool, tp: int, sequences: int, prompt_len: int, response_len: float,
               response_len_max: int, samples_per_prompt: int = 1, engine: RolloutEngine = VLLM,
               resident_bytes: float = 0.0) -> Generation:
    """The rollout of `sequences` samples (groups of `samples_per_prompt` per prompt) on one replica.
    Raises InputError when the replica cannot hold one whole sequence's KV cache."""
    n, P, R, R_max, G = sequences, prompt_len, response_len, response_len_max, samples_per_prompt
    capacity = kv_capacity_tokens(model, pool, tp, engine, resident_bytes)
    if capacity < P + R_max:
        raise InputError("tp", f"a rollout replica of {tp} {pool.gpu.id} GPU(s) holds {capacity:,.0f} KV-cache tokens, "
                               f"less than one sequence of {P + R_max:,}; use a larger tensor-parallel degree or "
                               f"GPUs with more memory")
    shared = P / G if engine.prefix_caching else P
    held = shared + R / 2                       # KV tokens a running sequence holds on average
    batch = max(1.0, min(engine.max_num_seqs, n, math.floor(capacity / held)))
    tokens = n * R
    steps = R_max if n <= batch else max(R_max, tokens / batch + R_max - R)
    mean_batch = tokens / steps
    step, tp_s = decode_step_s(model, pool, tp, mean_batch, P + R / 2)
    prompts = math.ceil(n / G) if engine.prefix_caching else n
    return Generation(n, prefill_s(model, pool, tp, prompts, P, engine), steps * step, batch, capacity, steps, step,
                      steps * tp_s)
