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

The widest path between switches runs along a maximum spanning tree of the switch graph (Hu 1961;
see `NetworkGraph.paths`), so every pair is read off one tree: one walk of it from each switch a
pool links to, never a table of every switch pair (1,024 switches in a chain made that table a
million paths of ~340 switches each: 83 CPU-s and 3.1 GB for one `evaluate`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import networkx as nx
import numpy as np

from planner.limits import MAX_SWITCHES_PER_POOL
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
        for pool, switches in self._links_by_pool.items():
            if len(switches) > MAX_SWITCHES_PER_POOL:
                raise InputError("network.links", f"pool {pool!r} links to {len(switches)} switches; at most "
                                                  f"{MAX_SWITCHES_PER_POOL} (planner.limits.MAX_SWITCHES_PER_POOL), "
                                                  f"one per NIC rail: join the rails' switches instead")
        if self.storage is not None and self.storage.switch not in known:
            raise InputError("network.storage.switch",
                             f"unknown switch {self.storage.switch!r}; the network has {sorted(known)}")

    @cached_property
    def switch_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.switches)

    @cached_property
    def _links_by_pool(self) -> dict[str, dict[str, Link]]:
        """Each pool's links by switch, parallel links to one switch added up (rails); one pass
        over the links."""
        switches = self.switch_names
        out: dict[str, dict[str, Link]] = {}
        for link in self.links:
            if link.a in switches and link.b in switches:
                continue
            pool, switch = (link.b, link.a) if link.a in switches else (link.a, link.b)
            mine = out.setdefault(pool, {})
            was = mine.get(switch)
            mine[switch] = link if was is None else Link(pool, switch, was.bw_bytes_per_s + link.bw_bytes_per_s,
                                                         max(was.latency_s, link.latency_s), was.kind)
        return out

    def pool_links(self, pool: str) -> dict[str, Link]:
        """The pool's links by switch, parallel links to one switch added up (rails)."""
        return dict(self._links_by_pool.get(pool, {}))

    def nic(self, pool: str) -> tuple[float, float]:
        """(bytes/s, latency) of one node of `pool` to the network: all its links."""
        links = self._links_by_pool.get(pool, {}).values()
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
    def _switch_index(self) -> dict[str, int]:
        return {s.name: i for i, s in enumerate(self.switches)}

    @cached_property
    def _trunks(self) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
        """Between every two switches, along the maximum spanning tree: (bottleneck bytes/s, 0 where
        no trunks join them, inf from a switch to itself; largest latency; each switch's parent and
        depth in the tree rooted at its component's first switch). Built once per network (every
        subset of a cluster, e.g. each fleet candidate, shares it).

        Adding the tree's edges widest first, two switches join exactly when the narrowest edge of
        their tree path is added (Kruskal's order), so each merge of two components writes one block
        of the matrix; likewise the latencies, smallest first. O(switches^2) work and memory (1,024
        switches: two 8 MB matrices), however long the paths."""
        index = self._switch_index
        tree = self.trunk_tree()
        edges = [(index[u], index[v], e["bw"], e["latency"]) for u, v, e in tree.edges(data=True)]
        n = len(index)
        bw = _join_in_order(n, [(i, j, b) for i, j, b, _ in sorted(edges, key=lambda e: -e[2])], empty=0.0)
        np.fill_diagonal(bw, math.inf)
        latency = _join_in_order(n, [(i, j, l) for i, j, _, l in sorted(edges, key=lambda e: e[3])], empty=0.0)
        parent, depth = [-1] * n, [0] * n
        neighbours: dict[int, list[int]] = {i: [] for i in range(n)}
        for i, j, _, _ in edges:
            neighbours[i].append(j)
            neighbours[j].append(i)
        seen = [False] * n
        for root in range(n):
            if seen[root]:
                continue
            seen[root], todo = True, [root]
            while todo:
                u = todo.pop()
                for v in neighbours[u]:
                    if not seen[v]:
                        seen[v], parent[v], depth[v] = True, u, depth[u] + 1
                        todo.append(v)
        return bw, latency, parent, depth

    def _trunk_hops(self, s: str, t: str) -> tuple[str, ...]:
        """The switches on the tree path from `s` to `t` (both included): up from both to where
        they meet."""
        _, _, parent, depth = self._trunks
        i, j = self._switch_index[s], self._switch_index[t]
        up_i, up_j = [i], [j]
        while i != j:
            if depth[i] >= depth[j]:
                i = parent[i]
                up_i.append(i)
            else:
                j = parent[j]
                up_j.append(j)
        names = [sw.name for sw in self.switches]
        return tuple(names[k] for k in up_i + up_j[-2::-1])

    def paths(self, nodes: Mapping[str, int]) -> Mapping[tuple[str, str], Path]:
        """The widest path between every two of the pools `nodes` names (pool -> its node count);
        an InputError names two pools with no path between them. Links to other pools are ignored
        (a cluster's subset keeps its network).

        The widest (maximum bottleneck) path between two vertices of a graph runs along a maximum
        spanning tree (T. C. Hu 1961, "The maximum capacity route problem", Operations Research
        9(6):898-900; Cormen et al., Introduction to Algorithms, 3rd ed., problem 23-3), so each pair
        reads one entry of `_trunks` per pair of the pools' switches: work bounded by pools^2 x
        switches per pool^2, never a search over paths. A path's switches are listed when asked for."""
        bw_matrix, latency_matrix, _, _ = self._trunks
        index = self._switch_index
        ends = {}
        for p in nodes:
            links = list(self._links_by_pool.get(p, {}).items())
            ends[p] = (np.array([index[s] for s, _ in links], dtype=np.intp),
                       np.array([l.bw_bytes_per_s for _, l in links]), np.array([l.latency_s for _, l in links]),
                       [s for s, _ in links])
        best: dict[tuple[str, str], tuple[float, float, str, str]] = {}
        names = sorted(nodes)
        for i, a in enumerate(names):
            sa, bwa, lata, swa = ends[a]
            for b in names[i + 1:]:
                sb, bwb, latb, swb = ends[b]
                trunk = bw_matrix[np.ix_(sa, sb)]
                bw = np.minimum(np.minimum(bwa[:, None], bwb[None, :]), trunk / min(nodes[a], nodes[b]))
                latency = np.maximum(np.maximum(lata[:, None], latb[None, :]), latency_matrix[np.ix_(sa, sb)])
                joined = trunk > 0
                if not joined.any():
                    raise InputError("network.links", f"pools {a!r} and {b!r} have no path between them; "
                                                      f"join their switches with a link")
                widest = np.where(joined, bw, -1.0)
                ties = widest == widest.max()
                k = int(np.argmin(np.where(ties, latency, math.inf)))    # first of the least latency
                x, y = divmod(k, len(sb))
                best[(a, b)] = (float(bw[x, y]), float(latency[x, y]), swa[x], swb[y])
        return _PathTable(self, best)

    def storage_bw(self, pools: Mapping[str, int]) -> float | None:
        """Bytes/s that `pools` (pool -> nodes writing) move to or from storage together: each pool's
        nodes at their links, over the trunks to the storage switch, capped by the storage's own
        bandwidth; None without a storage entry."""
        if self.storage is None:
            return None
        to_storage = self._trunks[0][self._switch_index[self.storage.switch]]
        total = 0.0
        for pool, n in pools.items():
            best = 0.0
            for s, link in self._links_by_pool.get(pool, {}).items():
                trunk_bw = to_storage[self._switch_index[s]]
                if trunk_bw > 0:
                    best = max(best, min(n * link.bw_bytes_per_s, trunk_bw))
            if best == 0.0:
                raise InputError("network.storage", f"pool {pool!r} has no path to the storage switch "
                                                    f"{self.storage.switch!r}")
            total += best
        return min(total, self.storage.bw_bytes_per_s)


