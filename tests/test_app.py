"""The Streamlit app driven headless through streamlit.testing.v1.AppTest: pages, flows, errors."""
from __future__ import annotations

import sys

import pandas as pd
import pytest

from tests.app_helpers import (SMALL, example_plan, new_app, ok, real_search_and_fresh_cache,  # noqa: F401
                               texts)
from ui.state import AppState, decode, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")


_ok = ok


def _plan(at):
    at.sidebar.button(key="sidebar_plan").click().run()
    return _ok(at)


def test_first_page_is_compose_with_the_default_preset():
    at = _ok(new_app().run())
    assert at.title[0].value == "Compose"
    assert "64 GPUs" in at.success[0].value
    assert not dict(at.query_params), "the defaults need no link (and no history entry)"


def test_loading_a_preset_replaces_the_cluster():
    at = _ok(new_app().run())
    at.selectbox(key="w.preset").select("lab-mix").run()
    at.button[0].click().run()
    _ok(at)
    from catalog import cluster_from_dict, load_catalog
    same = [cluster_from_dict(c, load_catalog()) for c in (at.session_state["app_state"].cluster, presets()["lab-mix"])]
    assert same[0] == same[1]
    assert "48 GPUs" in at.success[0].value


def _url_state(at):
    return decode({k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()})


def test_edits_change_the_state_and_plan_puts_them_in_the_url():
    """Issue 20: the URL is written on Plan (and on a preset, upload or adopted plan), not per edit: Streamlit
    pushes a history entry for each write, and the Back button stepped through every edit."""
    at = _ok(new_app(SMALL).run())
    opened = dict(at.query_params)
    at.text_input(key="w.cluster_name").input("my-lab").run()
    at.number_input(key="w.batch").set_value(32).run()
    at.selectbox(key="w.objective").select("cost").run()
    _ok(at)
    state = at.session_state["app_state"]
    assert (state.cluster["name"], state.global_batch, state.objective) == ("my-lab", 32, "cost")
    assert dict(at.query_params) == opened, "no URL write (history entry) per edit"
    assert "The address bar holds the job as last planned" in " ".join(c.value for c in at.sidebar.caption)
    at.sidebar.button(key="sidebar_plan").click().run()
    reopened, warnings = _url_state(_ok(at))
    assert reopened.job_key() == state.job_key() and warnings == []
    assert "The address bar holds" not in " ".join(c.value for c in at.sidebar.caption)


def test_pool_table_rows_become_cluster_pools():
    from ui.compose import cluster_with_pools, pools_frame
    cluster = presets()["lab-mix"]
    table = pools_frame(cluster)
    table.loc[0, "nodes"] = 4
    table.loc[len(table)] = {"name": "h100", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8,
                             "inter_node_gbps": 400.0, "price_per_gpu_hour": pd.NA}
    table = table.drop(index=1)
    out = cluster_with_pools(cluster, table)
    assert [p["name"] for p in out["pools"]] == ["a100", "h100"]
    assert out["pools"][0]["nodes"] == 4 and "price_per_gpu_hour" not in out["pools"][1]
    assert out["pools"][0]["price_per_gpu_hour"] == 1.8          # lab-mix's own price stays an override
    catalog_price = cluster_with_pools(cluster, pools_frame(presets()["single-node-8"]))["pools"]
    assert all("price_per_gpu_hour" not in p for p in catalog_price)
    assert out["between_pools_gbps"] == cluster["between_pools_gbps"]


def test_editing_the_pool_table_keeps_host_memory_and_grid_intensity():
    """Every pool key of the file format is a column: an edit elsewhere in the table keeps them
    (they were once dropped), and they can be typed in."""
    from ui.compose import cluster_with_pools, pools_frame
    cluster = {"name": "c", "pools": [{"name": "a", "gpu": "a100-80gb-sxm", "nodes": 2, "gpus_per_node": 8,
                                       "inter_node_gbps": 200, "host_memory_gib": 1024, "grid_gco2_per_kwh": 350}]}
    table = pools_frame(cluster)
    table.loc[0, "nodes"] = 3
    out = cluster_with_pools(cluster, table)["pools"][0]
    assert (out["nodes"], out["host_memory_gib"], out["grid_gco2_per_kwh"]) == (3, 1024, 350)
    table.loc[0, "grid_gco2_per_kwh"] = 20.0
    assert cluster_with_pools(cluster, table)["pools"][0]["grid_gco2_per_kwh"] == 20.0
    from ui.compose import POOL_COLUMNS
    from catalog.schema import PoolEntry
    assert set(POOL_COLUMNS) == set(PoolEntry.model_fields)


