"""An RL plan as an OpenRLHF launch (OpenRLHF/OpenRLHF@3c3be62, openrlhf/cli/train_ppo_ray.py).

OpenRLHF runs each role as Ray actors on GPUs of its own (`--actor.num_nodes`, `--ref.num_nodes`,
`--critic.num_nodes`, `--reward.num_nodes` with `num_gpus_per_node` each) and the rollout as
`--vllm.num_engines` vLLM engines of `--vllm.tensor_parallel_size` GPUs; `--train.colocate_all` puts
every role and the engines on the same GPUs (its hybrid engine, with `--vllm.enable_sleep` and
`--ds.enable_sleep` as its examples/scripts/train_ppo_ray_hybrid_engine.sh does) and
`--train.async_enable` overlaps generation with training. The actor trains with DeepSpeed ZeRO
(`--ds.zero_stage`) and tensor parallelism (`--ds.tensor_parallel_size`), without pipeline stages:
the actor plan must have one stage (plan with --engine deepspeed). Batches: `--rollout.batch_size`
prompts, `--rollout.n_samples_per_prompt`, `--train.batch_size` samples per optimizer step,
`--train.max_epochs`; lengths: `--data.max_len` (prompt + response), `--rollout.max_new_tokens`.
GRPO is `--algo.advantage.estimator group_norm` with `--algo.kl.use_loss`; without a reference,
`--algo.kl.init_coef 0` (train_ppo_ray.py lines 93-103 create the reference only when it is positive).
"""
from __future__ import annotations

import shlex

from planner.rl.roles import RlPlan, Shape
from planner.types import Cluster, InputError

OPENRLHF = "OpenRLHF/OpenRLHF@3c3be6234e0cb353e76bb8019947db9dfe99fca7"


def _nodes(gpus: int, per_node: int) -> tuple[int, int]:
    return max(1, gpus // per_node), min(gpus, per_node)


def openrlhf_args(cluster: Cluster, plan: RlPlan) -> tuple[list[str], list[str]]:
    """(the flags with their values, warnings) of train_ppo_ray for `plan`."""
    job, actor = plan.job, plan.actor
    if actor.num_stages != 1:
        raise InputError("roles.actor", f"OpenRLHF trains with DeepSpeed ZeRO without pipeline stages; this actor "
                                        f"plan has {actor.num_stages}: export a plan whose actor has one stage, or to verl")
    tps = {r.tp for s in actor.stages for r in s.replicas}
    pools = set(actor.gpus_by_pool())
    rollout_tps = {g.tp for g in plan.rollout}
    if len(tps) != 1 or len(pools) != 1 or len(rollout_tps) != 1:
        raise InputError("roles", "OpenRLHF runs one actor layout on one pool and one vLLM tensor-parallel degree; "
                                  "plan again with one pool per role")
    train_pool = cluster.pool(next(iter(pools)))
    a_nodes, a_gpn = _nodes(actor.num_gpus, train_pool.gpus_per_node)
    flags = [("--actor.model_name_or_path", "$MODEL_PATH"),
             ("--actor.num_nodes", a_nodes), ("--actor.num_gpus_per_node", a_gpn),
             ("--ds.zero_stage", actor.zero_stage), ("--ds.tensor_parallel_size", next(iter(tps))),
             ("--vllm.num_engines", sum(g.replicas for g in plan.rollout)),
             ("--vllm.tensor_parallel_size", next(iter(rollout_tps))),
             ("--vllm.enable_prefix_caching", None),
             ("--rollout.batch_size", job.prompts_per_step), ("--rollout.n_samples_per_prompt", job.samples_per_prompt),
             ("--rollout.max_new_tokens", job.response_len_max), ("--data.max_len", job.prompt_len + job.response_len_max),
             ("--train.batch_size", job.mini_batch_samples), ("--train.max_epochs", job.ppo_epochs),
             ("--train.micro_batch_size", actor.micro_batch), ("--ds.packing_samples", None),
             ("--algo.advantage.estimator", "gae" if job.critic else "group_norm")]
    warnings = []
    if job.reference:
        flags += [("--ref.num_nodes", a_nodes), ("--ref.num_gpus_per_node", a_gpn), ("--train.colocate_actor_ref", None)]
        flags += [] if job.critic else [("--algo.kl.use_loss", None)]
        if plan.shape == Shape.MIXED:
            warnings.append("OpenRLHF has no flag to put the reference on the vLLM engines' GPUs; it shares the actor's")
    else:
        flags.append(("--algo.kl.init_coef", 0))
    if job.critic:
        flags += [("--critic.num_nodes", a_nodes), ("--critic.num_gpus_per_node", a_gpn)]
        if plan.shape != Shape.COLOCATED:
            warnings.append("OpenRLHF gives the critic GPUs of its own unless every role is colocated; the plan "
                            "time-shares it with the actor")
    if job.reward_model is not None:
        flags += [("--reward.model_name_or_path", "$REWARD_MODEL_PATH"), ("--reward.num_nodes", a_nodes),
                  ("--reward.num_gpus_per_node", a_gpn)]
    else:
        flags.append(("--reward.remote_url", "$REWARD_FUNC"))
    if plan.shape == Shape.COLOCATED:
        flags += [("--train.colocate_all", None), ("--vllm.enable_sleep", None), ("--ds.enable_sleep", None)]
    if plan.overlapped:
        flags.append(("--train.async_enable", None))
    elif plan.shape != Shape.COLOCATED:
        warnings.append("sync on apart GPUs: OpenRLHF then runs generation and training one after the other")
    args = []
    for flag, value in flags:
        args.append(flag)
        if value is not None:
            args.append(str(value))
    return args, warnings


def openrlhf_files(cluster: Cluster, plan: RlPlan) -> dict[str, str]:
    args, warnings = openrlhf_args(cluster, plan)
    lines = ["#!/usr/bin/env bash",
             f"# OpenRLHF {plan.job.algorithm.value} on {cluster.name}, {plan.shape.value}, written by hetplan "
             f"(flags checked against {OPENRLHF}, docs/rl.md).",
             *[f"# warning: {w}" for w in warnings],
             "# Start a Ray cluster over the plan's nodes first; MODEL_PATH, and REWARD_FUNC (a reward function file)",
             "# or REWARD_MODEL_PATH, must be set.",
             "set -euo pipefail",
             ": \"${MODEL_PATH:?set MODEL_PATH}\"",
             "python3 -m openrlhf.cli.train_ppo_ray \\"]
    body, i = [], 0
    while i < len(args):
        part = args[i]
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
            part += " " + (f'"{value}"' if value.startswith("$") else shlex.quote(value))
            i += 1
        body.append(f"  {part}")
        i += 1
    lines.append(" \\\n".join(body) + ' \\\n  "$@"')
    return {"launch.sh": "\n".join(lines) + "\n"}
