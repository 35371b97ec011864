"""Memory: what each GPU holds against its capacity."""
from __future__ import annotations

import streamlit as st

from ui import charts, frames
from planner.types import GIB
from ui.markup import md
from ui.numbers import gib
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
    gib = {c: st.column_config.NumberColumn(f"{c} GiB", format="%.1f")
           for c in ("weights", "gradients", "optimizer", "activations", "overhead", "total", "capacity")}
    if "cpu_offloaded" in groups:
        _offloaded(groups, cur.plan.offload.value)
    st.dataframe(groups, hide_index=True, width="stretch", column_config={
        **gib, "gpu_type": st.column_config.TextColumn("GPU type"),
        "cpu_offloaded": st.column_config.NumberColumn(
            "offloaded to CPU GiB", format="%.1f", help="model states this GPU keeps in its node's CPU memory"),
        "cpu_capacity": st.column_config.NumberColumn(
            "CPU memory share GiB", format="%.0f",
            help="this GPU's share of its node's CPU memory (host_memory_gib in the cluster file; empty: not set)"),
        "tp": st.column_config.NumberColumn("tensor-parallel"),
        "replicas": st.column_config.NumberColumn("replicas", help="identical replicas; the fullest is shown")})


def _offloaded(groups, offload: str) -> None:
    """The states offloaded to CPU memory: the bars above leave them out, so say how much they are."""
    most = groups.loc[groups["cpu_offloaded"].idxmax()]
    st.info(f"**Offload {md(offload)}:** each GPU also keeps model states in its node's CPU memory, not in the "
            f"bars above: up to {gib(most['cpu_offloaded'] * GIB)} a GPU ({md(most['pool'])}), the column "
            "“offloaded to CPU” below.", icon=":material/memory:")
