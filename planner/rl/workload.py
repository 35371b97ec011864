"""What an RL post-training step is: the algorithm, its batch and lengths, and the models it runs.

One step of GRPO or PPO as verl runs it (volcengine/verl@b178a3c, verl/trainer/ppo/ray_trainer.py
`fit`; the actor's old log-probabilities: line 1231 `compute_log_prob`): generate `samples_per_prompt` responses for each of `prompts_per_step` prompts (rollout),
score them (a rule-based reward costs nothing; a reward model runs a forward pass), compute the
reference model's log-probabilities for the KL term (forward only) and, for PPO, the critic's
values, recompute the actor's old log-probabilities (forward), then train the actor (and the critic)
for `ppo_epochs` passes over the step's samples in `mini_batches` optimizer steps each.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from planner.types import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, InputError, Model, Precision


class Algorithm(str, Enum):
    GRPO = "grpo"             # group-relative advantages, no critic (Shao et al. 2024, DeepSeekMath)
    PPO = "ppo"               # a critic (value model) trained beside the actor (Schulman et al. 2017)


class Mode(str, Enum):
    SYNC = "sync"             # generation of step k waits for the training of step k-1
    ASYNC = "async"           # one-step off-policy: generation of step k overlaps training of step k-1


RL_KINDS = tuple(a.value for a in Algorithm)
OBJECTIVES = ("throughput", "cost")     # what an RL plan may be best for
MAX_EPOCHS = 1000


def _whole(value, name: str, low: int = 1, high: int = MAX_GLOBAL_BATCH) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= high):
        raise InputError(name, f"must be a whole number from {low:,} to {high:,}, got {value!r}")


@dataclass(frozen=True)
class RlJob:
    model: Model                              # the policy (actor); reference and critic are copies of it
    algorithm: Algorithm
    prompts_per_step: int
    samples_per_prompt: int                   # the group size G
    prompt_len: int                           # tokens
    response_len: int                         # mean response tokens
    response_len_max: int                     # the longest response: a synchronous rollout waits for it
    ppo_epochs: int = 1
    mini_batches: int = 1                     # optimizer steps per epoch
    mode: Mode = Mode.SYNC
    reference: bool = True                    # a reference model for the KL term
    reward_model: Model | None = None         # None: a rule-based reward, free
    precision: Precision = Precision.BF16

    def __post_init__(self):
        if not isinstance(self.algorithm, Algorithm):
            raise InputError("job_kind", f"must be one of {', '.join(RL_KINDS)}, got {self.algorithm!r}")
        if not isinstance(self.mode, Mode):
            raise InputError("mode", f"must be sync or async, got {self.mode!r}")
        _whole(self.prompts_per_step, "prompts_per_step")
        _whole(self.samples_per_prompt, "samples_per_prompt", 1, 1024)
        _whole(self.prompt_len, "prompt_len", 1, MAX_SEQ_LEN)
        _whole(self.response_len, "response_len", 1, MAX_SEQ_LEN)
        _whole(self.response_len_max, "response_len_max", 1, MAX_SEQ_LEN)
        _whole(self.ppo_epochs, "ppo_epochs", 1, MAX_EPOCHS)
        _whole(self.mini_batches, "mini_batches", 1, MAX_GLOBAL_BATCH)
        if self.response_len_max < self.response_len:
            raise InputError("response_len_max", f"the longest response ({self.response_len_max:,} tokens) cannot be "
                                                 f"shorter than the mean ({self.response_len:,}); give a maximum of "
                                                 f"at least the mean")
        if self.samples_per_step > MAX_GLOBAL_BATCH:
            raise InputError("prompts_per_step", f"{self.prompts_per_step:,} prompts x {self.samples_per_prompt} "
                                                 f"samples = {self.samples_per_step:,} sequences per step, over the "
                                                 f"limit of {MAX_GLOBAL_BATCH:,}")
        if self.samples_per_step % self.mini_batches:
            raise InputError("mini_batches", f"{self.samples_per_step:,} samples per step do not split into "
                                             f"{self.mini_batches} equal mini-batches; use a divisor of "
                                             f"{self.samples_per_step:,}")
        if self.prompt_len + self.response_len_max > MAX_SEQ_LEN:
            raise InputError("response_len_max", f"prompt plus longest response must be at most {MAX_SEQ_LEN:,} tokens")

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def critic(self) -> bool:
        return self.algorithm == Algorithm.PPO

    @property
    def train_seq_len(self) -> int:
        """Tokens of one training sequence: the prompt and a mean response, packed without padding
        (verl's use_remove_padding: True, verl/trainer/config/model/hf_model.yaml line 40)."""
        return self.prompt_len + self.response_len

    @property
    def mini_batch_samples(self) -> int:
        return self.samples_per_step // self.mini_batches

    @property
    def response_tokens_per_step(self) -> int:
        return self.samples_per_step * self.response_len

    @property
    def tokens_per_step(self) -> int:
        """Prompt and response tokens of the step's samples."""
        return self.samples_per_step * self.train_seq_len
