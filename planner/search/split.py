"""Exact layer split and sample shares for a fixed stage structure.

Both are min-max allocation problems with costs that are linear in what is allocated, which a
greedy argument solves exactly; no solver (and so no solver time limit) is needed.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StageCosts:
    """Stage i's time per iteration with L layers is max_g (slope[g] * L + intercept[g]) over its
    replica groups g; its memory allows at most `max_layers` layers."""
    slopes: tuple[float, ...]
    intercepts: tuple[float, ...]
    max_layers: int

    def time_s(self, layers: int) -> float:
        if len(self.slopes) == 1:           # a chain's stage (one group): the same figure, without a generator
            return self.slopes[0] * layers + self.intercepts[0]
        return max(a * layers + c for a, c in zip(self.slopes, self.intercepts))

    def most_layers_within(self, budget_s: float, multiple: int, memory: bool = True) -> int:
        most = self.max_layers if memory else 10**9
        for a, c in zip(self.slopes, self.intercepts):
            most = min(most, math.floor((budget_s - c) / a * (1 + 1e-12)))
        return most - most % multiple


def split_layers(num_layers: int, stages: list[StageCosts], multiple: int = 1) -> tuple[tuple[int, ...], bool] | None:
    """Contiguous split of `num_layers` layers over the stages minimising the slowest stage.

    Formulation (integer program; L_i the layers of stage i, B the slowest stage's time):
        minimise  B
        (c1) sum_i L_i = num_layers                       every layer in exactly one stage
        (c2) L_i >= multiple, L_i = multiple * k_i       each stage non-empty; whole virtual stages
        (c3) slope_ig L_i + intercept_ig <= B  for all g  every replica group of stage i within B
        (c4) L_i <= max_layers_i                          memory of every GPU of stage i
    Each stage's time is convex and increasing in its layers, so handing out the layers `multiple`
    at a time, each time to the stage that would be slowest the least after taking them (within
    its memory), is optimal (the classic greedy for min-max allocation with convex costs); it
    needs at most num_layers / multiple heap steps. With B the optimum it reaches, each stage's
    upper bound U_i(B) from (c3)-(c4) is taken, and among optimal splits layers are removed first
    from the stages with the steepest slope, which shortens the pipeline's fill and drain.
    Returns (split, whether memory (c4) binds at the optimum), or None when memory rules out
    every split. tests/test_search.py checks it against brute force on small pipelines and against
    the integer program above, solved by PuLP's CBC, on pipelines of up to 24 stages.
    """
    if num_layers % multiple or len(stages) * multiple > num_layers or any(s.max_layers < multiple for s in stages):
        return None
    caps = [s.max_layers - s.max_layers % multiple for s in stages]
    if sum(caps) < num_layers:
        return None
    layers = [multiple] * len(stages)
    heap = [(s.time_s(2 * multiple), i) for i, s in enumerate(stages) if caps[i] >= 2 * multiple]
    heapq.heapify(heap)
    for _ in range((num_layers - multiple * len(stages)) // multiple):
        _, i = heapq.heappop(heap)
        layers[i] += multiple
        if layers[i] + multiple <= caps[i]:
            heapq.heappush(heap, (stages[i].time_s(layers[i] + multiple), i))
    best = max(s.time_s(n) for s, n in zip(stages, layers))
    upper = [max(n, s.most_layers_within(best, multiple)) for s, n in zip(stages, layers)]
    memory_binds = any(s.max_layers < s.most_layers_within(best, multiple, memory=False) for s in stages)
    return _trim(upper, num_layers, stages, multiple), memory_binds


def _trim(upper: list[int], num_layers: int, stages: list[StageCosts], multiple: int) -> tuple[int, ...]:
    layers = list(upper)
    excess = sum(layers) - num_layers
    by_slope = sorted(range(len(stages)), key=lambda i: (-max(stages[i].slopes), i))
    for i in by_slope:
        if excess <= 0:
            break
        take = min(excess, layers[i] - multiple)
        layers[i] -= take
        excess -= take
    assert excess == 0 and all(n >= multiple for n in layers), (upper, num_layers)
    return tuple(layers)


def share_micro_batches(num_micro_batches: int, time_per_micro_batch_s: list[float]) -> list[int] | None:
    """Micro-batches per replica of a stage minimising the slowest replica's busy time.

        minimise  max_r n_r tau_r   subject to  sum_r n_r = m,  n_r >= 1 integer   (no idle replica)
    Handing out micro-batches one at a time to the replica that would finish earliest is optimal
    for this min-max problem with linear costs (each step keeps the smallest attainable maximum);
    ties go to the lowest index. Returns None when m is smaller than the number of replicas.
    """
    count = len(time_per_micro_batch_s)
    if num_micro_batches < count:
        return None
    # Greedy hands out the smallest finishing times k tau_r first, so it first gives every replica
    # all its micro-batches that finish by a level c no larger than the optimum: start there.
    taus = time_per_micro_batch_s
    level = num_micro_batches / sum(1 / tau for tau in taus) * (1 - 1e-9)
    shares = [max(1, math.floor(level / tau)) for tau in taus]
    if sum(shares) > num_micro_batches:
        shares = [1] * count
    heap = [((n + 1) * tau, r) for r, (n, tau) in enumerate(zip(shares, taus))]
    heapq.heapify(heap)
    for _ in range(num_micro_batches - sum(shares)):
        _, r = heapq.heappop(heap)
        shares[r] += 1
        heapq.heappush(heap, ((shares[r] + 1) * time_per_micro_batch_s[r], r))
    return shares


def even_shares(num_micro_batches: int, replicas: int) -> list[int]:
    """Identical replicas: m split as evenly as whole micro-batches allow, the first ones one more."""
    base, extra = divmod(num_micro_batches, replicas)
    return [base + (1 if r < extra else 0) for r in range(replicas)]


def even_split(num_layers: int, stages: int, multiple: int = 1) -> tuple[int, ...] | None:
    """Layers as evenly as whole virtual stages allow, the first stages one chunk more."""
    if num_layers % multiple or num_layers // multiple < stages:
        return None
    chunks = even_shares(num_layers // multiple, stages)
    return tuple(c * multiple for c in chunks)
