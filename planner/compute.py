"""Time of one micro-batch's forward and backward pass through a stage on one GPU type.

Each layer costs its matrix multiplications at the GPU's measured matmul rate for their dtype
(bf16 or FP8: measured_matmul.csv), its attention core at FlashAttention-2's measured rate for the
GPU, sequence length and head dim (attention_kernels.csv; or unfused, at half the GEMM rate plus
the score tensor's traffic), its element-wise work (norms, activations, dropout, residuals,
softmax) at the GPU's memory bandwidth, and its tensor-parallel collectives (Megatron-LM: two per layer forward, two
backward, two more when a full recompute reruns the forward; Shoeybi et al. 2019, figure 4;
Korthikanti et al. 2022, section 4.2.2 for the all-gather/reduce-scatter pairs under sequence
parallelism, which move the same bytes). Tensor-parallel collectives are not overlapped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.comm import (INTRA_NODE_LATENCY_S, OVERLAP_COMPUTE_SLOWDOWN, activation_message_bytes, all_reduce_s,
                          overlapped_s)
from planner.engines.base import Execution
from planner.experts import expert_load
from planner.flops import (expert_matmul_share, head_forward_flops, layer_attention_flops_per_token, layer_params,
                           layer_matmul_flops_per_token)
from planner.numerics import FP8_CAST_BYTES, linear_peak_flops, numerics, other_peak_flops
from planner.training import (DEQUANT_BYTES_PER_PARAM, adapter_params_per_layer, backward_projection_factor)
from planner.types import (PRETRAIN, Gpu, JobKind, Kernels, MlpKind, Model, NormKind, PositionKind, Precision,
                           Recompute, SelectiveKind, Training)

ACT_BYTES = 2  # 16-bit activations (planner.numerics: 4 in fp32), the least of any precision

# Matmuls whose smallest dimension is n reach n / (n + n0) of the GPU's best matmul rate, n0 the
# GPU's ops:byte ratio, 16-bit peak FLOP/s over memory bandwidth (NVIDIA, "Matrix Multiplication
# Background User's Guide", "Math and memory bounds": a GEMM is memory-bound below that arithmetic
# intensity; V100's 125 TFLOP/s over 900 GB/s gives its 139). Roofline with the two times added:
# an m x n x k GEMM with n the smallest dimension moves about e*m*k bytes of e-byte elements for
# 2*m*n*k FLOPs, so time = FLOPs/P * (1 + P*e / (2*n*B)); at e = 2 the half point is n0 = P/B, and
# FP8 (P doubled, e halved) and TF32 (P halved, e = 4) share it. A100: 153; H100 SXM: 295, so an
# H100 GEMM of the same shape reaches a smaller fraction of its best rate than an A100's (below 8k).
def gemm_half_dim(gpu: Gpu) -> float:
    return gpu.peak_flops / gpu.mem_bw_bytes_per_s


# The catalog's `efficiency` is each GPU's best measured large-GEMM rate over its peak (stas00/ml-engineering,
# "maximum achievable matmul FLOPS", measured_matmul.csv), `fp8_efficiency` the same for FP8 GEMMs; the
# roll-off above is the only further loss (no global factor: the former 0.948 was chosen for the A100 rows).
# A GPU with FP8 tensor cores but no FP8 row takes its bf16 efficiency times the median FP8/bf16 ratio of the
# eight parts measured in both (Gaudi 2 0.986, GH200 0.926, Gaudi 3 1.038, B200 0.983, B300 0.948, H200 0.914
# against the H100 row the source says it shares, GB200 0.992, H100 0.883): 0.966. TF32 and plain fp32
# GEMMs are not measured: they take the bf16 efficiency (an assumption, said in the plan's notes).
UNMEASURED_FP8_OVER_BF16 = 0.966

# Attention batched matmuls (Q K^T, scores V) without a fused kernel run per head on head_dim-wide operands
# and reach about half the rate of the projection GEMMs (Dao et al. 2022, FlashAttention, figure 1 and
# table 1: standard attention at 30-50% of A100 peak).
ATTENTION_MATMUL_SLOWDOWN = 2.0

# FlashAttention-2 forward + backward, causal, TFLOP/s counted as its benchmark counts them
# (Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py `flops`: 4 s^2 a d b per forward, halved
# for the causal mask, the backward 2.5x the forward), by head dim and sequence length 512, 1k, 2k, 4k, 8k,
# 16k: reference attention_kernels.csv (flash-attention@0251105a README charts, hidden 2048, 16k tokens a
# batch), with the GPU's best measured bf16 matmul TFLOP/s (measured_matmul.csv) each is a fraction of.
ATTENTION_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
FLASH_ATTENTION_2 = {
    "a100-80gb-sxm": (271.2, {64: (88, 119, 140, 156, 165, 171), 128: (99, 133, 155, 173, 182, 189)}),
    "h100-sxm": (794.5, {64: (141, 192, 232, 257, 273, 284), 128: (163, 221, 265, 294, 308, 328)}),
}
# A GPU without a measured attention kernel (catalog attention_kernels_of absent) takes A100's fractions.
UNMEASURED_ATTENTION_GPU = "a100-80gb-sxm"
# FlashAttention's backward does 2.5x its forward's FLOPs (it recomputes the scores; benchmark `flops`);
# unfused attention's backward twice the forward, as every other matmul.
FLASH_BACKWARD_OVER_FORWARD = 2.5


def _interpolate(xs: tuple, ys: tuple, x: float) -> float:
    """Piecewise linear in x, held at the ends."""
    if x <= xs[0]:
        return ys[0]
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def flash_attention_flops_per_s(gpu: Gpu, seq_len: float, head_dim: int) -> float:
    """The rate of causal FlashAttention-2 forward + backward on `gpu`, in its benchmark's FLOPs: the
    measured rate of the GPU named by gpu.attention_kernels_of (UNMEASURED_ATTENTION_GPU when none) as a
    fraction of that GPU's measured matmul rate, times this GPU's measured matmul rate; sequence length
    interpolated on log2, head dim linearly between 64 and 128 (held outside)."""
    matmul_tflops, by_head_dim = FLASH_ATTENTION_2.get(gpu.attention_kernels_of, FLASH_ATTENTION_2[UNMEASURED_ATTENTION_GPU])
    x = math.log2(max(seq_len, 1.0))
    rate = {d: _interpolate(tuple(math.log2(n) for n in ATTENTION_SEQ_LENS), rates, x) for d, rates in by_head_dim.items()}
    tflops = _interpolate((64, 128), (rate[64], rate[128]), head_dim)
    return tflops / matmul_tflops * gpu.efficiency * gpu.peak_flops


def speed_notes(gpus: list[Gpu], precision: Precision, tf32: bool, flash_attention: bool) -> tuple[str, ...]:
    """What of the plan's GPU speeds no measurement backs, one note per GPU (and one for TF32)."""
    notes = []
    for gpu in gpus:
        missing = []
        if gpu.efficiency_note.startswith("estimate"):
            missing.append(f"its matmul rate (efficiency {gpu.efficiency:.2f} is an estimate)")
        if precision == Precision.FP8 and not gpu.fp8_efficiency:
            missing.append(f"its FP8 matmul rate (bf16's x {UNMEASURED_FP8_OVER_BF16})")
        if flash_attention and gpu.attention_kernels_of != gpu.id:
            stand_in = gpu.attention_kernels_of or UNMEASURED_ATTENTION_GPU
            missing.append(f"its attention kernels ({stand_in}'s FlashAttention-2 rates stand in)")
        if missing:
            notes.append(f"{gpu.id}: no measurement of " + ", ".join(missing))
    if precision == Precision.FP32:
        notes.append("fp32 matmuls " + ("on TF32 tensor cores" if tf32 else "at the plain fp32 rate")
                     + " (the plan's tf32 or the engine's default) at the bf16-measured efficiency: "
                       "no TF32 or fp32 matmul rate is measured")
    return tuple(notes)


