"""Megatron-style tensor parallelism: the f / g operators and column / row parallel linears;
context parallelism's load-balanced sequence split and its key / value all-gather.

Shoeybi et al. 2019, section 3 and figure 3: `f` is the identity forward and an all-reduce
backward (before a column-parallel layer); `g` is an all-reduce forward and the identity
backward (after a row-parallel layer). Parameters carry `full_shape` and `shard_dim` so that
gradients can be synchronised across data-parallel replicas of different tensor-parallel degree;
`tp_partial` marks the replicated LoRA factors whose gradient is a sum over the group's ranks
(planner.runtime.lora).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from planner.runtime.lora import FullAdapter, Nf4Weight


@dataclass
class TpGroup:
    """A replica's tensor-parallel group (None when tp = 1) and where its time goes."""
    group: object = None
    rank: int = 0
    size: int = 1
    comm_s: list = field(default_factory=lambda: [0.0])

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.size == 1:
            return x
        t0 = time.perf_counter()
        dist.all_reduce(x, group=self.group)
        self.comm_s[0] += time.perf_counter() - t0
        return x


def load_balanced_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global positions of the tokens context-parallel rank `cp_rank` of `cp` holds: the sequence cut
    into 2 cp equal chunks, rank k holding chunks k and 2 cp - 1 - k, so every rank has as much causal
    attention work (Megatron-LM's get_batch_on_this_cp_rank, torchtitan's 'headtail' load balancer)."""
    assert seq_len % (2 * cp) == 0, f"sequence of {seq_len} tokens into 2 x {cp} chunks"
    c = seq_len // (2 * cp)
    head, tail = cp_rank * c, (2 * cp - 1 - cp_rank) * c
    return torch.cat([torch.arange(head, head + c), torch.arange(tail, tail + c)])


@dataclass
class CpGroup:
    """A rank's context-parallel group: the ranks at the same tensor-parallel position of each of
    its replica's cp sequence shards (None when cp = 1), and where its time goes."""
    group: object = None
    rank: int = 0
    size: int = 1
    comm_s: list = field(default_factory=lambda: [0.0])

    def positions(self, local_len: int) -> torch.Tensor:
        """Global positions of this rank's `local_len` tokens (all of 0..local_len-1 when cp = 1)."""
        if self.size == 1:
            return torch.arange(local_len)
        return load_balanced_positions(local_len * self.size, self.size, self.rank)

    def key_positions(self, local_len: int) -> torch.Tensor:
        """Global positions of the tokens `all_gather` returns, in its order (ranks in turn)."""
        seq_len = local_len * self.size
        return torch.cat([load_balanced_positions(seq_len, self.size, k) for k in range(self.size)])

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's `x`, concatenated along `dim` in rank order; gradients go back to their rank."""
        return x if self.size == 1 else _GatherFromCp.apply(x, dim, self)

    def timed(self, op, *args):
        t0 = time.perf_counter()
        op(*args, group=self.group)
        self.comm_s[0] += time.perf_counter() - t0


class _GatherFromCp(torch.autograd.Function):
    """All-gather forward; backward, the sum over ranks of the gathered gradient, this rank's part
    (a reduce-scatter, as an all-reduce: gloo has none; torch.distributed.nn.functional.all_gather's
    gloo backward scatters from group ranks as if they were global ones, which fails in a subgroup)."""

    @staticmethod
    def forward(ctx, x, dim, cp):
        ctx.dim, ctx.cp = dim, cp
        parts = [torch.empty_like(x) for _ in range(cp.size)]
        cp.timed(dist.all_gather, parts, x.contiguous())
        return torch.cat(parts, dim)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        ctx.cp.timed(dist.all_reduce, grad)
        return grad.chunk(ctx.cp.size, ctx.dim)[ctx.cp.rank].contiguous(), None, None


class _CopyToTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.tp.all_reduce(grad.contiguous().clone()), None


class _ReduceFromTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, tp: TpGroup) -> torch.Tensor:
    return x if tp.size == 1 else _CopyToTp.apply(x, tp)


def reduce_from_tp(x: torch.Tensor, tp: TpGroup) -> torch.Tensor:
    return x if tp.size == 1 else _ReduceFromTp.apply(x, tp)


def shard_parameter(full: torch.Tensor, shard_dim: int | None, tp: TpGroup) -> nn.Parameter:
    """This rank's slice of a deterministically initialised full tensor."""
    if shard_dim is None:
        piece = full
    else:
        size = full.shape[shard_dim] // tp.size
        piece = full.narrow(shard_dim, tp.rank * size, size)
    p = nn.Parameter(piece.clone())
    p.full_shape = tuple(full.shape)
    p.shard_dim = shard_dim
    return p


def partial_over_tp(p: nn.Parameter) -> nn.Parameter:
    """Mark a replicated parameter whose gradient each tensor-parallel rank holds only a part of
    (the parts sum to the replica's gradient) rather than a copy of."""
    p.tp_partial = True
    return p


class _TpLinear(nn.Module):
    """A linear layer's base weight (trained; or frozen, dense or NF4, in adapter jobs) and its LoRA
    adapter y += s x A^T B^T, split as the base is. Column-parallel (W's rows split): A whole, B's
    rows split. Row-parallel (W's columns split): A's columns split, B whole, and the adapter's
    partial product joins the base's before `g`. Either way the whole factor's gradient on a rank is
    that rank's part of the sum (`tp_partial`), which the data-parallel sync adds up."""

    def __init__(self, weight, bias, tp: TpGroup, adapter: FullAdapter | None, weight_dim: int,
                 bias_dim: int | None):
        super().__init__()
        self.tp = tp
        quantised = adapter is not None and adapter.nf4_base
        self.nf4 = Nf4Weight(weight, weight_dim if tp.size > 1 else None, tp.rank, tp.size) if quantised else None
        self.weight = None if quantised else shard_parameter(weight, weight_dim, tp)
        self.bias = shard_parameter(bias, bias_dim, tp) if bias is not None else None
        self.lora_a = self.lora_b = None
        if adapter is not None:
            column = weight_dim == 0
            self.scale = adapter.scale
            self.lora_a = shard_parameter(adapter.a, None if column else 1, tp)
            self.lora_b = shard_parameter(adapter.b, 0 if column else None, tp)
            partial_over_tp(self.lora_a if column else self.lora_b)

    def base_weight(self) -> torch.Tensor:
        return self.nf4() if self.nf4 is not None else self.weight

    def plus_adapter(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.lora_a is None:
            return y
        return y + self.scale * F.linear(F.linear(x, self.lora_a), self.lora_b)


class ColumnLinear(_TpLinear):
    """y = x W^T + b with W's output rows split across the group; input must have passed `f`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TpGroup,
                 adapter: FullAdapter | None = None):
        super().__init__(weight, bias, tp, adapter, weight_dim=0, bias_dim=0)

    def forward(self, x):
        return self.plus_adapter(x, F.linear(x, self.base_weight(), self.bias))


class RowLinear(_TpLinear):
    """y = g(x_local W_local^T) + b with W's input columns split across the group; an adapter's
    partial product x_local A_local^T B^T joins the base's before the one all-reduce."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TpGroup,
                 adapter: FullAdapter | None = None):
        super().__init__(weight, bias, tp, adapter, weight_dim=1, bias_dim=None)

    def forward(self, x):
        y = reduce_from_tp(self.plus_adapter(x, F.linear(x, self.base_weight())), self.tp)
        return y + self.bias if self.bias is not None else y
