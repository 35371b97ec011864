"""Timeline: one simulated iteration."""
from __future__ import annotations

import streamlit as st

from ui import charts
from ui.views.common import caption, current_plan

MAX_WORKERS_DRAWN = 64


def render() -> None:
    st.title("Timeline")
    cur = current_plan()
    if cur is None:
        return
    events = cur.estimate.timeline
    if events is None or len(events) == 0:
        st.info("The schedule simulator returned no timeline for this plan.")
        return
    workers = events[["stage", "replica"]].drop_duplicates()
    if len(workers) > MAX_WORKERS_DRAWN:
        keep = workers.groupby("stage").head(max(1, MAX_WORKERS_DRAWN // events["stage"].nunique()))
        events = events.merge(keep, on=["stage", "replica"])
        st.caption(f"Showing {len(keep)} of {len(workers)} workers (the first replicas of each stage).")
    st.plotly_chart(charts.timeline(events), width="stretch")
    caption(f"Time runs left to right over one iteration ({cur.estimate.pipeline_time_s * 1e3:,.0f} ms of pipeline, "
            f"{cur.estimate.iteration_time_s * 1e3:,.0f} ms with gradient sync and optimizer step). Each row is "
            "one replica of a stage; blue bars are forward passes, amber bars backward passes and green bars "
            "activation transfers. White gaps are pipeline bubbles: the worker waits for its neighbours.")
