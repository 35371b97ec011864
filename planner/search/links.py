"""The links of a layout's placement, as the search's fast scores and bounds read them: each stage's
data-parallel ring and, per kind of lane (replica r of every stage), each boundary's transfer, from
planner.placement.Links at the placement planner.cost.evaluate uses (place_structure of the layout's
stage structure)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from planner.comm import p2p_s
from planner.placement import Links, network_bw, place_structure
from planner.search.space import Group, Layout
from planner.types import Cluster


class LayoutLinker:
    """LinkFigures of layouts on one cluster, cached per layout and per chain run."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._cache: dict = {}

    def links(self, layout: Layout, activation_bytes: float) -> LayoutLinks:
        """figures(layout).at(activation_bytes), cached: the scorers of several engines on one cluster share
        a linker (planner.search.score), and jobs of one model and sequence length the same sizes."""
        key = ("at", layout, activation_bytes)
        if key not in self._cache:
            self._cache[key] = self.figures(layout).at(activation_bytes)
        return self._cache[key]

    def figures(self, layout: Layout) -> LinkFigures:
        """LinkFigures of the layout. A chain's runs are placed one at a time and cached: each run
        is its pool's only user and placement packs a pool's replicas in stage order, so a run's
        nodes are the same in every pool order; the junctions between runs join different pools
        (different nodes), whose figures need only each side's node load (Links.busy)."""
        if layout in self._cache:
            return self._cache[layout][1]
        runs = _runs(layout)
        if layout.family == "mixed" or len(runs) == 1:
            structure = tuple(tuple((g.pool, g.tp) for g in groups for _ in range(g.count))
                              for groups in layout.stages)
            links = Links(self.cluster, structure, place_structure(self.cluster, structure), 0.0)
            lanes = _lane_links(links, layout.num_stages)
            self._cache[layout] = (links, LinkFigures.of(links, layout, lanes), lanes)
            return self._cache[layout][1]
        parts = []
        for groups, count in runs:
            run = Layout("chain", (groups,) * count)
            self.figures(run)
            parts.append(self._cache[run])
        dp = tuple(ring for _, figures, _ in parts for ring in figures.dp)
        joints = [self._junction(runs[k], runs[k + 1]) for k in range(len(runs) - 1)]
        wrap = self._junction(runs[-1], runs[0])
        lanes = []
        for r in range(len(parts[0][2])):
            forward, backward = [], []
            for k, (_, _, run_lanes) in enumerate(parts):
                forward += run_lanes[r][0]
                backward += run_lanes[r][1]
                if k < len(joints):
                    forward.append(joints[k][0][r])
                    backward.append(joints[k][1][r])
            lanes.append((tuple(forward), tuple(backward), wrap[0][r], wrap[1][r]))
        figures = LinkFigures(dp, _distinct_lanes(layout, lanes))
        self._cache[layout] = (None, figures, None)
        return figures

    def _junction(self, run_a, run_b) -> tuple[tuple, tuple]:
        """Per lane r, the (bandwidth, latency) from the last stage of chain run `run_a` to the
        first of `run_b`, forward and backward (different pools, so different nodes:
        placement.network_bw)."""
        key = ("junction", run_a, run_b)
        if key not in self._cache:
            a = self._cache[Layout("chain", (run_a[0],) * run_a[1])][0]
            b = self._cache[Layout("chain", (run_b[0],) * run_b[1])][0]
            i, i2 = len(a.structure) - 1, 0
            forward, backward = [], []
            n, n2 = len(a.structure[i]), len(b.structure[i2])
            for r in range(max(n, n2)):
                ra, rb = r % n, r % n2
                tp = min(a.structure[i][ra][1], b.structure[i2][rb][1])
                pa, pb = a.pool_of(i, ra), b.pool_of(i2, rb)
                forward.append(network_bw(self.cluster, pa, a.busy(i, ra), tp, pb, b.busy(i2, rb), tp))
                backward.append(network_bw(self.cluster, pb, b.busy(i2, rb), tp, pa, a.busy(i, ra), tp))
            self._cache[key] = (tuple(forward), tuple(backward))
        return self._cache[key]


@dataclass(frozen=True)
class Lane:
    """One kind of lane for one activation size: replicas of replica group `group` (its index in
    a stage with several groups; 0 in stages of one), and each boundary's forward (stage i to
    i + 1) and backward transfer between the lane's replicas, and the wrap's round trip."""
    group: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    wrap: float

    # the fast score reads these for every candidate of the layout: each computed once (cached_property
    # writes the instance's __dict__, which a frozen dataclass allows; equality and hashing read the fields)
    @cached_property
    def round_trip(self) -> tuple[float, ...]:
        return tuple(f + b for f, b in zip(self.forward, self.backward))


