"""Where each replica's GPUs sit: pool, node and GPU indices.

A plan names pools, not nodes. Replicas are packed first-fit-decreasing by width (tensor-parallel
degree x context-parallel degree; a tp group never spans nodes), in stage order within equal
widths, so consecutive stages share nodes where they can. A replica wider than a node (context
parallelism across nodes) takes whole free nodes. The placement decides which links traffic crosses.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from planner.comm import INTRA_NODE_LATENCY_S, p2p_s
from planner.elementwise import minimum
from planner.types import Cluster, InputError, Plan, Pool

# per stage, per replica: (pool name, width = tp x cp GPUs): all of a plan that placement reads
Structure = Sequence[Sequence[tuple[str, int]]]


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
    checked = set()         # replicas of one pool and tp pass or fail alike: the first of them says which
    for i, stage in enumerate(plan.stages):
        for j, r in enumerate(stage.replicas):
            if (r.pool, r.tp) in checked:
                continue
            checked.add((r.pool, r.tp))
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


def _pool_or_error(cluster: Cluster, name: str, field: str):
    try:
        return cluster.pool(name)
    except InputError as e:
        raise InputError(f"{field}.pool", e.message) from None


def tp_fits(tp: int, pool: Pool) -> bool:
    """Whether a tensor-parallel group of `tp` GPUs is all NVLink: it divides one node, or it fills
    whole nodes of one NVLink domain that spans nodes (Gpu.nvlink_domain_gpus: a GB200 NVL72 rack is 18
    trays of 4 GPUs on one NVLink switch fabric, so tp 8 spans two trays at NVLink speed)."""
    domain = pool.gpu.nvlink_domain_gpus
    if tp <= pool.gpus_per_node:
        return pool.gpus_per_node % tp == 0
    return domain >= tp and domain % tp == 0 and tp % pool.gpus_per_node == 0


def fits_nodes(width: int, gpus_per_node: int) -> bool:
    """Whether a replica `width` GPUs wide packs into nodes: dividing one node, or whole nodes."""
    return gpus_per_node % width == 0 if width <= gpus_per_node else width % gpus_per_node == 0


def structure_of(plan: Plan) -> tuple[tuple[tuple[str, int], ...], ...]:
    return tuple(tuple((r.pool, plan.replica_gpus(r)) for r in stage.replicas) for stage in plan.stages)


def place(cluster: Cluster, plan: Plan) -> Placement:
    check_fits(cluster, plan)
    return place_structure(cluster, structure_of(plan))


def place_structure(cluster: Cluster, structure: Structure) -> Placement:
    """The placement of `place` for a plan's stage structure alone (the search places layouts
    before they have a layer split or sample shares)."""
    pools = {pool.name: pool for pool in cluster.pools}
    free = _FreeGpus(pools)      # only the nodes the plan touches are stored: a pool may have 10^5 nodes
    # widest first, then in stage order
    order = sorted((-width, i, j) for i, stage in enumerate(structure) for j, (_, width) in enumerate(stage))
    slots: dict[tuple[int, int], Slot] = {}
    first_open = {pool.name: 0 for pool in cluster.pools}   # nodes before it are full
    for _, i, j in order:
        name, tp = structure[i][j]
        pool = pools[name]
        if tp > pool.gpus_per_node:
            slots[(i, j)] = _whole_nodes(pool, tp, free, i, j)
            continue
        node = first_open[name]
        while node < pool.nodes and free[(name, node)] == 0:
            node += 1
        first_open[name] = node
        if node >= pool.nodes or free[(name, node)] < tp:
            node = next((n for n in range(node + 1, pool.nodes) if free[(name, n)] >= tp), None)
        if node is None:
            raise InputError(f"stages[{i}].replicas[{j}]", f"no node of pool {name!r} has {tp} free GPUs "
                             f"left for this tp group; use fewer or smaller tensor-parallel groups")
        left = free[(name, node)]
        free[(name, node)] = left - tp
        slots[(i, j)] = Slot(name, node, pool.gpus_per_node - left, tp)
    used = {}
    for key, left in free.items():
        pool = pools[key[0]]
        if left < pool.gpus_per_node:
            used[key] = pool.gpus_per_node - left
    return Placement(slots, used)


class _FreeGpus(dict):
    """Free GPUs per (pool, node): a node not yet stored has all of its GPUs free."""

    def __init__(self, pools: dict):
        super().__init__()
        self._pools = pools

    def __missing__(self, key: tuple[str, int]) -> int:
        return self._pools[key[0]].gpus_per_node


def _whole_nodes(pool: Pool, width: int, free: dict, i: int, j: int) -> Slot:
    """A replica wider than a node (a context-parallel group across nodes): the first free nodes
    it fills; its slot names the first of them."""
    need = width // pool.gpus_per_node
    empty = list(itertools.islice((n for n in range(pool.nodes) if free[(pool.name, n)] == pool.gpus_per_node), need))
    if len(empty) < need:
        raise InputError(f"stages[{i}].replicas[{j}]", f"pool {pool.name!r} has no {need} free nodes left for this "
                         f"{width}-GPU replica; use a smaller context-parallel degree or fewer replicas")
    for n in empty:
        free[(pool.name, n)] = 0
    return Slot(pool.name, empty[0], 0, width)


def context_ring_bw(pool: Pool, tp: int, cp: int) -> float:
    """Bytes/s per GPU of a replica's context-parallel ring: the intra-node link when the replica's
    tp x cp GPUs share a node; across nodes the hops between nodes carry tp GPUs' chunks at once
    through each node's network, the ring moving at its slowest hop."""
    if tp * cp <= pool.gpus_per_node:
        return pool.gpu.link_bw_bytes_per_s
    return min(pool.gpu.link_bw_bytes_per_s, network_share_bw(pool.inter_node_bw_bytes_per_s, 1, tp))


