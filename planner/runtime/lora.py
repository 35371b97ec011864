"""Adapter jobs in the runtime: LoRA adapters and the 4-bit NormalFloat base of QLoRA.

LoRA (Hu et al. 2021, section 4.1): beside a frozen W (out x in), y = x W^T + (alpha / r) x A^T B^T
with A (r x in) drawn from a Gaussian and B (out x r) zero, so training starts from the base model.
Adapters sit beside every linear layer of attention (q, k, v, o) and MLP (gate, up, down), as
QLoRA does (Dettmers et al. 2023, section 4) and as planner.training counts them. alpha = 2 r.

QLoRA's base (Dettmers et al. 2023, section 3): the full weight flattened row-major, cut into blocks
of 64, each block scaled by its absolute maximum and every element rounded to the nearest of the
16 NormalFloat-4 levels; the codes are kept two to a byte and dequantised for every matmul.
Not done here: double quantisation of the block constants (kept in the run's dtype, not 8 bits)
and the paged optimizer. A tensor-parallel rank keeps the codes of its slice and the constants of
the blocks that slice touches; its dequantised slice equals the slice of the dequantised full tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from planner.types import JobKind, Training

ALPHA_PER_RANK = 2.0
ADAPTER_NAMES = ("lora_a", "lora_b")

# NormalFloat-4 (Dettmers et al. 2023, appendix E; bitsandbytes' NF4 table, functional.py)
NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
              -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
              0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
              0.7229568362236023, 1.0)
NF4_BLOCK = 64


@dataclass(frozen=True)
class LoraConfig:
    rank: int
    nf4_base: bool

    @property
    def scale(self) -> float:
        return ALPHA_PER_RANK          # alpha / r with alpha = 2 r

    @staticmethod
    def of(training: Training) -> LoraConfig | None:
        if not training.adapters:
            return None
        return LoraConfig(training.lora_rank, training.kind == JobKind.QLORA)


@dataclass(frozen=True)
class FullAdapter:
    """One linear layer's full adapter tensors, before tensor-parallel slicing."""
    a: torch.Tensor          # r x in
    b: torch.Tensor          # out x r
    scale: float
    nf4_base: bool


def nf4_quantize(full: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes 0..15 shaped like `full`, absmax per 64-element block of the row-major flattening)."""
    flat = full.detach().reshape(-1).to(torch.float64)
    padded = torch.cat([flat, flat.new_zeros(-flat.numel() % NF4_BLOCK)]).view(-1, NF4_BLOCK)
    absmax = padded.abs().amax(dim=1)
    normalised = padded / torch.where(absmax > 0, absmax, 1.0)[:, None]
    levels = torch.tensor(NF4_LEVELS, dtype=torch.float64)
    codes = (normalised[..., None] - levels).abs().argmin(dim=-1).to(torch.uint8)
    return codes.reshape(-1)[: flat.numel()].view(full.shape), absmax.to(full.dtype)


def _pack(codes: torch.Tensor) -> torch.Tensor:
    flat = codes.reshape(-1)
    flat = torch.cat([flat, flat.new_zeros(flat.numel() % 2)])
    return (flat[0::2] << 4) | flat[1::2]


def _unpack(packed: torch.Tensor, count: int) -> torch.Tensor:
    return torch.stack([packed >> 4, packed & 15], dim=1).reshape(-1)[:count]


class Nf4Weight(nn.Module):
    """This rank's slice (along `shard_dim`, or all of it) of an NF4-quantised 2-D weight."""

    def __init__(self, full: torch.Tensor, shard_dim: int | None, rank: int, size: int):
        super().__init__()
        codes, absmax = nf4_quantize(full)
        rows, cols = full.shape
        self.shape, self.full_cols, self.row0, self.col0 = list(full.shape), cols, 0, 0
        if shard_dim is not None:
            self.shape[shard_dim] //= size
            if shard_dim == 0:
                self.row0 = rank * self.shape[0]
            else:
                self.col0 = rank * self.shape[1]
            codes = codes.narrow(shard_dim, rank * self.shape[shard_dim], self.shape[shard_dim])
        blocks = self._blocks()
        self.first_block = int(blocks.min())
        self.register_buffer("codes", _pack(codes.contiguous()))
        self.register_buffer("absmax", absmax[self.first_block: int(blocks.max()) + 1].clone())

    def _blocks(self) -> torch.Tensor:
        """Block of the full tensor that each element of the slice belongs to."""
        r = torch.arange(self.row0, self.row0 + self.shape[0])
        c = torch.arange(self.col0, self.col0 + self.shape[1])
        return (r[:, None] * self.full_cols + c[None, :]) // NF4_BLOCK

    def forward(self) -> torch.Tensor:
        """The dequantised slice, in the dtype of the block constants."""
        levels = torch.tensor(NF4_LEVELS, dtype=self.absmax.dtype)
        codes = _unpack(self.codes, self.shape[0] * self.shape[1]).long().view(self.shape)
        return levels[codes] * self.absmax[self._blocks() - self.first_block]


def full_adapter(init, name: str, out_dim: int, in_dim: int, lora: LoraConfig) -> FullAdapter:
    """Adapter tensors by name: A Gaussian (std 1 / sqrt(in)), B zero (Hu et al. 2021, section 4.1)."""
    a = init.normal(f"{name}.lora_a", (lora.rank, in_dim), in_dim ** -0.5)
    b = torch.zeros((out_dim, lora.rank), dtype=a.dtype)
    return FullAdapter(a, b, lora.scale, lora.nf4_base)


def is_adapter(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ADAPTER_NAMES
