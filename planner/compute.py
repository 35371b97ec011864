"""Time of one micro-batch's forward and backward pass through a stage on one GPU type.

Each layer costs its matrix multiplications at the GPU's achievable matmul rate, its
element-wise work (norms, activations, dropout, residuals, softmax) at the GPU's memory
bandwidth, and its tensor-parallel collectives (Megatron-LM: two per layer forward, two
backward, two more when a full recompute reruns the forward; Shoeybi et al. 2019, figure 4;
Korthikanti et al. 2022, section 4.2.2 for the all-gather/reduce-scatter pairs under sequence
parallelism, which move the same bytes). Tensor-parallel collectives are not overlapped.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.comm import INTRA_NODE_LATENCY_S, all_reduce_s
from planner.flops import (head_forward_flops, layer_attention_flops_per_token,
                           layer_matmul_flops_per_token)
from planner.numerics import FP8_CAST_BYTES, linear_peak_flops, numerics, other_peak_flops
from planner.types import Gpu, MlpKind, Model, Precision, Recompute

ACT_BYTES = 2  # 16-bit activations (planner.numerics: 4 in fp32), the least of any precision

# Matmuls whose smallest dimension is n reach n / (n + GEMM_HALF_DIM) of the GPU's best matmul
# rate: a saturating roll-off for the wave quantisation and memory-bound tails of small GEMMs
# (NVIDIA, "Matrix Multiplication Background User's Guide"; at n = 1024 this gives 0.89,
# close to the 85-90% cuBLAS reaches on A100 for 1k-wide GEMMs vs 8k-wide ones).
GEMM_HALF_DIM = 128

# The catalog's `efficiency` is each GPU's best measured large-GEMM rate (stas00/ml-engineering,
# "maximum achievable matmul FLOPS"). The GEMMs of a training step (mixed shapes, transposed
# operands in the backward pass, bias/activation epilogues) run a little below that ceiling.
# One global factor for every GPU and row: 0.944, the value at which the A100 rows of both
# validation data sets (Narayanan 2021 Table 1, Korthikanti 2022 Table 5; 18 rows) have the
# smallest mean error (docs/validation.md); it puts A100 training GEMMs at 82% of peak.
TRAINING_GEMM_DERATE = 0.944

# Attention batched matmuls (Q K^T, scores V) run per head on head_dim-wide operands and reach
# about half the rate of the projection GEMMs (Dao et al. 2022, FlashAttention, figure 1 and
# table 1: standard attention at 30-50% of A100 peak).
ATTENTION_MATMUL_SLOWDOWN = 2.0

# Element-wise kernels stream at about 80% of HBM bandwidth (STREAM-like copy benchmarks on
# A100/H100 reach 1.3-1.6 TB/s of 1.55-2.0, and 2.6-3.0 of 3.35 TB/s).
MEM_BW_EFFICIENCY = 0.8

# Passes over an s*b*h tensor in one layer's forward element-wise kernels: two norms (read +
# write each: 4), two bias-dropout-residual-adds (read input, residual, write, mask: ~7),
# the q/k/v split and rotary/bias work (~3) = 14, as fused in Megatron-LM.
ELEMENTWISE_PASSES_HIDDEN = 14
# Passes over an s*b*f tensor: activation function (read + write: 2; gated: read two, write one: 3)
ELEMENTWISE_PASSES_FFN = {MlpKind.GELU: 2, MlpKind.RELU: 2, MlpKind.SWIGLU: 3}
# Passes over the a*s*s*b score tensor without flash attention: fused scale-mask-softmax
# read + write, dropout read + write + mask (Korthikanti et al. 2022, section 4.1)
ELEMENTWISE_PASSES_SCORES = 5


@dataclass(frozen=True)
class PassTimes:
    forward_s: float
    backward_s: float
    tp_comm_s: float          # per micro-batch, forward + backward, included in the two above
    compute_s: float          # per micro-batch, forward + backward, excluding communication


def gemm_efficiency(gpu: Gpu, smallest_dim: float) -> float:
    return gpu.efficiency * TRAINING_GEMM_DERATE * smallest_dim / (smallest_dim + GEMM_HALF_DIM)


def _matmul_s(flops: float, gpu: Gpu, smallest_dim: float, peak_flops: float | None = None) -> float:
    """At `peak_flops` (default: the 16-bit peak) times the GPU's measured matmul efficiency, the
    same fraction for every precision (measured_matmul.csv measures bf16 only: an assumption)."""
    return flops / ((gpu.peak_flops if peak_flops is None else peak_flops) * gemm_efficiency(gpu, smallest_dim))


def _memory_s(num_bytes: float, gpu: Gpu) -> float:
    return num_bytes / (gpu.mem_bw_bytes_per_s * MEM_BW_EFFICIENCY)


def layer_forward_parts(model: Model, gpu: Gpu, seq_len: int, micro_batch: int, tp: int,
                        sequence_parallel: bool, flash_attention: bool, precision: Precision | None = None,
                        tf32: bool = False) -> tuple[float, float, float]:
    """(projection matmuls, attention core, other element-wise work) seconds of one layer's
    forward. The attention core (Q K^T, softmax, dropout, scores V) is what selective
    recomputation reruns. `precision` (planner.numerics): the GEMMs' peaks and the bytes each
    element-wise pass moves; FP8 adds the casts of its GEMM inputs."""
    s, b, t, h = seq_len, micro_batch, tp, model.hidden
    tokens = s * b
    act_bytes = numerics(precision).act_bytes
    smallest = min(tokens, h / t, model.ffn / t)
    projections = _matmul_s(tokens * layer_matmul_flops_per_token(model) / t, gpu, smallest,
                            linear_peak_flops(gpu, precision, tf32))
    attention_flops = tokens * layer_attention_flops_per_token(model, s) / t
    attention = ATTENTION_MATMUL_SLOWDOWN * _matmul_s(attention_flops, gpu, min(s, model.head_dim * 8),
                                                      other_peak_flops(gpu, precision, tf32))
    hidden_passes = ELEMENTWISE_PASSES_HIDDEN * tokens * h / (t if sequence_parallel else 1)
    ffn_passes = ELEMENTWISE_PASSES_FFN[model.mlp] * tokens * model.ffn * model.top_k / t
    if flash_attention:
        attention /= ATTENTION_MATMUL_SLOWDOWN  # fused kernel runs near GEMM rate (Dao 2023, FA-2)
    else:
        score_passes = ELEMENTWISE_PASSES_SCORES * model.heads * s * s * b / t
        attention += _memory_s(act_bytes * score_passes, gpu)
    elementwise = _memory_s(act_bytes * (hidden_passes + ffn_passes), gpu)
    if precision == Precision.FP8:
        elementwise += _memory_s(FP8_CAST_BYTES * tokens * fp8_gemm_inputs_per_token(model) / t, gpu)
    return projections, attention, elementwise


def fp8_gemm_inputs_per_token(model: Model) -> float:
    """Elements per token cast to FP8 in one layer's forward: the inputs of the QKV, output and MLP
    GEMMs (h, h, h, and f or the gated f); the backward casts as many gradient outputs, which
    the backward pass's 2x of the forward covers."""
    return 3 * model.hidden + model.ffn * model.top_k