def test_a_broken_pool_shows_a_readable_error_not_a_traceback():
    bad = {"name": "x", "pools": [{"gpu": "h100-sxmm", "nodes": 1, "gpus_per_node": 8}]}
    at = _ok(new_app(encode(AppState(cluster=bad))).run())
    assert "did you mean 'h100-sxm'" in at.error[0].value


def test_custom_model():
    at = _ok(new_app().run())
    at.selectbox(key="w.model").select("custom architecture…").run()
    at.number_input(key="w.custom.layers").set_value(12).run()
    _ok(at)
    model = at.session_state["app_state"].model
    assert isinstance(model, dict) and model["layers"] == 12
    assert any(m.label == "parameters" for m in at.metric)


def test_cluster_upload_parsing():
    from planner.types import InputError
    from ui.views.compose import parse_cluster_upload
    text = (presets_dir() / "lab-mix.yaml").read_bytes()
    assert parse_cluster_upload("lab-mix.yaml", text)["name"] == "lab-mix"
    for content, words in ((b"pools: [", "invalid YAML"), (b"\xff\xfe", "UTF-8"), (b"- 1", "mapping"),
                           (b"pools: [{gpu: nope, nodes: 1, gpus_per_node: 8}]", "unknown GPU")):
        with pytest.raises(InputError, match=words):
            parse_cluster_upload("c.yaml", content)


def presets_dir():
    from ui.state import EXAMPLES_DIR
    return EXAMPLES_DIR


def test_planning_shows_plans_metrics_and_baselines():
    at = _ok(new_app(SMALL).run())
    _plan(at)
    assert at.title[0].value == "Plan"
    said = texts(at)
    assert "tokens / s" in said and "MFU" in said and "Bottleneck" in said
    assert at.session_state["app_state"].plan is not None
    assert at.dataframe, "the ranked plans table"
    assert len(at.get("plotly_chart")) >= 1


def test_second_identical_request_is_answered_from_the_cache(monkeypatch):
    import importlib
    import planner.search as search_module
    steps = importlib.import_module("planner.search.search")
    monkeypatch.setenv("HETPLAN_APP_INLINE", "1")       # the patched search runs here, not in a worker (ui.budget)
    calls = []
    real, after = search_module.search, steps.search_after_first
    monkeypatch.setattr(search_module, "search", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(steps, "search_after_first", lambda *a, **k: calls.append(2) or after(*a, **k))
    at = _ok(new_app(SMALL).run())
    _plan(at)
    assert calls == [1, 2], "the first engine's search, then the others' pruned at it; the baselines attach to those"
    _plan(at)
    at2 = _ok(new_app(SMALL).run())
    _plan(at2)
    assert calls == [1, 2]


def test_the_compose_page_plan_button_plans():
    at = _ok(new_app(SMALL).run())
    at.button(key="compose_plan").click().run()
    _ok(at)
    assert at.title[0].value == "Plan" and at.session_state["app_state"].plan is not None


def test_nothing_fits_is_a_readable_message():
    at = _ok(new_app({**SMALL, "model": "llama-3.1-405b"}).run())
    _plan(at)
    said = texts(at)
    assert "No plan fits" in said
    assert not at.exception


def test_planner_missing_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "planner.search", None)
    monkeypatch.setenv("HETPLAN_APP_INLINE", "1")       # a worker (ui.budget) would import the real one
    at = _ok(new_app(SMALL).run())
    _plan(at)
    assert "not available" in texts(at)


def test_bad_link_warns_and_shows_defaults():
    at = _ok(new_app({"v": "1", "s": "garbage"}).run())
    assert "could not read the link" in at.warning[0].value
    assert at.session_state["app_state"] == AppState()


def _with_plan() -> dict:
    return encode(AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048,
                           plan=example_plan()))


