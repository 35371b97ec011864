"""Which process (rank) plays which GPU of a plan: stage, replica, tensor-parallel rank and slot.

Ranks are numbered in the order of the hosts and GPUs the placement assigns (pool order of the
cluster, node, GPU index), so that a launcher starting `nproc_per_node` processes per host gives
each host a contiguous block of ranks (torchrun's rule: rank = node_rank * nproc + local_rank).
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.cost import evaluate
from planner.placement import place
from planner.schedule import BACKWARD, FORWARD, assign_micro_batches
from planner.types import Cluster, Plan


@dataclass(frozen=True)
class RankInfo:
    rank: int
    stage: int
    replica: int
    tp_rank: int
    tp: int
    pool: str
    gpu: str          # catalog GPU id of the pool
    node: int         # node index within the pool
    local_gpu: int    # GPU index within the node


def rank_layout(cluster: Cluster, plan: Plan) -> list[RankInfo]:
    placement = place(cluster, plan)
    pool_order = {p.name: k for k, p in enumerate(cluster.pools)}
    gpus = []
    for (i, r), slot in placement.slots.items():
        for t, g in enumerate(slot.gpus):
            gpus.append(((pool_order[slot.pool], slot.node, g), i, r, t, slot))
    gpus.sort(key=lambda row: row[0])
    return [RankInfo(k, i, r, t, slot.tp, slot.pool, cluster.pool(slot.pool).gpu.id, slot.node, key[2])
            for k, (key, i, r, t, slot) in enumerate(gpus)]


def replica_ranks(layout: list[RankInfo]) -> dict[tuple[int, int], list[int]]:
    """(stage, replica) -> its ranks in tensor-parallel order."""
    out: dict[tuple[int, int], list[int]] = {}
    for info in sorted(layout, key=lambda x: (x.stage, x.replica, x.tp_rank)):
        out.setdefault((info.stage, info.replica), []).append(info.rank)
    return out


def micro_batch_owners(plan: Plan) -> list[list[int]]:
    """[stage][global micro-batch] -> replica that runs it (the cost model's assignment)."""
    return [assign_micro_batches([r.samples // plan.micro_batch for r in s.replicas]) for s in plan.stages]


def worker_op_orders(cluster: Cluster, plan: Plan) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """(stage, replica) -> its (kind, chunk, micro-batch) operations in the order the cost model's
    pipeline simulation ran them. The simulation is a deadlock-free execution of the schedule
    (1F1B picks ready work by event time when replicas are unequal), so replaying each worker's
    order with blocking receives cannot deadlock."""
    frame = evaluate(cluster, plan, timeline=True).timeline
    frame = frame[frame["kind"].isin(["forward", "backward"])].sort_values(["start", "end"], kind="stable")
    orders: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for row in frame.itertuples(index=False):
        kind = FORWARD if row.kind == "forward" else BACKWARD
        orders.setdefault((int(row.stage), int(row.replica)), []).append((kind, int(row.chunk), int(row.micro_batch)))
    return orders
