"""Export a plan to the configuration and launch files of a training engine.

`export_result(plan, cluster, engine, time_limit_s=...) -> ExportResult`: files (name -> text),
warnings, the plan the files describe, and, when the target engine cannot run the plan, that
engine's best plan from the search with its `Estimate` (planner.export.common.resolve).
`export_plan(plan, cluster, engine) -> dict[str, str]`: just the files, with a WARNINGS.txt when
there are warnings: what the app offers for download. Pure: nothing here writes files.
`ENGINES`: the export targets (`hetplan export --to`), each owned by one engine profile.
"""
from __future__ import annotations

from pathlib import Path

from planner.export import deepspeed, flagscale, fsdp, megatron, megatron_deepspeed, torchrun, torchtitan
from planner.export.common import SEARCH_TIME_LIMIT_S, ExportResult, engine_for, resolve, targets
from planner.cost import evaluate
from planner.types import Cluster, InputError, Plan

ENGINES = tuple(targets())       # ("torchrun", "megatron", "deepspeed", "torchtitan", "flagscale", "fsdp",
#                                   "megatron-deepspeed")


def _writer(target: str):
    writers = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "torchrun": torchrun,
               "flagscale": flagscale, "fsdp": fsdp, "megatron-deepspeed": megatron_deepspeed}
    if target not in writers:
        raise InputError("--to", f"unknown engine {target!r}; choose one of {list(ENGINES)}")
    return writers[target]


def export_result(plan: Plan, cluster: Cluster, engine: str, time_limit_s: float = SEARCH_TIME_LIMIT_S,
                  force: bool = False) -> ExportResult:
    """`force`: write a plan the engine runs even where the cost model says it does not fit its GPUs
    (with a warning); by default that is refused with the figures (a hand-edited plan needing 88 of 80 GiB
    would otherwise be written without a word)."""
    writer = _writer(engine)
    profile = engine_for(engine)
    target, reasons, alternative, estimate, search_notes = resolve(plan, cluster, engine, writer.limits,
                                                                   time_limit_s)
    memory = [] if alternative is not None else memory_warnings(target, cluster, profile.title, force)
    files, notes = writer.export(target, cluster)
    warnings = [f"{profile.title} cannot run this plan: {r}" for r in reasons]
    if alternative is not None:
        warnings.append(f"the files describe {profile.title}'s best plan from the search instead: "
                        f"{estimate.iteration_time_s:.3f} s per iteration, {estimate.tokens_per_s:,.0f} tokens/s on "
                        f"{alternative.num_gpus} GPUs, fits its GPUs by the cost model")
        warnings += list(search_notes)
    return ExportResult(engine, files, tuple(memory + warnings + notes), target, alternative, estimate,
                        tuple(reasons), profile.name, tuple(notes))


def memory_warnings(plan: Plan, cluster: Cluster, title: str, force: bool) -> list[str]:
    """An exact export is checked as the search checks its own plans (planner.cost.evaluate): a plan that
    does not fit is refused naming the overflow, or, with `force`, written with that as a warning."""
    est = evaluate(cluster, plan)
    if est.fits:
        return []
    if not force:
        raise InputError("plan", f"does not fit its GPUs by hetplan's cost model ({est.oom}), so {title} would run "
                                 f"out of memory; fix the plan (hetplan evaluate shows each stage's memory), or pass "
                                 f"--force to write it anyway")
    return [f"the plan does not fit its GPUs by hetplan's cost model ({est.oom}); written anyway (--force)"]


def possible_files(target: str) -> tuple[str, ...]:
    """Every file `target`'s writer may write (its FILES), whatever the plan: what `export --out` checks
    before anything runs; empty for a writer that does not list them."""
    return tuple(getattr(_writer(target), "FILES", ()))


def placed_files(result: ExportResult, folder: Path) -> dict[str, str]:
    """The result's files as written into `folder` (absolute): a writer whose files name their own folder
    (`place(files, folder)`, e.g. FlagScale's runner YAML naming its hostfile) gets the path."""
    place = getattr(_writer(result.engine), "place", None)
    return place(dict(result.files), folder) if place else dict(result.files)


def export_plan(plan: Plan, cluster: Cluster, engine: str, force: bool = False) -> dict[str, str]:
    result = export_result(plan, cluster, engine, force=force)
    files = dict(result.files)
    if result.warnings:
        files["WARNINGS.txt"] = "\n".join(f"- {w}" for w in result.warnings) + "\n"
    return files
