"""Lower bounds on the fast iteration time of planner.search.score, and on planner.cost.evaluate's,
used to prune the search.

Two bounds, one cheap and one tight; both hold for every knob setting, layer split and sample
shares of what they bound, so a layout (or micro-batch size) whose bound cannot beat the
`rescore`-th best fast score found so far is skipped without losing a candidate that would
have been kept; and they stay below what evaluate reports for the same candidates
(tests/test_one_cost_model.py), which lets search prove its answer by evaluate.

Capacity bound, per family (the layouts that use the same GPUs): all the work at each GPU's
best per-sample rate over micro-batch sizes, no bubble, no communication:

    T >= B L / sum_g (replicas_g / best seconds per sample per layer on g)

Pipeline bound, per (stage runs, micro-batch size b, interleave v). score.Scorer.iteration_s is,
per kind of lane (replica r of every stage),

    T = max( max_i W_i + (sum_i t_i - t_c) / v + v sum_i x_i + (v - 1) x_wrap,  window ) + tail

(W_i the lane's replica of stage i over the iteration, t_i one micro-batch through it, c its
busiest stage, x_i the round trip across boundary i). Recomputation, ZeRO traffic and the head
only add time, so with tau_g one layer's forward + backward for one micro-batch on replica group g
(tensor-parallel collectives included), and L_i >= v the layers of stage i:

  (b1) W_i >= L_i a_i + e_i,  a_i = min over shares of max_g n_g tau_g (split.share_micro_batches
       solves it; every share vector, the baselines' even shares too, is at least as slow), e_i the
       head on the last stage: n h for a single group (its shares are even), min_g h_g for a mix
  (b2) M = max_i W_i >= M0 = max( (L + sum_i e_i / a_i) / sum_i 1 / a_i,  max_i v a_i + e_i )
       (from L_i <= (M - e_i) / a_i and sum_i L_i = L); in whole layers, L_i <= floor((M - e_i) / a_i)
       raises M0 to the least level at which the floors hold L (_whole_layer_level)
  (b3) 1F1B only: t_i >= L_i beta_i, beta_i = min_g tau_g (the busiest lane's own group is at
       least the fastest); the p - 1 stages other than c hold v layers each and >= L - M / a_min
       together, so fill >= sum_{i != c} beta_i + beta_min * max(0, L - M / a_min - (p - 1)),
       with sum_{i != c} beta_i >= sum_i beta_i - max_i beta_i (c is not known). M + that bound
       is non-decreasing in M (beta_min <= a_min), so T is bounded at M = M0. Interleaved
       settings take no such fill: the simulated interleaved schedule hides more than Narayanan's.
  (b4) transfers: the least round trips any lane has across the boundaries every order has (exact
       inside each chain run, placement.p2p_floor_s between runs), once (interleaved too)
  (b5) tail >= stage 0's optimizer step and (ZeRO-1/2) weight all-gather, c per layer, for its
       fewest layers (stage 0 ends the pipeline; later stages' tails may hide in its drain)
  (b6) memory: L_i <= cap_i, an upper bound on the layers stage i can hold at this recompute
       setting and ZeRO stage (weights, gradients and optimizer states sharded as that stage
       shards them, no embedding or head), with the fewest in-flight micro-batches its shares
       (optimal or even) allow, so M0 is the water level of
       sum_i min(cap_i, (M - e_i) / a_i) = L; a setting with sum_i cap_i < L cannot fit
  (b7) the in-flight window of stage 0's busiest lane: n / k (L min_g tau_g + transfers), with n
       its micro-batches and k its in-flight limit (_window_ratio)
  (b8) one run of identical stages (mixed layouts): its slowest group's lane takes a micro-batch
       through every layer, L max_g tau_g + transfers
  (b9) and each group's lane its window: max(1, n_g / (W n_g / m + 1)) L tau_g
  (b10) 1F1B: the upstream fill, proven against the simulation: the busiest replica of a stage c
       starts after a micro-batch's forwards through stages 0..c-1 and its last backward still runs
       back through them, so T >= min over splits of max_c (a_c L_c + e_c + sum_{i<c} phi_i L_i)
       (phi_i the least forward + least backward per layer), bounded below by the Lagrangian of that
       LP (_fill_s, with its proof); a run of unknown place counts only the stages known to come
       before its own (the placed runs and its earlier stages). On p like stages of n micro-batches
       it is about half of Narayanan's (p - 1) / n: the part upstream of the stage that ends last
  (b11) 1F1B, order known: the fill around the busiest stage, proven against the simulation: its
       busiest replica also idles before its first backward and after its last forward while a
       micro-batch goes down the later stages and back (its in-flight limit k lets it run k
       forwards, k - 1 backwards meanwhile), so T >= W + P_c + max(0, 2 D - (k - 1) W / n); at the
       whole-layer level with every stage's ceiling (level - e_i) / a_i, least over the stage c
       (_busiest_fill_s, with its proof; on like stages it is Narayanan's (p - 1) t)
  (b12) interleaved (v > 1), proven against the simulation: a stage holds whole virtual stages (the
       search's splits hand out layers v at a time), so (b2)'s level counts units of v layers,
       L_i <= v floor((M - e_i) / (a_i v)); and (b10)'s upstream fill holds with phi_i / v (a worker's
       first pass is chunk 0's forward of its first micro-batch, its last chunk 0's backward of its
       last, each chunk 1/v of the stage: _interleaved_fill_s, with its proof); about half of
       Narayanan's (p - 1) t / v on like stages. Transfers are not proven there: a busiest stage 0
       runs other chunks while a micro-batch crosses the boundaries
  (b13) interleaved, order known: at a busiest work M every stage holds at most v floor((M - e_i) /
       (a_i v)) layers, so each at least L less the most the others hold, and (b12)'s constraint of
       every stage c with those least layers bounds T at M; least over the levels M >= (b2)'s
       (_interleaved_level_fill_s, with its proof; Narayanan's (p - 1) t / v on like stages where one
       more virtual stage on the busiest costs more than it)
Ring collectives enter without their latency terms, over the most bandwidth any placement gives
the stage's ring (placement.dp_link_ceiling), gradients at the fewest bytes the engine puts on the
wire for the job's precisions (least_grad_wire_bytes); ZeRO-2/3's tau_g is the forward beside the
weight all-gather plus the backward beside all-gather + gradient reduce-scatter per layer, each
max(pass, collective) + OVERLAP_COMPUTE_SLOWDOWN min(pass, collective)
(dataparallel.pass_with_zero_floor_s). The bound is per recompute setting
and ZeRO stage. FILL_SLACK is the margin for what is estimated, not bounded: a 1F1B bound (v = 1) is
max((1 - FILL_SLACK) x the whole, the busiest stage's level + transfers, or the windows, + tail, the
upstream fill (b10) + tail, the level + the fill around the busiest stage (b11) + tail): the margin
never takes it below its proven terms (b1, b2, b4-b11), so it comes off Narayanan's fill (b3) alone
where that fill is large enough to hold it; an interleaved bound (v > 1) is max((1 - FILL_SLACK) x
the whole, the level in whole virtual stages or the windows (b8) + tail, the upstream fill (b12) +
tail, the level with the fill of the layers every stage must hold at it (b13) + tail): the margin comes
off its transfers (b4), which the simulated interleaved schedule hides behind stage 0's other chunks
on a few deep pipelines of few micro-batches, and never takes it below its proven terms (b1, b2, b5,
b6, b8, b12, b13). Interleaved plans (v > 1) also need every single-pool stage's
even shares in whole groups of p.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from planner.comm import activation_message_bytes, ring_s_per_byte
from planner.compute import ACT_BYTES
from planner.dataparallel import hybrid_zero_floor, pass_with_zero_floor_s, step_s, zero_per_micro_batch_floor
from planner.memory import FRAMEWORK_OVERHEAD_BYTES, most_layers_held, state_bytes_per_param
from planner.placement import dp_link_ceiling, p2p_floor_s
from planner.schedule import interleaved_in_flight, window_in_flight_ceiling, window_in_flight_limit
from planner.search.score import Scorer
from planner.search.split import share_micro_batches
from planner.search.space import (INTERLEAVES, ZERO_STAGES, zero_stages, Family, Group, Layout, micro_batch_sizes,
                                  searched_recomputes)
from planner.types import Precision, Recompute

Runs = tuple[tuple[tuple[Group, ...], int], ...]


class StageRates(NamedTuple):
    """A stage's figures for one ZeRO stage (Bounds._stage_rates): (b1)'s a (its busiest replica's
    micro-batches x tau per layer), (b3)'s beta (its fastest group's tau) and beta_hi (its slowest's),
    (b5)'s c (optimizer step and ZeRO-1/2 gather per layer), whether the head's time e counts (not when
    ZeRO-2/3 traffic may hide it), (b9)'s lanes (micro-batches, tau) per group, and (b10)'s phi (its
    least forward + its least backward per layer: two micro-batches may run on different groups)."""
    a: float
    beta: float
    c: float
    keep_head: bool
    beta_hi: float
    lanes: tuple[tuple[int, float], ...]
    phi: float


class StageFigures(NamedTuple):
    """Bounds._stage_rates of a stage of some groups: StageRates per ZeRO stage, the head's time e,
    and the stage's shares (micro-batches per replica)."""
    per_zero: dict[int, StageRates]
    head: float
    shares: tuple[int, ...]


# Narayanan's fill (b3) is an estimate of the simulated 1F1B bubble, not a bound on it (the
# simulation hides the stages after the busiest one behind its own backward passes), and the
# interleaved busiest-stage level + transfers is beaten by the simulated interleaved schedule on a
# few deep pipelines of few micro-batches (stage 0 busiest: it hides the transfers). Measured by `python benchmarks/fast_vs_evaluate.py
# --seeds 0:100 --job-kind K` (100 random small clusters, about 440,000 candidates over pretrain,
# lora and qlora): without slack the pipeline bound is above planner.cost.evaluate on about 0.3% of
# candidates, by at most 7.1% (pretrain) and 10.5% (LoRA, QLoRA). The pipeline bounds give up
# FILL_SLACK so that they stay below evaluate with a margin (0 candidates above at 12%); this is a
# measured margin, not a proof (docs/cost-model.md, "One cost model in the search").
FILL_SLACK = 0.12
EXACT_RUN_REPLICAS = 64     # runs of at most this many replicas get exact transfers in the bounds
LONG_RUN_STAGES = 16        # runs of at least this many stages get their memory caps in numpy (fewer: faster in Python)


class Bounds:
    def __init__(self, scorer: Scorer, even: bool = False):
        """`even`: bounds for even layer splits only (the baselines' plans), which fix every stage's
        layers to floor or ceil of L / p: each stage then holds at least floor(L / (p v)) v layers,
        which raises the busiest stage and the fill of (b2) and (b3)."""
        self.scorer = scorer
        self.even = even
        self._rates: dict = {}
        self._caps: dict = {}
        self._run: dict = {}
        self._held: dict = {}
        self._best_rates: dict = {}
        self._zeros: dict = {}
        self._flights: dict = {}
        self.transfers = TransferFloors(scorer)

    def sharing(self, even: bool) -> "Bounds":
        """Bounds of the same scorer for `even` splits or not, sharing this one's caches (per stage
        rates, memory caps, transfers: none depends on the split), so that the baselines and a
        proof pass do not recompute what the search already has."""
        if even == self.even:
            return self
        other = Bounds(self.scorer, even)
        other._rates, other._caps, other._run, other._held = self._rates, self._caps, self._run, self._held
        other._best_rates, other._zeros, other._flights = self._best_rates, self._zeros, self._flights
        other.transfers = self.transfers
        return other

    def capacity_s(self, family: Family) -> float:
        """The capacity bound of every layout of `family`."""
        s, best = self.scorer, self._best_rates
        sp = max(family.tps) > 1
        capacity, lanes = 0.0, family.lanes
        for pool, t, w in zip(family.subset, family.tps, family.width):
            key = (pool.name, t, sp)          # the listing asks this of every family: its rates kept here
            rate = best.get(key)
            if rate is None:
                rate = best[key] = s.best_sample_layer_s(pool, t, sp)
            capacity += w * lanes / rate
        return s.job.global_batch * s.model.layers / capacity

    def pipeline_s(self, runs: Runs, max_replicas: int, any_order: bool = False,
                   limit: float = math.inf, only=None, fixed: int | None = None) -> dict[tuple[int, int, Recompute, int], float]:
        """The pipeline bound for every (micro-batch size, interleave, recompute, ZeRO stage) a
        layout of these runs may use; settings that cannot fit in memory are left out, and so
        are settings whose bound is at least `limit` (the caller's threshold, in seconds) and,
        given `only`, settings not in it (those an any-order bound already ruled out).

        `any_order`: a bound for every order of the runs at once (one call instead of one per pool
        order): each run's memory cap as if it were last (fewest in-flight micro-batches, so the
        largest cap and the lowest water level), no head time e, and only the transfers inside a
        run (every order has them). Each relaxation only lowers the bound of (b2)-(b4), and
        M + fill stays non-decreasing in M, so it is at most the bound of any one order.
        `fixed`: a bound for every order that starts with the first `fixed` runs as given (the
        rest in any order): those runs have their exact stage positions and 1F1B windows (the
        runs after them form the same set whatever their order) and the transfers between them;
        the others are relaxed as for any_order. fixed = 0 is any_order; fixed = len(runs), the
        default without any_order, is the order as given."""
        s = self.scorer
        L, B = s.model.layers, s.job.global_batch
        p = sum(count for _, count in runs)
        sp = any(g.tp > 1 for groups, _ in runs for g in groups)
        mixed = any(len(groups) > 1 for groups, _ in runs)
        zeros = zero_stages(s.job.offload, max_replicas * s.cp)
        # each run's last stage index and the replicas of it and every later stage (its 1F1B window)
        replicas = [sum(g.count for g in groups) for groups, _ in runs]
        last, windows, before, after = [], [], -1, sum(r * c for r, (_, c) in zip(replicas, runs))
        for r, (_, count) in zip(replicas, runs):
            before += count
            after -= r * count
            last.append(before)
            windows.append(r + after)
        if fixed is None:
            fixed = 0 if any_order else len(runs)
        any_order = fixed < len(runs)           # no head time, and only known transfers
        last[fixed:], windows[fixed:] = [p - 1] * (len(runs) - fixed), replicas[fixed:]
        out = {}
        recomputes = searched_recomputes(s.options.flash_attention, mixed, s.job.engine)
        for mb in (micro_batch_sizes(B) if only is None else sorted({key[0] for key in only})):
            if B // mb < max_replicas:
                break
            transfers = self.transfers.floor_s(runs, mb, fixed)
            fits = False
            m = B // mb
            for v in INTERLEAVES:
                if v > 1 and (p == 1 or L % v):
                    continue
                if p * v > L or v > 1 and any(len(groups) == 1 and (m % groups[0].count or (m // groups[0].count) % p)
                                              for groups, _ in runs):
                    continue     # more stages than layers, or uneven interleaved groups: no setting of any rates
                ratio = None
                for rc in recomputes:
                    asked = zeros if only is None else tuple(zero for zero in zeros if (mb, v, rc, zero) in only)
                    if not asked:
                        continue
                    if ratio is None:
                        ratio = self._window_ratio(runs, mb, fixed, v) if p > 1 and v == 1 else 0.0
                    found, fit = self._pipeline_s(runs=runs, p=p, mb=mb, v=v, rc=rc, sp=sp, zeros=asked, last=last,
                                                  windows=windows, transfers=transfers, no_head=any_order,
                                                  limit=limit, window_ratio=ratio, first_known=fixed >= 1,
                                                  fixed=fixed)
                    fits |= fit and v == 1
                    for zero, bound in zip(asked, found):     # margins taken in _pipeline_s
                        if bound < limit and (only is None or (mb, v, rc, zero) in only):
                            out[(mb, v, rc, zero)] = bound
            if not fits and only is None:
                break   # nothing fits at this micro-batch without interleave: nothing larger fits either
        return out

    def _pipeline_s(self, runs: Runs, p: int, mb: int, v: int, rc: Recompute, sp: bool, zeros,
                    last: list[int], windows: list[int], transfers: float, no_head: bool = False,
                    limit: float = math.inf, window_ratio: float = 0.0,
                    first_known: bool = True, fixed: int | None = None) -> tuple[list[float], bool]:
        """(bound per ZeRO stage, whether some ZeRO stage might fit). A ZeRO stage whose bound
        without memory caps is already at least `limit` is not capped (inf is returned for it: the
        caller drops it as it would its bound). `window_ratio`: n / k of (b7);
        `fixed`: the runs whose positions are known (pipeline_s), for (b10)."""
        L, m = self.scorer.model.layers, self.scorer.job.global_batch // mb
        # (pipeline_s leaves out more stages than layers and uneven interleaved groups)
        # stages of run k: (k, how many, their rates, the head's time, which part of the run: "all" of a
        # run before the last; the last run's "others" and "last")
        stages = []
        for k, (groups, count) in enumerate(runs):
            rates = self._stage_rates(groups, mb, rc, sp)
            if rates is None:
                return [math.inf] * len(zeros), False
            per_zero, head, shares = rates
            head = 0.0 if no_head else head
            if k < len(runs) - 1:
                stages.append((k, count, per_zero, 0.0, "all"))
            else:                                # only the very last stage holds the head
                if count > 1:
                    stages.append((k, count - 1, per_zero, 0.0, "others"))
                stages.append((k, 1, per_zero, head, "last"))
        out, fits = [], False
        one_run = len(runs) == 1
        total_replicas = sum(sum(g.count for g in groups) * count for groups, count in runs) if one_run else 0
        fewest = (L // (p * v)) * v if self.even else v                           # layers of any stage
        known = len(runs) if fixed is None else fixed      # runs of known place
        lanes_of = None                          # (b11)'s lanes, made where (b11) is asked
        for zero in zeros:
            picked = []                          # each stage's (a, beta, phi, e) at this ZeRO stage
            a_min = beta_min = math.inf          # beta_min: also the least beta of any lane, for (b7)
            slow_lane = lane_window = 0.0
            beta_max = beta_sum = floor = inverse = weighted = 0.0
            first_c = math.inf
            # the running minima and maxima as comparisons (each keeps the earlier value on ties, as min and max do)
            for k, count, per_zero, e, part in stages:
                a, beta, c, keep_e, beta_hi, lanes, phi = per_zero[zero]
                if one_run:
                    if beta_hi > slow_lane:
                        slow_lane = beta_hi
                    if v == 1:
                        x = max([_lane_window_ratio(n, total_replicas, m) * tau for n, tau in lanes])
                        if x > lane_window:
                            lane_window = x
                if not keep_e:
                    e = 0.0
                picked.append((a, beta, phi, e))
                if a < a_min:
                    a_min = a
                if beta < beta_min:
                    beta_min = beta
                if beta > beta_max:
                    beta_max = beta
                beta_sum += count * beta
                x = fewest * a + e
                if x > floor:
                    floor = x
                inverse += count / a
                weighted += count * e / a
                if (k == 0 or not first_known) and c < first_c:
                    first_c = c
            tail = fewest * first_c                                                                # (b5)
            others = fewest / v * (beta_sum - beta_max)

            window = max(window_ratio * (L * beta_min + transfers),                               # (b7)
                         L * slow_lane + transfers,                                             # (b8)
                         lane_window * L)                                                       # (b9)

            def total(level, with_window=True):
                busiest = max(level, floor)
                fill = (others + beta_min / v * max(0.0, L - busiest / a_min - (p - 1) * fewest)   # (b3)
                        if v == 1 else 0.0)
                return max(busiest + fill + transfers, window if with_window else 0.0) + tail    # (b4)

            # `limit` applies to the bound as returned, margin taken off; a bound at or above it is dropped, so its
            # terms come cheapest first: the fractional level is at most the whole-layer (or whole virtual stage)
            # one, and M + fill does not fall with M (to rounding: a hair above the limit for that). The first
            # test is total(level, with_window=False) written out (most settings end here).
            level = (L + weighted) / inverse
            busiest = max(level, floor)
            fill = others + beta_min / v * max(0.0, L - busiest / a_min - (p - 1) * fewest) if v == 1 else 0.0
            if ((max(busiest + fill + transfers, 0.0) + tail) * (1 - FILL_SLACK) >= limit + abs(limit) * 1e-12
                    or v == 1 and max(busiest + transfers, window) + tail >= limit):
                out.append(math.inf)
                fits = True                      # unknown: the caller must not stop at this micro-batch
                continue
            rows = [(count, a, e, part) for (_, count, _, _, part), (a, _, _, e) in zip(stages, picked)]
            betas = [beta for _, beta, _, _ in picked]
            parts = [(k, count, a, phi, e) for (k, count, _, _, _), (a, _, phi, e) in zip(stages, picked)]
            uncapped = _whole_layer_level(L // v, [(c, a * v, e, math.inf) for c, a, e, _ in rows], level)  # (b2), (b12)
            # what FILL_SLACK does not lower: (b10) and the level + transfers (1F1B), (b12) and the level (v > 1)
            if v == 1:
                proven = max(max(uncapped, floor) + transfers, window) + tail
                if proven < limit:
                    proven = max(_fill_s(L, fewest, parts, known), max(uncapped, floor) + transfers, window) + tail
            else:
                proven = max(_interleaved_fill_s(L, fewest, parts, known, v), max(uncapped, floor), window) + tail
            if total(uncapped, with_window=False) * (1 - FILL_SLACK) >= limit or proven >= limit:   # no need to cap
                out.append(math.inf)
                fits = True                      # unknown: the caller must not stop at this micro-batch
                continue
            caps = self._caps_by_part(runs=runs, mb=mb, v=v, rc=rc, sp=sp, p=p, last=last, windows=windows, m=m,
                                      zero=zero, fewest=fewest)
            if caps is None:                     # some stage cannot hold the layers it must
                out.append(math.inf)
                continue
            capped = [(c, a, e, caps[k][part]) for (c, a, e, part), (k, _, _, _, _) in zip(rows, stages)]
            busiest = _whole_layer_level(L // v, [(c, a * v, e, cap / v) for c, a, e, cap in capped],  # (b2), (b6)
                                         _water_level(L, capped))
            if busiest == math.inf:
                out.append(math.inf)
                continue
            fits = True
            level = max(busiest, floor)
            placed = _placed_fill(L, v, level, capped, betas) if v == 1 else 0.0
            bound = max(total(busiest), placed + level + transfers + tail)
            if v == 1:      # the margin comes off the estimated fill only: never below the busiest stage's level
                bound = max(bound * (1 - FILL_SLACK), max(level + transfers, window) + tail, proven)
                if bound < limit and known == len(runs):   # (b11) passes over every stage: only where it may tell
                    if lanes_of is None:         # a one-group run's lane
                        lanes_of = [(-(-m // d), d, windows[k] + (d if part == "others" else 0))
                                    if len(runs[k][0]) == 1 else None
                                    for k, _, _, _, part in stages for d in (runs[k][0][0].count,)]
                    shape = [(c, a, phi, e, c * cap, lane) for (c, a, e, cap), (_, _, _, phi, _), lane
                             in zip(capped, parts, lanes_of)]
                    bound = max(bound, level + _busiest_fill_s(L, fewest, level, shape, m) + tail)
            else:           # the margin comes off the transfers and the fill: never below (b1), (b2), (b8), (b12)
                bound = max(bound * (1 - FILL_SLACK), max(level, window) + tail, proven)
                if bound < limit and known == len(runs):   # (b13): the stages in order
                    shape = [(c, a, phi, e, c * cap) for (c, a, e, cap), (_, _, _, phi, _) in zip(capped, parts)]
                    bound = max(bound, _interleaved_level_fill_s(L, v, fewest, level, shape) + tail)
            out.append(bound)
        return out, fits

    def _caps_by_part(self, runs: Runs, mb, v, rc, sp, p, last, windows, m, zero, fewest) -> list[dict] | None:
        """(b6) per run: the cap of its last stage, the average over all its stages and over the others;
        None where some stage cannot hold `fewest` layers."""
        caps = []
        for k, (groups, count) in enumerate(runs):
            cap_last, before, least = self._run_caps(groups=groups, mb=mb, v=v, rc=rc, sp=sp, p=p, last_stage=last[k],
                                                      window=windows[k], count=count, m=m, zero=zero)
            if least < fewest:
                return None
            caps.append({"last": cap_last, "all": (cap_last + before) / count,
                         "others": before / (count - 1) if count > 1 else math.inf})
        return caps

    def _window_ratio(self, runs: Runs, mb: int, fixed: int, v: int) -> float:
        """r of (b7) for the first stage's busiest lane, at least: the first run's when it is fixed,
        else the least over the runs. With n the lane's micro-batches and k its in-flight limit,
        r = n / k (1F1B) or n (v + 1) / 2 / k (interleaved, k in chunks: score._window_s holds each
        chunk for its own way down and back and half of the other chunks' rounds, at least
        (v + 1) / 2 times (sum_i t_i / v + 2 sum_i x_i)). A single-group stage has even shares
        (n = ceil(m / d), k exactly); a mixed stage's shares vary (the baselines split evenly), so
        there n is at least n0 = ceil(m / R), its replicas' least busiest share, and r is taken
        at n0 with k's ceiling relaxed (1F1B: k <= W n / m + 1, n / (W n / m + 1) grows with n;
        interleaved: n / min(K, n v) grows with n)."""
        m = self.scorer.job.global_batch // mb
        p = sum(count for _, count in runs)
        total = sum(sum(g.count for g in groups) * count for groups, count in runs)
        ratios = []
        for groups, _ in (runs[:1] if fixed >= 1 else runs):
            n = -(-m // sum(g.count for g in groups))
            if v > 1:
                ratios.append(n * (v + 1) / 2 / interleaved_in_flight(p, 0, v, n) / v)
            elif len(groups) == 1:
                ratios.append(n / window_in_flight_limit(total, n, m))
            else:
                ratios.append(n / window_in_flight_ceiling(total, n, m))
        return min(ratios)

    def _stage_rates(self, groups: tuple[Group, ...], mb: int, rc: Recompute, sp: bool):
        """({zero: (a, beta, c, whether e counts)}, e, shares) of (b1), (b3), (b5) for a stage of
        these groups, or None if its shares fail."""
        key = (groups, mb, rc, sp)
        found = self._rates.get(key, self)          # self: not computed yet (None: shares that fail)
        if found is not self:
            return found
        s = self.scorer
        shares = s.stage_shares(groups, mb, rc, sp)
        if shares is None:
            self._rates[key] = None
            return None
        d, zero_figures = self._zero_figures(groups)
        m = s.job.global_batch // mb
        # what no ZeRO stage changes, per group: its passes and its busiest replica's micro-batches
        passes, k = [], 0
        for g in groups:
            passes.append((g, s.pass_times(s.pools[g.pool], g.tp, mb, rc, sp), max(shares[k:k + g.count])))
            k += g.count
        per_zero, timed = {}, None
        for zero in ZERO_STAGES:
            zf, zb, c = zero_figures[zero]
            if timed is None or (zf, zb) != timed[0]:   # ZeRO-0 and 1 add nothing to a pass: the same figures
                a = beta_hi = 0.0
                beta = least_f = least_b = math.inf
                taus, lanes = [], []
                for (g, (f, b, _, _), most) in passes:
                    # (a floor of 0 leaves a pass as it is: max(t, 0) + slowdown min(t, 0) = t + 0.0)
                    forward = f if zf == 0 else pass_with_zero_floor_s(f, zf)
                    backward = b if zb == 0 else pass_with_zero_floor_s(b, zb)
                    tau = forward + backward
                    least_f = min(least_f, forward)          # (b10)'s phi
                    least_b = min(least_b, backward)
                    a, beta_hi, beta = max(a, most * tau), max(beta_hi, tau), min(beta, tau)
                    taus += [tau] * g.count
                    # (b9): the group's busiest replica holds at least this many micro-batches under the
                    # search's shares and under even ones (the baselines)
                    lanes.append((min(most, m // d), tau))
                if len(groups) > 1 and zb > 0:   # the shares balance tau without ZeRO: any shares do this well
                    a = max(n * tau for n, tau in zip(share_micro_batches(m, taus), taus))
                timed = ((zf, zb), (a, beta, beta_hi, tuple(lanes), least_f + least_b))
            a, beta, beta_hi, lanes, phi = timed[1]
            # ZeRO-2/3 traffic may hide the head's time on the last stage: keep e only without it
            per_zero[zero] = StageRates(a, beta, c, zero < 2 or d == 1, beta_hi, lanes, phi)
        heads = [most * (hf + hb) if len(groups) == 1 else hf + hb for _, (_, _, hf, hb), most in passes]
        self._rates[key] = StageFigures(per_zero, min(heads), shares)
        return self._rates[key]

    def _zero_figures(self, groups: tuple[Group, ...]) -> tuple[int, dict[int, tuple[float, float, float]]]:
        """(the stage's replicas, {zero: (ZeRO's forward and backward collective floors per micro-batch and
        layer, (b5)'s c)}) of a stage of these groups: what _stage_rates takes from its links and pools alone,
        the same for every micro-batch size and recompute setting."""
        found = self._zeros.get(groups)
        if found is not None:
            return found
        s = self.scorer
        d = sum(g.count for g in groups)
        bw = dp_link_ceiling(s.cluster, [(s.pools[g.pool], g.tp, g.count) for g in groups])
        spread = ring_s_per_byte(d, bw)                   # ring collective seconds per byte, at most
        wire = s.states.weight_comm_bytes
        weight_bytes = s.layer_params_dense / min(g.tp for g in groups) * wire
        figures, grad_wire = {}, least_grad_wire_bytes(s)
        for zero in ZERO_STAGES:
            zf, zb = zero_per_micro_batch_floor(zero, weight_bytes, d, spread, wire, s.states.trainable, grad_wire)
            hybrid = self._hybrid_floors(groups, d, bw, zero)       # the hybrid-shard knob's, where offered
            if hybrid:
                zf, zb = min([zf] + [h[0] for h in hybrid]), min([zb] + [h[1] for h in hybrid])
            gather_spread = min([spread] + [ring_s_per_byte(h[2], bw) for h in hybrid])
            c = 0.0
            for g in groups:
                # (b5): the optimizer step over this group's shard of one layer, and the weight
                # all-gather after it under ZeRO-1/2 (ring bandwidth term only)
                step = step_s(s.states, zero, s.layer_params_held / g.tp, d, s.pools[g.pool])
                gather = (gather_spread * s.layer_params_dense / g.tp
                          * s.states.trainable * s.states.trained_weight_bytes) if zero in (1, 2) else 0.0
                c = max(c, step + gather)
            figures[zero] = (zf, zb, c)
        found = self._zeros[groups] = (d, figures)
        return found

    def _hybrid_floors(self, groups: tuple[Group, ...], d: int, bw: float, zero: int) -> list[tuple]:
        """(forward, backward, group) floors of ZeRO's collectives (dataparallel.hybrid_zero_floor) for each
        hybrid-shard group space.hybrid_shard_of may give a stage of these groups: a node's replicas of some
        pool at a replica width of the stage's (the layout's fewest), h >= 2 dividing its d replicas and below
        d, at most its own pools' node's replicas, on the faster of the nodes' links and the stage's ring
        ceiling `bw`; [] where the engine has no hybrid sharding or it does not apply."""
        s = self.scorer
        if not s.engine.space.hybrid_shard or zero < 2 or s.job.expert_parallel > 1:
            return []
        most = min(s.pools[g.pool].gpus_per_node // g.tp for g in groups)
        groups_of = ({p.gpus_per_node // g.tp for p in s.pools.values() for g in groups}   # one tp a layout
                     if not (s.engine.space.tp_per_stage or s.engine.space.mixed_stages) else range(2, most + 1))
        link = max([bw] + [s.pools[g.pool].gpu.link_bw_bytes_per_s for g in groups])
        wire = s.states.weight_comm_bytes
        weight_bytes = s.layer_params_dense / min(g.tp for g in groups) * wire
        grad_wire = least_grad_wire_bytes(s)
        return [hybrid_zero_floor(zero, weight_bytes, d, h, link, bw, wire, s.states.trainable, grad_wire) + (h,)
                for h in sorted(groups_of) if 2 <= h <= most and h < d and d % h == 0]

    def _run_caps(self, groups, mb, v, rc, sp, p, last_stage, window, count, m, zero) -> tuple[int, int, int]:
        """(b6) for the `count` stages of a run ending at stage `last_stage` with 1F1B window
        `window`: (layers its last stage can hold, the sum over its other stages, the fewest any
        stage can hold). The j-th stage before the run's last holds the in-flight micro-batches
        of window + j d (d its replicas) at position last_stage - j; a water level over a run
        with the average cap of its stages holds no fewer layers than one with each stage's own
        (sum_j min(cap_j, x) <= min(sum_j cap_j, count x)), so the level stays a lower bound."""
        # 1F1B in-flight counts read the windows only, interleaved ones the positions only
        # (schedule.in_flight_micro_batches): the key holds what the caps read, so other orders share them
        key = (groups, mb, v, rc, sp, zero, count) + ((window,) if v == 1 else (p, last_stage))
        found = self._run.get(key)
        if found is None:
            owns, d, coefficients, held = self._stage_caps(groups, mb, rc, sp, m, zero)
            flights, more, columns = self._run_flights(key[:5] + key[6:], owns, d, m)
            if columns is not None:                 # a long run: each group's caps in one numpy pass
                least = None
                for (free, states, act), column in zip(coefficients, columns):
                    held_g = most_layers_held(free, states, act, column)
                    least = held_g if least is None else np.minimum(least, held_g)
                caps = [int(cap) for cap in least.tolist()]
            else:
                caps = []
                for flight in flights:
                    cap = held.get(flight)
                    if cap is None:
                        cap = held[flight] = (most_layers_held(*coefficients[0], flight[0]) if len(flight) == 1 else
                                              min([most_layers_held(free, states, act, f)
                                                   for (free, states, act), f in zip(coefficients, flight)]))
                    caps.append(cap)
            found = self._run[key] = (caps[0], sum(caps[1:]) + caps[-1] * more, min(caps))
        return found

    def _run_flights(self, key: tuple, owns: list[int], d: int, m: int) -> tuple[list[tuple], int, list | None]:
        """The in-flight micro-batches of each group of each stage of a run (_run_caps, whose key less the
        ZeRO stage is `key`: no ZeRO stage changes them), last stage first, up to the first stage where
        every group holds all its own (every later stage holds as many), how many stages come after it, and
        for LONG_RUN_STAGES or more stages each group's counts as an array (their caps in one numpy pass)."""
        found = self._flights.get(key)
        if found is None:
            v, count = key[2], key[5]
            flights, more = [], 0
            if v == 1 and len(owns) == 1:           # one group (chains): the same counts, without the lists
                window, own = key[6], owns[0]
                for j in range(count):
                    held = window_in_flight_limit(window + j * d, own, m)
                    flights.append((held,))
                    if held >= own:
                        more = count - j - 1
                        break
            else:
                for j in range(count):
                    if v == 1:
                        flight = tuple([window_in_flight_limit(key[6] + j * d, own, m) for own in owns])
                    else:
                        flight = tuple([interleaved_in_flight(key[6], key[7] - j, v, own) for own in owns])
                    flights.append(flight)
                    if all([f >= own for f, own in zip(flight, owns)]):   # every later stage holds as many
                        more = count - j - 1
                        break
            columns = [np.array(column) for column in zip(*flights)] if len(flights) >= LONG_RUN_STAGES else None
            found = self._flights[key] = (flights, more, columns)
        return found

    def _stage_caps(self, groups, mb, rc, sp, m, zero) -> tuple[list[int], int, list[tuple], dict]:
        """(each group's busiest micro-batches, the stage's replicas, each group's _cap_coefficients, and
        the stage's cap by its groups' in-flight counts so far) of a stage of these groups."""
        key = (groups, mb, rc, sp, zero)
        found = self._held.get(key)
        if found is None:
            shares = self._rates[(groups, mb, rc, sp)][2]
            d = sum(g.count for g in groups)
            owns, k = [], 0
            for g in groups:
                own = max(shares[k:k + g.count])
                owns.append(min(own, m // d) if len(groups) > 1 else own)   # even shares may give fewer
                k += g.count
            found = self._held[key] = (owns, d, [self._cap_coefficients(g, mb, rc, sp, d, zero) for g in groups], {})
        return found

    def _cap_coefficients(self, g: Group, mb, rc, sp, d, zero) -> tuple[float, float, float]:
        """(free bytes, state bytes per layer, activation bytes per layer and in-flight micro-batch)
        of a GPU of group g at this ZeRO stage and sharding over d, for memory.most_layers_held (the
        GPU without the embedding and the head, so at least as many layers as planner.memory allows)."""
        key = (g.pool, g.tp, mb, rc, sp, d, zero)
        if key not in self._caps:
            s = self.scorer
            per_param = sum(state_bytes_per_param(zero, d, s.states))
            pool = s.pools[g.pool]
            free = pool.gpu.mem_bytes - FRAMEWORK_OVERHEAD_BYTES - s.workspace_bytes(mb, g.tp, sp, rc)
            self._caps[key] = (free, s.layer_params_held / g.tp * per_param, s.activation_bytes(mb, g.tp, sp, rc))
        return self._caps[key]


class TransferFloors:
    """(b4): the least transfer time a pipeline of some runs has across its boundaries, under any
    placement or for the layouts' own (cached per run and boundary; Bounds and its sharing() copies
    hold one)."""

    def __init__(self, scorer: Scorer):
        self.scorer = scorer
        self._cache: dict = {}
        self._runs: dict = {}

    def floor_s(self, runs: Runs, mb: int, fixed: int | None = None) -> float:
        """sum_i x_i of (b4), at least, over the boundaries every order starting with the first
        `fixed` runs has (all boundaries when `fixed` is None or len(runs)): inside each chain run
        exactly (a chain's run is its pool's only user, and placement packs its replicas stage by
        stage, so their nodes and transfers do not depend on the order: links.LayoutLinks of the
        run alone); inside a mixed run (one order only) the layout's own; and between consecutive
        fixed runs the least they can cost under any placement (placement.p2p_floor_s)."""
        fixed = len(runs) if fixed is None else fixed
        total, prev = 0.0, None
        for k, (groups, count) in enumerate(runs):
            if prev is not None and k < fixed:
                total += self.boundary_floor_s(prev, groups, mb)
            if count > 1:
                total += self.run_s(groups, count, mb)
            prev = groups
        return total

    def run_s(self, groups: tuple[Group, ...], count: int, mb: int) -> float:
        """The least round trips any lane has inside a run of `count` stages of these groups:
        exact (links.LayoutLinks of the run alone) where the run is small enough that computing
        it costs little; else count - 1 times the boundary floor."""
        key = (groups, count, mb)
        if key not in self._runs:
            if count * sum(g.count for g in groups) <= EXACT_RUN_REPLICAS:
                self._runs[key] = self.scorer.layout_links(_layout_of(((groups, count),)), mb).least_round_trips_s
            else:
                self._runs[key] = (count - 1) * self.boundary_floor_s(groups, groups, mb)
        return self._runs[key]

    def boundary_floor_s(self, a: tuple[Group, ...], b: tuple[Group, ...], mb: int) -> float:
        """The least round trip across a boundary from a stage of groups `a` to one of `b` costs
        the fast score: the slowest forward and the slowest backward transfer of the replica pairs
        it joins (r with r, as links.LinkFigures pairs them), each at its placement.p2p_floor_s."""
        key = (a, b, mb)
        if key not in self._cache:
            s = self.scorer
            size = activation_message_bytes(ACT_BYTES, s.job.seq_len, mb, s.model.hidden)
            if len(a) == 1 and len(b) == 1:      # chains: every replica pair joins the same two groups
                pairs = {(a[0], b[0])}
            else:
                owners_a = [g for g in a for _ in range(g.count)]
                owners_b = [g for g in b for _ in range(g.count)]
                pairs = {(owners_a[r % len(owners_a)], owners_b[r % len(owners_b)])
                         for r in range(max(len(owners_a), len(owners_b)))}
            forward = backward = 0.0
            for ga, gb in pairs:
                pa, pb = s.pools[ga.pool], s.pools[gb.pool]
                forward = max(forward, p2p_floor_s(s.cluster, pa, ga.tp, pb, gb.tp, size))
                backward = max(backward, p2p_floor_s(s.cluster, pb, gb.tp, pa, ga.tp, size))
            self._cache[key] = forward + backward
        return self._cache[key]


def least_grad_wire_bytes(scorer: Scorer) -> int:
    """Bytes per gradient element the engine's data-parallel reductions put on the wire
    (Execution.grad_reduce_bytes, as planner.cost.evaluate reads it), the least over the precisions
    a candidate of this job may train in: the job's, else any the engine offers or the bf16 default
    (planners.precision_for picks bf16, or fp16 where the engine offers it). An engine that reduces
    bf16 gradients in fp32 (FSDP2's default reduce_dtype, torchtitan) sends 4."""
    job = scorer.job
    precisions = (job.precision,) if job.precision is not None else (Precision.BF16,) + scorer.engine.space.precisions
    return min(scorer.run.grad_reduce_bytes(p) for p in precisions)


def _lane_window_ratio(n: int, window: int, m: int) -> float:
    """n / k of (b9) for a first-stage replica holding n of m micro-batches with 1F1B window
    `window`: k = schedule.window_in_flight_limit <= min(n, window n / m + 1), so n / k is at least
    max(1, n / (window n / m + 1)), which does not fall as n grows."""
    return max(1.0, n / window_in_flight_ceiling(window, n, m))


def _layout_of(runs: Runs) -> Layout:
    stages = tuple(groups for groups, count in runs for _ in range(count))
    return Layout("mixed" if len(stages[0]) > 1 else "chain", stages)


def _fill_s(L: int, fewest: int, parts, fixed: int) -> float:
    """(b10), the least upstream fill any layer split allows: a lower bound on the simulated 1F1B
    makespan (the stage-0 replica that ends it), tail not included.

    The simulation (planner.schedule) runs each stage's replicas as workers, one pass at a time;
    a forward of micro-batch j on stage i starts after its forward on stage i - 1 has ended (plus
    a transfer), a backward after the backward on stage i + 1 (the last stage's after its own
    forward), and micro-batch j has one owner per stage, for both of its passes there. Take any
    worker w of stage c. Its first pass is a forward F_c(j0), which waits for F_0(j0) .. F_{c-1}(j0);
    its last is a backward B_c(j1) (every forward it runs has its backward after it, on w), after
    which B_{c-1}(j1) .. B_0(j1) still run, the last on stage 0. In between, w is busy for all its
    passes. So stage 0's replica that owns j1 ends no earlier than

        sum_{i<c} F_i(j0) + W_w + sum_{i<c} B_i(j1) >= sum_{i<c} phi_i L_i + a_c L_c + e_c

    (phi_i L_i at most a forward through stage i on its fastest group plus a backward on its
    fastest, StageRates.phi; W_w >= a_c L_c + e_c as in (b1) for w the busiest replica of stage c;
    transfers only add), and evaluate's iteration is at least that end plus stage 0's tail (b5).
    This holds for every stage c whose predecessors are known: the first `fixed` runs in order; a
    later run (of unknown place) has at least the fixed runs and its own earlier stages before each
    of its stages, which the constraints keep (a relaxation: fewer terms). The split is the
    search's, so the bound is the least over splits, the LP
        z* = min z  s.t. (c_s) z >= a_s L_s + e_s + sum_{i in before(s)} phi_i L_i,  every stage s
                         (c_L) sum_s L_s = L,  L_s >= `fewest` (memory caps dropped: only lowers z*)
    For weights y_s >= 0 of sum Y > 0, Y z >= sum_s y_s (a_s L_s + e_s + ...) = sum_s y_s e_s +
    sum_s w_s L_s, w_s = y_s a_s + phi_s sum_{s' after s} y_s' ("after": s in before(s')), and
    sum_s w_s L_s >= sum_s fewest w_s + (L - p fewest) min_s w_s, so every such y gives a lower
    bound (weak LP duality). y is chosen to make w_s = 1 wherever y_s >= 0 allows (the LP's optimum
    where no stage sits at `fewest`), worked backward from the last stage with Z the weight already
    given to the stages after: y_s = (1 - phi_s Z) / a_s, so over a run of `count` like stages Z
    moves from Z to 1/phi - (1 - phi/a)^count (1/phi - Z) (phi <= a); where phi_s Z >= 1 the run gets
    y = 0 and w_s = phi_s Z >= 1 (held at `fewest`). The runs after the fixed ones are each worked
    from Z = 0 and their weights summed before the fixed runs (every later stage is after those).
    With the last stage unclamped (Z = 0 there), min_s w_s = 1, so

        z* >= (sum_s y_s e_s + L + sum_{clamped s} fewest (phi_s Z_s - 1)) / Y.

    On p like stages (a = n phi, n micro-batches each) this is a L / n / (1 - (1 - 1/n)^p), about
    M (1 + (p - 1) / (2 n)) for M = a L / p: half of Narayanan's bubble, the part upstream of the
    stage that ends last; `parts`: (run, count, a, phi, e) of the stages in pipeline order (the
    last run's parts split as in _pipeline_s)."""
    weight = others = extra = heads = 0.0          # others: the weight of the unplaced runs worked so far
    run = None
    for k, count, a, phi, e in reversed(parts):
        if k != run and run is not None and run >= fixed:   # an unplaced run is done: every earlier stage is before it
            others, weight = others + weight, (others + weight if k < fixed else 0.0)
        run = k
        if phi <= 0:
            grown = weight + count / a
        elif phi * weight >= 1:
            extra += count * fewest * (phi * weight - 1)
            continue
        else:
            r = phi / a
            grown = weight + (1 / phi - weight) * (1.0 if r >= 1 else -math.expm1(count * math.log1p(-r)))
        heads += e * (grown - weight)
        weight = grown
    total = others + weight if run is not None and run >= fixed else weight
    return (heads + L + extra) / total


def _interleaved_fill_s(L: int, fewest: int, parts, fixed: int, v: int) -> float:
    """(b12), the least upstream fill of interleaved 1F1B with v chunks any layer split allows: a lower
    bound on the simulated interleaved makespan (planner.schedule._simulate_static, Megatron-LM's fixed
    order per worker), tail not included; _fill_s's LP with each phi_i / v.

    Every worker w of stage c runs its passes in a fixed order (schedule._worker_orders): its first is the
    forward of chunk 0 of its first micro-batch j0, its last the backward of chunk 0 of its last one j1
    (the backwards mirror the forwards, chunks reversed, and the last forward is chunk v - 1's). The
    forward of chunk 0 of j0 on stage c waits for the same on stages c - 1, .., 0 (a chunk's input is the
    same chunk's on the stage before; only stage 0's chunks after the first wait on the last stage), and
    the backward of chunk 0 of j1 on stage i - 1 waits for it on stage i, down to stage 0. A chunk of
    stage i takes 1/v of the stage's pass (the simulation divides each replica's forward and backward by
    v), at least phi_i L_i / v forward and backward together for the stages before c, whichever replicas
    own j0 and j1; w is busy W_w >= a_c L_c + e_c in between (b1). So the stage-0 replica that owns j1
    ends no earlier than

        sum_{i<c} phi_i L_i / v + a_c L_c + e_c,

    (b10)'s constraint with phi_i / v (transfers only add), and its LP and Lagrangian bound carry over
    word for word. Unlike 1F1B, nothing here holds the transfers: a busiest stage 0 takes none of them
    (its chunk-forwards after the first wait on the wrap from the last stage, but the simulation lets it
    run the other micro-batches' chunks meanwhile), so the proven interleaved terms take none either.
    On p like stages this is about half of Narayanan's interleaved bubble (p - 1) t / v."""
    return _fill_s(L, fewest, [(k, count, a, phi / v, e) for k, count, a, phi, e in parts], fixed)


def _interleaved_level_fill_s(L: int, v: int, fewest: int, level: float, parts, most_steps: int = 64) -> float:
    """(b13), interleaved, the stages in order: the busiest stage's level in whole virtual stages with (b12)'s
    upstream fill of the layers every stage must hold at it, proven against the simulation (tail not included).
    `parts`: (count, a, phi, e, cap) in pipeline order, cap the most layers the part's stages hold together;
    `level`: (b2)'s level in whole virtual stages, at most any split's busiest work.

    Take any split of whole virtual stages and M its busiest replica's work (M >= level). Every stage holds
    L_i <= u_i(M) = v floor((M - e_i) / (a_i v)) layers, a part's stages together at most its cap, so each
    stage holds at least l_i(M) = max(fewest, L - (the most the other stages hold)); by (b12)'s argument for
    each stage c (_interleaved_fill_s), T >= a_c L_c + e_c + sum_{i<c} phi_i L_i / v >= G(M) = max_c (a_c l_c
    + e_c + sum_{i<c} phi_i l_i / v), and T >= M. u_i only grows with M, so G is a step function that only
    falls, constant between the levels s_0 = level < s_1 < .. at which some u_i grows: T >= min_k max(s_k,
    G(s_k)) (an interval where some l_i > u_i holds no split and is skipped). The scan stops where s_k is at
    least the least found (later intervals only rise) or after `most_steps` steps (then s_k itself is a
    bound for the rest). On p like stages of k v layers each it is Narayanan's interleaved fill, level +
    (p - 1) phi k, wherever one more virtual stage on the busiest, a v, costs at least that much."""
    best = math.inf
    for _ in range(most_steps):
        ceilings, step = [], math.inf
        for count, a, phi, e, cap in parts:
            k = max(0, math.floor((level - e) / (a * v) + 1e-9))
            ceilings.append((k * v, min(count * k * v, cap)))
            step = min(step, a * v * (k + 1) + e)
        total = sum(whole for _, whole in ceilings)
        fill = upstream = 0.0
        for (count, a, phi, e, cap), (one, whole) in zip(parts, ceilings):
            least = max(fewest, L - (total - whole + min((count - 1) * one, cap)))   # the others at their most
            if least > one + 1e-9:
                fill = math.inf             # no split has its busiest work in this interval
                break
            fill = max(fill, a * least + e + upstream + phi * least / v * (count - 1))
            upstream += phi * least / v * count
        best = min(best, max(level, fill))
        if step >= best:
            return best
        level = step
    return min(best, level)


def _busiest_fill_s(L: int, fewest: int, level: float, parts, m: int) -> float:
    """(b11), the 1F1B fill around the busiest stage, proven against the simulation: T >= level + this
    (tail not included) for every split of the stages in this order whose busiest replica takes at least
    `level` (b2). `parts`: (count, a, phi, e, cap, lane) in pipeline order, cap the most layers the part's
    stages hold together, lane = (n, replicas, window of the part's last stage) for a part of one group.

    Let w be the busiest replica, of stage c, W its work, n its micro-batches, k its in-flight limit
    (schedule.window_in_flight_limit), f and b its forward and backward, and D the least time from a
    forward of a micro-batch on stage c ending to its backward there starting (its passes through the
    later stages: D >= sum_{j>c} phi_j L_j; transfers only add). Before w's first backward starts, at
    least f + D after its first forward starts, w runs at most k forwards (each takes an in-flight slot
    that only a backward's end frees): idle >= D - (k - 1) f. After its last forward ends, that
    micro-batch's backward starts D later at least, and w meanwhile runs at most the k - 1 other
    backwards in flight: idle >= D - (k - 1) b. If n > k the first backward starts before the last
    forward (the (k + 1)-th forward waits for a backward's end), so the two are apart, and with (b10)'s
    fill before w's first pass and after its last, W = n (f + b):

        T >= H = W + P_c + max(0, 2 D - X),  X = (k - 1) W / n  (X = inf: one stage of a mix, or k >= n)

    (P_c = sum_{i<c} phi_i L_i). Every stage i holds L_i <= u_i(W) = min(its part's cap, (W - e_i) / a_i)
    layers, W being the largest work. With G_c(W) the least of P_c + max(0, 2 D - X) over splits within
    those ceilings (an LP in L_i, convex in its right-hand sides u_i(W), X(W)), H >= W + G_c(W), and
    G_c falls by at most (k - 1) / n + 2 phi_max sum_i 1 / a_i per second of W (its duals: at most 1 on
    X, at most the largest price of a layer, 2 phi_max, on each ceiling), so where that is <= 1, W + G_c(W)
    does not fall and T >= level + G_c(level); else this returns 0. c is not known: the least over c.
    G_c is solved by cheapest layers first: stage c's own (free), then the later stages' up to D = X / 2
    (free, smallest phi first), then each layer at phi_i before c or 2 phi_j after, whichever is less (the
    parts' caps taken separately for a part's stages before and after c: only a relaxation). On p like
    stages (k = p - c) H is Narayanan's n t + (p - 1) t."""
    slope = sum(count / a for count, a, _, _, _, _ in parts) * 2 * max(phi for _, _, phi, _, _, _ in parts)
    for count, _, _, _, _, lane in parts:           # the most in flight below n: the part's first stage's, mostly
        if lane is not None:
            n, d, window = lane
            front = window_in_flight_limit(window + (count - 1) * d, n, m)
            if front >= n:                          # the last stage below n, if any (the counts rise with j)
                front = next((held for held in (window_in_flight_limit(window + j * d, n, m)
                                                 for j in reversed(range(count - 1))) if held < n), None)
            if front is not None and slope + (front - 1) / n > 1:
                return 0.0
    stages = []
    for q, (count, a, phi, e, cap, lane) in enumerate(parts):
        for j in reversed(range(count)):            # the j-th stage before the part's last holds more in flight
            x = math.inf
            if lane is not None:
                n, d, window = lane
                held = window_in_flight_limit(window + j * d, n, m)
                if n > held:
                    x = (held - 1) * level / n
            stages.append((q, x))
    p, least = len(stages), math.inf
    per_stage = [max(0.0, (level - e) / a) for _, a, _, e, _, _ in parts]
    prefix = [0.0]                                  # sum of phi over the stages before each
    for q, _ in stages:
        prefix.append(prefix[-1] + parts[q][2])

    def room(q, n):                                 # n stages of part q: layers they hold above `fewest`
        return max(0.0, min(parts[q][4], n * per_stage[q]) - n * fewest)
    whole = [(parts[q][2], room(q, parts[q][0])) for q in range(len(parts))]
    c = 0
    for qc, (count_c, _, phi_c, _, cap_c, _) in enumerate(parts):
        for j in range(count_c):                    # stage c, j stages of its part before it
            x = stages[c][1]
            base_p, base_d = fewest * prefix[c], fewest * (prefix[p] - prefix[c + 1])
            left = L - p * fewest - max(0.0, min(per_stage[qc], cap_c) - fewest)
            cost = base_p
            if left > 0:
                later, budget = [], max(0.0, x / 2 - base_d)
                ahead = [(phi_c, room(qc, count_c - j - 1))] + whole[qc + 1:]
                for phi, space in sorted(ahead):    # free while D stays under X / 2, smallest phi first
                    take = min(left, space, budget / phi if phi > 0 else math.inf)
                    left, budget = left - take, budget - take * phi
                    later.append((2 * phi, space - take))
                behind = whole[:qc] + [(phi_c, room(qc, j))]
                for price, space in sorted(later + behind):
                    if left <= 0:
                        break
                    take = min(left, space)
                    cost += take * price
                    left -= take
                if left > 1e-9:
                    return 0.0                      # no split within the ceilings: no claim
            least = min(least, cost + max(0.0, 2 * base_d - x))
            if least <= 0:
                return 0.0
            c += 1
    return least


def _placed_fill(L: int, v: int, level: float, rows, betas: list[float]) -> float:
    """(b3'), a tighter fill when it applies: with the busiest stage at `level`, stage i holds
    v <= L_i <= u_i = min(cap_i, (level - e_i) / a_i) layers, so sum_i beta_i L_i is at least the
    cheapest way to place L layers within those bounds (fill the smallest beta first: a
    fractional knapsack), and the critical stage's t_c <= max_i beta_i u_i. As a function of the
    level M that fill is convex (an LP's value in its right-hand side), so M + fill is convex;
    where its slope at the water level is >= 0 it is smallest there, and this is a lower bound
    for every split. The slope is at least 1 - (beta_max sum_i 1 / a_i + max_i beta_i / a_i) / v;
    where that may be negative the caller keeps (b3). Returns 0.0 then, or when it does not apply."""
    slope = 1 - (max(betas) * sum(c / a for c, a, _, _ in rows) + max(b / a for b, (_, a, _, _) in zip(betas, rows))) / v
    if slope < 0:
        return 0.0
    bounds = [(beta, c, max(float(v), min(cap, (level - e) / a))) for beta, (c, a, e, cap) in zip(betas, rows)]
    left = L - sum(c * v for _, c, _ in bounds)
    cost = sum(c * v * beta for beta, c, _ in bounds)
    for beta, c, upper in sorted(bounds):
        take = min(left, c * (upper - v))
        if take <= 0:
            continue
        cost += take * beta
        left -= take
    if left > 1e-9:
        return 0.0
    return (cost - max(beta * upper for beta, _, upper in bounds)) / v


def _whole_layer_level(num_layers: int, rows: list[tuple[int, float, float, float]], level: float) -> float:
    """(b2) in whole layers: the smallest M >= `level` with sum over runs of min(count cap,
    count floor((M - e) / a)) >= num_layers. A stage holds a whole number of layers, at most
    floor((M - e) / a) when its busiest replica takes at most M, and a run's stages at most the sum
    of their caps (count cap, cap their average), so no split's busiest stage is below this M.
    From the water level (which holds the layers fractionally, and so at most p - 1 too few in whole
    ones), M rises to the next level at which some uncapped run holds one more layer a stage,
    until they hold them all (a hair of slack in the floor: never above the exact level)."""
    if level == math.inf:
        return level
    floor, left = math.floor, num_layers - 1e-9
    while True:
        held, step = 0.0, math.inf
        for c, a, e, cap in rows:
            k = floor((level - e) / a + 1e-9)
            if k < 0:
                k = 0
            if k < cap:
                held += c * k
                k = a * (k + 1) + e
                if k < step:
                    step = k
            else:
                held += c * cap
        if held >= left or step == math.inf:
            return level
        level = step


def _water_level(num_layers: int, rows: list[tuple[int, float, float, int]]) -> float:
    """Smallest M with sum over runs of count * min(cap, (M - e) / a) >= num_layers: raise the
    level, capping the runs whose memory it exceeds (rows: count, a, e, cap per stage)."""
    if sum(c * cap for c, _, _, cap in rows) < num_layers:
        return math.inf
    active, left = list(rows), num_layers
    while active:
        level = (left + sum(c * e / a for c, a, e, _ in active)) / sum(c / a for c, a, _, _ in active)
        capped = [r for r in active if (level - r[2]) / r[1] > r[3]]
        if not capped:
            return level
        left -= sum(c * cap for c, _, _, cap in capped)
        active = [r for r in active if r not in capped]
    return max(cap * a + e for _, a, e, cap in rows)
