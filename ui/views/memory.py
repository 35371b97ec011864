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
        st.error(f"**Out of memory:** {cur.estimate.oom}", icon="⚠️")
    st.plotly_chart(charts.memory(table), width="stretch")
    caption("One bar per stage replica: the peak memory of one of its GPUs, split into weights, gradients, "
            "optimizer states, stored activations and framework overhead. The black tick is that GPU's "
            "capacity; a bar above its tick does not fit.")
    st.dataframe(table.round(2), hide_index=True, width="stretch")
