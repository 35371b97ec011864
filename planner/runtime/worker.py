"""One process of a local distributed run: its stage's chunks, the pipeline, gradient sync.

Pipeline: the worker runs its operations in the order the cost model's simulation ran them
(`planner.schedule`: GPipe, 1F1B or interleaved 1F1B over the micro-batches its replica owns,
as assigned by `assign_micro_batches`).
Activations go from tensor-parallel rank 0 of the sending replica to every rank of the
receiving replica (isend / blocking recv); gradients flow back the same way. Under context
parallelism each context-parallel rank does so with the matching one of the other replica (every
replica has the plan's cp), passing its own part of the sequence.

Data parallelism: each micro-batch's loss is scaled by micro_batch / global_batch before its
backward pass, so a replica's accumulated gradient is its sample share of the full-batch mean and
the stage's gradient is the plain sum over replicas. Under context parallelism a rank's loss is the mean
over its part of each sequence (equal parts), scaled by a further 1 / cp: the sum over the stage's
dp x cp ranks is the full-batch mean again. Replicas of one stage may differ in
tensor-parallel degree, so each rank contributes its gradient placed into the full-shaped tensor
(replicated parameters divided by tp) and one all-reduce over the stage's ranks gives every rank
the full gradient, of which it keeps its slice. A LoRA factor replicated across a tensor-parallel
group holds only its rank's part of the gradient (planner.runtime.parallel.partial_over_tp) and
goes in undivided. Tied embeddings: the first and last stage hold copies whose gradients are summed
afterwards (Megatron-LM's embedding group); adapter jobs freeze them.

Optimizer and ZeRO (Rajbhandari et al. 2020, section 5): Adam (planner.runtime.optim). ZeRO-0: every
rank keeps Adam's moments for its tensor-parallel slices. ZeRO >= 1: the stage's flat full-shaped
parameters are cut into one shard per rank, 1 / (tp x dp x cp) of them for a rank of a replica of tp
GPUs (planner.runtime.ranks.zero_shard_bounds, as planner.memory counts it); a rank keeps Adam's
moments and a master copy of its shard only, steps it with its shard of the reduced gradient, and the
updated shards are all-gathered for every rank's slices. ZeRO-2 keeps no other gradient than the
shard; ZeRO-3 keeps no other weights, and gathers its slices once an iteration, before its first
pass, releasing them after the gradient sync. DeepSpeed gathers layer by layer before each pass;
here replicas of a stage run different numbers of micro-batches, so per-pass collectives over the
stage would not pair up: during the passes a ZeRO-3 rank holds its whole slices, as under ZeRO-2.
With replicas of different tp a shard need not lie inside its rank's slice, so the collectives run
over the full-shaped vector of the stage's ranks rather than over the slices of a data-parallel
group: the model states a rank keeps are ZeRO's, the bytes on the wire are not.
"""
from __future__ import annotations

import datetime
import math
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from planner.chunks import chunk_layers
from planner.runtime.lora import LoraConfig
from planner.runtime.model import Chunk, Init, lm_loss
from planner.runtime.optim import AdamState
from planner.runtime.parallel import CpGroup, TpGroup
from planner.runtime.ranks import RankInfo, cp_group_ranks, micro_batch_owners, tp_group_ranks, zero_shard_bounds
from planner.runtime.tiny import TinyConfig
from planner.schedule import FORWARD
from planner.types import Plan


@dataclass(frozen=True)
class RunSpec:
    plan: Plan
    cfg: TinyConfig
    layout: tuple[RankInfo, ...]
    orders: dict            # (stage, replica) -> [(kind, chunk, micro-batch)], see ranks.worker_op_orders
    iterations: int
    seed: int
    dtype: str              # "float32" or "float64"
    lr: float
    port: int
    timeout_s: float


