"""The one cost model: a cluster and a plan in, an `Estimate` out.

iteration time = pipeline makespan (schedule simulation of per-micro-batch pass times and
                 point-to-point transfers)
               + exposed data-parallel gradient synchronisation (the part not hidden behind the
                 last micro-batch's backward pass)
               + parameter all-gather after the step (ZeRO 1-2) and the optimizer step
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.comm import INTRA_NODE_LATENCY_S, all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from planner.explain import bottleneck
from planner.compute import ACT_BYTES, stage_pass_times
from planner.flops import model_flops_per_iteration, stage_params
from planner.memory import WEIGHT_BYTES, replica_memory
from planner.placement import Placement, place
from planner.schedule import simulate
from planner.types import (GIB, Cluster, Estimate, Plan, Pool, ReplicaEstimate, Schedule, TimeTerm)

# Adam step: read fp32 grad, master, m, v; write master, m, v and the 16-bit weight: 30 bytes
# per parameter, memory-bound (Megatron-LM's fused Adam / apex multi-tensor apply).
OPTIMIZER_STEP_BYTES_PER_PARAM = 30
# Gradients cross the network in 16 bits (Megatron-LM's default grad_reduce_in_fp32=False and
# DeepSpeed's fp16/bf16 reduction); main gradients are still accumulated in fp32 in memory.
GRAD_COMM_BYTES = 2


@dataclass(frozen=True)
class CostOptions:
    flash_attention: bool = True     # FlashAttention kernels (Dao et al. 2022); False for 2021-22 Megatron runs
    overlap_grad_reduce: bool = True  # gradient reduction overlapped with the last backward pass


class _Links:
    """Bandwidths of the links a plan's traffic crosses, from its placement."""

    def __init__(self, cluster: Cluster, plan: Plan, placement: Placement):
        self.cluster, self.plan, self.placement = cluster, plan, placement
        self._pools = {p.name: p for p in cluster.pools}
        self._p2p: dict[tuple[int, int, int, int], float] = {}

    def pool_of(self, i: int, r: int) -> Pool:
        return self._pools[self.plan.stages[i].replicas[r].pool]

    def intra_bw(self, i: int, r: int) -> float:
        return self.pool_of(i, r).gpu.link_bw_bytes_per_s

    def network_share(self, i: int, r: int, flows: int) -> float:
        """Bytes/s one of `flows` concurrent streams gets from the node's network (per direction)."""
        slot = self.placement.slots[(i, r)]
        gpus_busy = self.placement.gpus_used_per_node[(slot.pool, slot.node)]
        pool = self.pool_of(i, r)
        return pool.inter_node_bw_bytes_per_s * flows / gpus_busy

    def cross_bw(self, a: tuple[int, int], b: tuple[int, int], flows_a: int, flows_b: int) -> tuple[float, float]:
        """(bandwidth, latency) between replicas a and b, each sending over `flows` GPUs."""
        if self.placement.same_node(a, b):
            return min(self.intra_bw(*a), self.intra_bw(*b)), INTRA_NODE_LATENCY_S
        pa, pb = self.pool_of(*a), self.pool_of(*b)
        share = min(self.network_share(*a, flows_a), self.network_share(*b, flows_b))
        if pa.name != pb.name:
            between = self.cluster.bw_between_pools(pa, pb)
            share = min(share, between * flows_a / self.placement.gpus_used_per_node[
                (self.placement.slots[a].pool, self.placement.slots[a].node)])
        share = min(share, self.intra_bw(*a) * flows_a, self.intra_bw(*b) * flows_b)
        return share, max(pa.inter_node_latency_s, pb.inter_node_latency_s)

    def p2p_delay(self, i: int, r: int, i2: int, r2: int) -> float:
        """Activation (or its gradient) of one micro-batch from replica (i, r) to (i2, r2); with
        tp > 1 each GPU of the group sends 1/tp of it (Narayanan et al. 2021, scatter/gather)."""
        key = (i, r, i2, r2)
        if key not in self._p2p:
            self._p2p[key] = self._p2p_delay(i, r, i2, r2)
        return self._p2p[key]

    def _p2p_delay(self, i: int, r: int, i2: int, r2: int) -> float:
        plan = self.plan
        tp = min(plan.stages[i].replicas[r].tp, plan.stages[i2].replicas[r2].tp)
        num_bytes = ACT_BYTES * plan.seq_len * plan.micro_batch * plan.model.hidden
        bw, latency = self.cross_bw((i, r), (i2, r2), tp, tp)
        return p2p_s(num_bytes, bw, latency)

    def dp_group(self, i: int) -> tuple[float, float]:
        """(bandwidth per rank, latency) of the ring joining stage i's replicas."""
        members = [(i, r) for r in range(len(self.plan.stages[i].replicas))]
        nodes = {(self.placement.slots[m].pool, self.placement.slots[m].node) for m in members}
        if len(nodes) == 1:
            return min(self.intra_bw(*m) for m in members), INTRA_NODE_LATENCY_S
        per_node: dict[tuple[str, int], int] = {}
        for m in members:
            key = (self.placement.slots[m].pool, self.placement.slots[m].node)
            per_node[key] = per_node.get(key, 0) + 1
        worst_bw, worst_latency = math.inf, 0.0
        first = members[0]
        for m in members:
            slot = self.placement.slots[m]
            flows = per_node[(slot.pool, slot.node)]
            bw = min(self.network_share(*m, flows), self.intra_bw(*m))
            if self.pool_of(*m).name != self.pool_of(*first).name:
                between = self.cluster.bw_between_pools(self.pool_of(*m), self.pool_of(*first))
                bw = min(bw, between * flows / self.placement.gpus_used_per_node[(slot.pool, slot.node)])
            worst_bw = min(worst_bw, bw)
            worst_latency = max(worst_latency, self.pool_of(*m).inter_node_latency_s)
        return worst_bw, worst_latency