def attention_backward_over_forward(flash_attention: bool) -> float:
    return FLASH_BACKWARD_OVER_FORWARD if flash_attention else 2.0


# Element-wise kernels stream at about 80% of HBM bandwidth (STREAM-like copy benchmarks on
# A100/H100 reach 1.3-1.6 TB/s of 1.55-2.0, and 2.6-3.0 of 3.35 TB/s).
MEM_BW_EFFICIENCY = 0.8

# Passes over an s*b*h tensor in one layer's forward element-wise kernels: two norms (read +
# write each: 4), two bias-dropout-residual-adds (read input, residual, write, mask: ~7),
# the q/k/v split and rotary/bias work (~3) = 14, as fused in Megatron-LM.
ELEMENTWISE_PASSES_HIDDEN = 14
# Passes over an s*b*f tensor: activation function (read + write: 2; gated: read two, write one: 3)
ELEMENTWISE_PASSES_FFN = {MlpKind.GELU: 2, MlpKind.RELU: 2, MlpKind.SWIGLU: 3}


# Eager PyTorch, counted from torchtitan's Llama (torchtitan/models/llama3/model/model.py @v0.2.2;
# torchtitan/models/llama/model.py @9dec370): the passes eager kernels add to the fused count
# above (which already holds the norms, the residual adds and ~3 for the q/k/v and rotary work),
# 16-bit passes of read + write per element:
#   rotary (apply_rotary_emb) on q and k: x.float() (read 2 B, write 4 B = 3 passes), complex
#     multiply (read 4 B, write 4 B = 4), type_as (read 4 B, write 2 B = 3)            10 per element
#   repeat_kv under grouped-query attention: expand + reshape of k and v (read g, write h)
#   attention output transpose(1, 2).contiguous(): read + write                          2
#   SwiGLU F.silu(w1(x)) * w3(x): silu (read + write f) and the product (read 2f, write f) 5 per f,
#     2 more than the fused kernel's 3
#   a norm as torchtitan's composite RMSNorm (x.float(), pow, mean, x * rsqrt, type_as, * weight:
#     3 + 4 + 2 + 4 + 3 + 2 = 18 passes) instead of one kernel's 2 (nn.RMSNorm is one fused CUDA
#     kernel since pytorch/pytorch#153666; torchtitan's Triton fused_rmsnorm before): 16 more each
EAGER_ROTARY_PASSES = 10
EAGER_TRANSPOSE_PASSES = 2
EAGER_FFN_PASSES = {MlpKind.GELU: 2, MlpKind.RELU: 2, MlpKind.SWIGLU: 5}
COMPOSITE_RMSNORM_EXTRA_PASSES = 16


