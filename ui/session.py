"""The state of one browser session: the `AppState`, the planner's last answer, and the URL.

Widgets own keys starting with "w."; when the state is replaced (preset, upload, link) those
keys are dropped so every widget starts again from the new state.
"""
from __future__ import annotations

from dataclasses import replace

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
    """A new state from outside the widgets (preset, upload): widgets restart from it."""
    put(state)
    for key in [k for k in st.session_state if str(k).startswith(WIDGET_PREFIX)]:
        del st.session_state[key]


def init_widget(key: str, value) -> str:
    """Give a widget its starting value from the state once; returns the key."""
    if key not in st.session_state:
        st.session_state[key] = value
    return key


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
