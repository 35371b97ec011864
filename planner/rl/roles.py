"""Roles of an RL step and where each runs: the vocabulary of an RL plan.

Roles: rollout (the policy generating), actor (the policy training), reference (forward only,
for the KL term), critic (PPO's value model, trained like the actor) and reward (a reward model's
forward; none for a rule-based reward). Shapes:

  colocated       every role time-shares the same GPUs; the actor's weights are resharded into the
                  rollout's tensor-parallel layout before each generation (verl's hybrid engine)
  disaggregated   rollout pools apart from training pools; the new weights are sent to the rollout
                  GPUs over the network each step
  mixed           disaggregated, with the reference (and reward) forward on the rollout GPUs
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from planner.rl.workload import Mode, RlJob
from planner.types import InputError, Plan


class Shape(str, Enum):
    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"
    MIXED = "mixed"


class Role(str, Enum):
    ROLLOUT = "rollout"
    ACTOR = "actor"
    REFERENCE = "reference"
    CRITIC = "critic"
    REWARD = "reward"


@dataclass(frozen=True)
class RolloutGroup:
    """`replicas` rollout engines of `tp` GPUs each on one pool."""
    pool: str
    tp: int
    replicas: int

    def __post_init__(self):
        for name in ("tp", "replicas"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise InputError(f"roles.rollout.{name}", f"must be a positive whole number, got {value!r}")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.replicas


@dataclass(frozen=True)
class RlPlan:
    """An RL step's placement. `actor` is the training plan of one mini-batch (its global batch the
    step's samples over the mini-batches, its sequences prompt + mean response); the critic (PPO)
    runs the same plan on the same GPUs. The reference and reward forward run on the actor's GPUs,
    or on the rollout GPUs in the mixed shape."""
    job: RlJob
    shape: Shape
    rollout: tuple[RolloutGroup, ...]
    actor: Plan
    rollout_engine: str = "vllm"

    def __post_init__(self):
        if not self.rollout:
            raise InputError("roles.rollout", "an RL plan needs at least one rollout group")
        if self.actor.global_batch != self.job.mini_batch_samples or self.actor.seq_len != self.job.train_seq_len:
            raise InputError("roles.actor", f"the actor plan must train mini-batches of "
                                            f"{self.job.mini_batch_samples:,} "
                                            f"sequences of {self.job.train_seq_len:,} tokens (prompt + mean response), "
                                            f"got {self.actor.global_batch:,} x {self.actor.seq_len:,}")
        if self.actor.model != self.job.model:
            raise InputError("roles.actor.model", f"must be the job's model {self.job.model.id}")
        if self.shape == Shape.COLOCATED:
            train = self.actor.gpus_by_pool()
            for g in self.rollout:
                if g.num_gpus > train.get(g.pool, 0):
                    raise InputError("roles.rollout", f"colocated rollout on {g.num_gpus} GPUs of {g.pool} but the "
                                                      f"actor trains on {train.get(g.pool, 0)} there; colocated roles "
                                                      f"share the same GPUs")

    @property
    def overlapped(self) -> bool:
        """One-step off-policy overlap: only where generation and training have GPUs of their own."""
        return self.job.mode == Mode.ASYNC and self.shape != Shape.COLOCATED

    def rollout_gpus_by_pool(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for g in self.rollout:
            used[g.pool] = used.get(g.pool, 0) + g.num_gpus
        return used

    def gpus_by_pool(self) -> dict[str, int]:
        """Every GPU the plan holds: colocated roles share the actor's, disaggregated ones add up."""
        used = dict(self.actor.gpus_by_pool())
        if self.shape == Shape.COLOCATED:
            return used
        for pool, n in self.rollout_gpus_by_pool().items():
            used[pool] = used.get(pool, 0) + n
        return used

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_by_pool().values())
