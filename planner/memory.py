"""Peak memory of one GPU of a stage replica.

Model states follow mixed-precision Adam as Megatron-LM keeps them: 16-bit weights (2 bytes),
fp32 main gradients (4), fp32 master weights and two Adam moments (12): 18 bytes per parameter
(Megatron-LM docs, distributed optimizer: "6 + 12/d" bytes with ZeRO-1; Rajbhandari et al.
2020, ZeRO, section 3.1 for the sharding of each part under stages 1, 2 and 3).

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv 2205.05198), section 4, generalised to grouped-query attention,
any MLP width and gated MLPs by keeping each stored tensor of their derivation.
"""
from __future__ import annotations

from planner.flops import stage_params
from planner.schedule import in_flight_limit
from planner.types import GIB, MemoryBreakdown, MlpKind, Plan, Recompute, Schedule, Stage

WEIGHT_BYTES = 2
MAIN_GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
# CUDA context, NCCL buffers and allocator fragmentation: about 1-2 GiB in practice (PyTorch
# CUDA context alone is ~0.5 GiB; NCCL reserves buffers per communicator). Assumed, not measured.
FRAMEWORK_OVERHEAD_BYTES = 1.5 * GIB


def model_state_bytes(plan: Plan, stage_index: int, tp: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes on one GPU of a replica with `tp` GPUs."""
    stage = plan.stages[stage_index]
    params_per_gpu = stage_params(plan.model, stage.layer_start, stage.layer_end, plan.num_stages) / tp
    d, z = len(stage.replicas), plan.zero_stage
    weights = params_per_gpu * WEIGHT_BYTES / (d if z >= 3 else 1)
    grads = params_per_gpu * MAIN_GRAD_BYTES / (d if z >= 2 else 1)
    optimizer = params_per_gpu * OPTIMIZER_BYTES / (d if z >= 1 else 1)
    return weights, grads, optimizer


def layer_activation_bytes(plan: Plan, tp: int, flash_attention: bool,
                           recompute: Recompute | None = None) -> float:
    """Stored activations of one layer for one micro-batch on one GPU (Korthikanti eq. 1-6).

    Per layer, with g the key/value width and f the MLP width (16-bit tensors, 1-byte masks):
      replicated across tp unless sequence-parallel: 2 layer-norm inputs (4sbh), attention and
        MLP inputs (4sbh), two dropout masks (2sbh)                          = 10 sbh
      sharded by tp: Q (2sbh), K and V (4sbg), projection input (2sbh), MLP: gelu/relu input and
        second-linear input (4sbf) or, gated, gate, up and product (6sbf)   = 24 sbh for GPT
      attention scores, sharded by tp: softmax output, dropout mask and output = 5 a s^2 b
        (absent with flash attention, which recomputes them)
    Selective recomputation drops the scores term; full recomputation keeps only the layer
    input, 2sbh (divided by tp under sequence parallelism).
    """
    m, s, b, t = plan.model, plan.seq_len, plan.micro_batch, tp
    h, a, g, f = m.hidden, m.heads, m.kv_heads * m.head_dim, m.ffn
    sp = plan.sequence_parallel and t > 1
    recompute = plan.recompute if recompute is None else recompute
    if recompute == Recompute.FULL:
        return 2 * s * b * h / (t if sp else 1)
    replicated = 10 * s * b * h
    mlp = (6 if m.mlp == MlpKind.SWIGLU else 4) * s * b * f
    sharded = 2 * s * b * h + 4 * s * b * g + 2 * s * b * h + mlp
    scores = 5 * a * s * s * b
    keep_scores = recompute == Recompute.NONE and not flash_attention
    total = (replicated / (t if sp else 1)) + sharded / t + (scores / t if keep_scores else 0)
    return total


def in_flight_micro_batches(plan: Plan, stage_index: int, own_micro_batches: int) -> float:
    """Micro-batches whose activations a replica holds at its peak.

    1F1B: stage i of p holds p - i (Narayanan et al. 2021, section 2.2.1), generalised to
    replicated stages by `schedule.in_flight_limit`; interleaved with v chunks:
    (2 (p - i - 1) + (v - 1) p + 1) chunks of 1/v of the stage, which for i = 0 is
    Korthikanti's p (1 + (p - 1) / (p v)); GPipe: every micro-batch.
    """
    p, i, v = plan.num_stages, stage_index, plan.interleave
    if plan.schedule == Schedule.GPIPE:
        return own_micro_batches
    if v == 1:
        replicas = [len(s.replicas) for s in plan.stages]
        return in_flight_limit(replicas, i, own_micro_batches, plan.num_micro_batches)
    chunks = min(2 * (p - i - 1) + (v - 1) * p + 1, own_micro_batches * v)
    return chunks / v


def edge_activation_bytes(plan: Plan, stage: Stage, tp: int) -> float:
    """Embedding output on the first stage; logits and the final norm's input on the last
    (Korthikanti section 4.3: s b h p / t and 4 s b h / t (1 + V / h))."""
    m, s, b, t = plan.model, plan.seq_len, plan.micro_batch, tp
    extra = 0.0
    if stage.layer_start == 0:
        extra += 2 * s * b * m.hidden / t
    if stage.layer_end == m.layers:
        extra += 4 * s * b * m.hidden / t * (1 + m.vocab / m.hidden)
    return extra


def replica_memory(plan: Plan, stage_index: int, replica_index: int, capacity_bytes: float,
                   flash_attention: bool = True) -> MemoryBreakdown:
    stage = plan.stages[stage_index]
    replica = stage.replicas[replica_index]
    weights, grads, optimizer = model_state_bytes(plan, stage_index, replica.tp)
    own = replica.samples // plan.micro_batch
    in_flight = in_flight_micro_batches(plan, stage_index, own)
    layer_act = layer_activation_bytes(plan, replica.tp, flash_attention)
    activations = in_flight * stage.num_layers * layer_act + edge_activation_bytes(plan, stage, replica.tp)
    if plan.recompute == Recompute.FULL:
        # the one layer being recomputed holds its full activations during its backward pass
        activations += layer_activation_bytes(plan, replica.tp, flash_attention, Recompute.NONE)
    return MemoryBreakdown(weights, grads, optimizer, activations, FRAMEWORK_OVERHEAD_BYTES, capacity_bytes)
