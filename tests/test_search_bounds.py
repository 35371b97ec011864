"""The pruning bounds against the fast scores they bound: on random small clusters, every candidate
of the space (optimal and even splits alike) scores at or above its family's capacity bound and its
layout's pipeline bound for its knob settings, and a setting the bound leaves out does not fit."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings, strategies as st

from catalog import cluster_from_dict, load_catalog
from planner.search import bound
from planner.search.bound import (Bounds, _busiest_fill_s, _fill_s, _interleaved_fill_s, _interleaved_level_fill_s,
                                  _water_level, _whole_layer_level)
from planner.search.planners import precision_for
from planner.search.score import Scorer
from planner.search.screen import screen_by_setting_s, screen_s
from planner.search.space import knob_settings, layout_families, searched_recomputes
from planner.schedule import simulate
from planner.types import Job, Recompute, Schedule

GPUS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "l40s", "rtx-4090"]
MODELS = ["opt-350m", "gpt3-1.3b", "llama-2-7b"]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


# small GPUs and larger models: memory binds, recomputation and ZeRO matter (the caps of (b6) are exercised)
TIGHT_GPUS = ["a100-40gb-sxm", "v100-32gb-sxm", "rtx-4090", "l4", "t4", "a10g", "v100-16gb-pcie"]
TIGHT_MODELS = ["gpt3-6.7b", "llama-2-13b", "llama-2-7b", "gpt3-2.7b"]


def _random_case(rng: random.Random, catalog, gpus=GPUS, models=MODELS, seq_lens=(1024, 2048)):
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((1, 2)), "gpus_per_node": rng.choice((2, 4)),
              "inter_node_gbps": rng.choice((100, 400))} for j, gpu in enumerate(rng.sample(gpus, rng.choice((2, 3))))]
    cluster = cluster_from_dict({"name": "random", "pools": pools, "between_pools_gbps": 100}, catalog)
    job = Job(catalog.model(rng.choice(models)), rng.choice((8, 16, 32)), rng.choice(seq_lens))
    return cluster, job


@pytest.mark.parametrize("seed,tight", [(seed, False) for seed in range(8)] + [(seed, True) for seed in (0, 1, 4)])
def test_bounds_hold_for_every_candidate(catalog, seed, tight):
    rng = random.Random(seed)
    cluster, job = (_random_case(rng, catalog, TIGHT_GPUS, TIGHT_MODELS, (1024, 2048, 4096)) if tight
                    else _random_case(rng, catalog))
    scorer = Scorer(cluster, job)
    bounds = Bounds(scorer)
    checked = 0
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=False))
    screened = screen_s(scorer, families)
    best, by_setting, settings = screen_by_setting_s(scorer, families)
    assert best.tolist() == screened.tolist()
    assert (by_setting.min(axis=1) == best).all()      # the family's screen: its least setting's
    for family, screen, row in zip(families, screened, by_setting):
        capacity = bounds.capacity_s(family)
        any_order = bounds.pipeline_s(family.runs(family.orders()[0]), family.max_replicas_per_stage, any_order=True)
        for order in family.orders():
            layout = family.layout(order)
            pipeline = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage)
            even = Bounds(scorer, even=True).pipeline_s(family.runs(order), family.max_replicas_per_stage)
            first_fixed = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage, fixed=1)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, scorer.options.flash_attention):
                key = (knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage)
                for uniform in (False, True):
                    # the precision the search scores the family in (the bounds count its gradient bytes)
                    cand = scorer.score(layout, knobs, precision_for(job, family.subset), uniform=uniform)
                    if cand is None:
                        continue
                    checked += 1
                    assert key in pipeline, (layout, knobs, uniform)
                    assert cand.time_s >= pipeline[key] * (1 - 1e-9), (layout, knobs, uniform)
                    assert cand.time_s >= capacity * (1 - 1e-9)
                    assert cand.time_s >= screen * (1 - 1e-9), (layout, knobs, uniform, screen)
                    # the screen at the candidate's own (micro-batch, recompute) setting, which the search's
                    # any-order bounds leave settings out by (planners._Frontier.live_settings)
                    setting = row[settings.index((knobs.micro_batch, knobs.recompute))]
                    assert cand.time_s >= setting * (1 - 1e-9), (layout, knobs, uniform, setting)
                    assert key in any_order and cand.time_s >= any_order[key] * (1 - 1e-9), (layout, knobs)
                    assert key in first_fixed and cand.time_s >= first_fixed[key] * (1 - 1e-9), (layout, knobs)
                    if uniform:       # the baselines' even splits have a tighter bound of their own
                        assert key in even and cand.time_s >= even[key] * (1 - 1e-9), (layout, knobs)
    assert checked > 0


def test_water_level():
    # two stages a = 1 and 2, no head, no memory limit: M / 1 + M / 2 = 9 -> M = 6
    assert _water_level(9, [(1, 1.0, 0.0, 100), (1, 2.0, 0.0, 100)]) == pytest.approx(6.0)
    # the fast stage holds at most 4 layers: the slow one takes 5 -> M = 10
    assert _water_level(9, [(1, 1.0, 0.0, 4), (1, 2.0, 0.0, 100)]) == pytest.approx(10.0)
    assert _water_level(9, [(1, 1.0, 0.0, 4), (1, 2.0, 0.0, 4)]) == math.inf


def _splits(num_layers: int, p: int, least: int = 0):
    """Every split of num_layers layers over p stages, each holding at least `least`."""
    if p == 1:
        if num_layers >= least:
            yield (num_layers,)
        return
    for first in range(least, num_layers - least * (p - 1) + 1):
        for rest in _splits(num_layers - first, p - 1, least):
            yield (first,) + rest


@given(st.lists(st.tuples(st.floats(0.1, 5.0), st.floats(0.0, 2.0), st.integers(0, 6)), min_size=1, max_size=4),
       st.integers(1, 12))
@settings(max_examples=200, deadline=None)
def test_whole_layer_level_is_the_least_busiest_stage_of_whole_splits(stages, num_layers):
    """(b2) in whole layers: no split of whole layers within the caps has its busiest stage below the
    level, and without heads the level is that of the best split."""
    rows = [(1, a, e, cap) for a, e, cap in stages]
    level = _whole_layer_level(num_layers, rows, _water_level(num_layers, rows))
    best = min((max(a * n + e for n, (a, e, _) in zip(split, stages)) for split in _splits(num_layers, len(stages))
                if all(n <= cap for n, (_, _, cap) in zip(split, stages))), default=math.inf)
    assert level <= best * (1 + 1e-9)
    if all(e == 0 for _, e, _ in stages):
        assert level == pytest.approx(best)


def _fill_case(rng: random.Random):
    """Runs of like stages (per layer forward and backward of each of d replicas), micro-batches per replica,
    the heads' passes on the last stage, and each boundary's transfer."""
    d = rng.choice((1, 2))
    runs = [(rng.randint(1, 3), [rng.uniform(0.2, 2.0) for _ in range(d)], [rng.uniform(0.2, 4.0) for _ in range(d)])
            for _ in range(rng.randint(1, 3))]
    counts = [rng.randint(1, 6) for _ in range(d)]
    heads = [(rng.uniform(0, 1), rng.uniform(0, 2)) for _ in range(d)]
    return runs, counts, heads, rng.uniform(0, 0.5)


def _fill_parts(runs, counts, heads):
    """(run, count, a, phi, e) of bound._fill_s for these runs in this order."""
    parts = []
    for k, (count, f, b) in enumerate(runs):
        a = max(n * (x + y) for n, x, y in zip(counts, f, b))
        phi = min(f) + min(b)
        if k < len(runs) - 1:
            parts.append((k, count, a, phi, 0.0))
        else:
            if count > 1:
                parts.append((k, count - 1, a, phi, 0.0))
            parts.append((k, 1, a, phi, min(hf + hb for hf, hb in heads)))
    return parts


@pytest.mark.parametrize("seed", range(40))
def test_fill_bounds_the_simulated_1f1b_of_every_split_and_order(seed):
    """(b10): the least upstream fill is at most the simulated 1F1B makespan (planner.schedule) of every
    split of whole layers, for the runs in the order given and, with `fixed` runs placed, for every order
    of the others (then without the head)."""
    import itertools
    rng = random.Random(seed)
    runs, counts, heads, delay = _fill_case(rng)
    p = sum(count for count, _, _ in runs)
    num_layers = p + rng.randint(0, 3)
    fixed = rng.randint(0, len(runs))
    parts = _fill_parts(runs, counts, heads if fixed == len(runs) else [(0.0, 0.0)] * len(counts))
    bound = _fill_s(num_layers, 1, parts, fixed)
    least = math.inf
    for tail in itertools.permutations(runs[fixed:]):
        stages = [(f, b) for count, f, b in runs[:fixed] + list(tail) for _ in range(count)]
        for split in _splits(num_layers, p, 1):
            forward = [[n * x + (hf if i == p - 1 else 0.0) for x, (hf, _) in zip(f, heads)]
                       for i, ((f, _), n) in enumerate(zip(stages, split))]
            backward = [[n * y + (hb if i == p - 1 else 0.0) for y, (_, hb) in zip(b, heads)]
                        for i, ((_, b), n) in enumerate(zip(stages, split))]
            sim = simulate([counts] * p, forward, backward, lambda *_: delay, Schedule.ONE_F_ONE_B)
            least = min(least, sim.makespan_s)
    assert bound <= least * (1 + 1e-9), (bound, least, runs, counts, fixed)


@pytest.mark.parametrize("seed", range(40))
def test_busiest_fill_bounds_the_simulated_1f1b_of_every_split_within_the_caps(seed):
    """(b11): the busiest stage's least work over the splits within the parts' caps, plus the fill around it, is at
    most the simulated 1F1B makespan of every such split (stages of one group, d replicas of n micro-batches)."""
    rng = random.Random(seed)
    d, n = rng.choice((1, 2)), rng.randint(6, 30)
    runs = [(rng.randint(1, 3), rng.uniform(0.2, 2.0), rng.uniform(0.2, 4.0)) for _ in range(rng.randint(1, 3))]
    hf, hb = rng.uniform(0, 1), rng.uniform(0, 2)
    p = sum(count for count, _, _ in runs)
    num_layers = p + rng.randint(0, 4)
    parts, stage_part, after = [], [], p
    for k, (count, f, b) in enumerate(runs):
        pieces = [(count, 0.0)] if k < len(runs) - 1 else [(count - 1, 0.0), (1, n * (hf + hb))]
        for size, e in pieces:
            if size:
                after -= size
                cap = rng.randint(size, size + num_layers) if parts else num_layers     # some split fits
                parts.append((size, n * (f + b), f + b, e, cap, (n, d, d * (after + 1))))
                stage_part += [len(parts) - 1] * size
    splits = [split for split in _splits(num_layers, p, 1)
              if all(sum(x for x, q in zip(split, stage_part) if q == i) <= part[4] for i, part in enumerate(parts))]
    stages = [(f, b) for count, f, b in runs for _ in range(count)]
    level = min(max(parts[q][1] * x + parts[q][3] for x, q in zip(split, stage_part)) for split in splits)
    bound = level + _busiest_fill_s(num_layers, 1, level, parts, n * d)
    least = math.inf
    for split in splits:
        forward = [[x * f + (hf if i == p - 1 else 0.0)] * d for i, ((f, _), x) in enumerate(zip(stages, split))]
        backward = [[x * b + (hb if i == p - 1 else 0.0)] * d for i, ((_, b), x) in enumerate(zip(stages, split))]
        least = min(least, simulate([[n] * d] * p, forward, backward, lambda *_: 0.0, Schedule.ONE_F_ONE_B).makespan_s)
    assert bound <= least * (1 + 1e-9), (bound, least, level, runs, n, d)


@given(st.randoms(use_true_random=False), st.sampled_from((2, 3)))
@settings(max_examples=40, deadline=None)
def test_interleaved_fill_and_level_bound_the_simulated_interleaved_schedule_of_every_split(rng, v):
    """(b12) and (b2) in whole virtual stages: the least upstream fill of interleaved 1F1B (_fill_s's LP with
    phi / v) is at most the simulated interleaved makespan (planner.schedule) of every split with at least v
    layers a stage, for the runs in the order given and, with `fixed` runs placed, for every order of the
    others (then without the head); the busiest stage's level over splits of whole virtual stages (v layers
    each) is at most it too. Random stage rates, one or two replicas of p or 2p micro-batches, heads, transfers."""
    import itertools
    runs, counts, heads, delay = _fill_case(rng)
    p = sum(count for count, _, _ in runs)
    counts = [p * rng.randint(1, 2) for _ in counts]        # interleaved micro-batches come in groups of p
    num_layers = v * (p + rng.randint(0, 2))
    fixed = rng.randint(0, len(runs))
    heads = heads if fixed == len(runs) else [(0.0, 0.0)] * len(counts)
    parts = _fill_parts(runs, counts, heads)
    fill = _interleaved_fill_s(num_layers, v, parts, fixed, v)
    rows = [(count, a, e, math.inf) for _, count, a, _, e in parts]
    level = _whole_layer_level(num_layers // v, [(c, a * v, e, cap) for c, a, e, cap in rows],
                               _water_level(num_layers, rows))
    least = least_whole = math.inf
    for tail in itertools.permutations(runs[fixed:]):
        stages = [(f, b) for count, f, b in runs[:fixed] + list(tail) for _ in range(count)]
        for split in _splits(num_layers, p, v):
            forward = [[n * x + (hf if i == p - 1 else 0.0) for x, (hf, _) in zip(f, heads)]
                       for i, ((f, _), n) in enumerate(zip(stages, split))]
            backward = [[n * y + (hb if i == p - 1 else 0.0) for y, (_, hb) in zip(b, heads)]
                        for i, ((_, b), n) in enumerate(zip(stages, split))]
            sim = simulate([counts] * p, forward, backward, lambda *_: delay, Schedule.ONE_F_ONE_B, v).makespan_s
            least = min(least, sim)
            if all(n % v == 0 for n in split):
                least_whole = min(least_whole, sim)
    assert fill <= least * (1 + 1e-9), (fill, least, runs, counts, fixed, v)
    assert max(fill, level) <= least_whole * (1 + 1e-9), (fill, level, least_whole, runs, counts, fixed, v)


@given(st.randoms(use_true_random=False), st.sampled_from((2, 3)))
@settings(max_examples=40, deadline=None)
def test_interleaved_level_fill_bounds_the_simulated_interleaved_schedule_of_every_split_within_the_caps(rng, v):
    """(b13): the level in whole virtual stages with the upstream fill of the layers every stage must hold at it is
    at most the simulated interleaved makespan of every split of whole virtual stages within the parts' caps (the
    runs in the order given, the head on the last stage; one or two replicas of p or 2p micro-batches)."""
    runs, counts, heads, delay = _fill_case(rng)
    p = sum(count for count, _, _ in runs)
    counts = [p * rng.randint(1, 2) for _ in counts]
    num_layers = v * (p + rng.randint(0, 3))
    parts = _fill_parts(runs, counts, heads)
    caps = [rng.randint(count, count + num_layers // v) * v if q else num_layers for q, (_, count, _, _, _)
            in enumerate(parts)]                                    # some split fits: the first part takes the rest
    stage_part = [q for q, (_, count, _, _, _) in enumerate(parts) for _ in range(count)]
    rows = [(count, a, e, cap / count) for (_, count, a, _, e), cap in zip(parts, caps)]
    level = _whole_layer_level(num_layers // v, [(c, a * v, e, cap / v) for c, a, e, cap in rows],
                               _water_level(num_layers, rows))
    bound = _interleaved_level_fill_s(num_layers, v, v, level, [(count, a, phi, e, cap) for (_, count, a, phi, e), cap
                                                                 in zip(parts, caps)])
    stages = [(f, b) for count, f, b in runs for _ in range(count)]
    least = math.inf
    for split in _splits(num_layers, p, v):
        if any(n % v for n in split) or any(sum(n for n, q in zip(split, stage_part) if q == k) > cap
                                            for k, cap in enumerate(caps)):
            continue
        forward = [[n * x + (hf if i == p - 1 else 0.0) for x, (hf, _) in zip(f, heads)]
                   for i, ((f, _), n) in enumerate(zip(stages, split))]
        backward = [[n * y + (hb if i == p - 1 else 0.0) for y, (_, hb) in zip(b, heads)]
                    for i, ((_, b), n) in enumerate(zip(stages, split))]
        least = min(least, simulate([counts] * p, forward, backward, lambda *_: delay, Schedule.ONE_F_ONE_B,
                                    v).makespan_s)
    assert least < math.inf
    assert bound <= least * (1 + 1e-9), (bound, least, level, runs, counts, caps, v)


def test_interleaved_level_fill_of_like_stages_is_narayanans():
    """p like stages of k virtual stages each, n micro-batches: level + (p - 1) phi k v / v where a v (one more virtual
    stage on every stage) costs more than that fill, and above the level where it costs less."""
    phi, p, v, k = 0.3, 4, 2, 3
    for n, full in ((16, True), (4, False)):
        a, num_layers = n * phi, p * k * v
        level = a * k * v
        got = _interleaved_level_fill_s(num_layers, v, v, level, [(p, a, phi, 0.0, math.inf)])
        if full:
            assert got == pytest.approx(level + (p - 1) * phi * k)
        else:
            assert level < got < level + (p - 1) * phi * k


def test_interleaved_fill_of_like_stages_is_the_lp_with_phi_over_v():
    """p like stages: (b12) is (b10)'s closed form with phi / v, a L / (n v) / (1 - (1 - 1/(n v))^p), between the
    busiest stage's level a L / p and it plus Narayanan's interleaved bubble (p - 1) phi L / p / v."""
    phi, n, p, v, num_layers = 0.3, 8, 6, 2, 48
    z = _interleaved_fill_s(num_layers, v, [(0, p, n * phi, phi, 0.0)], 1, v)
    assert z == pytest.approx(n * phi * num_layers / (n * v) / (1 - (1 - 1 / (n * v)) ** p))
    level = n * phi * num_layers / p
    assert level * 1.1 < z < level + (p - 1) * phi * num_layers / p / v


def test_fill_of_like_stages_is_the_lp_optimum():
    """p like stages of n micro-batches each (a = n phi): every stage's constraint binds, L_c = L_0 (1 - 1/n)^c,
    and z = a L / n / (1 - (1 - 1/n)^p), above the busiest stage's level a L / p."""
    phi, n, p, num_layers = 0.3, 8, 6, 48
    z = _fill_s(num_layers, 1, [(0, p, n * phi, phi, 0.0)], 1)
    assert z == pytest.approx(n * phi * num_layers / n / (1 - (1 - 1 / n) ** p))
    assert z > n * phi * num_layers / p * 1.25


