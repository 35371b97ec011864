"""Compare: plans side by side."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import charts, frames, session
from ui.markup import md
from ui.planning import build_cluster
from ui.results import find, named_plans
from ui.views.common import caption, cheaper_front, current_plan, grouped


def render() -> None:
    st.title("Compare")
    outcome = session.search_outcome()
    if outcome is None or outcome.error:
        stale = " The inputs changed since the last run." if session.search_is_stale() else ""
        st.info(f"Run the planner (**Plan** in the sidebar) first: this page compares the plans it found with "
                f"the baselines.{stale}", icon=":material/explore:")
        return
    cur = current_plan() if session.get().plan is not None else None
    if cur is not None:
        on_view = find(named_plans(outcome.result), session.get().plan)
        cheaper_front(outcome.result, cur, f"{on_view.name}, the plan on view" if on_view else "the plan on view")
    named = named_plans(outcome.result)
    labels = [n.name for n in named]
    default = [labels[0]] + [l for l in labels if l.endswith("baseline")][:1]
    chosen = st.multiselect("plans to compare", labels, default=default, key="compare_choice")
    picked = [n for n in named if n.name in chosen]
    if len(picked) < 2:
        st.info("Pick two or more plans.")
        return
    rows = [frames.metrics_row(n.name, n.role, n.scored.plan, n.scored.estimate) for n in picked]
    table = frames.metrics_table(rows)
    st.dataframe(table, hide_index=True, width="stretch", column_config=grouped(table))
    st.plotly_chart(charts.compare_bars(pd.DataFrame(rows)), width="stretch")
    caption("Throughput (higher is better) and dollars per million tokens (lower is better) of each plan "
            "on the same cluster and job.")
    terms = pd.concat([frames.breakdown(n.scored.estimate).assign(plan=n.name) for n in picked])
    st.plotly_chart(charts.compare_breakdown(terms), width="stretch")
    caption("Where each plan's iteration goes on its busiest worker: computation and the overheads it cannot "
            "hide. A taller bar is a slower iteration; the coloured parts say why.")
    cols = st.columns(len(picked))
    for col, n in zip(cols, picked):
        with col:
            st.markdown(f"**{md(n.name)}**: {md(frames.plan_shape(n.scored.plan))}")
            groups = frames.replica_groups(n.scored.plan, _cluster())
            shown = groups[["stage", "layer_range", "layers", "pool", "tp", "replicas", "samples"]]
            st.dataframe(shown, hide_index=True, width="stretch", column_config=grouped(shown, {
                             "layer_range": st.column_config.TextColumn("layer range"),
                             "tp": st.column_config.NumberColumn("tensor-parallel"),
                             "samples": st.column_config.NumberColumn("samples each")}))


def _cluster():
    return build_cluster(session.get())
