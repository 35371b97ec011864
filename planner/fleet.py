"""Sharing one cluster among several training jobs (`hetplan fleet`).

A job's candidate allocations are shares of pools: whole nodes on a halving grid of a pool (all of its
nodes, a half, a quarter ...), over at most `max_pools_per_job` pools, or part of one node, g/2, g/4 ...
of its g GPUs (whole GPUs only), as Kubernetes and Slurm hand out GPUs of a node, so that small jobs
share a node. Candidates are taken spread over sizes, largest first (see `allocation_grid`), up to
`max_candidates` that have a plan. hetplan's search plans the job on each candidate's sub-cluster
(the chosen nodes, or one node of the chosen GPUs; pool names kept, so the plan is valid on the whole
cluster too) and its throughput is what planner.cost.evaluate predicts for that plan. A mixed-integer
program then picks one candidate (or none) per job under a policy:

  throughput   maximum total weighted normalised throughput
  max-min      max-min fairness over normalised throughputs / weights (Gavel, OSDI'20, section 4.2:
               throughput normalised by the job's best, so a GPU type is valued per job)
  min-cost     minimum dollars to finish every job, each within its deadline_hours
  finish-time  finish-time fairness: minimum over allocations of the largest ratio of a job's time
               to finish to its time on its best allocation alone (Themis, NSDI'20, rho)

Normalised throughput of job j on candidate c: n[j,c] = tokens/s on c / the job's best tokens/s
over its candidates (the whole cluster among them when it has at most `max_pools_per_job` pools).
Every policy first schedules as many jobs as can run at once, then optimises its objective; a job
left out is reported with the reason; `place` puts the chosen shares on concrete nodes and GPUs.

Plans are cached by (sub-cluster, job without its tokens, search limit): jobs of the same model, batch,
sequence length and settings share their searches, whatever their names, tokens, deadlines or weights.
The search's limit is CPU time of the searching thread (planner.search.planners.Clock), so other load
on the machine does not change a plan, and neither do `workers` (the searches then run in that many
processes, each with its own clock); a limit does make plans depend on the CPU's speed. With
`search_time_limit_s=None` every search runs to completion and the whole answer is deterministic.
"""
from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, replace
from itertools import combinations, product
from typing import Iterator

import pulp

from planner.cost import evaluate
from planner.engines import REAL, get as engine_profile
from planner.search import SearchOptions, search
from planner.types import Cluster, Estimate, FleetJob, InputError, Job, Objective, Plan
from planner.workers import stop_pool, worker_pool

TIE_SLACK = 1e-6                # an earlier objective may lose this share of its optimum to a later one
PARALLEL_AFTER_S = 2.0          # CPU seconds of searches in this process before more run in worker processes
                                # (each costs about a second to start: it imports the planner)


class Policy(str, enum.Enum):
    THROUGHPUT = "throughput"
    MAX_MIN = "max-min"
    MIN_COST = "min-cost"
    FINISH_TIME = "finish-time"


@dataclass(frozen=True)
class FleetOptions:
    max_pools_per_job: int = 2
    max_halvings: int = 3                  # node counts: all, 1/2, 1/4, 1/8 of a pool; parts of a node: g/2 ... g/8
    max_candidates: int = 16               # per job: candidates with a plan, spread over sizes
    search_time_limit_s: float | None = 1.0   # CPU seconds of hetplan's search per candidate; None: complete
    solve_time_limit_s: float = 30.0       # CBC, per stage of the program
    workers: int = 1                       # processes that plan candidates; the plans do not depend on it
    engines: tuple[str, ...] = REAL        # each candidate planned for the best of these engines (one: that one)

    def __post_init__(self):
        if not (isinstance(self.engines, tuple) and self.engines):
            raise InputError("engines", f"must name at least one engine, got {self.engines!r}")
        for name in self.engines:
            engine_profile(name, "engines")
        for name in ("max_pools_per_job", "max_candidates", "workers"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise InputError(name, f"must be a whole number of at least 1, got {value!r}")
        if not (isinstance(self.max_halvings, int) and self.max_halvings >= 0):
            raise InputError("max_halvings", f"must be a whole number of at least 0, got {self.max_halvings!r}")
        limit = self.search_time_limit_s
        if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0):
            raise InputError("search_time_limit_s", f"must be a positive number of seconds (or None: no limit), "
                                                    f"got {limit!r}")


