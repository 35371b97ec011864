"""Memory: what each GPU holds against its capacity."""
from __future__ import annotations

import streamlit as st

from ui import charts, frames
from ui.markup import md
from ui.views.common import caption, current_plan


def render() -> None:
    st.title("Memory")
    cur = current_plan()
    if cur is None:
        return
    table = frames.memory(cur.estimate)
    if not cur.estimate.fits:
        st.error(f"**Out of memory:** {md(cur.estimate.oom)}", icon=":material/warning:")
    groups = frames.memory_groups(table)
    st.plotly_chart(charts.memory(groups), width="stretch")
    caption("One bar per stage and pool (×n: n identical replicas, the fullest shown): the peak memory of one GPU, split into weights, gradients, "
            "optimizer states, stored activations and framework overhead. The black tick is that GPU's "
            "capacity; a bar above its tick does not fit.")
    gib = {c: st.column_config.NumberColumn(f"{c} GiB", format="%.2f")
           for c in ("weights", "gradients", "optimizer", "activations", "overhead", "total", "capacity")}
    st.dataframe(groups, hide_index=True, width="stretch", column_config={
        **gib, "gpu_type": st.column_config.TextColumn("GPU type"),
        "tp": st.column_config.NumberColumn("tensor-parallel"),
        "replicas": st.column_config.NumberColumn("replicas", help="identical replicas; the fullest is shown")})
