"""A screening bound for every layout family at once, vectorised over families with numpy.

planner.search.bound's pipeline bound is tight but costs about a millisecond per family in
Python; a 1,024-GPU cluster of four types has some 60,000 families, most of them far from the
best plan. This screen bounds them all in one pass, so that the best-first search only spends
Python time on families that could still win. It relaxes the pipeline bound (b1)-(b6) of
planner.search.bound, for every pool order of a family at once, as follows; each relaxation only
lowers it, so the screen is a lower bound on the fast iteration time of every layout, knob
setting, layer split and sample shares of the family.

Per micro-batch size b (m = B / b micro-batches), interleave v, recompute setting and ZeRO
class, with tau_g = forward + backward of one layer for one micro-batch on group g:

  time   ZeRO 0/1 use tau_g; ZeRO-2 adds the gradient reduce-scatter to the backward, ZeRO-3
         also the weight all-gather to both passes (dataparallel.pass_with_zero_floor_s: max(compute,
         collective) plus the overlap's slowdown of the shorter; ring bandwidth terms over the stage's
         data-parallel link, gradients at bound.least_grad_wire_bytes, as score._iteration_s exposes them).
         A chain stage on pool k has a_k = ceil(m / d) tau_k per layer (even shares over its d
         replicas); a mixed stage a >= m / sum_g (r_g / tau_g) (any shares: the busiest replica
         takes at least the harmonic share); beta = the slowest group's tau. No head (e = 0),
         no tail (the optimizer step only adds time).
  memory a stage of pool k holds at most cap = free / (W_k + f A_k) layers, with W_k the bytes
         per layer of weights, gradients and optimizer states as the ZeRO class shards them over
         the stage's replicas (ZeRO-1 for the 0/1 class: ZeRO-0 is as fast and needs more), A_k
         one micro-batch's activations per layer and f the in-flight micro-batches. In any order,
         the q_k stages of a chain run sit somewhere in the pipeline, and the j-th from the run's
         end holds at least min(own, j + 1) micro-batches (1F1B), so the run holds at most
         sum_j free / (W + min(own, j + 1) A) <= free / A ln((W + (k + 1/2) A) / (W + A / 2))
         + max(0, q - own) free / (W + own A) layers, k = min(q, own) (the terms are convex in
         j, so each is at most its integral over [j - 1/2, j + 1/2]). Interleaved
         plans hold at least min((v - 1) p + 1, own v) / v; mixed stages at least one.
  bound  M = the water level of sum_k q_k min(cap_k, M / a_k) = L (planner.search.bound._water_level,
         here for at most one row per pool), at least v max_k a_k; then
         T >= M + sum_{i != c} beta_i + beta_min / v max(0, L - M / a_min - (p - 1) v) + 2 (p - 1) v x,
         with x the slowest transfer every order has (inside a chain run; between the first pool and
         each pool of a mixed stage, and each pool with itself).

The screen is the smallest T over the settings; tests/test_search_bounds.py checks it against
every candidate of random small spaces.
"""
from __future__ import annotations

import numpy as np

from planner.comm import activation_message_bytes, ring_s_per_byte
from planner.compute import ACT_BYTES
from planner.dataparallel import pass_with_zero_floor_s, zero_per_micro_batch_floor
from planner.memory import FRAMEWORK_OVERHEAD_BYTES, most_layers_held, state_bytes_per_param
from planner.placement import dp_member_bw, p2p_floor_s
from planner.schedule import interleaved_in_flight, window_in_flight_floor
from planner.search.bound import FILL_SLACK, least_grad_wire_bytes
from planner.search.score import Scorer
from planner.search.space import INTERLEAVES, RECOMPUTES, Family, micro_batch_sizes, searched_recomputes, tp_degrees

ZERO_CLASSES = (1, 2, 3)    # 1 stands for ZeRO-0 and ZeRO-1 (same time here, ZeRO-1 needs less memory)


