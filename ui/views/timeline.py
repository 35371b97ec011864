"""Timeline: one simulated iteration."""
from __future__ import annotations

import streamlit as st

from ui import charts
from ui.views.common import caption, current_plan

ROWS_BY_DEFAULT = 24


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
    most = int(workers.groupby("stage").size().max())
    if len(workers) > ROWS_BY_DEFAULT and most > 1:       # one replica a stage: nothing to choose
        default = min(most, max(1, ROWS_BY_DEFAULT // events["stage"].nunique()))
        per_stage = st.slider("replicas drawn per stage", 1, most, default, key="timeline_rows")
        keep = workers.groupby("stage").head(per_stage)
        events = events.merge(keep, on=["stage", "replica"])
        st.caption(f"Drawing {len(keep)} of {len(workers)} workers: the first {per_stage} replica(s) of each stage.")
    st.plotly_chart(charts.timeline(events), width="stretch")
    caption(f"Time runs left to right over one iteration ({cur.estimate.pipeline_time_s * 1e3:,.0f} ms of pipeline, "
            f"{cur.estimate.iteration_time_s * 1e3:,.0f} ms with gradient sync and optimizer step). Each row is "
            "one replica of a stage; blue bars are forward passes, amber bars backward passes and green bars "
            "activation transfers. White gaps are pipeline bubbles: the worker waits for its neighbours.")