@dataclass
class Meter:
    forward_s: float = 0.0
    backward_s: float = 0.0
    p2p_wait_s: float = 0.0
    dp_sync_s: float = 0.0
    zero_gather_s: float = 0.0
    forwards: int = 0
    backwards: int = 0
    iteration_s: list = field(default_factory=list)


def make_batch(seed: int, iteration: int, global_batch: int, seq_len: int, vocab: int):
    g = torch.Generator().manual_seed(seed * 7919 + iteration)
    tokens = torch.randint(vocab, (global_batch, seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _neighbours(i: int, c: int, p: int, v: int):
    """(stage, chunk) that feeds chunk c of stage i, and the one it feeds (None at the ends)."""
    prev = (i - 1, c) if i > 0 else ((p - 1, c - 1) if c > 0 else None)
    nxt = (i + 1, c) if i < p - 1 else ((0, c + 1) if c < v - 1 else None)
    return prev, nxt


class Groups:
    """Every process group, created in the same order on every rank (torch.distributed requires it)."""

    def __init__(self, spec: RunSpec, me: RankInfo):
        plan, layout = spec.plan, list(spec.layout)
        self.tp = TpGroup()
        for (i, r, c), members in tp_group_ranks(layout).items():
            group = dist.new_group(members) if len(members) > 1 else None
            if (i, r, c) == (me.stage, me.replica, me.cp_rank) and group is not None:
                self.tp = TpGroup(group, me.tp_rank, len(members))
        self.cp = CpGroup()
        for (i, r, t), members in cp_group_ranks(layout).items():
            group = dist.new_group(members) if len(members) > 1 else None
            if (i, r, t) == (me.stage, me.replica, me.tp_rank) and group is not None:
                self.cp = CpGroup(group, me.cp_rank, len(members))
        self.stage_ranks = [sorted(x.rank for x in spec.layout if x.stage == i) for i in range(plan.num_stages)]
        self.stage = None
        for i, members in enumerate(self.stage_ranks):
            group = dist.new_group(members) if len(members) > 1 else None
            if i == me.stage:
                self.stage = group
        self.embedding = None
        if spec.cfg.tied_embeddings and plan.num_stages > 1:
            members = sorted(self.stage_ranks[0] + self.stage_ranks[-1])
            group = dist.new_group(members)
            if me.stage in (0, plan.num_stages - 1):
                self.embedding = group


class Worker:
    def __init__(self, spec: RunSpec, me: RankInfo):
        self.spec, self.me, self.plan = spec, me, spec.plan
        self.groups = Groups(spec, me)
        self.tp_ranks = tp_group_ranks(list(spec.layout))     # (stage, replica, cp rank) -> ranks
        self.owners = micro_batch_owners(self.plan)
        dtype = getattr(torch, spec.dtype)
        init = Init(spec.seed, dtype)
        lora = LoraConfig.of(self.plan.training)
        self.chunks = [Chunk(spec.cfg, a, b, init, self.groups.tp, self.plan.recompute.value, lora, self.groups.cp)
                       for a, b in chunk_layers(self.plan)[me.stage]]
        self.params = [np for chunk in self.chunks for np in chunk.global_parameters()]
        self.full_numels = [math.prod(p.full_shape) for _, p in self.params]
        self.ops = spec.orders[(me.stage, me.replica)]
        self.meter = Meter()
        self.zero = self.plan.zero_stage
        self.bounds = zero_shard_bounds(list(spec.layout), me.stage, sum(self.full_numels))
        self.shard = self.bounds[me.rank]
        self.master = self.grad_shard = self.last_flat_grad = None
        self._start_optimizer()

    # ------------------------------------------------------------------ point to point

    def _tag(self, j: int, chunk: int, kind: int) -> int:
        return (j * self.plan.interleave + chunk) * 2 + kind

    def _send(self, tensor, stage: int, chunk: int, j: int, kind: int, pending: list) -> None:
        if self.me.tp_rank != 0:
            return
        for dst in self.tp_ranks[(stage, self.owners[stage][j], self.me.cp_rank)]:
            pending.append(dist.isend(tensor, dst, tag=self._tag(j, chunk, kind)))

    def _recv(self, stage: int, chunk_here: int, j: int, kind: int):
        mb, cfg = self.plan.micro_batch, self.spec.cfg
        local_len = cfg.seq_len // self.groups.cp.size
        buf = torch.empty((mb, local_len, cfg.hidden), dtype=getattr(torch, self.spec.dtype))
        src = self.tp_ranks[(stage, self.owners[stage][j], self.me.cp_rank)][0]
        t0 = time.perf_counter()
        dist.recv(buf, src, tag=self._tag(j, chunk_here, kind))
        self.meter.p2p_wait_s += time.perf_counter() - t0
        return buf

    # ------------------------------------------------------------------ one iteration

    def run_iteration(self, it: int) -> float:
        plan, cfg, me = self.plan, self.spec.cfg, self.me
        inputs, targets = make_batch(self.spec.seed, it, plan.global_batch, cfg.seq_len, cfg.vocab)
        cp = self.groups.cp
        mine = cp.positions(cfg.seq_len // cp.size)        # this rank's part of every sequence
        inputs, targets = inputs[:, mine], targets[:, mine]
        mb, scale = plan.micro_batch, plan.micro_batch / plan.global_batch / cp.size
        p, v = plan.num_stages, plan.interleave
        stash, pending, loss_sum = {}, [], 0.0
        t_iter = time.perf_counter()
        if self.zero >= 3:      # once an iteration: see the module docstring
            self._load_parameters(self._gather_shards(self.master))
        for kind, c, j in self.ops:
            prev, nxt = _neighbours(me.stage, c, p, v)
            rows = slice(j * mb, (j + 1) * mb)
            if kind == FORWARD:
                x = inputs[rows] if prev is None else self._recv(prev[0], c, j, FORWARD).requires_grad_()
                t0 = time.perf_counter()
                y = self.chunks[c](x)
                if nxt is None:
                    loss = lm_loss(y, targets[rows])
                    loss_sum += loss.item() * scale
                    y = loss * scale
                self.meter.forward_s += time.perf_counter() - t0
                self.meter.forwards += 1
                stash[(c, j)] = (x, y)
                if nxt is not None:
                    self._send(y.detach(), nxt[0], nxt[1], j, FORWARD, pending)
            else:
                x, y = stash.pop((c, j))
                grad = None if nxt is None else self._recv(nxt[0], c, j, 1 - FORWARD)
                t0 = time.perf_counter()
                y.backward(grad)
                self.meter.backward_s += time.perf_counter() - t0
                self.meter.backwards += 1
                if prev is not None:
                    self._send(x.grad, prev[0], prev[1], j, 1 - FORWARD, pending)
        for work in pending:
            work.wait()
        assert not stash, f"rank {me.rank}: micro-batches never went backward: {sorted(stash)}"
        t0 = time.perf_counter()
        flat = self.sync_gradients()
        self.meter.dp_sync_s += time.perf_counter() - t0
        self.last_flat_grad = flat if self.zero < 2 else None
        if self.zero >= 3:
            self._release_parameters()
        self.meter.iteration_s.append(time.perf_counter() - t_iter)
        holds_loss = me.stage == p - 1 and me.tp_rank == 0
        return loss_sum if holds_loss else 0.0

    # ------------------------------------------------------------------ data parallel

    def _placed(self, tensors, replicated) -> torch.Tensor:
        """This rank's slice of each parameter (`tensors`, in `params` order) placed into the stage's flat,
        full-shaped vector, zeros elsewhere; `replicated(p, t)`: what a replicated parameter contributes."""
        tp, fulls = self.groups.tp, []
        for (_, p), t in zip(self.params, tensors):
            full = torch.zeros(p.full_shape, dtype=t.dtype)
            if p.shard_dim is None:
                full.copy_(replicated(p, t))
            else:
                size = t.shape[p.shard_dim]
                full.narrow(p.shard_dim, tp.rank * size, size).copy_(t)
            fulls.append(full.reshape(-1))
        return torch.cat(fulls)

    def _local_slices(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """This rank's tensor-parallel slice of each parameter, as views of the stage's flat full-shaped vector."""
        tp, out = self.groups.tp, []
        for full, (_, p) in zip(torch.split(flat, self.full_numels), self.params):
            full = full.view(p.full_shape)
            if p.shard_dim is not None:
                size = full.shape[p.shard_dim] // tp.size
                full = full.narrow(p.shard_dim, tp.rank * size, size)
            out.append(full)
        return out

    def _sum_tied_embedding(self, flat: torch.Tensor) -> None:
        names = [name for name, _ in self.params]
        if self.groups.embedding is None or "embed.word" not in names:      # trained, so on both ends
            return
        k = names.index("embed.word")
        start = sum(self.full_numels[:k])
        part = flat[start:start + self.full_numels[k]]
        emb = part / len(self.groups.stage_ranks[self.me.stage])
        dist.all_reduce(emb, group=self.groups.embedding)
        part.copy_(emb)

    def sync_gradients(self) -> torch.Tensor:
        """Every rank ends with the full-batch gradient: its tensor-parallel slice of every tensor (ZeRO 0-1)
        and its shard of the stage's flat vector (ZeRO >= 1; ZeRO-2 and 3 keep the shard alone).
        Returns the flat full-shaped gradient, which only lives as long as the all-reduce that builds it."""
        tp = self.groups.tp
        flat = self._placed([p.grad for _, p in self.params],
                            lambda p, g: g if getattr(p, "tp_partial", False) else g / tp.size)
        if self.groups.stage is not None:
            dist.all_reduce(flat, group=self.groups.stage)
        self._sum_tied_embedding(flat)
        if self.zero >= 1:
            # gloo has no reduce-scatter on every build: the all-reduce above, then this rank's slice of it
            lo, hi = self.shard
            self.grad_shard = flat[lo:hi].clone()
        for (_, p), g in zip(self.params, self._local_slices(flat)):
            if self.zero >= 2:
                p.grad = None
            else:
                p.grad.copy_(g)
        return flat

    def full_gradients(self) -> dict[str, torch.Tensor]:
        """The last iteration's full-batch gradient by global name, full tensors, for the report: under
        ZeRO-2 and 3, all-gathered from the shards (every rank of the stage must call this)."""
        flat = self.last_flat_grad if self.zero < 2 else self._gather_shards(self.grad_shard)
        return {name: t.view(p.full_shape) for t, (name, p) in zip(torch.split(flat, self.full_numels), self.params)
                if not getattr(p, "tied_copy", False)}

    # ------------------------------------------------------------------ optimizer and ZeRO

    def _start_optimizer(self) -> None:
        """Adam's state for this rank's parameters (ZeRO-0), or for its shard of the stage's flat parameters
        with a master copy of that shard (ZeRO >= 1, planner.runtime.ranks.zero_shard_bounds); ZeRO-3 then
        keeps no other copy of the weights between iterations."""
        if self.zero == 0:
            self.adam = [AdamState(p) for _, p in self.params]
            return
        # each element from one rank that holds it: replica 0's cp rank 0 ranks hold every tensor-parallel
        # slice, replicated tensors come from their tp rank 0 (every copy is equal at the start)
        holds = self.me.replica == 0 and self.me.cp_rank == 0
        tp = self.groups.tp
        flat = self._placed([p.detach() if holds else torch.zeros_like(p) for _, p in self.params],
                            lambda p, t: t if tp.rank == 0 else torch.zeros_like(t))
        if self.groups.stage is not None:
            dist.all_reduce(flat, group=self.groups.stage)
        lo, hi = self.shard
        self.master = flat[lo:hi].clone()
        self.adam = [AdamState(self.master)]
        if self.zero >= 3:
            self._release_parameters()

    def _gather_shards(self, shard: torch.Tensor) -> torch.Tensor:
        """The stage's flat vector from every rank's shard (an all-gather; shards differ in length, so each
        goes padded to the longest)."""
        if self.groups.stage is None:
            return shard.clone()
        t0 = time.perf_counter()
        members = self.groups.stage_ranks[self.me.stage]           # the group's rank order
        lengths = [self.bounds[r][1] - self.bounds[r][0] for r in members]
        padded = torch.zeros(max(lengths), dtype=shard.dtype)
        padded[:shard.numel()].copy_(shard)
        parts = [torch.empty_like(padded) for _ in members]
        dist.all_gather(parts, padded, group=self.groups.stage)
        self.meter.zero_gather_s += time.perf_counter() - t0
        return torch.cat([part[:n] for part, n in zip(parts, lengths)])

    def _load_parameters(self, flat: torch.Tensor) -> None:
        with torch.no_grad():
            for (_, p), value in zip(self.params, self._local_slices(flat)):
                p.data = value.clone()

    def _release_parameters(self) -> None:
        for _, p in self.params:
            p.data = torch.empty(0, dtype=p.dtype)

    def step(self) -> None:
        """Adam on this rank's parameters (ZeRO-0) or on its shard, whose updated values every rank then
        all-gathers for its tensor-parallel slice (ZeRO-1 and 2; ZeRO-3 gathers at the next iteration)."""
        if self.zero == 0:
            for (_, p), state in zip(self.params, self.adam):
                state.step(p, p.grad, self.spec.lr)
                p.grad = None
            return
        self.adam[0].step(self.master, self.grad_shard, self.spec.lr)
        self.grad_shard = None
        for _, p in self.params:
            p.grad = None
        if self.zero <= 2:
            self._load_parameters(self._gather_shards(self.master))

    def held_elements(self) -> dict[str, int]:
        """Elements of model state this rank keeps between iterations: parameters (its tensor-parallel
        slices; none under ZeRO-3), gradients (as the last sync left them: slices, plus under ZeRO-1 the
        shard its optimizer reads, which with mixed tp may lie outside its slice; under ZeRO-2 and 3 the
        shard alone), Adam's moments and the master shard of the weights (ZeRO >= 1)."""
        grads = sum(p.grad.numel() for _, p in self.params if p.grad is not None)
        return {"params": sum(p.numel() for _, p in self.params),
                "grads": grads + (self.grad_shard.numel() if self.grad_shard is not None else 0),
                "adam_moments": sum(state.numel for state in self.adam),
                "master_params": self.master.numel() if self.master is not None else 0,
                "stage_params": sum(self.full_numels)}


def worker_main(rank: int, spec: RunSpec, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec.port}", rank=rank,
                            world_size=len(spec.layout), timeout=datetime.timedelta(seconds=spec.timeout_s))
    try:
        me = spec.layout[rank]
        worker = Worker(spec, me)
        losses = []
        for it in range(spec.iterations):
            loss = torch.tensor([worker.run_iteration(it)], dtype=torch.float64)
            dist.all_reduce(loss)
            losses.append(loss.item())
            if it < spec.iterations - 1:
                worker.step()
        report = me.replica == 0 and me.tp_rank == 0 and me.cp_rank == 0
        full = worker.full_gradients()
        grads = {k: t.detach().numpy().copy() for k, t in full.items()} if report else {}
        queue.put({"rank": rank, "losses": losses, "grads": grads, "meter": worker.meter.__dict__,
                   "held": worker.held_elements(),
                   "tp_comm_s": worker.groups.tp.comm_s[0], "cp_comm_s": worker.groups.cp.comm_s[0]})
        dist.barrier()
    except Exception:   # say which rank failed: the others only see a closed connection
        print(f"rank {rank} ({spec.layout[rank]}):\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        raise
    finally:
        dist.destroy_process_group()