def elementwise_elements_per_token(model: Model, kernels: Kernels = Kernels.FUSED) -> tuple[float, float]:
    """(elements over the hidden-wide tensors, over the MLP-wide ones) that one layer's forward
    element-wise kernels read and write per token, in 16-bit passes; eager is never below fused."""
    h, g, f = model.hidden, model.kv_heads * model.head_dim, model.ffn * model.top_k
    hidden, ffn = ELEMENTWISE_PASSES_HIDDEN * h, ELEMENTWISE_PASSES_FFN[model.mlp] * f
    if kernels == Kernels.FUSED:
        return hidden, ffn
    hidden += EAGER_TRANSPOSE_PASSES * h
    if model.position == PositionKind.ROPE:
        hidden += EAGER_ROTARY_PASSES * (h + g)
    if g < h:
        hidden += 2 * (g + h)
    if kernels == Kernels.EAGER_UNFUSED_NORM and model.norm == NormKind.RMSNORM:
        hidden += 2 * COMPOSITE_RMSNORM_EXTRA_PASSES * h
    return hidden, EAGER_FFN_PASSES[model.mlp] * f


def layer_matmul_flops_in_order(model: Model) -> list[float]:
    """Forward FLOPs per token of a layer's matmuls in the order torchtitan's Llama runs them
    (wq, wk, wv, wo; w1, w3, w2 or w1, w2); they sum to flops.layer_matmul_flops_per_token but
    for an MoE router."""
    h, g, f, k = model.hidden, model.kv_heads * model.head_dim, model.ffn, model.top_k
    mlp = [2 * h * f * k] * (3 if model.mlp == MlpKind.SWIGLU else 2)
    return [2 * h * h, 2 * h * g, 2 * h * g, 2 * h * h] + mlp


