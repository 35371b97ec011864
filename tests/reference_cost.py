"""planner.cost.evaluate and the placement it reads as they were before they were made faster (commit
7876cc8), on tests/reference_schedule.py's simulations: the reference that tests/test_evaluate_speed.py holds
planner.cost.evaluate equal to, field for field. Reachable from the tests only; the functions evaluate calls
that were not changed are imported."""
from __future__ import annotations

from dataclasses import replace

from planner.comm import activation_message_bytes, p2p_s
from planner.cost import (CostOptions, _first_overflow, _moe_notes, expert_group_link, flash_attention, hybrid_link,
                          job_notes, price_per_hour_usd, stage_passes)
from planner.dataparallel import (after_step_s, exposed_grad_sync_s, fetch_s, grad_sync_s, zero_backward_exposed_s,
                                  zero_exposed_s, zero_per_micro_batch_s)
from planner.energy import J_PER_KWH, energy_per_million_tokens_kwh, power_w, train_co2_kg
from planner.engines import get as engine_profile
from planner.experts import alltoall_s
from planner.explain import bottleneck
from planner.flops import model_flops_per_iteration, param_shards, stage_params
from planner.compute import speed_notes
from planner.memory import plan_states, replica_memory, shard_ranks
from planner.numerics import numerics
from planner.placement import (Links, Placement, Slot, Structure, _FreeGpus, _pool_or_error, _whole_nodes, fits_nodes,
                               structure_of, tp_fits)
from planner.spot import spot_figures
from planner.types import Cluster, Estimate, InputError, Plan, ReplicaEstimate, TimeTerm
from tests.reference_schedule import simulate


class ReferenceLinks(Links):
    """planner.placement.Links with p2p_delay as it was."""

    def p2p_delay(self, i: int, r: int, i2: int, r2: int) -> float:
        """Activation (or its gradient) of one micro-batch from replica (i, r) to (i2, r2)."""
        key = (i, r, i2, r2)
        if key not in self._p2p:
            self._p2p[key] = p2p_s(self.activation_bytes, *self.p2p_link(i, r, i2, r2))
        return self._p2p[key]



def plan_links(cluster: Cluster, plan: Plan) -> Links:
    return ReferenceLinks(cluster, structure_of(plan), place(cluster, plan),
                          activation_message_bytes(numerics(plan.precision).act_bytes, plan.seq_len, plan.micro_batch,
                                                   plan.model.hidden))


def check_fits(cluster: Cluster, plan: Plan) -> None:
    for i, stage in enumerate(plan.stages):
        for j, r in enumerate(stage.replicas):
            field = f"stages[{i}].replicas[{j}]"
            pool = _pool_or_error(cluster, r.pool, field)
            if not tp_fits(r.tp, pool):
                raise InputError(f"{field}.tp", f"tp {r.tp} must divide the {pool.gpus_per_node} GPUs per node "
                                 f"of pool {pool.name!r} (a tensor-parallel group stays inside one node"
                                 + (f", or fill whole nodes of its {pool.gpu.nvlink_domain_gpus}-GPU NVLink domain)"
                                    if pool.gpu.nvlink_domain_gpus > pool.gpus_per_node else ")"))
            width = plan.replica_gpus(r)
            if not fits_nodes(width, pool.gpus_per_node):
                raise InputError("context_parallel", f"a replica of tp {r.tp} x context_parallel "
                                 f"{plan.context_parallel} = {width} GPUs of pool {pool.name!r} neither fits one node "
                                 f"of {pool.gpus_per_node} GPUs evenly nor fills whole nodes; choose a "
                                 f"context-parallel degree that does")
            if plan.precision.value == "bf16" and not pool.gpu.supports_bf16:
                raise InputError(f"{field}.pool", f"{pool.gpu.id} has no bf16; use precision fp16")
    for name, used in plan.gpus_by_pool().items():
        pool = cluster.pool(name)
        if used > pool.num_gpus:
            raise InputError("stages", f"the plan uses {used} GPUs of pool {name!r} but it has {pool.num_gpus}")


def place(cluster: Cluster, plan: Plan) -> Placement:
    check_fits(cluster, plan)
    return place_structure(cluster, structure_of(plan))


