"""The one cost model: a cluster and a plan in, an `Estimate` out.

iteration time = pipeline makespan (schedule simulation of per-micro-batch pass times and
                 point-to-point transfers)
               + exposed data-parallel gradient synchronisation (the part not hidden behind the
                 last micro-batch's backward pass)
               + parameter all-gather after the step (ZeRO 1-2) and the optimizer step
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.comm import activation_message_bytes
from planner.compute import PassTimes, StagePass, pass_execution, speed_notes, stage_pass_times
from planner.dataparallel import (after_step_s, exposed_grad_sync_s, fetch_s, grad_sync_s, zero_backward_exposed_s,
                                  zero_exposed_s, zero_per_micro_batch_s)
from planner.engines import get as engine_profile
from planner.explain import bottleneck
from planner.energy import J_PER_KWH, energy_per_million_tokens_kwh, power_w, train_co2_kg
from planner.experts import MOE_LOAD_IMBALANCE, alltoall_s
from planner.flops import model_flops_per_iteration, param_shards, stage_params
from planner.comm import INTRA_NODE_LATENCY_S
from planner.memory import plan_states, replica_memory, shard_ranks
from planner.numerics import numerics
from planner.placement import Links, context_ring_bw, place, structure_of
from planner.schedule import simulate
from planner.spot import spot_figures
from planner.offload import HOST_ADAM_BYTES_PER_S_PER_NODE
from planner.training import adapter_params
from planner.types import GIB, Attention, Cluster, Estimate, Offload, Plan, Pool, ReplicaEstimate, Stage, TimeTerm


@dataclass(frozen=True)
class CostOptions:
    flash_attention: bool = True     # FlashAttention kernels (Dao et al. 2022); False for 2021-22 Megatron runs
    overlap_grad_reduce: bool = True  # gradient reduction overlapped with the last backward pass


def flash_attention(plan: Plan, options: CostOptions) -> bool:
    """Whether the plan's attention core is a fused FlashAttention kernel: the plan's `attention`, unless
    the options turn it off for every plan (the 2021-22 Megatron validation runs)."""
    return options.flash_attention and plan.attention == Attention.FLASH


def plan_links(cluster: Cluster, plan: Plan) -> Links:
    """The links of `plan`'s placement (planner.placement)."""
    return Links(cluster, structure_of(plan), place(cluster, plan),
                 activation_message_bytes(numerics(plan.precision).act_bytes, plan.seq_len, plan.micro_batch,
                                          plan.model.hidden))


def stage_passes(plan: Plan, stage: Stage, pool: Pool, tp: int, options: CostOptions = CostOptions()) -> PassTimes:
    """One micro-batch's passes through `stage` on a replica of `tp` GPUs (x the plan's context
    parallelism) of this pool, as the plan's engine executes them (planner.compute.stage_pass_times
    with the engine's execution values)."""
    gpu, cp = pool.gpu, plan.context_parallel
    run = pass_execution(engine_profile(plan.engine).execution, plan.tf32, plan.tp_comm_overlap)
    return stage_pass_times(StagePass(
        model=plan.model, gpu=gpu, num_layers=stage.num_layers, has_head=stage.layer_end == plan.model.layers,
        seq_len=plan.seq_len, micro_batch=plan.micro_batch, tp=tp, sequence_parallel=plan.sequence_parallel,
        recompute=plan.recompute, flash_attention=flash_attention(plan, options), link_bw=gpu.link_bw_bytes_per_s,
        precision=plan.precision, training=plan.training, cp=cp, cp_bw=context_ring_bw(pool, tp, cp),
        expert_parallel=plan.expert_parallel, expert_tp=plan.expert_tensor_parallel), run)


def price_per_hour_usd(pools: dict[str, Pool], gpus_by_pool: dict[str, int]) -> float:
    """The dollars an hour of the GPUs a plan (or a layout, for the search) uses, `pools` by name."""
    return sum(n * pools[name].price_per_gpu_hour_usd for name, n in gpus_by_pool.items())


