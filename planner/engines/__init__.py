"""Training engines as profiles: what each can run and how it runs it (planner.engines.base).

One module per engine; the registry below is the only list of them. A plan names its engine
(`Plan.engine`; a plan file without one is for "hetplan", hetplan's own runtime); the search
searches that engine's space and the cost model predicts the plan as that engine executes it.

`REAL` are the engines people launch that hetplan writes files for (every one with an export but
hetplan's CPU runtime); planning with no
engine named (`AUTO`, the CLI's and the app's default) searches each of them and answers with the
best plan, tagged with its engine (planner.search.search, `engines`).
"""
from __future__ import annotations

from dataclasses import fields

from planner.engines import deepspeed, flagscale, fsdp, hetplan, megatron, megatron_deepspeed, torchtitan
from planner.engines.base import Engine, Execution, Space
from planner.types import ENGINE_NAMES, check_engine

DEFAULT = hetplan.ENGINE.name         # a plan (file) that names no engine: hetplan's runtime
RUNTIME = hetplan.ENGINE.name
ENGINES: dict[str, Engine] = {e.name: e for e in (hetplan.ENGINE, megatron.ENGINE, deepspeed.ENGINE,
                                                  torchtitan.ENGINE, flagscale.ENGINE, fsdp.ENGINE,
                                                  megatron_deepspeed.ENGINE)}
# the vocabulary's list (planner.types, which a Job checks its engine against) names exactly these
assert tuple(ENGINES) == ENGINE_NAMES, f"planner.types.ENGINE_NAMES {ENGINE_NAMES} != the registry {tuple(ENGINES)}"
# engines people launch and hetplan writes files for (an export target): what AUTO plans over
REAL: tuple[str, ...] = tuple(name for name, e in ENGINES.items() if name != RUNTIME and e.exports)
AUTO = "auto"                         # plan for the best of the REAL engines


def get(name: str, field: str = "engine") -> Engine:
    """The profile of engine `name`; InputError naming `field` and the known engines otherwise."""
    check_engine(name, field)
    return ENGINES[name]


def best_of(names: tuple[str, ...] = REAL) -> Engine:
    """What planning for the best of `names` (AUTO) may ask for: every capability one of them has, as a
    profile the front ends can check a job against. No plan is made or costed for it: the search plans
    for each real engine and tags the answer with its own (planner.search.search, `engines`)."""
    spaces = [get(n).space for n in names]
    merged = {}
    for f in fields(Space):
        values = [getattr(s, f.name) for s in spaces]
        if f.name == "offloads":
            stages: dict = {}
            for offloads in values:
                for offload, zeros in offloads:
                    stages[offload] = tuple(sorted(set(stages.get(offload, ())) | set(zeros)))
            merged[f.name] = tuple(stages.items())
        elif f.name == "tied_edges_same_tp":     # a restriction: only where every engine has it
            merged[f.name] = all(values)
        elif isinstance(values[0], bool):
            merged[f.name] = any(values)
        else:
            merged[f.name] = tuple(dict.fromkeys(v for value in values for v in value))
    return Engine(name=AUTO, title="the best engine", version=", ".join(get(n).version for n in names),
                  space=Space(**merged), execution=get(RUNTIME).execution,
                  summary=f"the best plan over {', '.join(get(n).title for n in names)}, each plan for one of them")


__all__ = ["AUTO", "DEFAULT", "ENGINES", "REAL", "RUNTIME", "Engine", "Execution", "Space", "best_of", "get"]
