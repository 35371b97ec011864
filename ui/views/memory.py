"""Memory: what each GPU holds against its capacity."""
from __future__ import annotations

import streamlit as st

from ui import charts, frames
from ui.views.common import caption, current_plan


def render() -> None:
    st.title("Memory")
    cur = current_plan()
    if cur is None:
        return
    table = frames.memory(cur.estimate)
    if not cur.estimate.fits:
        st.error(f"**Out of memory:** {cur.estimate.oom}", icon=":material/warning:")
    groups = frames.memory_groups(table)
    st.plotly_chart(charts.memory(groups), width="stretch")
    caption("One bar per stage and pool (×n: n identical replicas, the fullest shown): the peak memory of one GPU, split into weights, gradients, "
            "optimizer states, stored activations and framework overhead. The black tick is that GPU's "
            "capacity; a bar above its tick does not fit.")
    st.dataframe(groups.round(2), hide_index=True, width="stretch")