# ----------------------------------------------------------------------------- links

def network_share_bw(node_bw_bytes_per_s: float, flows: int, gpus_busy: int) -> float:
    """Bytes/s that `flows` concurrent streams get from a node's network (per direction) when
    `gpus_busy` of its GPUs send: the node's bandwidth is shared evenly among its busy GPUs."""
    return node_bw_bytes_per_s * flows / gpus_busy


def dp_member_bw(node_bw, between_bw, link_bw, flows, busy):
    """Bytes/s per rank a member of a stage's data-parallel ring gets when the ring crosses nodes: its
    share of its node's network (`flows` of the ring's ranks on its node, `busy` GPUs of the node
    sending), its share of the link between its pool and the ring's first member's (`between_bw`, inf
    in the first member's pool), and at most its own intra-node link. Links.dp_group takes the slowest
    member; dp_link_ceiling and the search's screen the most any placement gives (one flow, busy its
    tp). Numbers or numpy arrays."""
    bw = minimum(network_share_bw(node_bw, flows, busy), link_bw)
    return minimum(bw, network_share_bw(between_bw, flows, busy))


def network_bw(cluster: Cluster, pool_a: Pool, busy_a: int, flows_a: int, pool_b: Pool, busy_b: int,
               flows_b: int) -> tuple[float, float]:
    """(bandwidth, latency) from a replica on one node to one on another: each side's share of its
    node's network (its `flows` GPUs of the node's `busy`), the link between the pools, and the
    replicas' own links."""
    share = min(network_share_bw(pool_a.inter_node_bw_bytes_per_s, flows_a, busy_a),
                network_share_bw(pool_b.inter_node_bw_bytes_per_s, flows_b, busy_b))
    if pool_a.name != pool_b.name:
        share = min(share, network_share_bw(cluster.bw_between_pools(pool_a, pool_b), flows_a, busy_a))
    share = min(share, pool_a.gpu.link_bw_bytes_per_s * flows_a, pool_b.gpu.link_bw_bytes_per_s * flows_b)
    return share, cluster.latency_between_pools(pool_a, pool_b)