def _zero_per_micro_batch_s(plan: Plan, i: int, stage_bytes_per_gpu: float, bw: float, lat: float):
    """ZeRO-3 gathers weights for each forward and backward and reduce-scatters gradients per
    micro-batch; ZeRO-2 reduce-scatters gradients per micro-batch (Rajbhandari et al. 2020,
    section 7; DeepSpeed's behaviour under gradient accumulation). Returns (forward, backward) s."""
    d = len(plan.stages[i].replicas)
    if plan.zero_stage < 2 or d == 1:
        return 0.0, 0.0
    grads = reduce_scatter_s(stage_bytes_per_gpu / WEIGHT_BYTES * GRAD_COMM_BYTES, d, bw, lat)
    if plan.zero_stage == 2:
        return 0.0, grads
    gather = all_gather_s(stage_bytes_per_gpu, d, bw, lat)
    return gather, gather + grads


def evaluate(cluster: Cluster, plan: Plan, tokens_to_train: float | None = None,
             options: CostOptions = CostOptions(), timeline: bool = False, detail: bool = True) -> Estimate:
    """`detail=False` skips the second simulation (without transfer times) that splits pipeline
    waiting into bubble and exposed transfers: the breakdown then counts both as bubble, and
    every other figure is identical. The search ranks with it and reports full estimates."""
    placement = place(cluster, plan)
    links = _Links(cluster, plan, placement)
    p = plan.num_stages
    fwd, bwd, counts, replica_estimates = [], [], [], []
    tp_comm, compute, zero_exposed = {}, {}, {}
    dp_sync, after_step = [], []
    for i, stage in enumerate(plan.stages):
        dp_bw, dp_lat = links.dp_group(i)
        fwd.append([]), bwd.append([]), counts.append([])
        params = stage_params(plan.model, stage.layer_start, stage.layer_end, p)
        min_tp = min(r.tp for r in stage.replicas)
        weight_bytes = params / min_tp * WEIGHT_BYTES
        zf, zb = _zero_per_micro_batch_s(plan, i, weight_bytes, dp_bw, dp_lat)
        passes, memories = {}, {}       # a stage's replicas of one pool and tp share these (thousands at scale)
        for r, rep in enumerate(stage.replicas):
            pool = cluster.pool(rep.pool)
            if (rep.pool, rep.tp) not in passes:
                passes[(rep.pool, rep.tp)] = stage_pass_times(
                    plan.model, pool.gpu, stage.num_layers, stage.layer_end == plan.model.layers, plan.seq_len,
                    plan.micro_batch, rep.tp, plan.sequence_parallel, plan.recompute, options.flash_attention,
                    pool.gpu.link_bw_bytes_per_s)
            times = passes[(rep.pool, rep.tp)]
            f_comp = times.forward_s
            f_exp = max(0.0, zf - f_comp)
            b_exp = max(0.0, zb - times.backward_s)
            fwd[i].append(f_comp + f_exp)
            bwd[i].append(times.backward_s + b_exp)
            own = rep.samples // plan.micro_batch
            counts[i].append(own)
            tp_comm[(i, r)] = times.tp_comm_s * own
            compute[(i, r)] = times.compute_s * own
            zero_exposed[(i, r)] = (f_exp + b_exp) * own
            if (rep.pool, rep.tp, rep.samples) not in memories:      # memory depends on these alone
                memories[(rep.pool, rep.tp, rep.samples)] = replica_memory(plan, i, r, pool.gpu.mem_bytes,
                                                                           options.flash_attention)
            memory = memories[(rep.pool, rep.tp, rep.samples)]
            replica_estimates.append(ReplicaEstimate(i, r, pool.name, pool.gpu.id, rep.tp, rep.samples,
                                                     fwd[i][r], bwd[i][r], memory))
        dp_sync.append(_dp_sync_s(plan, i, params / min_tp, dp_bw, dp_lat))
        after_step.append(_after_step_s(plan, i, params, dp_bw, dp_lat, cluster))
    sim = simulate(counts, fwd, bwd, links.p2p_delay, plan.schedule, plan.interleave, timeline)
    sim_local = simulate(counts, fwd, bwd, lambda *a: 0.0, plan.schedule, plan.interleave) if detail else sim
    p2p_total = _p2p_per_replica(plan, counts, links)
    return _assemble(cluster, plan, tokens_to_train, options, sim, sim_local, replica_estimates,
                     tp_comm, compute, zero_exposed, p2p_total, dp_sync, after_step)


