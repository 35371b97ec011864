"""The search space: which GPUs, how they form pipeline stages, and the training knobs.

A *layout* fixes the stage structure of a plan without its layer split or sample shares:
for each pipeline stage, the groups of identical replicas it runs on (pool, tensor-parallel
degree, how many). Two families of layouts are enumerated, for every subset of pools that may
train together (the rest stay idle) and every tensor-parallel degree per pool:

  chain  every stage runs on one pool; the stages of a pool are consecutive and the pools come in
         some order (all orders are tried). All stages have the same number of data-parallel
         replicas d (lanes), so that replica r of each stage forms one pipeline. Pool k holds
         q_k = floor(N_k / (d t_k)) stages: the most its N_k GPUs allow at that width. A single
         pool gives the Megatron-style d x pp x tp grid.
  mixed  every stage has the same mix of replicas from every chosen pool: r_k = floor(N_k / (p t_k))
         replicas of pool k per stage, with uneven sample shares so that fast and slow replicas
         finish together. Slow, memory-starved GPUs hold as many layers as fast ones here, so
         the split is uniform up to embedding and head.

Partial use of a pool (for the cost and deadline objectives) is searched on a halving grid:
each chosen pool offers all, half, a quarter... of its nodes, down to one node. A pool with more
GPUs than any layout can use (global batch x widest replica x layers) offers that many and the
halving grid below it, for every objective. Layouts that
mix the two families (some stages mixed, others single-pool) are not enumerated.

Knobs per layout: micro-batch (powers of two dividing the global batch, with at least one
micro-batch per replica of a stage), ZeRO stage 0-3, recompute none/selective/full, schedule
1F1B with interleave 1 or 2; under ZeRO-2/3, hybrid sharding within a node's replicas where the engine offers it
(hybrid_shard_of), and for a MoE model under ep, expert tensor parallelism 1 where Megatron-LM offers it
(expert_tp_settings): the search scores these beside each setting, under its bound. Sequence parallelism is on whenever tp > 1: it removes replicated
element-wise work and activations and moves the same bytes, so it never loses in the cost model.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple

from planner.engines import Space as EngineSpace
from planner.engines import get as engine_profile
from planner.placement import fits_nodes, tp_fits
from planner.types import MAX_SIMULATED_PASSES, Job, Model, Offload, Pool, Recompute, SelectiveKind


class Group(NamedTuple):
    """`count` replicas of a stage, each on `tp` GPUs of pool `pool` (a named tuple: the bounds
    key their caches by tuples of groups, and tuples hash in C)."""
    pool: str
    tp: int
    count: int


@dataclass(frozen=True)
class Layout:
    family: str                                  # "chain" or "mixed"
    stages: tuple[tuple[Group, ...], ...]

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def gpus_by_pool(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for stage in self.stages:
            for g in stage:
                used[g.pool] = used.get(g.pool, 0) + g.tp * g.count
        return used

    @property
    def max_replicas_per_stage(self) -> int:
        return max(sum(g.count for g in stage) for stage in self.stages)


class Knobs(NamedTuple):
    """The training knobs of a candidate (a named tuple: the scorer keys its caches by them)."""
    micro_batch: int
    zero_stage: int
    recompute: Recompute
    interleave: int
    hybrid_shard: int = 0              # Plan.hybrid_shard: ZeRO-2/3 states sharded within groups of this many
    #                                    replicas (a node's), replicated across them; 0: over all (hybrid_shard_of)
    expert_tensor_parallel: int = 0    # Plan.expert_tensor_parallel: 1 or 0 (= tp) (expert_tp_settings)


RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)


def searched_recomputes(flash_attention: bool, mixed: bool, engine: str = "hetplan") -> tuple[Recompute, ...]:
    """The recompute settings of the space. With FlashAttention the attention scores are never
    stored, so selective recomputation of the attention core (Megatron-LM's, the default)
    keeps exactly the activations of none and only adds the attention core's recomputation to
    every backward pass; on single-pool stages (even shares) it is left out of the space. Stages
    that mix pools keep it: their shares follow the pass times, and other shares can come out
    ahead. An engine whose selective recomputation is another kind (torchtitan's op-level SAC)
    keeps it everywhere: it stores less than none."""
    if engine_profile(engine).execution.selective_recompute != SelectiveKind.ATTENTION_CORE:
        return RECOMPUTES
    return (Recompute.NONE, Recompute.FULL) if flash_attention and not mixed else RECOMPUTES
ZERO_STAGES = (0, 1, 2, 3)


def zero_stages(offload: Offload, max_replicas: int) -> tuple[int, ...]:
    """ZeRO stages of the space for a layout whose stages have at most `max_replicas` replicas:
    without offload, ZeRO > 0 only where there is something to shard; offloading the optimizer
    takes ZeRO >= 1 (on one replica too: the host updates the whole optimizer), parameters ZeRO-3."""
    if offload == Offload.OPTIMIZER:
        return (1, 2, 3)
    if offload == Offload.OPTIMIZER_PARAMS:
        return (3,)
    return ZERO_STAGES if max_replicas > 1 else (0,)
INTERLEAVES = (1, 2)


def tp_degrees(pool: Pool, model: Model, cp: int = 1, tensor_parallel: bool = True) -> list[int]:
    """Tensor-parallel degrees a replica on `pool` may use: divisors of the node size (or whole nodes
    of an NVLink domain that spans nodes, placement.tp_fits) that also divide the attention heads, key/value heads (or are divided by them) and the MLP width. With
    context parallelism `cp`, the replica widths t x cp instead (a search with a context-parallel
    setting enumerates layouts of replicas that wide: planner.search.score.Scorer reads them back
    as tp = width / cp), those that pack into nodes (placement.fits_nodes) and fit the pool."""
    out = []
    for t in range(1, max(pool.gpus_per_node, pool.gpu.nvlink_domain_gpus) + 1):
        if not tp_fits(t, pool) or model.heads % t or model.ffn % t:
            continue
        if model.kv_heads % t and t % model.kv_heads:
            continue
        if t > 1 and not tensor_parallel:
            continue
        if fits_nodes(t * cp, pool.gpus_per_node) and t * cp <= pool.num_gpus:
            out.append(t * cp)
    return out


def most_usable_gpus(pool: Pool, model: Model, global_batch: int, engine: str = "hetplan", cp: int = 1) -> int:
    """The most GPUs of `pool` a layout of the space can use: at most `global_batch` replicas a stage, each
    of the widest replica width, over as many stages as the model has layers (one without pipelining)."""
    space = engine_profile(engine).space
    widest = max(tp_degrees(pool, model, cp, space.tensor_parallel), default=cp)
    return widest * global_batch * (model.layers if space.pipeline_parallel else 1)


def pool_subsets(pools: tuple[Pool, ...], sizes: Iterable[int] | None = None) -> Iterator[tuple[Pool, ...]]:
    """Subsets of the pools, smallest first (or of the given sizes only), lazily: 64 pools have 2^64."""
    for size in (range(1, len(pools) + 1) if sizes is None else sizes):
        yield from itertools.combinations(pools, size)


def scaled_gpu_counts(pool: Pool, partial: bool, most: int | None = None) -> list[int]:
    """All the pool's GPUs; with `partial`, also half, a quarter, ... of its nodes (>= 1 node).

    `most`: the most GPUs of the pool any layout can use (lanes x widest replica x stages: a batch
    of 8 sequences gives at most 8 replicas a stage). A pool larger than that forms no layout whole,
    so it offers that many GPUs (whole nodes where it is one node or more) and half, a quarter, ...
    of them down to one node, for every objective: where the batch is the limit, fewer GPUs can be
    as fast (1,560 nodes x 64 A100 at a batch of 8 found no plan before, and said memory was short)."""
    if most is not None and pool.num_gpus > most:
        nodes = most // pool.gpus_per_node
        if nodes == 0:
            return [most]
        counts = [nodes * pool.gpus_per_node]
        while nodes > 1:
            nodes //= 2
            counts.append(nodes * pool.gpus_per_node)
        return counts
    counts = [pool.num_gpus]
    nodes = pool.nodes
    while partial and nodes > 1:
        nodes //= 2
        counts.append(nodes * pool.gpus_per_node)
    return counts


@dataclass(frozen=True)
class Family:
    """Layouts that use the same GPUs: the pool orders of one chain, or one mixed layout.

    chain: `width[k]` = q_k stages on pool k, each with `lanes` = d replicas of tp_k GPUs.
    mixed: `lanes` = p stages, each with `width[k]` = r_k replicas of pool k."""
    kind: str                                    # "chain" or "mixed"
    subset: tuple[Pool, ...]
    tps: tuple[int, ...]
    width: tuple[int, ...]
    lanes: int

    @property
    def num_stages(self) -> int:
        return sum(self.width) if self.kind == "chain" else self.lanes

    @property
    def max_replicas_per_stage(self) -> int:
        return self.lanes if self.kind == "chain" else sum(self.width)

    def gpus_by_pool(self) -> dict[str, int]:
        return {pool.name: t * w * self.lanes for pool, t, w in zip(self.subset, self.tps, self.width)}

    def orders(self) -> list[tuple[int, ...]]:
        """Pool orders along the pipeline (chain); the one arrangement of a mixed layout."""
        if self.kind == "mixed":
            return [tuple(range(len(self.subset)))]
        return list(itertools.permutations(range(len(self.subset))))

    def runs(self, order: tuple[int, ...]) -> tuple[tuple[tuple[Group, ...], int], ...]:
        """The stages as (replica groups of a stage, how many consecutive stages have them)."""
        if self.kind == "mixed":
            stage = tuple(Group(pool.name, t, c) for pool, t, c in zip(self.subset, self.tps, self.width))
            return ((stage, self.lanes),)
        return tuple(((Group(self.subset[j].name, self.tps[j], self.lanes),), self.width[j]) for j in order)

    def layout(self, order: tuple[int, ...]) -> Layout:
        stages: list[tuple[Group, ...]] = []
        for groups, count in self.runs(order):
            stages += [groups] * count
        return Layout(self.kind, tuple(stages))


def chain_families(subset: tuple[Pool, ...], tps: tuple[int, ...], gpus: tuple[int, ...],
                   num_layers: int, max_lanes: int) -> Iterator[Family]:
    """Every lane count d with q_k >= 1 stages per pool (all pool orders in one family): q_k =
    floor(N_k / (d t_k)) falls as d grows, so the d with q_k >= 1 for every pool and sum q_k <=
    layers form one range, found by bisection (a global batch of 10^7 allows 10^7 lane counts; only
    the range is walked)."""
    for d in _chain_lanes(tps, gpus, num_layers, max_lanes):
        yield Family("chain", subset, tps, tuple(n // (d * t) for n, t in zip(gpus, tps)), d)


def _chain_lanes(tps: tuple[int, ...], gpus: tuple[int, ...], num_layers: int, max_lanes: int) -> range:
    """chain_families' lane counts d."""
    most = min(max_lanes, min(n // t for n, t in zip(gpus, tps)))
    fewest = _first_true(1, most + 1, lambda d: sum(n // (d * t) for n, t in zip(gpus, tps)) <= num_layers)
    return range(fewest, most + 1)


def _first_true(low: int, high: int, holds) -> int:
    """The least x in [low, high) for which `holds` (false, then true as x grows), else high."""
    while low < high:
        mid = (low + high) // 2
        if holds(mid):
            high = mid
        else:
            low = mid + 1
    return low


def mixed_families(subset: tuple[Pool, ...], tps: tuple[int, ...], gpus: tuple[int, ...],
                   num_layers: int, max_lanes: int) -> Iterator[Family]:
    """p stages, each with r_k = floor(N_k / (p t_k)) >= 1 replicas of every pool of the subset;
    the p with sum r_k <= max_lanes come from bisection, as in chain_families."""
    if len(subset) < 2:
        return
    for p in _mixed_stage_counts(tps, gpus, num_layers, max_lanes):
        yield Family("mixed", subset, tps, tuple(n // (p * t) for n, t in zip(gpus, tps)), p)


def _mixed_stage_counts(tps: tuple[int, ...], gpus: tuple[int, ...], num_layers: int, max_lanes: int) -> range:
    """mixed_families' stage counts p."""
    most = min(num_layers, min(n // t for n, t in zip(gpus, tps)))
    return range(_first_true(1, most + 1, lambda p: sum(n // (p * t) for n, t in zip(gpus, tps)) <= max_lanes),
                 most + 1)


def layout_families(cluster_pools: tuple[Pool, ...], model: Model, max_micro_batches: int,
                    partial: bool, subset_sizes: Iterable[int] | None = None,
                    one_tp: bool = False, engine: str = "hetplan", cp: int = 1,
                    stop: Callable[[], bool] | None = None, ep: int = 1, widest_tp: bool = False) -> Iterator[Family]:
    """Every family of layouts of the space over `cluster_pools` (already filtered for precision),
    lazily; `subset_sizes` keeps only subsets of those sizes and `one_tp` only families whose pools
    share one tensor-parallel degree (the baselines' spaces, generated without filtering);
    `widest_tp` only the widest tensor-parallel choice of each subset (the last of its choices: the
    greedy first plan, planner.search.greedy).
    `engine`: only the layouts that engine can run (planner.engines.base.Space): one tp for all
    stages unless it takes one per stage, chains only unless its stages may mix pools, tp 1 only
    without tensor parallelism. `stop`: asked before each subset, GPU count and tp choice (most of
    which yield no family on a large cluster: 64 pools have 2^64 subsets); true ends the listing."""
    space = engine_profile(engine).space
    chain_layers = model.layers if space.pipeline_parallel else 1
    for subset, gpus, tps in _listing(cluster_pools, model, max_micro_batches, partial, space, cp=cp, ep=ep,
                                      subset_sizes=subset_sizes, one_tp=one_tp, widest_tp=widest_tp):
        if stop is not None and stop():
            return
        yield from chain_families(subset, tps, gpus, chain_layers, max_micro_batches)
        if space.mixed_stages:
            yield from mixed_families(subset, tps, gpus, model.layers, max_micro_batches)


def count_families(cluster_pools: tuple[Pool, ...], model: Model, max_micro_batches: int, partial: bool,
                   engine: str = "hetplan", cp: int = 1, ep: int = 1) -> int:
    """How many families layout_families lists (the same arguments), counted without making them:
    an estimate of the work of a search of that space (its families are screened and bounded each),
    in about a thousandth of the listing's time (a lane range costs a bisection, not a Family per lane)."""
    space = engine_profile(engine).space
    chain_layers = model.layers if space.pipeline_parallel else 1
    count = 0
    for subset, gpus, tps in _listing(cluster_pools, model, max_micro_batches, partial, space, cp=cp, ep=ep):
        count += len(_chain_lanes(tps, gpus, chain_layers, max_micro_batches))
        if space.mixed_stages and len(subset) > 1:
            count += len(_mixed_stage_counts(tps, gpus, model.layers, max_micro_batches))
    return count


def _listing(cluster_pools: tuple[Pool, ...], model: Model, max_micro_batches: int, partial: bool, space: EngineSpace,
             cp: int = 1, ep: int = 1, subset_sizes: Iterable[int] | None = None, one_tp: bool = False,
             widest_tp: bool = False) -> Iterator[tuple[tuple[Pool, ...], tuple[int, ...], tuple[int, ...]]]:
    """layout_families' (pool subset, GPUs of each pool, tp degree of each pool) choices, each a range of
    families (lane counts of a chain, stage counts of a mixed layout)."""
    ep_on_replicas_only = ep > 1 and not space.expert_parallel_with_tp     # tp 1 and cp 1 only (Space)
    if ep_on_replicas_only and cp > 1:
        return
    one_tp = (one_tp or not (space.tp_per_stage or space.mixed_stages)
              or (space.tied_edges_same_tp and model.tied_embeddings))     # (a subset of that engine's space)
    stages = model.layers if space.pipeline_parallel else 1
    if not space.mixed_stages:     # a chain has a stage on each of its pools: at most `stages` pools
        subset_sizes = [k for k in (range(1, len(cluster_pools) + 1) if subset_sizes is None else subset_sizes)
                        if k <= stages]
    for subset in pool_subsets(cluster_pools, subset_sizes):
        tp_options = [tp_degrees(p, model, cp, space.tensor_parallel and not ep_on_replicas_only) for p in subset]
        if not all(tp_options):
            continue
        # without pipelining every GPU is a replica, so fewer GPUs than a pool has may be all a batch can use
        gpu_options = [scaled_gpu_counts(p, partial or not space.pipeline_parallel,
                                         most=max(ts) * max_micro_batches * stages)
                       for p, ts in zip(subset, tp_options)]
        for gpus in itertools.product(*gpu_options):
            for tps in (_widest_choice(tp_options, one_tp) if widest_tp else _tp_choices(tp_options, one_tp)):
                yield subset, gpus, tps


def _widest_choice(tp_options: list[list[int]], one_tp: bool) -> list[tuple[int, ...]]:
    """The last of _tp_choices (each list ascending), without listing the others."""
    if not one_tp:
        return [tuple(ts[-1] for ts in tp_options)]
    common = set.intersection(*(set(ts) for ts in tp_options))
    return [(max(common),) * len(tp_options)] if common else []


def _tp_choices(tp_options: list[list[int]], one_tp: bool) -> Iterator[tuple[int, ...]]:
    if not one_tp:
        yield from itertools.product(*tp_options)
        return
    for t in sorted(set.intersection(*(set(ts) for ts in tp_options))):
        yield (t,) * len(tp_options)


def micro_batch_sizes(global_batch: int) -> list[int]:
    out, mb = [], 1
    while mb <= global_batch:
        if global_batch % mb == 0:
            out.append(mb)
        mb *= 2
    return out


def allows(space: EngineSpace, num_stages: int, knobs: tuple, job: Job | None = None) -> bool:
    """Whether an engine runs these knobs ((micro-batch, interleave, recompute, ZeRO), the order
    of Knobs and of the bounds' keys) on a pipeline of `num_stages` stages, for `job`'s kind and
    offload (planner.engines.base.Space); with `job`, also only plans whose schedule can be simulated
    (at most MAX_SIMULATED_PASSES passes: stages x micro-batches x interleave, as Plan requires)."""
    micro_batch, interleave, recompute, zero = knobs[0], knobs[1], knobs[2], knobs[3]
    ok = ((interleave == 1 or space.interleave) and recompute in space.recomputes
          and space.zero_allowed(zero, num_stages))
    if ok and job is not None:
        ok = (num_stages * (job.global_batch // micro_batch) * interleave <= MAX_SIMULATED_PASSES
              and zero in space.offload_zero_stages(job.offload)
              and (job.context_parallel == 1 or zero in space.context_parallel_zero_stages)
              and (recompute == Recompute.NONE or not job.training.adapters or space.adapters_with_recompute))
    return ok


def hybrid_shard_of(layout: Layout, gpus_per_node: dict[str, int], zero: int, space: EngineSpace, ep: int = 1) -> int:
    """The hybrid-shard group the search tries for a layout (0: none): where the engine offers it (FSDP
    HYBRID_SHARD, torchtitan HSDP), under ZeRO-2/3 and without expert parallelism (torchtitan's export refuses
    the two together), the replicas one node holds (the fewest over the layout's pools: the group's GPUs must
    share a node, planner.cost.hybrid_link), at least two, dividing every stage's replicas and fewer than some
    stage has (else it is full sharding)."""
    if not space.hybrid_shard or zero < 2 or ep > 1:
        return 0
    hs = min(gpus_per_node[g.pool] // g.tp for stage in layout.stages for g in stage)
    counts = [sum(g.count for g in stage) for stage in layout.stages]
    return hs if hs >= 2 and all(c % hs == 0 for c in counts) and max(counts) > hs else 0


def expert_tp_settings(layout: Layout, space: EngineSpace, model: Model, ep: int, cp: int = 1) -> tuple[int, ...]:
    """Plan.expert_tensor_parallel values the search tries: 0 (each expert split over the tp group) where ep
    groups of whole replicas form, and 1 (Megatron-LM's --expert-tensor-parallel-size 1) for a mixture-of-experts
    model under an engine that offers it, tp > 1 in every stage (one tp a stage), no context parallelism, and
    etp x ep dividing every stage's tp x replicas; it is tried only where the expert group fits in a replica's tp
    ranks (ep <= tp: the all-to-alls leave the data-parallel ring for the node's links, planner.cost.
    expert_group_link) or where whole replicas cannot form the ep groups (in the cost model it otherwise only
    holds more expert weights)."""
    counts = [sum(g.count for g in stage) for stage in layout.stages]
    tps = [{g.tp for g in stage} for stage in layout.stages]
    whole = all(c % ep == 0 for c in counts)
    out = (0,) if whole else ()
    if (ep > 1 and model.is_moe and space.expert_tensor_parallel and cp == 1 and all(len(t) == 1 for t in tps)
            and all(min(t) > 1 and (min(t) * c) % ep == 0 for t, c in zip(tps, counts))
            and (not whole or all(ep <= min(t) for t in tps))):
        out += (1,)
    return out


def knob_settings(global_batch: int, layout: Layout, num_layers: int, flash_attention: bool = True,
                  engine: str = "hetplan", job: Job | None = None,
                  gpus_per_node: dict[str, int] | None = None) -> Iterator[Knobs]:
    """Every knob setting of the space for a layout; with `gpus_per_node` (pool name -> GPUs a node) also
    the hybrid-shard (hybrid_shard_of) and expert-tp (expert_tp_settings) variants the search scores."""
    space = engine_profile(engine).space
    most_replicas = layout.max_replicas_per_stage
    recomputes = searched_recomputes(flash_attention, layout.family == "mixed", engine)
    cp = 1 if job is None else job.context_parallel
    for mb in micro_batch_sizes(global_batch):
        if global_batch // mb < most_replicas:
            break
        for v in INTERLEAVES:
            if v > 1 and (layout.num_stages == 1 or num_layers % v):
                continue
            for recompute in recomputes:
                for zero in zero_stages(Offload.NONE if job is None else job.offload, most_replicas * cp):
                    if not allows(space, layout.num_stages, (mb, v, recompute, zero), job):
                        continue
                    if gpus_per_node is None:
                        yield Knobs(mb, zero, recompute, v)
                        continue
                    ep = 1 if job is None else job.expert_parallel
                    hs = hybrid_shard_of(layout, gpus_per_node, zero, space, ep)
                    for etp in (expert_tp_settings(layout, space, job.model, ep, cp) if job and ep > 1 else (0,)):
                        yield from (Knobs(mb, zero, recompute, v, h, etp) for h in ((0, hs) if hs else (0,)))


def layouts(cluster_pools: tuple[Pool, ...], model: Model, max_micro_batches: int,
            partial: bool, engine: str = "hetplan", cp: int = 1) -> Iterator[tuple[tuple[Pool, ...], Layout]]:
    for family in layout_families(cluster_pools, model, max_micro_batches, partial, engine=engine, cp=cp):
        for order in family.orders():
            yield family.subset, family.layout(order)
