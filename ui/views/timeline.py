"""Timeline: one simulated iteration, in phases or pass by pass in a window of micro-batches."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import charts, phases, session
from ui.numbers import percent
from ui.planning import simulate_plan
from ui.views.common import caption, current_plan, grouped, show_error

ROWS_BY_DEFAULT = 24
PHASES, EVERY_PASS, WINDOW = "whole iteration in phases", "whole iteration, every pass", "a window of micro-batches"
WINDOW_KEY = "timeline_window"


def drawn_workers(events: pd.DataFrame, key: str = "timeline_rows") -> pd.DataFrame:
    """The workers to draw: all, or (above ROWS_BY_DEFAULT rows) the first replicas of each
    stage, as many as the user asks for."""
    workers = events[["stage", "replica"]].drop_duplicates()
    most = int(workers.groupby("stage").size().max())
    if len(workers) <= ROWS_BY_DEFAULT or most == 1:       # one replica a stage: nothing to choose
        return workers
    default = min(most, max(1, ROWS_BY_DEFAULT // events["stage"].nunique()))
    per_stage = st.slider("replicas drawn per stage", 1, most, default, key=key)
    keep = phases.workers_to_draw(events, per_stage)
    st.caption(f"Drawing {len(keep):,} of {len(workers):,} workers: the first {per_stage} "
               f"replica{'s' if per_stage != 1 else ''} of each stage.")
    return keep


def _only(frame: pd.DataFrame, workers: pd.DataFrame) -> pd.DataFrame:
    return frame.merge(workers, on=["stage", "replica"])


def _span_of(shares: pd.Series) -> str:
    """"5.1%" when every worker waits the same share, else "3.2% to 5.1%"."""
    lo, hi = percent(shares.min(), 1), percent(shares.max(), 1)
    return lo if lo == hi else f"{lo} to {hi}"


def _facts(sim, summary: pd.DataFrame, total: int) -> str:
    unit, scale = charts.time_unit(sim.pipeline_time_s)
    idle = summary["idle_s"] / sim.pipeline_time_s if sim.pipeline_time_s > 0 else summary["idle_s"] * 0
    own = summary["forwards"]
    each = f"{own.min():,}" if own.min() == own.max() else f"{own.min():,} to {own.max():,}"
    return (f"**{total:,} micro-batch{'es' if total != 1 else ''}** in the iteration, {each} through each of the "
            f"{len(summary):,} worker{'s' if len(summary) != 1 else ''} drawn; "
            f"{charts.figure(sim.pipeline_time_s * scale)} {unit} of pipeline "
            f"({charts.figure(sim.iteration_time_s * scale)} {unit} with gradient sync and optimizer step). "
            f"Pipeline bubbles: the workers drawn wait {_span_of(idle)} of the pipeline time.")


def _set_window(first: int, last: int, kinds: tuple[str, ...], key: str) -> None:
    st.session_state[key] = (first, last)
    st.session_state[f"{key}.kinds"] = kinds


def _window_controls(table: pd.DataFrame, total: int, gpipe: bool) -> tuple[int, int, tuple[str, ...]]:
    """Jump buttons (one per phase) and the micro-batch range; the range, and the kinds of pass whose span it follows."""
    key = f"{WINDOW_KEY}.{total}"
    suggested = phases.suggested_windows(table, total, gpipe)
    first_window = next(iter(suggested.values()))
    if key not in st.session_state:
        _set_window(*first_window, key)
    cols = st.columns(len(suggested) + 1, vertical_alignment="bottom")
    cols[0].markdown("**Jump to**")
    for col, (name, (first, last, kinds)) in zip(cols[1:], suggested.items()):
        col.button(f"{name}: {first:,}–{last:,}", on_click=_set_window, args=(first, last, kinds, key),
                   key=f"{key}.jump.{name}", width="stretch", help=f"follow micro-batches {first:,} to {last:,}")
    first, last = st.slider("micro-batches to follow", 0, total - 1, key=key,
                            help="their passes are drawn in full colour from the first starting to the last ending, "
                                 "with whatever else runs meanwhile faded")
    kinds = st.session_state.get(f"{key}.kinds", phases.PASSES)
    if gpipe:
        follow = st.radio("span of their", ["forward passes", "backward passes"], horizontal=True,
                          index=0 if kinds == ("forward",) else 1, key=f"{key}.follow",
                          help="GPipe runs every forward before any backward: a window follows one of the two")
        kinds = ("forward",) if follow == "forward passes" else ("backward",)
    return int(first), int(last), kinds


def _window(events: pd.DataFrame, table: pd.DataFrame, total: int, gpipe: bool, pipeline_s: float) -> None:
    first, last, kinds = _window_controls(table, total, gpipe)
    win = phases.window(events, first, last, kinds)
    unit, scale = charts.time_unit(pipeline_s)
    if win.cut:
        st.info(f"The span of micro-batches {first:,}–{last:,} holds {win.passes_in_span:,} passes on the workers "
                f"drawn; the first {phases.MAX_DETAIL_PASSES:,} are drawn, up to "
                f"{charts.figure(win.end_s * scale)} {unit}. Follow fewer micro-batches to see the rest.",
                icon=":material/zoom_in:")
    st.plotly_chart(charts.timeline(win.events, (win.start_s, win.end_s), f"Micro-batches {first:,}–{last:,} pass by pass",
                                    unit_for_s=pipeline_s), width="stretch")
    caption(f"From {charts.figure(win.start_s * scale)} to {charts.figure(win.end_s * scale)} {unit} of the "
            "iteration. Each row is one replica of a stage; full-colour bars are the passes of the micro-batches "
            "followed (blue forward, amber backward, green activation transfers), faded bars those of other "
            "micro-batches that run meanwhile. White gaps are pipeline bubbles: the worker waits for its "
            "neighbours.")


def render() -> None:
    st.title("Timeline")
    cur = current_plan()
    if cur is None:
        return
    state = session.get()
    outcome = simulate_plan(state.cluster, state.plan)
    if outcome.error:
        (st.info if outcome.kind == "none" else show_error)(outcome.error)
        return
    sim = outcome.result
    workers = drawn_workers(sim.events)
    events, table = _only(sim.events, workers), _only(sim.phases, workers)
    total = phases.micro_batch_count(sim.events)
    st.markdown(_facts(sim, phases.worker_summary(table, sim.pipeline_time_s), total))
    passes = int(table["passes"].sum())
    views = ([EVERY_PASS] if passes <= phases.MAX_DETAIL_PASSES else []) + [PHASES] + ([WINDOW] if total > 1 else [])
    view = st.radio("view", views, horizontal=True, key=f"timeline_view.{len(views)}",
                    help=f"every pass is drawn up to {phases.MAX_DETAIL_PASSES:,} passes; above that the whole "
                         "iteration is drawn in phases, and a window of micro-batches pass by pass")
    if view == EVERY_PASS:
        st.plotly_chart(charts.timeline(events), width="stretch")
        caption("Time runs left to right over one iteration. Each row is one replica of a stage; blue bars are "
                "forward passes, amber bars backward passes and green bars activation transfers. White gaps are "
                "pipeline bubbles: the worker waits for its neighbours.")
    elif view == PHASES:
        st.plotly_chart(charts.timeline_phases(table, sim.pipeline_time_s), width="stretch")
        caption(_PHASES_CAPTION[sim.gpipe])
    else:
        _window(events, table, total, sim.gpipe, sim.pipeline_time_s)
    with st.expander("Phases as a table"):
        phases_table = _phase_table(table, sim.pipeline_time_s)
        st.dataframe(phases_table, hide_index=True, width="stretch", column_config=grouped(phases_table))


_PHASES_CAPTION = {
    False: "Each row is one replica of a stage; what repeats is drawn once. Its passes form up to three blocks: "
           "warm-up (forwards only, blue), steady state (one forward, one backward in turn, striped violet) and "
           "cool-down (backwards only, amber), each labelled with its forward (F) and backward (B) passes; hover "
           "for its micro-batches, how busy the worker is in it and the transfers it receives. White before, "
           "between and after the blocks is pipeline bubble. At many micro-batches the warm-up and cool-down are "
           "slivers beside the steady state: pick 'a window of micro-batches' to see them pass by pass.",
    True: "Each row is one replica of a stage; what repeats is drawn once. GPipe runs all forwards (blue), then "
          "all backwards (amber), each block labelled with its passes; hover for its micro-batches, how busy the "
          "worker is in it and the transfers it receives. White before, between and after the blocks is pipeline "
          "bubble. Pick 'a window of micro-batches' to see passes one by one.",
}


def _phase_table(table: pd.DataFrame, pipeline_s: float) -> pd.DataFrame:
    unit, scale = charts.time_unit(pipeline_s)
    return pd.DataFrame({
        "stage": table["stage"], "replica": table["replica"], "phase": table["phase"],
        "forwards": table["forwards"], "backwards": table["backwards"],
        "micro-batches": table["first_micro_batch"].astype(str) + "–" + table["last_micro_batch"].astype(str),
        f"from ({unit})": (table["start"] * scale).map(charts.figure),
        f"to ({unit})": (table["end"] * scale).map(charts.figure),
        "busy": (table["busy_s"] / (table["end"] - table["start"]).where(lambda s: s > 0)).map(
            lambda v: "-" if pd.isna(v) else percent(v)),
        "transfers in": table["transfers"],
    })