def op_sac_recomputed_matmul_fraction(model: Model) -> float:
    """The share of a layer's projection FLOPs that op-level SAC recomputes: the policy saves the
    output of every odd-numbered mm of the layer and recomputes the even-numbered ones
    (torchtitan/distributed/activation_checkpoint.py `_custom_policy` @v0.2.2: "Saves output of
    all compute ops, except every second mm"; meta[mm_count] % 2 == 0 -> PREFER_RECOMPUTE)."""
    order = layer_matmul_flops_in_order(model)
    return sum(order[1::2]) / sum(order)


# Passes over the a*s*s*b score tensor without flash attention: fused scale-mask-softmax
# read + write, dropout read + write + mask (Korthikanti et al. 2022, section 4.1)
ELEMENTWISE_PASSES_SCORES = 5


@dataclass(frozen=True)
class PassTimes:
    forward_s: float
    backward_s: float
    tp_comm_s: float          # per micro-batch, forward + backward, included in the two above
    compute_s: float          # per micro-batch, forward + backward, excluding communication
    cp_comm_s: float = 0.0    # per micro-batch, the context-parallel ring's exposed part, included above


def matmul_efficiency(gpu: Gpu, fp8: bool = False) -> float:
    """The GPU's best measured matmul rate over its peak, for FP8 GEMMs or the others."""
    if not fp8:
        return gpu.efficiency
    return gpu.fp8_efficiency or gpu.efficiency * UNMEASURED_FP8_OVER_BF16


def gemm_efficiency(gpu: Gpu, smallest_dim: float, fp8: bool = False) -> float:
    return matmul_efficiency(gpu, fp8) * smallest_dim / (smallest_dim + gemm_half_dim(gpu))


def _matmul_s(flops: float, gpu: Gpu, smallest_dim: float, peak_flops: float | None = None, fp8: bool = False) -> float:
    """At `peak_flops` (default: the 16-bit peak) times the GPU's measured matmul efficiency for FP8
    GEMMs (`fp8`) or for the others (matmul_efficiency)."""
    return flops / ((gpu.peak_flops if peak_flops is None else peak_flops) * gemm_efficiency(gpu, smallest_dim, fp8))


def _memory_s(num_bytes: float, gpu: Gpu) -> float:
    return num_bytes / (gpu.mem_bw_bytes_per_s * MEM_BW_EFFICIENCY)