def evaluate(cluster: Cluster, plan: Plan, tokens_to_train: float | None = None,
             options: CostOptions = CostOptions(), timeline: bool = False, detail: bool = True,
             kept: "Kept | None" = None) -> Estimate:
    """`detail=False` skips the second simulation (without transfer times) that splits pipeline
    waiting into bubble and exposed transfers: the breakdown then counts both as bubble, and
    every other figure is identical. The search ranks with it and reports full estimates.

    `kept` (a Kept the caller holds across calls): a `detail=False` call leaves there the plan's passes
    and simulation; a later call for the same plan, cluster and options without a timeline takes them
    and only adds what it needs (the second simulation); and a lane of the pipeline simulated before,
    for this plan or another, is not simulated again. The same estimate as a fresh call
    (tests/test_cost.py), for the search's plans that it ranks and then reports."""
    found = kept.plans.get(plan) if kept is not None and not timeline else None
    lanes = None if kept is None else kept.lanes
    if found is not None and found[0] == (cluster, options):
        passes, sim = found[1], found[2]
    else:
        passes = _passes(cluster, plan, options)
        sim = simulate(passes.counts, passes.forward_s, passes.backward_s, passes.links.p2p_delay, plan.schedule,
                       plan.interleave, timeline, lanes)
        if kept is not None and not detail and not timeline:
            kept.plans[plan] = ((cluster, options), passes, sim)
    # one stage sends nothing to another: the simulation without transfer times is the same one
    sim_local = (simulate(passes.counts, passes.forward_s, passes.backward_s, lambda *a: 0.0, plan.schedule,
                          plan.interleave, lanes=lanes) if detail and plan.num_stages > 1 else sim)
    return _assemble(cluster=cluster, plan=plan, tokens_to_train=tokens_to_train, options=options, sim=sim,
                     sim_local=sim_local, replica_estimates=passes.replica_estimates,
                     replica_kinds=passes.replica_kinds, counts=passes.counts, links=passes.links,
                     dp_sync=passes.dp_sync, after_step=passes.after_step)


@dataclass
class Kept:
    """What `evaluate` keeps across the calls of one caller (a search) that passes it as `kept`: by plan,
    its cluster and options, the passes and simulation of a call without detail; every lane simulated,
    by what its simulation reads (planner.schedule.simulate's `lanes`)."""
    plans: dict = field(default_factory=dict)
    lanes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Passes:
    """What evaluate works out of a plan before it simulates the pipeline: per stage, per replica, the
    micro-batches, the passes' times (their kinds) and the estimates; per stage its gradient
    synchronisation and step after the iteration; the placement's links."""
    links: Links
    counts: list[list[int]]
    forward_s: list[list[float]]
    backward_s: list[list[float]]
    replica_estimates: list
    replica_kinds: list
    dp_sync: list[float]
    after_step: list[float]


