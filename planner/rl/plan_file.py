"""The RL plan in the plan file format: `hetplan.plan/1` with `"kind": "rl"`, the workload under
`rl`, the shape, and the roles (the actor's training plan in the ordinary plan format).

    {"format": "hetplan.plan/1", "kind": "rl", "shape": "disaggregated", "rollout_engine": "vllm",
     "rl": {"algorithm": "grpo", "model": "llama-3-8b", "prompts_per_step": 512, "samples_per_prompt": 8,
            "prompt_len": 512, "response_len": 2048, "response_len_max": 2048, "ppo_epochs": 1,
            "mini_batches": 1, "mode": "sync", "reference": true, "reward_model": null},
     "roles": {"rollout": [{"pool": "l40s", "tp": 4, "replicas": 16}], "actor": {<plan>},
               "reference": "training" | "rollout" | null, "critic": "actor" | null,
               "reward": "training" | "rollout" | null}}

An ordinary plan file has no `kind` and reads as before; the ordinary loader refuses an RL plan
(its unknown keys). `metrics` (and the output-only keys of `hetplan plan`) are ignored on reading.
"""
from __future__ import annotations

from typing import Any, Mapping

from catalog.formats import plan_from_dict, plan_to_dict
from planner.rl.engines import ROLLOUT_ENGINES
from planner.rl.roles import RlPlan, RolloutGroup, Shape
from planner.rl.workload import Algorithm, Mode, RlJob
from planner.types import PLAN_FORMAT, InputError

RL_KIND = "rl"
TOP_KEYS = {"format", "kind", "shape", "rollout_engine", "rl", "roles"}
OUTPUT_KEYS = {"metrics", "explanation", "gain_over", "comparison"}
RL_KEYS = {"algorithm", "model", "prompts_per_step", "samples_per_prompt", "prompt_len", "response_len",
           "response_len_max", "ppo_epochs", "mini_batches", "mode", "reference", "reward_model"}
ROLE_KEYS = {"rollout", "actor", "reference", "critic", "reward"}


def is_rl_plan(data: Any) -> bool:
    """An RL plan, or `hetplan plan --job-kind grpo|ppo --json` output (which holds one as `plan`)."""
    return isinstance(data, Mapping) and (data.get("kind") == RL_KIND)