def screen_s(scorer: Scorer, families: list[Family]) -> np.ndarray:
    """A lower bound on the fast iteration time (seconds) of every layout of each family;
    inf where no knob setting can fit. Arrays are (pool, column): reductions over the few pools
    run along the first axis, elementwise over columns. A column is a family at one micro-batch
    size and recompute setting: the settings' columns are stacked side by side, in blocks of
    SCREEN_COLUMNS or more (the last one what is left), so that numpy's cost per call, which is
    most of what a few hundred families cost, is paid once per block and ZeRO class rather than
    per setting."""
    return screen_by_setting_s(scorer, families, by_setting=False)[0]


def screen_by_setting_s(scorer: Scorer, families: list[Family],
                        by_setting: bool = True) -> tuple[np.ndarray, np.ndarray | None, list]:
    """screen_s, and (`by_setting`) each family's bound at each (micro-batch size, recompute) setting the
    screen has columns of: (the bounds of screen_s, a [family, setting] array of bounds, inf where the family
    has no column of that setting (no micro-batch per replica, or a recompute setting not searched for it),
    the settings in that array's order). Each bounds every layout of the family at that setting, whatever
    its interleave and ZeRO stage (the columns' bound is the least of the ZeRO classes'), so the search can
    leave out of a family's pipeline bounds (planners._any_order_key) the settings whose screen cannot win."""
    if not families:
        return np.zeros(0), (np.zeros((0, 0)) if by_setting else None), []
    table = _Table(scorer, families)
    best = np.full(len(families), np.inf)
    settings: list = []
    columns_seen: list | None = [] if by_setting else None     # (family, setting index, bound) per block
    block: list = []
    for setting in _settings(scorer, table):
        block.append(setting)
        if sum(columns.lanes.size for _, _, columns in block) >= SCREEN_COLUMNS:
            _screen_block(scorer, table, block, best, settings, columns_seen)
            block = []
    if block:
        _screen_block(scorer, table, block, best, settings, columns_seen)
    if columns_seen is None:
        return best, None, settings
    per_setting = np.full((len(families), len(settings)), np.inf)
    for family, index, bound in columns_seen:
        np.minimum.at(per_setting, (family, index), bound)
    return best, per_setting, settings


SCREEN_COLUMNS = 2048    # a block's columns: past that, numpy's per-call cost is small and larger arrays outgrow caches


