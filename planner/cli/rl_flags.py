"""The options of the RL job kinds (grpo, ppo) of `hetplan plan` and their checks: what `plan` needs of RL
for any job (its parser, and the refusal of RL flags without an RL kind). planner/cli/rl_cmd.py plans an RL
job; `plan` imports it for an RL job kind only (plan_cmd.JOB_KIND_MODULES)."""
from __future__ import annotations

import argparse

from planner.cli.common import finite_number, whole_number
from planner.rl.engines import ROLLOUT_ENGINES
from planner.rl.workload import OBJECTIVES, RL_KINDS
from planner.types import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, InputError

RL_FLAGS = ("prompts_per_step", "samples_per_prompt", "prompt_len", "response_len", "response_len_max",
            "ppo_epochs", "mini_batches", "reward_model", "step_deadline")


def add_rl_arguments(p) -> None:
    g = p.add_argument_group("RL post-training (--job-kind grpo or ppo; docs/rl.md)")
    g.add_argument("--prompts-per-step", type=whole_number(1, MAX_GLOBAL_BATCH), metavar="N", help="prompts per step")
    g.add_argument("--samples-per-prompt", type=whole_number(1, 1024), metavar="G", help="responses per prompt (group)")
    g.add_argument("--prompt-len", type=whole_number(1, MAX_SEQ_LEN), metavar="P", help="prompt tokens")
    g.add_argument("--response-len", type=whole_number(1, MAX_SEQ_LEN), metavar="R", help="mean response tokens")
    g.add_argument("--response-len-max", type=whole_number(1, MAX_SEQ_LEN), metavar="M",
                   help="longest response tokens, which a synchronous rollout waits for (default: R)")
    g.add_argument("--ppo-epochs", type=whole_number(1, 1000), metavar="E", help="passes over the samples (default 1)")
    g.add_argument("--mini-batches", type=whole_number(1, MAX_GLOBAL_BATCH), metavar="K",
                   help="optimizer steps per epoch (default 1)")
    g.add_argument("--async", dest="rl_async", action="store_true",
                   help="one-step off-policy: step k's generation overlaps step k-1's training")
    g.add_argument("--reference", dest="reference", action=argparse.BooleanOptionalAction, default=None,
                   help="a reference model for the KL term (default: on)")
    g.add_argument("--reward-model", metavar="ID", help="catalog model scoring the samples (default: a rule-based "
                                                        "reward, free)")
    g.add_argument("--rollout-engine", choices=sorted(ROLLOUT_ENGINES), default=None, help="default vllm")
    g.add_argument("--step-deadline", type=finite_number(0, 1e7, "seconds"), metavar="S",
                   help="the longest step time a plan may take (with --objective cost: the cheapest step within it)")


def check_flags(args) -> None:
    """RL flags only with an RL job kind; the training flags only without one."""
    rl = args.job_kind in RL_KINDS
    if not rl:
        given = [f for f in RL_FLAGS if getattr(args, f, None) is not None]
        given += ["rl_async"] if args.rl_async else []
        given += ["reference"] if args.reference is not None else []
        given += ["rollout_engine"] if args.rollout_engine is not None else []
        if given:
            raise InputError("--" + given[0].replace("rl_", "").replace("_", "-"),
                             f"applies to --job-kind {' or '.join(RL_KINDS)} only")
        for flag in ("global_batch", "seq_len"):
            if getattr(args, flag) is None:
                raise InputError("--" + flag.replace("_", "-"), f"required for --job-kind {args.job_kind}")
        return
    for flag in ("global_batch", "seq_len"):
        if getattr(args, flag) is not None:
            raise InputError("--" + flag.replace("_", "-"),
                             f"does not apply to --job-kind {args.job_kind}: the batch is --prompts-per-step x "
                             f"--samples-per-prompt and the lengths --prompt-len and --response-len")
    for flag in ("prompts_per_step", "samples_per_prompt", "prompt_len", "response_len"):
        if getattr(args, flag) is None:
            raise InputError("--" + flag.replace("_", "-"), f"required for --job-kind {args.job_kind}")
    if args.objective not in OBJECTIVES:
        raise InputError("--objective", f"RL jobs take {' or '.join(OBJECTIVES)}, got {args.objective}")
