"""Engines: the best plan of each engine for the current job, against hetplan's runtime (every plan)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from catalog import without_output_keys
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import ENGINES
from planner.search.objective import estimate_key
from planner.types import InputError, Objective
from ui import charts, frames, session
from ui.engines import engines_table, pinned, search_proof, title
from ui.markup import md
from ui.numbers import count, per_million_tokens, whole
from ui.results import plan_dict
from ui.planning import baseline_time_limit_s, build_cluster, build_job, run_search
from ui.sidebar import request_plan
from ui.views.common import caption, grouped, show_error

ENGINES_KEY = "engine_outcomes"          # (job key for hetplan's runtime, {engine: Outcome})


def job_for_all(state) -> str:
    """What every engine's search depends on but the engine: the comparison's key."""
    return replace(state, engine=DEFAULT_ENGINE, plan=None).job_key()


def saved_outcomes() -> dict | None:
    saved = st.session_state.get(ENGINES_KEY)
    if saved and saved[0] == job_for_all(session.get()):
        return saved[1]
    return None


def most_cpu_s(time_limit_s: float) -> float:
    """The most CPU seconds one engine's search may take: its limit, then its two baselines'."""
    return time_limit_s + 2 * baseline_time_limit_s(time_limit_s)


def _search_all() -> None:
    state = session.get()
    outcomes = {}
    progress = st.progress(0.0, text="Searching…")
    for i, name in enumerate(ENGINES):
        progress.progress(i / len(ENGINES), text=f"Searching the plans {title(name)} runs ({i + 1} of {len(ENGINES)})")
        outcomes[name] = run_search(replace(state, engine=name, plan=None))
    progress.empty()
    st.session_state[ENGINES_KEY] = (job_for_all(state), outcomes)


def _adopt(name: str) -> None:
    """Button callback: engine `name` becomes the one planned for, its best plan the plan on view
    (the Plan page opens on its search, which is cached)."""
    session.update(engine=name)
    st.session_state.pop(session.WIDGET_PREFIX + "engine", None)     # Compose's picker follows the state
    request_plan()


def _best(outcomes: dict) -> str | None:
    state = session.get()
    scored = {n: o.result.plans[0].estimate for n, o in outcomes.items() if not o.error and o.result.plans}
    if not scored:
        return None
    return min(scored, key=lambda n: estimate_key(Objective(state.objective), scored[n], state.deadline_hours))


def _cards(outcomes: dict) -> None:
    """Each engine: its best plan in one line with a button to put it on view, or why it has none."""
    on_view = session.get().plan
    for name, outcome in outcomes.items():
        left, right = st.columns([5, 1], vertical_alignment="center")
        if outcome.error or not outcome.result.plans:
            left.markdown(f"**{pinned(name)}**: no plan. {md(outcome.error or 'The search returned none.')}")
            continue
        best = outcome.result.plans[0]
        est = best.estimate
        left.markdown(f"**{pinned(name)}**: {whole(est.tokens_per_s)} tokens/s, "
                      f"{per_million_tokens(est.cost_per_million_tokens_usd)} / M tokens on {count(est.num_gpus, 'GPU')} "
                      f"({md(search_proof(outcome.result))}). {md(frames.plan_shape(best.plan))}")
        shown = on_view is not None and session.get().engine == name and _same_plan(on_view, best.plan)
        right.button("On view" if shown else "Put on view", key=f"engines.adopt.{name}", disabled=shown,
                     width="stretch", on_click=_adopt, args=(name,),
                     help=f"plan for {title(name)}: its best plan becomes the plan on view (Plan page)")


def _same_plan(plan: dict, other) -> bool:
    """Whether the plan file `plan` is the plan `other` (the keys a plan file adds for people aside)."""
    return {k: v for k, v in without_output_keys(plan).items() if k not in ("name", "notes")} == plan_dict(other)


def _results(outcomes: dict, cluster) -> None:
    best = _best(outcomes)
    if best is not None:
        st.success(f"**Best by the objective ({md(session.get().objective)}): {md(title(best))}.**",
                   icon=":material/trophy:")
    table = engines_table(outcomes, cluster.num_gpus)
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config=grouped(table, {"plan": st.column_config.TextColumn(width="large")}))
    caption(f"Each engine's best plan for this job on this cluster, by the same cost model, predicted as that "
            f"engine runs it. The change is against {md(ENGINES[DEFAULT_ENGINE].title)}, which runs every plan "
            f"(the fully heterogeneous one): what choosing the engine costs you here. A search that stopped "
            f"early gives a figure that is not final (its gap).")
    rows = [frames.metrics_row(title(n), "engine", o.result.plans[0].plan, o.result.plans[0].estimate)
            for n, o in outcomes.items() if not o.error and o.result.plans]
    if len(rows) > 1:
        st.plotly_chart(charts.compare_bars(pd.DataFrame(rows)), width="stretch", key="engines.bars")
        caption("Throughput (higher is better) and dollars per million tokens (lower is better) of each engine's "
                "best plan.")
    st.subheader("Each engine's best plan")
    _cards(outcomes)


def render() -> None:
    st.title("Engines")
    state = session.get()
    st.write("What each training engine costs you on this cluster: the best plan of every engine for the job on "
             f"**Compose**, side by side with {md(ENGINES[DEFAULT_ENGINE].title)}'s, which runs every plan.")
    try:
        cluster, _ = build_cluster(state), build_job(state)
    except InputError as e:
        show_error(str(e))
        return
    n, each = len(ENGINES), most_cpu_s(state.time_limit_s)
    outcomes = saved_outcomes()
    pressed = outcomes is None and st.button("Search every engine", type="primary", key="engines.search",
                                             icon=":material/compare_arrows:")
    st.caption(f"One search per engine ({n}), each as the Plan page runs it: up to {each:g} CPU seconds (the "
               f"search limit on Compose, {state.time_limit_s:g}, then its two baselines), so at most about "
               f"{n * each:,.0f} CPU seconds in all, and more wall time on a busy machine. An engine already "
               f"searched for this job answers at once.")
    if pressed:
        _search_all()
        outcomes = saved_outcomes()
    if outcomes is None:
        if st.session_state.get(ENGINES_KEY):
            st.info("The job changed since the engines were searched: search them again for this one.",
                    icon=":material/update:")
        return
    _results(outcomes, cluster)
