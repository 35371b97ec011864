"""A cluster's network as a graph: switches, the links that join nodes to them, and the trunks
between switches; bandwidth between any two pools is the bottleneck of their widest path.

The graph (networkx) has a vertex per pool and per switch. A link with a pool at one end stands for
every node of the pool: each node has that link (its NICs) to the switch, so its bandwidth is per
node; parallel links from a pool to one switch add up (rails). A link between two switches is a trunk:
its bandwidth is shared by all the traffic that crosses it. Pools are leaves: traffic goes from a
node to its switch, over trunks, to the other node's switch; it never passes through a pool.

Per-node bandwidth between a node of pool A and a node of pool B (`Network.between`):

    bw(A, B) = max over paths s ~> t of  min( nic(A, s),  nic(B, t),  min over trunks e on the path of  bw(e) / m )

with `m = min(nodes of A, nodes of B)`: a trunk between the two pools is shared by as many node
pairs as can talk across it at once, at most the smaller pool's nodes. That sharing is an assumption
(Holmes, Yang et al. 2023, plans pipelines across NIC kinds; it does not model trunk sharing);
traffic of other pools over the same trunk is not counted, and a pair's traffic takes one path (its
widest) even where a pool has links to several switches. Two nodes of one pool talk through their
switch at the sum of the pool's links (`nic`). The path's latency is the largest of its links' (the
path's slowest transport sets the alpha term: a message that crosses an Ethernet hop between two
InfiniBand islands goes over TCP sockets).

The widest path between switches runs along a maximum spanning tree of the switch graph (a standard
property of bottleneck paths), so every pair is read off one tree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import networkx as nx

from planner.types import InputError

NETWORK_KINDS = ("infiniband", "roce", "ethernet")

# Small-message latency by link kind when a link does not say, seconds: the catalog's figures for
# InfiniBand HDR/NDR (3 us), RoCE v2 (5 us) and Ethernet with kernel TCP sockets (20 us at 25 GbE);
# catalog/networks.yaml gives their sources. Order-of-magnitude alpha terms, not datasheet values.
DEFAULT_LATENCY_S = {"infiniband": 3e-6, "roce": 5e-6, "ethernet": 20e-6}


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str                        # one of NETWORK_KINDS

    def __post_init__(self):
        if self.kind not in NETWORK_KINDS:
            raise InputError(f"network.switches[{self.name}].kind",
                             f"unknown kind {self.kind!r}; use one of {list(NETWORK_KINDS)}")


@dataclass(frozen=True)
class Link:
    """A link between `a` and `b` (pool or switch names): per node when one end is a pool, the
    trunk's total when both are switches."""
    a: str
    b: str
    bw_bytes_per_s: float
    latency_s: float
    kind: str

    def __post_init__(self):
        at = f"network.links[{self.a}-{self.b}]"
        if not (self.bw_bytes_per_s > 0 and math.isfinite(self.bw_bytes_per_s)):
            raise InputError(f"{at}.gbps", f"must be a positive bandwidth, got {self.bw_bytes_per_s!r} bytes/s")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise InputError(f"{at}.latency_us", f"must be a latency >= 0, got {self.latency_s!r} s")
        if self.kind not in NETWORK_KINDS:
            raise InputError(f"{at}.kind", f"unknown kind {self.kind!r}; use one of {list(NETWORK_KINDS)}")


@dataclass(frozen=True)
class Storage:
    """Where checkpoints are written and read: a switch, and the storage system's total bandwidth."""
    switch: str
    bw_bytes_per_s: float


@dataclass(frozen=True)
class Path:
    bw_bytes_per_s: float            # per node
    latency_s: float
    hops: tuple[str, ...]            # pool, switches..., pool


