"""Where each replica's GPUs sit: pool, node and GPU indices.

A plan names pools, not nodes. Replicas are packed first-fit-decreasing by tensor-parallel
degree (a tp group never spans nodes), in stage order within equal degrees, so consecutive
stages share nodes where they can. The placement decides which links traffic crosses.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.types import Cluster, InputError, Plan


@dataclass(frozen=True)
class Slot:
    pool: str
    node: int
    first_gpu: int
    tp: int

    @property
    def gpus(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.tp)


@dataclass(frozen=True)
class Placement:
    slots: dict[tuple[int, int], Slot]          # (stage, replica) -> slot
    gpus_used_per_node: dict[tuple[str, int], int]

    def same_node(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        sa, sb = self.slots[a], self.slots[b]
        return (sa.pool, sa.node) == (sb.pool, sb.node)


def check_fits(cluster: Cluster, plan: Plan) -> None:
    for i, stage in enumerate(plan.stages):
        for j, r in enumerate(stage.replicas):
            field = f"stages[{i}].replicas[{j}]"
            pool = _pool_or_error(cluster, r.pool, field)
            if r.tp > pool.gpus_per_node or pool.gpus_per_node % r.tp:
                raise InputError(f"{field}.tp", f"tp {r.tp} must divide the {pool.gpus_per_node} GPUs per node "
                                 f"of pool {pool.name!r} (a tensor-parallel group stays inside one node)")
            if plan.precision.value == "bf16" and not pool.gpu.supports_bf16:
                raise InputError(f"{field}.pool", f"{pool.gpu.id} has no bf16; use precision fp16")
    for name, used in plan.gpus_by_pool().items():
        pool = cluster.pool(name)
        if used > pool.num_gpus:
            raise InputError("stages", f"the plan uses {used} GPUs of pool {name!r} but it has {pool.num_gpus}")


def _pool_or_error(cluster: Cluster, name: str, field: str):
    try:
        return cluster.pool(name)
    except InputError as e:
        raise InputError(f"{field}.pool", e.message) from None


def place(cluster: Cluster, plan: Plan) -> Placement:
    check_fits(cluster, plan)
    free: dict[tuple[str, int], int] = {}
    for pool in cluster.pools:
        for n in range(pool.nodes):
            free[(pool.name, n)] = pool.gpus_per_node
    order = sorted(((i, j) for i, s in enumerate(plan.stages) for j in range(len(s.replicas))),
                   key=lambda ij: (-plan.stages[ij[0]].replicas[ij[1]].tp, ij))
    slots: dict[tuple[int, int], Slot] = {}
    first_open = {pool.name: 0 for pool in cluster.pools}   # nodes before it are full
    for i, j in order:
        r = plan.stages[i].replicas[j]
        pool = cluster.pool(r.pool)
        while first_open[pool.name] < pool.nodes and free[(pool.name, first_open[pool.name])] == 0:
            first_open[pool.name] += 1
        node = next((n for n in range(first_open[pool.name], pool.nodes)
                     if free[(pool.name, n)] >= r.tp), None)
        if node is None:
            raise InputError(f"stages[{i}].replicas[{j}]", f"no node of pool {pool.name!r} has {r.tp} free GPUs "
                             f"left for this tp group; use fewer or smaller tensor-parallel groups")
        first = pool.gpus_per_node - free[(pool.name, node)]
        free[(pool.name, node)] -= r.tp
        slots[(i, j)] = Slot(pool.name, node, first, r.tp)
    used = {}
    for key, left in free.items():
        pool = cluster.pool(key[0])
        if left < pool.gpus_per_node:
            used[key] = pool.gpus_per_node - left
    return Placement(slots, used)