class Links:
    """Bandwidths of the links a plan's traffic crosses, from its placement; the one source of
    link figures for planner.cost.evaluate and the search's fast scores. `activation_bytes`: one
    micro-batch's activation (or its gradient) sent between stages."""

    def __init__(self, cluster: Cluster, structure: Structure, placement: Placement, activation_bytes: float):
        self.cluster, self.structure, self.placement = cluster, structure, placement
        self.activation_bytes = activation_bytes
        self._pools = {p.name: p for p in cluster.pools}
        self._p2p: dict[tuple[int, int, int, int], float] = {}
        self._p2p_alike: dict[tuple, float] = {}
        # per replica (i, r): its node and how many GPUs of that node the plan runs
        self._node = {ir: (slot.pool, slot.node) for ir, slot in placement.slots.items()}
        self._busy = {ir: placement.gpus_used_per_node[node] for ir, node in self._node.items()}

    def pool_of(self, i: int, r: int) -> Pool:
        return self._pools[self.structure[i][r][0]]

    def intra_bw(self, i: int, r: int) -> float:
        return self.pool_of(i, r).gpu.link_bw_bytes_per_s

    def network_share(self, i: int, r: int, flows: int) -> float:
        """Bytes/s one of `flows` concurrent streams gets from the node's network (per direction)."""
        return network_share_bw(self.pool_of(i, r).inter_node_bw_bytes_per_s, flows, self._busy[(i, r)])

    def busy(self, i: int, r: int) -> int:
        """GPUs of replica (i, r)'s node that the plan runs."""
        return self._busy[(i, r)]

    def cross_bw(self, a: tuple[int, int], b: tuple[int, int], flows_a: int, flows_b: int) -> tuple[float, float]:
        """(bandwidth, latency) between replicas a and b, each sending over `flows` GPUs."""
        pa, pb = self.pool_of(*a), self.pool_of(*b)
        if self._node[a] == self._node[b]:
            return min(pa.gpu.link_bw_bytes_per_s, pb.gpu.link_bw_bytes_per_s), INTRA_NODE_LATENCY_S
        return network_bw(self.cluster, pa, self._busy[a], flows_a, pb, self._busy[b], flows_b)

    def p2p_link(self, i: int, r: int, i2: int, r2: int) -> tuple[float, float]:
        """(bandwidth, latency) of a transfer from replica (i, r) to (i2, r2); with tp > 1 each GPU
        of the group sends 1/tp of it (Narayanan et al. 2021, scatter/gather)."""
        tp = min(self.structure[i][r][1], self.structure[i2][r2][1])
        return self.cross_bw((i, r), (i2, r2), tp, tp)

    def p2p_delay(self, i: int, r: int, i2: int, r2: int) -> float:
        """Activation (or its gradient) of one micro-batch from replica (i, r) to (i2, r2)."""
        key = (i, r, i2, r2)
        if key not in self._p2p:
            # what p2p_link reads: the pools, the tp, whether the two share a node, and how busy their nodes are
            a, b = (i, r), (i2, r2)
            alike = (self.structure[i][r][0], self.structure[i2][r2][0], min(self.structure[i][r][1],
                     self.structure[i2][r2][1]), self._node[a] == self._node[b], self._busy[a], self._busy[b])
            if alike not in self._p2p_alike:
                self._p2p_alike[alike] = p2p_s(self.activation_bytes, *self.p2p_link(i, r, i2, r2))
            self._p2p[key] = self._p2p_alike[alike]
        return self._p2p[key]

    def dp_group(self, i: int) -> tuple[float, float]:
        """(bandwidth per rank, latency) of the ring joining stage i's replicas."""
        members = [(i, r) for r in range(len(self.structure[i]))]
        per_node: dict[tuple[str, int], int] = {}
        for m in members:
            per_node[self._node[m]] = per_node.get(self._node[m], 0) + 1
        inside = all(self.structure[i][r][1] <= self.pool_of(i, r).gpus_per_node for _, r in members)
        if len(per_node) == 1 and inside:
            return min(self.intra_bw(*m) for m in members), INTRA_NODE_LATENCY_S
        worst_bw, worst_latency = math.inf, 0.0
        first = self.pool_of(*members[0])
        seen = set()
        for m in members:
            pool, flows, busy = self.pool_of(*m), per_node[self._node[m]], self._busy[m]
            if (pool.name, flows, busy) in seen:       # replicas alike in these get the same figure
                continue
            seen.add((pool.name, flows, busy))
            between = self.cluster.bw_between_pools(pool, first) if pool.name != first.name else math.inf
            bw = dp_member_bw(pool.inter_node_bw_bytes_per_s, between, pool.gpu.link_bw_bytes_per_s, flows, busy)
            worst_bw = min(worst_bw, bw)
            worst_latency = max(worst_latency, self.cluster.latency_between_pools(pool, first))
        return worst_bw, worst_latency


