"""Sharing one cluster among several training jobs (`hetplan fleet`).

Each job gets whole nodes. Its candidate allocations are node counts on a halving grid of each
pool (all of its nodes, a half, a quarter ...), over at most `max_pools_per_job` pools; hetplan's
search plans the job on each candidate's sub-cluster (the chosen nodes, pool names kept, so the
plan is valid on the whole cluster too) and its throughput is what planner.cost.evaluate predicts
for that plan. A mixed-integer program then picks one candidate (or none) per job under a policy:

  throughput   maximum total weighted normalised throughput
  max-min      max-min fairness over normalised throughputs / weights (Gavel, OSDI'20, section 4.2:
               throughput normalised by the job's best, so a GPU type is valued per job)
  min-cost     minimum dollars to finish every job, each within its deadline_hours
  finish-time  finish-time fairness: minimum over allocations of the largest ratio of a job's time
               to finish to its time on its best allocation alone (Themis, NSDI'20, rho)

Normalised throughput of job j on candidate c: n[j,c] = tokens/s on c / the job's best tokens/s
over its candidates (the whole cluster among them when it has at most `max_pools_per_job` pools).
Every policy first schedules as many jobs as can run at once, then optimises its objective; a job
left out is reported with the reason. Candidates' plans are cached by (job, allocation).
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
from planner.search import SearchOptions, search
from planner.types import Cluster, Estimate, InputError, Job, Model, Objective, Plan

TIE_SLACK = 1e-6                # an earlier objective may lose this share of its optimum to a later one


class Policy(str, enum.Enum):
    THROUGHPUT = "throughput"
    MAX_MIN = "max-min"
    MIN_COST = "min-cost"
    FINISH_TIME = "finish-time"


@dataclass(frozen=True)
class FleetJob:
    name: str
    model: Model
    global_batch: int
    seq_len: int
    tokens: float | None = None           # tokens to train; needed for time and dollars to finish
    deadline_hours: float | None = None   # min-cost: finish within this
    weight: float = 1.0

    def __post_init__(self):
        self.job()                        # Job validates batch, sequence length and tokens
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight > 0):
            raise InputError("weight", f"must be a positive number, got {self.weight!r}")
        if self.deadline_hours is not None and not (math.isfinite(self.deadline_hours) and self.deadline_hours > 0):
            raise InputError("deadline_hours", f"must be a positive number of hours, got {self.deadline_hours!r}")

    def job(self) -> Job:
        return Job(self.model, self.global_batch, self.seq_len, tokens_to_train=self.tokens)


@dataclass(frozen=True)
class FleetOptions:
    max_pools_per_job: int = 2
    max_halvings: int = 3                  # node counts: all, 1/2, 1/4, 1/8 of a pool
    max_candidates: int = 16               # per job, fewest pools and largest shares first
    search_time_limit_s: float = 2.0       # CPU seconds of hetplan's search per candidate
    solve_time_limit_s: float = 30.0       # CBC, per stage of the program


@dataclass(frozen=True)
class Candidate:
    nodes: tuple[tuple[str, int], ...]     # (pool, nodes) with nodes > 0
    plan: Plan
    estimate: Estimate                     # on the candidate's sub-cluster, with the job's tokens
    price_per_hour_usd: float              # every GPU of the allocation (whole nodes are held)

    @property
    def nodes_by_pool(self) -> dict[str, int]:
        return dict(self.nodes)

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
    gpus: dict[str, int]                   # pool -> GPUs held (whole nodes)


@dataclass(frozen=True)
class FleetResult:
    policy: Policy
    allocations: tuple[Allocation, ...]
    unscheduled: dict[str, str]            # job name -> why it does not run
    idle_nodes: dict[str, int]             # pool -> nodes no job holds
    idle_gpus: dict[str, int]              # the same in GPUs
    idle_reasons: dict[str, str]
    solve_time_s: float
    plan_time_s: float                     # the searches of candidates not already cached


# ----------------------------------------------------------------------------- candidates

def node_grid(nodes: int, max_halvings: int) -> list[int]:
    """Whole-node counts: all, half, a quarter ... of `nodes` (at least one), largest first."""
    counts = []
    for k in range(max_halvings + 1):
        n = nodes // 2**k
        if n >= 1 and n not in counts:
            counts.append(n)
    return counts


def allocation_grid(cluster: Cluster, options: FleetOptions) -> Iterator[tuple[tuple[str, int], ...]]:
    """Candidate allocations, fewest pools and largest shares first, at most `max_candidates`."""
    grids = {p.name: node_grid(p.nodes, options.max_halvings) for p in cluster.pools}
    every = []
    for k in range(1, min(options.max_pools_per_job, len(cluster.pools)) + 1):
        for names in combinations([p.name for p in cluster.pools], k):
            for levels in product(*(range(len(grids[n])) for n in names)):
                every.append((sum(levels), k, tuple((n, grids[n][lv]) for n, lv in zip(names, levels))))
    every.sort(key=lambda e: (e[0], -e[1]))   # largest shares first; at a share, more pools first
    yield from (alloc for _, _, alloc in every[:options.max_candidates])


def sub_cluster(cluster: Cluster, nodes: tuple[tuple[str, int], ...]) -> Cluster:
    """The chosen nodes of each pool, pool names kept."""
    want = dict(nodes)
    pools = tuple(replace(p, nodes=want[p.name]) for p in cluster.pools if want.get(p.name, 0) > 0)
    return replace(cluster, pools=pools)


def plan_candidate(cluster: Cluster, job: FleetJob, nodes: tuple[tuple[str, int], ...],
                   options: FleetOptions) -> Candidate | str:
    """The best-throughput plan on the allocation, or why there is none."""
    sub = sub_cluster(cluster, nodes)
    try:
        result = search(sub, job.job(), Objective.THROUGHPUT, top_k=1, baselines=False,
                        options=SearchOptions(time_limit_s=options.search_time_limit_s, baseline_time_limit_s=None))
    except InputError as e:
        return e.message
    best = result.plans[0]
    price = sum(p.num_gpus * p.price_per_gpu_hour_usd for p in sub.pools)
    return Candidate(nodes, best.plan, best.estimate, price)


def job_candidates(cluster: Cluster, job: FleetJob, options: FleetOptions,
                   cache: dict) -> tuple[list[Candidate], list[str]]:
    """A job's feasible candidates and why the others are not; `cache` maps (job, allocation) to either."""
    found, why = [], []
    for nodes in allocation_grid(cluster, options):
        key = (cluster, job, nodes, options.search_time_limit_s)
        if key not in cache:
            cache[key] = plan_candidate(cluster, job, nodes, options)
        (found if isinstance(cache[key], Candidate) else why).append(cache[key])
    return found, why


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

    Sets: jobs j, candidates c of j, pools p. Data: nodes[j,c,p], normalised throughput n[j,c] in (0, 1],
    weight w[j], time ratio rho[j,c] = 1 / n[j,c], dollars d[j,c] = price[j,c] * tokens[j] / tokens_per_s[j,c].
    Variables: x[j,c] in {0,1}; s[j] = sum_c x[j,c] (job j runs).

      (c1) sum_c x[j,c] <= 1                                     each job one candidate or none
      (c2) sum_j sum_c x[j,c] * nodes[j,c,p] <= nodes[p]         for every pool p: whole nodes, disjoint
      (c3) min-cost: x[j,c] = 0 where hours[j,c] > deadline[j]   deadlines met
    Stage 1, every policy: maximise sum_j s[j] (as many jobs as run at once). Stage 2, held at stage 1's optimum:
      throughput:  maximise sum_j w[j] * sum_c n[j,c] x[j,c]
      max-min:     maximise t,  (c4) t <= sum_c n[j,c] x[j,c] / w[j] + (1 - s[j]) * U,  U = max_j 1 / w[j]
      min-cost:    minimise sum_j sum_c d[j,c] x[j,c]
      finish-time: minimise r,  (c5) r >= sum_c rho[j,c] x[j,c] - (1 - s[j]) * R,      R = max rho
    Stage 3 (max-min, finish-time), held at stage 2's optimum: maximise sum_j w[j] sum_c n[j,c] x[j,c]
    so that the spare nodes go to some use. U and R switch (c4), (c5) off for a job that does not run.
    """
    prob = pulp.LpProblem("fleet", pulp.LpMaximize)
    x = {(j, c): pulp.LpVariable(f"x_{j}_{c}", cat="Binary") for j in range(len(jobs)) for c in range(len(candidates[j]))}
    best = [max((k.estimate.tokens_per_s for k in candidates[j]), default=1.0) for j in range(len(jobs))]
    norm = {(j, c): candidates[j][c].estimate.tokens_per_s / best[j] for (j, c) in x}
    runs = {j: pulp.lpSum(x[j, c] for c in range(len(candidates[j]))) for j in range(len(jobs))}
    for j in range(len(jobs)):
        prob += runs[j] <= 1, f"c1_one_candidate_{j}"
    for p in cluster.pools:
        prob += pulp.lpSum(x[j, c] * candidates[j][c].nodes_by_pool.get(p.name, 0) for (j, c) in x) <= p.nodes, \
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


# ----------------------------------------------------------------------------- the fleet

def _check_policy_inputs(jobs: tuple[FleetJob, ...], policy: Policy) -> None:
    if policy == Policy.MIN_COST:
        for i, jb in enumerate(jobs):
            if jb.tokens is None:
                raise InputError(f"jobs[{i}].tokens", f"job {jb.name!r}: the min-cost policy needs the tokens to "
                                                      f"train, to price each allocation (e.g. tokens: 1.0e+11)")


def plan_fleet(cluster: Cluster, jobs: tuple[FleetJob, ...], policy: Policy | str = Policy.THROUGHPUT,
               options: FleetOptions = FleetOptions(), cache: dict | None = None) -> FleetResult:
    """Allocate whole nodes of `cluster` to `jobs` under `policy`; see the module's docstring."""
    try:
        policy = Policy(policy)
    except ValueError:
        raise InputError("--policy", f"unknown policy {policy!r}; choose one of "
                                     f"{[p.value for p in Policy]}") from None
    if not jobs:
        raise InputError("jobs", "the fleet has no jobs")
    _check_policy_inputs(jobs, policy)
    cache = {} if cache is None else cache
    start = time.process_time()
    found = [job_candidates(cluster, jb, options, cache) for jb in jobs]
    plan_time = time.process_time() - start
    candidates = [f for f, _ in found]
    start = time.perf_counter()
    chosen = solve(cluster, jobs, candidates, policy, options)
    solve_time = time.perf_counter() - start
    return _result(cluster, jobs, candidates, [w for _, w in found], chosen, policy, solve_time, plan_time)