@dataclass(frozen=True)
class Share:
    """`nodes` nodes of `pool`, `gpus_per_node` GPUs of each: whole nodes (the pool's gpus_per_node),
    or part of one node (nodes == 1, a pool's gpus_per_node / 2^k GPUs)."""
    pool: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class NodeSlice:
    """Where a share lies: nodes first_node .. first_node + nodes - 1 of `pool` (numbered from 0),
    GPUs first_gpu .. first_gpu + gpus_per_node - 1 of each; `whole`: every GPU of those nodes."""
    pool: str
    first_node: int
    nodes: int
    first_gpu: int
    gpus_per_node: int
    whole: bool

    @property
    def node_ids(self) -> list[int]:
        return list(range(self.first_node, self.first_node + self.nodes))

    @property
    def gpu_ids(self) -> list[int]:
        return list(range(self.first_gpu, self.first_gpu + self.gpus_per_node))

    def describe(self) -> str:
        """`a100 nodes 0-3` for whole nodes, `a100 node 2, GPUs 4-5` for part of one."""
        last_node, last_gpu = self.first_node + self.nodes - 1, self.first_gpu + self.gpus_per_node - 1
        nodes = f"node {last_node}" if self.nodes == 1 else f"nodes {self.first_node}-{last_node}"
        if self.whole:
            return f"{self.pool} {nodes}"
        return f"{self.pool} {nodes}, " + (f"GPU {last_gpu}" if self.gpus_per_node == 1 else
                                           f"GPUs {self.first_gpu}-{last_gpu}")


@dataclass(frozen=True)
class Candidate:
    shares: tuple[Share, ...]              # at most one per pool
    plan: Plan
    estimate: Estimate                     # on the candidate's sub-cluster, with the job's tokens
    price_per_hour_usd: float              # every GPU of the allocation (held whether the plan uses it or not)

    @property
    def gpus_by_pool(self) -> dict[str, int]:
        return {s.pool: s.gpus for s in self.shares}

    @property
    def nodes_by_pool(self) -> dict[str, int]:
        """The nodes the job's GPUs lie on (part of a node counts as its node)."""
        return {s.pool: s.nodes for s in self.shares}

    def hours_to_finish(self, tokens: float | None) -> float | None:
        return None if tokens is None else tokens / self.estimate.tokens_per_s / 3600

    def dollars_to_finish(self, tokens: float | None) -> float | None:
        hours = self.hours_to_finish(tokens)
        return None if hours is None else hours * self.price_per_hour_usd


@dataclass(frozen=True)
class Allocation:
    job: FleetJob
    candidate: Candidate
    estimate: Estimate                     # planner.cost.evaluate of the plan on its allocation
    normalised_throughput: float
    gpus: dict[str, int]                   # pool -> GPUs held
    placement: tuple[NodeSlice, ...]       # which nodes and GPUs, one slice per share


@dataclass(frozen=True)
class FleetResult:
    policy: Policy
    allocations: tuple[Allocation, ...]
    unscheduled: dict[str, str]            # job name -> why it does not run
    idle_nodes: dict[str, int]             # pool -> nodes of which no job holds a GPU
    idle_gpus: dict[str, int]              # pool -> GPUs no job holds
    idle_reasons: dict[str, str]
    solve_time_s: float                    # wall seconds of the program (every stage)
    plan_time_s: float                     # wall seconds of the searches of candidates not already cached
    searches: int = 0                      # searches run (not cached); jobs alike share theirs


# ----------------------------------------------------------------------------- candidates

def node_grid(nodes: int, max_halvings: int) -> list[int]:
    """Whole-node counts: all, half, a quarter ... of `nodes` (at least one), largest first."""
    counts = []
    for k in range(max_halvings + 1):
        n = nodes // 2**k
        if n >= 1 and n not in counts:
            counts.append(n)
    return counts