def layer_forward_parts(model: Model, gpu: Gpu, seq_len: int, micro_batch: int, tp: int,
                        sequence_parallel: bool, flash_attention: bool, precision: Precision | None = None,
                        tf32: bool = False, kernels: Kernels = Kernels.FUSED, cp: int = 1,
                        expert_parallel: int = 1, expert_tp: int = 0) -> tuple[float, float, float]:
    """(projection matmuls, attention core, other element-wise work) seconds of one layer's
    forward. The attention core (Q K^T, softmax, dropout, scores V) is what selective
    recomputation reruns. `precision` (planner.numerics): the GEMMs' peaks and the bytes each
    element-wise pass moves; FP8 adds the casts of its GEMM inputs. `kernels`: how the engine runs
    the element-wise ops (elementwise_elements_per_token). `cp`: context parallelism, each GPU holding
    s / cp of the sequence's tokens (causal attention load-balanced over the ranks, as Megatron-LM and
    torchtitan split it: each rank's queries see 1/cp of the score work)."""
    s, b, t = seq_len, micro_batch, tp
    tokens = s * b / cp
    act_bytes = numerics(precision).act_bytes
    projections = _projections_s(model, gpu, tokens, t, linear_peak_flops(gpu, precision, tf32), expert_parallel,
                                 precision == Precision.FP8, expert_tp)
    attention_flops = tokens * layer_attention_flops_per_token(model, s) / t
    hidden_elements, ffn_elements = elementwise_elements_per_token(model, kernels)
    hidden_passes = hidden_elements * tokens / (t if sequence_parallel else 1)
    ffn_passes = ffn_elements * tokens / t
    if flash_attention:
        # the measured kernel rate counts the causal half of the score work (flash_attention_flops_per_s);
        # fp32 jobs at the fp32 (or TF32) peak's share of the 16-bit one
        scale = other_peak_flops(gpu, precision, tf32) / gpu.peak_flops
        attention = attention_flops / 2 / (flash_attention_flops_per_s(gpu, s, model.head_dim) * scale)
    else:
        attention = ATTENTION_MATMUL_SLOWDOWN * _matmul_s(attention_flops, gpu, min(s, model.head_dim * 8),
                                                          other_peak_flops(gpu, precision, tf32))
        score_passes = ELEMENTWISE_PASSES_SCORES * model.heads * s * s * b / t / cp
        attention += _memory_s(act_bytes * score_passes, gpu)
    elementwise = _memory_s(act_bytes * (hidden_passes + ffn_passes), gpu)
    if precision == Precision.FP8:
        elementwise += _memory_s(FP8_CAST_BYTES * tokens * fp8_gemm_inputs_per_token(model) / t, gpu)
    return projections, attention, elementwise


def _projections_s(model: Model, gpu: Gpu, tokens: float, tp: int, peak_flops: float, expert_parallel: int,
                   fp8: bool = False, expert_tp: int = 0) -> float:
    """The layer's projection GEMMs. A mixture-of-experts layer's routed experts each multiply only
    the tokens routed to them, tokens x top_k / experts rows on average, or ep times that under
    expert parallelism (each GPU's experts take the tokens of ep replicas): fine-grained experts run
    small GEMMs, which gemm_efficiency's roll-off slows. The busiest expert-parallel rank carries
    planner.experts.expert_load of the mean. Expert tensor parallelism `expert_tp` below tp (Megatron-LM's
    --expert-tensor-parallel-size) splits each expert over etp GPUs, not tp: its GEMMs are etp-wide, fed the
    tokens of etp of the tp ranks (sequence parallel), the same FLOPs per GPU."""
    t, h = tp, model.hidden
    flops = tokens * layer_matmul_flops_per_token(model) / t
    share = expert_matmul_share(model)
    dense = _matmul_s(flops * (1 - share), gpu, min(tokens, h / t, model.ffn / t), peak_flops, fp8)
    if not share:
        return dense
    e = expert_tp or t
    rows = tokens * e / t * model.top_k / model.experts * expert_parallel
    experts = _matmul_s(flops * share, gpu, min(rows, h / e, (model.moe_ffn or model.ffn) / e), peak_flops, fp8)
    return dense + experts * expert_load(expert_parallel)


def fp8_gemm_inputs_per_token(model: Model) -> float:
    """Elements per token cast to FP8 in one layer's forward: the inputs of the QKV, output and MLP
    GEMMs (h, h, h, and f or the gated f); the backward casts as many gradient outputs, which
    the backward pass's 2x of the forward covers."""
    return 3 * model.hidden + model.ffn * model.top_k


# PEFT's LoRA Linear.forward (huggingface/peft src/peft/tuners/lora/layer.py): result = result +
# lora_B(lora_A(dropout(x))) * scaling, run eager: per adapted output element the scale (read + write) and
# the add (read two, write one), 5 16-bit passes forward; backward the scale's gradient (read + write, 2;
# the add passes its gradient through). lora_dropout 0 (PEFT's default) makes dropout an identity.
LORA_OUTPUT_PASSES_FORWARD, LORA_OUTPUT_PASSES_BACKWARD = 5, 2


