"""What several pages share: the current plan and its estimate, and readable errors."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from planner.types import Cluster, Estimate, InputError, Plan
from ui import session
from ui.markup import md
from ui.planning import build_cluster, estimate_of
from ui.results import cheaper_front_plans

HINTS = {
    "infeasible": "Try more or larger-memory GPUs, a smaller global batch or sequence length, or a smaller model.",
    "input": "Fix the value named above on the Compose page (or in the uploaded file) and try again.",
}
# A plan on view that no longer fits (a pool edited on Compose after planning): the fix is a new plan, not an input.
DOES_NOT_FIT_HINT = ("Press **Plan** in the sidebar for a plan on the cluster as composed now, or open **Re-plan** "
                     "to see what moves and what the switch costs.")


def grouped(df: pd.DataFrame, config: dict | None = None) -> dict:
    """st.dataframe's column_config with every whole-number column grouped by thousands ("1,024"), as
    ui.numbers writes numbers in text; `config`'s own entries kept (a number column given without a format
    gets the grouping too)."""
    out = {c: st.column_config.NumberColumn(format="%,d") for c in df.columns
           if pd.api.types.is_integer_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])}
    for name, entry in (config or {}).items():
        number = isinstance(entry, dict) and entry.get("type_config", {}).get("type") == "number"
        if number and name in out and not entry["type_config"].get("format"):
            entry = {**entry, "type_config": {**entry["type_config"], "format": "%,d"}}
        out[name] = entry
    return out


def titled(title: str, message: str) -> str:
    """`message` under a bold title, the title said once: a message that starts with it ("no plan
    fits in memory: x needs ...") gives its own head as the title ("**No plan fits in memory.** x needs ...")."""
    if message.lower().startswith(title.lower()):
        head, _, rest = message.partition(":")
        if rest.strip():
            return f"**{md(head[:1].upper() + head[1:])}.** {md(rest.strip())}"
        return f"**{md(message[:1].upper() + message[1:])}**"
    return f"**{title}.** {md(message)}"


def show_error(message: str, kind: str = "input", hint: str | None = None) -> None:
    """An error box; `hint` (Markdown) replaces the kind's general advice."""
    title = {"infeasible": "No plan fits", "unavailable": "Planner not available",
             "internal": "Planning failed", "budget": "Over this session's budget"}.get(kind, "Cannot use this input")
    body = titled(title, message)
    if hint is None:
        hint = HINTS.get(kind)
        if kind == "infeasible" and " within " in message:      # a missed deadline names its own fixes
            hint = "Or set the objective to throughput to see the fastest plan and how long it takes."
    if hint and hint.lower() not in message.lower():
        body += f"\n\n{hint}"
    (st.info if kind == "unavailable" else st.error)(body, icon=":material/info:" if kind == "unavailable" else ":material/warning:")


def outcome_on_button(key: str, inputs: str, compute, *, label: str, button_key: str, spinner: str, waiting: str,
                      primary: bool = False, message=lambda text: text, input_hint: str | None = None):
    """The result of `compute()` (an Outcome) kept in session state under `key` for `inputs` (a key of
    the page's inputs), computed again when the button is pressed; None after showing why there is none:
    `waiting` (a caption) while nothing is computed for these inputs, or the error (`message` of its text;
    `input_hint` for a bad input)."""
    if st.button(label, type="primary" if primary else "secondary", key=button_key):
        with st.spinner(spinner):
            st.session_state[key] = (inputs, compute())
    saved = st.session_state.get(key)
    if not saved or saved[0] != inputs:
        st.caption(waiting)
        return None
    outcome = saved[1]
    if outcome.error:
        show_error(message(outcome.error), outcome.kind, hint=input_hint if outcome.kind == "input" else None)
        return None
    return outcome.result


@dataclass(frozen=True)
class Current:
    cluster: Cluster
    plan: Plan
    estimate: Estimate


def current_plan() -> Current | None:
    """The plan on view and its estimate, or None after telling the user what to do."""
    state = session.get()
    try:
        cluster = build_cluster(state)
    except InputError as e:
        show_error(str(e))
        return None
    if state.plan is None:
        st.info("No plan yet. Press **Plan** in the sidebar to let the planner choose one, "
                "or upload a plan on the **What-if** page.", icon=":material/explore:")
        return None
    outcome = estimate_of(state)
    if outcome.error and outcome.kind != "input":       # over the budget: said as such, not as a misfit
        show_error(outcome.error, outcome.kind)
        return None
    if outcome.error:
        show_error(f"The plan on view does not fit this cluster: {outcome.error}", hint=DOES_NOT_FIT_HINT)
        return None
    plan, est = outcome.result
    return Current(cluster, plan, est)


def caption(text: str) -> None:
    st.caption(f"**How to read it.** {text}")


def cheaper_front(result, cur: Current, than: str = "the plan on view") -> None:
    """One line per plan of the throughput/cost front that is cheaper per token than the plan on view."""
    lines = cheaper_front_plans(result, session.get().plan, cur.estimate, cur.cluster)
    if not lines:
        return
    st.markdown(f"**Cheaper plans on the Pareto front** (than {than}):\n"
                + "\n".join(f"- **{md(name)}**: {md(text)}" for name, text in lines))
