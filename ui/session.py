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

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from ui import state as url_state
from ui.planning import Outcome, stop_session_work
from ui.state import AppState

STATE_KEY = "app_state"
RESULT_KEY = "search_outcome"      # (job_key, Outcome)
WIDGET_PREFIX = "w."


SEARCHED_PARAM = "searched"          # a link's "searched=1": the sender had run the planner on its job
SEARCH_ON_OPEN = "search_on_open"


def get() -> AppState:
    if STATE_KEY not in st.session_state:
        params = st.query_params.to_dict()
        state, warnings = url_state.decode(params)
        st.session_state[STATE_KEY] = state
        st.session_state["url_warnings"] = warnings
        if params.get(SEARCHED_PARAM) == "1" and not warnings:
            st.session_state[SEARCH_ON_OPEN] = True     # the Plan page runs it: the same page as the sender's
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
    send the old cluster's name back on the next rerun, as if the user had typed it. The address bar
    takes it (`want_url`): one step of history for one deliberate change."""
    put(state)
    want_url()
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


URL_WANTED = "url_wanted"


def link_params() -> dict[str, str]:
    """The query parameters of a link to the state (as large as fits, `url_state.encode_for_link`), with
    `searched=1` where the planner has answered for its job: whoever opens the link sees the Plan page as the
    sender does, the alternatives, baselines and cheaper plans included (its search runs there, or is
    answered from the server's cache)."""
    params, left_out = url_state.encode_for_link(get())
    st.session_state["url_too_long"] = left_out
    outcome = search_outcome()
    if params and outcome is not None and not outcome.error:
        params[SEARCHED_PARAM] = "1"
    return params


def want_url() -> None:
    """Have the address bar take the state at the end of this run (`sync_url`)."""
    st.session_state[URL_WANTED] = True


def sync_url(now: bool = False) -> None:
    """Write the state into the address bar when asked to (`want_url`, or `now`): on Plan, and when a
    preset, upload or plan replaces the state; not on every edit. Streamlit writes query parameters with
    history.pushState (streamlit 1.67, frontend `handlePageInfoChanged`): one Back-button entry per edit
    otherwise, each a step back to an older job that a reload would then open. Writing before the search
    keeps a reload during it on the job being planned (a reload starts a new session, from the URL)."""
    params = link_params()
    if (now or st.session_state.pop(URL_WANTED, False)) and st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def url_holds_state() -> bool:
    """Whether the address bar opens the inputs as they are, the plan on view aside (else it opens the job
    as last planned or loaded)."""
    in_url, _ = url_state.decode(st.query_params.to_dict())
    return in_url.job_key() == get().job_key()


def adopt_finished_search() -> None:
    """Keep the answer of a search that ended while no page waited on it (`start_search`)."""
    flight = st.session_state.get(IN_FLIGHT_KEY)
    if isinstance(flight, SearchInFlight) and not flight.thread.is_alive():
        del st.session_state[IN_FLIGHT_KEY]
        if "value" in flight.box:
            save_search_outcome(flight.box["value"], flight.job_key)


def search_outcome() -> Outcome | None:
    """The planner's answer for the current inputs, if it was asked: while its search runs in steps, the
    latest step's (its `stage` says what is still to come)."""
    adopt_finished_search()
    flight = search_in_flight()
    if flight is not None and flight.job_key == get().job_key() and "partial" in flight.box:
        return flight.box["partial"]          # newer than a saved answer for the job (a press after a failure)
    saved = st.session_state.get(RESULT_KEY)
    if saved and saved[0] == get().job_key():
        return saved[1]
    return None


def search_is_stale() -> bool:
    """The planner was asked, but for inputs that have changed since."""
    adopt_finished_search()
    saved = st.session_state.get(RESULT_KEY)
    return bool(saved) and saved[0] != get().job_key()


def save_search_outcome(outcome: Outcome, job_key: str | None = None) -> None:
    """Keep the planner's answer for the job `job_key` (the state's job by default)."""
    st.session_state[RESULT_KEY] = (get().job_key() if job_key is None else job_key, outcome)


IN_FLIGHT_KEY = "search_in_flight"


@dataclass
class SearchInFlight:
    """A search running in its own thread, for the job `job_key`: it outlives the page run that started it
    (the user may open another page meanwhile) and saves its answer itself when done."""
    job_key: str
    started_s: float                 # time.monotonic() at its start
    thread: threading.Thread
    box: dict = field(default_factory=dict)       # "value" or "error", once done; "partial": the latest step before


def search_in_flight() -> SearchInFlight | None:
    """The search still running in this session, if any."""
    run = st.session_state.get(IN_FLIGHT_KEY)
    return run if isinstance(run, SearchInFlight) and run.thread.is_alive() else None


def start_search(job_key: str, work: Callable[[Callable[[Outcome], None]], Outcome]) -> SearchInFlight:
    """`work(show)` in a thread that shares this session's context (caches work there); its answer is kept for
    `job_key` whether or not a page still waits on it (`adopt_finished_search`), and each earlier answer it
    passes to `show` is the flight's "partial" until then (`search_outcome`). A search of this session still
    running, for other inputs, is stopped: nobody waits for its answer, and its worker would spend the session's
    CPU budget (ui.budget)."""
    if search_in_flight() is not None:
        stop_session_work()
    box: dict = {}

    def run() -> None:      # no session state written here: from a thread whose page run has ended, Streamlit
        try:                # stops the write (StopException); `adopt_finished_search` keeps the answer instead
            box["value"] = work(lambda outcome: box.__setitem__("partial", outcome))
        except BaseException as e:       # re-raised in the script thread that waits on it
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True, name="hetplan-search")
    add_script_run_ctx(worker, get_script_run_ctx())
    flight = SearchInFlight(job_key, time.monotonic(), worker, box)
    st.session_state[IN_FLIGHT_KEY] = flight
    worker.start()
    return flight