def _result(cluster, jobs, candidates, why_not, chosen, policy, solve_time, plan_time) -> FleetResult:
    pool_gpus = {p.name: p.gpus_per_node for p in cluster.pools}
    allocations, unscheduled = [], {}
    for j, jb in enumerate(jobs):
        if chosen[j] is None:
            unscheduled[jb.name] = _why_unscheduled(jb, candidates[j], why_not[j], policy)
            continue
        cand = candidates[j][chosen[j]]
        est = evaluate(sub_cluster(cluster, cand.nodes), cand.plan, tokens_to_train=jb.tokens)
        best = max(k.estimate.tokens_per_s for k in candidates[j])
        gpus = {name: n * pool_gpus[name] for name, n in cand.nodes}
        allocations.append(Allocation(jb, cand, est, est.tokens_per_s / best, gpus))
    held = {p.name: 0 for p in cluster.pools}
    for a in allocations:
        for name, n in a.candidate.nodes:
            held[name] += n
    idle = {p.name: p.nodes - held[p.name] for p in cluster.pools if p.nodes > held[p.name]}
    return FleetResult(policy, tuple(allocations), unscheduled, idle, {p: n * pool_gpus[p] for p, n in idle.items()},
                       _idle_reasons(idle, candidates, policy), solve_time, plan_time)


def _why_unscheduled(job: FleetJob, candidates: list[Candidate], why_not: list[str], policy: Policy) -> str:
    if not candidates:
        return f"no plan fits any candidate allocation: {why_not[0] if why_not else 'no candidates'}"
    if policy == Policy.MIN_COST and job.deadline_hours is not None:
        fastest = min(k.hours_to_finish(job.tokens) for k in candidates)
        if fastest > job.deadline_hours:
            return f"no allocation meets its deadline of {job.deadline_hours:g} h (fastest: {fastest:.1f} h alone)"
    return "the other jobs' allocations leave none of its candidate allocations room (more jobs cannot run at once)"


def _idle_reasons(idle: dict[str, int], candidates: list[list[Candidate]], policy: Policy) -> dict[str, str]:
    usable = {name for cands in candidates for k in cands for name, _ in k.nodes}
    out = {}
    for name in idle:
        if name not in usable:
            out[name] = "no job has a plan that runs on this pool (memory, precision or node count)"
        else:
            out[name] = (f"no job's candidate allocation (whole nodes on a halving grid) that also takes these "
                         f"nodes scores better under the {policy.value} policy")
    return out
