"""The app composes expert parallelism (auto, or a fixed degree): the state and its link, the Compose
picker with what auto tries and its warnings, the search it asks for, and the plan's experts sharded
over replicas on the sidebar, the Plan page, the Stages page and the report."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from tests.app_helpers import (H100_2X8, link_token, new_app, ok, press_plan, real_search_and_fresh_cache,  # noqa: F401
                               shown, sidebar_text, texts)
from ui.state import AppState, decode, encode

pytestmark = pytest.mark.filterwarnings("ignore")
H100 = H100_2X8
MIXTRAL = AppState(cluster=H100, model="mixtral-8x7b", global_batch=32, seq_len=4096, engine="megatron",
                   tokens_to_train=None)


_token, _sidebar, _plan = link_token, sidebar_text, press_plan


# ----------------------------------------------------------------------------- state and link

def test_expert_parallel_round_trips_through_the_link_and_keys_the_search():
    state = replace(MIXTRAL, expert_parallel="4")
    assert decode(encode(state)) == (state, [])
    assert state.job_key() != replace(state, expert_parallel="auto").job_key()


def test_a_link_without_it_means_auto():
    old = asdict(MIXTRAL)
    del old["expert_parallel"]
    state, warnings = decode(_token(old))
    assert warnings == [] and state == MIXTRAL and state.expert_parallel == "auto"


@pytest.mark.parametrize("hostile", ["evil", 4, "0", "04", " 2", "200000", "²", None, ["2"], True,
                                     "[x](http://evil)"])
def test_a_hostile_degree_in_a_link_warns_and_falls_back_to_auto(hostile):
    state, warnings = decode(_token(dict(asdict(MIXTRAL), expert_parallel=hostile)))
    assert state == MIXTRAL                       # cluster, model and job kept; the degree is auto
    assert len(warnings) == 1 and "expert_parallel" in warnings[0] and "instead" in warnings[0]


def test_readable_link_parameter_takes_the_degree_and_warns_on_a_bad_one():
    state, warnings = decode({"preset": "single-node-8", "model": "mixtral-8x7b", "expert_parallel": "2"})
    assert (state.expert_parallel, warnings) == ("2", [])
    state, warnings = decode({"preset": "single-node-8", "expert_parallel": "-2"})
    assert state.expert_parallel == "auto" and state.cluster["name"] == "single-node-8"
    assert len(warnings) == 1 and "'-2'" in warnings[0]


def test_a_hostile_link_opens_the_app_with_the_warning_shown_as_text():
    at = ok(new_app(_token(dict(asdict(MIXTRAL), expert_parallel="[x](http://evil)"))).run())
    assert any("expert_parallel" in shown(w.value) and "\\[x\\]" in w.value for w in at.warning)
    assert at.session_state["app_state"].expert_parallel == "auto"


# ----------------------------------------------------------------------------- planner calls

def test_the_planner_gets_the_degree_and_whether_to_search_others():
    from planner.search.search import expert_settings
    from ui.planning import build_cluster, build_job, expert_degrees, expert_parallel_search
    assert build_job(MIXTRAL).expert_parallel == 1 and expert_parallel_search(MIXTRAL) == "auto"
    fixed = replace(MIXTRAL, expert_parallel="4")
    assert build_job(fixed).expert_parallel == 4 and expert_parallel_search(fixed) == "fixed"
    assert expert_parallel_search(replace(MIXTRAL, expert_parallel="1")) == "fixed"
    assert expert_degrees(MIXTRAL) == expert_settings(build_cluster(MIXTRAL), build_job(MIXTRAL)) == [1, 2, 4, 8]
    assert expert_degrees(replace(MIXTRAL, engine="hetplan")) == [1]
    assert expert_degrees(replace(MIXTRAL, model="llama-2-13b")) == [1]


# ----------------------------------------------------------------------------- Compose and Plan

def test_compose_a_mixtral_job_and_plan_it_with_expert_parallelism_searched():
    at = ok(new_app(encode(MIXTRAL)).run())
    picker = at.selectbox(key="w.expert_parallel")
    assert picker.value == "auto"
    assert picker.options == ["auto", "1", "2", "4", "8"]      # divisors of 8 experts
    assert "auto tries 1, 2, 4, 8" in texts(at)
    assert "auto will try 1, 2, 4, 8" in picker.help
    assert "Megatron-LM" in picker.help and "torchtitan" in picker.help
    assert "expert parallel auto (1, 2, 4, 8)" in _sidebar(at)
    assert not [w for w in at.warning if "expert" in w.value]
    _plan(at)
    outcome = at.session_state["search_outcome"][1]
    assert any("expert parallelism (1, 2, 4, 8) searched" in n for n in outcome.result.notes)
    assert "Searched: expert parallelism (1, 2, 4, 8) searched" in texts(at)
    plan = at.session_state["app_state"].plan
    ep = plan.get("expert_parallel", 1)
    assert ep in (1, 2, 4, 8)
    said = texts(at)
    assert (f"expert-parallel {ep} (experts sharded over {ep} replicas)" in said) == (ep > 1)
    assert "Traceback" not in said


def test_a_fixed_degree_shows_on_the_plan_the_stages_and_the_report():
    at = ok(new_app(encode(replace(MIXTRAL, expert_parallel="2"))).run())
    assert at.selectbox(key="w.expert_parallel").value == "2"
    assert "expert parallel 2" in _sidebar(at)
    assert not [w for w in at.warning if "expert" in w.value]
    _plan(at)
    plan = at.session_state["app_state"].plan
    assert plan["expert_parallel"] == 2
    assert all(len(s["replicas"]) % 2 == 0 for s in plan["stages"])
    assert "expert-parallel 2 (experts sharded over 2 replicas)" in texts(at)
    assert "expert parallel 2" in _sidebar(at).split("Plan on view")[1]
    terms = [fig for fig in at.get("plotly_chart") if "Iteration time by term" in fig.proto.spec]
    assert "expert parallel comm" in json.loads(terms[0].proto.spec)["data"][0]["y"]

    at.switch_page("ui/pages/stages.py")
    ok(at.run())
    table = at.dataframe[0].value
    assert (table["ep"] == 2).all() and "cp" not in table.columns
    assert "Expert-parallel 2" in texts(at) and "4 of 8 experts" in texts(at)

    from ui import report
    from ui.planning import build_cluster, evaluate_plan
    plan_obj, est = evaluate_plan(MIXTRAL.cluster, plan, None).result
    markdown = shown(report.to_markdown(build_cluster(MIXTRAL), plan_obj, est))
    assert "expert-parallel 2 (experts sharded over 2 replicas)" in markdown


def test_stages_leaves_the_column_out_without_expert_parallelism():
    at = ok(new_app(encode(replace(MIXTRAL, expert_parallel="1"))).run())
    _plan(at)
    assert at.session_state["app_state"].plan.get("expert_parallel", 1) == 1
    assert "expert-parallel" not in texts(at)
    at.switch_page("ui/pages/stages.py")
    ok(at.run())
    assert "ep" not in at.dataframe[0].value.columns


def test_a_fixed_degree_under_an_engine_without_it_names_the_engines_that_have_it():
    at = ok(new_app(encode(replace(MIXTRAL, engine="hetplan", expert_parallel="2"))).run())
    warning = shown(next(w.value for w in at.warning if "expert parallelism" in w.value))
    assert "hetplan runtime has no expert parallelism" in warning
    assert "Megatron-LM" in warning and "torchtitan" in warning
    assert "expert parallel 2" in _sidebar(at)
    _plan(at)
    error = shown(at.error[0].value)
    assert "no expert parallelism" in error and "Compose" in error and "Traceback" not in error
    assert "Megatron-LM" in error and "torchtitan" in error
    assert at.session_state["app_state"].plan is None


def test_a_fixed_degree_with_a_dense_model_is_said_on_compose_and_plan():
    at = ok(new_app(encode(replace(MIXTRAL, model="llama-2-13b", expert_parallel="2"))).run())
    picker = at.selectbox(key="w.expert_parallel")
    assert picker.options == ["auto", "1", "2"]          # 2 only because the link has it
    warning = shown(next(w.value for w in at.warning if "experts" in w.value))
    assert "dense model" in warning and "no experts to shard" in warning
    _plan(at)
    error = shown(at.error[0].value)
    assert "expert_parallel" in error and "has no experts" in error and "Traceback" not in error
    assert "mixture-of-experts model" in error
    assert at.session_state["app_state"].plan is None


def test_a_degree_that_does_not_divide_the_experts_is_said():
    at = ok(new_app(encode(replace(MIXTRAL, expert_parallel="3"))).run())
    picker = at.selectbox(key="w.expert_parallel")
    assert picker.value == "3" and "3" in picker.options
    warning = shown(next(w.value for w in at.warning if "experts" in w.value))
    assert "8 experts do not split evenly over 3 replicas" in warning
    _plan(at)
    error = shown(at.error[0].value)
    assert "expert_parallel" in error and "divides 8" in error and "Traceback" not in error


def test_choosing_a_degree_on_compose_changes_the_state():
    at = ok(new_app(encode(MIXTRAL)).run())
    at.selectbox(key="w.expert_parallel").select("4").run()
    ok(at)
    assert at.session_state["app_state"].expert_parallel == "4"
    assert at.selectbox(key="w.expert_parallel").value == "4"
    assert "expert parallel 4" in _sidebar(at)


def test_auto_says_why_it_does_not_shard_a_job():
    at = ok(new_app(encode(replace(MIXTRAL, engine="hetplan"))).run())
    picker = at.selectbox(key="w.expert_parallel")
    assert picker.options[0] == "auto" and "auto: none for this job" in texts(at)
    assert "auto will try 1 only: hetplan runtime has no expert parallelism" in shown(picker.help)
    assert "expert parallel" not in _sidebar(at)


def test_an_adopted_plan_brings_its_degree_to_compose():
    from ui.views.whatif import _degree_setting
    assert _degree_setting(4, "auto") == "4"
    assert _degree_setting(1, "2") == "auto"
