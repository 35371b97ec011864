"""Which process (rank) plays which GPU of a plan: stage, replica, tensor- and context-parallel rank, slot.

A replica spans tp x cp GPUs (`Plan.replica_gpus`): cp context-parallel ranks, each a tensor-parallel
group of tp GPUs, tp fastest within the replica's slot (Megatron-LM's rank order 'tp-cp-ep-dp-pp',
megatron/core/parallel_state.py), so that a tensor-parallel group sits on neighbouring GPUs.
Ranks are numbered in the order of the hosts and GPUs the placement assigns (pool order of the
cluster, node, GPU index), so that a launcher starting `nproc_per_node` processes per host gives
each host a contiguous block of ranks (torchrun's rule: rank = node_rank * nproc + local_rank).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from planner.cost import evaluate
from planner.placement import place
from planner.schedule import BACKWARD, FORWARD, assign_micro_batches
from planner.types import Cluster, Plan


@dataclass(frozen=True)
class RankInfo:
    rank: int
    stage: int
    replica: int
    tp_rank: int      # within the tensor-parallel group
    tp: int           # the replica's tensor-parallel degree
    pool: str
    gpu: str          # catalog GPU id of the pool
    node: int         # node index within the pool
    local_gpu: int    # GPU index within the node
    cp_rank: int = 0  # which of the replica's context-parallel ranks (which sequence chunks)
    cp: int = 1       # the plan's context-parallel degree

    @property
    def position(self) -> int:
        """Index among the replica's tp x cp GPUs, tp fastest."""
        return self.cp_rank * self.tp + self.tp_rank


def rank_layout(cluster: Cluster, plan: Plan) -> list[RankInfo]:
    placement = place(cluster, plan)
    pool_order = {p.name: k for k, p in enumerate(cluster.pools)}
    cp = plan.context_parallel
    gpus = []
    for (i, r), slot in placement.slots.items():
        tp = plan.stages[i].replicas[r].tp
        assert slot.tp == tp * cp, f"slot of width {slot.tp} for a replica of tp {tp} x cp {cp}"
        for position, g in enumerate(slot.gpus):
            # a replica wider than a node fills whole nodes: GPU g of the slot is on node + g // per_node
            per_node = cluster.pool(slot.pool).gpus_per_node
            where = (pool_order[slot.pool], slot.node + g // per_node, g % per_node)
            gpus.append((where, i, r, position % tp, tp, position // tp, slot.pool))
    gpus.sort(key=lambda row: row[0])
    return [RankInfo(rank=k, stage=i, replica=r, tp_rank=t, tp=tp, pool=pool, gpu=cluster.pool(pool).gpu.id,
                     node=where[1], local_gpu=where[2], cp_rank=c, cp=cp)
            for k, (where, i, r, t, tp, c, pool) in enumerate(gpus)]


def tp_group_ranks(layout: list[RankInfo]) -> dict[tuple[int, int, int], list[int]]:
    """(stage, replica, cp rank) -> its tensor-parallel group's ranks in tensor-parallel order."""
    out: dict[tuple[int, int, int], list[int]] = {}
    for info in sorted(layout, key=lambda x: (x.stage, x.replica, x.cp_rank, x.tp_rank)):
        out.setdefault((info.stage, info.replica, info.cp_rank), []).append(info.rank)
    return out


def cp_group_ranks(layout: list[RankInfo]) -> dict[tuple[int, int, int], list[int]]:
    """(stage, replica, tp rank) -> the ranks at that tensor-parallel position of each context-parallel
    rank, in context-parallel order: the group that exchanges keys and values."""
    out: dict[tuple[int, int, int], list[int]] = {}
    for info in sorted(layout, key=lambda x: (x.stage, x.replica, x.tp_rank, x.cp_rank)):
        out.setdefault((info.stage, info.replica, info.tp_rank), []).append(info.rank)
    return out


def zero_shard_bounds(layout: list[RankInfo], stage: int, numel: int) -> dict[int, tuple[int, int]]:
    """rank -> [start, end) of the stage's flat, full-shaped parameters whose optimizer state (and under
    ZeRO-2 gradient, ZeRO-3 parameters) it keeps. A rank of a replica of tp GPUs among the stage's
    d = replicas x cp data-parallel (x context-parallel) ranks keeps 1 / (tp d) of them, as
    planner.memory counts it (flops.param_shards: params / tp over d ranks); the shares add up to one
    copy, so with replicas of different tp a shard need not lie inside its rank's tensor-parallel slice."""
    members = sorted((x for x in layout if x.stage == stage), key=lambda x: x.rank)
    d = len({x.replica for x in members}) * members[0].cp
    bounds, start = {}, Fraction(0)
    for x in members:
        end = start + Fraction(1, x.tp * d)
        bounds[x.rank] = (int(start * numel), int(end * numel))
        start = end
    assert start == 1, f"stage {stage}: shares add up to {start}, not 1"
    return bounds


def micro_batch_owners(plan: Plan) -> list[list[int]]:
    """[stage][global micro-batch] -> replica that runs it (the cost model's assignment)."""
    return [assign_micro_batches([r.samples // plan.micro_batch for r in s.replicas]) for s in plan.stages]


def worker_op_orders(cluster: Cluster, plan: Plan) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """(stage, replica) -> its (kind, chunk, micro-batch) operations in the order the cost model's
    pipeline simulation ran them. The simulation is a deadlock-free execution of the schedule
    (each worker's fixed 1F1B order, or GPipe's), so replaying each worker's order with blocking
    receives cannot deadlock."""
    frame = evaluate(cluster, plan, timeline=True).timeline
    frame = frame[frame["kind"].isin(["forward", "backward"])].sort_values(["start", "end"], kind="stable")
    orders: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for row in frame.itertuples(index=False):
        kind = FORWARD if row.kind == "forward" else BACKWARD
        orders.setdefault((int(row.stage), int(row.replica)), []).append((kind, int(row.chunk), int(row.micro_batch)))
    return orders
