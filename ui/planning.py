"""The app's calls into `catalog` and `planner`: typed objects from the state, cached.

Caches are keyed on JSON strings (hashable, and equal exactly when the inputs are), so a
second identical request is answered from memory.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

import streamlit as st
from pydantic import ValidationError
from streamlit.runtime.scriptrunner import get_script_run_ctx

from catalog import (Catalog, check_plan_against_cluster, cluster_from_dict, load_catalog, plan_from_dict,
                     without_output_keys)
from catalog.errors import from_validation_error
from catalog.formats import fleet_jobs_from_dict
from catalog.loader import model_from_entry
from catalog.schema import InlineModelEntry
from planner.cost import evaluate
from planner.engines import AUTO, REAL, RUNTIME
from planner.types import Cluster, InputError, Job, JobKind, Model, Objective, Offload, Plan, Precision, Training
from ui import phases
from ui.budget import Budget, Ledger, OverBudget, warm_up
from ui.state import AppState, context_parallel_degree, expert_parallel_degree

PLANNER_MISSING = ("The planner (planner.search) is not available in this installation yet. "
                   "You can still compose a cluster, upload a plan and evaluate it (What-if page).")


class PlannerUnavailable(RuntimeError):
    pass


@st.cache_resource(show_spinner=False)
def catalog() -> Catalog:
    return load_catalog()


# The app's seam to the planner's features: planner.search (and the export, replan and fleet built on it)
# are imported where they are used, not at the top, so that the app says so when they are absent
# (PlannerUnavailable) and tests can stand a search in for them (tests/app_helpers.py puts
# tests/fake_search.py in sys.modules["planner.search"]). Not a cycle: the import graph has none.
def search_api():
    """planner.search's (search, SearchOptions), or raise PlannerUnavailable."""
    try:
        from planner.search import SearchOptions, search
    except ImportError:
        raise PlannerUnavailable(PLANNER_MISSING) from None
    return search, SearchOptions


def attach_baselines_api():
    """planner.search.search.attach_baselines, or None where the planner has none (then the search answers
    in one call)."""
    try:
        from planner.search.search import attach_baselines
    except ImportError:
        return None
    return attach_baselines


def search_after_first_api():
    """planner.search.search.search_after_first, or None where the planner has none (then the whole search
    searches the first engine again)."""
    try:
        from planner.search.search import search_after_first
    except ImportError:
        return None
    return search_after_first


def exporter():
    """planner.export.export_result, or None while the exporters are not built."""
    try:
        from planner.export import export_result
    except ImportError:
        return None
    return export_result


def export_targets() -> tuple[str, ...]:
    """The exporters' targets (`hetplan export --to`), each owned by one engine profile."""
    try:
        from planner.export import ENGINES as targets
    except ImportError:
        return ()
    return tuple(targets)


# ----------------------------------------------------------------------------- state -> types

def build_cluster(state: AppState) -> Cluster:
    """The cluster of the state; an error names the pool table's row and column, in plain words."""
    try:
        return cluster_from_dict(state.cluster, catalog(), source="cluster")
    except InputError as e:
        raise InputError("", pool_error_for_people(str(e), state.cluster)) from None


COLUMN_TITLES = {"gpus_per_node": "GPUs / node", "inter_node_gbps": "network Gb/s per node",
                 "price_per_gpu_hour": "$ / GPU-hour", "gpu": "GPU type", "name": "pool name", "spot": "spot",
                 "availability": "availability", "host_memory_gib": "CPU GiB / node",
                 "grid_gco2_per_kwh": "grid gCO2 / kWh"}
NO_POOLS = "cluster: no pools; add a row to the pool table (GPU type, nodes, GPUs per node)"


