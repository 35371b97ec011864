"""The scaled-down transformer, built one pipeline chunk at a time with tensor-parallel layers.

Every full tensor is drawn from its own generator, seeded by (seed, parameter name), and sliced
for this rank: a sharded run and the single-process reference start from the same weights.
Parameter names are global (``layers.7.mlp.up.weight``), so gradients compare by name.
Context parallelism (`CpGroup`): a rank holds part of each sequence (planner.runtime.parallel.
load_balanced_positions); positions are the tokens' global ones, and attention gathers every rank's
keys and values and masks by global position (Megatron-LM's cp_comm_type 'allgather').
Adapter jobs (`lora`): every projection gets an adapter (``layers.7.mlp.up.lora_a``) and every
other parameter is frozen: only the adapters are in `global_parameters`, trained and synchronised.
"""
from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from planner.runtime.lora import LoraConfig, full_adapter, is_adapter
from planner.runtime.parallel import ColumnLinear, CpGroup, RowLinear, TpGroup, copy_to_tp, shard_parameter
from planner.runtime.tiny import TinyConfig

ROPE_THETA = 10_000.0


class Init:
    """Deterministic full tensors by name."""

    def __init__(self, seed: int, dtype: torch.dtype):
        self.seed, self.dtype = seed, dtype

    def normal(self, name: str, shape: tuple, std: float, mean: float = 0.0) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(name.encode()))
        return (mean + std * torch.randn(shape, generator=g, dtype=torch.float64)).to(self.dtype)

    def linear(self, name: str, out_dim: int, in_dim: int, bias: bool):
        w = self.normal(f"{name}.weight", (out_dim, in_dim), 1 / math.sqrt(in_dim))
        b = self.normal(f"{name}.bias", (out_dim,), 0.02) if bias else None
        return w, b

    def projection(self, kind, name: str, out_dim: int, in_dim: int, bias: bool, tp: TpGroup,
                   lora: LoraConfig | None):
        """A ColumnLinear or RowLinear (`kind`), with its adapter in adapter jobs."""
        adapter = full_adapter(self, name, out_dim, in_dim, lora) if lora is not None else None
        return kind(*self.linear(name, out_dim, in_dim, bias), tp, adapter)


class Norm(nn.Module):
    def __init__(self, name: str, cfg: TinyConfig, init: Init, tp: TpGroup):
        super().__init__()
        self.kind = cfg.norm
        self.weight = shard_parameter(init.normal(f"{name}.weight", (cfg.hidden,), 0.1, 1.0), None, tp)
        self.bias = (shard_parameter(init.normal(f"{name}.bias", (cfg.hidden,), 0.1), None, tp)
                     if cfg.norm == "layernorm" else None)

    def forward(self, x):
        if self.kind == "layernorm":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)
        return F.rms_norm(x, x.shape[-1:], self.weight, eps=1e-6)


def _rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021), rotate-half form; x: [b, s, heads, d], positions: [s]."""
    d = x.shape[-1]
    inv = ROPE_THETA ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(positions.to(torch.float64), inv)
    cos = torch.cat([angles.cos()] * 2, -1).to(x.dtype)[None, :, None, :]
    sin = torch.cat([angles.sin()] * 2, -1).to(x.dtype)[None, :, None, :]
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, name: str, cfg: TinyConfig, init: Init, tp: TpGroup, selective_recompute: bool,
                 lora: LoraConfig | None, cp: CpGroup):
        super().__init__()
        hd, h = cfg.head_dim, cfg.hidden
        self.tp, self.cp, self.cfg, self.selective = tp, cp, cfg, selective_recompute
        self.heads, self.kv_heads = cfg.heads // tp.size, cfg.kv_heads // tp.size
        self.q = init.projection(ColumnLinear, f"{name}.q", cfg.heads * hd, h, cfg.qkv_bias, tp, lora)
        self.k = init.projection(ColumnLinear, f"{name}.k", cfg.kv_heads * hd, h, cfg.qkv_bias, tp, lora)
        self.v = init.projection(ColumnLinear, f"{name}.v", cfg.kv_heads * hd, h, cfg.qkv_bias, tp, lora)
        self.o = init.projection(RowLinear, f"{name}.o", h, cfg.heads * hd, cfg.out_bias, tp, lora)

    def core(self, q, k, v, allowed=None):
        """Causal attention; `allowed` [s_q, s_k], where query and key order is not the sequence's."""
        ratio = self.heads // self.kv_heads
        k, v = k.repeat_interleave(ratio, dim=1), v.repeat_interleave(ratio, dim=1)
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    def forward(self, x):
        b, s, _ = x.shape
        hd = self.cfg.head_dim
        x = copy_to_tp(x, self.tp)
        q = self.q(x).view(b, s, self.heads, hd)
        k = self.k(x).view(b, s, self.kv_heads, hd)
        v = self.v(x).view(b, s, self.kv_heads, hd)
        if self.cfg.position == "rope":
            positions = self.cp.positions(s)
            q, k = _rope(q, positions), _rope(k, positions)
        allowed = None
        if self.cp.size > 1:
            # one all-gather of K and V together; each query sees keys at global positions up to its own
            k, v = self.cp.all_gather(torch.cat([k, v], -1), dim=1).split(hd, -1)
            allowed = self.cp.positions(s)[:, None] >= self.cp.key_positions(s)[None, :]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.selective:
            out = checkpoint(self.core, q, k, v, allowed, use_reentrant=False)
        else:
            out = self.core(q, k, v, allowed)
        return self.o(out.transpose(1, 2).reshape(b, s, self.heads * hd))


