"""The planner's answer as named plans the pages can list, pick and compare."""
from __future__ import annotations

import re
from dataclasses import dataclass

from catalog import plan_to_dict, without_output_keys
from planner import spot
from ui.numbers import count, per_million_tokens, percent, whole
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


def baseline_facts(estimate, cluster_gpus: int) -> str:
    """What a baseline is, next to any gain quoted against it: "16 of 112 GPUs · $0.412 / M tokens"."""
    return (f"{whole(estimate.num_gpus)} of {count(cluster_gpus, 'GPU')} · "
            f"{per_million_tokens(spot.cost_per_million_tokens_usd(estimate))} / M tokens")


def cheaper_baseline(name: str, plan_estimate, baseline_estimate, cluster_gpus: int) -> str:
    """One sentence when the baseline costs less per token than the plan it is compared with; "" if not.
    A gain by throughput against a baseline that leaves most GPUs idle says little about dollars."""
    plan_usd = spot.cost_per_million_tokens_usd(plan_estimate)      # expected figures on spot pools, as ranked
    base_usd = spot.cost_per_million_tokens_usd(baseline_estimate)
    if not base_usd < plan_usd * (1 - 0.005):            # within half a percent: the same price
        return ""
    return (f"The {name} is {percent(1 - base_usd / plan_usd)} cheaper per token than this plan "
            f"({per_million_tokens(base_usd)} against {per_million_tokens(plan_usd)} per million tokens): it uses "
            f"{whole(baseline_estimate.num_gpus)} of the {count(cluster_gpus, 'GPU')}, this plan "
            f"{whole(plan_estimate.num_gpus)}.")


def _percent(fraction: float) -> str:
    return percent(abs(fraction))


def _what_it_leaves(plan, cluster) -> str:
    """The GPUs a plan does not use, by GPU type: "leaves 72 v100-32gb-sxm GPUs idle"."""
    used = plan.gpus_by_pool()
    idle: dict[str, int] = {}
    for pool in cluster.pools:
        if pool.num_gpus > used.get(pool.name, 0):
            idle[pool.gpu.id] = idle.get(pool.gpu.id, 0) + pool.num_gpus - used.get(pool.name, 0)
    if not idle:
        return f"uses all {count(cluster.num_gpus, 'GPU')}"
    parts = [f"{whole(n)} {gpu} GPU{'s' if n != 1 else ''}" for gpu, n in idle.items()]
    return "leaves " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + " idle"


def cheaper_front_plans(result, on_view_plan: dict, on_view_estimate, cluster) -> list[tuple[str, str]]:
    """(name, sentence) for each plan of the throughput/cost front that is cheaper per token than the
    plan on view, cheapest last: "4% slower, 30% cheaper per token: leaves 72 v100-32gb-sxm GPUs idle"."""
    named = named_plans(result)
    on_view_plan = {k: v for k, v in without_output_keys(on_view_plan).items() if k not in ("name", "notes")}
    view_tps, view_usd = spot.tokens_per_s(on_view_estimate), spot.cost_per_million_tokens_usd(on_view_estimate)
    out = []
    for sp in sorted(getattr(result, "pareto", None) or [], key=lambda sp: -sp.estimate.tokens_per_s):
        d = plan_dict(sp.plan)
        est = sp.estimate
        usd = spot.cost_per_million_tokens_usd(est)           # expected figures on spot pools, as the gains
        if d == on_view_plan or not usd < view_usd * (1 - 0.005):
            continue
        name = next((n.name for n in named if n.plan_dict == d), "a front plan")
        speed = spot.tokens_per_s(est) / view_tps - 1
        pace = ("as fast" if abs(speed) < 0.005 else
                f"{_percent(speed)} {'slower' if speed < 0 else 'faster'}")
        cheaper = 1 - usd / view_usd
        out.append((name, f"{pace}, {_percent(cheaper)} cheaper per token "
                          f"({per_million_tokens(usd)} / M tokens): {_what_it_leaves(sp.plan, cluster)}"))
    return out


@dataclass(frozen=True)
class BaselineSearch:
    """How far a baseline's own search got: it stopped at a limit (`stopped_by`) with, when known,
    the gap it could not rule out (on the planner's fast estimate)."""
    stopped_by: str
    gap: float | None


_BASELINE_STOPPED = re.compile(r"^the (\w+) baseline stopped at its (time limit|budget)\b")
_GAP = re.compile(r"^(?:the \w+ baseline's )?optimality gap (\d+(?:\.\d+)?)%")   # older results: no name


def baseline_searches(result) -> dict[str, BaselineSearch]:
    """The baselines whose search did not complete, by name: SearchResult.baseline_status, or for a
    result without it, the notes ("the megatron baseline stopped at its time limit ...", then
    "optimality gap 5.6%: ..."; tests/test_app_trust.py holds this to the planner's wording)."""
    status = getattr(result, "baseline_status", None)
    if status:
        return {name: BaselineSearch(s.stopped_by, s.gap) for name, s in status.items() if not s.complete}
    out: dict[str, BaselineSearch] = {}
    current = None
    for note in getattr(result, "notes", ()) or ():
        stopped = _BASELINE_STOPPED.match(note)
        if stopped:
            current = stopped.group(1)
            out[current] = BaselineSearch("time limit" if stopped.group(2) == "time limit" else "fast-score budget", None)
            continue
        gap = _GAP.match(note)
        if gap and current is not None:
            out[current] = BaselineSearch(out[current].stopped_by, float(gap.group(1)) / 100)
        if not note.startswith("the time limit left room"):     # that one sits between a stop and its gap
            current = None
    return out


# What each baseline is, where a gain is quoted against it: the "megatron" baseline is a plan on one
# GPU type (the engine Megatron-LM is a different thing: the engine picker's).
BASELINE_TITLES = {"megatron": "Megatron-style baseline (one GPU type)",
                   "uniform": "uniform baseline (all GPUs alike)"}


def baseline_gap_text(search: BaselineSearch) -> str:
    """Beside a gain quoted against a baseline whose search stopped early."""
    if search.gap is None:
        return f"search stopped at its {search.stopped_by}, with a gap unknown"
    if search.gap < 0.0005:
        return f"search stopped at its {search.stopped_by}, with a gap below 0.1% (fast estimate)"
    return (f"search stopped at its {search.stopped_by}: a plan of its space up to {percent(search.gap, 1)} better "
            f"may be unexplored (fast estimate)")
