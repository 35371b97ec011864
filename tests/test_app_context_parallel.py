"""The app composes context parallelism (auto, or a fixed degree): the state and its link, the Compose
picker with what auto tries and its warnings, the search it asks for, and the plan's replicas of
tp x cp GPUs on the sidebar, the Plan page, the Stages page, the breakdown and the report."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from tests.app_helpers import (H100_2X8, link_token, new_app, ok, press_plan, real_search_and_fresh_cache,  # noqa: F401
                               shown, sidebar_text, texts)
from ui.state import AppState, decode, encode

pytestmark = pytest.mark.filterwarnings("ignore")
H100 = H100_2X8
# two GPUs a node on a slow network: a ring of 4 crosses nodes, and its transfers outlast the attention
SLOW = {"name": "slow", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 2,
                                   "inter_node_gbps": 100}]}
LONG = AppState(cluster=H100, model="llama-3-8b", global_batch=8, seq_len=131072, engine="megatron",
                tokens_to_train=None)


_token, _sidebar, _plan = link_token, sidebar_text, press_plan


# ----------------------------------------------------------------------------- state and link

def test_context_parallel_round_trips_through_the_link_and_keys_the_search():
    state = replace(LONG, context_parallel="8")
    assert decode(encode(state)) == (state, [])
    assert state.job_key() != replace(state, context_parallel="auto").job_key()


def test_a_link_without_it_means_auto():
    old = asdict(LONG)
    del old["context_parallel"]
    state, warnings = decode(_token(old))
    assert warnings == [] and state == LONG and state.context_parallel == "auto"


@pytest.mark.parametrize("hostile", ["evil", 8, "0", "08", " 2", "2048", "²", None, ["4"], "[x](http://evil)"])
def test_a_hostile_degree_in_a_link_warns_and_falls_back_to_auto(hostile):
    state, warnings = decode(_token(dict(asdict(LONG), context_parallel=hostile)))
    assert state == LONG                          # cluster, model and job kept; the degree is auto
    assert len(warnings) == 1 and "context_parallel" in warnings[0] and "instead" in warnings[0]


def test_readable_link_parameter_takes_the_degree_and_warns_on_a_bad_one():
    state, warnings = decode({"preset": "single-node-8", "seq": "32768", "context_parallel": "4"})
    assert (state.context_parallel, warnings) == ("4", [])
    state, warnings = decode({"preset": "single-node-8", "context_parallel": "-4"})
    assert state.context_parallel == "auto" and state.cluster["name"] == "single-node-8"
    assert len(warnings) == 1 and "'-4'" in warnings[0]


def test_a_hostile_link_opens_the_app_with_the_warning_shown_as_text():
    at = ok(new_app(_token(dict(asdict(LONG), context_parallel="[x](http://evil)"))).run())
    assert any("context_parallel" in shown(w.value) and "\\[x\\]" in w.value for w in at.warning)
    assert at.session_state["app_state"].context_parallel == "auto"


# ----------------------------------------------------------------------------- planner calls

def test_the_planner_gets_the_degree_and_whether_to_search_others():
    from ui.planning import build_job, context_degrees, context_parallel_search
    assert build_job(LONG).context_parallel == 1 and context_parallel_search(LONG) == "auto"
    fixed = replace(LONG, context_parallel="4")
    assert build_job(fixed).context_parallel == 4 and context_parallel_search(fixed) == "fixed"
    assert context_parallel_search(replace(LONG, context_parallel="1")) == "fixed"
    from planner.search.search import context_settings
    from ui.planning import build_cluster
    assert context_degrees(LONG) == context_settings(build_cluster(LONG), build_job(LONG)) == [1, 2, 4, 8, 16]
    assert context_degrees(replace(LONG, engine="deepspeed")) == [1]


# ----------------------------------------------------------------------------- Compose and Plan

def test_compose_a_long_sequence_job_and_plan_it_with_context_parallelism():
    at = ok(new_app(encode(LONG)).run())
    picker = at.selectbox(key="w.context_parallel")
    assert picker.value == "auto"
    assert picker.options[:5] == ["auto", "1", "2", "4", "8"]     # labels that stay put (the browser sends the label)
    assert "auto tries 1, 2, 4, 8, 16" in texts(at)
    assert "auto will try 1, 2, 4, 8, 16" in picker.help
    assert "Megatron-LM" in picker.help and "torchtitan" in picker.help and "tp × N GPUs" in picker.help
    assert "context parallel auto (1, 2, 4, 8, 16)" in _sidebar(at)
    _plan(at)
    plan = at.session_state["app_state"].plan
    assert plan["context_parallel"] > 1
    cp = plan["context_parallel"]
    tp = plan["stages"][0]["replicas"][0]["tp"]
    assert f"context parallel {cp}" in _sidebar(at)                          # the plan on view
    said = texts(at)
    assert f"tp {tp} × cp {cp} = {tp * cp} GPUs per replica" in said         # the plan's shape line
    assert "Traceback" not in said
    at.switch_page("ui/pages/compose.py").run()
    assert f"auto tries 1, 2, 4, 8, 16; plan on view: {cp}" in texts(ok(at))    # Compose shows the plan's figure

    at.switch_page("ui/pages/stages.py")
    ok(at.run())
    table = at.dataframe[0].value
    assert (table["gpus"] == table["tp"] * cp).all() and (table["cp"] == cp).all()
    assert int((table["gpus"] * table["replicas"]).sum()) <= 16


def test_a_fixed_degree_under_an_engine_without_it_names_the_engines_that_have_it():
    at = ok(new_app(encode(replace(LONG, engine="deepspeed", context_parallel="2"))).run())
    warning = shown(next(w.value for w in at.warning if "context parallelism" in w.value))
    assert "DeepSpeed has no context parallelism" in warning
    assert "Megatron-LM" in warning and "torchtitan" in warning
    assert "context parallel 2" in _sidebar(at)
    _plan(at)
    error = shown(at.error[0].value)
    assert "no context parallelism" in error and "Compose" in error and "Traceback" not in error
    assert at.session_state["app_state"].plan is None


def test_a_degree_that_does_not_split_the_sequence_is_said_on_compose_and_plan():
    at = ok(new_app(encode(replace(LONG, seq_len=131070, context_parallel="4"))).run())
    warning = shown(next(w.value for w in at.warning if "equal chunks" in w.value))
    assert "131,070" in warning and "2 × 4 = 8" in warning
    assert not [w for w in at.warning if "no context parallelism" in w.value]     # Megatron-LM has it
    _plan(at)
    error = shown(at.error[0].value)
    assert "context_parallel" in error and "Traceback" not in error
    assert at.session_state["app_state"].plan is None


def test_choosing_a_degree_on_compose_changes_the_state():
    at = ok(new_app(encode(LONG)).run())
    at.selectbox(key="w.context_parallel").select("2").run()
    ok(at)
    assert at.session_state["app_state"].context_parallel == "2"
    assert at.selectbox(key="w.context_parallel").value == "2"


def test_a_degree_from_a_link_outside_the_list_is_offered():
    at = ok(new_app(encode(replace(LONG, seq_len=98304, context_parallel="3"))).run())
    picker = at.selectbox(key="w.context_parallel")
    assert picker.value == "3" and "3" in picker.options


# ----------------------------------------------------------------------------- report and What-if

def test_the_ring_the_attention_does_not_hide_is_a_bar_of_the_breakdown():
    at = ok(new_app(encode(replace(LONG, cluster=SLOW, seq_len=32768, context_parallel="4"))).run())
    _plan(at)
    assert at.session_state["app_state"].plan["context_parallel"] == 4
    terms = [fig for fig in at.get("plotly_chart") if "Iteration time by term" in fig.proto.spec]
    bars = json.loads(terms[0].proto.spec)["data"][0]["y"]
    assert "context parallel comm" in bars


def test_the_report_names_the_replica_width_and_the_ring():
    from planner.search import SearchOptions, search
    from ui import charts, frames, report
    from ui.planning import build_cluster, build_job
    state = replace(LONG, cluster=SLOW, seq_len=32768, context_parallel="4")
    cluster = build_cluster(state)
    best = search(cluster, build_job(state), options=SearchOptions(time_limit_s=10, baseline_time_limit_s=2),
                  baselines=False, context_parallel="fixed").plans[0]
    tp = best.plan.stages[0].replicas[0].tp
    markdown = shown(report.to_markdown(cluster, best.plan, best.estimate))
    assert f"tp {tp} × cp 4 = {tp * 4} GPUs per replica" in markdown and "context parallel comm" in markdown
    assert "context parallel comm" in charts.breakdown(frames.breakdown(best.estimate)).data[0].y
    groups = frames.replica_groups(best.plan, cluster)
    assert (groups["gpus"] == groups["tp"] * 4).all()
    assert int((groups["gpus"] * groups["replicas"]).sum()) == best.plan.num_gpus
    assert f"tp{tp}×cp4 ({tp * 4} GPUs)" in " ".join(charts.pipeline(groups, best.plan.model.layers).layout.yaxis
                                                     .categoryarray)


def test_an_adopted_plan_brings_its_degree_to_compose():
    from ui.views.whatif import _degree_setting
    assert _degree_setting(8, "auto") == "8"
    assert _degree_setting(1, "auto") == "auto"
    assert _degree_setting(1, "1") == "1"
    assert _degree_setting(1, "4") == "auto"


def test_auto_says_why_it_does_not_split_a_job():
    at = ok(new_app(encode(replace(LONG, engine="deepspeed"))).run())
    picker = at.selectbox(key="w.context_parallel")
    assert picker.options[0] == "auto" and "auto: no split for this job" in texts(at)
    assert "auto will try 1 only: DeepSpeed has no context parallelism" in shown(picker.help)
    assert "context parallel" not in _sidebar(at)
    at = ok(new_app(encode(replace(LONG, seq_len=4096))).run())
    assert "the sequence is shorter than 16,384 tokens" in shown(at.selectbox(key="w.context_parallel").help)
