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

import math

from planner.elementwise import floor, maximum
from planner.engines import get as engine_profile
from planner.engines.base import FRAMEWORK_OVERHEAD_BYTES
from planner.flops import param_shards, stage_params
from planner.schedule import in_flight_micro_batches as schedule_in_flight
from planner.numerics import numerics
from planner.training import ModelStates, model_states
from planner.types import MemoryBreakdown, MlpKind, Model, Plan, Precision, Recompute, SelectiveKind, Stage

WEIGHT_BYTES = 2
MAIN_GRAD_BYTES = 4
OPTIMIZER_BYTES = 12


def state_bytes_per_param(zero_stage: int, replicas: int,
                          states: ModelStates | Precision | None = None) -> tuple[float, float, float]:
    """(weight, gradient, optimizer) bytes per parameter on one GPU when a stage's `replicas`
    data-parallel copies shard them as ZeRO stage `zero_stage` does (Rajbhandari et al. 2020,
    section 5: stage 1 shards optimizer states, 2 also gradients, 3 also weights). `replicas`
    may be a numpy array. `states`: the job's planner.training.ModelStates, or a precision for
    pretraining without offload (None: 16-bit mixed precision)."""
    z, d, n = zero_stage, replicas, _states(states)
    return (n.weight_bytes / (d if z >= 3 else 1), n.grad_bytes / (d if z >= 2 else 1),
            n.optimizer_bytes / (d if z >= 1 else 1))


def host_bytes_per_param(zero_stage: int, replicas: int, states: ModelStates) -> float:
    """Offloaded bytes per parameter one GPU keeps in CPU memory: its optimizer shard (ZeRO >= 1
    is required to offload) and, offloading parameters (ZeRO-3), its weight shard."""
    return states.host_bytes / (replicas if zero_stage >= 1 else 1)


def _states(states: ModelStates | Precision | None) -> ModelStates:
    return states if isinstance(states, ModelStates) else model_states(states)


def plan_states(plan: Plan) -> ModelStates:
    """The plan's model state per parameter (planner.training), as its engine keeps it."""
    grad_bytes = engine_profile(plan.engine).execution.offload_grad_bytes
    return model_states(plan.precision, plan.training, plan.model, plan.offload, grad_bytes)


def plan_shards(plan: Plan, stage_index: int, tp: int) -> tuple[tuple[float, int], ...]:
    """flops.param_shards of a stage for a replica of `tp` GPUs: (parameters per GPU, ranks that
    reduce and shard them: the stage's replicas x the context-parallel degree, over expert
    parallelism for the routed experts)."""
    stage = plan.stages[stage_index]
    params = stage_params(plan.model, stage.layer_start, stage.layer_end, plan.num_stages)
    return param_shards(params, stage.num_layers, plan.model, tp, shard_ranks(plan, stage_index), plan.expert_parallel,
                        plan.expert_tensor_parallel)


def shard_ranks(plan: Plan, stage_index: int) -> int:
    """Ranks a stage's ZeRO states are sharded over: its replicas x cp, or the hybrid-shard group's
    (FSDP HYBRID_SHARD: the replicas of one node; torch fsdp/api.py ShardingStrategy lines 55-60)."""
    replicas = plan.hybrid_shard or len(plan.stages[stage_index].replicas)
    return replicas * plan.context_parallel


