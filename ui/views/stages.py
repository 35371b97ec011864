"""Stages: where each pipeline stage runs, and what it holds."""
from __future__ import annotations

import streamlit as st

from ui import charts, frames
from ui.views.common import caption, current_plan, grouped


def render() -> None:
    st.title("Stage assignment")
    cur = current_plan()
    if cur is None:
        return
    st.plotly_chart(charts.cluster_grid(frames.collapse_nodes(frames.gpu_grid(cur.cluster, cur.plan))), width="stretch")
    caption("Each row is a node and each square a GPU, coloured by the pipeline stage it runs; grey GPUs are "
            "idle. Replicas alternate between full and light shades, so a replica (its tensor-parallel group, "
            "times the context-parallel degree where the sequence is split) reads as a run of equally shaded "
            "squares.")
    table = frames.replica_groups(cur.plan, cur.cluster)
    if cur.plan.context_parallel == 1:
        table = table.drop(columns="cp")
    if cur.plan.expert_parallel == 1:
        table = table.drop(columns="ep")
    else:
        ep = cur.plan.expert_parallel
        caption(f"Expert-parallel {ep}: each stage's routed experts are sharded over groups of {ep} of its "
                f"replicas (each holds {cur.plan.model.experts // ep} of {cur.plan.model.experts} experts), so "
                f"every stage has a multiple of {ep} replicas; no more GPUs.")
    st.plotly_chart(charts.pipeline(table, cur.plan.model.layers), width="stretch")
    caption("Each bar is a pipeline stage (or, where a stage spans pools, its replicas on one pool), spanning "
            "the layers it holds; the label gives the number of data-parallel replicas, their tensor-parallel "
            "degree (times the context-parallel degree, where the sequence is split over GPUs) and the samples "
            "each processes per iteration. Faster GPUs should take more layers or more "
            "samples.")
    shown = table.drop(columns=["layer_start", "layer_end"])
    shown["share"] = shown["share"] * 100        # in percent, whole, as ui.numbers.percent writes shares
    st.dataframe(shown, hide_index=True, width="stretch", column_config=grouped(shown, {
        "layer_range": st.column_config.TextColumn("layer range", help="first and last layer, both included, "
                                                                       "counted from 0"),
        "layers": st.column_config.NumberColumn("layers"),
        "gpu_type": st.column_config.TextColumn("GPU type"),
        "tp": st.column_config.NumberColumn("tensor-parallel", help="GPUs splitting each layer"),
        "cp": st.column_config.NumberColumn("context-parallel", help="GPUs splitting each sequence (the same "
                                                                     "for every replica of the plan)"),
        "ep": st.column_config.NumberColumn("expert-parallel", help="replicas a stage's experts are sharded over "
                                                                    "(the same for every stage of the plan)"),
        "gpus": st.column_config.NumberColumn("GPUs per replica", help="tensor-parallel × context-parallel"),
        "samples": st.column_config.NumberColumn("samples each", help="sequences each replica processes per "
                                                                       "iteration"),
        "replicas": st.column_config.NumberColumn("replicas", help="data-parallel copies of the stage here"),
        "share": st.column_config.ProgressColumn("share of the batch", format="%.0f%%", min_value=0, max_value=100,
                                                 help="of the stage's batch, done by these replicas; under 100% "
                                                      "where the stage spans pools")}))
