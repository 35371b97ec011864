"""The state of one browser session: the `AppState`, the planner's last answer, and the URL.

Widgets own keys starting with "w."; when the state is replaced (preset, upload, link) those
keys are dropped so every widget starts again from the new state.

The state, not a widget, holds each value. Streamlit drops a widget's state when a run leaves the
widget out, and the browser drops its own when a quick rerun interrupts a page navigation
(streamlit#7338, #9100); the browser then shows the widget at its `value=`/`index=` and sends that
back. So each widget is drawn with `value=`/`index=` from the state, and changes the state only in
its `on_change` callback (`edits_state`), never by having its return value copied in every run: a
widget drawn with only a key came back at its own default (min_value, "", the first option).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import streamlit as st

from ui import state as url_state
from ui.planning import Outcome
from ui.state import AppState

STATE_KEY = "app_state"
RESULT_KEY = "search_outcome"      # (job_key, Outcome)
WIDGET_PREFIX = "w."


def get() -> AppState:
    if STATE_KEY not in st.session_state:
        state, warnings = url_state.decode(st.query_params.to_dict())
        st.session_state[STATE_KEY] = state
        st.session_state["url_warnings"] = warnings
    return st.session_state[STATE_KEY]


def put(state: AppState) -> None:
    st.session_state[STATE_KEY] = state


def update(**changes) -> AppState:
    state = replace(get(), **changes)
    put(state)
    return state


def replace_all(state: AppState) -> None:
    """A new state from outside the widgets (preset, upload): widgets restart from it. Those drawn
    with `fresh_key` get new keys too: the browser keeps a widget's last value by its key and would
    send the old cluster's name back on the next rerun, as if the user had typed it."""
    put(state)
    for key in [k for k in st.session_state if str(k).startswith(WIDGET_PREFIX)]:
        del st.session_state[key]
    st.session_state[GENERATION_KEY] = st.session_state.get(GENERATION_KEY, 0) + 1


GENERATION_KEY = "state_generation"


def fresh_key(name: str) -> str:
    """A widget key that changes whenever `replace_all` replaces the state (WIDGET_PREFIX + name at first)."""
    generation = st.session_state.get(GENERATION_KEY, 0)
    return WIDGET_PREFIX + name + (f"#{generation}" if generation else "")


def edits_state(key: str, changes: Callable[[Any], dict]) -> dict:
    """`key=` and `on_change=` for a widget drawn from the state: when the user changes it, the
    state takes `changes(new value)` (AppState fields) before the page runs."""
    def changed() -> None:
        update(**changes(st.session_state[key]))
    return {"key": key, "on_change": changed}


def url_warnings() -> list[str]:
    return st.session_state.pop("url_warnings", [])


def sync_url() -> None:
    """Write the state into the address bar (only when it changed, to keep history clean)."""
    params, left_out = url_state.encode_for_link(get())
    st.session_state["url_too_long"] = left_out
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def search_outcome() -> Outcome | None:
    """The planner's answer for the current inputs, if it was asked."""
    saved = st.session_state.get(RESULT_KEY)
    if saved and saved[0] == get().job_key():
        return saved[1]
    return None


def search_is_stale() -> bool:
    """The planner was asked, but for inputs that have changed since."""
    saved = st.session_state.get(RESULT_KEY)
    return bool(saved) and saved[0] != get().job_key()


def save_search_outcome(outcome: Outcome) -> None:
    st.session_state[RESULT_KEY] = (get().job_key(), outcome)
