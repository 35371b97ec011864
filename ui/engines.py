"""The engines as the app names them: labels, pinned versions, which engines run a plan file, and
each engine's best plan side by side. Every answer comes from the profiles (planner.engines):
nothing here branches on an engine's name."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from catalog import plan_from_dict, without_output_keys
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import AUTO, ENGINES, REAL
from planner.types import InputError, JobKind, Offload, Plan, Precision
from ui.frames import plan_shape
from ui.markup import md
from ui.numbers import per_million_tokens, percent, whole
from ui.planning import catalog
from ui.state import ENGINE_CHOICES

_COMMIT = re.compile(r"\b([0-9a-f]{10})[0-9a-f]{30}\b")


def short_version(version: str) -> str:
    """A pinned version with its commit hashes cut to 10 digits (as `git log --oneline` would)."""
    return _COMMIT.sub(r"\1", version)


def title(name: str) -> str:
    return ENGINE_CHOICES[name].title if name in ENGINE_CHOICES else name


def pinned(name: str) -> str:
    """"Megatron-LM · NVIDIA/Megatron-LM@d98e8a64dd", as Markdown; the best engine: the engines it picks from."""
    if name == AUTO:
        return f"{md(title(name))} of {md(', '.join(ENGINES[n].title for n in REAL))}"
    return f"{md(title(name))} · {md(short_version(ENGINES[name].version))}"


def plan_engine(plan: dict | None) -> str | None:
    """The engine a plan file names (absent: hetplan's runtime); None for no plan or an unknown name."""
    if not isinstance(plan, dict):
        return None
    name = plan.get("engine", DEFAULT_ENGINE)
    return name if isinstance(name, str) and name in ENGINES else None


def with_engine(plan: dict, name: str) -> dict:
    """The plan file for engine `name` (the key left out for hetplan's runtime, as old plans have it)."""
    out = {k: v for k, v in plan.items() if k != "engine"}
    if name != DEFAULT_ENGINE:
        out["engine"] = name
    return out


def engines_that_train(precision: Precision) -> list[str]:
    """The titles of the engines whose space has `precision`."""
    return [e.title for e in ENGINES.values() if precision in e.space.precisions]


def engines_that_run(kind: JobKind) -> list[str]:
    """The titles of the engines whose space has job kind `kind`."""
    return [e.title for e in ENGINES.values() if kind in e.space.job_kinds]


def engines_with_context_parallel() -> list[str]:
    """The titles of the engines that split a sequence over GPUs (context parallelism)."""
    return [e.title for e in ENGINES.values() if e.space.context_parallel]


def engines_with_expert_parallel() -> list[str]:
    """The titles of the engines that shard a mixture-of-experts model's experts over replicas."""
    return [e.title for e in ENGINES.values() if e.space.expert_parallel]


def engines_that_offload(offload: Offload) -> list[str]:
    """The titles of the engines that run `offload` (every engine runs none)."""
    return [e.title for e in ENGINES.values() if e.space.offload_zero_stages(offload)]


@dataclass(frozen=True)
class Fit:
    """How a plan file stands with the engines: the one it names, what that engine cannot run in it
    (`violations`, empty: it runs it), the engines that do run it, and the plan parsed for the
    first of them (None when no engine runs it; `error` says why)."""
    engine: str
    violations: tuple[str, ...]
    runners: tuple[str, ...]
    plan: Plan | None
    error: str = ""


def engine_fit(plan: dict, engine: str | None = None) -> Fit:
    """Which engines run the plan file `plan` (with its `engine` replaced by `engine` when given).
    The catalog refuses a plan its engine cannot run, so the plan is parsed for each engine in turn."""
    engine = engine or plan_engine(plan) or DEFAULT_ENGINE
    plan = without_output_keys(plan)
    parsed: dict[str, Plan] = {}
    errors: dict[str, str] = {}
    for name in ENGINES:
        try:
            parsed[name] = plan_from_dict(with_engine(plan, name), catalog(), source="plan")
        except InputError as e:
            errors[name] = str(e)
    runners = tuple(parsed)
    if not runners:
        return Fit(engine, (), (), None, errors.get(engine) or next(iter(errors.values()), ""))
    first = parsed.get(engine) or parsed[runners[0]]
    return Fit(engine, tuple(ENGINES[engine].violations(first)), runners, first)


def _change(value: float, reference: float) -> str:
    if not reference:
        return "-"
    d = value / reference - 1
    return "same" if abs(d) < 0.0005 else f"{d:+.1%}"


def search_proof(result) -> str:
    """"complete" or "stopped at its time limit, gap 4.1%": how final an engine's best plan is."""
    if getattr(result, "complete", True):
        return "complete"
    gap = getattr(result, "gap", None)
    stopped = getattr(result, "stopped_by", None)
    head = f"stopped at its {stopped}" if stopped else "not proven best"
    return f"{head}, " + (f"gap {percent(gap, 1)}" if gap is not None else "gap unknown")


def engines_table(outcomes: dict, cluster_gpus: int):
    """One row per engine (`outcomes`: engine name -> ui.planning.Outcome of its search): its best
    plan's figures and their change against hetplan's runtime, which runs every plan, or why the
    engine has no plan. Plain text cells (the page renders them as text)."""
    reference = outcomes.get(DEFAULT_ENGINE)
    ref = (reference.result.plans[0].estimate
           if reference is not None and not reference.error and reference.result.plans else None)
    rows = []
    for name, outcome in outcomes.items():
        row = {"engine": title(name), "version": short_version(ENGINES[name].version)}
        if outcome.error or not outcome.result.plans:
            rows.append({**row, "tokens/s": "-", "$ / M tokens": "-", "GPUs used": "-", "search": "no plan",
                         "tokens/s vs runtime": "-", "$ / M vs runtime": "-",
                         "plan": f"no plan: {outcome.error or 'the search returned none'}"})
            continue
        best = outcome.result.plans[0]
        est = best.estimate
        rows.append({**row, "tokens/s": whole(est.tokens_per_s),
                     "$ / M tokens": per_million_tokens(est.cost_per_million_tokens_usd),
                     "GPUs used": f"{whole(est.num_gpus)} of {whole(cluster_gpus)}", "search": search_proof(outcome.result),
                     "tokens/s vs runtime": "-" if ref is None or name == DEFAULT_ENGINE else
                     _change(est.tokens_per_s, ref.tokens_per_s),
                     "$ / M vs runtime": "-" if ref is None or name == DEFAULT_ENGINE else
                     _change(est.cost_per_million_tokens_usd, ref.cost_per_million_tokens_usd),
                     "plan": plan_shape(best.plan)})
    return pd.DataFrame(rows)