def place_structure(cluster: Cluster, structure: Structure) -> Placement:
    """The placement of `place` for a plan's stage structure alone (the search places layouts
    before they have a layer split or sample shares)."""
    pools = {pool.name: pool for pool in cluster.pools}
    free = _FreeGpus(pools)      # only the nodes the plan touches are stored: a pool may have 10^5 nodes
    order = sorted(((i, j) for i, stage in enumerate(structure) for j in range(len(stage))),
                   key=lambda ij: (-structure[ij[0]][ij[1]][1], ij))
    slots: dict[tuple[int, int], Slot] = {}
    first_open = {pool.name: 0 for pool in cluster.pools}   # nodes before it are full
    for i, j in order:
        pool_name, tp = structure[i][j]
        pool = pools[pool_name]
        if tp > pool.gpus_per_node:
            slots[(i, j)] = _whole_nodes(pool, tp, free, i, j)
            continue
        while first_open[pool.name] < pool.nodes and free[(pool.name, first_open[pool.name])] == 0:
            first_open[pool.name] += 1
        node = next((n for n in range(first_open[pool.name], pool.nodes)
                     if free[(pool.name, n)] >= tp), None)
        if node is None:
            raise InputError(f"stages[{i}].replicas[{j}]", f"no node of pool {pool.name!r} has {tp} free GPUs "
                             f"left for this tp group; use fewer or smaller tensor-parallel groups")
        first = pool.gpus_per_node - free[(pool.name, node)]
        free[(pool.name, node)] -= tp
        slots[(i, j)] = Slot(pool.name, node, first, tp)
    used = {}
    for key, left in free.items():
        pool = pools[key[0]]
        if left < pool.gpus_per_node:
            used[key] = pool.gpus_per_node - left
    return Placement(slots, used)


