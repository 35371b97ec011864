"""The fourth pass's faster pipeline bound and fast-score window terms against the plain code they
replaced (planner.search.bound and planner.search.score as of commit 7876cc8, kept here as the reference, with the
later change to where the 1F1B bound takes its FILL_SLACK margin made here too):
on random clusters, jobs, engines and offload settings, every pipeline bound of every family order and
first-run setting, with and without a limit, even splits or not, is the same float; and the lane, window
and prefix terms of the fast score are the same floats on random lanes. A divergence fails here before
it can change an answer (docs/performance.md, "Fourth pass")."""
from __future__ import annotations

import math
import random
from typing import NamedTuple

from hypothesis import given, settings, strategies as st

from catalog import cluster_from_dict, load_catalog
from planner.comm import ring_s_per_byte
from planner.dataparallel import pass_with_zero_floor_s, step_s, zero_per_micro_batch_floor
from planner.memory import most_layers_held
from planner.placement import dp_link_ceiling
from planner.schedule import in_flight_micro_batches, interleaved_in_flight, window_in_flight_limit
from planner.search.bound import (FILL_SLACK, Bounds, Runs, StageFigures, StageRates, _lane_window_ratio,
                                  _placed_fill, _water_level)
from planner.search.links import Lane
from planner.search.score import Scorer, _in_flight_limits, _lane_s, _prefix_s, _window_s
from planner.search.space import (INTERLEAVES, ZERO_STAGES, Group, layout_families, micro_batch_sizes,
                                  searched_recomputes, zero_stages)
from planner.search.split import share_micro_batches
from planner.types import Job, Offload, Recompute, Schedule

GPUS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "l40s", "rtx-4090", "t4", "a10g"]
MODELS = ["opt-350m", "gpt3-1.3b", "llama-2-7b", "gpt3-6.7b", "llama-2-13b"]
ENGINES = ["hetplan", "megatron", "deepspeed", "fsdp", "torchtitan"]
CATALOG = load_catalog()


class StageRow(NamedTuple):
    run: int
    count: int
    per_zero: dict[int, StageRates]
    head: float
    part: str