def node_parts(gpus_per_node: int, max_halvings: int) -> list[int]:
    """Parts of one node: a half, a quarter ... of its GPUs while that is whole GPUs, largest first.
    Each divides the node and every larger part (the chain `solve`'s packing argument needs)."""
    return [gpus_per_node // 2**k for k in range(1, max_halvings + 1) if gpus_per_node % 2**k == 0]


def _every_allocation(cluster: Cluster, options: FleetOptions) -> list[tuple[Share, ...]]:
    """Whole nodes of one pool, part of one node, and whole nodes of 2 .. max_pools_per_job pools."""
    whole = {p.name: [Share(p.name, n, p.gpus_per_node) for n in node_grid(p.nodes, options.max_halvings)]
             for p in cluster.pools}
    every = [(s,) for p in cluster.pools for s in whole[p.name]]
    every += [(Share(p.name, 1, g),) for p in cluster.pools
              for g in node_parts(p.gpus_per_node, options.max_halvings)]
    for k in range(2, min(options.max_pools_per_job, len(cluster.pools)) + 1):
        for names in combinations([p.name for p in cluster.pools], k):
            every += list(product(*(whole[n] for n in names)))
    return every


def allocation_grid(cluster: Cluster, options: FleetOptions) -> Iterator[tuple[Share, ...]]:
    """Every candidate allocation once, spread over sizes: grouped by GPUs in halvings of the largest
    (log2(largest / GPUs), rounded), one from each group in turn, largest group first; within a group
    the largest shares of their pools first (fewest halvings in all), then more pools, then by first
    pool, counted from pool g in group g, so that one turn draws on different pools. So a job's first
    candidates range from the whole cluster (or its best pools) down to a part of one node, over every
    pool, and a fleet of many jobs finds room for each."""
    every = _every_allocation(cluster, options)
    pool_gpus = {p.name: p.num_gpus for p in cluster.pools}
    gpus = {a: sum(s.gpus for s in a) for a in every}
    halvings = {a: sum(round(math.log2(pool_gpus[s.pool] / s.gpus)) for s in a) for a in every}
    order = {p.name: i for i, p in enumerate(cluster.pools)}
    top = max(gpus.values())
    groups: dict[int, list] = {}
    for a in every:
        groups.setdefault(round(math.log2(top / gpus[a])), []).append(a)
    queues = [sorted(groups[g], key=lambda a: (halvings[a], -len(a), (order[a[0].pool] - g) % len(order),
                                               -gpus[a])) for g in sorted(groups)]
    for turn in range(max(map(len, queues))):
        yield from (q[turn] for q in queues if turn < len(q))


def sub_cluster(cluster: Cluster, shares: tuple[Share, ...]) -> Cluster:
    """The chosen nodes of each pool, or the chosen GPUs of one node, pool names kept. A part of a node
    keeps its share of the node's CPU memory (which offloading plans use)."""
    want = {s.pool: s for s in shares}
    pools = tuple(replace(p, nodes=want[p.name].nodes, gpus_per_node=want[p.name].gpus_per_node,
                          host_mem_bytes=p.host_mem_bytes * want[p.name].gpus_per_node / p.gpus_per_node)
                  for p in cluster.pools if p.name in want)
    return replace(cluster, pools=pools)


def plan_on(key: tuple[Cluster, Job, float | None, tuple[str, ...]]) -> Plan | str:
    """The best-throughput plan of hetplan's search on (sub-cluster, job, CPU seconds, engines), or why
    there is none: for the best of the engines, each with its share of the CPU seconds (planner.search)."""
    sub, job, limit, engines = key
    try:
        result = search(sub, replace(job, engine=engines[0]), Objective.THROUGHPUT, top_k=1, baselines=False,
                        options=SearchOptions(time_limit_s=limit, baseline_time_limit_s=None),
                        engines=engines if len(engines) > 1 else None)
    except InputError as e:
        return e.message
    return result.plans[0].plan


def _search_key(cluster: Cluster, job: FleetJob, shares: tuple[Share, ...], options: FleetOptions) -> tuple:
    """What a search depends on: not the job's name, tokens, deadline or weight."""
    return (sub_cluster(cluster, shares), Job(job.model, job.global_batch, job.seq_len), options.search_time_limit_s,
            options.engines)


class _Searches:
    """plan_on over keys: in this process until the searches have taken PARALLEL_AFTER_S CPU seconds
    (a small cluster's take a tenth of a second each; starting processes would not pay), then in
    `workers` processes, kept until `close`. Each search's clock is its own thread's CPU time, so
    the plans are the same either way."""

    def __init__(self, workers: int):
        self.workers, self.pool, self.spent_s = workers, None, 0.0

    def run(self, keys: list[tuple]) -> list[Plan | str]:
        out = []
        for i, key in enumerate(keys):
            if (self.pool is None and self.workers > 1 and self.spent_s >= PARALLEL_AFTER_S
                    and len(keys) - i >= 2 * self.workers):
                self.pool = worker_pool(self.workers)
            if self.pool is not None:
                return out + list(self.pool.map(plan_on, keys[i:]))
            start = time.process_time()
            out.append(plan_on(key))
            self.spent_s += time.process_time() - start
        return out

    def close(self, stop: bool = False) -> None:
        """Wait for the workers to finish, or with `stop` (an exception or a signal is on its way
        out) end them now."""
        if self.pool is not None:
            stop_pool(self.pool) if stop else self.pool.shutdown()


def _candidate(cluster: Cluster, job: FleetJob, shares: tuple[Share, ...], plan: Plan) -> Candidate:
    sub = sub_cluster(cluster, shares)
    price = sum(p.num_gpus * p.price_per_gpu_hour_usd for p in sub.pools)
    return Candidate(shares, plan, evaluate(sub, plan, tokens_to_train=job.tokens), price)


# A job tries at most this many grid entries per candidate it wants (max_candidates): a job that fits few
# allocations of a large cluster (64 pools give ~100,000 entries) would otherwise search them all, each
# for --time-limit, and the fleet's planning would have no bound but the grid's size (issue 24).
TRIES_PER_CANDIDATE = 4


def fleet_candidates(cluster: Cluster, jobs: tuple[FleetJob, ...], options: FleetOptions,
                     cache: dict) -> tuple[list[list[Candidate]], list[list[str]], int]:
    """Each job's candidates, the first `max_candidates` of allocation_grid's order that have a plan
    among its first TRIES_PER_CANDIDATE x max_candidates, why the others tried have none, and the
    searches run (at most that many per job). In rounds: each job asks for as many more grid entries
    as it lacks candidates, and the round's searches not in `cache` run together."""
    grid = list(allocation_grid(cluster, options))
    found: list[list[Candidate]] = [[] for _ in jobs]
    why: list[list[str]] = [[] for _ in jobs]
    tried, searches, runner = [0] * len(jobs), 0, _Searches(options.workers)
    most = TRIES_PER_CANDIDATE * options.max_candidates
    try:
        while any(asks := [grid[tried[j]:min(most, tried[j] + options.max_candidates - len(found[j]))]
                           for j in range(len(jobs))]):
            keys = {(j, a): _search_key(cluster, jobs[j], a, options) for j in range(len(jobs)) for a in asks[j]}
            todo = list(dict.fromkeys(k for k in keys.values() if k not in cache))
            cache.update(zip(todo, runner.run(todo)))
            searches += len(todo)
            for (j, shares), key in keys.items():
                tried[j] += 1
                if isinstance(cache[key], str):
                    why[j].append(cache[key])
                    continue
                if (key, jobs[j].tokens) not in cache:
                    cache[key, jobs[j].tokens] = _candidate(cluster, jobs[j], shares, cache[key])
                found[j].append(cache[key, jobs[j].tokens])
        return found, why, searches
    except BaseException:
        runner.close(stop=True)
        raise
    finally:
        runner.close()


def job_candidates(cluster: Cluster, job: FleetJob, options: FleetOptions,
                   cache: dict) -> tuple[list[Candidate], list[str]]:
    """One job's candidates and why the others tried have none (fleet_candidates of that job alone)."""
    found, why, _ = fleet_candidates(cluster, (job,), options, cache)
    return found[0], why[0]


# ----------------------------------------------------------------------------- the program

def _solver(options: FleetOptions):
    return pulp.PULP_CBC_CMD(msg=False, timeLimit=options.solve_time_limit_s)


def _solve_lexicographic(prob: pulp.LpProblem, objectives: list[tuple[str, object, int]],
                         options: FleetOptions) -> None:
    """Optimise each (name, expression, sense) in turn, holding each earlier one at its optimum
    (less TIE_SLACK of it)."""
    for i, (name, expr, sense) in enumerate(objectives):
        prob.sense = sense
        prob.setObjective(expr)
        status = prob.solve(_solver(options))
        if pulp.LpStatus[status] != "Optimal":
            raise InputError("policy", f"the program found no allocation ({pulp.LpStatus[status]} at {name})")
        best = pulp.value(expr) or 0.0
        slack = TIE_SLACK * max(1.0, abs(best))
        if sense == pulp.LpMaximize:
            prob += expr >= best - slack, f"hold_{i}_{name}"
        else:
            prob += expr <= best + slack, f"hold_{i}_{name}"


def solve(cluster: Cluster, jobs: tuple[FleetJob, ...], candidates: list[list[Candidate]],
          policy: Policy, options: FleetOptions) -> list[int | None]:
    """The chosen candidate of each job (None: not scheduled).

    Sets: jobs j, candidates c of j, pools p. Data: gpus[j,c,p], normalised throughput n[j,c] in (0, 1],
    weight w[j], time ratio rho[j,c] = 1 / n[j,c], dollars d[j,c] = price[j,c] * tokens[j] / tokens_per_s[j,c].
    Variables: x[j,c] in {0,1}; s[j] = sum_c x[j,c] (job j runs).

      (c1) sum_c x[j,c] <= 1                                     each job one candidate or none
      (c2) sum_j sum_c x[j,c] * gpus[j,c,p] <= nodes[p] * g[p]   for every pool p of nodes of g GPUs
      (c3) min-cost: x[j,c] = 0 where hours[j,c] > deadline[j]   deadlines met
    Stage 1, every policy: maximise sum_j s[j] (as many jobs as run at once). Stage 2, held at stage 1's optimum:
      throughput:  maximise sum_j w[j] * sum_c n[j,c] x[j,c]
      max-min:     maximise t,  (c4) t <= sum_c n[j,c] x[j,c] / w[j] + (1 - s[j]) * U,  U = max_j 1 / w[j]
      min-cost:    minimise sum_j sum_c d[j,c] x[j,c]
      finish-time: minimise r,  (c5) r >= sum_c rho[j,c] x[j,c] - (1 - s[j]) * R,      R = max rho
    Stage 3 (max-min, finish-time), held at stage 2's optimum: maximise sum_j w[j] sum_c n[j,c] x[j,c]
    so that the spare GPUs go to some use. U and R switch (c4), (c5) off for a job that does not run.

    Why counting GPUs in (c2) is enough for the shares to lie on distinct nodes and GPUs: a share of whole
    nodes takes n * g GPUs, a part of a node g / 2^k (k >= 1). With W the whole nodes taken and F the GPUs
    in parts, (c2) reads W g + F <= N g, so W <= N and F <= (N - W) g. Put the whole shares on W nodes,
    then the parts, largest first, each at the first free GPU of the first node with room. The part sizes
    g/2, g/4 ... each divide g and every larger part, so when a part of s GPUs is placed the GPUs taken on
    the current node are a sum of multiples of s, hence a multiple of s, and the room left (g minus that,
    also a multiple of s) is either none or at least s. So each node is filled to its last GPU before the
    next is opened, and the parts need ceil(F / g) <= N - W nodes; each part also starts at a multiple of
    its size (buddy allocation). `place` does exactly this.
    """
    prob = pulp.LpProblem("fleet", pulp.LpMaximize)
    x = {(j, c): pulp.LpVariable(f"x_{j}_{c}", cat="Binary")
         for j in range(len(jobs)) for c in range(len(candidates[j]))}
    best = [max((k.estimate.tokens_per_s for k in candidates[j]), default=1.0) for j in range(len(jobs))]
    norm = {(j, c): candidates[j][c].estimate.tokens_per_s / best[j] for (j, c) in x}
    runs = {j: pulp.lpSum(x[j, c] for c in range(len(candidates[j]))) for j in range(len(jobs))}
    for j in range(len(jobs)):
        prob += runs[j] <= 1, f"c1_one_candidate_{j}"
    for p in cluster.pools:
        prob += pulp.lpSum(x[j, c] * candidates[j][c].gpus_by_pool.get(p.name, 0) for (j, c) in x) <= p.num_gpus, \
            f"c2_pool_{p.name}"
    if policy == Policy.MIN_COST:
        for (j, c) in x:
            hours = candidates[j][c].hours_to_finish(jobs[j].tokens)
            if jobs[j].deadline_hours is not None and hours > jobs[j].deadline_hours:
                prob += x[j, c] == 0, f"c3_deadline_{j}_{c}"
    weighted = pulp.lpSum(jobs[j].weight * norm[j, c] * x[j, c] for (j, c) in x)
    stages = [("jobs_run", pulp.lpSum(runs.values()), pulp.LpMaximize)]
    if policy == Policy.THROUGHPUT:
        stages.append(("throughput", weighted, pulp.LpMaximize))
    elif policy == Policy.MAX_MIN:
        t, big_u = pulp.LpVariable("t", lowBound=0), max(1 / jb.weight for jb in jobs)
        for j in range(len(jobs)):
            prob += t <= pulp.lpSum(norm[j, c] * x[j, c] for c in range(len(candidates[j]))) / jobs[j].weight \
                + (1 - runs[j]) * big_u, f"c4_min_{j}"
        stages += [("max_min", t, pulp.LpMaximize), ("throughput", weighted, pulp.LpMaximize)]
    elif policy == Policy.MIN_COST:
        dollars = pulp.lpSum(candidates[j][c].dollars_to_finish(jobs[j].tokens) * x[j, c] for (j, c) in x)
        stages.append(("dollars", dollars, pulp.LpMinimize))
    else:
        r, big_r = pulp.LpVariable("r", lowBound=0), max((1 / v for v in norm.values()), default=1.0)
        for j in range(len(jobs)):
            prob += r >= pulp.lpSum(x[j, c] / norm[j, c] for c in range(len(candidates[j]))) \
                - (1 - runs[j]) * big_r, f"c5_ratio_{j}"
        stages += [("finish_time", r, pulp.LpMinimize), ("throughput", weighted, pulp.LpMaximize)]
    _solve_lexicographic(prob, stages, options)
    return [next((c for c in range(len(candidates[j])) if (pulp.value(x[j, c]) or 0) > 0.5), None)
            for j in range(len(jobs))]


def place(cluster: Cluster, allocations: list[tuple[Share, ...]]) -> list[tuple[NodeSlice, ...]]:
    """Nodes and GPUs for each allocation's shares (the GPUs of each pool within it, as `solve`'s (c2)
    holds): per pool, whole nodes first in the allocations' order, then parts of nodes, largest first,
    each at the first free GPU of the first node with room (the packing `solve`'s docstring proves)."""
    slices: dict[tuple[int, int], NodeSlice] = {}
    for p in cluster.pools:
        mine = [(a, i, s) for a, shares in enumerate(allocations) for i, s in enumerate(shares) if s.pool == p.name]
        node = 0
        for a, i, s in mine:
            if s.gpus_per_node == p.gpus_per_node:
                slices[a, i], node = NodeSlice(p.name, node, s.nodes, 0, s.gpus_per_node, True), node + s.nodes
        taken = 0                                          # GPUs taken on `node`
        for a, i, s in sorted((e for e in mine if e[2].gpus_per_node < p.gpus_per_node),
                              key=lambda e: -e[2].gpus_per_node):
            if taken == p.gpus_per_node:
                node, taken = node + 1, 0
            assert taken % s.gpus_per_node == 0, f"part of {s.gpus_per_node} GPUs at GPU {taken} of {p.name}"
            slices[a, i] = NodeSlice(p.name, node, 1, taken, s.gpus_per_node, False)
            taken += s.gpus_per_node
        assert node + (0 < taken) <= p.nodes, f"{p.name}: the shares need more than {p.nodes} nodes"
    return [tuple(slices[a, i] for i in range(len(shares))) for a, shares in enumerate(allocations)]


# ----------------------------------------------------------------------------- the fleet

def _check_policy_inputs(jobs: tuple[FleetJob, ...], policy: Policy) -> None:
    if policy == Policy.MIN_COST:
        for i, jb in enumerate(jobs):
            if jb.tokens is None:
                raise InputError(f"jobs[{i}].tokens", f"job {jb.name!r}: the min-cost policy needs the tokens to "
                                                      f"train, to price each allocation (e.g. tokens: 1.0e+11)")


def plan_fleet(cluster: Cluster, jobs: tuple[FleetJob, ...], policy: Policy | str = Policy.THROUGHPUT,
               options: FleetOptions = FleetOptions(), cache: dict | None = None) -> FleetResult:
    """Allocate `cluster` to `jobs` under `policy`; see the module's docstring."""
    try:
        policy = Policy(policy)
    except ValueError:
        raise InputError("--policy", f"unknown policy {policy!r}; choose one of "
                                     f"{[p.value for p in Policy]}") from None
    if not jobs:
        raise InputError("jobs", "the fleet has no jobs")
    _check_policy_inputs(jobs, policy)
    cache = {} if cache is None else cache
    start = time.perf_counter()
    candidates, why_not, searches = fleet_candidates(cluster, jobs, options, cache)
    plan_time = time.perf_counter() - start
    start = time.perf_counter()
    chosen = solve(cluster, jobs, candidates, policy, options)
    solve_time = time.perf_counter() - start
    result = _result(cluster, jobs, candidates, why_not, chosen, policy)
    return replace(result, solve_time_s=solve_time, plan_time_s=plan_time, searches=searches)


def _result(cluster, jobs, candidates, why_not, chosen, policy) -> FleetResult:
    running = [j for j in range(len(jobs)) if chosen[j] is not None]
    picked = [candidates[j][chosen[j]] for j in running]
    allocations = []
    for j, cand, slices in zip(running, picked, place(cluster, [k.shares for k in picked])):
        est = cand.estimate          # evaluate(sub_cluster(cluster, cand.shares), cand.plan, job's tokens): _candidate
        best = max(k.estimate.tokens_per_s for k in candidates[j])
        allocations.append(Allocation(jobs[j], cand, est, est.tokens_per_s / best, cand.gpus_by_pool, slices))
    unscheduled = {jobs[j].name: _why_unscheduled(jobs[j], candidates[j], why_not[j], policy)
                   for j in range(len(jobs)) if chosen[j] is None}
    held = {p.name: sum(a.gpus.get(p.name, 0) for a in allocations) for p in cluster.pools}
    touched = {p.name: {n for a in allocations for s in a.placement if s.pool == p.name for n in s.node_ids}
               for p in cluster.pools}
    idle_gpus = {p.name: p.num_gpus - held[p.name] for p in cluster.pools if p.num_gpus > held[p.name]}
    idle_nodes = {name: cluster.pool(name).nodes - len(touched[name]) for name in idle_gpus}
    return FleetResult(policy, tuple(allocations), unscheduled, idle_nodes, idle_gpus,
                       _idle_reasons(idle_gpus, candidates, policy), 0.0, 0.0)


def _why_unscheduled(job: FleetJob, candidates: list[Candidate], why_not: list[str], policy: Policy) -> str:
    if not candidates:
        return (f"no plan fits any candidate allocation ({len(why_not)} tried): "
                f"{why_not[0] if why_not else 'no candidates'}")
    if policy == Policy.MIN_COST and job.deadline_hours is not None:
        fastest = min(k.hours_to_finish(job.tokens) for k in candidates)
        if fastest > job.deadline_hours:
            return f"no allocation meets its deadline of {job.deadline_hours:g} h (fastest: {fastest:.1f} h alone)"
    return "the other jobs' allocations leave none of its candidate allocations room (more jobs cannot run at once)"


def _idle_reasons(idle: dict[str, int], candidates: list[list[Candidate]], policy: Policy) -> dict[str, str]:
    usable = {s.pool for cands in candidates for k in cands for s in k.shares}
    out = {}
    for name in idle:
        if name not in usable:
            out[name] = "no job has a plan that runs on this pool (memory, precision or node count)"
        else:
            out[name] = (f"no job's candidate allocation (whole nodes on a halving grid, or a half, a quarter ... "
                         f"of one node) that also takes these GPUs scores better under the {policy.value} policy")
    return out