def pool_error_for_people(message: str, cluster: dict) -> str:
    """A cluster error in the words of the pool table: `pools[2].nodes` becomes
    "pool table row 3 (h100-sxm), nodes"; an empty table, what to add (not the validator's "List should
    have at least 1 item")."""
    pools = cluster.get("pools") if isinstance(cluster, dict) else None
    pools = pools if isinstance(pools, list) else []

    def row(m: re.Match) -> str:
        i = int(m.group(1))
        gpu = pools[i].get("gpu") if i < len(pools) and isinstance(pools[i], dict) else None
        field = COLUMN_TITLES.get(m.group(2), m.group(2)) if m.group(2) else ""
        return f"pool table row {i + 1}" + (f" ({gpu})" if gpu else "") + (f", {field}" if field else "")

    if not pools and re.search(r"\bpools\b", message):
        return NO_POOLS
    return re.sub(r"pools\[(\d+)\](?:\.(\w+))?", row, message)


def build_model(model: str | dict) -> Model:
    if isinstance(model, str):
        return catalog().model(model, "model")
    try:
        entry = InlineModelEntry.model_validate(dict(model))
    except ValidationError as e:
        raise from_validation_error(e, "custom model") from None
    return model_from_entry(entry.id, entry)


def build_job(state: AppState) -> Job:
    """The job the search plans, for the engine chosen on Compose (`state.engine`). Offload "auto"
    is a job without offload that the search may offload (`offload_search`); context parallelism
    "auto" a job without it that the search may split (`context_parallel_search`); expert parallelism
    "auto" a job without it whose experts the search may shard (`expert_parallel_search`)."""
    precision = None if state.precision == "auto" else Precision(state.precision)
    offload = Offload.NONE if state.offload == "auto" else Offload(state.offload)
    return Job(model=build_model(state.model), global_batch=state.global_batch, seq_len=state.seq_len,
               precision=precision, tokens_to_train=state.tokens_to_train,
               engine=RUNTIME if state.engine == AUTO else state.engine,     # AUTO: `search_engines` says which
               tf32=state.tf32 if precision == Precision.FP32 else None,
               training=Training(JobKind(state.job_kind), state.lora_rank), offload=offload,
               context_parallel=context_parallel_degree(state.context_parallel) or 1,
               expert_parallel=expert_parallel_degree(state.expert_parallel) or 1)


def search_engines(state: AppState) -> tuple[str, ...] | None:
    """planner.search.search's `engines`: the real engines for AUTO (the best plan of any, tagged with its
    engine); None for one engine chosen on Compose (the job's)."""
    return REAL if state.engine == AUTO else None


def offload_search(state: AppState) -> str:
    """planner.search.search's `offload`: "auto" tries offload where memory limits; "fixed" keeps the job's."""
    return "auto" if state.offload == "auto" else "fixed"


def context_parallel_search(state: AppState) -> str:
    """planner.search.search's `context_parallel`: "auto" tries each degree that suits the sequence;
    "fixed" keeps the job's."""
    return "fixed" if context_parallel_degree(state.context_parallel) else "auto"


def context_degrees(state: AppState) -> list[int] | None:
    """The context-parallel degrees the search tries for this job under "auto" (planner.search's
    context_settings); None where the cluster or job does not build, or the planner is absent."""
    try:
        from planner.search.search import context_settings
    except ImportError:
        return None
    try:
        return context_settings(build_cluster(state),
                                build_job(replace(state, context_parallel="1", expert_parallel="1")))
    except InputError:
        return None


def expert_parallel_search(state: AppState) -> str:
    """planner.search.search's `expert_parallel`: "auto" tries each degree the engine runs for a
    mixture-of-experts model; "fixed" keeps the job's."""
    return "fixed" if expert_parallel_degree(state.expert_parallel) else "auto"


def expert_degrees(state: AppState) -> list[int] | None:
    """The expert-parallel degrees the search tries for this job under "auto" (planner.search's
    expert_settings); None where the cluster or job does not build, or the planner is absent."""
    try:
        from planner.search.search import expert_settings
    except ImportError:
        return None
    try:
        return expert_settings(build_cluster(state),
                               build_job(replace(state, context_parallel="1", expert_parallel="1")))
    except InputError:
        return None


def build_plan(state: AppState, cluster: Cluster) -> Plan:
    plan = plan_from_dict(state.plan, catalog(), source="plan")
    check_plan_against_cluster(plan, cluster)
    return plan