@pytest.mark.parametrize("page", ["summary", "stages", "timeline", "memory", "cost", "export", "whatif"])
def test_a_shared_link_with_a_plan_opens_every_page(page):
    at = _ok(new_app(_with_plan()).run())
    at.switch_page(f"ui/pages/{page}.py")
    _ok(at.run())
    if page in ("stages", "timeline", "memory"):
        assert len(at.get("plotly_chart")) >= (2 if page == "stages" else 1)
    unexpected = [e.value for e in at.error if "memory" not in e.value]   # the example may not fit
    assert not unexpected, unexpected


def test_compare_needs_and_uses_planner_results():
    at = _ok(new_app(SMALL).run())
    _plan(at)
    at.switch_page("ui/pages/compare.py")
    _ok(at.run())
    assert at.multiselect(key="compare_choice").value
    assert len(at.get("plotly_chart")) == 2


def test_what_if_edits_update_metrics_at_once():
    at = _ok(new_app(_with_plan()).run())
    at.switch_page("ui/pages/whatif.py")
    _ok(at.run())
    before = {m.label: m.value for m in at.metric}
    assert not any(m.delta for m in at.metric), "no change, no arrows"
    next(s for s in at.selectbox if s.label == "zero stage").select(1).run()
    _ok(at)
    after = {m.label: m.value for m in at.metric}
    assert after["throughput (tokens/s)"] != before["throughput (tokens/s)"]
    assert any(m.delta for m in at.metric)
    keep = next(b for b in at.button if b.label == "Keep this plan")
    keep.click().run()
    assert at.session_state["app_state"].plan["zero_stage"] == 1


def test_what_if_example_plan_and_plan_upload_parsing():
    from planner.types import InputError
    from ui.views.whatif import parse_plan_upload
    at = _ok(new_app().run())
    at.switch_page("ui/pages/whatif.py")
    _ok(at.run())
    at.selectbox(key="example_plan").select("single-node-8-small.json").run()
    next(b for b in at.button if b.label == "Load example plan").click().run()
    _ok(at)
    state = at.session_state["app_state"]
    assert state.cluster["name"] == "single-node-8" and state.plan["model"] == "gpt3-1.3b"
    cluster = presets()["single-node-8"]
    import json
    assert parse_plan_upload("p.json", json.dumps(example_plan()).encode(), cluster)["global_batch"] == 64
    with pytest.raises(InputError, match="unknown pool"):
        parse_plan_upload("p.json", json.dumps(example_plan()).encode(), presets()["lab-mix"])
    with pytest.raises(InputError, match="invalid JSON"):
        parse_plan_upload("p.json", b"{", cluster)


def test_downloads_are_valid_files():
    import json
    import yaml
    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from ui import report
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    plan = plan_from_dict(example_plan(), cat)
    est = evaluate(cluster, plan, 1e9, timeline=True)
    html = report.to_html(cluster, plan, est)
    assert html.startswith("<!doctype html>") and html.count("plotly-graph-div") >= 4
    md = report.to_markdown(cluster, plan, est)
    assert "| throughput |" in md
    from catalog import cluster_to_yaml, plan_to_json
    assert cluster_from_dict(yaml.safe_load(cluster_to_yaml(cluster)), cat) == cluster
    assert plan_from_dict(json.loads(plan_to_json(plan, cat)), cat) == plan


def test_the_markdown_reports_numbers_read_as_they_are_and_names_stay_text():
    """Browser walk: the downloaded report read "| throughput | 69\\,553 tokens/s |", "67\\.4%", "30\\.2 s" (a
    line-start escape, needless in a table cell, which holds inline Markdown only)."""
    import re
    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from ui import report
    cat = load_catalog()
    cluster = cluster_from_dict(dict(presets()["single-node-8"], name="[x](http://evil) - 1. y"), cat)
    plan = plan_from_dict(example_plan(), cat)
    est = evaluate(cluster, plan, 1e9)
    md = report.to_markdown(cluster, plan, est)
    assert re.search(r"\| throughput \| \d{1,3}(,\d{3})+ tokens/s \|", md), md[:800]
    assert re.search(r"\| MFU \| \d+\.\d%", md) and "\\," not in md and "\\." not in md, md[:800]
    assert "| cluster | \\[x\\]\\(http" in md and "[x](" not in md