def adapter_output_elements_per_token(model: Model) -> float:
    """Output width summed over the linear layers LoRA adapts in one layer (q, k, v, o and the MLP's;
    a MoE layer's active experts, top_k and shared), the mean over the layers as planner.flops."""
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    def mlp(width: int) -> float:
        return (2 * width if model.mlp == MlpKind.SWIGLU else width) + h
    dense = mlp(model.ffn)
    if not model.moe_layers:
        return q + 2 * kv + h + dense
    moe = (model.top_k + model.shared_experts) * mlp(model.moe_ffn or model.ffn)
    return q + 2 * kv + h + ((model.layers - model.moe_layers) * dense + model.moe_layers * moe) / model.layers


def adapter_pass_s(model: Model, gpu: Gpu, tokens: float, tp: int, training: Training,
                   precision: Precision | None = None, tf32: bool = False) -> float:
    """Work one layer's forward adds for an adapter job, per GPU of a tp group: the adapters' GEMMs at
    their real shapes (x A: tokens x in x r, then (x A) B: tokens x r x out, 2 FLOPs per active adapter
    weight and token; r is the smallest dimension of both, so gemm_efficiency's roll-off keeps them near
    memory-bound), the scale-and-add of their outputs into the base layer's (LORA_OUTPUT_PASSES) and, for
    QLoRA, dequantising the layer's NF4 weights to 16 bits (planner.training.DEQUANT_BYTES_PER_PARAM,
    memory-bound). The backward pass does twice this (the adapters' input and weight gradients); the
    frozen base's backward computes input gradients only (planner.training.backward_projection_factor)."""
    if not training.adapters:
        return 0.0
    adapters = 2 * tokens * adapter_params_per_layer(model, training.lora_rank, active_only=True) / tp
    seconds = _matmul_s(adapters, gpu, min(tokens, training.lora_rank), other_peak_flops(gpu, precision, tf32))
    # the output passes' forward + backward, charged as a third of it here since the backward counts this twice
    passes = (LORA_OUTPUT_PASSES_FORWARD + LORA_OUTPUT_PASSES_BACKWARD) / 3
    outputs = passes * tokens * adapter_output_elements_per_token(model) / tp
    seconds += _memory_s(numerics(precision).act_bytes * outputs, gpu)
    if training.kind == JobKind.QLORA:
        seconds += _memory_s(DEQUANT_BYTES_PER_PARAM * layer_params(model, active_only=True) / tp, gpu)
    return seconds


def tp_collective_s(model: Model, seq_len: int, micro_batch: int, tp: int, link_bw: float,
                    precision: Precision | None = None) -> float:
    """One all-reduce (or all-gather + reduce-scatter pair) of the s*b*h activation."""
    return all_reduce_s(activation_message_bytes(numerics(precision).act_bytes, seq_len, micro_batch, model.hidden),
                        tp, link_bw, INTRA_NODE_LATENCY_S)


@dataclass(frozen=True)
class StagePass:
    """What one micro-batch's pass through a stage on one GPU type depends on, but for how the engine
    runs it (PassExecution): `num_layers` layers (and the head if `has_head`) on a replica of `tp` GPUs
    (x `cp`, context parallelism); `link_bw` the tensor-parallel group's link; `precision`:
    planner.numerics (None: 16-bit); `training`: the job kind (planner.training: a frozen base has no
    weight gradients; adapters and NF4 dequantisation add work); `cp_bw`: the bandwidth per GPU of the
    context-parallel ring (context_ring_s); `expert_parallel`: the busiest rank's experts carry more
    than the mean tokens (planner.experts.expert_load). The defaults are the cheapest but for adapter
    jobs, which are cheaper still."""
    model: Model
    gpu: Gpu
    num_layers: int
    has_head: bool
    seq_len: int
    micro_batch: int
    tp: int
    sequence_parallel: bool
    recompute: Recompute
    flash_attention: bool
    link_bw: float
    precision: Precision | None = None
    training: Training = PRETRAIN
    cp: int = 1
    cp_bw: float = math.inf
    expert_parallel: int = 1
    expert_tp: int = 0        # Plan.expert_tensor_parallel (0: tp): the MoE layers' GEMM widths and tp collectives


