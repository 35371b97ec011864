"""Cost: dollars against speed for the plans found and the baselines."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import charts, frames, session
from ui.results import find, named_plans, pareto_dicts
from ui.views.common import caption, current_plan


def plans_frame(result, current) -> pd.DataFrame:
    named = named_plans(result) if result is not None else []
    pareto = pareto_dicts(result) if result is not None else []
    on_view = find(named, session.get().plan)
    rows = []
    for n in named:
        front = n.plan_dict in pareto
        role = "pareto" if front and n.role != "baseline" else n.role
        rows.append({**frames.metrics_row(n.name, n.role, n.scored.plan, n.scored.estimate), "role": role,
                     "on_front": front, "on_view": on_view is not None and n.name == on_view.name})
    if current is not None and on_view is None:
        rows.append({**frames.metrics_row("on view", "current", current.plan, current.estimate), "role": "current",
                     "on_front": False, "on_view": True})
    return pd.DataFrame(rows)


def render() -> None:
    st.title("Cost")
    outcome = session.search_outcome()
    result = outcome.result if outcome is not None and not outcome.error else None
    if result is None:
        # one plan alone makes a chart of one point on meaningless axes: say what would fill it
        stale = " The inputs changed since the last run." if session.search_is_stale() else ""
        st.info(f"Run the planner (**Plan** in the sidebar) to place the plans it finds and the baselines by "
                f"speed and price.{stale} The plan on view's own figures are on the **Plan** page.",
                icon=":material/explore:")
        return
    cur = current_plan()
    df = plans_frame(result, cur)
    if df.empty:
        return
    st.plotly_chart(charts.cost_vs_throughput(df), width="stretch")
    caption("Each point is a plan: right is faster, lower is cheaper per token. Diamonds and the dotted line "
            "are the Pareto front (no other plan is both faster and cheaper); crosses are the baselines on the same cluster; the ringed point is the plan on view.")
    if df["train_days"].notna().any():
        st.plotly_chart(charts.time_vs_dollars(df), width="stretch")
        caption("The same plans for the whole run: days to train the chosen number of tokens against the total "
                "bill. Down and to the left is better.")
    else:
        st.caption("Set **tokens to train** on the Compose page to see time and dollars to train.")
