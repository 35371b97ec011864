"""The Plan page's answer in steps (ui.planning.run_search with `show`): the first engine's plan first, then
every engine, then the baselines, the same answer as one search, with the first engine searched once."""
from __future__ import annotations

import importlib

from planner.engines import REAL
from tests.test_search import _without_times
from ui import planning
from ui.budget import INLINE_ENV
from ui.state import AppState, presets

search_module = importlib.import_module("planner.search.search")    # the package's `search` hides the module


def _small_state() -> AppState:
    return AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048)


def test_the_steps_answer_as_one_search_and_search_the_first_engine_once(monkeypatch):
    """Megatron-LM's plan is shown first, then the search of the other engines pruned at it, then the baselines
    (issue 22: the page searched Megatron-LM twice, its preview and again in the search of every engine)."""
    import streamlit as st
    st.cache_data.clear()
    monkeypatch.setenv(INLINE_ENV, "1")          # in this process, so that the searches can be counted
    searched = []
    real = search_module._search_settings

    def counted(cluster, job, *args, **kw):
        searched.append(job.engine)
        return real(cluster, job, *args, **kw)
    monkeypatch.setattr(search_module, "_search_settings", counted)
    state, steps = _small_state(), []
    final = planning.run_search(state, show=steps.append)
    assert [s.stage for s in steps] == [planning.FIRST_ENGINE, planning.BASELINES] and not final.stage
    assert searched.count(REAL[0]) == 1 and sorted(set(searched)) == sorted(searched)
    assert steps[0].result.plans[0].plan.engine == REAL[0] and steps[0].result.complete
    assert _without_times(final.result.by_engine[REAL[0]]) == _without_times(steps[0].result)
    one = planning._search_work(state.job_key(), 5)         # one call, every engine and the baselines
    assert _without_times(final.result) == _without_times(one.result)


def test_a_second_identical_press_is_answered_from_the_cache(monkeypatch):
    import streamlit as st
    st.cache_data.clear()
    monkeypatch.setenv(INLINE_ENV, "1")
    state = _small_state()
    planning.run_search(state, show=lambda outcome: None)
    searched = []
    monkeypatch.setattr(search_module, "_search_settings", lambda *a, **kw: searched.append(a) or None)
    again = planning.run_search(state, show=lambda outcome: None)
    assert not searched and not again.error and again.result.plans