@dataclass(frozen=True)
class PassExecution:
    """The engine's execution values that pass times read (planner.engines.base.Execution, made by
    pass_execution): its fixed cost per layer and pass, TF32 for fp32 matmuls, how it runs element-wise
    ops, what its selective recomputation reruns, and whether it pipelines its tensor-parallel
    collectives with the GEMMs beside them (exposed_tp_comm_s; the default hides nothing)."""
    layer_overhead_s: float = 0.0
    tf32: bool = False
    kernels: Kernels = Kernels.FUSED
    selective: SelectiveKind = SelectiveKind.ATTENTION_CORE
    tp_overlap: bool = False


def pass_execution(run: Execution, tf32_asked: bool | None, tp_comm_overlap: bool = False) -> PassExecution:
    """The one wiring of an engine's Execution into pass times, for planner.cost.evaluate and the
    search's fast scores: `tf32_asked` the plan's (or job's) tf32, None for the engine's default;
    `tp_comm_overlap`: the plan turns the engine's overlap on (Plan.tp_comm_overlap,
    Engine.execution_for)."""
    return PassExecution(run.layer_overhead_s, run.tf32(tf32_asked), run.kernels, run.selective_recompute,
                         run.tp_comm_overlap or tp_comm_overlap)


def stage_pass_times(stage: StagePass, run: PassExecution = PassExecution()) -> PassTimes:
    """One micro-batch's forward and backward through `stage.num_layers` layers (and the head), as the
    engine runs them (`run`)."""
    model, gpu, num_layers, has_head = stage.model, stage.gpu, stage.num_layers, stage.has_head
    seq_len, micro_batch, tp, sequence_parallel = stage.seq_len, stage.micro_batch, stage.tp, stage.sequence_parallel
    recompute, flash_attention, link_bw, precision = stage.recompute, stage.flash_attention, stage.link_bw, stage.precision
    training, cp, cp_bw, expert_parallel = stage.training, stage.cp, stage.cp_bw, stage.expert_parallel
    layer_overhead_s, tf32, kernels, selective, tp_overlap = (run.layer_overhead_s, run.tf32, run.kernels,
                                                              run.selective, run.tp_overlap)
    proj, attn, elem = layer_forward_parts(model=model, gpu=gpu, seq_len=seq_len, micro_batch=micro_batch, tp=tp,
                                           sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                                           precision=precision, tf32=tf32, kernels=kernels, cp=cp,
                                           expert_parallel=expert_parallel, expert_tp=stage.expert_tp)
    collective = tp_collective_s(model, seq_len / cp, micro_batch, tp, link_bw, precision)
    # the MLP's all-gather + reduce-scatter: in MoE layers over the expert tp group, none at etp 1 (Megatron-Core
    # MoEAlltoAllTokenDispatcher gathers and reduce-scatters over expt_tp only when its size > 1)
    pair = 2 * collective
    if stage.expert_tp not in (0, tp) and model.is_moe:
        moe = model.moe_layers / model.layers
        pair -= moe * (collective - tp_collective_s(model, seq_len / cp, micro_batch, stage.expert_tp, link_bw, precision))
    extra = adapter_pass_s(model, gpu, seq_len * micro_batch / cp, tp, training, precision, tf32)
    ring_fwd, ring_bwd = context_ring_s(model, seq_len, micro_batch, tp, cp, cp_bw, attn, precision)
    backward_proj = backward_projection_factor(training)
    layer_fwd = proj + attn + elem + extra + layer_overhead_s
    layer_bwd = (backward_proj * proj + attention_backward_over_forward(flash_attention) * attn
                 + 2 * (elem + extra) + layer_overhead_s)
    tp_fwd, tp_bwd = pair, pair
    if recompute == Recompute.FULL:
        layer_bwd += layer_fwd
        tp_bwd += pair
        ring_bwd += ring_fwd
    elif recompute == Recompute.SELECTIVE and selective == SelectiveKind.OP_SAC:
        # every other matmul and every element-wise op again; SDPA and the reduce-scatters are
        # saved, the two sequence-parallel all-gathers (half an all-reduce each) are rerun
        layer_bwd += op_sac_recomputed_matmul_fraction(model) * proj + elem
        tp_bwd += pair / 2 if tp > 1 else 0.0
    elif recompute == Recompute.SELECTIVE:
        layer_bwd += attn
        ring_bwd += ring_fwd          # the rerun attention core goes round the ring again
    if tp_overlap:
        gemm_bwd = backward_proj * proj + (proj if recompute == Recompute.FULL else 0.0)
        tp_fwd, tp_bwd = exposed_tp_comm_s(tp_fwd, proj, tp), exposed_tp_comm_s(tp_bwd, gemm_bwd, tp)
    head_fwd = head_bwd = 0.0
    if has_head:
        tokens = seq_len * micro_batch / cp
        head_fwd = _matmul_s(head_forward_flops(model, tokens) / tp, gpu, min(tokens, model.hidden),
                             other_peak_flops(gpu, precision, tf32))
        head_fwd += _memory_s(4 * 3 * tokens * model.vocab / tp, gpu)   # fp32 softmax + loss
        head_bwd = backward_proj * head_fwd
    compute = num_layers * (layer_fwd + layer_bwd) + head_fwd + head_bwd
    tp_total = num_layers * (tp_fwd + tp_bwd)
    return PassTimes(num_layers * (layer_fwd + tp_fwd + ring_fwd) + head_fwd,
                     num_layers * (layer_bwd + tp_bwd + ring_bwd) + head_bwd, tp_total, compute,
                     num_layers * (ring_fwd + ring_bwd))