# ----------------------------------------------------------------------------- cached calls

@dataclass(frozen=True)
class Outcome:
    """A planner answer, or the readable reason there is none."""
    result: Any = None
    error: str = ""
    kind: str = ""               # "infeasible", "input", "unavailable"
    stage: str = ""              # "": the whole answer; else what is still to come (FIRST_ENGINE, BASELINES)
    note: str = ""               # what the answer lacks for good, and why (the baselines over the budget)


# An answer in steps (run_search with `show`): what the earlier ones still lack.
FIRST_ENGINE = "engines"         # the first engine's plans only (planner.engines.REAL[0]): the others still checked
BASELINES = "baselines"          # the search's answer without its baselines (no gains yet)


def search_options(options_type, time_limit_s: float):
    """SearchOptions with the app's limit: `time_limit_s` CPU seconds for the search and, in the
    planner's default proportion (5 s to 20 s), for each baseline."""
    default = options_type()
    share = default.baseline_time_limit_s / default.time_limit_s
    return options_type(time_limit_s=time_limit_s, baseline_time_limit_s=time_limit_s * share)


def baseline_time_limit_s(time_limit_s: float) -> float:
    """Each baseline's CPU-second limit when the search has `time_limit_s`."""
    try:
        _, options_type = search_api()
    except PlannerUnavailable:
        return 0.0
    return search_options(options_type, time_limit_s).baseline_time_limit_s


def ledger() -> Ledger:
    """The server's one ledger of the sessions' CPU seconds and its worker slots (ui.budget)."""
    return _ledger(id(Ledger))


@st.cache_resource(show_spinner=False)
def _ledger(code: int) -> Ledger:
    """`code`: the identity of ui.budget's Ledger, so that a server whose code is reloaded (an edited file, a
    deploy) gets a ledger of the new module: the old one's workers would name a `_work` no longer importable."""
    return Ledger(Budget.from_env())


@st.cache_resource(show_spinner=False)
def warm_up_workers() -> bool:
    """Once per server, from its first page: the workers' forkserver started (ui.budget.warm_up), so that the
    first Plan press does not wait for the planner's imports."""
    warm_up()
    return True


def bounded(fn, *args):
    """`fn(*args)` in a worker process under this session's budget (ui.budget): every planner call a
    visitor triggers goes through here, so the server's own thread only waits. Raises OverBudget."""
    ctx = get_script_run_ctx()
    return ledger().run(ctx.session_id if ctx is not None else "", fn, *args)


def stop_session_work() -> int:
    """End this session's running workers (ui.budget.Ledger.stop): a search replaced by a newer one."""
    ctx = get_script_run_ctx()
    return ledger().stop(ctx.session_id if ctx is not None else "")


def over_budget(e: OverBudget) -> Outcome:
    """The visitor's message for a computation over its budget (not cached: the next try runs again)."""
    return Outcome(error=str(e), kind="budget")


@st.cache_data(show_spinner=False, max_entries=64)
def _search(job_key: str, top_k: int, baselines: bool = True, engines: tuple[str, ...] | None = None) -> Outcome:
    return bounded(_search_work, job_key, top_k, baselines, engines)


def _search_work(job_key: str, top_k: int, baselines: bool = True, engines: tuple[str, ...] | None = None,
                 first=None) -> Outcome:
    """planner.search.search for the job `job_key`; `engines`: these instead of the state's (search_engines);
    `first`: the first engine's own answer, in hand (search_after_first)."""
    state = AppState(**json.loads(job_key), plan=None)
    try:
        search, SearchOptions = search_api()
        cluster, job = build_cluster(state), build_job(state)
        kw = dict(objective=Objective(state.objective), deadline_hours=state.deadline_hours, top_k=top_k,
                  method="hetplan", options=search_options(SearchOptions, state.time_limit_s), baselines=baselines,
                  offload=offload_search(state), context_parallel=context_parallel_search(state),
                  expert_parallel=expert_parallel_search(state))
        if first is not None:
            result = search_after_first_api()(cluster, job, first, engines or search_engines(state), **kw)
        else:
            result = search(cluster, job, engines=engines or search_engines(state), **kw)
    except PlannerUnavailable as e:
        return Outcome(error=str(e), kind="unavailable")
    except InputError as e:
        kind = "infeasible" if type(e).__name__ == "InfeasibleError" else "input"
        return Outcome(error=str(e), kind=kind)
    return Outcome(result=result)