def test_selective_recompute_left_out_only_where_it_keeps_what_none_keeps(catalog):
    """With FlashAttention, selective recomputation stores exactly the activations of none (the
    scores it would drop are never stored) and adds time: the space leaves it out of single-pool
    stages (space.searched_recomputes); without FlashAttention, or on mixed stages, it stays."""
    from planner.memory import activation_bytes_per_layer
    model = catalog.model("llama-2-7b")
    for flash in (True, False):
        none, selective = (activation_bytes_per_layer(model, 4096, 2, 2, True, rc, flash)
                           for rc in (Recompute.NONE, Recompute.SELECTIVE))
        assert (none == selective) == flash
    assert Recompute.SELECTIVE not in searched_recomputes(True, mixed=False)
    assert Recompute.SELECTIVE in searched_recomputes(True, mixed=True)
    assert Recompute.SELECTIVE in searched_recomputes(False, mixed=False)


def test_screen_link_ceilings_equal_the_placements(catalog):
    """The screen's vectorised link figures restate placement.dp_link_ceiling and
    placement.p2p_floor_s over arrays: they must agree on every pool, tp and replica count, or the
    screen drifts from what it bounds."""
    import numpy as np
    from planner.placement import dp_link_ceiling, p2p_floor_s
    from planner.compute import ACT_BYTES
    from planner.search.screen import _diagonal_floor_s, dp_link_ceilings
    from planner.search.space import tp_degrees
    for seed in range(6):
        cluster, job = _random_case(random.Random(seed), catalog)
        scorer = Scorer(cluster, job)
        pools = sorted(cluster.pools, key=lambda p: p.name)
        tp_list = sorted({t for p in pools for t in tp_degrees(p, job.model)} | {1})
        for mb in (1, 4):
            table = _diagonal_floor_s(scorer, pools, tp_list, mb)
            size = ACT_BYTES * job.seq_len * mb * job.model.hidden
            for k, pool in enumerate(pools):
                for j, t in enumerate(tp_list):
                    assert table[k, j] == pytest.approx(p2p_floor_s(cluster, pool, t, pool, t, size), rel=1e-12)
        rng = np.random.default_rng(seed)
        for _ in range(40):
            chain = bool(rng.integers(2))
            chosen = sorted(rng.choice(len(pools), size=1 if chain else 2, replace=False).tolist())
            P = len(pools)
            present = np.zeros((P, 1), bool)
            tps, counts = np.ones((P, 1), np.int64), np.zeros((P, 1), np.int64)
            for k in chosen:
                present[k, 0] = True
                tps[k, 0] = rng.choice(tp_degrees(pools[k], job.model))
                counts[k, 0] = rng.integers(1, 9)
            rows = np.arange(P)[:, None]
            got = dp_link_ceilings(scorer, pools, present, tps, counts, np.array([chain]), np.array([chosen[0]]), rows)
            for k in chosen:
                groups = ([(pools[k], int(tps[k, 0]), int(counts[k, 0]))] if chain else
                          [(pools[c], int(tps[c, 0]), int(counts[c, 0])) for c in chosen])
                want = dp_link_ceiling(cluster, groups)
                assert (got[k, 0] if chain else got[0]) == pytest.approx(want, rel=1e-12), (groups, chain)


