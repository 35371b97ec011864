"""Megatron-style tensor parallelism: the f / g operators and column / row parallel linears.

Shoeybi et al. 2019, section 3 and figure 3: `f` is the identity forward and an all-reduce
backward (before a column-parallel layer); `g` is an all-reduce forward and the identity
backward (after a row-parallel layer). Parameters carry `full_shape` and `shard_dim` so that
gradients can be synchronised across data-parallel replicas of different tensor-parallel degree.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


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


class ColumnLinear(nn.Module):
    """y = x W^T + b with W's output rows split across the group; input must have passed `f`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TpGroup):
        super().__init__()
        self.weight = shard_parameter(weight, 0, tp)
        self.bias = shard_parameter(bias, 0, tp) if bias is not None else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowLinear(nn.Module):
    """y = g(x_local W_local^T) + b with W's input columns split across the group."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, tp: TpGroup):
        super().__init__()
        self.tp = tp
        self.weight = shard_parameter(weight, 1, tp)
        self.bias = shard_parameter(bias, None, tp) if bias is not None else None

    def forward(self, x):
        y = reduce_from_tp(F.linear(x, self.weight), self.tp)
        return y + self.bias if self.bias is not None else y