def tp_collective_s(model: Model, seq_len: int, micro_batch: int, tp: int, link_bw: float,
                    precision: Precision | None = None) -> float:
    """One all-reduce (or all-gather + reduce-scatter pair) of the s*b*h activation."""
    return all_reduce_s(numerics(precision).act_bytes * seq_len * micro_batch * model.hidden, tp, link_bw,
                        INTRA_NODE_LATENCY_S)


def stage_pass_times(model: Model, gpu: Gpu, num_layers: int, has_head: bool, seq_len: int,
                     micro_batch: int, tp: int, sequence_parallel: bool, recompute: Recompute,
                     flash_attention: bool, link_bw: float, layer_overhead_s: float = 0.0,
                     precision: Precision | None = None, tf32: bool = False) -> PassTimes:
    """One micro-batch's forward and backward through `num_layers` layers (and the head).
    `layer_overhead_s`: the engine's fixed cost per layer and pass (planner.engines.base.Execution);
    `precision` and `tf32`: planner.numerics (None: 16-bit)."""
    proj, attn, elem = layer_forward_parts(model, gpu, seq_len, micro_batch, tp, sequence_parallel,
                                           flash_attention, precision, tf32)
    collective = tp_collective_s(model, seq_len, micro_batch, tp, link_bw, precision)
    layer_fwd = proj + attn + elem + layer_overhead_s
    layer_bwd = 2 * (proj + attn + elem) + layer_overhead_s
    tp_fwd, tp_bwd = 2 * collective, 2 * collective
    if recompute == Recompute.FULL:
        layer_bwd += layer_fwd
        tp_bwd += 2 * collective
    elif recompute == Recompute.SELECTIVE:
        layer_bwd += attn
    head_fwd = head_bwd = 0.0
    if has_head:
        tokens = seq_len * micro_batch
        head_fwd = _matmul_s(head_forward_flops(model, tokens) / tp, gpu, min(tokens, model.hidden),
                             other_peak_flops(gpu, precision, tf32))
        head_fwd += _memory_s(4 * 3 * tokens * model.vocab / tp, gpu)   # fp32 softmax + loss
        head_bwd = 2 * head_fwd
    compute = num_layers * (layer_fwd + layer_bwd) + head_fwd + head_bwd
    tp_total = num_layers * (tp_fwd + tp_bwd)
    return PassTimes(num_layers * (layer_fwd + tp_fwd) + head_fwd,
                     num_layers * (layer_bwd + tp_bwd) + head_bwd, tp_total, compute)