# ----------------------------------------------------------------------------- ceilings for bounds

def dp_link_ceiling(cluster: Cluster, groups: Sequence[tuple[Pool, int, int]]) -> float:
    """The most bandwidth per rank Links.dp_group can give a stage of these replica groups
    (pool, tp, count) under any placement: a ring inside one node gets the slowest member's
    intra-node link; across nodes each member's share of its node's network is at most the
    node's bandwidth / tp (its node runs at least its own tp GPUs), and at most the bandwidth
    between its pool and the first group's over tp. For the search's bounds.

    Why it is tight: dp_group gives a member node_bw x flows / busy, flows the stage's replicas on
    its node and busy the node's GPUs the plan runs; those replicas alone keep flows x tp of them
    busy, so flows / busy <= 1 / tp, with equality wherever a node runs only this stage's replicas
    (a replica wider than a node fills its nodes: one flow, busy the node's GPUs). A node busier than
    its stage's replicas ("8 busy, 2 of them the stage's") is also one with more of the stage's
    flows, except where a node is shared with another stage (count x tp not a multiple of the node).
    Only there is this ceiling above dp_group: 3 of the 860 settings torchtitan's search scored behind
    Megatron-LM's answer at 1,024 GPUs (benchmarks/engine_cover.py beaten), so it takes no run length."""
    if len(groups) == 1:
        pool, tp, count = groups[0]
        if count * tp <= pool.gpus_per_node:
            return pool.gpu.link_bw_bytes_per_s
    first = groups[0][0]
    bw = math.inf
    for pool, tp, _ in groups:
        busy = min(tp, pool.gpus_per_node)         # a replica wider than a node fills its nodes
        between = cluster.bw_between_pools(pool, first) if pool.name != first.name else math.inf
        bw = min(bw, dp_member_bw(pool.inter_node_bw_bytes_per_s, between, pool.gpu.link_bw_bytes_per_s, 1, busy))
    return bw


def p2p_floor_s(cluster: Cluster, a: Pool, tp_a: int, b: Pool, tp_b: int, activation_bytes: float) -> float:
    """The least Links.p2p_delay between a replica of (a, tp_a) and one of (b, tp_b) under any
    placement: two replicas of one pool may share a node (its intra-node link); otherwise each
    side's network share is at most its node's bandwidth times tp / its own tp (Links.cross_bw
    with gpus_busy >= its tp). For the search's bounds."""
    tp = min(tp_a, tp_b)
    busy_a, busy_b = min(tp_a, a.gpus_per_node), min(tp_b, b.gpus_per_node)   # wide replicas fill their nodes
    share = min(network_share_bw(a.inter_node_bw_bytes_per_s, tp, busy_a),
                network_share_bw(b.inter_node_bw_bytes_per_s, tp, busy_b),
                a.gpu.link_bw_bytes_per_s * tp, b.gpu.link_bw_bytes_per_s * tp)
    if a.name != b.name:
        share = min(share, network_share_bw(cluster.bw_between_pools(a, b), tp, busy_a))
    network = p2p_s(activation_bytes, share, cluster.latency_between_pools(a, b))
    if a.name != b.name:
        return network
    same_node = p2p_s(activation_bytes, min(a.gpu.link_bw_bytes_per_s, b.gpu.link_bw_bytes_per_s),
                      INTRA_NODE_LATENCY_S)
    return min(network, same_node)
