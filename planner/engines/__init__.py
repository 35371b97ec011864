"""Training engines as profiles: what each can run and how it runs it (planner.engines.base).

One module per engine; the registry below is the only list of them. A plan names its engine
(`Plan.engine`; a plan file without one is for "hetplan", hetplan's own runtime); the search
searches that engine's space and the cost model predicts the plan as that engine executes it.

`REAL` are the engines people launch (every one but hetplan's CPU runtime); planning with no
engine named (`AUTO`, the CLI's and the app's default) searches each of them and answers with the
best plan, tagged with its engine (planner.search.search, `engines`).
"""
from __future__ import annotations

from planner.engines import deepspeed, flagscale, fsdp, hetplan, megatron, torchtitan
from planner.engines.base import Engine, Execution, Space
from planner.types import InputError

DEFAULT = hetplan.ENGINE.name         # a plan (file) that names no engine: hetplan's runtime
RUNTIME = hetplan.ENGINE.name
ENGINES: dict[str, Engine] = {e.name: e for e in (hetplan.ENGINE, megatron.ENGINE, deepspeed.ENGINE,
                                                  torchtitan.ENGINE, flagscale.ENGINE, fsdp.ENGINE)}
REAL: tuple[str, ...] = tuple(name for name in ENGINES if name != RUNTIME)
AUTO = "auto"                         # plan for the best of the REAL engines


def get(name: str, field: str = "engine") -> Engine:
    """The profile of engine `name`; InputError naming `field` and the known engines otherwise."""
    if not isinstance(name, str) or name not in ENGINES:
        raise InputError(field, f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]


__all__ = ["AUTO", "DEFAULT", "ENGINES", "REAL", "RUNTIME", "Engine", "Execution", "Space", "get"]