def _passes(cluster: Cluster, plan: Plan, options: CostOptions) -> _Passes:
    links = plan_links(cluster, plan)
    run = engine_profile(plan.engine).execution_for(plan)     # how the plan's engine executes it
    grad_bytes = run.grad_reduce_bytes(plan.precision)
    states = plan_states(plan)                  # bytes per parameter of the job kind and offload
    wire = states.weight_comm_bytes             # bytes per weight element ZeRO-3 gathers
    p = plan.num_stages
    fwd, bwd, counts, replica_estimates = [], [], [], []
    replica_kinds: list[list[_ReplicaKind]] = []     # per stage, per replica
    dp_sync, after_step = [], []
    for i, stage in enumerate(plan.stages):
        dp_bw, dp_lat = links.dp_group(i)
        fwd.append([]), bwd.append([]), counts.append([])
        params = stage_params(plan.model, stage.layer_start, stage.layer_end, p)
        min_tp = min(r.tp for r in stage.replicas)
        d = len(stage.replicas) * plan.context_parallel      # gradients are reduced over dp x cp ranks
        hs = shard_ranks(plan, i)               # ... and ZeRO states sharded over d, or a node's (hybrid sharding)
        shards = param_shards(params, stage.num_layers, plan.model, min_tp, hs, plan.expert_parallel,
                              plan.expert_tensor_parallel)
        zbw, zlat = hybrid_link(cluster, plan, stage, dp_bw, dp_lat) if plan.hybrid_shard else (dp_bw, dp_lat)
        zf = zb = 0.0
        for per_gpu, ranks in shards:           # dense weights over d ranks, routed experts over d / ep
            f, b = zero_per_micro_batch_s(plan.zero_stage, per_gpu * wire, ranks, zbw, zlat, grad_bytes,
                                          wire, states.trainable)
            # hybrid sharding: each unit's reduce-scattered shard then all-reduced across the d / hs groups
            if d > hs:
                b += grad_sync_s(0, per_gpu / ranks * states.trainable, d // hs, dp_bw, dp_lat, grad_bytes)
            zf, zb = zf + f, zb + b
        kinds, memories = {}, {}       # a stage's replicas of one pool and tp share these (thousands at scale)
        for r, rep in enumerate(stage.replicas):
            kind = kinds.get((rep.pool, rep.tp))
            if kind is None:
                kind = kinds[(rep.pool, rep.tp)] = _replica_kind(
                    cluster.pool(rep.pool), rep.tp, plan=plan, stage=stage, params=params, hs=hs, zero=(zf, zb),
                    dp=(dp_bw, dp_lat), run=run, states=states, options=options)
            fwd[i].append(kind.forward_s)
            bwd[i].append(kind.backward_s)
            counts[i].append(rep.samples // plan.micro_batch)
            if (rep.pool, rep.tp, rep.samples) not in memories:      # memory depends on these alone
                memories[(rep.pool, rep.tp, rep.samples)] = replica_memory(plan, i, r, kind.pool.gpu.mem_bytes,
                                                                           flash_attention(plan, options), run.framework_bytes,
                                                                           run.selective_recompute,
                                                                           kind.pool.host_mem_per_gpu_bytes)
            memory = memories[(rep.pool, rep.tp, rep.samples)]
            replica_estimates.append(ReplicaEstimate(i, r, kind.pool.name, kind.pool.gpu.id, rep.tp, rep.samples,
                                                     kind.forward_s, kind.backward_s, memory))
        replica_kinds.append([kinds[(rep.pool, rep.tp)] for rep in stage.replicas])
        dp_sync.append(sum(grad_sync_s(plan.zero_stage, per_gpu * states.trainable, ranks, dp_bw, dp_lat, grad_bytes)
                           for per_gpu, ranks in shards))
        after_step.append(max(kind.after_step_s for kind in kinds.values()))
    return _Passes(links=links, counts=counts, forward_s=fwd, backward_s=bwd, replica_estimates=replica_estimates,
                   replica_kinds=replica_kinds, dp_sync=dp_sync, after_step=after_step)


@dataclass(frozen=True)
class _ReplicaKind:
    """What evaluate works out once for the replicas of a stage on one pool at one tp: one micro-batch's
    passes, with the ZeRO time they expose and the expert all-to-alls, and the stage's step after the
    iteration on such a replica."""
    pool: Pool
    times: PassTimes
    zero_forward_s: float        # exposed ZeRO time of a forward, of a backward
    zero_backward_s: float
    alltoall_s: tuple[float, float]
    forward_s: float
    backward_s: float
    after_step_s: float


def _replica_kind(pool: Pool, tp: int, *, plan: Plan, stage: Stage, params, hs: int, zero: tuple[float, float],
                  dp: tuple[float, float], run, states, options: CostOptions) -> _ReplicaKind:
    """One stage's replicas of `pool` at `tp`: their passes, the ZeRO-3 fetch and the all-to-alls."""
    zf, zb = zero
    dp_bw, dp_lat = dp
    shards = param_shards(params, stage.num_layers, plan.model, tp, hs, plan.expert_parallel,
                          plan.expert_tensor_parallel)
    fetch = sum(fetch_s(states, per_gpu, ranks, pool.gpu) for per_gpu, ranks in shards)
    a2a_bw, a2a_lat = expert_group_link(plan, pool, tp, dp_bw, dp_lat)
    a2a_f, a2a_b = alltoall_s(model=plan.model, num_layers=stage.num_layers, seq_len=plan.seq_len,
                              micro_batch=plan.micro_batch, tp=tp, cp=plan.context_parallel,
                              expert_parallel=plan.expert_parallel, bw=a2a_bw, latency_s=a2a_lat,
                              recompute=plan.recompute, precision=plan.precision)
    times = stage_passes(plan, stage, pool, tp, options)
    f_exp = zero_exposed_s(zf + fetch, times.forward_s, run.zero_overlap, stage.num_layers)
    b_exp = zero_backward_exposed_s(zf, zb, fetch, times.backward_s, run.zero_overlap, stage.num_layers,
                                    run.prefetch, run.overlap_grad_reduce)
    forward = times.forward_s + f_exp + a2a_f
    first_fwd = forward if run.overlap_param_gather else 0.0
    after = sum(after_step_s(plan.zero_stage, per_gpu, ranks, pool, dp_bw, dp_lat, states, first_fwd)
                for per_gpu, ranks in shards)
    return _ReplicaKind(pool, times, f_exp, b_exp, (a2a_f, a2a_b), forward, times.backward_s + b_exp + a2a_b, after)


def expert_group_link(plan: Plan, pool: Pool, tp: int, dp_bw: float, dp_lat: float) -> tuple[float, float]:
    """(bandwidth, latency) of the expert all-to-alls: an expert group of etp x ep GPUs within a replica's tp
    ranks (expert_tensor_parallel below tp; Megatron's expert grid puts etp, then ep, fastest:
    parallel_state.py lines 887-895) stays on the node's links; groups over replicas use the stage's
    data-parallel ring, of which they are a part."""
    return expert_link(plan.expert_tensor_parallel, plan.expert_parallel, pool, tp, dp_bw, dp_lat)


def expert_link(expert_tp: int, expert_parallel: int, pool: Pool, tp: int, dp_bw: float,
                dp_lat: float) -> tuple[float, float]:
    """expert_group_link from the plan's numbers (the search's fast score calls it)."""
    if (expert_tp or tp) * expert_parallel <= tp:
        return pool.gpu.link_bw_bytes_per_s, INTRA_NODE_LATENCY_S
    return dp_bw, dp_lat


def hybrid_link(cluster: Cluster, plan: Plan, stage: Stage, dp_bw: float, dp_lat: float) -> tuple[float, float]:
    """(bandwidth, latency) of ZeRO's collectives under hybrid sharding: a group of hybrid_shard consecutive
    replicas (tp x cp GPUs each) that fits in a node runs on the slowest GPU link of the stage's pools (the
    FSDP export holds the group to one host's GPUs); a wider one on the stage's data-parallel ring."""
    width = plan.hybrid_shard * max(r.tp for r in stage.replicas) * plan.context_parallel
    return hybrid_group_link([cluster.pool(r.pool) for r in stage.replicas], width, dp_bw, dp_lat)


def hybrid_group_link(pools: list[Pool], width: int, dp_bw: float, dp_lat: float) -> tuple[float, float]:
    """hybrid_link for a group of `width` GPUs on replicas of these pools (the search's fast score calls it)."""
    if all(width <= pool.gpus_per_node for pool in pools):
        return min(pool.gpu.link_bw_bytes_per_s for pool in pools), INTRA_NODE_LATENCY_S
    return dp_bw, dp_lat


def _p2p_of_replica(plan: Plan, counts, links: Links, i: int, r: int) -> float:
    """Transfer time into and out of replica r of stage i over an iteration, forward and backward,
    taking each neighbour stage's first replica as the partner (exact when lanes line up)."""
    p = plan.num_stages
    per_mb = 0.0
    if i > 0:
        per_mb += 2 * links.p2p_delay(i - 1, r % len(plan.stages[i - 1].replicas), i, r)
    if i < p - 1:
        per_mb += 2 * links.p2p_delay(i, r, i + 1, r % len(plan.stages[i + 1].replicas))
    return per_mb * counts[i][r] * plan.interleave if p > 1 else 0.0


def _assemble(cluster, plan, tokens_to_train, options, sim, sim_local, replica_estimates, replica_kinds, counts,
              links, dp_sync, after_step) -> Estimate:
    p = plan.num_stages
    # Each stage finishes its iteration when its slowest replica has synchronised gradients.
    finish, dp_total, dp_exposed, step_total = 0.0, 0.0, 0.0, 0.0
    overlaps = options.overlap_grad_reduce and engine_profile(plan.engine).execution_for(plan).overlap_grad_reduce
    for i in range(p):
        exposed_after = {}          # the stage's exposed sync, by the time it hides behind (replicas repeat it)
        for r in range(len(plan.stages[i].replicas)):
            overlap = sim.last_backward_s[i][r] if overlaps else 0.0
            if overlap not in exposed_after:
                exposed_after[overlap] = exposed_grad_sync_s(dp_sync[i], overlap)
            exposed = exposed_after[overlap]
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
    kind, own = replica_kinds[crit[0]][crit[1]], counts[crit[0]][crit[1]]    # the critical replica's terms
    compute, tp_comm, cp_comm = kind.times.compute_s * own, kind.times.tp_comm_s * own, kind.times.cp_comm_s * own
    ep_comm = (kind.alltoall_s[0] + kind.alltoall_s[1]) * own
    zero_exposed = (kind.zero_forward_s + kind.zero_backward_s) * own
    p2p_total = _p2p_of_replica(plan, counts, links, *crit)
    breakdown = {
        "compute": TimeTerm(compute, compute),
        "tensor_parallel_comm": TimeTerm(tp_comm, tp_comm),
        "context_parallel_comm": TimeTerm(cp_comm, cp_comm),
        "expert_parallel_comm": TimeTerm(ep_comm, ep_comm),
        "zero_comm": TimeTerm(zero_exposed, zero_exposed),
        "pipeline_bubble": TimeTerm(max(0.0, sim_local.makespan_s - busy), max(0.0, sim_local.makespan_s - busy)),
        "pipeline_p2p_comm": TimeTerm(max(p2p_total, pp_exposed), pp_exposed),
        "data_parallel_comm": TimeTerm(dp_total, max(0.0, min(dp_exposed, tail))),
        "optimizer_step": TimeTerm(step_total, max(0.0, tail - max(0.0, min(dp_exposed, tail)))),
    }
    tokens = plan.global_batch * plan.seq_len
    used = plan.gpus_by_pool()
    price_per_hour = price_per_hour_usd({p.name: p for p in cluster.pools}, used)
    peak = sum(n * cluster.pool(name).gpu.peak_flops for name, n in used.items())
    mfu = model_flops_per_iteration(plan.model, plan.seq_len, plan.global_batch, plan.training) / (iteration * peak)
    tokens_per_s = tokens / iteration
    cost_per_m = price_per_hour / 3600 * iteration / tokens * 1e6
    oom = _first_overflow(replica_estimates)
    train_time = tokens_to_train / tokens_per_s if tokens_to_train else None
    train_cost = train_time / 3600 * price_per_hour if train_time is not None else None
    notes = _moe_notes(plan)
    notes += engine_profile(plan.engine).execution.notes_for(plan.recompute, plan.zero_stage)
    notes += job_notes(plan)
    notes += speed_notes([cluster.pool(name).gpu for name in used], plan.precision,
                         engine_profile(plan.engine).execution.tf32(plan.tf32), flash_attention(plan, options))
    power = power_w(cluster, plan)
    energy = dict(power_w=power, energy_per_million_tokens_kwh=energy_per_million_tokens_kwh(power, iteration, tokens),
                  train_energy_kwh=None if train_time is None else power * train_time / J_PER_KWH,
                  train_co2_kg=train_co2_kg(cluster, plan, train_time))
    energy.update(spot_figures(cluster, plan, tokens_per_s, price_per_hour, train_time))   # waits for spot pools
    est = Estimate(iteration_time_s=iteration, pipeline_time_s=makespan, tokens_per_s=tokens_per_s, mfu=mfu,
                   cost_per_hour_usd=price_per_hour, cost_per_million_tokens_usd=cost_per_m, fits=not oom,
                   breakdown=breakdown, replicas=tuple(replica_estimates), num_gpus=plan.num_gpus, bottleneck="",
                   oom=oom, train_time_s=train_time, train_cost_usd=train_cost, notes=notes, engine=plan.engine,
                   timeline=sim.timeline, **energy)
    return replace(est, bottleneck=bottleneck(plan, est, crit))


def _moe_notes(plan: Plan) -> tuple[str, ...]:
    if not plan.model.is_moe:
        return ()
    notes = ("mixture-of-experts: layers are costed as their mean (dense and MoE layers alike), the routed "
             "experts' weights sharded over tensor parallelism",)
    if plan.expert_parallel > 1:
        notes += (f"expert parallel {plan.expert_parallel}: the busiest rank assumed to receive "
                  f"{MOE_LOAD_IMBALANCE:.2f}x the mean tokens (an unsourced assumption: no published measurement of "
                  f"a rank's share; planner.experts), all-to-alls not overlapped",)
    return notes


def job_notes(plan: Plan) -> tuple[str, ...]:
    """What the estimate assumes of the plan's job kind and offload, in words."""
    notes = ()
    if plan.training.adapters:
        notes += (f"{plan.training.kind.value}: adapters of rank {plan.training.lora_rank} on every attention and MLP "
                  f"projection ({adapter_params(plan.model, plan.training.lora_rank) / 1e6:,.1f} M trained "
                  f"parameters); MFU counts 2 forwards of model FLOPs per iteration (no weight gradients "
                  f"for the frozen base)",)
    if plan.offload != Offload.NONE:
        notes += (f"offload {plan.offload.value}: the CPU's Adam step is an estimate (host memory bandwidth "
                  f"{HOST_ADAM_BYTES_PER_S_PER_NODE / 1e9:.0f} GB/s per node assumed; no delayed update)",)
    return notes


def _first_overflow(replica_estimates) -> str:
    fit = set()             # memory breakdowns seen to fit (replicas alike share one)
    for e in replica_estimates:
        m = e.memory
        if id(m) in fit:
            continue
        if m.host_bytes > m.host_capacity_bytes:
            return (f"stage {e.stage} replica {e.replica} ({e.gpu}, pool {e.pool}, tp {e.tp}) offloads "
                    f"{m.host_bytes / GIB:.1f} GiB to CPU memory but its share of the node's is "
                    f"{m.host_capacity_bytes / GIB:.1f} GiB (set host_memory_gib on the pool if it has more)")
        if not e.memory.fits:
            return (f"stage {e.stage} replica {e.replica} ({e.gpu}, pool {e.pool}, tp {e.tp}) needs "
                    f"{e.memory.total_bytes / GIB:.1f} GiB of {e.memory.capacity_bytes / GIB:.1f} GiB")
        fit.add(id(m))
    return ""