@dataclass(frozen=True)
class LayoutLinks:
    """A layout's links as the fast score uses them for one activation size: per stage the
    data-parallel ring's (bandwidth, latency), and the distinct kinds of lane (replica r of every
    stage: the layouts' stages form lanes, as planner.schedule simulates them)."""
    dp: tuple[tuple[float, float], ...]
    lanes: tuple[Lane, ...]

    @cached_property
    def backward(self) -> tuple[float, ...]:
        """Each boundary's slowest backward transfer."""
        return tuple(max(x) for x in zip(*(lane.backward for lane in self.lanes)))

    @cached_property
    def fastest_round_trip(self) -> tuple[float, ...]:
        """Each boundary's fastest round trip over the lanes."""
        return tuple(min(x) for x in zip(*(lane.round_trip for lane in self.lanes)))

    @cached_property
    def fastest_wrap(self) -> float:
        return min(lane.wrap for lane in self.lanes)

    @cached_property
    def least_round_trips_s(self) -> float:
        """The fewest seconds any lane spends in transfers, one round trip across every boundary."""
        return min(sum(lane.round_trip) for lane in self.lanes)


class LaneLinkFigures(NamedTuple):
    """One kind of lane's links: its replica group, each boundary's forward and backward (bandwidth,
    latency), and the wrap's (from the last stage to the first and back; None in one-stage layouts)."""
    group: int
    forward: tuple[tuple[float, float], ...]
    backward: tuple[tuple[float, float], ...]
    wrap_forward: tuple[float, float] | None
    wrap_backward: tuple[float, float] | None


@dataclass(frozen=True)
class LinkFigures:
    """A layout's placement's link figures, independent of the activation size: each stage's ring,
    and the distinct kinds of lane."""
    dp: tuple[tuple[float, float], ...]
    lanes: tuple[LaneLinkFigures, ...]

    @staticmethod
    def of(links: Links, layout: Layout, lanes: list | None = None) -> "LinkFigures":
        lanes = _lane_links(links, layout.num_stages) if lanes is None else lanes
        return LinkFigures(tuple(links.dp_group(i) for i in range(layout.num_stages)), _distinct_lanes(layout, lanes))

    def at(self, activation_bytes: float) -> LayoutLinks:
        def seconds(link) -> float:
            return p2p_s(activation_bytes, *link) if link is not None else 0.0
        return LayoutLinks(self.dp, tuple(
            Lane(group, tuple(seconds(x) for x in forward), tuple(seconds(x) for x in backward),
                 seconds(wrap_f) + seconds(wrap_b))
            for group, forward, backward, wrap_f, wrap_b in self.lanes))


def _lane_links(links: Links, num_stages: int) -> list:
    """Per lane r: (forward, backward (bandwidth, latency) per boundary, wrap forward, wrap backward)."""
    count = len(links.structure[0])
    out = []
    for r in range(count):
        forward = tuple(links.p2p_link(i, r, i + 1, r) for i in range(num_stages - 1))
        backward = tuple(links.p2p_link(i + 1, r, i, r) for i in range(num_stages - 1))
        last = num_stages - 1
        wrap = (links.p2p_link(last, r, 0, r), links.p2p_link(0, r, last, r)) if num_stages > 1 else (None, None)
        out.append((forward, backward) + wrap)
    return out


def _distinct_lanes(layout: Layout, lanes: list) -> tuple:
    """The distinct (group, links) among the lanes, in lane order: a lane's group is that of its
    replica in a stage of several groups (groups expanded in order), 0 in chains."""
    groups = [k for k, g in enumerate(layout.stages[0]) for _ in range(g.count)] if len(layout.stages[0]) > 1 else None
    seen, out = set(), []
    for r, lane in enumerate(lanes):
        entry = LaneLinkFigures(groups[r] if groups else 0, *lane)
        if entry not in seen:
            seen.add(entry)
            out.append(entry)
    return tuple(out)


def _runs(layout: Layout) -> list[tuple[tuple[Group, ...], int]]:
    """The layout's stages as runs of consecutive stages with the same replica groups."""
    runs: list = []
    for groups in layout.stages:
        if runs and runs[-1][0] == groups:
            runs[-1] = (groups, runs[-1][1] + 1)
        else:
            runs.append((groups, 1))
    return runs
