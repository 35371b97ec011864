"""An RL plan as a verl configuration and launch script (volcengine/verl@b178a3c).

verl composes its config with Hydra; the file written here names verl's own config as its default
and overrides what the plan decides (the keys exist in verl's flattened config at the pin:
verl/trainer/config/_generated_ppo_megatron_trainer.yaml, and for a disaggregated plan
verl/experimental/one_step_off_policy/config/one_step_off_ppo_megatron_trainer.yaml's `rollout`):

  colocated      verl.trainer.main_ppo with the hybrid engine: one resource pool of trainer.nnodes x
                 trainer.n_gpus_per_node for every role
  disaggregated  verl.experimental.one_step_off_policy.main_ppo: the actor's pool (trainer.*) and a
  / mixed        rollout pool (rollout.nnodes, rollout.n_gpus_per_node); that trainer always overlaps
                 one step, so a `sync` plan runs there one step off-policy (a warning in the files)
Roles: the actor (and reference, critic) with the megatron strategy and the actor plan's tensor and
pipeline degrees; the rollout engine by name with its tensor-parallel degree; batch and lengths:
data.train_batch_size (prompts), rollout.n (samples per prompt), ppo_mini_batch_size (prompts per
mini-batch), ppo_epochs, max_prompt_length, max_response_length (the longest response).
"""
from __future__ import annotations

import yaml

from planner.rl.engines import ROLLOUT_ENGINES, VERL
from planner.rl.roles import RlPlan, Shape
from planner.types import Cluster, InputError


def _single(values: set, what: str):
    if len(values) != 1:
        raise InputError("roles", f"verl runs one {what} per role; this plan has {sorted(values)}: plan again with "
                                  f"one pool per role")
    return next(iter(values))


def verl_config(cluster: Cluster, plan: RlPlan) -> dict:
    job, actor = plan.job, plan.actor
    if actor.engine != "megatron":
        raise InputError("roles.actor.engine", f"the verl export writes verl's megatron strategy; this actor plan is "
                                               f"for {actor.engine}: plan with --engine megatron (the default)")
    tp = _single({r.tp for s in actor.stages for r in s.replicas}, "actor tensor-parallel degree")
    rollout_tp = _single({g.tp for g in plan.rollout}, "rollout tensor-parallel degree")
    train_pool = cluster.pool(_single(set(actor.gpus_by_pool()), "actor pool"))
    train_gpus = actor.num_gpus
    mega = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": actor.num_stages,
            "virtual_pipeline_model_parallel_size": actor.interleave if actor.interleave > 1 else None}
    engine = ROLLOUT_ENGINES[plan.rollout_engine]
    apart = plan.shape != Shape.COLOCATED
    config: dict = {
        "hydra": {"searchpath": ["file://verl/trainer/config"] + (      # relative to verl's checkout, as verl's own
            ["file://verl/experimental/one_step_off_policy/config"] if apart else [])},   # one-step-off yaml
        "defaults": ["one_step_off_ppo_megatron_trainer" if apart else "ppo_megatron_trainer", "_self_"],
        "algorithm": {"adv_estimator": "gae" if job.critic else "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": job.prompts_per_step, "max_prompt_length": job.prompt_len,
                 "max_response_length": job.response_len_max},
        "actor_rollout_ref": {
            "hybrid_engine": not apart,
            "model": {"path": f"${{oc.env:MODEL_PATH,{job.model.id}}}"},
            "actor": {"strategy": "megatron", "ppo_mini_batch_size": job.prompts_per_step // job.mini_batches,
                      "ppo_micro_batch_size_per_gpu": actor.micro_batch, "ppo_epochs": job.ppo_epochs,
                      "use_kl_loss": job.reference, "megatron": dict(mega)},
            "ref": {"megatron": dict(mega)},
            "rollout": {"name": engine.name, "n": job.samples_per_prompt, "tensor_model_parallel_size": rollout_tp,
                        "gpu_memory_utilization": engine.gpu_memory_utilization if apart else 0.5,
                        "max_num_seqs": engine.max_num_seqs,
                        "max_num_batched_tokens": engine.max_num_batched_tokens,
                        "enable_prefix_caching": engine.prefix_caching},
        },
        "trainer": {"nnodes": max(1, train_gpus // train_pool.gpus_per_node),
                    "n_gpus_per_node": min(train_gpus, train_pool.gpus_per_node)},
    }
    if job.critic:
        config["critic"] = {"strategy": "megatron", "ppo_epochs": job.ppo_epochs, "megatron": dict(mega)}
    if job.reward_model is not None:
        config["reward_model"] = {"enable": True, "model": {"path": f"${{oc.env:REWARD_MODEL_PATH,"
                                                                    f"{job.reward_model.id}}}"}}
    if apart:
        pools = {cluster.pool(g.pool) for g in plan.rollout}
        per_node = _single({p.gpus_per_node for p in pools}, "GPUs per rollout node")
        gpus = sum(g.num_gpus for g in plan.rollout)
        config["rollout"] = {"nnodes": max(1, gpus // per_node), "n_gpus_per_node": min(gpus, per_node)}
    return config


def verl_files(cluster: Cluster, plan: RlPlan) -> dict[str, str]:
    config = verl_config(cluster, plan)
    apart = plan.shape != Shape.COLOCATED
    head = [f"# verl config written by hetplan for {plan.job.algorithm.value} on {cluster.name}, {plan.shape.value}",
            f"# checked against {VERL} (docs/rl.md)"]
    if apart and not plan.overlapped:
        head.append("# warning: verl runs apart rollout GPUs with its one-step off-policy trainer only, so this sync "
                    "plan runs one step off-policy there")
    if plan.shape == Shape.MIXED:
        head.append("# warning: verl has no key to place the reference on the rollout pool; it runs on the actor's")
    module = "verl.experimental.one_step_off_policy.main_ppo" if apart else "verl.trainer.main_ppo"
    pools = ", ".join(f"{n} GPUs of {p} ({cluster.pool(p).gpu.id})" for p, n in plan.gpus_by_pool().items())
    launch = "\n".join([
        "#!/usr/bin/env bash",
        f"# {plan.shape.value} RL step on {pools}.",
        "# Start a Ray cluster over those nodes first (ray start --head on one, ray start --address on the others);",
        "# verl's resource pools take trainer.nnodes x trainer.n_gpus_per_node for the actor"
        + (" and rollout.nnodes x rollout.n_gpus_per_node for the rollout." if apart else " and every role."),
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
        'cd "${VERL_ROOT:?set VERL_ROOT to a verl checkout at ' + VERL.split('@')[1][:12] + '}"',
        f"python3 -m {module} --config-path \"$HERE\" --config-name verl_config \"$@\"", ""])
    return {"verl_config.yaml": "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False),
            "launch.sh": launch}