def _p2p_per_replica(plan: Plan, counts, links: _Links) -> dict:
    """Transfer time into and out of each replica over an iteration, forward and backward,
    taking each neighbour stage's first replica as the partner (exact when lanes line up)."""
    total = {}
    p = plan.num_stages
    for i, stage in enumerate(plan.stages):
        for r in range(len(stage.replicas)):
            per_mb = 0.0
            if i > 0:
                per_mb += 2 * links.p2p_delay(i - 1, r % len(plan.stages[i - 1].replicas), i, r)
            if i < p - 1:
                per_mb += 2 * links.p2p_delay(i, r, i + 1, r % len(plan.stages[i + 1].replicas))
            total[(i, r)] = per_mb * counts[i][r] * plan.interleave if p > 1 else 0.0
    return total


def _dp_sync_s(plan: Plan, i: int, params_per_gpu: float, bw: float, lat: float) -> float:
    d = len(plan.stages[i].replicas)
    grad_bytes = params_per_gpu * GRAD_COMM_BYTES
    if plan.zero_stage == 0:
        return all_reduce_s(grad_bytes, d, bw, lat)
    if plan.zero_stage == 1:
        return reduce_scatter_s(grad_bytes, d, bw, lat)
    return 0.0  # ZeRO-2/3 reduced per micro-batch


def _after_step_s(plan: Plan, i: int, params: float, bw: float, lat: float, cluster: Cluster) -> float:
    """Optimizer step on this GPU's shard, then (ZeRO 1-2) all-gather of the updated weights."""
    stage = plan.stages[i]
    d = len(stage.replicas)
    worst = 0.0
    for rep in stage.replicas:
        gpu = cluster.pool(rep.pool).gpu
        shard = params / rep.tp / (d if plan.zero_stage >= 1 else 1)
        step = shard * OPTIMIZER_STEP_BYTES_PER_PARAM / (gpu.mem_bw_bytes_per_s * 0.8)
        gather = all_gather_s(params / rep.tp * WEIGHT_BYTES, d, bw, lat) if plan.zero_stage in (1, 2) else 0.0
        worst = max(worst, step + gather)
    return worst


