"""Fast analytic scoring of a layout with knobs: split, shares, memory check, iteration time.

It uses the cost model's own pieces (planner.compute.stage_pass_times, planner.memory, the
alpha-beta collectives of planner.comm) but replaces the pipeline simulation by the 1F1B bound

    T ~ max_i W_i + (sum_i t_i - t_crit) / v + 2 (p - 1) x         (Narayanan et al. 2021, eq. 1-2)

with W_i the busiest replica of stage i over an iteration, t_i one micro-batch's forward and
backward through stage i, v the interleave and x one activation transfer; then adds the exposed
data-parallel synchronisation and the optimizer step as planner.cost does. Final candidates are
re-scored by planner.cost.evaluate, which decides the ranking.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.comm import INTRA_NODE_LATENCY_S, all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from planner.compute import ACT_BYTES, stage_pass_times
from planner.cost import GRAD_COMM_BYTES, OPTIMIZER_STEP_BYTES_PER_PARAM, CostOptions
from planner.flops import embedding_params, head_params, layer_params
from planner.memory import (FRAMEWORK_OVERHEAD_BYTES, MAIN_GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES,
                            in_flight_micro_batches, layer_activation_bytes)
from planner.search.space import Group, Knobs, Layout
from planner.search.split import StageCosts, even_shares, even_split, share_micro_batches, split_layers
from planner.types import (Cluster, Job, Plan, Pool, Precision, Recompute, Replica, Schedule, Stage)


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    knobs: Knobs
    precision: Precision
    layers: tuple[int, ...]
    shares: tuple[tuple[int, ...], ...]   # micro-batches per replica, groups expanded in order
    time_s: float                        # fast estimate of the iteration time
    price_per_hour_usd: float
    memory_binds: bool = False           # the split is limited by memory, not by time

    def to_plan(self, job: Job) -> Plan:
        stages, start = [], 0
        sp = any(g.tp > 1 for stage in self.layout.stages for g in stage)
        for groups, n_layers, shares in zip(self.layout.stages, self.layers, self.shares):
            pools = [g for g in groups for _ in range(g.count)]
            replicas = tuple(Replica(g.pool, g.tp, n * self.knobs.micro_batch) for g, n in zip(pools, shares))
            stages.append(Stage(start, start + n_layers, replicas))
            start += n_layers
        return Plan(job.model, job.global_batch, job.seq_len, self.knobs.micro_batch, self.precision,
                    tuple(stages), self.knobs.zero_stage, self.knobs.recompute, sp,
                    Schedule.ONE_F_ONE_B, self.knobs.interleave)


@dataclass(frozen=True)
class _StageShape:
    replicas: range


@dataclass(frozen=True)
class _Shape:
    """The fields of a Plan that planner.memory reads for activations and in-flight micro-batches."""
    model: object
    seq_len: int
    micro_batch: int
    sequence_parallel: bool
    recompute: Recompute
    num_stages: int
    schedule: Schedule
    interleave: int
    stages: tuple[_StageShape, ...]
    num_micro_batches: int


class Scorer:
    """Scores candidates for one cluster and job; caches per-GPU pass times and shares."""

    def __init__(self, cluster: Cluster, job: Job, options: CostOptions = CostOptions()):
        self.cluster, self.job, self.options = cluster, job, options
        self.model = job.model
        self.pools = {p.name: p for p in cluster.pools}
        self._pass: dict = {}
        self._shares: dict = {}
        self._act: dict = {}
        self._caps: dict = {}
        self._p2p: dict = {}
        self._best_rate: dict = {}
        self.layer_params = layer_params(self.model)
        self.embedding_params = embedding_params(self.model)
        self.head_params = head_params(self.model)

    # ------------------------------------------------------------------ per-GPU coefficients

    def pass_times(self, pool: Pool, tp: int, mb: int, recompute: Recompute, sp: bool):
        """(forward, backward) of one layer, and of the head alone, for one micro-batch."""
        key = (pool.gpu.id, tp, mb, recompute, sp)       # the passes depend on the GPU, not on its pool
        if key not in self._pass:
            m, s, flash = self.model, self.job.seq_len, self.options.flash_attention
            link = pool.gpu.link_bw_bytes_per_s
            layer = stage_pass_times(m, pool.gpu, 1, False, s, mb, tp, sp, recompute, flash, link)
            head = stage_pass_times(m, pool.gpu, 0, True, s, mb, tp, sp, recompute, flash, link)
            self._pass[key] = (layer.forward_s, layer.backward_s, head.forward_s, head.backward_s)
        return self._pass[key]

    def best_sample_layer_s(self, pool: Pool, tp: int, sp: bool) -> float:
        """Fastest time of one sample through one layer, forward and backward, over micro-batch
        sizes, without recomputation: the lower bound used for pruning."""
        key = (pool.name, tp, sp)
        if key not in self._best_rate:
            best = math.inf
            for mb in _powers_of_two_dividing(self.job.global_batch):
                f, b, _, _ = self.pass_times(pool, tp, mb, Recompute.NONE, sp)
                best = min(best, (f + b) / mb)
            self._best_rate[key] = best
        return self._best_rate[key]

    def activation_bytes(self, shape: _Shape, tp: int, recompute: Recompute | None = None) -> float:
        key = (shape.micro_batch, shape.sequence_parallel, shape.recompute, tp, recompute)
        if key not in self._act:
            self._act[key] = layer_activation_bytes(shape, tp, self.options.flash_attention, recompute)
        return self._act[key]

    # ------------------------------------------------------------------ one candidate

    def shares(self, layout: Layout, knobs: Knobs, sp: bool) -> tuple[tuple[int, ...], ...] | None:
        out = []
        for groups in layout.stages:
            found = self.stage_shares(groups, knobs.micro_batch, knobs.recompute, sp)
            if found is None:
                return None
            out.append(found)
        return tuple(out)

    def stage_shares(self, groups: tuple[Group, ...], mb: int, recompute: Recompute, sp: bool):
        """Micro-batches per replica of one stage (groups expanded in order), or None."""
        key = (groups, mb, recompute, sp)
        if key not in self._shares:
            m = self.job.global_batch // mb
            if len(groups) == 1:
                self._shares[key] = tuple(even_shares(m, groups[0].count)) if m >= groups[0].count else None
            else:
                taus = [sum(self.pass_times(self.pools[g.pool], g.tp, mb, recompute, sp)[:2])
                        for g in groups for _ in range(g.count)]
                found = share_micro_batches(m, taus)
                self._shares[key] = tuple(found) if found else None
        return self._shares[key]

    def score(self, layout: Layout, knobs: Knobs, precision: Precision, uniform: bool = False) -> Candidate | None:
        """Best split and shares for this layout and knobs, and the fast iteration time; None when
        nothing fits. `uniform`: layers and samples split evenly instead (the baselines)."""
        sp = any(g.tp > 1 for stage in layout.stages for g in stage)
        shares = self._even_shares(layout, knobs) if uniform else self.shares(layout, knobs, sp)
        if shares is None:
            return None
        p = layout.num_stages
        if knobs.interleave > 1 and any(n % p for stage in shares for n in stage):
            return None  # Megatron-LM's interleaved schedule needs micro-batches in whole groups of p
        stage_shapes = tuple(_StageShape(range(sum(g.count for g in groups))) for groups in layout.stages)
        shape = _Shape(self.model, self.job.seq_len, knobs.micro_batch, sp, knobs.recompute, p,
                       Schedule.ONE_F_ONE_B, knobs.interleave, stage_shapes, self.job.global_batch // knobs.micro_batch)
        costs, windows = [], _windows(layout)
        for i in range(p):
            costs.append(self._stage_costs(layout, knobs, shape, i, shares[i], sp, windows[i]))
            if costs[-1].max_layers < knobs.interleave:
                return None
        memory_binds = False
        if uniform:
            layers = even_split(self.model.layers, p, knobs.interleave)
            if layers is None or any(n > c.max_layers for n, c in zip(layers, costs)):
                return None
        else:
            found = split_layers(self.model.layers, costs, knobs.interleave)
            if found is None:
                return None
            layers, memory_binds = found
        time_s = self._iteration_s(layout, knobs, layers, shares, sp)
        price = sum(n * self.pools[name].price_per_gpu_hour_usd for name, n in layout.gpus_by_pool().items())
        return Candidate(layout, knobs, precision, layers, shares, time_s, price, memory_binds)

    def could_fit(self, layout: Layout, micro_batch: int, interleave: int) -> bool:
        """Whether the most memory-frugal knobs (ZeRO-3, full recompute) leave room for every layer."""
        sp = any(g.tp > 1 for stage in layout.stages for g in stage)
        zero = 3 if layout.max_replicas_per_stage > 1 else 0
        knobs = Knobs(micro_batch, zero, Recompute.FULL, interleave)
        shares = self.shares(layout, knobs, sp)
        if shares is None:
            return False
        p = layout.num_stages
        stage_shapes = tuple(_StageShape(range(sum(g.count for g in groups))) for groups in layout.stages)
        shape = _Shape(self.model, self.job.seq_len, micro_batch, sp, Recompute.FULL, p,
                       Schedule.ONE_F_ONE_B, interleave, stage_shapes, self.job.global_batch // micro_batch)
        room, windows = 0, _windows(layout)
        for i in range(p):
            most = self._stage_costs(layout, knobs, shape, i, shares[i], sp, windows[i]).max_layers
            if most < interleave:
                return False
            room += most - most % interleave
        return room >= self.model.layers

    def _even_shares(self, layout: Layout, knobs: Knobs):
        m = self.job.global_batch // knobs.micro_batch
        out = []
        for groups in layout.stages:
            replicas = sum(g.count for g in groups)
            if m < replicas:
                return None
            out.append(tuple(even_shares(m, replicas)))
        return tuple(out)

    def _group_max_shares(self, groups: tuple[Group, ...], shares: tuple[int, ...]) -> list[int]:
        out, k = [], 0
        for g in groups:
            out.append(max(shares[k:k + g.count]))
            k += g.count
        return out

    def _stage_costs(self, layout, knobs, shape, i, shares, sp, window: int) -> StageCosts:
        groups = layout.stages[i]
        p = layout.num_stages
        last = i == p - 1
        slopes, intercepts, max_layers = [], [], 10**9
        for g, n in zip(groups, self._group_max_shares(groups, shares)):
            pool = self.pools[g.pool]
            f, b, hf, hb = self.pass_times(pool, g.tp, knobs.micro_batch, knobs.recompute, sp)
            slopes.append(n * (f + b))
            intercepts.append(n * (hf + hb) if last else 0.0)
            max_layers = min(max_layers, self._max_layers(pool, g.tp, knobs, shape, i, n, sum(x.count for x in groups),
                                                          window))
        return StageCosts(tuple(slopes), tuple(intercepts), max_layers)

    def _max_layers(self, pool: Pool, tp: int, knobs: Knobs, shape: _Shape, i: int, own: int, replicas: int,
                    window: int) -> int:
        """Most layers stage i can hold on one GPU of this replica (planner.memory, solved for L);
        `window`: the replicas of stage i and every later stage (its 1F1B window)."""
        p = shape.num_stages
        key = (pool.name, tp, knobs, shape.sequence_parallel, p, i == 0, i == p - 1, own, replicas,
               window if shape.interleave == 1 else i)
        if key not in self._caps:
            self._caps[key] = self._solve_max_layers(pool, tp, knobs, shape, i, own, replicas)
        return self._caps[key]

    def _solve_max_layers(self, pool: Pool, tp: int, knobs: Knobs, shape: _Shape, i: int, own: int, replicas: int) -> int:
        m, s, b, z, d = self.model, self.job.seq_len, knobs.micro_batch, knobs.zero_stage, replicas
        p = shape.num_stages
        per_param = (WEIGHT_BYTES / (d if z >= 3 else 1) + MAIN_GRAD_BYTES / (d if z >= 2 else 1)
                     + OPTIMIZER_BYTES / (d if z >= 1 else 1))
        fixed_params = (self.embedding_params if i == 0 else 0) + (self.head_params if i == p - 1 else 0)
        if i == p - 1 and m.tied_embeddings and p > 1:
            fixed_params += m.vocab * (m.embed_proj_dim or m.hidden)
        edge = (2 * s * b * m.hidden / tp if i == 0 else 0.0)
        edge += 4 * s * b * m.hidden / tp * (1 + m.vocab / m.hidden) if i == p - 1 else 0.0
        extra = self.activation_bytes(shape, tp, Recompute.NONE) if knobs.recompute == Recompute.FULL else 0.0
        in_flight = in_flight_micro_batches(shape, i, own)
        free = pool.gpu.mem_bytes - FRAMEWORK_OVERHEAD_BYTES - fixed_params / tp * per_param - edge - extra
        per_layer = self.layer_params / tp * per_param + in_flight * self.activation_bytes(shape, tp)
        if free < 0:
            return 0
        return math.floor(free / per_layer * (1 - 1e-9))

    # ------------------------------------------------------------------ time

    def _iteration_s(self, layout: Layout, knobs: Knobs, layers, shares, sp: bool) -> float:
        p, v, mb = layout.num_stages, knobs.interleave, knobs.micro_batch
        worst_load, per_mb, tail = 0.0, [], 0.0
        crit = 0
        for i, groups in enumerate(layout.stages):
            last = i == p - 1
            d = sum(g.count for g in groups)
            params = self._stage_params(layers, i, p)
            min_tp = min(g.tp for g in groups)
            dp_bw, dp_lat = self._dp_link(groups)
            zf, zb = _zero_per_micro_batch(knobs.zero_stage, params / min_tp * WEIGHT_BYTES, d, dp_bw, dp_lat)
            stage_mb, stage_bwd = 0.0, 0.0
            for g, n in zip(groups, self._group_max_shares(groups, shares[i])):
                pool = self.pools[g.pool]
                f1, b1, hf, hb = self.pass_times(pool, g.tp, mb, knobs.recompute, sp)
                f = layers[i] * f1 + (hf if last else 0.0)
                b = layers[i] * b1 + (hb if last else 0.0)
                f, b = f + max(0.0, zf - f), b + max(0.0, zb - b)
                stage_mb, stage_bwd = max(stage_mb, f + b), max(stage_bwd, b)
                if n * (f + b) > worst_load:
                    worst_load, crit = n * (f + b), i
            per_mb.append(stage_mb)
            sync = _dp_sync(knobs.zero_stage, params / min_tp, d, dp_bw, dp_lat)
            exposed = max(0.0, sync - stage_bwd / v) if self.options.overlap_grad_reduce else sync
            tail = max(tail, exposed + self._after_step(groups, knobs.zero_stage, params, d, dp_bw, dp_lat))
        fill = (sum(per_mb) - per_mb[crit]) / v
        transfers = 2 * (p - 1) * v * self._p2p_s(layout, mb) if p > 1 else 0.0
        return worst_load + fill + transfers + tail

    def _stage_params(self, layers, i: int, p: int) -> float:
        n = layers[i] * self.layer_params
        if i == 0:
            n += self.embedding_params
        if i == p - 1:
            n += self.head_params
            if self.model.tied_embeddings and p > 1:
                n += self.model.vocab * (self.model.embed_proj_dim or self.model.hidden)
        return n

    def _dp_link(self, groups: tuple[Group, ...]) -> tuple[float, float]:
        """(bandwidth per rank, latency) of a stage's data-parallel ring, as planner.cost sees it
        when nodes are full: one node's share per replica, the slowest member binding."""
        if len(groups) == 1:
            g = groups[0]
            pool = self.pools[g.pool]
            if g.count * g.tp <= pool.gpus_per_node:
                return pool.gpu.link_bw_bytes_per_s, INTRA_NODE_LATENCY_S
        bw, latency = math.inf, 0.0
        first = self.pools[groups[0].pool]
        for g in groups:
            pool = self.pools[g.pool]
            flows = min(g.count, pool.gpus_per_node // g.tp)
            used = min(pool.gpus_per_node, g.count * g.tp)
            share = pool.inter_node_bw_bytes_per_s * flows / used
            if pool.name != first.name:
                share = min(share, self.cluster.bw_between_pools(pool, first) * flows / used)
            bw = min(bw, share, pool.gpu.link_bw_bytes_per_s)
            latency = max(latency, pool.inter_node_latency_s)
        return bw, latency

    def _after_step(self, groups, zero: int, params: float, d: int, bw: float, lat: float) -> float:
        worst = 0.0
        for g in groups:
            gpu = self.pools[g.pool].gpu
            shard = params / g.tp / (d if zero >= 1 else 1)
            step = shard * OPTIMIZER_STEP_BYTES_PER_PARAM / (gpu.mem_bw_bytes_per_s * 0.8)
            gather = all_gather_s(params / g.tp * WEIGHT_BYTES, d, bw, lat) if zero in (1, 2) else 0.0
            worst = max(worst, step + gather)
        return worst

    def _p2p_s(self, layout: Layout, mb: int) -> float:
        """One activation transfer across the slowest stage boundary, over the network."""
        worst = 0.0
        for a, b in zip(layout.stages, layout.stages[1:]):
            for ga in a:
                for gb in b:
                    worst = max(worst, self.boundary_p2p_s(ga, gb, mb))
        return worst

    def boundary_p2p_s(self, ga: Group, gb: Group, mb: int) -> float:
        """One activation transfer between a replica of group `ga` and one of the next stage's `gb`."""
        key = (ga.pool, ga.tp, gb.pool, gb.tp, mb)
        if key not in self._p2p:
            num_bytes = ACT_BYTES * self.job.seq_len * mb * self.model.hidden
            pa, pb = self.pools[ga.pool], self.pools[gb.pool]
            tp = min(ga.tp, gb.tp)
            bw = min(pa.inter_node_bw_bytes_per_s, pb.inter_node_bw_bytes_per_s) * tp / max(
                pa.gpus_per_node, pb.gpus_per_node)
            if pa.name != pb.name:
                bw = min(bw, self.cluster.bw_between_pools(pa, pb) * tp / pa.gpus_per_node)
            self._p2p[key] = p2p_s(num_bytes, bw, max(pa.inter_node_latency_s, pb.inter_node_latency_s))
        return self._p2p[key]


def _windows(layout: Layout) -> list[int]:
    """For each stage, the replicas of it and of every later stage."""
    out, total = [], 0
    for stage in reversed(layout.stages):
        total += sum(g.count for g in stage)
        out.append(total)
    return out[::-1]


def _zero_per_micro_batch(zero: int, weight_bytes: float, d: int, bw: float, lat: float) -> tuple[float, float]:
    if zero < 2 or d == 1:
        return 0.0, 0.0
    grads = reduce_scatter_s(weight_bytes / WEIGHT_BYTES * GRAD_COMM_BYTES, d, bw, lat)
    if zero == 2:
        return 0.0, grads
    gather = all_gather_s(weight_bytes, d, bw, lat)
    return gather, gather + grads


def _dp_sync(zero: int, params_per_gpu: float, d: int, bw: float, lat: float) -> float:
    grad_bytes = params_per_gpu * GRAD_COMM_BYTES
    if zero == 0:
        return all_reduce_s(grad_bytes, d, bw, lat)
    if zero == 1:
        return reduce_scatter_s(grad_bytes, d, bw, lat)
    return 0.0


def _powers_of_two_dividing(n: int):
    mb = 1
    while mb <= n:
        if n % mb == 0:
            yield mb
        mb *= 2