def exposed_tp_comm_s(comm_s: float, gemm_s: float, tp: int) -> float:
    """What is left of a pass's tensor-parallel collectives (`comm_s`) when each is pipelined with the
    GEMM beside it (`gemm_s`: the pass's projection GEMMs), as Megatron-Core's --tp-comm-overlap runs
    them through Transformer Engine's userbuffers (megatron/core/model_parallel_config.py @core_r0.8.0:
    tp_comm_overlap_ag / _rs, "pipelining the GEMM and All-Gather" / "Reduce-Scatter", in the forward;
    tp_comm_bulk_wgrad / _dgrad, the backward's all-gather and reduce-scatter beside the other gradient
    GEMM). The collective and the GEMM are split into tp chunks, chunk i's transfer beside chunk i-1's
    GEMM: the first (all-gather) or last (reduce-scatter) chunk, 1/tp of the transfer, stays exposed,
    and so does whatever the transfer takes beyond the GEMM."""
    if tp <= 1 or comm_s <= 0.0:
        return comm_s
    exposed = max(comm_s / tp, comm_s - gemm_s)
    return exposed + OVERLAP_COMPUTE_SLOWDOWN * (comm_s - exposed)


def context_ring_s(model: Model, seq_len: int, micro_batch: int, tp: int, cp: int, cp_bw: float,
                   attention_s: float, precision: Precision | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's context-parallel ring that attention does not hide
    (Megatron-LM's default p2p ring; Liu et al. 2023, "Ring Attention", section 3): each of the cp - 1
    steps passes this rank's key/value chunk (2 x s/cp x b x g / tp elements) to the next rank while
    attention runs on the chunk it holds, 1/cp of the layer's attention time; the backward pass sends
    the keys and values and their gradients, twice the bytes beside twice the attention work. A ring
    step costs at least its latency."""
    if cp == 1:
        return 0.0, 0.0
    g = model.kv_heads * model.head_dim
    chunk = numerics(precision).act_bytes * 2 * (seq_len / cp) * micro_batch * g / tp
    step = chunk / cp_bw + INTRA_NODE_LATENCY_S
    per_step_attention = attention_s / cp
    return ((cp - 1) * overlapped_s(step, per_step_attention),
            (cp - 1) * overlapped_s(2 * step, 2 * per_step_attention))