def _assemble(cluster, plan, tokens_to_train, options, sim, sim_local, replica_estimates,
              tp_comm, compute, zero_exposed, p2p_total, dp_sync, after_step) -> Estimate:
    p = plan.num_stages
    # Each stage finishes its iteration when its slowest replica has synchronised gradients.
    finish, dp_total, dp_exposed, step_total = 0.0, 0.0, 0.0, 0.0
    for i in range(p):
        for r in range(len(plan.stages[i].replicas)):
            overlap = sim.last_backward_s[i][r] if options.overlap_grad_reduce else 0.0
            exposed = max(0.0, dp_sync[i] - overlap)
            done = sim.end_s[i][r] + exposed + after_step[i]
            if done >= finish:
                finish, dp_total, dp_exposed, step_total = done, dp_sync[i], done - sim.end_s[i][r] - after_step[i], after_step[i]
    iteration = finish
    makespan = sim.makespan_s
    # the pipeline's critical worker: the busiest one
    crit = max(((i, r) for i in range(p) for r in range(len(plan.stages[i].replicas))),
               key=lambda ir: sim.busy_s[ir[0]][ir[1]])
    busy = sim.busy_s[crit[0]][crit[1]]
    pp_exposed = max(0.0, makespan - sim_local.makespan_s)
    tail = iteration - makespan
    breakdown = {
        "compute": TimeTerm(compute[crit], compute[crit]),
        "tensor_parallel_comm": TimeTerm(tp_comm[crit], tp_comm[crit]),
        "zero_comm": TimeTerm(zero_exposed[crit], zero_exposed[crit]),
        "pipeline_bubble": TimeTerm(max(0.0, sim_local.makespan_s - busy), max(0.0, sim_local.makespan_s - busy)),
        "pipeline_p2p_comm": TimeTerm(max(p2p_total[crit], pp_exposed), pp_exposed),
        "data_parallel_comm": TimeTerm(dp_total, max(0.0, min(dp_exposed, tail))),
        "optimizer_step": TimeTerm(step_total, max(0.0, tail - max(0.0, min(dp_exposed, tail)))),
    }
    tokens = plan.global_batch * plan.seq_len
    used = plan.gpus_by_pool()
    price_per_hour = sum(n * cluster.pool(name).price_per_gpu_hour_usd for name, n in used.items())
    peak = sum(n * cluster.pool(name).gpu.peak_flops for name, n in used.items())
    mfu = model_flops_per_iteration(plan.model, plan.seq_len, plan.global_batch) / (iteration * peak)
    tokens_per_s = tokens / iteration
    cost_per_m = price_per_hour / 3600 * iteration / tokens * 1e6
    oom = _first_overflow(replica_estimates)
    train_time = tokens_to_train / tokens_per_s if tokens_to_train else None
    train_cost = train_time / 3600 * price_per_hour if train_time is not None else None
    notes = ("mixture-of-experts: experts are replicated inside each tensor-parallel group; expert "
             "parallelism and its all-to-all are not modelled",) if plan.model.is_moe else ()
    est = Estimate(iteration, makespan, tokens_per_s, mfu, price_per_hour, cost_per_m, not oom, breakdown,
                   tuple(replica_estimates), plan.num_gpus, "", oom, train_time, train_cost, notes,
                   timeline=sim.timeline)
    return replace(est, bottleneck=bottleneck(plan, est, crit))


def _first_overflow(replica_estimates) -> str:
    for e in replica_estimates:
        if not e.memory.fits:
            return (f"stage {e.stage} replica {e.replica} ({e.gpu}, pool {e.pool}, tp {e.tp}) needs "
                    f"{e.memory.total_bytes / GIB:.1f} GiB of {e.memory.capacity_bytes / GIB:.1f} GiB")
    return ""