ENGINE_NAMES = ("hetplan", "megatron", "deepspeed")


@settings(max_examples=60)
@given(gpu=st.sampled_from(TIGHT_GPUS + GPUS), model=st.sampled_from(TIGHT_MODELS + MODELS),
       engine=st.sampled_from(ENGINE_NAMES), seq=st.sampled_from((1024, 2048, 4096)), mb=st.sampled_from((1, 2, 4)),
       zero=st.integers(0, 3), recompute=st.sampled_from(list(Recompute)), p=st.integers(1, 8),
       replicas=st.integers(1, 8), own=st.integers(1, 16), data=st.data())
def test_memory_cap_of_the_bounds_at_least_the_layers_memory_allows(catalog, gpu, model, engine, seq, mb, zero,
                                                                     recompute, p, replicas, own, data):
    """(b6)'s relaxation, memory.most_layers_held over Bounds._cap_coefficients, against the exact memory
    fit the fast score solves (Scorer.max_layers, planner.memory solved for the layers): a stage
    never holds more layers than the bound's cap, whatever its position, window and knobs."""
    from planner.engines import ENGINES
    from planner.schedule import in_flight_micro_batches
    from planner.memory import most_layers_held
    from planner.search.space import Group, Knobs
    assume(engine in ENGINES)
    i = data.draw(st.integers(0, p - 1))
    window = data.draw(st.integers(replicas, replicas * (p - i)))
    cluster = cluster_from_dict({"name": "one", "pools": [{"name": "p0", "gpu": gpu, "nodes": 1, "gpus_per_node": 8}]},
                                catalog)
    job = Job(catalog.model(model), mb * own * replicas, seq, engine=engine)
    scorer = Scorer(cluster, job)
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4, 8) if job.model.heads % t == 0 and job.model.ffn % t == 0]))
    sp, m = tp > 1, job.global_batch // mb
    exact = scorer.max_layers(cluster.pools[0], tp, Knobs(mb, zero, recompute, 1), sp, p, i, own, replicas, window)
    bounds = Bounds(scorer)
    in_flight = in_flight_micro_batches(Schedule.ONE_F_ONE_B, p, i, 1, own, window, m)
    cap = most_layers_held(*bounds._cap_coefficients(Group("p0", tp, replicas), mb, recompute, sp, replicas, zero),
                           in_flight)
    assert exact <= cap, (exact, cap)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_limit_keeps_exactly_the_settings_whose_bound_is_below_it(catalog, seed):
    """pipeline_s(limit=x) leaves out a setting only when the bound it returns (margin taken off) is at
    least x: the search prunes by the same number it ranks and verifies with."""
    cluster, job = _random_case(random.Random(seed), catalog)
    bounds = Bounds(Scorer(cluster, job))
    checked = 0
    for family in layout_families(cluster.pools, job.model, job.global_batch, partial=False):
        runs = family.runs(family.orders()[0])
        every = bounds.pipeline_s(runs, family.max_replicas_per_stage)
        for limit in sorted(set(every.values()))[::7]:
            cut = bounds.pipeline_s(runs, family.max_replicas_per_stage, limit=limit)
            assert cut == {k: b for k, b in every.items() if b < limit}, family
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("seed", [0, 5])
def test_a_family_screens_the_same_in_any_chunk(catalog, seed):
    """The search screens families in chunks of any size (one pass for every family whose capacity bound
    can win, once a threshold is known): a family's screen value must not depend on the others in its
    chunk, nor the caches the bounds keep on the order their calls come in."""
    cluster, job = _random_case(random.Random(seed), catalog, TIGHT_GPUS + GPUS, TIGHT_MODELS + MODELS)
    scorer = Scorer(cluster, job)
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=True))[:60]
    whole = screen_s(scorer, families).tolist()
    for size in (1, 7):
        parts = [screen_s(scorer, families[k:k + size]).tolist() for k in range(0, len(families), size)]
        assert [x for part in parts for x in part] == whole, size
    warm, cold = Bounds(scorer), None
    for family in families:
        warm.pipeline_s(family.runs(family.orders()[-1]), family.max_replicas_per_stage)
    for family in reversed(families[::max(1, len(families) // 8)]):   # caches filled by others: the same bounds
        cold = Bounds(Scorer(cluster, job))
        for order in family.orders():
            runs = family.runs(order)
            assert warm.pipeline_s(runs, family.max_replicas_per_stage) == cold.pipeline_s(
                runs, family.max_replicas_per_stage), (family, order)


@pytest.mark.parametrize("engine,model,ep,seed", [("fsdp", "llama-2-7b", 1, 0), ("fsdp", "gpt3-1.3b", 1, 1),
                                                  ("torchtitan", "llama-2-7b", 1, 2), ("torchtitan", "gpt3-1.3b", 1, 3),
                                                  ("megatron", "mixtral-8x7b", 2, 4), ("megatron", "mixtral-8x7b", 4, 5)])
def test_bounds_hold_for_the_hybrid_shard_and_expert_tp_knobs(catalog, engine, model, ep, seed):
    """The knobs the search scores beside each (micro-batch, interleave, recompute, ZeRO) setting, hybrid
    sharding (fsdp, torchtitan) and expert tensor parallelism 1 (Megatron-LM, MoE): their fast scores stay at or
    above the screen, the capacity bound and the pipeline bound of their setting, on clusters of several nodes."""
    rng = random.Random(seed)
    gpus = ["h100-sxm", "a100-80gb-sxm"] if ep > 1 else GPUS[:4]
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((2, 4)), "gpus_per_node": rng.choice((4, 8)),
              "inter_node_gbps": rng.choice((25, 100))} for j, gpu in enumerate(rng.sample(gpus, 2))]
    cluster = cluster_from_dict({"name": "random", "pools": pools, "between_pools_gbps": 25}, catalog)
    job = Job(catalog.model(model), rng.choice((32, 64)), 2048, engine=engine, expert_parallel=ep)
    scorer, per_node = Scorer(cluster, job), {p.name: p.gpus_per_node for p in cluster.pools}
    bounds, new_knobs = Bounds(scorer), 0
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=True, engine=engine))
    for family, screen in zip(families, screen_s(scorer, families)):
        capacity = bounds.capacity_s(family)
        for order in family.orders():
            layout = family.layout(order)
            pipeline = bounds.pipeline_s(family.runs(order), family.max_replicas_per_stage)
            for knobs in knob_settings(job.global_batch, layout, job.model.layers, engine=engine, job=job,
                                       gpus_per_node=per_node):
                cand = scorer.score(layout, knobs, precision_for(job, family.subset))
                if cand is None:
                    continue
                key = (knobs.micro_batch, knobs.interleave, knobs.recompute, knobs.zero_stage)
                assert cand.time_s >= pipeline[key] * (1 - 1e-9), (layout, knobs)
                assert cand.time_s >= max(capacity, screen) * (1 - 1e-9), (layout, knobs)
                new_knobs += bool(knobs.hybrid_shard or knobs.expert_tensor_parallel)
    assert new_knobs > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_the_caps_of_long_runs_in_numpy_equal_the_caps_stage_by_stage(catalog, seed, monkeypatch):
    """Bounds._run_caps takes a run of bound.LONG_RUN_STAGES or more stages in one numpy pass per group: the
    same caps (1F1B and interleaved, any order or fixed), so the same bounds, as one stage at a time."""
    rng = random.Random(seed)
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": 2, "gpus_per_node": 8, "inter_node_gbps": 100}
             for j, gpu in enumerate(rng.sample(TIGHT_GPUS, 2))]
    cluster = cluster_from_dict({"name": "long", "pools": pools, "between_pools_gbps": 100}, catalog)
    job = Job(catalog.model(rng.choice(TIGHT_MODELS)), 512, 2048)      # many micro-batches: long in-flight lists
    families = [f for f in layout_families(cluster.pools, job.model, job.global_batch, partial=False)
                if max(count for _, count in f.runs(f.orders()[0])) >= bound.LONG_RUN_STAGES][:10]
    calls = [(f.runs(order), f.max_replicas_per_stage, fixed) for f in families for order in f.orders()
             for fixed in (None, 0, 1)]
    in_numpy, long = Bounds(Scorer(cluster, job)), bound.LONG_RUN_STAGES
    found = [in_numpy.pipeline_s(runs, most, fixed=fixed) for runs, most, fixed in calls]
    monkeypatch.setattr(bound, "LONG_RUN_STAGES", 10 ** 9)
    plain = Bounds(Scorer(cluster, job))
    assert [plain.pipeline_s(runs, most, fixed=fixed) for runs, most, fixed in calls] == found
    long_caps = {key: caps for key, caps in in_numpy._run.items() if key[6] >= long}
    assert len(long_caps) > 20 and {key: plain._run[key] for key in long_caps} == long_caps