class Mlp(nn.Module):
    def __init__(self, name: str, cfg: TinyConfig, init: Init, tp: TpGroup, lora: LoraConfig | None):
        super().__init__()
        self.tp, self.kind = tp, cfg.mlp
        self.up = init.projection(ColumnLinear, f"{name}.up", cfg.ffn, cfg.hidden, cfg.mlp_bias, tp, lora)
        self.gate = (init.projection(ColumnLinear, f"{name}.gate", cfg.ffn, cfg.hidden, cfg.mlp_bias, tp, lora)
                     if cfg.mlp == "swiglu" else None)
        self.down = init.projection(RowLinear, f"{name}.down", cfg.hidden, cfg.ffn, cfg.mlp_bias, tp, lora)

    def forward(self, x):
        x = copy_to_tp(x, self.tp)
        if self.kind == "swiglu":
            inner = F.silu(self.gate(x)) * self.up(x)
        elif self.kind == "relu":
            inner = F.relu(self.up(x))
        else:
            inner = F.gelu(self.up(x))
        return self.down(inner)


class Layer(nn.Module):
    def __init__(self, index: int, cfg: TinyConfig, init: Init, tp: TpGroup, recompute: str, lora: LoraConfig | None,
                 cp: CpGroup):
        super().__init__()
        name = f"layers.{index}"
        self.full_recompute = recompute == "full"
        self.norm1 = Norm(f"{name}.norm1", cfg, init, tp)
        self.attn = Attention(f"{name}.attn", cfg, init, tp, recompute == "selective", lora, cp)
        self.norm2 = Norm(f"{name}.norm2", cfg, init, tp)
        self.mlp = Mlp(f"{name}.mlp", cfg, init, tp, lora)

    def _forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def forward(self, x):
        if self.full_recompute:   # keep only the layer's input (Korthikanti et al. 2022, section 4.1)
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Embedding(nn.Module):
    def __init__(self, cfg: TinyConfig, init: Init, tp: TpGroup, cp: CpGroup):
        super().__init__()
        self.cp = cp
        self.word = shard_parameter(init.normal("embed.word", (cfg.vocab, cfg.hidden), 1.0), None, tp)
        self.pos = (shard_parameter(init.normal("embed.pos", (cfg.seq_len, cfg.hidden), 0.5), None, tp)
                    if cfg.position == "learned" else None)
        self.norm = Norm("embed.norm", cfg, init, tp) if cfg.embed_norm else None

    def forward(self, tokens):
        x = F.embedding(tokens, self.word)
        if self.pos is not None:
            x = x + self.pos[self.cp.positions(tokens.shape[1])]
        return self.norm(x) if self.norm is not None else x


class Head(nn.Module):
    """Final norm and output projection; with tied embeddings, `word` is the embedding matrix
    (the same Parameter in one process, a synchronised copy on the last pipeline stage)."""

    def __init__(self, cfg: TinyConfig, init: Init, tp: TpGroup, shared_word: nn.Parameter | None):
        super().__init__()
        self.norm = Norm("head.norm", cfg, init, tp) if cfg.final_norm else None
        if shared_word is not None:
            self._shared = [shared_word]          # not registered: owned by the embedding
            self.word = None
        elif cfg.tied_embeddings:
            self._shared = []
            self.word = shard_parameter(init.normal("embed.word", (cfg.vocab, cfg.hidden), 1.0), None, tp)
            self.word.tied_copy = True
        else:
            self._shared = []
            self.word = shard_parameter(init.normal("head.word", (cfg.vocab, cfg.hidden), 1 / math.sqrt(cfg.hidden)),
                                        None, tp)

    def forward(self, x):
        x = self.norm(x) if self.norm is not None else x
        w = self._shared[0] if self._shared else self.word
        return F.linear(x, w)


class Chunk(nn.Module):
    """Layers [first, end) of the model, with the embedding before and/or the head after;
    with `lora`, adapters on every projection and everything else frozen; with `cp`, on this
    context-parallel rank's part of each sequence."""

    def __init__(self, cfg: TinyConfig, first: int, end: int, init: Init, tp: TpGroup, recompute: str,
                 lora: LoraConfig | None = None, cp: CpGroup | None = None):
        super().__init__()
        cp = cp if cp is not None else CpGroup()
        self.embed = Embedding(cfg, init, tp, cp) if first == 0 else None
        self.layers = nn.ModuleList(Layer(k, cfg, init, tp, recompute, lora, cp) for k in range(first, end))
        self.first = first
        shared = self.embed.word if (self.embed is not None and cfg.tied_embeddings) else None
        self.head = Head(cfg, init, tp, shared) if end == cfg.layers else None
        if lora is not None:
            for name, p in self.named_parameters():
                p.requires_grad_(is_adapter(name))

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x) if self.head is not None else x

    def global_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """(global name, trained parameter) in a fixed order; layer indices are the model's."""
        out = []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            if name.startswith("layers."):
                _, k, rest = name.split(".", 2)
                name = f"layers.{self.first + int(k)}.{rest}"
            if getattr(p, "tied_copy", False):
                name = "embed.word"
            out.append((name, p))
        return out


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
