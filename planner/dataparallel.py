"""Data-parallel synchronisation of a pipeline stage: gradient reduction, ZeRO's collectives and
the optimizer step with the weight all-gather after it.

Every function takes numbers (bytes, ranks, link bandwidth and latency) so that
planner.cost.evaluate and the search's fast scores (planner.search.score) call the same code;
the search's bounds use `ring_s_per_byte` (planner.comm), the bandwidth term of the same
collectives, which is a lower bound on them.
"""
from __future__ import annotations

from planner.comm import (OVERLAP_COMPUTE_SLOWDOWN, all_gather_s, all_reduce_s, overlapped_s, reduce_scatter_s,
                          ring_s_per_byte)
from planner.compute import MEM_BW_EFFICIENCY
from planner.elementwise import maximum, minimum
from planner.memory import WEIGHT_BYTES
from planner.offload import offload_step_s, param_fetch_s
from planner.training import ModelStates
from planner.types import Pool

# Gradients cross the network in 16 bits in hetplan's runtime, the floor of every engine's; an
# engine that reduces in fp32 says so (planner.engines.base.Execution.fp32_grad_reduce). Main
# gradients are still accumulated in fp32 in memory.
GRAD_COMM_BYTES = 2

# Adam step: read fp32 grad, master, m, v; write master, m, v and the 16-bit weight: 30 bytes
# per parameter, memory-bound (Megatron-LM's fused Adam / apex multi-tensor apply).
OPTIMIZER_STEP_BYTES_PER_PARAM = 30


