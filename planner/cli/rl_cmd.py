"""The RL job kinds (grpo, ppo) of `hetplan plan`, and RL plans in `evaluate` (and `export --to verl`,
planner/cli/export_cmd.py, which alone imports the exporters). Their options and the checks of them are
planner/cli/rl_flags.py's: `plan` imports this module for an RL job kind only (plan_cmd.JOB_KIND_MODULES)."""
from __future__ import annotations

import json

from catalog.files import read_mapping
from catalog.formats import load_cluster_file
from planner.cli.common import catalog_from_args, print_json
from planner.cli.files import write_file
from planner.cli.rl_flags import check_flags
from planner.rl.plan_file import is_rl_plan, rl_plan_from_dict, rl_plan_to_dict
from planner.rl.report import estimate_text, estimate_to_dict
from planner.rl.search import search_rl
from planner.rl.step import evaluate_rl
from planner.rl.workload import Algorithm, Mode, RlJob
from planner.types import InputError


def job_from_args(args, model, catalog) -> RlJob:
    reward = catalog.model(args.reward_model, "--reward-model") if args.reward_model else None
    try:
        return RlJob(model=model, algorithm=Algorithm(args.job_kind), prompts_per_step=args.prompts_per_step,
                     samples_per_prompt=args.samples_per_prompt, prompt_len=args.prompt_len,
                     response_len=args.response_len, response_len_max=args.response_len_max or args.response_len,
                     ppo_epochs=args.ppo_epochs or 1, mini_batches=args.mini_batches or 1,
                     mode=Mode.ASYNC if args.rl_async else Mode.SYNC,
                     reference=True if args.reference is None else args.reference, reward_model=reward)
    except InputError as e:
        raise InputError("--" + e.field.replace("_", "-"), e.message) from None


def _comparison(result) -> dict:
    best, base = result.best.estimate, result.baseline
    out = {"baseline": f"colocated on {result.baseline_pool} (the best GPU)"}
    if base is None:
        out.update(speedup=None, cost_ratio=None, note="the baseline does not run on that pool")
    else:
        out.update(speedup=base.estimate.step_time_s / best.step_time_s,
                   cost_ratio=best.dollars_per_step / base.estimate.dollars_per_step if base.estimate.dollars_per_step
                   else None)
    return out


def run_plan(args, cluster, model, catalog) -> int:
    check_flags(args)
    job = job_from_args(args, model, catalog)
    # hetplan's runtime is no RL trainer; the best engine (the default) is megatron's for RL
    engine = "megatron" if args.engine in ("hetplan", "auto") else args.engine
    if engine == "all":
        raise InputError("--engine", "RL jobs take one training engine (megatron by default)")
    result = search_rl(cluster, job, args.objective, args.step_deadline, engine, args.rollout_engine or "vllm",
                       args.time_limit)
    best = result.best
    comparison = _comparison(result)
    plan_dict = rl_plan_to_dict(best.plan, catalog, estimate_to_dict(best.estimate)) | {"comparison": comparison}
    if args.out:
        write_file(args.out, json.dumps(plan_dict, indent=1, allow_nan=False) + "\n", "--out")
    if args.json:
        print_json({"kind": "rl", "objective": result.objective, "step_deadline_s": result.step_deadline_s,
                    "plan": plan_dict, "comparison": comparison,
                    "baseline": (rl_plan_to_dict(result.baseline.plan, catalog,
                                                 estimate_to_dict(result.baseline.estimate))
                                 if result.baseline else None),
                    "candidates": [rl_plan_to_dict(c.plan, catalog, estimate_to_dict(c.estimate))
                                   for c in result.candidates],
                    "rejected": list(result.rejected)})
        return 0
    lines = [f"RL {job.algorithm.value} for {result.objective}: {job.prompts_per_step:,} prompts x "
             f"{job.samples_per_prompt} samples, prompt {job.prompt_len:,}, response {job.response_len:,} "
             f"(max {job.response_len_max:,}) tokens, {len(result.candidates)} placement(s) evaluated", "",
             "best:"] + estimate_text(best.plan, best.estimate)
    if result.baseline is not None:
        b = result.baseline.estimate
        lines += ["", f"baseline, colocated on {result.baseline_pool} (the best GPU): step {b.step_time_s:,.1f} s, "
                      f"${b.dollars_per_step:,.2f} per step; best is {comparison['speedup']:.2f}x its samples/s"
                      + (f" at {comparison['cost_ratio']:.2f}x its dollars per step"
                         if comparison['cost_ratio'] else "")]
    else:
        lines += ["", f"baseline, colocated on {result.baseline_pool}: does not run there"]
    lines += ["", "other placements:"]
    for c in result.candidates[1:6]:
        lines += estimate_text(c.plan, c.estimate)[:2]     # the figures and where the rollout runs
    lines += [f"not run: {r}" for r in result.rejected]
    lines += [f"note: {n}" for n in best.estimate.notes]
    print("\n".join(lines))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def read_rl_plan(path: str):
    """The parsed JSON of a plan file when it is an RL plan (or RL `plan --json` output), else None."""
    data, _ = read_mapping(path)
    if is_rl_plan(data) or (isinstance(data.get("plan"), dict) and is_rl_plan(data["plan"])):
        return data
    return None


def evaluate(args, data) -> int:
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = rl_plan_from_dict(data, catalog, args.plan)
    est = evaluate_rl(cluster, plan)
    if args.json:
        print_json(estimate_to_dict(est))
    else:
        print("\n".join(estimate_text(plan, est)))
        print("\n".join(f"note: {n}" for n in est.notes))
    return 0