@given(st.data(), st.integers(2, 8), st.integers(1, 40), st.integers(1, 3))
@settings(max_examples=300, deadline=None)
def test_loops_of_neighbouring_stages_bound_the_simulated_fixed_1f1b(data, p, n, lanes):
    """score._pairs_s against planner.schedule's 1F1B in Megatron-LM's fixed order: lanes of n micro-batches each
    (the simulation's in-flight limits), random forward and backward times per stage and transfer delays per
    boundary and direction (slow ones among them, where the loops bind): never above the simulated makespan."""
    from planner.schedule import in_flight_limits
    from planner.search.score import _pairs_s
    forward = [data.draw(st.sampled_from((0.5, 1.0, 1.5, 3.0))) for _ in range(p)]
    backward = [f * data.draw(st.sampled_from((1.0, 2.0, 2.5))) for f in forward]
    down = [data.draw(st.sampled_from((0.0, 0.1, 1.0, 4.0))) for _ in range(p - 1)]
    up = [data.draw(st.sampled_from((0.0, 0.1, 1.0, 4.0))) for _ in range(p - 1)]

    def delay(i, r, i2, r2):
        return down[i] if i2 == i + 1 else up[i2] if i2 == i - 1 else 0.0

    counts = [[n] * lanes for _ in range(p)]
    sim = simulate(counts, [[f] * lanes for f in forward], [[b] * lanes for b in backward], delay,
                   Schedule.ONE_F_ONE_B)
    limits = [row[0] for row in in_flight_limits(counts)]
    bound = _pairs_s(n, [f + b for f, b in zip(forward, backward)], forward, [d + u for d, u in zip(down, up)],
                     limits)
    assert bound <= sim.makespan_s * (1 + 1e-9)