def _mapping(value, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise InputError(where, f"must be a mapping, got {type(value).__name__}")
    return value


def _unknown(data: Mapping, allowed: set, where: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise InputError(where, f"unknown key(s) {extra}; allowed: {sorted(allowed)}")


def _enum(cls, value, where: str):
    try:
        return cls(value)
    except ValueError:
        raise InputError(where, f"must be one of {[x.value for x in cls]}, got {value!r}") from None


def job_from_dict(d: Mapping, catalog, where: str = "rl") -> RlJob:
    d = _mapping(d, where)
    _unknown(d, RL_KEYS, where)
    missing = sorted({"algorithm", "model", "prompts_per_step", "samples_per_prompt", "prompt_len",
                      "response_len"} - set(d))
    if missing:
        raise InputError(where, f"missing key(s) {missing}")
    reward = d.get("reward_model")
    try:
        return RlJob(model=catalog.model(d["model"], f"{where}.model"),
                     algorithm=_enum(Algorithm, d["algorithm"], f"{where}.algorithm"),
                     prompts_per_step=d["prompts_per_step"], samples_per_prompt=d["samples_per_prompt"],
                     prompt_len=d["prompt_len"], response_len=d["response_len"],
                     response_len_max=d.get("response_len_max", d["response_len"]), ppo_epochs=d.get("ppo_epochs", 1),
                     mini_batches=d.get("mini_batches", 1), mode=_enum(Mode, d.get("mode", "sync"), f"{where}.mode"),
                     reference=_bool(d.get("reference", True), where),
                     reward_model=None if reward is None else catalog.model(reward, f"{where}.reward_model"))
    except InputError as e:
        if e.field.startswith(where):
            raise
        raise InputError(f"{where}.{e.field}", e.message) from None


def _bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}.reference", f"must be true or false, got {value!r}")
    return value


def rl_plan_from_dict(data: Mapping, catalog, source: str = "plan") -> RlPlan:
    """An RlPlan from its file form (or from `plan --json` output, whose `plan` it reads)."""
    data = _mapping(data, source)
    if "plan" in data and "candidates" in data:
        data = _mapping(data["plan"], f"{source}: plan")
    if data.get("format", PLAN_FORMAT) != PLAN_FORMAT:
        raise InputError(f"{source}: format", f"unsupported plan format {data.get('format')!r}; supported: "
                                              f"['{PLAN_FORMAT}']")
    _unknown(data, TOP_KEYS | OUTPUT_KEYS, source)
    for k in ("rl", "roles"):
        if k not in data:
            raise InputError(f"{source}: {k}", "missing: an RL plan needs the workload (rl) and the roles")
    job = job_from_dict(data["rl"], catalog, f"{source}: rl")
    roles = _mapping(data["roles"], f"{source}: roles")
    _unknown(roles, ROLE_KEYS, f"{source}: roles")
    groups = roles.get("rollout")
    if not isinstance(groups, list) or not groups:
        raise InputError(f"{source}: roles.rollout", "must be a list of {pool, tp, replicas}")
    rollout = []
    for i, g in enumerate(groups):
        g = _mapping(g, f"{source}: roles.rollout[{i}]")
        _unknown(g, {"pool", "tp", "replicas"}, f"{source}: roles.rollout[{i}]")
        try:
            rollout.append(RolloutGroup(str(g.get("pool")), g.get("tp"), g.get("replicas")))
        except InputError as e:
            raise InputError(f"{source}: roles.rollout[{i}].{e.field.rsplit('.', 1)[-1]}", e.message) from None
    actor = plan_from_dict(_mapping(roles.get("actor"), f"{source}: roles.actor"), catalog, f"{source}: roles.actor")
    shape = _enum(Shape, data.get("shape"), f"{source}: shape")
    engine = data.get("rollout_engine", "vllm")
    if engine not in ROLLOUT_ENGINES:
        raise InputError(f"{source}: rollout_engine", f"must be one of {sorted(ROLLOUT_ENGINES)}, got {engine!r}")
    try:
        return RlPlan(job, shape, tuple(rollout), actor, engine)
    except InputError as e:
        raise InputError(f"{source}: {e.field}", e.message) from None


def rl_plan_to_dict(plan: RlPlan, catalog=None, metrics: Mapping | None = None) -> dict[str, Any]:
    job = plan.job
    side = "rollout" if plan.shape == Shape.MIXED else "training"
    out: dict[str, Any] = {
        "format": PLAN_FORMAT, "kind": RL_KIND, "shape": plan.shape.value, "rollout_engine": plan.rollout_engine,
        "rl": {"algorithm": job.algorithm.value, "model": job.model.id, "prompts_per_step": job.prompts_per_step,
               "samples_per_prompt": job.samples_per_prompt, "prompt_len": job.prompt_len,
               "response_len": job.response_len, "response_len_max": job.response_len_max,
               "ppo_epochs": job.ppo_epochs, "mini_batches": job.mini_batches, "mode": job.mode.value,
               "reference": job.reference, "reward_model": job.reward_model.id if job.reward_model else None},
        "roles": {"rollout": [{"pool": g.pool, "tp": g.tp, "replicas": g.replicas} for g in plan.rollout],
                  "actor": plan_to_dict(plan.actor, catalog),
                  "reference": side if job.reference else None,
                  "critic": "actor" if job.critic else None,
                  "reward": side if job.reward_model else None},
    }
    if metrics is not None:
        out["metrics"] = dict(metrics)
    return out