@st.cache_data(show_spinner=False, max_entries=64)
def _with_baselines(job_key: str, top_k: int) -> Outcome:
    """The search's answer without baselines (cached, `_without_baselines`), then its baselines in a call of
    their own."""
    found = _without_baselines(job_key, top_k)
    if found.error:
        return found
    return bounded(_baselines_work, job_key, top_k, found.result)


def _baselines_work(job_key: str, top_k: int, result) -> Outcome:
    state = AppState(**json.loads(job_key), plan=None)
    try:
        _, SearchOptions = search_api()
        attached = attach_baselines_api()(build_cluster(state), build_job(state), result, Objective(state.objective),
                                          state.deadline_hours, top_k, search_options(SearchOptions, state.time_limit_s))
    except InputError as e:
        return Outcome(error=str(e), kind="input")
    return Outcome(result=attached)


PLANNER_FAILED = ("the planner stopped with an internal error ({error}). This is a bug in hetplan, not in "
                  "your input: please report it with the link in the address bar. The other pages still "
                  "work, and a plan uploaded on the What-if page can be evaluated.")


def in_steps(state: AppState) -> bool:
    """Whether the search's answer can come in steps equal to the one call's (attach_baselines' docstring):
    under the best engine, every objective; under one engine, every objective but energy."""
    return attach_baselines_api() is not None and (state.engine == AUTO or state.objective != "energy")


def run_search(state: AppState, top_k: int = 5, show: Callable[[Outcome], None] | None = None) -> Outcome:
    """The planner's answer; a crash inside it becomes a readable outcome (not cached, so the
    next press tries again) and its traceback goes to the server's log.

    Where `in_steps`, each step is a bounded, cached call of its own: the search without baselines, then
    its baselines (`attach_baselines`), the same answer as one search; under the best engine, the search
    without baselines is itself two: the first engine's (REAL[0], Megatron-LM; `_first_engine`), then the
    others pruned at it (`_after_first`). With `show`, `show` gets each earlier answer as it comes
    (Outcome.stage says what it lacks), before the last is returned."""
    try:
        if not in_steps(state):
            return _search(state.job_key(), top_k)
        return _in_steps(state, top_k, show)
    except OverBudget as e:
        return over_budget(e)
    except Exception as e:  # noqa: BLE001 - a planner bug must not take the page down
        logging.getLogger("hetplan.app").exception("planner.search failed for %s", state.job_key())
        return Outcome(error=PLANNER_FAILED.format(error=f"{type(e).__name__}: {e}"), kind="internal")


# Under the best engine the first engine's search (REAL[0], Megatron-LM) comes first, shown while the others are
# searched (one worker at a time per session: ui.budget's slots are shared by every session), within this share
# of the search limit, so that it delays the whole answer little where it is slow. Complete, it is that engine's
# part of the whole answer (search_after_first), under any limit and load; cut short, the whole search searches
# it again. On the app's default job it completes in about 0.7 CPU seconds of the 2 it has.
FIRST_ENGINE_SHARE = 0.1


def first_engine_first(state: AppState) -> bool:
    """Whether the search without baselines comes as the first engine's search, then the others' pruned at it."""
    return state.engine == AUTO and len(REAL) > 1 and search_after_first_api() is not None


def _first_engine(state: AppState, top_k: int) -> Outcome | None:
    """The first engine's (REAL[0]) own answer without baselines (the state with that engine chosen), its search
    within FIRST_ENGINE_SHARE of the limit; None where it fails (the whole search, next, says why) but for a
    search replaced by a newer one."""
    preview = replace(state, engine=REAL[0], time_limit_s=max(1.0, FIRST_ENGINE_SHARE * state.time_limit_s))
    try:
        return _search(preview.job_key(), top_k, False)
    except OverBudget as e:
        if e.limit == "stopped":
            raise
        return None
    except Exception:  # noqa: BLE001 - a preview only; the whole search says what goes wrong
        logging.getLogger("hetplan.app").exception("the first engine's search failed for %s", state.job_key())
        return None


