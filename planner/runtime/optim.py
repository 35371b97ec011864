"""The runtime's optimizer: Adam, whose two moments (and, under ZeRO, a master copy of the weights)
are the optimizer state planner.training.ModelStates counts, 12 bytes per parameter in fp32.

Kingma & Ba 2015, algorithm 1, elementwise: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). Every operation is a separate elementwise
one (no fused kernels), so the update of a slice equals the slice of the update: a ZeRO shard steps
exactly as the same elements of the whole tensor do in a single process.
"""
from __future__ import annotations

import torch

ADAM_LR = 1e-3              # Kingma & Ba 2015, section 2: "good default settings"
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class AdamState:
    """Adam's moments for one tensor (a parameter, or a rank's flat ZeRO shard) and its step count."""

    def __init__(self, like: torch.Tensor):
        self.exp_avg = torch.zeros_like(like)
        self.exp_avg_sq = torch.zeros_like(like)
        self.steps = 0

    @property
    def numel(self) -> int:
        return self.exp_avg.numel() + self.exp_avg_sq.numel()

    @torch.no_grad()
    def step(self, param: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
        """Update `param` in place from `grad` (same shape)."""
        b1, b2 = ADAM_BETAS
        self.steps += 1
        self.exp_avg.mul_(b1).add_(grad * (1 - b1))
        self.exp_avg_sq.mul_(b2).add_(grad * grad * (1 - b2))
        m_hat = self.exp_avg / (1 - b1 ** self.steps)
        v_hat = self.exp_avg_sq / (1 - b2 ** self.steps)
        param.sub_(lr * m_hat / (v_hat.sqrt() + ADAM_EPS))
