"""Where a plan's traffic crosses a cluster's network section: each pipeline hand-off and each
data-parallel ring that joins two pools, and the path it takes.

The network itself (switches, links, trunks, storage) and its widest paths are vocabulary: they live
in planner.types (Switch, Link, Storage, Path, NetworkGraph), since a Cluster checks its network when
it is built; they are imported here so `planner.network.NetworkGraph` and the rest keep working.
"""
from __future__ import annotations

from dataclasses import dataclass

# noqa: F401 below: the graph types' old home, kept importable
from planner.types import DEFAULT_LATENCY_S, NETWORK_KINDS, Link, NetworkGraph, Path, Storage, Switch  # noqa: F401


@dataclass(frozen=True)
class Crossing:
    """Traffic of a plan between two pools: which (pipeline hand-offs or a data-parallel ring) and
    the path it takes."""
    what: str                        # e.g. "stages 1 -> 2" or "stage 3's data-parallel ring"
    pool_a: str
    pool_b: str
    path: Path


def crossings(cluster, plan) -> list[Crossing]:
    """Where a plan's traffic goes from one pool to another over the cluster's network section
    (empty without one): each pipeline boundary and each data-parallel ring that joins pools."""
    out = []
    for i, stage in enumerate(plan.stages):
        pools = list(dict.fromkeys(r.pool for r in stage.replicas))
        for other in pools[1:]:
            path = cluster.path_between_pools(cluster.pool(pools[0]), cluster.pool(other))
            if path is not None:
                out.append(Crossing(f"stage {i}'s data-parallel ring", pools[0], other, path))
        if i + 1 < plan.num_stages:
            after = list(dict.fromkeys(r.pool for r in plan.stages[i + 1].replicas))
            for a in pools:
                for b in after:
                    path = cluster.path_between_pools(cluster.pool(a), cluster.pool(b))
                    if path is not None:
                        out.append(Crossing(f"stages {i} -> {i + 1}", a, b, path))
    return out


def crossing_to_dict(c: Crossing) -> dict:
    return {"traffic": c.what, "from_pool": c.pool_a, "to_pool": c.pool_b,
            "gbps_per_node": c.path.bw_bytes_per_s * 8 / 1e9, "latency_us": c.path.latency_s * 1e6,
            "hops": list(c.path.hops)}


def crossing_to_text(c: Crossing) -> str:
    return (f"  {c.what:<32} {c.pool_a} -> {c.pool_b}: {c.path.bw_bytes_per_s * 8 / 1e9:,.1f} Gb/s per node, "
            f"{c.path.latency_s * 1e6:.0f} us, via {' -> '.join(c.path.hops[1:-1])}")