@dataclass(frozen=True)
class NetworkGraph:
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    storage: Storage | None = None

    def __post_init__(self):
        names = [s.name for s in self.switches]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError("network.switches", f"switch names must be unique; repeated: {dup}")
        known = set(names)
        for link in self.links:
            if link.a not in known and link.b not in known:
                raise InputError(f"network.links[{link.a}-{link.b}]",
                                 "joins no switch: every link has a switch at one end at least "
                                 f"(switches: {sorted(known)})")
        if self.storage is not None and self.storage.switch not in known:
            raise InputError("network.storage.switch",
                             f"unknown switch {self.storage.switch!r}; the network has {sorted(known)}")

    @property
    def switch_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.switches)

    def pool_links(self, pool: str) -> dict[str, Link]:
        """The pool's links by switch, parallel links to one switch added up (rails)."""
        out: dict[str, Link] = {}
        for link in self.links:
            if pool not in (link.a, link.b):
                continue
            switch = link.b if link.a == pool else link.a
            was = out.get(switch)
            out[switch] = link if was is None else Link(pool, switch, was.bw_bytes_per_s + link.bw_bytes_per_s,
                                                        max(was.latency_s, link.latency_s), was.kind)
        return out

    def nic(self, pool: str) -> tuple[float, float]:
        """(bytes/s, latency) of one node of `pool` to the network: all its links."""
        links = self.pool_links(pool).values()
        if not links:
            raise InputError("network.links", f"pool {pool!r} has no link; join it to a switch")
        return sum(l.bw_bytes_per_s for l in links), max(l.latency_s for l in links)

    def trunk_tree(self) -> nx.Graph:
        """The switches joined by a maximum spanning tree of their trunks (parallel trunks added)."""
        g = nx.Graph()
        g.add_nodes_from(self.switch_names)
        for link in self.links:
            if link.a in self.switch_names and link.b in self.switch_names:
                if g.has_edge(link.a, link.b):
                    e = g.edges[link.a, link.b]
                    e["bw"] += link.bw_bytes_per_s
                    e["latency"] = max(e["latency"], link.latency_s)
                else:
                    g.add_edge(link.a, link.b, bw=link.bw_bytes_per_s, latency=link.latency_s)
        return nx.maximum_spanning_tree(g, weight="bw")

    @cached_property
    def trunk_bottlenecks(self) -> dict[tuple[str, str], tuple[float, float, tuple[str, ...]]]:
        """Between every two switches: (bottleneck bandwidth, largest latency, switches on the way),
        computed once per network (every subset of a cluster, e.g. each fleet candidate, shares it)."""
        return _tree_bottlenecks(self.trunk_tree())

    def paths(self, nodes: Mapping[str, int]) -> dict[tuple[str, str], Path]:
        """The widest path between every two of the pools `nodes` names (pool -> its node count);
        an InputError names two pools with no path between them. Links to other pools are ignored
        (a cluster's subset keeps its network)."""
        trunk = self.trunk_bottlenecks
        links = {p: self.pool_links(p) for p in nodes}
        out: dict[tuple[str, str], Path] = {}
        names = sorted(nodes)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                m = min(nodes[a], nodes[b])
                best: Path | None = None
                for s, la in links[a].items():
                    for t, lb in links[b].items():
                        if (s, t) not in trunk:
                            continue
                        trunk_bw, trunk_latency, hops = trunk[(s, t)]
                        bw = min(la.bw_bytes_per_s, lb.bw_bytes_per_s, trunk_bw / m)
                        latency = max(la.latency_s, lb.latency_s, trunk_latency)
                        if best is None or (bw, -latency) > (best.bw_bytes_per_s, -best.latency_s):
                            best = Path(bw, latency, (a, *hops, b))
                if best is None:
                    raise InputError("network.links", f"pools {a!r} and {b!r} have no path between them; "
                                                      f"join their switches with a link")
                out[(a, b)] = best
                out[(b, a)] = Path(best.bw_bytes_per_s, best.latency_s, tuple(reversed(best.hops)))
        return out

    def storage_bw(self, pools: Mapping[str, int]) -> float | None:
        """Bytes/s that `pools` (pool -> nodes writing) move to or from storage together: each pool's
        nodes at their links, over the trunks to the storage switch, capped by the storage's own
        bandwidth; None without a storage entry."""
        if self.storage is None:
            return None
        trunk = self.trunk_bottlenecks
        total = 0.0
        for pool, n in pools.items():
            best = 0.0
            for s, link in self.pool_links(pool).items():
                if (s, self.storage.switch) in trunk:
                    best = max(best, min(n * link.bw_bytes_per_s, trunk[(s, self.storage.switch)][0]))
            if best == 0.0:
                raise InputError("network.storage", f"pool {pool!r} has no path to the storage switch "
                                                    f"{self.storage.switch!r}")
            total += best
        return min(total, self.storage.bw_bytes_per_s)


def _tree_bottlenecks(tree: nx.Graph) -> dict[tuple[str, str], tuple[float, float, tuple[str, ...]]]:
    """(bottleneck bandwidth, largest latency, switches on the way) between every two switches
    of one tree component, (inf, 0, (s,)) from a switch to itself."""
    out = {}
    for source in tree.nodes:
        out[(source, source)] = (math.inf, 0.0, (source,))
        for target, hops in nx.single_source_shortest_path(tree, source).items():
            if target == source:
                continue
            edges = [tree.edges[u, v] for u, v in zip(hops, hops[1:])]
            out[(source, target)] = (min(e["bw"] for e in edges), max(e["latency"] for e in edges), tuple(hops))
    return out


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