def evaluate(cluster: Cluster, plan: Plan, tokens_to_train: float | None = None,
             options: CostOptions = CostOptions(), timeline: bool = False, detail: bool = True) -> Estimate:
    """`detail=False` skips the second simulation (without transfer times) that splits pipeline
    waiting into bubble and exposed transfers: the breakdown then counts both as bubble, and
    every other figure is identical. The search ranks with it and reports full estimates."""
    links = plan_links(cluster, plan)
    run = engine_profile(plan.engine).execution_for(plan)     # how the plan's engine executes it
    grad_bytes = run.grad_reduce_bytes(plan.precision)
    states = plan_states(plan)                  # bytes per parameter of the job kind and offload
    wire = states.weight_comm_bytes             # bytes per weight element ZeRO-3 gathers
    p = plan.num_stages
    fwd, bwd, counts, replica_estimates = [], [], [], []
    tp_comm, cp_comm, ep_comm, compute, zero_exposed = {}, {}, {}, {}, {}
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
        passes, memories = {}, {}       # a stage's replicas of one pool and tp share these (thousands at scale)
        for r, rep in enumerate(stage.replicas):
            pool = cluster.pool(rep.pool)
            if (rep.pool, rep.tp) not in passes:     # the passes, the ZeRO-3 fetch and the all-to-alls
                fetch = sum(fetch_s(states, per_gpu, ranks, pool.gpu)
                            for per_gpu, ranks in param_shards(params, stage.num_layers, plan.model, rep.tp, hs,
                                                               plan.expert_parallel, plan.expert_tensor_parallel))
                a2a_bw, a2a_lat = expert_group_link(plan, pool, rep.tp, dp_bw, dp_lat)
                a2a = alltoall_s(model=plan.model, num_layers=stage.num_layers, seq_len=plan.seq_len,
                                 micro_batch=plan.micro_batch, tp=rep.tp, cp=plan.context_parallel,
                                 expert_parallel=plan.expert_parallel, bw=a2a_bw, latency_s=a2a_lat,
                                 recompute=plan.recompute, precision=plan.precision)
                passes[(rep.pool, rep.tp)] = (stage_passes(plan, stage, pool, rep.tp, options), fetch, a2a)
            times, fetch, (a2a_f, a2a_b) = passes[(rep.pool, rep.tp)]
            f_comp = times.forward_s
            f_exp = zero_exposed_s(zf + fetch, f_comp, run.zero_overlap, stage.num_layers)
            b_exp = zero_backward_exposed_s(zf, zb, fetch, times.backward_s, run.zero_overlap, stage.num_layers,
                                            run.prefetch, run.overlap_grad_reduce)
            fwd[i].append(f_comp + f_exp + a2a_f)
            bwd[i].append(times.backward_s + b_exp + a2a_b)
            own = rep.samples // plan.micro_batch
            counts[i].append(own)
            tp_comm[(i, r)] = times.tp_comm_s * own
            cp_comm[(i, r)] = times.cp_comm_s * own
            ep_comm[(i, r)] = (a2a_f + a2a_b) * own
            compute[(i, r)] = times.compute_s * own
            zero_exposed[(i, r)] = (f_exp + b_exp) * own
            if (rep.pool, rep.tp, rep.samples) not in memories:      # memory depends on these alone
                memories[(rep.pool, rep.tp, rep.samples)] = replica_memory(plan, i, r, pool.gpu.mem_bytes,
                                                                           flash_attention(plan, options), run.framework_bytes,
                                                                           run.selective_recompute,
                                                                           pool.host_mem_per_gpu_bytes)
            memory = memories[(rep.pool, rep.tp, rep.samples)]
            replica_estimates.append(ReplicaEstimate(i, r, pool.name, pool.gpu.id, rep.tp, rep.samples,
                                                     fwd[i][r], bwd[i][r], memory))
        dp_sync.append(sum(grad_sync_s(plan.zero_stage, per_gpu * states.trainable, ranks, dp_bw, dp_lat, grad_bytes)
                           for per_gpu, ranks in shards))
        after_step.append(max(sum(after_step_s(plan.zero_stage, per_gpu, ranks, cluster.pool(rep.pool), dp_bw, dp_lat,
                                               states, first_fwd if run.overlap_param_gather else 0.0)
                                  for per_gpu, ranks in param_shards(params, stage.num_layers, plan.model, rep.tp, hs,
                                                                     plan.expert_parallel, plan.expert_tensor_parallel))
                              for rep, first_fwd in zip(stage.replicas, fwd[i])))
    sim = simulate(counts, fwd, bwd, links.p2p_delay, plan.schedule, plan.interleave, timeline)
    sim_local = simulate(counts, fwd, bwd, lambda *a: 0.0, plan.schedule, plan.interleave) if detail else sim
    p2p_total = _p2p_per_replica(plan, counts, links)
    return _assemble(cluster=cluster, plan=plan, tokens_to_train=tokens_to_train, options=options, sim=sim,
                     sim_local=sim_local, replica_estimates=replica_estimates, tp_comm=tp_comm, cp_comm=cp_comm,
                     ep_comm=ep_comm, compute=compute, zero_exposed=zero_exposed, p2p_total=p2p_total, dp_sync=dp_sync,
                     after_step=after_step)


def _p2p_per_replica(plan: Plan, counts, links: Links) -> dict:
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


def _assemble(cluster, plan, tokens_to_train, options, sim, sim_local, replica_estimates,
              tp_comm, cp_comm, ep_comm, compute, zero_exposed, p2p_total, dp_sync, after_step) -> Estimate:
    p = plan.num_stages
    # Each stage finishes its iteration when its slowest replica has synchronised gradients.
    finish, dp_total, dp_exposed, step_total = 0.0, 0.0, 0.0, 0.0
    overlaps = options.overlap_grad_reduce and engine_profile(plan.engine).execution_for(plan).overlap_grad_reduce
    for i in range(p):
        for r in range(len(plan.stages[i].replicas)):
            overlap = sim.last_backward_s[i][r] if overlaps else 0.0
            exposed = exposed_grad_sync_s(dp_sync[i], overlap)
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
        "context_parallel_comm": TimeTerm(cp_comm[crit], cp_comm[crit]),
        "expert_parallel_comm": TimeTerm(ep_comm[crit], ep_comm[crit]),
        "zero_comm": TimeTerm(zero_exposed[crit], zero_exposed[crit]),
        "pipeline_bubble": TimeTerm(max(0.0, sim_local.makespan_s - busy), max(0.0, sim_local.makespan_s - busy)),
        "pipeline_p2p_comm": TimeTerm(max(p2p_total[crit], pp_exposed), pp_exposed),
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