def _without_baselines(job_key: str, top_k: int) -> Outcome:
    """The search's answer without baselines: where `first_engine_first`, the first engine's answer (cached) and
    the others' pruned at it (`_after_first`), the same answer as one call (`_search(job_key, top_k, False)`)."""
    if first_engine_first(AppState(**json.loads(job_key), plan=None)):
        return _after_first(job_key, top_k)
    return _search(job_key, top_k, False)


@st.cache_data(show_spinner=False, max_entries=64)
def _after_first(job_key: str, top_k: int) -> Outcome:
    """The engines after the first searched, pruned at its answer and combined with it (search_after_first);
    where it has none, or a limit cut it short, every engine searched in one call."""
    first = _first_engine(AppState(**json.loads(job_key), plan=None), top_k)
    if first is None or first.error:
        return _search(job_key, top_k, False)
    return bounded(_search_work, job_key, top_k, False, None, first.result)


def _in_steps(state: AppState, top_k: int, show: Callable[[Outcome], None] | None) -> Outcome:
    key = state.job_key()
    if show is not None and first_engine_first(state):
        first = _first_engine(state, top_k)
        if first is not None and not first.error:
            show(replace(first, stage=FIRST_ENGINE))
    found = _without_baselines(key, top_k)
    if found.error:
        return found
    if show is not None:
        show(replace(found, stage=BASELINES))
    try:
        attached = _with_baselines(key, top_k)
    except OverBudget as e:
        return replace(found, note=f"the baselines were not compared: {e}")
    except Exception as e:  # noqa: BLE001 - the plan stands without them
        logging.getLogger("hetplan.app").exception("planner.search's baselines failed for %s", key)
        return replace(found, note="the baselines were not compared: " + PLANNER_FAILED.format(
            error=f"{type(e).__name__}: {e}"))
    if attached.error:
        return replace(found, note=f"the baselines were not compared: {attached.error}")
    return attached


@st.cache_data(show_spinner=False, max_entries=256)
def _evaluate(cluster_json: str, plan_json: str, tokens: float | None) -> Outcome:
    return bounded(_evaluate_work, cluster_json, plan_json, tokens)


def _evaluate_work(cluster_json: str, plan_json: str, tokens: float | None) -> Outcome:
    try:
        cluster = cluster_from_dict(json.loads(cluster_json), catalog(), source="cluster")
        plan = plan_from_dict(json.loads(plan_json), catalog(), source="plan")
        check_plan_against_cluster(plan, cluster)
        return Outcome(result=(plan, evaluate(cluster, plan, tokens_to_train=tokens)))
    except InputError as e:
        return Outcome(error=str(e), kind="input")


@st.cache_data(show_spinner=False, max_entries=64)
def _export(cluster_json: str, plan_json: str, target: str, time_limit_s: float) -> Outcome:
    return bounded(_export_work, cluster_json, plan_json, target, time_limit_s)


def _export_work(cluster_json: str, plan_json: str, target: str, time_limit_s: float) -> Outcome:
    try:
        cluster = cluster_from_dict(json.loads(cluster_json), catalog(), source="cluster")
        plan = plan_from_dict(json.loads(plan_json), catalog(), source="plan")
        check_plan_against_cluster(plan, cluster)
        return Outcome(result=exporter()(plan, cluster, target, time_limit_s=time_limit_s))
    except InputError as e:          # the target's engine runs no plan here: a refusal, said as it is
        return Outcome(error=str(e), kind="refused")