def zero_per_micro_batch_s(zero_stage: int, weight_bytes_per_gpu: float, replicas: int, bw: float,
                           latency_s: float, grad_bytes: int = GRAD_COMM_BYTES,
                           weight_element_bytes: float = WEIGHT_BYTES, trained: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of ZeRO's collectives for one micro-batch. ZeRO-3 gathers the
    weights for each forward and backward and reduce-scatters gradients per micro-batch; ZeRO-2
    reduce-scatters gradients per micro-batch (Rajbhandari et al. 2020, section 7; DeepSpeed's
    behaviour under gradient accumulation); ZeRO-0/1 nothing per micro-batch. `trained`: the share
    of the weights that have gradients (planner.training)."""
    d = replicas
    if zero_stage < 2 or d == 1:
        return 0.0, 0.0
    grads = reduce_scatter_s(weight_bytes_per_gpu / weight_element_bytes * grad_bytes * trained, d, bw, latency_s)
    if zero_stage == 2:
        return 0.0, grads
    gather = all_gather_s(weight_bytes_per_gpu, d, bw, latency_s)
    return gather, gather + grads


def zero_window_s(compute_s, layers: int | None, overlap: float):
    """The compute a pass's ZeRO-2/3 collectives can hide behind. They run layer by layer, each layer's
    all-gather prefetched during the layer before it (FSDP2: the next module's unshard issued ahead in the
    forward, and in the backward FSDPParamGroup._backward_prefetch, one module ahead in reverse
    post-forward order, none before the first; DeepSpeed ZeRO-3's prefetch bucket likewise) and each
    reduce-scatter beside the next layer's backward, so the first layer's gather and the last layer's
    reduce-scatter of a pass have no compute beside them: (layers - 1) / layers of the pass, times the
    engine's `overlap` (planner.engines.base.Execution.zero_overlap); `layers` None: all of it.
    Numbers or numpy arrays."""
    return overlap * compute_s * (1.0 if layers is None else (layers - 1) / layers)


def zero_exposed_s(collective_s, compute_s, overlap: float, layers: int | None = None):
    """What a pass's ZeRO collectives (`collective_s`: zero_per_micro_batch_s, plus any offloaded
    fetch) cost beside the pass's compute (`compute_s`) over `layers` layers, the engine hiding them
    behind `overlap` of it (planner.engines.base.Execution.zero_overlap, 0 to 1): the part
    zero_window_s does not hide, plus the slowdown of the compute beside the rest (planner.comm.overlapped_s).
    Numbers or numpy arrays."""
    return overlapped_s(collective_s, zero_window_s(compute_s, layers, overlap))


def pass_with_zero_floor_s(compute_s, collective_floor_s):
    """A lower bound on compute_s + zero_exposed_s(c, compute_s, overlap) for every overlap <= 1 and
    every c >= `collective_floor_s` (zero_per_micro_batch_floor): with w <= compute_s the window the
    collectives hide behind, the pass is compute + max(0, c - w) + s min(c, w) (s the slowdown of
    overlapped_s), which falls as w grows to min(c, compute) and is flat beyond, so it is at least
    max(compute, c) + s min(compute, c), and that rises with c. zero_backward_exposed_s's exposed part
    (prefetch or reduce overlap off) only moves collective time out of the window, which costs more.
    What the search's bounds take for a pass under ZeRO-2/3 (planner.search.bound, screen);
    tests/test_formulas.py holds it below zero_exposed_s (forward) and zero_backward_exposed_s
    (backward) on random inputs."""
    return maximum(compute_s, collective_floor_s) + OVERLAP_COMPUTE_SLOWDOWN * minimum(compute_s, collective_floor_s)


def exposed_grad_sync_s(sync_s, hidden_behind_s):
    """What the gradient synchronisation (grad_sync_s) costs beside the compute it runs beside
    (`hidden_behind_s`: the last backward pass where the engine overlaps its gradient reduction, else
    0): planner.comm.overlapped_s. Numbers or numpy arrays."""
    return overlapped_s(sync_s, hidden_behind_s)


def zero_backward_exposed_s(gather_s: float, collectives_s: float, fetch_s: float, compute_s: float, overlap: float,
                            layers: int | None = None, prefetch: bool = True, overlap_reduce: bool = True) -> float:
    """A micro-batch's backward ZeRO time (`collectives_s` = ZeRO-3's all-gathers, as long as the forward's
    `gather_s`, plus the gradients' reduce-scatters: zero_per_micro_batch_s; and offload's `fetch_s`) beside
    `compute_s` of backward compute over `layers` layers (zero_exposed_s, with the engine's `overlap`). `prefetch` (FSDP backward_prefetch BACKWARD_PRE: "the next set of
    parameters" all-gathered "before the current set of parameters' gradient computation", torch fsdp/api.py
    BackwardPrefetch lines 72-108): off, a layer's all-gather is issued when its backward needs it and waited
    on, so it is exposed. `overlap_reduce` (DeepSpeed's overlap_comm: buckets reduced on a side stream during
    the backward; off, on the compute stream, zero/stage_1_and_2.py): off, the reduce-scatters are exposed."""
    reduce_s = collectives_s - gather_s
    exposed = (0.0 if prefetch else gather_s) + (0.0 if overlap_reduce else reduce_s)
    hideable = (gather_s if prefetch else 0.0) + (reduce_s if overlap_reduce else 0.0) + fetch_s
    return exposed + zero_exposed_s(hideable, compute_s, overlap, layers)


def zero_per_micro_batch_floor(zero_stage: int, weight_bytes_per_gpu, replicas, s_per_byte,
                               weight_element_bytes: float = WEIGHT_BYTES, trained: float = 1.0,
                               grad_bytes: int = GRAD_COMM_BYTES):
    """zero_per_micro_batch_s without latency terms, with `s_per_byte` = ring_s_per_byte of the
    ring (or a lower bound on it) and `grad_bytes` at most its: a lower bound on it (numbers or numpy
    arrays)."""
    gather = s_per_byte * weight_bytes_per_gpu
    grads = gather / weight_element_bytes * grad_bytes * trained
    if zero_stage == 3:
        return gather, gather + grads
    if zero_stage == 2:
        return 0.0 * gather, grads
    return 0.0 * gather, 0.0 * gather


def hybrid_zero_floor(zero_stage: int, weight_bytes_per_gpu, replicas, group, group_bw, ring_bw,
                      weight_element_bytes: float = WEIGHT_BYTES, trained: float = 1.0,
                      grad_bytes: int = GRAD_COMM_BYTES):
    """A lower bound on ZeRO's per-micro-batch collectives under hybrid sharding as planner.cost.evaluate
    prices them: zero_per_micro_batch_s over the `group` ranks of a shard group on its link, then each rank's
    shard of the gradients all-reduced across the replicas / group groups on the data-parallel ring
    (grad_sync_s, ZeRO-0). Latency terms dropped, all-reduce at its ring bandwidth term (below the tree's),
    `grad_bytes` per gradient element (at most the engine's); `group_bw` and `ring_bw` at least those links'
    bandwidths. tests/test_formulas.py holds it below the exact sum on random inputs. Numbers or numpy arrays."""
    f, b = zero_per_micro_batch_floor(zero_stage, weight_bytes_per_gpu, group, ring_s_per_byte(group, group_bw),
                                      weight_element_bytes, trained, grad_bytes)
    shard_grads = weight_bytes_per_gpu / weight_element_bytes * grad_bytes * trained / group
    return f, b + (zero_stage >= 2) * 2 * ring_s_per_byte(replicas / group, ring_bw) * shard_grads


def grad_sync_s(zero_stage: int, params_per_gpu: float, replicas: int, bw: float, latency_s: float,
                grad_bytes: int = GRAD_COMM_BYTES) -> float:
    """Gradient reduction after the last micro-batch: an all-reduce (ZeRO-0) or a reduce-scatter
    (ZeRO-1, Megatron-LM's distributed optimizer); ZeRO-2/3 reduced per micro-batch instead.
    `grad_bytes`: per element on the wire (the engine's, planner.engines.base.Execution)."""
    grad_bytes = params_per_gpu * grad_bytes
    if zero_stage == 0:
        return all_reduce_s(grad_bytes, replicas, bw, latency_s)
    if zero_stage == 1:
        return reduce_scatter_s(grad_bytes, replicas, bw, latency_s)
    return 0.0


def optimizer_step_s(params_on_gpu, mem_bw_bytes_per_s):
    """Adam over the parameters this GPU updates, at the memory bandwidth element-wise kernels reach."""
    return params_on_gpu * OPTIMIZER_STEP_BYTES_PER_PARAM / (mem_bw_bytes_per_s * MEM_BW_EFFICIENCY)


def step_shard_params(params_per_gpu, zero_stage: int, replicas):
    """Parameters a GPU's optimizer step updates: its tensor-parallel slice, sharded over the
    replicas from ZeRO-1 on."""
    return params_per_gpu / (replicas if zero_stage >= 1 else 1)


def step_s(states: ModelStates, zero_stage: int, params_per_gpu, replicas, pool: Pool):
    """The optimizer step over this GPU's shard of the trained parameters: on the GPU, or with
    offload on the host, with the gradients' and weights' trips over PCIe (planner.offload)."""
    shard = step_shard_params(params_per_gpu * states.trainable, zero_stage, replicas)
    if states.offloads:
        return offload_step_s(shard, states.offload_grad_bytes, states.trained_weight_bytes, pool.gpu, pool)
    return optimizer_step_s(shard, pool.gpu.mem_bw_bytes_per_s)


def fetch_s(states: ModelStates, params_per_gpu: float, replicas: int, gpu) -> float:
    """Offloaded parameters (ZeRO-3 offload_param): each forward and backward pass brings this GPU's
    weight shard over PCIe before ZeRO-3 gathers it (planner.offload.param_fetch_s); 0 otherwise."""
    if not states.host_weight_bytes:
        return 0.0
    return param_fetch_s(params_per_gpu / replicas * states.host_weight_bytes, gpu)


def after_step_s(zero_stage: int, params_per_gpu: float, replicas: int, pool: Pool, bw: float,
                 latency_s: float, states: ModelStates, gather_hidden_behind_s: float = 0.0) -> float:
    """Optimizer step on this GPU's shard (step_s), then (ZeRO-1/2) the all-gather of the updated
    16-bit trained weights; ZeRO-3 gathers them on use instead. `gather_hidden_behind_s`: compute
    the all-gather runs beside, the next iteration's first forward pass under Megatron-Core's
    --overlap-param-gather (megatron/core/optimizer/distrib_optimizer.py @core_r0.8.0: the first
    bucket's all-gather is launched before the forward, each next one from the forward pre-hook
    of the module that waits on it); 0 when it runs after the step."""
    step = step_s(states, zero_stage, params_per_gpu, replicas, pool)
    weight_element_bytes = states.trained_weight_bytes
    params_per_gpu = params_per_gpu * states.trainable
    gather = (all_gather_s(params_per_gpu * weight_element_bytes, replicas, bw, latency_s)
              if zero_stage in (1, 2) else 0.0)
    return step + overlapped_s(gather, gather_hidden_behind_s)
