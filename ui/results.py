"""The planner's answer as named plans the pages can list, pick and compare."""
from __future__ import annotations

from dataclasses import dataclass

from catalog import plan_to_dict, without_output_keys
from ui.planning import catalog


@dataclass(frozen=True)
class NamedPlan:
    name: str          # "#1", "megatron baseline", ...
    role: str          # "plan", "pareto", "baseline"
    scored: object     # planner.search.ScoredPlan

    @property
    def plan_dict(self) -> dict:
        return plan_dict(self.scored.plan)


def plan_dict(plan) -> dict:
    return plan_to_dict(plan, catalog())


def named_plans(result) -> list[NamedPlan]:
    """Ranked plans, then Pareto plans not among them, then the baselines (when they fit)."""
    baselines = [NamedPlan(f"{name} baseline", "baseline", sp)
                 for name, sp in (getattr(result, "baselines", None) or {}).items() if sp is not None]
    out, seen = [], [b.plan_dict for b in baselines]
    for k, sp in enumerate(result.plans):
        out.append(NamedPlan(f"#{k + 1}", "plan", sp))
        seen.append(plan_dict(sp.plan))
    extra = 0
    for sp in getattr(result, "pareto", None) or []:
        if plan_dict(sp.plan) not in seen:
            extra += 1
            out.append(NamedPlan(f"pareto {extra}", "pareto", sp))
            seen.append(plan_dict(sp.plan))
    return out + baselines


def pareto_dicts(result) -> list[dict]:
    return [plan_dict(sp.plan) for sp in (getattr(result, "pareto", None) or [])]


def find(named: list[NamedPlan], plan: dict | None) -> NamedPlan | None:
    if plan is None:
        return None
    plan = {k: v for k, v in without_output_keys(plan).items() if k not in ("name", "notes")}
    return next((n for n in named if n.plan_dict == plan), None)