def export_for(cluster: dict, plan: dict, target: str, time_limit_s: float) -> Outcome:
    """planner.export's ExportResult for `target`: the plan's files, or those of the plan the target's
    engine runs best here (its search, up to `time_limit_s` CPU seconds), or the refusal. Cached."""
    plan = without_output_keys(plan)
    try:
        return _export(json.dumps(cluster, sort_keys=True), json.dumps(plan, sort_keys=True), target, time_limit_s)
    except OverBudget as e:
        return over_budget(e)
    except Exception as e:  # noqa: BLE001 - an exporter bug must not take the page down
        logging.getLogger("hetplan.app").exception("planner.export failed for %s", target)
        return Outcome(error=f"the exporter stopped with an internal error ({type(e).__name__}: {e}); "
                             "this is a bug in hetplan, please report it", kind="internal")


@dataclass(frozen=True)
class Simulated:
    """One iteration as the schedule simulator ran it: every pass and transfer, and its phases."""
    events: Any                  # DataFrame: stage, replica, micro_batch, chunk, kind, start, end
    phases: Any                  # DataFrame of ui.phases.phases
    pipeline_time_s: float
    iteration_time_s: float
    gpipe: bool


@st.cache_data(show_spinner=False, max_entries=16)
def _simulate(cluster_json: str, plan_json: str) -> Outcome:
    return bounded(_simulate_work, cluster_json, plan_json)


def _simulate_work(cluster_json: str, plan_json: str) -> Outcome:
    try:
        cluster = cluster_from_dict(json.loads(cluster_json), catalog(), source="cluster")
        plan = plan_from_dict(json.loads(plan_json), catalog(), source="plan")
        check_plan_against_cluster(plan, cluster)
        est = evaluate(cluster, plan, timeline=True)
    except InputError as e:
        return Outcome(error=str(e), kind="input")
    events = est.timeline
    if events is None or len(events) == 0:
        return Outcome(error="the schedule simulator returned no timeline for this plan", kind="none")
    gpipe = plan.schedule.value == "gpipe"
    return Outcome(result=Simulated(events, phases.phases(events, gpipe), est.pipeline_time_s,
                                    est.iteration_time_s, gpipe))


def simulate_plan(cluster: dict, plan: dict) -> Outcome:
    """The simulated iteration (`Simulated`) of a plan file on a cluster file; kept apart from
    `evaluate_plan`, whose metrics need no timeline (at thousands of micro-batches on many
    workers the timeline takes seconds to simulate, the metrics a fraction of that)."""
    plan = without_output_keys(plan)
    try:
        return _simulate(json.dumps(cluster, sort_keys=True), json.dumps(plan, sort_keys=True))
    except OverBudget as e:
        return over_budget(e)


def evaluate_plan(cluster: dict, plan: dict, tokens: float | None) -> Outcome:
    """(Plan, Estimate) of a plan file on a cluster file, or the reason it cannot be evaluated."""
    plan = without_output_keys(plan)
    try:
        return _evaluate(json.dumps(cluster, sort_keys=True), json.dumps(plan, sort_keys=True), tokens)
    except OverBudget as e:
        return over_budget(e)


def estimate_of(state: AppState) -> Outcome:
    if state.plan is None:
        return Outcome(error="no plan yet", kind="none")
    return evaluate_plan(state.cluster, state.plan, state.tokens_to_train)


# Objectives a re-plan ranks by (planner.replan takes no deadline: a deadline job is re-planned for throughput).
REPLAN_OBJECTIVES = {"throughput": Objective.THROUGHPUT, "cost": Objective.COST, "deadline": Objective.THROUGHPUT,
                     "energy": Objective.ENERGY}


@st.cache_data(show_spinner=False, max_entries=32)
def _replan(cluster_json: str, plan_json: str, tokens: float | None, old_cluster_json: str | None,
            objective: str, time_limit_s: float) -> Outcome:
    return bounded(_replan_work, cluster_json, plan_json, tokens, old_cluster_json, objective, time_limit_s)


