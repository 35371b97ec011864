"""Export a plan to the configuration of a training engine.

`export_result(plan, cluster, engine) -> ExportResult`: files (name -> text), warnings (what the
engine cannot express), the plan the files describe, and when the engine cannot run the plan as
it is, the closest plan it can run with its predicted `Estimate`.
`export_plan(plan, cluster, engine) -> dict[str, str]`: just the files, with a WARNINGS.txt when
there are warnings: what the app offers for download. Pure: nothing here writes files.
"""
from __future__ import annotations

from planner.export.common import ExportResult
from planner.types import Cluster, InputError, Plan

ENGINES = ("megatron", "torchtitan", "deepspeed", "torchrun")


def export_result(plan: Plan, cluster: Cluster, engine: str) -> ExportResult:
    from planner.export import deepspeed, megatron, torchrun, torchtitan
    modules = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "torchrun": torchrun}
    if engine not in modules:
        raise InputError("--to", f"unknown engine {engine!r}; choose one of {list(ENGINES)}")
    files, warnings, target, closest, estimate = modules[engine].export(plan, cluster)
    return ExportResult(engine, files, tuple(warnings), target, closest, estimate)


def export_plan(plan: Plan, cluster: Cluster, engine: str) -> dict[str, str]:
    result = export_result(plan, cluster, engine)
    files = dict(result.files)
    if result.warnings:
        text = "\n".join(f"- {w}" for w in result.warnings) + "\n"
        if result.closest_plan is not None:
            text += (f"\nThese files describe the closest plan {engine} can run: "
                     f"{result.closest_estimate.iteration_time_s:.3f} s per iteration, "
                     f"{result.closest_estimate.tokens_per_s:,.0f} tokens/s on {result.closest_plan.num_gpus} GPUs.\n")
        files["WARNINGS.txt"] = text
    return files