def _settings(s: Scorer, table: _Table):
    """(micro-batch size, recompute setting, _Sub of its live columns) of the screen: the families
    with a micro-batch per replica."""
    B = s.job.global_batch
    for mb in micro_batch_sizes(B):
        m = B // mb
        live = np.flatnonzero(m >= table.replicas)                 # families with a micro-batch per replica
        if live.size == 0:
            break
        sub_all = _Sub(live, table)
        sub_all.family, sub_all.m = live, np.full(live.size, m)
        sub_all.own = -(-m // sub_all.lanes)                       # chain: ceil(m / d)
        sub_all.x = _transfers_floor_s(s, table, sub_all, mb)
        for rc in RECOMPUTES:
            if rc in searched_recomputes(s.options.flash_attention, False, s.job.engine):
                yield mb, rc, sub_all
            elif (~sub_all.chain).any():      # searched for mixed stages only (see space.searched_recomputes)
                yield mb, rc, sub_all.take(~sub_all.chain)


def _screen_block(s: Scorer, table: _Table, block: list, best: np.ndarray, settings: list,
                  columns_seen: list | None = None) -> None:
    """Lower `best` (per family) to the screen of a block of settings' columns, and append the block's
    (micro-batch, recompute) settings to `settings`; with `columns_seen`, append (each column's family, its
    setting's index in `settings`, its bound) to it."""
    sub = _Sub.joined([columns for _, _, columns in block])
    per_layer = _PerLayer(s, table, sub, block)
    bound = None
    for zero in ZERO_CLASSES:
        x = _class_bound_s(s, sub, per_layer, zero)
        bound = x if bound is None else np.minimum(bound, x)
    np.minimum.at(best, sub.family, bound)
    first_setting = len(settings)
    settings += [(mb, rc) for mb, rc, _ in block]
    if columns_seen is not None:
        index = first_setting + np.repeat(np.arange(len(block)), [columns.lanes.size for _, _, columns in block])
        columns_seen.append((sub.family, index, bound))


class _Table:
    """The families as (pool, family) arrays, and the per-pool figures the screen reads."""

    def __init__(self, s: Scorer, families: list[Family]):
        pools = sorted({p.name: p for f in families for p in f.subset}.values(), key=lambda p: p.name)
        index = {p.name: k for k, p in enumerate(pools)}
        P, F = len(pools), len(families)
        self.pools = pools
        self.present = np.zeros((P, F), bool)
        self.tps = np.ones((P, F), np.int64)
        self.width = np.zeros((P, F), np.int64)
        # one (pool, family) cell per pool of each family, filled in one assignment (not one per family)
        rows, columns, tps, widths, firsts = [], [], [], [], []
        for i, f in enumerate(families):
            cols = [index[p.name] for p in f.subset]
            rows += cols
            columns += [i] * len(cols)
            tps += f.tps
            widths += f.width
            firsts.append(cols[0])
        self.present[rows, columns] = True
        self.tps[rows, columns] = tps
        self.width[rows, columns] = widths
        self.lanes = np.array([f.lanes for f in families], np.int64)
        self.chain = np.array([f.kind == "chain" for f in families], bool)
        self.first = np.array(firsts, np.int64)
        chain, width = self.chain, self.width
        self.sp = (self.tps > 1).any(axis=0)
        self.p_stages = np.where(chain, width.sum(axis=0), self.lanes)
        self.replicas = np.where(chain, self.lanes, width.sum(axis=0))          # replicas per stage
        self.rows = np.broadcast_to(np.arange(P)[:, None], (P, F))
        self.tp_list = sorted({t for p in pools for t in tp_degrees(p, s.model, s.cp)} | {1})
        self.tpi = np.searchsorted(np.array(self.tp_list), self.tps)
        # the [sp, pool, tp] cells of the groups, the only ones _per_pool fills (a pass time the scorer computes
        # here for no family is most of what a first screen costs at small sizes)
        T = len(self.tp_list)
        used = np.zeros((2, P, T), bool)
        used[np.broadcast_to(self.sp, (P, F))[self.present].astype(np.int64), self.rows[self.present],
             self.tpi[self.present]] = True
        allowed = [set(tp_degrees(p, s.model, s.cp)) for p in pools]
        self.cells = [(i, k, j) for i, k, j in np.argwhere(used).tolist()
                      if self.tp_list[j] in allowed[k] and (self.tp_list[j] == 1 or i == 1)]
        self.mem = np.array([p.gpu.mem_bytes - FRAMEWORK_OVERHEAD_BYTES for p in pools], float)[:, None]
        # the most bandwidth per rank a stage's data-parallel ring can get (placement.dp_link_ceiling)
        self.t_arr = self.tps.astype(float)
        self.group_count = np.where(chain, self.lanes, width)
        bw = dp_link_ceilings(s, pools, self.present, self.tps, self.group_count, chain, self.first, self.rows)
        self.d = self.replicas.astype(float)
        min_tp = np.where(self.present, self.tps, 10**6).min(axis=0)
        wire = s.states.weight_comm_bytes
        weight_bytes = s.layer_params_dense / np.where(chain, self.t_arr, min_tp.astype(float)) * wire
        grad_wire = least_grad_wire_bytes(s)
        self.gather, grads_and_gather = zero_per_micro_batch_floor(3, weight_bytes, self.d, ring_s_per_byte(self.d, bw),
                                                                   wire, s.states.trainable, grad_wire)
        self.grads = grads_and_gather - self.gather
        if s.engine.space.hybrid_shard and s.job.expert_parallel == 1:
            # the hybrid-shard knob (space.hybrid_shard_of): its collectives within groups of a node's replicas on
            # the node's link, at least (the all-reduce across the groups left out: bound.Bounds._hybrid_floors)
            link = np.maximum(bw, np.array([p.gpu.link_bw_bytes_per_s for p in pools], float)[:, None])
            fewest = np.maximum(2, min(p.gpus_per_node for p in s.cluster.pools) // self.tps.max(axis=0))
            pair = np.minimum(fewest, self.d).astype(float)     # at most the group: a node's replicas, >= 2
            gather, both = zero_per_micro_batch_floor(3, weight_bytes, pair, ring_s_per_byte(pair, link), wire,
                                                      s.states.trainable, grad_wire)
            self.gather, self.grads = np.minimum(self.gather, gather), np.minimum(self.grads, both - gather)


def _transfers_floor_s(s: Scorer, table: _Table, sub, mb: int) -> np.ndarray:
    """sum_i x_i of every order, at least (bound.TransferFloors.floor_s): a chain run of q stages has
    q - 1 boundaries inside it; a mixed stage pairs each group with itself across a boundary."""
    diag = _diagonal_floor_s(s, table.pools, table.tp_list, mb)[sub.rows, sub.tpi]
    chain_x = np.where(sub.present, (sub.width - 1) * diag, 0.0).sum(axis=0)
    mixed_x = (sub.p - 1) * np.where(sub.present, diag, 0.0).max(axis=0)
    return np.where(sub.chain, chain_x, mixed_x)


class _PerLayer:
    """One layer's pass times, activations and free memory of every (pool, column) cell."""

    def __init__(self, s: Scorer, table: _Table, sub, block: list):
        tables = [_per_pool(s, table, mb, rc) for mb, rc, _ in block]
        f_t, b_t, act, workspace = (np.stack(t) for t in zip(*tables))      # [setting, sp, pool, tp]
        setting = np.repeat(np.arange(len(block)), [columns.lanes.size for _, _, columns in block])
        cell = (setting, sub.sp.astype(np.int64), sub.rows, sub.tpi)
        self.act = act[cell]
        self.fw = f_t[cell]
        self.bw = b_t[cell]
        self.free = table.mem[sub.rows, 0] - workspace[cell]
        self.tau0 = np.where(sub.present, self.fw + self.bw, np.inf)      # what the shares balance (no ZeRO traffic)


def _class_bound_s(s: Scorer, sub, per: _PerLayer, zero: int) -> np.ndarray:
    """The screen of the module docstring for one ZeRO class, over both interleaves, for the
    columns of `sub` (each at its micro-batch size and recompute setting)."""
    L, m, own, x = s.model.layers, sub.m, sub.own, sub.x
    if zero == 1:
        tau = per.fw + per.bw
    elif zero == 2:
        tau = per.fw + pass_with_zero_floor_s(per.bw, sub.grads)
    else:
        tau = pass_with_zero_floor_s(per.fw, sub.gather) + pass_with_zero_floor_s(per.bw, sub.gather + sub.grads)
    W = s.layer_params_held / sub.t_arr * sum(state_bytes_per_param(zero, sub.d, s.states))
    tau = np.where(sub.present, tau, np.inf)
    # (b3): every other stage holds v layers; a mixed stage's beta is its fastest group's (the
    # busiest lane's fill runs at its own group's rate); (b8): a mixed layout's slowest lane
    # takes one micro-batch through every layer at its group's rate
    slowest = np.where(sub.present, tau, 0.0).max(axis=0)
    fastest = np.where(sub.present, tau, np.inf).min(axis=0)
    beta_stage = np.where(sub.present, np.where(sub.chain, tau, fastest), 0.0)
    others = np.where(sub.chain, (beta_stage * sub.width).sum(axis=0) - slowest, (sub.p - 1) * fastest)
    beta_min = np.where(sub.chain, tau.min(axis=0), fastest)
    slow_lane = np.where(sub.chain, 0.0, L * slowest)
    a_chain = own * tau
    a_mixed = m / np.where(sub.present, sub.group_count / tau, 0.0).sum(axis=0)
    ch, mx = sub.chain, ~sub.chain
    a_max = np.where(ch, np.where(sub.present, a_chain, 0.0).max(axis=0), a_mixed)
    a_min = np.where(ch, a_chain.min(axis=0), a_mixed)
    if mx.any():
        n_lo = _mixed_share_floor(m[mx], per.tau0[:, mx], sub.present[:, mx], sub.group_count[:, mx], sub.d[mx])
    best = np.full(ch.size, np.inf)
    for v in INTERLEAVES:
        ok = sub.p * v <= L
        if v > 1:
            ok &= (sub.p > 1) & (L % v == 0)
            ok &= ~ch | ((m % sub.lanes == 0) & ((m // sub.lanes) % sub.p == 0))
        M = np.full(ch.size, np.inf)
        on = np.flatnonzero(ok & ch)
        if on.size:
            M[on] = _chain_level(L=L, v=v, width=sub.width[:, on], present=sub.present[:, on], a=a_chain[:, on],
                                 free=per.free[:, on], W=W[:, on], act=per.act[:, on], own=own[on], p_stages=sub.p[on],
                                 lanes=sub.lanes[on], m=m[on])
        if mx.any():
            fits = _mixed_fits(L=L, v=v, p=sub.p[mx], m=m[mx], replicas=sub.d[mx], n_lo=n_lo,
                               present=sub.present[:, mx], free=per.free[:, mx], W=W[:, mx], act=per.act[:, mx])
            M[mx] = np.where(ok[mx] & fits, a_mixed[mx] * L / sub.p[mx], np.inf)
        M = np.maximum(M, v * a_max)
        with np.errstate(invalid="ignore"):     # interleaved: no fill, transfers once (bound.py)
            fill = (others + beta_min / v * np.maximum(0.0, L - M / a_min - (sub.p - 1) * v)) if v == 1 else 0.0
        T = np.maximum(M + fill, slow_lane) + 2 * x
        T = T * (1 - FILL_SLACK)
        if v == 1:          # the margin comes off the estimated fill only (bound.py)
            T = np.maximum(T, np.maximum(M, slow_lane) + 2 * x)
        best = np.minimum(best, np.where(np.isnan(T), np.inf, T))
    return best


class _Sub:
    """The columns of the live families."""

    def take(self, keep):
        """The same for a subset of them (a boolean mask over these columns)."""
        out = object.__new__(_Sub)
        for name, value in vars(self).items():
            setattr(out, name, value[..., keep])        # the last axis is the column
        return out

    @staticmethod
    def joined(subs: list[_Sub]) -> _Sub:
        """The columns of `subs`, side by side."""
        if len(subs) == 1:
            return subs[0]
        out = object.__new__(_Sub)
        for name in vars(subs[0]):
            setattr(out, name, np.concatenate([getattr(sub, name) for sub in subs], axis=-1))
        return out

    def __init__(self, live, t: _Table):
        self.present, self.width, self.t_arr, self.tp = (t.present[:, live], t.width[:, live], t.t_arr[:, live],
                                                          t.tps[:, live])
        self.first = t.first[live]
        self.rows, self.tpi = t.rows[:, live], t.tpi[:, live]
        self.gather, self.grads, self.group_count = t.gather[:, live], t.grads[:, live], t.group_count[:, live]
        self.lanes, self.chain, self.p, self.sp, self.d = (t.lanes[live], t.chain[live], t.p_stages[live], t.sp[live],
                                                           t.d[live])


def _mixed_share_floor(m, tau0, present, count, replicas):
    """A lower bound on every replica's micro-batches in a mixed stage, for the shares the search
    gives (split.share_micro_batches starts each replica at floor(level / tau) with level just
    under m / sum(1 / tau), or at one when those add up to more than m) and for even shares
    (the baselines: at least floor(m / R))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        level = m / np.where(present, count / tau0, 0.0).sum(axis=0) * (1 - 1e-9)
        start = np.where(present, np.maximum(1.0, np.floor(level / tau0)), 0.0)
        greedy = np.where((start * count).sum(axis=0) <= m, start, 1.0)
        return np.where(present, np.minimum(greedy, np.maximum(1.0, np.floor(m / replicas))), 1.0)


def _mixed_fits(L, v, p, m, replicas, n_lo, present, free, W, act):
    """Whether p identical mixed stages can hold L layers: stage x from the end (x = 1..p) holds,
    on a replica of group g, at least min(n_g, ceil(x c_g)) micro-batches (1F1B: c_g = R n_g / m,
    its window of x R replicas; interleaved: at least min(n_g, x), c_g = 1), so the stages hold at
    most min_g of the sum over x of free_g / (W_g + that A_g) layers (a sum of minima is at most
    the minimum of the sums; each sum bounded as for a chain run), and the first stage (x = p)
    must hold v layers."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.maximum(replicas * n_lo / m, 1e-12) if v == 1 else np.ones_like(n_lo)
        q = p.astype(float)
        total = _run_total(q, c, n_lo, free, W, act)
        least = np.where(free > 0, most_layers_held(free, W, act, window_in_flight_floor(q * c, n_lo)), 0.0)
        total = np.where(present, total, np.inf).min(axis=0)
        least = np.where(present, least, np.inf).min(axis=0)
        return (total >= L * (1 - 1e-12)) & (least >= v)


def _run_total(q, c, own, free, W, act):
    """An upper bound on the layers q stages hold when the x-th from the end (x = 1..q) holds at
    least f_x = min(own, max(1, ceil(x c))) micro-batches of A bytes per layer (and W bytes per
    layer of states): sum_x floor(free / (W + f_x A)). The last stage (x = 1), the stages with
    x c <= 1 (f = 1) and those at own are counted exactly; in between, f_x >= x c and each term is
    at most its integral over [x - 1/2, x + 1/2] (convex in x)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        last = most_layers_held(free, W, act, window_in_flight_floor(c, own))
        ones = np.clip(np.floor(1 / c), 1, q)                          # x <= ones: one micro-batch
        ones = np.where(own <= 1, q, ones)
        k = np.clip(np.ceil(own / c) - 1, ones, q)                     # x <= k: x c < own
        middle = np.where(k > ones, free / (c * act) * np.log((W + (k + 0.5) * c * act) / (W + (ones + 0.5) * c * act)),
                          0.0)
        total = (last + (ones - 1) * most_layers_held(free, W, act, 1) + middle
                 + (q - k) * most_layers_held(free, W, act, own))
        return np.where((free > 0) & (q >= 1), total, 0.0)


def dp_link_ceilings(scorer: Scorer, pools, present, tps, count, chain, first, rows) -> np.ndarray:
    """placement.dp_link_ceiling over arrays (pool, family): per family, the ceiling of its chain
    runs' rings (each run's own, per row) or of its mixed stage's ring (one value for all rows)."""
    gpn = np.array([p.gpus_per_node for p in pools], np.int64)[:, None]
    link = np.array([p.gpu.link_bw_bytes_per_s for p in pools], float)[:, None]
    inter = np.array([p.inter_node_bw_bytes_per_s for p in pools], float)[:, None]
    between = np.array([[scorer.cluster.bw_between_pools(a, b) for b in pools] for a in pools], float)
    busy = np.minimum(tps, gpn)          # a replica wider than a node (context parallelism) fills its nodes
    group_bw = dp_member_bw(inter, np.where(~chain & (rows != first), between[rows, first], np.inf), link, 1, busy)
    group_bw = np.where(chain & (count * tps <= gpn), link, group_bw)
    return np.where(chain, group_bw, np.where(present, group_bw, np.inf).min(axis=0))


def _diagonal_floor_s(scorer: Scorer, pools, tp_list, mb) -> np.ndarray:
    """[pool, tp] table of placement.p2p_floor_s from a replica of (pool, tp) to another of the
    same (the larger of both directions, as bound.TransferFloors.boundary_floor_s takes it)."""
    size = activation_message_bytes(ACT_BYTES, scorer.job.seq_len, mb, scorer.model.hidden)
    out = np.zeros((len(pools), len(tp_list)))
    for k, pool in enumerate(pools):
        for j, t in enumerate(tp_list):
            out[k, j] = p2p_floor_s(scorer.cluster, pool, t, pool, t, size)
    return out


def _chain_level(L, v, width, present, a, free, W, act, own, p_stages, lanes, m):
    """Water level M of (b2)/(b6) for chain families (rows: the runs), memory caps relaxed as the
    module docstring says; inf where the runs cannot hold L layers."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = width.astype(float)
        ownf = own.astype(float)
        if v == 1:
            # the stage x from the run's end holds >= min(own, ceil(x c)) micro-batches, c = d own / m
            # (its window x d over the m micro-batches, own of them its own)
            c = lanes * ownf / m
            per_stage = free / (W + window_in_flight_floor(c, ownf) * act)
            total = _run_total(q, c, ownf, free, W, act)
            # the run's first stage (x = q) holds the most: it must still fit v layers
            least = free / (W + window_in_flight_floor(q * c, ownf) * act)
        else:
            flight = interleaved_in_flight(p_stages, p_stages - 1, v, ownf)     # the last stage holds the fewest
            per_stage = free / (W + flight * act)
            total = q * per_stage
            least = free / (W + interleaved_in_flight(p_stages, p_stages - q, v, ownf) * act)
        cap = np.where(present & (free > 0), np.minimum(total / np.maximum(q, 1), per_stage), 0.0)
        feasible = (q * cap).sum(axis=0) >= L * (1 - 1e-12)
        feasible &= (~present | (np.floor(np.where(free > 0, least, 0.0) * (1 + 1e-9)) >= v)).all(axis=0)
        active = present.copy()
        left = np.full(q.shape[1], float(L))
        level = np.zeros(q.shape[1])
        for _ in range(q.shape[0] + 1):
            denom = np.where(active, q / a, 0.0).sum(axis=0)
            level = np.where(denom > 0, left / np.where(denom > 0, denom, 1.0), level)
            capped = active & (level / a > cap)
            if not capped.any():
                break
            left = left - np.where(capped, q * cap, 0.0).sum(axis=0)
            active &= ~capped
        none_left = ~active.any(axis=0)
        level = np.where(none_left, np.where(present, cap * a, 0.0).max(axis=0), level)
        return np.where(feasible, level, np.inf)


def _per_pool(s: Scorer, table: _Table, mb, rc):
    """(forward, backward, activation bytes per layer, recompute workspace bytes) tables
    [sp][pool, tp] for one micro-batch (the scorer's, which caches them), in the table's cells: those
    of its groups (sequence parallelism where some group of the family has tp > 1, else every group
    has tp 1) at a tp their pool allows. The other cells stay inf: a (pool, family) cell without a
    group reads one, masked (present), and one of a tp the pool does not allow screens its family out."""
    f, b, act, workspace = (np.full((2, len(table.pools), len(table.tp_list)), np.inf) for _ in range(4))
    for spi, k, j in table.cells:
        pool, t, sp = table.pools[k], table.tp_list[j], spi == 1
        fw, bw, _, _ = s.pass_times(pool, t, mb, rc, sp)
        f[spi, k, j], b[spi, k, j] = fw, bw
        act[spi, k, j] = s.activation_bytes(mb, t, sp, rc)
        workspace[spi, k, j] = s.workspace_bytes(mb, t, sp, rc)
    return f, b, act, workspace