def _replan_work(cluster_json: str, plan_json: str, tokens: float | None, old_cluster_json: str | None,
                 objective: str, time_limit_s: float) -> Outcome:
    try:
        _, options_type = search_api()
        from planner.replan import replan
        cluster = cluster_from_dict(json.loads(cluster_json), catalog(), source="cluster")
        old = (None if old_cluster_json is None else
               cluster_from_dict(json.loads(old_cluster_json), catalog(), source="the cluster the plan was made on"))
        plan = plan_from_dict(json.loads(plan_json), catalog(), source="plan")
        return Outcome(result=replan(cluster, plan, tokens, old, REPLAN_OBJECTIVES[objective],
                                     search_options(options_type, time_limit_s)))
    except PlannerUnavailable as e:
        return Outcome(error=str(e), kind="unavailable")
    except InputError as e:
        return Outcome(error=str(e), kind="infeasible" if type(e).__name__ == "InfeasibleError" else "input")


def replan_on(cluster: dict, plan: dict, tokens: float | None, old_cluster: dict | None, objective: str,
              time_limit_s: float) -> Outcome:
    """planner.replan's answer (`Replan`) for the plan file `plan` moved to `cluster` (cluster files), or
    the readable reason there is none. Cached; a crash inside the planner is a message, not cached."""
    try:
        return _replan(json.dumps(cluster, sort_keys=True), json.dumps(without_output_keys(plan), sort_keys=True),
                       tokens, None if old_cluster is None else json.dumps(old_cluster, sort_keys=True),
                       objective, time_limit_s)
    except OverBudget as e:
        return over_budget(e)
    except Exception as e:  # noqa: BLE001 - a planner bug must not take the page down
        logging.getLogger("hetplan.app").exception("planner.replan failed")
        return Outcome(error=PLANNER_FAILED.format(error=f"{type(e).__name__}: {e}"), kind="internal")


@st.cache_resource(show_spinner=False, max_entries=4)
def _fleet_searches(cluster_json: str, search_time_limit_s: float, code: int) -> dict:
    """The candidates' searches of one cluster and limit (planner.fleet's `cache`), shared by every
    policy and jobs table on it: switching the policy costs only the solve. `code`: the identity of
    the planner's types, so that a server whose code is reloaded does not hand out plans of the old
    classes (which the result cache could then not store)."""
    return {}


@st.cache_data(show_spinner=False, max_entries=16)
def _fleet(cluster_json: str, jobs_json: str, policy: str, search_time_limit_s: float) -> Outcome:
    searches = _fleet_searches(cluster_json, search_time_limit_s, id(Plan))
    outcome, found = bounded(_fleet_work, cluster_json, jobs_json, policy, search_time_limit_s, dict(searches))
    searches.update(found)          # the worker's searches, for the next policy on this cluster
    return outcome


def _fleet_work(cluster_json: str, jobs_json: str, policy: str, search_time_limit_s: float,
                searches: dict) -> tuple[Outcome, dict]:
    try:
        search_api()
        from planner.fleet import FleetOptions, plan_fleet
        cluster = cluster_from_dict(json.loads(cluster_json), catalog(), source="cluster")
        jobs = fleet_jobs_from_dict(json.loads(jobs_json), catalog(), source="jobs table")
        return Outcome(result=plan_fleet(cluster, jobs, policy, FleetOptions(search_time_limit_s=search_time_limit_s),
                                         cache=searches)), searches
    except PlannerUnavailable as e:
        return Outcome(error=str(e), kind="unavailable"), searches
    except InputError as e:
        return Outcome(error=str(e), kind="input"), searches


def fleet_on(cluster: dict, jobs: dict, policy: str, search_time_limit_s: float) -> Outcome:
    """planner.fleet's allocation (`FleetResult`) of `cluster` (cluster file) among `jobs` (jobs file
    format), or the readable reason there is none. Cached; a crash inside the planner is a message, not cached."""
    try:
        return _fleet(json.dumps(cluster, sort_keys=True), json.dumps(jobs, sort_keys=True), policy,
                      search_time_limit_s)
    except OverBudget as e:
        return over_budget(e)
    except Exception as e:  # noqa: BLE001 - a planner bug must not take the page down
        logging.getLogger("hetplan.app").exception("planner.fleet failed")
        return Outcome(error=PLANNER_FAILED.format(error=f"{type(e).__name__}: {e}"), kind="internal")