def _join_in_order(n: int, edges: list[tuple[int, int, float]], empty: float) -> np.ndarray:
    """An n x n matrix: for each two vertices, the value of the edge whose addition (in the order
    given) first joins them; `empty` where none does. Components merge smaller into larger."""
    out = np.full((n, n), empty)
    component = list(range(n))
    members = [[i] for i in range(n)]
    for i, j, value in edges:
        ci, cj = component[i], component[j]
        if ci == cj:
            continue
        if len(members[ci]) < len(members[cj]):
            ci, cj = cj, ci
        out[np.ix_(members[ci], members[cj])] = value
        out[np.ix_(members[cj], members[ci])] = value
        for k in members[cj]:
            component[k] = ci
        members[ci] += members[cj]
        members[cj] = []
    return out


class _PathTable(Mapping):
    """`NetworkGraph.paths`' answer: each ordered pair of pools -> its Path, the switches on the way
    listed on first use (2,016 pairs of pools over a chain of 1,024 switches would be 700,000 names)."""

    def __init__(self, network: NetworkGraph, best: dict[tuple[str, str], tuple[float, float, str, str]]):
        self._network, self._best, self._made = network, best, {}

    def __getitem__(self, pair: tuple[str, str]) -> Path:
        if pair not in self._made:
            a, b = pair
            if (a, b) in self._best:
                bw, latency, s, t = self._best[(a, b)]
                self._made[pair] = Path(bw, latency, (a, *self._network._trunk_hops(s, t), b))
            else:
                bw, latency, s, t = self._best[(b, a)]
                self._made[pair] = Path(bw, latency, (a, *self._network._trunk_hops(t, s), b))
        return self._made[pair]

    def __iter__(self):
        for a, b in self._best:
            yield a, b
            yield b, a

    def __len__(self) -> int:
        return 2 * len(self._best)


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