class PlainBounds(Bounds):
    """The pipeline bound as it was computed before the fourth pass: one setting at a time, each run's memory
    caps stage by stage through schedule.in_flight_micro_batches, the per stage rates inside the ZeRO loop."""

    def pipeline_s(self, runs: Runs, max_replicas: int, any_order: bool = False,
                   limit: float = math.inf, only=None, fixed: int | None = None) -> dict[tuple[int, int, Recompute, int], float]:
        """As planner.search.bound.Bounds had it before the fourth pass (commit 7876cc8)."""
        s = self.scorer
        L, B = s.model.layers, s.job.global_batch
        p = sum(count for _, count in runs)
        sp = any(g.tp > 1 for groups, _ in runs for g in groups)
        mixed = any(len(groups) > 1 for groups, _ in runs)
        zeros = zero_stages(s.job.offload, max_replicas * s.cp)
        # each run's last stage index and the replicas of it and every later stage (its 1F1B window)
        replicas = [sum(g.count for g in groups) for groups, _ in runs]
        last = [sum(c for _, c in runs[:k + 1]) - 1 for k in range(len(runs))]
        windows = [replicas[k] + sum(r * c for r, (_, c) in zip(replicas[k + 1:], runs[k + 1:])) for k in range(len(runs))]
        if fixed is None:
            fixed = 0 if any_order else len(runs)
        any_order = fixed < len(runs)           # no head time, and only known transfers
        last[fixed:], windows[fixed:] = [p - 1] * (len(runs) - fixed), replicas[fixed:]
        out = {}
        raw_limit = limit / (1 - FILL_SLACK)    # `limit` applies to the bound as returned, margin taken off
        wanted = None if only is None else {key[:3] for key in only}
        for mb in (micro_batch_sizes(B) if only is None else sorted({key[0] for key in only})):
            if B // mb < max_replicas:
                break
            transfers = self.transfers.floor_s(runs, mb, fixed)
            fits = False
            for v in INTERLEAVES:
                if v > 1 and (p == 1 or L % v):
                    continue
                for rc in searched_recomputes(s.options.flash_attention, mixed, s.job.engine):
                    if wanted is not None and (mb, v, rc) not in wanted:
                        continue
                    ratio = self._window_ratio(runs, mb, fixed, v) if p > 1 and v == 1 else 0.0
                    found, fit = self._pipeline_s(runs=runs, p=p, mb=mb, v=v, rc=rc, sp=sp, zeros=zeros, last=last,
                                                  windows=windows, transfers=transfers, no_head=any_order,
                                                  limit=raw_limit, window_ratio=ratio, first_known=fixed >= 1)
                    fits |= fit and v == 1
                    for zero, bound in zip(zeros, found):
                        if v > 1:
                            bound *= 1 - FILL_SLACK
                        if bound < limit and (only is None or (mb, v, rc, zero) in only):
                            out[(mb, v, rc, zero)] = bound
            if not fits and only is None:
                break   # nothing fits at this micro-batch without interleave: nothing larger fits either
        return out

    def _pipeline_s(self, runs: Runs, p: int, mb: int, v: int, rc: Recompute, sp: bool, zeros,
                    last: list[int], windows: list[int], transfers: float, no_head: bool = False,
                    limit: float = math.inf, window_ratio: float = 0.0,
                    first_known: bool = True) -> tuple[list[float], bool]:
        """As planner.search.bound.Bounds had it before the fourth pass (commit 7876cc8)."""
        L, m = self.scorer.model.layers, self.scorer.job.global_batch // mb
        never = [math.inf] * len(zeros)
        if p * v > L:
            return never, False
        stages = []
        for k, (groups, count) in enumerate(runs):
            rates = self._stage_rates(groups, mb, rc, sp)
            if rates is None:
                return never, False
            per_zero, head, shares = rates
            head = 0.0 if no_head else head
            if v > 1 and len(groups) == 1 and (m % groups[0].count or (m // groups[0].count) % p):
                return never, False
            if k < len(runs) - 1:
                stages.append(StageRow(k, count, per_zero, 0.0, "all"))
            else:                                # only the very last stage holds the head
                stages += ([StageRow(k, count - 1, per_zero, 0.0, "others")] * (count > 1)
                           + [StageRow(k, 1, per_zero, head, "last")])
        out, fits = [], False
        total_replicas = sum(sum(g.count for g in groups) * count for groups, count in runs)
        fewest = (L // (p * v)) * v if self.even else v                           # layers of any stage
        for zero in zeros:
            rows, betas = [], []
            a_min = beta_min = lane_beta_min = math.inf
            slow_lane = lane_window = 0.0
            beta_max = beta_sum = floor = inverse = weighted = 0.0
            first_c = math.inf
            for k, count, per_zero, e, part in stages:
                a, beta, c, keep_e, beta_hi, lanes = per_zero[zero]
                lane_beta_min = min(lane_beta_min, beta)
                if len(runs) == 1:
                    slow_lane = max(slow_lane, beta_hi)
                    if v == 1:
                        lane_window = max(lane_window, max(_lane_window_ratio(n, total_replicas, m) * tau
                                                           for n, tau in lanes))
                e = e if keep_e else 0.0
                rows.append((count, a, e, (k, part)))
                betas.append(beta)
                a_min, beta_min, beta_max = min(a_min, a), min(beta_min, beta), max(beta_max, beta)
                beta_sum += count * beta
                floor = max(floor, fewest * a + e)
                inverse += count / a
                weighted += count * e / a
                if k == 0 or not first_known:
                    first_c = min(first_c, c)
            tail = fewest * first_c                                                                # (b5)
            others = fewest / v * (beta_sum - beta_max)

            window = max(window_ratio * (L * lane_beta_min + transfers),                          # (b7)
                         L * slow_lane + transfers,                                             # (b8)
                         lane_window * L)                                                       # (b9)

            def total(level, with_window=True):
                busiest = max(level, floor)
                fill = (others + beta_min / v * max(0.0, L - busiest / a_min - (p - 1) * fewest)   # (b3)
                        if v == 1 else 0.0)
                return max(busiest + fill + transfers, window if with_window else 0.0) + tail    # (b4)

            uncapped = (L + weighted) / inverse
            if total(uncapped, with_window=False) >= limit:   # memory only raises the level: no need to cap
                out.append(total(uncapped) * (1 - FILL_SLACK if v == 1 else 1.0))
                fits = True                      # unknown: the caller must not stop at this micro-batch
                continue
            caps, smallest = {}, math.inf
            for k, (groups, count) in enumerate(runs):
                cap_last, before, least = self._run_caps(groups=groups, mb=mb, v=v, rc=rc, sp=sp, p=p,
                                                         last_stage=last[k], window=windows[k], count=count, m=m,
                                                         zero=zero)
                smallest = min(smallest, least)
                caps[(k, "last")], caps[(k, "all")] = cap_last, (cap_last + before) / count
                caps[(k, "others")] = before / (count - 1) if count > 1 else math.inf
            if smallest < fewest:                # some stage cannot hold the layers it must
                out.append(math.inf)
                continue
            capped = [(c, a, e, caps[part]) for c, a, e, part in rows]
            busiest = _water_level(L, capped)                                     # (b2), (b6)
            if busiest == math.inf:
                out.append(math.inf)
                continue
            fits = True
            level = max(busiest, floor)
            placed = _placed_fill(L, v, level, capped, betas) if v == 1 else 0.0
            bound = max(total(busiest), placed + level + transfers + tail)
            if v == 1:
                bound = max(bound * (1 - FILL_SLACK), max(level + transfers, window) + tail)
            out.append(bound)
        return out, fits

    def _stage_rates(self, groups: tuple[Group, ...], mb: int, rc: Recompute, sp: bool):
        """As planner.search.bound.Bounds had it before the fourth pass (commit 7876cc8)."""
        key = (groups, mb, rc, sp)
        if key not in self._rates:
            s = self.scorer
            shares = s.stage_shares(groups, mb, rc, sp)
            if shares is None:
                self._rates[key] = None
                return None
            d = sum(g.count for g in groups)
            bw = dp_link_ceiling(s.cluster, [(s.pools[g.pool], g.tp, g.count) for g in groups])
            spread = ring_s_per_byte(d, bw)                   # ring collective seconds per byte, at most
            per_zero = {}
            for zero in ZERO_STAGES:
                wire = s.states.weight_comm_bytes
                zf, zb = zero_per_micro_batch_floor(zero, s.layer_params_dense / min(g.tp for g in groups) * wire,
                                                    d, spread, wire, s.states.trainable)
                hybrid = self._hybrid_floors(groups, d, bw, zero)       # the hybrid-shard knob's, where offered
                zf, zb = min([zf] + [h[0] for h in hybrid]), min([zb] + [h[1] for h in hybrid])
                a = c = beta_hi = 0.0
                beta = math.inf
                k, taus, lanes = 0, [], []
                m = s.job.global_batch // mb
                for g in groups:
                    f, b, _, _ = s.pass_times(s.pools[g.pool], g.tp, mb, rc, sp)
                    most = max(shares[k:k + g.count])
                    k += g.count
                    tau = pass_with_zero_floor_s(f, zf) + pass_with_zero_floor_s(b, zb)
                    a, beta_hi, beta = max(a, most * tau), max(beta_hi, tau), min(beta, tau)
                    taus += [tau] * g.count
                    # (b9): the group's busiest replica holds at least this many micro-batches under the
                    # search's shares and under even ones (the baselines)
                    lanes.append((min(most, m // d), tau))
                    # (b5): the optimizer step over this group's shard of one layer, and the weight
                    # all-gather after it under ZeRO-1/2 (ring bandwidth term only)
                    step = step_s(s.states, zero, s.layer_params_held / g.tp, d, s.pools[g.pool])
                    gather = (min([spread] + [ring_s_per_byte(h[2], bw) for h in hybrid]) * s.layer_params_dense / g.tp
                              * s.states.trainable * s.states.trained_weight_bytes)
                    c = max(c, step + (gather if zero in (1, 2) else 0.0))
                if len(groups) > 1 and zb > 0:   # the shares balance tau without ZeRO: any shares do this well
                    a = max(n * tau for n, tau in zip(share_micro_batches(s.job.global_batch // mb, taus), taus))
                # ZeRO-2/3 traffic may hide the head's time on the last stage: keep e only without it
                per_zero[zero] = StageRates(a, beta, c, zero < 2 or d == 1, beta_hi, tuple(lanes))
            heads, k = [], 0
            for g in groups:
                _, _, hf, hb = s.pass_times(s.pools[g.pool], g.tp, mb, rc, sp)
                heads.append(max(shares[k:k + g.count]) * (hf + hb) if len(groups) == 1 else hf + hb)
                k += g.count
            self._rates[key] = StageFigures(per_zero, min(heads), shares)
        return self._rates[key]

    def _run_caps(self, groups, mb, v, rc, sp, p, last_stage, window, count, m, zero) -> tuple[int, int, int]:
        """As planner.search.bound.Bounds had it before the fourth pass (commit 7876cc8)."""
        # 1F1B in-flight counts read the windows only, interleaved ones the positions only
        # (schedule.in_flight_micro_batches): the key holds what the caps read, so other orders share them
        key = (groups, mb, v, rc, sp, zero, count) + ((window,) if v == 1 else (p, last_stage))
        if key not in self._run:
            shares = self._rates[(groups, mb, rc, sp)][2]
            d = sum(g.count for g in groups)
            owns, k = [], 0
            for g in groups:
                own = max(shares[k:k + g.count])
                owns.append(min(own, m // d) if len(groups) > 1 else own)   # even shares may give fewer
                k += g.count
            caps, coefficients = [], [self._cap_coefficients(g, mb, rc, sp, d, zero) for g in groups]
            held = self._held.setdefault((groups, mb, rc, sp, zero), {})    # a stage's cap by its in-flight counts
            for j in range(count):
                flights = tuple(in_flight_micro_batches(Schedule.ONE_F_ONE_B, p, last_stage - j, v, own,
                                                        window + j * d, m) for own in owns)
                if flights not in held:
                    held[flights] = min(most_layers_held(free, states, act, f)
                                        for (free, states, act), f in zip(coefficients, flights))
                caps.append(held[flights])
                if all(f >= own for f, own in zip(flights, owns)):   # every later stage holds as many
                    caps += [caps[-1]] * (count - j - 1)
                    break
            self._run[key] = (caps[0], sum(caps[1:]), min(caps))
        return self._run[key]


def _case(seed: int):
    rng = random.Random(seed)
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((1, 2)), "gpus_per_node": rng.choice((2, 4, 8)),
              "inter_node_gbps": rng.choice((25, 100, 400))}
             for j, gpu in enumerate(rng.sample(GPUS, rng.choice((1, 2, 3))))]
    cluster = cluster_from_dict({"name": "random", "pools": pools, "between_pools_gbps": rng.choice((25, 100))},
                                CATALOG)
    engine = rng.choice(ENGINES)
    offload = rng.choice((Offload.NONE, Offload.NONE, Offload.OPTIMIZER)) if engine == "deepspeed" else Offload.NONE
    job = Job(CATALOG.model(rng.choice(MODELS)), rng.choice((8, 16, 32, 64)), rng.choice((1024, 2048, 4096)),
              engine=engine, offload=offload)
    return rng, cluster, job


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_pipeline_bounds_equal_the_plain_reference(seed):
    rng, cluster, job = _case(seed)
    scorer = Scorer(cluster, job)
    fast, plain = Bounds(scorer), PlainBounds(scorer)      # one warm cache each, over every family below
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=True, engine=job.engine))
    for family in rng.sample(families, min(12, len(families))):
        for order in family.orders()[:3]:
            runs, most = family.runs(order), family.max_replicas_per_stage
            for even in (False, True):
                a, b = fast.sharing(even), plain.sharing(even)
                for fixed in {None, 0, 1, len(runs)}:
                    every = a.pipeline_s(runs, most, fixed=fixed)
                    assert every == b.pipeline_s(runs, most, fixed=fixed), (family, order, even, fixed)
                    for limit in sorted(set(every.values()))[::5]:
                        only = frozenset(k for k in every if rng.random() < 0.7) or None
                        assert (a.pipeline_s(runs, most, limit=limit, only=only, fixed=fixed)
                                == b.pipeline_s(runs, most, limit=limit, only=only, fixed=fixed)), (family, limit)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda p: st.tuples(
    st.lists(st.integers(1, 64), min_size=p, max_size=p),                      # own micro-batches
    st.lists(st.floats(1e-4, 10.0), min_size=p, max_size=p),                   # t
    st.lists(st.floats(0.0, 1.0), min_size=p, max_size=p),                     # forward share of t
    st.lists(st.floats(0.0, 0.5), min_size=p - 1, max_size=p - 1),             # round trips
    st.lists(st.integers(1, 16), min_size=p, max_size=p))),                    # replicas per stage
    st.sampled_from(INTERLEAVES), st.floats(0.0, 0.5), st.integers(1, 64))
def test_window_terms_equal_the_plain_reference(lane_case, v, wrap, extra):
    own, t, share, x, replicas = lane_case
    windows = [sum(replicas[i:]) for i in range(len(own))]
    m = max(own) + extra
    f = [ti * s for ti, s in zip(t, share)]
    lane = Lane(0, tuple(xi / 2 for xi in x), tuple(xi - xi / 2 for xi in x), wrap)
    limits = _in_flight_limits(v, m, own, windows)
    assert _lane_s(v, own, t, lane, limits) == plain_lane_s(v, m, own, t, lane, windows)
    assert _window_s(v, own, t, x, wrap, limits) == plain_window_s(v, m, own, t, x, wrap, windows)
    assert _prefix_s(own, t, x, v, f, limits) == plain_prefix_s(own, t, x, v, f, windows, m)


# ----------------------------------------------------------------------------- the reference, as it was

def plain_lane_s(v: int, m: int, own: list[int], t: list[float], lane: Lane, windows: list[int]) -> float:
    """As planner.search.score had it before the fourth pass (commit 7876cc8)."""
    p, x = len(t), lane.round_trip
    crit = max(range(p), key=lambda i: own[i] * t[i])
    pipeline = own[crit] * t[crit] + (sum(t) - t[crit]) / v + v * sum(x) + (v - 1) * lane.wrap
    if p == 1:
        return pipeline
    return max(pipeline, plain_window_s(v, m, own, t, x, lane.wrap, windows))



def plain_prefix_s(own: list[int], t: list[float], x, v: int, f: list[float], windows: list[int], m: int) -> float:
    """As planner.search.score had it before the fourth pass (commit 7876cc8)."""
    p = len(t)
    below = [0.0] * (p + 1)
    for i in reversed(range(p)):
        below[i] = t[i] + (x[i] if i < len(x) else 0.0) + below[i + 1]
    worst, prefix = 0.0, 0.0
    for i in range(p):
        idle = 0.0
        if v == 1 and i < p - 1:
            k = window_in_flight_limit(windows[i], own[i], m)
            idle = max(0.0, f[i] + x[i] + below[i + 1] - k * f[i])
        worst = max(worst, prefix + own[i] * t[i] + idle)
        prefix += (t[i] + (x[i] if i < len(x) else 0.0)) / v
    return worst


def plain_window_s(v: int, m: int, own: list[int], t: list[float], x, wrap: float, windows: list[int]) -> float:
    """As planner.search.score had it before the fourth pass (commit 7876cc8)."""
    p = len(t)
    around = sum(t) / v + sum(x) + wrap
    worst, prefix, suffix = 0.0, 0.0, [0.0] * p
    for i in reversed(range(p)):
        suffix[i] = t[i] / v + (x[i] if i < p - 1 else 0.0) + (suffix[i + 1] if i < p - 1 else 0.0)
    for i in range(p):
        if v == 1:
            k = window_in_flight_limit(windows[i], own[i], m)
            held = own[i] * suffix[i]
        else:
            k = interleaved_in_flight(p, i, v, own[i]) * v
            held = own[i] * v * (suffix[i] + (v - 1) / 2 * around)
        worst = max(worst, prefix + held / k)
        prefix += t[i] / v + (x[i] if i < p - 1 else 0.0)
    return worst
