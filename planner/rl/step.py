"""One RL step's time and cost for an RlPlan on a cluster: the phases of every role, their order
or overlap, and the figures (samples and tokens per second, dollars per step).

Phases (verl's ray_trainer `fit` order, volcengine/verl@b178a3c): weight sync (colocated: before
generation), generation, reward (a reward model's forward), reference forward, the actor's old
log-probabilities (a forward), the critic's values (PPO), actor training, critic training; weight
sync (disaggregated: after training, to the rollout GPUs).

    sync, any shape     step = the sum of the phases (one after another)
    async, apart        step = max(rollout side, training side) + weight sync
                        (one-step off-policy: step k's generation overlaps step k-1's training;
                        verl/experimental/one_step_off_policy)
    async, colocated    no overlap (the roles share the GPUs): as sync, with a note

Weight sync (16-bit weights, 2 N bytes):
  colocated (resharding): every GPU gathers the full tensors from the actor's shards, parameter
    by parameter, and loads its rollout shard (verl/workers/fsdp_workers.py `rollout_mode`,
    `full_tensor()`): an all-gather of 2 N bytes over the actor's GPUs.
  disaggregated: the same gather on the actor side, then a broadcast of 2 N bytes from the actor's
    first rank to every rollout rank (verl/experimental/one_step_off_policy/fsdp_workers.py
    `sync_rollout_weights`, collective.broadcast per tensor), pipelined over the slowest path
    between the actor's pool and a rollout pool: p2p(2 N) on it.
Forward-only roles (reference, reward, old log-probs, critic values) run data parallel, each
replica the narrowest power-of-two tensor-parallel group whose weights fill at most half a GPU,
at the training cost model's forward rates (planner.compute.layer_forward_parts) and the head.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.comm import INTRA_NODE_LATENCY_S, all_gather_s, all_reduce_s, p2p_s
from planner.compute import layer_forward_parts
from planner.cost import evaluate, price_per_hour_usd
from planner.flops import head_forward_flops, model_params
from planner.rl.engines import ROLLOUT_ENGINES
from planner.rl.generation import WEIGHT_BYTES, Generation, generation
from planner.rl.roles import Role, RlPlan, RolloutGroup, Shape
from planner.rl.workload import RlJob
from planner.types import Cluster, Estimate, InputError, Model, Pool, Precision

FORWARD_WEIGHT_SHARE = 0.5     # forward-only replicas: weights at most this share of a GPU's memory
FORWARD_CHUNK_TOKENS = 8192    # tokens per forward micro-batch (verl log_prob_max_token_len_per_gpu: 16384)


@dataclass(frozen=True)
class Phase:
    role: str                  # planner.rl.roles.Role value, or "sync"
    name: str
    where: str                 # "rollout GPUs" or "training GPUs" (colocated: "all GPUs")
    start_s: float
    duration_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class RlEstimate:
    step_time_s: float
    phases: tuple[Phase, ...]
    samples_per_s: float
    tokens_per_s: float                    # prompt + response tokens of the samples
    response_tokens_per_s: float
    cost_per_hour_usd: float
    dollars_per_step: float
    num_gpus: int
    gpus_by_pool: dict[str, int]
    fits: bool
    generation: tuple[tuple[RolloutGroup, Generation], ...]
    actor: Estimate
    notes: tuple[str, ...] = field(default=())

    @property
    def phase_sum_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def longest_phase_s(self) -> float:
        return max(p.duration_s for p in self.phases)


def forward_tp(model: Model, pool: Pool) -> int:
    """The narrowest power-of-two group of one node whose 16-bit weights fill at most half a GPU."""
    tp = 1
    while WEIGHT_BYTES * model_params(model) / tp > FORWARD_WEIGHT_SHARE * pool.gpu.mem_bytes:
        tp *= 2
        if tp > pool.gpus_per_node:
            raise InputError("model", f"{model.id}'s weights do not fit a node of {pool.name} for a forward pass")
    return tp


def forward_sequence_s(model: Model, pool: Pool, tp: int, seq_len: int) -> float:
    """One sequence's forward on a replica of `tp` GPUs: layers, all-reduces, the head (log-probs of
    every token)."""
    chunk = max(1, FORWARD_CHUNK_TOKENS // seq_len)
    parts = layer_forward_parts(model, pool.gpu, seq_len, chunk, tp, False, True, Precision.BF16)
    comm = 2 * all_reduce_s(chunk * seq_len * model.hidden * WEIGHT_BYTES, tp, pool.gpu.link_bw_bytes_per_s,
                            INTRA_NODE_LATENCY_S)
    head = head_forward_flops(model, chunk * seq_len) / tp / (pool.gpu.peak_flops * pool.gpu.efficiency)
    return (model.layers * (sum(parts) + comm) + head) / chunk


def forward_s(cluster: Cluster, model: Model, gpus_by_pool: dict[str, int], sequences: int, seq_len: int,
              tp_by_pool: dict[str, int] | None = None) -> float:
    """`sequences` forward passes spread over the GPUs in proportion to each replica's speed."""
    rate = 0.0
    for name, gpus in gpus_by_pool.items():
        pool = cluster.pool(name)
        tp = (tp_by_pool or {}).get(name) or forward_tp(model, pool)
        if tp > gpus:
            continue
        rate += (gpus // tp) / forward_sequence_s(model, pool, tp, seq_len)
    if rate <= 0:
        raise InputError("roles", f"no replica of {model.id} fits the GPUs {gpus_by_pool} for a forward pass")
    return sequences / rate


def rollout_split(cluster: Cluster, plan: RlPlan, resident: dict[str, float]) -> list[tuple[RolloutGroup, Generation]]:
    """The step's samples dealt over the rollout replicas in proportion to their speed (two passes:
    an even split measures each group's rate, the second deals by it), each replica's rollout."""
    job, engine = plan.job, ROLLOUT_ENGINES[plan.rollout_engine]
    n, G = job.samples_per_step, job.samples_per_prompt
    replicas = sum(g.replicas for g in plan.rollout)

    def run(group: RolloutGroup, per_replica: int) -> Generation:
        return generation(model=job.model, pool=cluster.pool(group.pool), tp=group.tp, sequences=max(1, per_replica),
                          prompt_len=job.prompt_len, response_len=job.response_len,
                          response_len_max=job.response_len_max, samples_per_prompt=G, engine=engine,
                          resident_bytes=resident.get(group.pool, 0.0))

    even = [run(g, math.ceil(n / replicas)) for g in plan.rollout]
    rates = [g.replicas * gen.sequences / gen.time_s for g, gen in zip(plan.rollout, even)]
    total = sum(rates)
    return [(g, run(g, math.ceil(n * r / total / g.replicas))) for g, r in zip(plan.rollout, rates)]


def weight_sync_s(cluster: Cluster, plan: RlPlan) -> float:
    """The new weights into the rollout's layout: the gather over the actor's GPUs, and for apart
    rollout GPUs the broadcast over the slowest path to them (module docstring)."""
    weights = WEIGHT_BYTES * model_params(plan.job.model)
    gather = 0.0
    for name, gpus in plan.actor.gpus_by_pool().items():
        pool = cluster.pool(name)
        bw = pool.gpu.link_bw_bytes_per_s if gpus <= pool.gpus_per_node else min(pool.gpu.link_bw_bytes_per_s,
                                                                                  pool.inter_node_bw_bytes_per_s)
        lat = INTRA_NODE_LATENCY_S if gpus <= pool.gpus_per_node else pool.inter_node_latency_s
        gather = max(gather, all_gather_s(weights, gpus, bw, lat))
    if plan.shape == Shape.COLOCATED:
        return gather
    send = 0.0
    for a in plan.actor.gpus_by_pool():
        for g in plan.rollout:
            pa, pr = cluster.pool(a), cluster.pool(g.pool)
            send = max(send, p2p_s(weights, cluster.bw_between_pools(pa, pr), cluster.latency_between_pools(pa, pr)))
    return gather + send


def training_states_per_gpu(job: RlJob, actor: Estimate) -> dict[str, float]:
    """The actor's (and PPO's critic's) weights, gradients and optimizer states per GPU of each pool,
    which stay resident while a colocated rollout runs (verl's fsdp.yaml: param_offload and
    optimizer_offload false)."""
    out: dict[str, float] = {}
    for r in actor.replicas:
        m = r.memory
        states = (m.weights_bytes + m.gradients_bytes + m.optimizer_bytes) * (2 if job.critic else 1)
        out[r.pool] = max(out.get(r.pool, 0.0), states)
    return out


def _resident(cluster: Cluster, plan: RlPlan, actor: Estimate) -> dict[str, float]:
    """Bytes per GPU that stay in memory beside the rollout engine on each rollout pool."""
    job, out = plan.job, {}
    if plan.shape == Shape.COLOCATED:
        return training_states_per_gpu(job, actor)
    if plan.shape == Shape.MIXED:        # the reference (and reward model) weights beside the rollout's
        for g in plan.rollout:
            extra = (WEIGHT_BYTES * model_params(job.model) if job.reference else 0.0) + \
                    (WEIGHT_BYTES * model_params(job.reward_model) if job.reward_model else 0.0)
            out[g.pool] = extra / g.tp
    return out


def check_gpus(cluster: Cluster, plan: RlPlan) -> None:
    """Every rollout replica inside one node of a pool of the cluster, its degree dividing the
    model's heads; no pool holding more of the plan's GPUs than it has."""
    names = [p.name for p in cluster.pools]
    for i, g in enumerate(plan.rollout):
        if g.pool not in names:
            raise InputError(f"roles.rollout[{i}].pool", f"unknown pool {g.pool!r}; the cluster has {names}")
        pool = cluster.pool(g.pool)
        if g.tp > pool.gpus_per_node or plan.job.model.heads % g.tp:
            raise InputError(f"roles.rollout[{i}].tp", f"a rollout replica of tp {g.tp} must fit one node of "
                                                       f"{pool.name} ({pool.gpus_per_node} GPUs) and divide "
                                                       f"{plan.job.model.id}'s {plan.job.model.heads} heads")
    for name, n in plan.gpus_by_pool().items():
        pool = cluster.pool(name)
        if n > pool.num_gpus:
            raise InputError("roles", f"the plan uses {n} GPUs of pool {name} but it has {pool.num_gpus}")


def evaluate_rl(cluster: Cluster, plan: RlPlan) -> RlEstimate:
    """The step time, phases and figures of `plan` on `cluster` (module docstring)."""
    check_gpus(cluster, plan)
    job = plan.job
    actor = evaluate(cluster, plan.actor)
    gens = rollout_split(cluster, plan, _resident(cluster, plan, actor))
    gen_s = max(g.time_s for _, g in gens)
    train_gpus = plan.actor.gpus_by_pool()
    rollout_gpus = plan.rollout_gpus_by_pool()
    rollout_tp = {g.pool: g.tp for g in plan.rollout}
    S, n = job.train_seq_len, job.samples_per_step
    apart = plan.shape == Shape.MIXED
    side = "rollout GPUs" if apart else ("all GPUs" if plan.shape == Shape.COLOCATED else "training GPUs")
    train_side = "all GPUs" if plan.shape == Shape.COLOCATED else "training GPUs"
    fwd_gpus, fwd_tp = (rollout_gpus, rollout_tp) if apart else (train_gpus, None)
    rollout_side = [(Role.ROLLOUT.value, "generation", gen_s)]
    training_side = []
    lane = rollout_side if apart else training_side
    if job.reward_model is not None:
        lane.append((Role.REWARD.value, "reward model forward", forward_s(cluster, job.reward_model, fwd_gpus, n, S,
                                                                          fwd_tp)))
    if job.reference:
        lane.append((Role.REFERENCE.value, "reference forward", forward_s(cluster, job.model, fwd_gpus, n, S, fwd_tp)))
    fwd_train = forward_s(cluster, job.model, train_gpus, n, S)
    training_side.append((Role.ACTOR.value, "old log-probs", fwd_train))
    if job.critic:
        training_side.append((Role.CRITIC.value, "critic values", fwd_train))
    train_s = job.ppo_epochs * job.mini_batches * actor.iteration_time_s
    training_side.append((Role.ACTOR.value, "actor training", train_s))
    if job.critic:
        training_side.append((Role.CRITIC.value, "critic training", train_s))
    sync = weight_sync_s(cluster, plan)
    phases = _timeline(plan, rollout_side, training_side, sync, side, train_side)
    step = max(p.end_s for p in phases)
    used = plan.gpus_by_pool()
    price = price_per_hour_usd({p.name: p for p in cluster.pools}, used)
    notes = _notes(plan, actor)
    return RlEstimate(step_time_s=step, phases=tuple(phases), samples_per_s=n / step,
                      tokens_per_s=job.tokens_per_step / step, response_tokens_per_s=job.response_tokens_per_step / step,
                      cost_per_hour_usd=price, dollars_per_step=price / 3600 * step, num_gpus=sum(used.values()),
                      gpus_by_pool=used, fits=actor.fits, generation=tuple(gens), actor=actor, notes=notes)


def _timeline(plan: RlPlan, rollout_side, training_side, sync: float, side: str, train_side: str) -> list[Phase]:
    where_r = "all GPUs" if plan.shape == Shape.COLOCATED else "rollout GPUs"
    if plan.overlapped:                    # two lanes from 0, the sync after both
        phases, t = [], 0.0
        for role, name, d in rollout_side:
            phases.append(Phase(role, name, where_r, t, d))
            t += d
        r_end, t = t, 0.0
        for role, name, d in training_side:
            phases.append(Phase(role, name, train_side, t, d))
            t += d
        phases.append(Phase("sync", "weight sync", "network", max(r_end, t), sync))
        return phases
    order = ([("sync", "weight sync", sync)] if plan.shape == Shape.COLOCATED else []) + rollout_side + training_side
    if plan.shape != Shape.COLOCATED:
        order.append(("sync", "weight sync", sync))
    phases, t = [], 0.0
    for role, name, d in order:
        where = where_r if role == Role.ROLLOUT.value else (
            "network" if role == "sync" and plan.shape != Shape.COLOCATED else
            (side if role in (Role.REFERENCE.value, Role.REWARD.value) else train_side))
        phases.append(Phase(role, name, where, t, d))
        t += d
    return phases


def _notes(plan: RlPlan, actor: Estimate) -> tuple[str, ...]:
    notes = ("training sequences costed at prompt + mean response tokens, packed without padding (verl "
             "use_remove_padding); the critic as the actor's model and plan",)
    if plan.job.mode.value == "async" and plan.shape == Shape.COLOCATED:
        notes += ("async asked, but colocated roles share the GPUs: generation cannot overlap training, so the step "
                  "runs as sync",)
    if not actor.fits:
        notes += (f"the actor's training plan does not fit: {actor.oom}",)
    if plan.job.reward_model is not None:
        notes += ("reward model: one forward pass over the samples; its serving detail is not modelled",)
    return notes
