"""Training engines as profiles: what each can run and how it runs it (planner.engines.base).

One module per engine; the registry below is the only list of them. A plan names its engine
(`Plan.engine`, default "hetplan": hetplan's own runtime); the search searches that engine's
space and the cost model predicts the plan as that engine executes it.
"""
from __future__ import annotations

from planner.engines import deepspeed, flagscale, hetplan, megatron, torchtitan
from planner.engines.base import Engine, Execution, Space
from planner.types import ENGINE_NAMES, check_engine

DEFAULT = hetplan.ENGINE.name
ENGINES: dict[str, Engine] = {e.name: e for e in (hetplan.ENGINE, megatron.ENGINE, deepspeed.ENGINE,
                                                  torchtitan.ENGINE, flagscale.ENGINE)}
# the vocabulary's list (planner.types, which a Job checks its engine against) names exactly these
assert tuple(ENGINES) == ENGINE_NAMES, f"planner.types.ENGINE_NAMES {ENGINE_NAMES} != the registry {tuple(ENGINES)}"


def get(name: str, field: str = "engine") -> Engine:
    """The profile of engine `name`; InputError naming `field` and the known engines otherwise."""
    check_engine(name, field)
    return ENGINES[name]


__all__ = ["DEFAULT", "ENGINES", "Engine", "Execution", "Space", "get"]