def model_state_bytes(plan: Plan, stage_index: int, tp: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes on one GPU of a replica with `tp` GPUs."""
    states, out = plan_states(plan), [0.0, 0.0, 0.0]
    for params_per_gpu, ranks in plan_shards(plan, stage_index, tp):
        for k, b in enumerate(state_bytes_per_param(plan.zero_stage, ranks, states)):
            out[k] += params_per_gpu * b
    return tuple(out)


def host_state_bytes(plan: Plan, stage_index: int, tp: int) -> float:
    """Offloaded model state of one GPU of a replica with `tp` GPUs, in CPU memory."""
    states = plan_states(plan)
    return sum(params_per_gpu * host_bytes_per_param(plan.zero_stage, ranks, states)
               for params_per_gpu, ranks in plan_shards(plan, stage_index, tp))


def activation_bytes_per_layer(model: Model, seq_len: int, micro_batch: int, tp: int, sequence_parallel: bool,
                               recompute: Recompute, flash_attention: bool, precision: Precision | None = None,
                               selective: SelectiveKind = SelectiveKind.ATTENTION_CORE, cp: int = 1) -> float:
    """Stored activations of one layer for one micro-batch on one GPU (Korthikanti eq. 1-6).

    Per layer, with g the key/value width and f the MLP width (16-bit tensors, 1-byte masks):
      replicated across tp unless sequence-parallel: 2 layer-norm inputs (4sbh), attention and
        MLP inputs (4sbh), two dropout masks (2sbh)                          = 10 sbh
      sharded by tp: Q (2sbh), K and V (4sbg), projection input (2sbh), MLP: gelu/relu input and
        second-linear input (4sbf) or, gated, gate, up and product (6sbf)   = 24 sbh for GPT
      attention scores, sharded by tp: softmax output, dropout mask and output = 5 a s^2 b
        (absent with flash attention, which recomputes them)
    Selective recomputation drops the scores term; full recomputation keeps only the layer
    input, 2sbh (divided by tp under sequence parallelism). In fp32 every term doubles (masks
    counted at 2 bytes too: an over-estimate of 2sbh + a s^2 b at most). `selective`: the engine's
    kind of selective recomputation; op-level SAC keeps what op_sac_saved_elements_per_token says.
    Context parallelism keeps s / cp of the tokens on each GPU: every term falls by cp (the key and
    value chunks the ring passes are not kept; the scores, without flash attention, are the local
    queries' against every key).
    """
    scale = numerics(precision).act_bytes / 2
    m, s, b, t = model, seq_len / cp, micro_batch, tp
    h, a, g, f = m.hidden, m.heads, m.kv_heads * m.head_dim, m.ffn
    sp = sequence_parallel and t > 1
    if recompute == Recompute.FULL:
        return scale * 2 * s * b * h / (t if sp else 1)
    if recompute == Recompute.SELECTIVE and selective == SelectiveKind.OP_SAC:
        return numerics(precision).act_bytes * s * b * op_sac_saved_elements_per_token(model, t, sp)
    replicated = 10 * s * b * h
    mlp = (6 if m.mlp == MlpKind.SWIGLU else 4) * s * b * f
    sharded = 2 * s * b * h + 4 * s * b * g + 2 * s * b * h + mlp
    scores = 5 * a * s * seq_len * b
    keep_scores = recompute == Recompute.NONE and not flash_attention
    return scale * ((replicated / (t if sp else 1)) + sharded / t + (scores / t if keep_scores else 0))


def op_sac_saved_elements_per_token(model: Model, tp: int, sequence_parallel: bool) -> float:
    """Elements per token one GPU keeps of a layer under torchtitan's op-level SAC (16-bit each):
    the layer input (the checkpoint's own), the outputs of the odd-numbered mms (the policy's
    MUST_SAVE: wq, wv, w1, w2 of a SwiGLU layer; a row-parallel mm's local output is the full-width
    partial sum), SDPA's output, and under tp the two reduce-scatter outputs
    (torchtitan/distributed/activation_checkpoint.py `_custom_policy` and `op_sac_save_list` @v0.2.2:
    mm, SDPA, reduce_scatter_tensor)."""
    m, t = model, tp
    h, g, f = m.hidden, m.kv_heads * m.head_dim, m.ffn * m.top_k
    outputs = [h / t, g / t, g / t, h] + [f / t] * (2 if m.mlp == MlpKind.SWIGLU else 1) + [h]
    saved_mm = sum(outputs[0::2])
    return h / (t if sequence_parallel else 1) + saved_mm + h / t + (2 * h / t if t > 1 else 0)


def recompute_workspace_bytes(model: Model, seq_len: int, micro_batch: int, tp: int, sequence_parallel: bool,
                              recompute: Recompute, flash_attention: bool, precision: Precision | None = None,
                              selective: SelectiveKind = SelectiveKind.ATTENTION_CORE, cp: int = 1) -> float:
    """Under full recomputation (and op-level SAC, which reruns most of a layer) the one layer being
    recomputed holds its full activations during its backward pass; nothing otherwise."""
    op_sac = recompute == Recompute.SELECTIVE and selective == SelectiveKind.OP_SAC
    if recompute != Recompute.FULL and not op_sac:
        return 0.0
    return activation_bytes_per_layer(model, seq_len, micro_batch, tp, sequence_parallel, Recompute.NONE,
                                      flash_attention, precision, cp=cp)


def layer_activation_bytes(plan: Plan, tp: int, flash_attention: bool,
                           recompute: Recompute | None = None,
                           selective: SelectiveKind = SelectiveKind.ATTENTION_CORE) -> float:
    """activation_bytes_per_layer for a plan's job and knobs (`recompute` overrides the plan's)."""
    recompute = plan.recompute if recompute is None else recompute
    return activation_bytes_per_layer(model=plan.model, seq_len=plan.seq_len, micro_batch=plan.micro_batch, tp=tp,
                                      sequence_parallel=plan.sequence_parallel, recompute=recompute,
                                      flash_attention=flash_attention, precision=plan.precision, selective=selective,
                                      cp=plan.context_parallel)


def in_flight_micro_batches(plan: Plan, stage_index: int, own_micro_batches: int) -> float:
    """Micro-batches whose activations a replica holds at its peak (schedule.in_flight_micro_batches)."""
    return schedule_in_flight(plan.schedule, plan.num_stages, stage_index, plan.interleave, own_micro_batches,
                              sum(len(s.replicas) for s in plan.stages[stage_index:]), plan.num_micro_batches)


def edge_activation_bytes_of(model: Model, seq_len: int, micro_batch: int, tp: int, first: bool, last: bool,
                             precision: Precision | None = None, cp: int = 1) -> float:
    """Embedding output on the first stage; logits and the final norm's input on the last
    (Korthikanti section 4.3: s b h p / t and 4 s b h / t (1 + V / h)); s / cp tokens per GPU."""
    m, s, b, t = model, seq_len / cp, micro_batch, tp
    extra = 0.0
    if first:
        extra += 2 * s * b * m.hidden / t
    if last:
        extra += 4 * s * b * m.hidden / t * (1 + m.vocab / m.hidden)
    return extra * numerics(precision).act_bytes / 2


def edge_activation_bytes(plan: Plan, stage: Stage, tp: int) -> float:
    return edge_activation_bytes_of(plan.model, plan.seq_len, plan.micro_batch, tp, stage.layer_start == 0,
                                    stage.layer_end == plan.model.layers, plan.precision, plan.context_parallel)


def most_layers_held(free_bytes, state_bytes_per_layer, activation_bytes_per_layer, in_flight):
    """The most layers whose states and `in_flight` micro-batches of activations fit in `free_bytes`
    (a GPU's memory less what does not grow with its layers), rounding up by a hair so that it is
    never below the count replica_memory allows for the same terms: the search's memory caps ((b6) of
    planner.search.bound, and its screen). Numbers or numpy arrays."""
    per_layer = state_bytes_per_layer + in_flight * activation_bytes_per_layer
    return maximum(0, floor(free_bytes / per_layer * (1 + 1e-9)))


def replica_memory(plan: Plan, stage_index: int, replica_index: int, capacity_bytes: float,
                   flash_attention: bool = True,
                   framework_bytes: float = FRAMEWORK_OVERHEAD_BYTES,
                   selective: SelectiveKind = SelectiveKind.ATTENTION_CORE,
                   host_capacity_bytes: float = math.inf) -> MemoryBreakdown:
    """`framework_bytes` and `selective`: the engine's own memory and its kind of selective
    recomputation (planner.engines.base.Execution); `host_capacity_bytes`: the GPU's share of its
    node's CPU memory, for offloaded states."""
    stage = plan.stages[stage_index]
    replica = stage.replicas[replica_index]
    weights, grads, optimizer = model_state_bytes(plan, stage_index, replica.tp)
    own = replica.samples // plan.micro_batch
    in_flight = in_flight_micro_batches(plan, stage_index, own)
    layer_act = layer_activation_bytes(plan, replica.tp, flash_attention, selective=selective)
    activations = in_flight * stage.num_layers * layer_act + edge_activation_bytes(plan, stage, replica.tp)
    activations += recompute_workspace_bytes(model=plan.model, seq_len=plan.seq_len, micro_batch=plan.micro_batch,
                                             tp=replica.tp, sequence_parallel=plan.sequence_parallel,
                                             recompute=plan.recompute, flash_attention=flash_attention,
                                             precision=plan.precision, selective=selective, cp=plan.context_parallel)
    host = host_state_bytes(plan, stage_index, replica.tp)
    return MemoryBreakdown(weights, grads, optimizer, activations, framework_bytes, capacity_bytes, host,
                           host_capacity_bytes)
