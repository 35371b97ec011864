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
"""
from __future__ import annotations

import datetime
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from planner.chunks import chunk_layers
from planner.runtime.lora import LoraConfig
from planner.runtime.model import Chunk, Init, lm_loss
from planner.runtime.parallel import CpGroup, TpGroup
from planner.runtime.ranks import RankInfo, cp_group_ranks, micro_batch_owners, tp_group_ranks
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
        self.ops = spec.orders[(me.stage, me.replica)]
        self.meter = Meter()

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
        full = self.sync_gradients()
        self.meter.dp_sync_s += time.perf_counter() - t0
        self.meter.iteration_s.append(time.perf_counter() - t_iter)
        self.last_full_grads = full
        holds_loss = me.stage == p - 1 and me.tp_rank == 0
        return loss_sum if holds_loss else 0.0

    # ------------------------------------------------------------------ data parallel

    def sync_gradients(self) -> dict[str, torch.Tensor]:
        """Every rank ends with its slice of the full-batch gradient; returns the full tensors."""
        tp = self.groups.tp
        fulls = []
        for _, p in self.params:
            full = torch.zeros(p.full_shape, dtype=p.dtype)
            if p.shard_dim is None:
                full.copy_(p.grad if getattr(p, "tp_partial", False) else p.grad / tp.size)
            else:
                size = p.shape[p.shard_dim]
                full.narrow(p.shard_dim, tp.rank * size, size).copy_(p.grad)
            fulls.append(full)
        flat = torch.cat([f.reshape(-1) for f in fulls])
        if self.groups.stage is not None:
            dist.all_reduce(flat, group=self.groups.stage)
        fulls = [f.view(p.full_shape) for f, (_, p) in zip(torch.split(flat, [f.numel() for f in fulls]), self.params)]
        names = [name for name, _ in self.params]
        if self.groups.embedding is not None and "embed.word" in names:     # trained, so on both ends
            k = names.index("embed.word")
            emb = fulls[k] / len(self.groups.stage_ranks[self.me.stage])
            dist.all_reduce(emb, group=self.groups.embedding)
            fulls[k] = emb
        for (_, p), full in zip(self.params, fulls):
            if p.shard_dim is None:
                p.grad.copy_(full)
            else:
                size = p.shape[p.shard_dim]
                p.grad.copy_(full.narrow(p.shard_dim, tp.rank * size, size))
        return {name: f for (name, p), f in zip(self.params, fulls) if not getattr(p, "tied_copy", False)}

    def step(self) -> None:
        with torch.no_grad():
            for _, p in self.params:
                p -= self.spec.lr * p.grad
                p.grad = None


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
        grads = {k: t.detach().numpy().copy() for k, t in worker.last_full_grads.items()} if report else {}
        queue.put({"rank": rank, "losses": losses, "grads": grads, "meter": worker.meter.__dict__,
                   "tp_comm_s": worker.groups.tp.comm_s[0], "cp_comm_s": worker.groups.cp.comm_s[0]})
        dist.barrier()
    except Exception:   # say which rank failed: the others only see a closed connection
        print(f"rank {rank} ({spec.layout[rank]}):\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        raise
    finally:
        dist.destroy_process_group()
