"""Fast analytic scoring of a layout with knobs: split, shares, memory check, iteration time.

Every figure comes from the cost model's own functions: pass times (planner.compute), memory
(planner.memory), the links of the placement evaluate uses (planner.placement.Links, for the
data-parallel rings and the stage-to-stage transfers), ZeRO collectives, gradient reduction and
the optimizer step (planner.dataparallel). Only the pipeline simulation is replaced: for each
kind of lane (replica r of every stage, as planner.schedule simulates lanes; lanes differ in
their replica group and in the links their transfers cross),

    lane ~ max( W_c + (sum_i t_i - t_c) / v + v sum_i x_i + (v - 1) x_wrap,   (Narayanan et al. 2021, eq. 1-2)
                max_i [ sum_{j<i} (t_j + x_j) + n_i S_i / k_i ] )            (the in-flight window)
    T ~ max over lanes + max_i (tail_i - drain_i)

with t_i the lane's forward + backward of one micro-batch through stage i, W_c = n_c t_c its
busiest stage, v the interleave, x_i the round trip (forward and backward transfer) across
boundary i. The window is what transfers cost when they do not hide: a replica holds at most k_i
micro-batches in flight (schedule.in_flight_micro_batches), each for at least S_i = sum_{j>=i}
t_j + x_j (its pass, the stages below and the transfers there and back; interleaved: its chunk's
way and, on average, half the other chunks' rounds), so its n_i micro-batches take n_i S_i / k_i.
tail_i is stage i's exposed gradient synchronisation and optimizer step, drain_i the pipeline's
last backward still running above it. Each candidate also carries `floor_s`, a lower bound on
evaluate's iteration time (its busiest replica, its lanes' windows, stage 0's tail, and for 1F1B in
Megatron-LM's fixed order the loops of neighbouring stages, _pairs_s). Final
candidates are re-scored by planner.cost.evaluate, which decides the ranking;
tests/test_one_cost_model.py holds the two within a stated tolerance.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable

from planner.compute import StagePass, pass_execution, stage_pass_times
from planner.numerics import numerics
from planner.training import model_states
from planner.cost import CostOptions, expert_link, hybrid_group_link, price_per_hour_usd
from planner.dataparallel import (after_step_s, exposed_grad_sync_s, fetch_s, grad_sync_s, zero_backward_exposed_s,
                                  zero_exposed_s, zero_per_micro_batch_s)
from planner.engines import get as engine_profile
from planner.experts import alltoall_s
from planner.flops import edge_param_count, expert_layer_params, layer_params, param_shards, stage_param_count
from planner.memory import (host_bytes_per_param, activation_bytes_per_layer, edge_activation_bytes_of,
                            recompute_workspace_bytes, state_bytes_per_param)
from planner.comm import activation_message_bytes
from planner.placement import context_ring_bw
from planner.schedule import (in_flight_micro_batches, interleave_groups_fit, interleaved_in_flight,
                              window_in_flight_limit)
from planner.search.links import Lane, LayoutLinker, LayoutLinks
from planner.search.space import INTERLEAVES, RECOMPUTES, Family, Group, Knobs, Layout
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
    floor_s: float = 0.0                 # a lower bound on planner.cost.evaluate's iteration time of it

    def to_plan(self, job: Job) -> Plan:
        """The plan; a group's `tp` is the replica's width, tp x the job's context parallelism."""
        stages, start, cp = [], 0, job.context_parallel
        sp = any(g.tp // cp > 1 for stage in self.layout.stages for g in stage)
        # the engine's tp-communication overlap, where it offers it: never slower in the cost model, so chosen
        overlap = sp and engine_profile(job.engine).space.tp_comm_overlap
        for groups, n_layers, shares in zip(self.layout.stages, self.layers, self.shares):
            pools = [g for g in groups for _ in range(g.count)]
            replicas = tuple(Replica(g.pool, g.tp // cp, n * self.knobs.micro_batch) for g, n in zip(pools, shares))
            stages.append(Stage(start, start + n_layers, replicas))
            start += n_layers
        return Plan(model=job.model, global_batch=job.global_batch, seq_len=job.seq_len,
                    micro_batch=self.knobs.micro_batch, precision=self.precision, stages=tuple(stages),
                    zero_stage=self.knobs.zero_stage, recompute=self.knobs.recompute, sequence_parallel=sp,
                    schedule=Schedule.ONE_F_ONE_B, interleave=self.knobs.interleave, engine=job.engine,
                    tf32=job.tf32 if self.precision == Precision.FP32 else None, training=job.training,
                    offload=job.offload, context_parallel=cp, expert_parallel=job.expert_parallel,
                    tp_comm_overlap=overlap, hybrid_shard=self.knobs.hybrid_shard,
                    expert_tensor_parallel=self.knobs.expert_tensor_parallel,
                    **engine_profile(job.engine).search_switches(len(self.layout.stages), self.knobs.zero_stage))


class Scorer:
    """Scores candidates for one cluster and job; caches per-GPU pass times, shares and links.

    Under context parallelism (job.context_parallel = cp > 1) the layouts' groups carry replica
    widths, tp x cp GPUs (space.tp_degrees): placement, GPU counts and links read widths as they are;
    pass times, activations and model states read tp = width / cp, the states sharded over the
    replicas x cp ranks (Megatron-LM's distributed optimizer over the data- and context-parallel group)."""

    def __init__(self, cluster: Cluster, job: Job, options: CostOptions = CostOptions()):
        self.cluster, self.job, self.options = cluster, job, options
        self.engine = engine_profile(job.engine)
        self.run = self.engine.execution          # as planner.cost.evaluate reads it for the plan's engine
        self.numerics = numerics(job.precision)   # None: 16-bit, whichever of bf16 and fp16 a layout takes
        self.states = model_states(job.precision, job.training, job.model, job.offload,   # planner.training
                                   self.run.offload_grad_bytes)
        self.model = job.model
        self.pools = {p.name: p for p in cluster.pools}
        self._shares: dict = {}
        self._act: dict = {}
        self._caps: dict = {}
        self._memory: dict = {}
        self._links: dict = {}
        self._stage_figures: dict = {}
        self._stage_costs_of: dict = {}
        self.linker = _linker(cluster)
        self._best_rate: dict = {}
        # the layer parameters one GPU holds at tp 1: routed experts 1/ep (expert parallelism); the
        # bounds read it as is (an under-estimate of the optimizer shards, so they stay bounds),
        # max_layers and iteration_s split the experts off (flops.param_shards)
        self.layer_params = layer_params(self.model)
        experts = expert_layer_params(self.model) if job.expert_parallel > 1 else 0.0
        self.layer_params_held = self.layer_params - experts * (1 - 1 / job.expert_parallel)
        self.layer_params_dense = self.layer_params - experts     # what all the stage's ranks reduce together
        self.cp = job.context_parallel
        self.expert_tp_searched = (job.expert_parallel > 1 and job.model.is_moe and job.context_parallel == 1
                                   and self.engine.space.expert_tensor_parallel)
        # the pass times of every scorer that reads the same inputs (those of pass_times), one dict
        self._pass = _shared_pass_times((cluster, job.model, job.seq_len, job.precision, job.training, self.cp,
                                         job.expert_parallel, options.flash_attention, self.expert_tp_searched,
                                         _pass_key(self.run, job, False),
                                         _pass_key(self.run, job, self.engine.space.tp_comm_overlap)))

    # ------------------------------------------------------------------ per-GPU coefficients

    def pass_times(self, pool: Pool, tp: int, mb: int, recompute: Recompute, sp: bool, expert_tp: int | None = None):
        """(forward, backward) of one layer, and of the head alone, for one micro-batch, each expert split over
        `expert_tp` GPUs (0: tp); None (the bounds, the shares): each the least over the expert-tp settings the
        search tries (space.expert_tp_settings: 1 where the engine offers it for a MoE model under ep)."""
        if expert_tp is None and not (tp > 1 and self.expert_tp_searched):
            expert_tp = 0
        # the passes depend on the GPU, not on its pool, but for a context-parallel ring across nodes
        key = (pool.gpu.id if self.cp == 1 else pool.name, tp, mb, recompute, sp, expert_tp)
        if key not in self._pass and expert_tp is None:
            self._pass[key] = tuple(map(min, self.pass_times(pool, tp, mb, recompute, sp, 0),
                                        self.pass_times(pool, tp, mb, recompute, sp, 1)))
        elif key not in self._pass:
            cp, t = self.cp, tp // self.cp
            # as to_plan sets the plan's tp_comm_overlap
            run = pass_execution(self.run, self.job.tf32, sp and self.engine.space.tp_comm_overlap)
            layer = StagePass(model=self.model, gpu=pool.gpu, num_layers=1, has_head=False, seq_len=self.job.seq_len,
                              micro_batch=mb, tp=t, sequence_parallel=sp, recompute=recompute,
                              flash_attention=self.options.flash_attention, link_bw=pool.gpu.link_bw_bytes_per_s,
                              precision=self.job.precision, training=self.job.training, cp=cp,
                              cp_bw=context_ring_bw(pool, t, cp), expert_parallel=self.job.expert_parallel,
                              expert_tp=expert_tp)
            layer, head = (stage_pass_times(layer, run),
                           stage_pass_times(replace(layer, num_layers=0, has_head=True), run))
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

    def activation_bytes(self, mb: int, tp: int, sp: bool, recompute: Recompute) -> float:
        """planner.memory.activation_bytes_per_layer for this job."""
        key = (mb, tp, sp, recompute)
        if key not in self._act:
            self._act[key] = activation_bytes_per_layer(model=self.model, seq_len=self.job.seq_len, micro_batch=mb,
                                                        tp=tp // self.cp, sequence_parallel=sp, recompute=recompute,
                                                        flash_attention=self.options.flash_attention,
                                                        precision=self.job.precision,
                                                        selective=self.run.selective_recompute, cp=self.cp)
        return self._act[key]

    def workspace_bytes(self, mb: int, tp: int, sp: bool, recompute: Recompute) -> float:
        """planner.memory.recompute_workspace_bytes for this job."""
        key = ("workspace", mb, tp, sp, recompute)
        if key not in self._act:
            self._act[key] = recompute_workspace_bytes(model=self.model, seq_len=self.job.seq_len, micro_batch=mb,
                                                       tp=tp // self.cp, sequence_parallel=sp, recompute=recompute,
                                                       flash_attention=self.options.flash_attention,
                                                       precision=self.job.precision,
                                                       selective=self.run.selective_recompute, cp=self.cp)
        return self._act[key]

    # ------------------------------------------------------------------ links of a layout's placement

    def layout_links(self, layout: Layout, mb: int) -> LayoutLinks:
        """The links planner.cost.evaluate sees for any plan of this layout (its placement depends
        on the stage structure alone): each stage's data-parallel ring and each boundary's transfer
        (planner.search.links)."""
        key = (layout, mb)
        if key not in self._links:
            size = activation_message_bytes(self.numerics.act_bytes, self.job.seq_len, mb, self.model.hidden)
            self._links[key] = self.linker.links(layout, size)
        return self._links[key]

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
                d = groups[0].count
                whole = m % d == 0 or self.engine.space.mixed_stages    # engines of one mesh: dp divides them
                self._shares[key] = tuple(even_shares(m, d)) if m >= d and whole else None
            else:
                taus = [sum(self.pass_times(self.pools[g.pool], g.tp, mb, recompute, sp)[:2])
                        for g in groups for _ in range(g.count)]
                found = share_micro_batches(m, taus)
                self._shares[key] = tuple(found) if found else None
        return self._shares[key]

    def score(self, layout: Layout, knobs: Knobs, precision: Precision, uniform: bool = False,
              late: bool = False, enough: Callable[[Layout, float, float], bool] | None = None) -> Candidate | None:
        """Best split and shares for this layout and knobs, and the fast iteration time; None when
        nothing fits. `uniform`: layers and samples split evenly instead (the baselines); `late`: a
        floor_s that also bounds every stage's own end and tail (iteration_s). `enough(layout,
        busiest_s, price)`: true when the caller needs no more of a candidate whose iteration takes at
        least busiest_s (its split's busiest stage, which iteration_s's time and floor include); the
        candidate then carries that as its time_s and floor_s (the rest of its figures unchanged)."""
        if any(sum(g.count * (g.tp if knobs.expert_tensor_parallel else 1) for g in stage) % self.job.expert_parallel
               for stage in layout.stages):
            return None             # expert-parallel groups of ep replicas (etp 1: ep GPUs) in every stage
        sp = any(g.tp > 1 for stage in layout.stages for g in stage)
        m, mixed = self.job.global_batch // knobs.micro_batch, self.engine.space.mixed_stages
        shares = _even_shares(layout, m, mixed) if uniform else self.shares(layout, knobs, sp)
        if shares is None:
            return None
        p = layout.num_stages
        if knobs.interleave > 1 and not interleave_groups_fit((n for stage in shares for n in stage), p):
            return None
        windows = _windows(layout)
        costs = self._every_stage_costs(layout, knobs, shares, sp, windows)
        if any(c.max_layers < knobs.interleave for c in costs):
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
        price = self.price_per_hour(layout)
        if enough is not None:
            busiest_s = max(c.time_s(n) for c, n in zip(costs, layers)) * (1 - 1e-9)   # summed in another order
            if enough(layout, busiest_s, price):
                return Candidate(layout, knobs, precision, layers, shares, busiest_s, price, memory_binds, busiest_s)
        time_s, floor_s = self.iteration_s(layout, knobs, layers, shares, sp, precision, windows, late)
        return Candidate(layout, knobs, precision, layers, shares, time_s, price, memory_binds, floor_s)

    def even_busiest_s(self, layout: Layout, knobs: Knobs) -> float:
        """A lower bound on score(layout, knobs, uniform=True).time_s, the baselines' even split and
        shares: its busiest replica's forward and backward passes (iteration_s's first term), without
        ZeRO traffic, all-to-alls, transfers, fill, tail or the memory check; inf where the even
        shares or layers do not split. tests/test_baselines.py holds it below score."""
        return self.even_runs_s(_runs(layout), knobs, fill=False)

    def even_runs_s(self, runs, knobs: Knobs, fill: bool = True) -> float:
        """A lower bound on the fast score (score(layout, knobs, uniform=True).time_s) and on evaluate's
        iteration time of the layout of these runs ((groups, how many consecutive stages), as Family.runs
        spells a pool order), the baselines' even split and shares: the most, over the stages c and
        their groups g, of

            W_c + P_c,  W_c = n_g (L_c tau_g + e_c),  P_c = sum_{i<c} phi_i L_i

        with n_g the group's busiest replica's micro-batches, L_i the stage's layers, tau_g one layer's
        forward and backward and e_c the head on the last stage (without ZeRO traffic, all-to-alls,
        transfers and tail, which only add); without `fill`, W_c alone (even_busiest_s). phi_i is, at
        1F1B, its fastest group's forward plus its fastest group's backward per layer: the busiest
        replica's first pass waits for the first micro-batch's forwards through the stages before it,
        and after its last backward that micro-batch's backwards run back through them, which
        bound.py's (b10) proves against evaluate's simulation; interleaved, the fastest forward / v
        alone (score._late_s's claim: the first chunk's way). Below the fast score, too: a lane of the
        even shares holds n micro-batches on every stage (chains: one group of even shares a stage;
        mixed stages: the same groups on every stage), so its estimate n t_k + (sum_i t_i - t_k) / v,
        k its busiest stage, is at least n t_c + sum_{i<c} t_i / v for every c (their difference is
        n (t_k - t_c) - (t_k - t_c) / v + the other stages' t_i / v >= 0), and t_i (the lane's pass
        through stage i, ZeRO exposure included) is at least phi_i L_i (v = 1) or L_i f_i / v.
        One stage a run's segment suffices: even_split gives the first (L / v) mod p stages the extra
        chunk, so within a run W_c takes two values and P_c grows with c: the most is at the last
        stage of each value (and the head's on the pipeline's last stage). Inf where the even shares
        or layers do not split."""
        m, v, L = self.job.global_batch // knobs.micro_batch, knobs.interleave, self.model.layers
        p = sum(count for _, count in runs)
        if L % v or L // v < p:
            return math.inf                                             # split.even_split
        base_chunks, extra_chunks = divmod(L // v, p)
        sp = any(g.tp > 1 for groups, _ in runs for g in groups)
        busiest, start, prefix, last = 0.0, 0, 0.0, p - 1     # prefix: P_c of the run's first stage
        for groups, count in runs:
            found = self._even_lanes(groups, knobs.micro_batch, knobs.recompute, sp)
            if found is None:
                return math.inf                                         # as _even_shares
            lanes, fastest_f, fastest_b = found
            end = start + count
            # phi per layer, and the stages to look at: the run's first, the last of the extra chunk, the run's last
            phi = (fastest_f + fastest_b if v == 1 else fastest_f) / v
            stages = ((start, min(end, extra_chunks) - 1, end - 1) if fill else
                      (start, last) if end == p and count > 1 else (start,))
            for c in stages:
                if c < start:
                    continue
                layers = (base_chunks + (c < extra_chunks)) * v
                # P_c: the layers of stages start .. c - 1, base_chunks chunks each and one more before extra_chunks
                upstream = (prefix + phi * (((c - start) * base_chunks + max(0, min(c, extra_chunks) - start)) * v)
                            if fill else 0.0)
                for n, f, b, hf, hb in lanes:
                    work = n * (layers * (f + b) + (hf + hb if c == last else 0.0)) + upstream
                    if work > busiest:
                        busiest = work
            prefix += phi * ((count * base_chunks + max(0, min(end, extra_chunks) - start)) * v)
            start = end
        return busiest

    def _even_lanes(self, groups: tuple[Group, ...], mb: int, recompute: Recompute, sp: bool):
        """even_runs_s's figures of a stage of these groups: per group its busiest replica's micro-batches
        under even shares and its passes (n, f, b, hf, hb), and the fastest forward and backward; None where
        the even shares do not split (as _even_shares). Cached: every pool order of a family repeats them."""
        key = ("even lanes", groups, mb, recompute, sp)
        if key in self._act:
            return self._act[key]
        base, extra = divmod(self.job.global_batch // mb, sum(g.count for g in groups))  # the first `extra` one more
        found = None
        if base > 0 and not (extra and not self.engine.space.mixed_stages):
            lanes, first = [], 0
            for g in groups:
                lanes.append((base + (first < extra),) + self.pass_times(self.pools[g.pool], g.tp, mb, recompute, sp))
                first += g.count
            found = (tuple(lanes), min(lane[1] for lane in lanes), min(lane[2] for lane in lanes))
        self._act[key] = found
        return found

    def even_fits(self, runs, knobs: Knobs) -> bool:
        """Exactly whether score(layout, knobs, uniform=True) yields a candidate for the layout of these
        runs ((groups, how many consecutive stages), as Family.runs spells a pool order): the baselines'
        even split and shares split (even_splits) and the layers fit in memory (even_holds).
        tests/test_baselines.py holds it equal to `score(...) is not None`."""
        return self.even_splits(runs, knobs) and self.even_holds(runs, knobs)

    def even_splits(self, runs, knobs: Knobs) -> bool:
        """score(..., uniform=True)'s checks but memory: expert-parallel groups, even shares (whole where
        the engine runs one mesh), interleaved groups of p, even layers. None reads the pool order."""
        ep, etp = self.job.expert_parallel, knobs.expert_tensor_parallel
        if any(sum(g.count * (g.tp if etp else 1) for g in groups) % ep for groups, _ in runs):
            return False
        m, v, L = self.job.global_batch // knobs.micro_batch, knobs.interleave, self.model.layers
        p = sum(count for _, count in runs)
        for groups, _ in runs:                                          # _even_shares, interleave_groups_fit
            base, extra = divmod(m, sum(g.count for g in groups))
            if base == 0 or (extra and not self.engine.space.mixed_stages):
                return False
            if v > 1 and (base % p or (extra and (base + 1) % p)):
                return False
        return not (L % v or L // v < p)                                # split.even_split

    def even_holds(self, runs, knobs: Knobs) -> bool:
        """Whether every stage holds its layers of the even split (score's memory check, max_layers),
        where even_splits holds, checking each run's first stage and the last stage alone. Within a
        run (stages of the same groups and shares) neither the layers nor the room favour a later
        stage: even_split gives the first stages the extra chunk (L_i does not grow with i), and
        max_layers = floor(free / (states + in-flight x activations)) does not fall with i, as
        in-flight does not grow with it (1F1B: the window, the replicas of the stage and every later
        one, shrinks; interleaved: 2 (p - i - 1) + (v - 1) p + 1 chunks) and free is the same but on
        the edge stages, where it is smaller: the first stage holds the embedding (the first run's
        first stage, checked), the last the head (checked). So where a run's first stage holds its
        layers, every stage of the run but the last stage does."""
        m, v, L = self.job.global_batch // knobs.micro_batch, knobs.interleave, self.model.layers
        p = sum(count for _, count in runs)
        replicas = [sum(g.count for g in groups) for groups, _ in runs]
        base_chunks, extra_chunks = divmod(L // v, p)
        sp = any(g.tp > 1 for groups, _ in runs for g in groups)
        window, start = sum(r * count for r, (_, count) in zip(replicas, runs)), 0   # of each run's first stage
        for (groups, count), r in zip(runs, replicas):
            base, extra = divmod(m, r)
            for i in ((start, p - 1) if start + count == p and count > 1 else (start,)):
                first = 0
                for g in groups:
                    n = base + (first < extra)                          # the group's busiest replica
                    first += g.count
                    if self._max_layers(self.pools[g.pool], g.tp, knobs, sp, p, i, n, r,
                                        window - r * (i - start)) < (base_chunks + (i < extra_chunks)) * v:
                        return False
            window -= r * count
            start += count
        return True

    def even_family_busiest_s(self, family: Family) -> float:
        """A lower bound on even_busiest_s over every pool order and knob setting of `family` (so on
        the baselines' fast scores of it): with p stages and v chunks a stage, every stage holds at
        least floor(L / (p v)) v layers and the (L / v) mod p stages with a chunk more include one at
        least as slow as the stage of that rank, fastest first; every replica takes at least
        floor(m / R) of its stage's m micro-batches (R replicas; a chain's even shares: ceil(m / d)).
        Inf where no setting splits."""
        L, B, p = self.model.layers, self.job.global_batch, family.num_stages
        sp, replicas = any(t > 1 for t in family.tps), family.max_replicas_per_stage
        shapes = [((L // v) // p * v, (L // v) % p, v) for v in INTERLEAVES if not (L % v or L // v < p)]
        best = math.inf
        for mb, per_recompute in self._family_taus(family.subset, family.tps, sp):
            m = B // mb
            if m < replicas or not shapes:
                continue
            n = -(-m // replicas) if family.kind == "chain" else m // replicas
            for taus in per_recompute:
                # the stages' taus, fastest first, as (tau, stages) runs: a chain's q_k stages of pool k; p of the slowest
                ranked = sorted(zip(taus, family.width)) if family.kind == "chain" else [(max(taus), p)]
                for fewest, extra, v in shapes:
                    more = _ranked_at(ranked, extra - 1) * (fewest + v) if extra else 0.0
                    best = min(best, n * max(ranked[-1][0] * fewest, more))
        return best

    def _family_taus(self, subset, tps, sp: bool) -> list[tuple[int, list[list[float]]]]:
        """For each micro-batch size, the taus (one layer's forward + backward) of these pools at these
        tps, one list per recompute setting, less those no smaller anywhere than another's (the bound
        above grows with every tau, so they cannot give its least); cached: the families of a subset
        and tps share them (thousands of them at scale)."""
        key = ("family taus", tuple(pool.name for pool in subset), tps, sp)
        found = self._act.get(key)
        if found is None:
            found = self._act[key] = []
            for mb in _powers_of_two_dividing(self.job.global_batch):
                kept: list[list[float]] = []
                for recompute in RECOMPUTES:
                    taus = [sum(self.pass_times(pool, t, mb, recompute, sp)[:2]) for pool, t in zip(subset, tps)]
                    if not any(all(a <= b for a, b in zip(other, taus)) for other in kept):
                        kept.append(taus)
                found.append((mb, kept))
        return found

    def price_per_hour(self, layout) -> float:
        """The dollars an hour of every GPU the layout (or family) uses: the plan's price, stated once
        for the fast scores and the bounds."""
        return price_per_hour_usd(self.pools, layout.gpus_by_pool())

    def could_fit(self, layout: Layout, micro_batch: int, interleave: int) -> bool:
        """Whether the most memory-frugal knobs (ZeRO-3, full recompute) leave room for every layer."""
        sp = any(g.tp > 1 for stage in layout.stages for g in stage)
        zero = 3 if layout.max_replicas_per_stage * self.cp > 1 else 0
        knobs = Knobs(micro_batch, zero, Recompute.FULL, interleave)
        shares = self.shares(layout, knobs, sp)
        if shares is None:
            return False
        room = 0
        for costs in self._every_stage_costs(layout, knobs, shares, sp, _windows(layout)):
            most = costs.max_layers
            if most < interleave:
                return False
            room += most - most % interleave
        return room >= self.model.layers

    def _execution(self, p: int, zero: int):
        """The engine's execution with the overlaps to_plan turns on for p stages and this ZeRO stage."""
        key = ("execution", p, zero)
        if key not in self._act:
            self._act[key] = self.engine.execution_with(self.engine.search_switches(p, zero))
        return self._act[key]

    def _stage_params(self, num_layers: int, first: bool, last: bool, p: int) -> int:
        """flops.stage_param_count for this model (cached: the fast score asks it for every stage)."""
        key = ("params", num_layers, first, last, p > 1)
        if key not in self._act:
            self._act[key] = stage_param_count(self.model, num_layers, first, last, p)
        return self._act[key]

    def _every_stage_costs(self, layout: Layout, knobs: Knobs, shares, sp: bool, windows: list[int]) -> list[StageCosts]:
        """_stage_costs of each stage, cached by what it reads: the layouts of a family and the knob settings
        scored and fitted repeat most stages (a stage's place reads only as first, last and its 1F1B window)."""
        p, v = layout.num_stages, knobs.interleave
        known = self._stage_costs_of.setdefault((knobs, p, sp), {})
        out = []
        for i, (groups, own) in enumerate(zip(layout.stages, shares)):
            key = (groups, own, i == 0, i == p - 1, windows[i] if v == 1 else i)
            found = known.get(key)
            if found is None:
                found = known[key] = self._stage_costs(layout, knobs, i, own, sp, windows[i])
            out.append(found)
        return out

    def _stage_costs(self, layout, knobs, i, shares, sp, window: int) -> StageCosts:
        groups = layout.stages[i]
        p = layout.num_stages
        last = i == p - 1
        # the slopes and intercepts read the stage's groups and shares, not its place (cached: a run repeats them)
        key = ("costs", groups, shares, knobs.micro_batch, knobs.recompute, knobs.expert_tensor_parallel, sp, last)
        found = self._act.get(key)
        if found is None:
            slopes, intercepts, busiest = [], [], []
            for g, n in zip(groups, _group_max_shares(groups, shares)):
                pool = self.pools[g.pool]
                f, b, hf, hb = self.pass_times(pool, g.tp, knobs.micro_batch, knobs.recompute, sp,
                                               knobs.expert_tensor_parallel)
                slopes.append(n * (f + b))
                intercepts.append(n * (hf + hb) if last else 0.0)
                busiest.append((pool, g.tp, n))
            found = self._act[key] = (tuple(slopes), tuple(intercepts), busiest, sum(x.count for x in groups))
        slopes, intercepts, busiest, replicas = found
        max_layers = 10**9
        for pool, tp, n in busiest:
            max_layers = min(max_layers, self._max_layers(pool, tp, knobs, sp, p, i, n, replicas, window))
        return StageCosts(slopes, intercepts, max_layers)

    def _max_layers(self, pool: Pool, tp: int, knobs: Knobs, sp: bool, p: int, i: int, own: int, replicas: int,
                    window: int) -> int:
        """Most layers stage i can hold on one GPU of this replica (planner.memory, solved for L);
        `window`: the replicas of stage i and every later stage (its 1F1B window)."""
        key = (pool.name, tp, knobs, sp, p, i == 0, i == p - 1, own, replicas,
               window if knobs.interleave == 1 else i)
        if key not in self._caps:
            self._caps[key] = self.max_layers(pool, tp, knobs, sp, p, i, own, replicas, window)
        return self._caps[key]

    def max_layers(self, pool: Pool, tp: int, knobs: Knobs, sp: bool, p: int, i: int, own: int, replicas: int,
                   window: int) -> int:
        """planner.memory.replica_memory <= the GPU's memory, solved for the stage's layers L:
        states (edge + L layer) params / tp x bytes per param, activations in-flight x L x per
        layer + the edge activations + the recompute workspace + the framework overhead."""
        m = self.job.global_batch // knobs.micro_batch
        free, per_layer_states, per_layer_act, host_most = self._memory_terms(pool, tp, knobs, sp, p, i == 0,
                                                                              i == p - 1, replicas)
        in_flight = in_flight_micro_batches(Schedule.ONE_F_ONE_B, p, i, knobs.interleave, own, window, m)
        per_layer = per_layer_states + in_flight * per_layer_act
        if free < 0:
            return 0
        most = math.floor(free / per_layer * (1 - 1e-9))
        return most if host_most is None else min(most, host_most)

    def _memory_terms(self, pool: Pool, tp: int, knobs: Knobs, sp: bool, p: int, first: bool, last: bool,
                      replicas: int) -> tuple[float, float, float, int | None]:
        """max_layers' terms but the in-flight micro-batches (cached: they do not read the stage's place in
        its run): the GPU's memory free of the fixed bytes, each layer's states and one micro-batch's
        activations, and the most layers the host's memory holds (None: nothing offloaded)."""
        key = (pool.name, tp, knobs, sp, p, first, last, replicas)
        if key in self._memory:
            return self._memory[key]
        mb, cp, ep = knobs.micro_batch, self.cp, self.job.expert_parallel
        replicas = knobs.hybrid_shard or replicas    # hybrid sharding: states sharded over a node's replicas
        per_param = sum(state_bytes_per_param(knobs.zero_stage, replicas * cp, self.states))
        width, tp = tp, tp // cp                     # a group's tp is its replica width (class docstring)
        # routed experts (expert parallelism): 1/ep of them per GPU split over etp, sharded over the
        # replicas x cp x tp / (etp x ep) ranks that hold the same ones (flops.param_shards)
        etp = knobs.expert_tensor_parallel or tp
        expert = expert_layer_params(self.model) if ep > 1 else 0.0
        expert_per_param = sum(state_bytes_per_param(knobs.zero_stage, max(1, replicas * cp * tp // (etp * ep)),
                                                     self.states))
        fixed = (edge_param_count(self.model, first, last, p) / tp * per_param
                 + edge_activation_bytes_of(self.model, self.job.seq_len, mb, tp, first, last, self.job.precision, cp)
                 + self.workspace_bytes(mb, width, sp, knobs.recompute))
        free = pool.gpu.mem_bytes - self.run.framework_bytes - fixed
        per_layer_states = (self.layer_params - expert) / tp * per_param + expert / (etp * ep) * expert_per_param
        host_most = None
        host = host_bytes_per_param(knobs.zero_stage, replicas * cp, self.states)
        if host:        # offloaded states must fit the GPU's share of its node's CPU memory too
            expert_host = host_bytes_per_param(knobs.zero_stage, max(1, replicas * cp * tp // (etp * ep)), self.states)
            host_free = pool.host_mem_per_gpu_bytes - edge_param_count(self.model, first, last, p) / tp * host
            host_layer = (self.layer_params - expert) / tp * host + expert / (etp * ep) * expert_host
            host_most = max(0, math.floor(host_free / host_layer * (1 - 1e-9)))
        self._memory[key] = found = (free, per_layer_states, self.activation_bytes(mb, width, sp, knobs.recompute),
                                   host_most)
        return found

    # ------------------------------------------------------------------ time

    def iteration_s(self, layout: Layout, knobs: Knobs, layers, shares, sp: bool,
                    precision: Precision = Precision.BF16, windows: list[int] | None = None,
                    late: bool = False) -> tuple[float, float]:
        """The fast iteration time of the module docstring, and a lower bound on the one
        planner.cost.evaluate gives: the pipeline takes at least its busiest replica's passes and
        each lane's in-flight window, and the replica of stage 0 that ends the pipeline then
        synchronises what its last backward did not hide and runs its optimizer step; with `late`,
        also at least every stage's own end and tail (_late_s; the baselines' re-scoring asks it)."""
        p, v, mb, zero = layout.num_stages, knobs.interleave, knobs.micro_batch, knobs.zero_stage
        hs, etp = knobs.hybrid_shard, knobs.expert_tensor_parallel
        run = self._execution(p, zero)
        links = self.layout_links(layout, mb)
        loads, passes, fwds, tails, drains = [], [], [], [], []   # per stage, per group: n, f + b, f; per stage
        cp = self.cp
        # a stage's figures by what they read: the stages of a run mostly repeat them, and the layouts of one family
        # and knob setting each other's (the other pool orders, split alike where the stage ends up alike)
        done = self._stage_figures.setdefault((knobs, p, precision, sp), {})
        for i, groups in enumerate(layout.stages):
            last = i == p - 1
            same = (groups, shares[i], layers[i], i == 0, last, links.dp[i])
            if same in done:
                for out, value in zip((passes, loads, fwds, tails, drains), done[same]):
                    out.append(value)
                continue
            d = sum(g.count for g in groups) * cp       # dp x cp ranks reduce and shard (class docstring)
            ds = hs * cp if hs else d                   # ... ZeRO shards over a node's (hybrid sharding, as cost)
            params = self._stage_params(layers[i], i == 0, last, p)
            min_tp = min(g.tp for g in groups) // cp
            dp_bw, dp_lat = links.dp[i]
            grad_bytes = self.run.grad_reduce_bytes(precision)
            wire = self.states.weight_comm_bytes
            ep = self.job.expert_parallel
            shards = param_shards(params, layers[i], self.model, min_tp, ds, ep, etp)
            zbw, zlat = (hybrid_group_link([self.pools[g.pool] for g in groups], hs * max(g.tp for g in groups),
                                           dp_bw, dp_lat) if hs else (dp_bw, dp_lat))
            zf = zb = 0.0
            for per_gpu, ranks in shards:
                f, b = zero_per_micro_batch_s(zero, per_gpu * wire, ranks, zbw, zlat, grad_bytes, wire,
                                              self.states.trainable)
                if d > ds:      # each shard then all-reduced across the d / ds groups (planner.cost.evaluate)
                    b += grad_sync_s(0, per_gpu / ranks * self.states.trainable, d // ds, dp_bw, dp_lat, grad_bytes)
                zf, zb = zf + f, zb + b
            stage_bwd, fastest_bwd, ts, ns, fs = 0.0, math.inf, [], [], []
            for g, n in zip(groups, _group_max_shares(groups, shares[i])):
                f1, b1, hf, hb = self.pass_times(self.pools[g.pool], g.tp, mb, knobs.recompute, sp,
                                                 knobs.expert_tensor_parallel)
                f = layers[i] * f1 + (hf if last else 0.0)
                b = layers[i] * b1 + (hb if last else 0.0)
                h = run.zero_overlap
                fetch = sum(fetch_s(self.states, per_gpu, ranks, self.pools[g.pool].gpu)
                            for per_gpu, ranks in param_shards(params, layers[i], self.model, g.tp // cp, ds, ep, etp))
                a2a_bw, a2a_lat = expert_link(etp, ep, self.pools[g.pool], g.tp // cp, dp_bw, dp_lat)
                a2a_f, a2a_b = alltoall_s(model=self.model, num_layers=layers[i], seq_len=self.job.seq_len,
                                          micro_batch=mb, tp=g.tp // cp, cp=cp, expert_parallel=ep, bw=a2a_bw,
                                          latency_s=a2a_lat, recompute=knobs.recompute, precision=precision)
                f, b = (f + zero_exposed_s(zf + fetch, f, h, layers[i]) + a2a_f,
                        b + zero_backward_exposed_s(zf, zb, fetch, b, h, layers[i], run.prefetch,
                                                    run.overlap_grad_reduce) + a2a_b)
                stage_bwd, fastest_bwd = max(stage_bwd, b), min(fastest_bwd, b)
                ts.append(f + b)
                fs.append(f)
                ns.append(n)
            passes.append(ts)
            loads.append(ns)
            fwds.append(fs)
            sync = sum(grad_sync_s(zero, per_gpu * self.states.trainable, ranks, dp_bw, dp_lat, grad_bytes)
                       for per_gpu, ranks in shards)
            overlaps = self.options.overlap_grad_reduce and run.overlap_grad_reduce
            exposed = exposed_grad_sync_s(sync, stage_bwd / v if overlaps else 0.0)
            step = max(sum(after_step_s(zero, per_gpu, ranks, self.pools[g.pool], dp_bw, dp_lat, self.states,
                                        first_fwd if run.overlap_param_gather else 0.0)
                           for per_gpu, ranks in param_shards(params, layers[i], self.model, g.tp // cp, ds, ep, etp))
                       for g, first_fwd in zip(groups, fs))
            tails.append(exposed + step)
            drains.append(fastest_bwd)
            done[same] = (ts, ns, fs, tails[-1], fastest_bwd)
        m, windows = self.job.global_batch // mb, _windows(layout) if windows is None else windows
        pipeline = floor = max(n * t for ns, ts in zip(loads, passes) for n, t in zip(ns, ts))
        # the floors take each boundary's fastest lane: the group's busiest replica may run on any
        fastest, wrap = (links.fastest_round_trip, links.fastest_wrap) if p > 1 else ((), 0.0)
        fixed = v == 1 and p > 1 and layout.family == "chain"     # 1F1B in Megatron-LM's fixed order (_pairs_s)
        for lane in links.lanes:
            own = [ns[lane.group if len(ns) > 1 else 0] for ns in loads]
            t = [ts[lane.group if len(ts) > 1 else 0] for ts in passes]
            limits = _in_flight_limits(v, m, own, windows)
            pipeline = max(pipeline, _lane_s(v, own, t, lane, limits))
            if p > 1:
                f = [fs[lane.group if len(fs) > 1 else 0] for fs in fwds]
                floor = max(floor, _window_s(v, own, t, fastest, wrap, limits),
                            _prefix_s(own, t, fastest, v, f, limits))
                if fixed:     # the floor only: in the estimate it scored more candidates at 128 GPUs (68 -> 84)
                    floor = max(floor, _pairs_s(own[0], t, f, fastest, limits))
        floor += tails[0]
        if late:
            floor = max(floor, _late_s(loads, passes, fwds, tails, v))
        return pipeline + _tail_s(tails, drains, links.backward), floor


@functools.lru_cache(maxsize=4)
def _shared_pass_times(inputs: tuple) -> dict:
    """One dict of Scorer.pass_times for every scorer whose pass times read the same `inputs`: the cluster
    (its GPUs and pools), the job's model, sequence length, precision, training, context and expert
    parallelism, FlashAttention, whether expert tp is searched, and the engine's PassExecution without and
    with sequence parallelism (_pass_key). The search makes one scorer per engine, and engines that run a
    pass alike (most of them) then compute each pass time once (128 GPUs, 6 engines: 4,860 -> 2,100 calls
    of stage_pass_times)."""
    return {}


def _pass_key(run, job: Job, tp_comm_overlap: bool):
    """The PassExecution Scorer.pass_times hands stage_pass_times, as a key: tf32 only where it is read
    (planner.numerics reads it for fp32 jobs alone), so engines that differ only in their TF32 default
    share their 16-bit pass times."""
    found = pass_execution(run, job.tf32, tp_comm_overlap)
    return found if job.precision == Precision.FP32 else replace(found, tf32=False)


@functools.lru_cache(maxsize=4)
def _linker(cluster: Cluster) -> LayoutLinker:
    """The cluster's LayoutLinker, one for all its scorers (the search makes one per engine and offload
    setting): a layout's placement and links read the cluster alone, and placing layouts is most of
    what the bounds' transfer floors (bound.TransferFloors.run_s) cost."""
    return LayoutLinker(cluster)


def _lane_s(v: int, own: list[int], t: list[float], lane: Lane, limits: list[float]) -> float:
    """One lane's pipeline time: stage i's replica in the lane handles own[i] of the m
    micro-batches, t[i] seconds each (forward + backward through the stage): the 1F1B estimate
    with its busiest stage c, or the in-flight window's bound where that is larger (`limits`:
    _in_flight_limits of the lane)."""
    p, x = len(t), lane.round_trip
    crit, busiest = 0, own[0] * t[0]         # the first busiest stage, as max() takes it
    for i in range(1, p):
        load = own[i] * t[i]
        if load > busiest:
            crit, busiest = i, load
    pipeline = own[crit] * t[crit] + (sum(t) - t[crit]) / v + v * sum(x) + (v - 1) * lane.wrap
    if p == 1:
        return pipeline
    return max(pipeline, _window_s(v, own, t, x, lane.wrap, limits))


def _in_flight_limits(v: int, m: int, own: list[int], windows: list[int]) -> list[float]:
    """k_i of _window_s for a lane whose stage i handles own[i] of the m micro-batches: 1F1B, the
    micro-batches it may hold (schedule.window_in_flight_limit of its window); interleaved, chunks."""
    if v == 1:
        return [window_in_flight_limit(window, n, m) for window, n in zip(windows, own)]
    p = len(own)
    return [interleaved_in_flight(p, i, v, n) * v for i, n in enumerate(own)]


def _late_s(loads: list[list[int]], passes: list[list[float]], fwds: list[list[float]], tails: list[float],
            v: int) -> float:
    """A lower bound on evaluate's iteration time from every stage's own end: stage i's busiest
    replica starts once the first micro-batch has come forward through the stages before it (each
    at least its fastest replica's forward, 1/v of it interleaved; transfers only add), works its
    n_i t_i, and its stage then synchronises what its last backward did not hide and steps
    (tails[i], at most what evaluate adds after every replica's end: planner.cost._assemble).
    iteration_s's floor takes the tail of stage 0 only, which at scale is not the largest."""
    worst, fill = 0.0, 0.0
    for ns, ts, fs, tail in zip(loads, passes, fwds, tails):
        worst = max(worst, fill + max(n * t for n, t in zip(ns, ts)) + tail)
        fill += min(fs) / v
    return worst


def _tail_s(tails: list[float], drains: list[float], back) -> float:
    """What the data-parallel synchronisation and optimizer step add to the pipeline: stage i
    ends its iteration at its pipeline end plus tails[i], and the pipeline's last backward still
    runs through stages i - 1 .. 0 (each at least its fastest replica's backward, drains[j], plus
    the transfer) after stage i's, so stage i's tail shows beyond that drain only (stage 0, which
    ends last, shows all of its own)."""
    worst, drain = 0.0, 0.0
    for i, tail in enumerate(tails):
        worst = max(worst, tail - drain)
        drain += drains[i] + (back[i] if i < len(back) else 0.0)
    return worst


def _prefix_s(own: list[int], t: list[float], x, v: int, f: list[float], limits: list[float]) -> float:
    """A lower bound on a lane's pipeline time: stage i starts only once its first micro-batch has
    come forward through the stages before it, works own_i t_i, and its last backward must still
    go back through them: max_i sum_{j<i} (t_j + x_j) / v + own_i t_i + idle_i (interleaved: the
    first chunk's way, 1/v of each stage; idle 0). 1F1B: before its first backward, stage i waits
    for its first micro-batch to go down and back (f_i + sum_{j>i} (t_j + x_j)), and meanwhile
    runs at most k_i forwards (its in-flight limit, `limits`), so it idles at least the difference."""
    p = len(t)
    below = [0.0] * (p + 1)
    for i in reversed(range(p)):
        below[i] = t[i] + (x[i] if i < len(x) else 0.0) + below[i + 1]
    worst, prefix = 0.0, 0.0
    for i in range(p):
        idle = 0.0
        if v == 1 and i < p - 1:
            idle = max(0.0, f[i] + x[i] + below[i + 1] - limits[i] * f[i])
        here = prefix + own[i] * t[i] + idle
        if here > worst:
            worst = here
        prefix += (t[i] + (x[i] if i < len(x) else 0.0)) / v
    return worst


def _pairs_s(n: int, t: list[float], f: list[float], x, limits: list[float]) -> float:
    """A lower bound on a 1F1B lane's pipeline time in Megatron-LM's fixed order (planner.schedule: stage i runs
    w_i = k_i - 1 warm-up forwards, then a forward and a backward in turn, then its last backwards), where
    each stage has the lane's n micro-batches: neighbouring stages i .. e hold a loop. From B_j ending on
    stage e, the gradient goes back to stage i (the backwards of stages e - 1 .. i), whose next pass is the
    forward of micro-batch j + k_i, which goes down to stage e (the forwards of stages i .. e), whose next
    pass is the backward of micro-batch j + L, L = k_i - k_e + 1: so B on stage e advances L micro-batches
    per at least W = sum_{s=i..e} t_s + sum of the round trips x between them, as long as stage i has that
    forward to run (j + k_i <= n - 1): q = floor((n - 1 - k_i) / L) + 1 steps from B_0. Before B_0 ends,
    micro-batch 0 comes forward to stage e, which runs its w_e + 1 forwards and B_0; after B_qL, stage e
    still runs the passes after it in its order, and the last backward goes on up to stage 0:

        T >= sum_{s<e} t_s + (w_e + 1) f_e + b_e + q W + (n - 1 - q L) b_e + max(0, n - 1 - q L - w_e) f_e

    (with e = i it reads the worker's own passes, which iteration_s bounds already). Where neighbours'
    in-flight limits differ by one (p - i, the rule) L = e - i + 1, and a slow boundary shows: each of its
    transfers is on a loop of two stages once per two micro-batches, which the in-flight window (_window_s,
    the whole way down) spreads over every stage below. A cross-pool boundary between a stage of 91 ms and one of 105 ms with 27 ms each way:
    125 ms a micro-batch, not the busiest stage's 105 (5 pools, FlagScale, where evaluate came out 3-37%
    above the fast score of the candidates its proof had to evaluate). Loops of up to SEGMENT stages."""
    p, worst = len(t), 0.0
    before = [0.0] * (p + 1)
    for i in range(p):
        before[i + 1] = before[i] + t[i]
    for i in range(p - 1):
        k = int(limits[i])
        if n - 1 - k < 0:
            continue
        loop = t[i]
        for e in range(i + 1, min(p, i + SEGMENT)):
            loop += t[e] + x[e - 1]
            w = int(limits[e]) - 1                  # stage e's warm-up forwards
            steps = k - w                           # L = k_i - k_e + 1
            q = (n - 1 - k) // steps + 1
            after, b = n - 1 - q * steps, t[e] - f[e]
            worst = max(worst, before[e] + (w + 1) * f[e] + b + q * loop + after * b + max(0, after - w) * f[e])
    return worst


SEGMENT = 4      # _pairs_s' loops over stages i .. e, e < i + SEGMENT


def _window_s(v: int, own: list[int], t: list[float], x, wrap: float, limits: list[float]) -> float:
    """max over stages of sum_{j<i} (t_j + 2 x_j) + n S_i / k_i (module docstring), k_i = `limits`
    (_in_flight_limits); `x`: each boundary's round trip (forward and backward transfer), `wrap` the
    wrap's. Interleaved (v > 1): k_i chunks in flight (schedule.interleaved_in_flight, in chunks),
    each held for the rest of its micro-batch's path on average: its own chunk's way down and back,
    and half of the v - 1 other chunks' full round (every stage, every boundary and the wrap from the
    last stage to the first)."""
    p = len(t)
    step = [ti / v for ti in t]                      # each stage's share of a micro-batch's way down
    across = [x[i] for i in range(p - 1)] + [0.0]   # the boundary below each stage (none below the last)
    suffix, below = [0.0] * p, 0.0
    for i in reversed(range(p)):
        below = suffix[i] = step[i] + across[i] + below
    worst, prefix = 0.0, 0.0
    if v == 1:
        for i in range(p):
            here = prefix + own[i] * suffix[i] / limits[i]
            if here > worst:
                worst = here
            prefix += step[i] + across[i]
        return worst
    around = sum(t) / v + sum(x) + wrap
    for i in range(p):
        here = prefix + own[i] * v * (suffix[i] + (v - 1) / 2 * around) / limits[i]
        if here > worst:
            worst = here
        prefix += step[i] + across[i]
    return worst


def _even_shares(layout: Layout, m: int, mixed_stages: bool):
    """Each stage's m micro-batches spread evenly over its replicas (the baselines), or None where a
    stage has more replicas than micro-batches, or (engines of one mesh) shares that are not whole."""
    out = []
    for groups in layout.stages:
        replicas = sum(g.count for g in groups)
        if m < replicas or (m % replicas and not mixed_stages):
            return None
        out.append(tuple(even_shares(m, replicas)))
    return tuple(out)


def _group_max_shares(groups: tuple[Group, ...], shares: tuple[int, ...]) -> list[int]:
    """The busiest replica's micro-batches in each group of a stage (shares: groups expanded in order)."""
    out, k = [], 0
    for g in groups:
        out.append(max(shares[k:k + g.count]))
        k += g.count
    return out


def _runs(layout: Layout) -> tuple[tuple[tuple[Group, ...], int], ...]:
    """The layout's stages as (groups, how many consecutive stages have them), as Family.runs."""
    runs: list = []
    for groups in layout.stages:
        if runs and runs[-1][0] == groups:
            runs[-1][1] += 1
        else:
            runs.append([groups, 1])
    return tuple((groups, count) for groups, count in runs)


def _windows(layout: Layout) -> list[int]:
    """For each stage, the replicas of it and of every later stage."""
    out, total = [], 0
    for stage in reversed(layout.stages):
        total += sum(g.count for g in stage)
        out.append(total)
    return out[::-1]


def _ranked_at(ranked: list[tuple[float, int]], k: int) -> float:
    """The k-th (from 0) of the values that (value, how many) runs in ascending order spell out."""
    for value, count in ranked:
        if k < count:
            return value
        k -= count
    raise IndexError(k)


def _powers_of_two_dividing(n: int):
    mb = 1
    while mb <= n:
        if n % mb == 0:
            yield mb
        mb *= 2
