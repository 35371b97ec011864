"""What a user sees change: the sidebar follows edits at once, the planner's wait is counted,
stale or missing results are explained, labels do not overprint, the plan reads in one line."""
from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd
import pytest

from tests.app_helpers import (SMALL, example_plan, new_app, ok, real_search_and_fresh_cache,  # noqa: F401
                               keyed, shown, texts)
from ui import charts, frames
from ui.state import AppState, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")


_ok = ok


def _sidebar_text(at) -> str:
    return "\n".join(m.value for m in at.sidebar.markdown)


def _with_plan() -> dict:
    return encode(AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048,
                           plan=example_plan()))


def test_the_sidebar_shows_an_edit_in_the_same_run():
    at = _ok(new_app(SMALL).run())
    assert "batch 64 ×" in _sidebar_text(at)
    at.number_input(key="w.batch").set_value(128).run()
    _ok(at)
    assert "batch 128 ×" in _sidebar_text(at)
    at.selectbox(key="w.model").select("custom architecture…").run()
    assert "custom" in _sidebar_text(at)


def test_the_preset_picker_follows_an_uploaded_or_linked_cluster():
    at = _ok(new_app({"preset": "lab-mix"}).run())
    assert at.selectbox(key="w.preset").value == "lab-mix"
    at.selectbox(key="w.preset").select("single-node-8").run()
    at.button[0].click().run()
    _ok(at)
    assert keyed(at.selectbox, "preset").value == "single-node-8"


def test_a_planning_run_reports_its_plan_in_one_line():
    at = _ok(new_app(SMALL).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    _ok(at)
    assert at.title[0].value == "Plan"
    said = texts(at)
    assert "pipeline stage" in said and "tensor-parallel" in said and "ZeRO-" in said
    assert "after 20 CPU seconds" in said and "second or two" not in said       # what is searched, no promise
    assert "The search is complete" in said
    assert not at.button or all(b.label != "Run the planner" for b in at.button), "results are fresh"


def test_changed_inputs_say_the_results_are_stale():
    at = _ok(new_app(SMALL).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    at.switch_page("ui/pages/compose.py")
    _ok(at.run())
    at.selectbox(key="w.objective").select("cost").run()
    at.switch_page("ui/pages/summary.py")
    _ok(at.run())
    assert any("inputs changed" in w.value for w in at.warning)
    assert any(b.label == "Run the planner" for b in at.button)
    at.switch_page("ui/pages/cost.py")
    _ok(at.run())
    assert not at.get("plotly_chart") and "inputs changed" in at.info[0].value


def test_a_linked_plan_says_where_its_alternatives_are():
    at = _ok(new_app(_with_plan()).run())
    at.switch_page("ui/pages/summary.py")
    _ok(at.run())
    assert "came from a link" in at.info[0].value
    at.switch_page("ui/pages/cost.py")
    _ok(at.run())
    assert not at.get("plotly_chart"), "no chart of a single point"


def test_the_clock_counts_while_the_work_runs_and_returns_its_value():
    from ui.views.summary import _with_clock

    class Status:
        labels: list[str] = []

        def update(self, label, expanded=None):
            self.labels.append(label)

    status = Status()
    assert _with_clock(lambda: time.sleep(0.35) or 42, status, "Searching…", tick_s=0.1) == 42
    assert status.labels and status.labels[-1].startswith("Searching… ")
    with pytest.raises(ValueError, match="boom"):
        _with_clock(lambda: (_ for _ in ()).throw(ValueError("boom")), status, "x", tick_s=0.05)


def test_the_progress_text_says_what_is_searched_and_its_limits():
    from ui.planning import build_cluster, build_job
    from ui.views.summary import search_plan_text
    state = AppState(cluster=presets()["cloud-4types-1024"], model="gpt3-175b", time_limit_s=60.0)
    text = search_plan_text(build_cluster(state), build_job(state), state)
    assert "1,024 GPUs" in text and "4 pools" in text and "60 CPU seconds" in text
    assert "15 CPU seconds each" in text                  # the baselines' share of the limit (5 to 20)


def test_point_labels_skip_points_that_would_overprint():
    df = pd.DataFrame({"plan": ["#1", "#2", "#3", "megatron baseline", "pareto 1"],
                       "role": ["plan", "plan", "plan", "baseline", "pareto"],
                       "tokens_per_s": [160e3, 160.5e3, 159.8e3, 120e3, 150e3],
                       "usd_per_m_tokens": [0.49, 0.49, 0.491, 0.26, 0.45],
                       "on_view": [False, True, False, False, False]})
    labels = charts.point_labels(df, "tokens_per_s", "usd_per_m_tokens")
    assert labels[1] == "#2", "the plan on view keeps its label"
    assert labels[0] == labels[2] == "", "its close neighbours give theirs up"
    assert labels[3] == "megatron baseline" and labels[4] == "pareto 1"
    fig = charts.cost_vs_throughput(df.assign(on_front=False))
    assert sorted(sum((list(t.customdata) for t in fig.data if t.customdata is not None), [])) == sorted(df["plan"])


def test_plan_shape_names_the_parallelism(catalog):
    from catalog import plan_from_dict
    plan = plan_from_dict(example_plan(), catalog)
    line = frames.plan_shape(plan)
    assert line.startswith("3 pipeline stages over 24 layers")
    assert "data-parallel 1–3 per stage" in line and "tensor-parallel 1–2" in line
    assert "micro-batch 4" in line and "1F1B" in line


def test_a_planner_crash_is_a_message_and_the_next_press_tries_again(monkeypatch):
    import planner.search as search_module
    monkeypatch.setenv("HETPLAN_APP_INLINE", "1")       # the patched search runs here, not in a worker (ui.budget)
    real = search_module.search
    monkeypatch.setattr(search_module, "search", lambda *a, **k: (_ for _ in ()).throw(ValueError("unpack")))
    at = _ok(new_app(SMALL).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    _ok(at)
    said = shown(at.error[0].value)
    assert "Planning failed" in said and "ValueError: unpack" in said
    monkeypatch.setattr(search_module, "search", real)
    at.sidebar.button(key="sidebar_plan").click().run()
    _ok(at)
    assert not at.error and at.session_state["app_state"].plan is not None


def test_breakdown_switches_to_seconds_for_long_iterations_and_labels_shares():
    long = pd.DataFrame({"term": ["compute", "pipeline bubble"], "total_s": [300.0, 5.0], "exposed_s": [300.0, 5.0]})
    fig = charts.breakdown(long)
    assert fig.layout.xaxis.title.text.startswith("s per iteration")
    assert any("98%" in t for t in fig.data[0].text)
    short = long.assign(exposed_s=[0.3, 0.01])
    assert charts.breakdown(short).layout.xaxis.title.text.startswith("ms per iteration")


def test_the_deadline_objective_asks_for_its_hours_and_errors_show_once():
    at = _ok(new_app(SMALL).run())
    at.selectbox(key="w.objective").select("deadline").run()
    assert any("set **deadline (hours)**" in w.value for w in at.warning)
    at.button(key="compose_plan").click().run()
    _ok(at)
    assert len(at.error) == 1 and "needs a deadline" in at.error[0].value and "None" not in at.error[0].value
    at.switch_page("ui/pages/compose.py")
    _ok(at.run())
    at.number_input(key="w.deadline").set_value(1.0).run()
    at.button(key="compose_plan").click().run()
    _ok(at)
    assert len(at.error) == 1, "the planner's message once, not in the status and again below"
    assert "within 1 h" in at.error[0].value and "objective to throughput" in at.error[0].value


def test_a_large_cluster_grid_merges_alike_nodes(catalog):
    from catalog import cluster_from_dict
    cluster = cluster_from_dict(presets()["cloud-4types-1024"], catalog)
    grid = frames.gpu_grid(cluster, None)
    rows = frames.collapse_nodes(grid)["row"].unique()
    assert len(rows) == len(cluster.pools), rows            # idle nodes of a pool: one row each
    assert all("nodes 0–" in r for r in rows)
    small = pd.DataFrame([{"pool": "a", "gpu_type": "x", "node": n, "gpu": g, "stage": n // 2, "replica": 0}
                          for n in range(40) for g in range(2)])
    merged = frames.collapse_nodes(small)
    assert list(merged["row"].unique())[:2] == ["a · nodes 0–1 (2)", "a · nodes 2–3 (2)"]
    assert len(merged) == 20 * 2, "one node's GPUs per merged row"
    assert frames.collapse_nodes(small.head(8))["row"].iloc[0] == "a · node 0", "small clusters: every node"
    fig = charts.cluster_grid(merged)
    assert len(fig.layout.yaxis.categoryarray) == 20


def test_pool_errors_name_the_table_row_not_the_file_path():
    bad = {"name": "x", "pools": [{"gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 8},
                                  {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8}]}
    at = _ok(new_app(encode(AppState(cluster=bad))).run())
    said = shown(at.error[0].value)
    assert "pool table row 2 (h100-sxm), network Gb/s per node" in said and "pools[" not in said
    from ui.compose import pool_error_for_people
    assert "add a row" in pool_error_for_people("cluster: pools: List should have at least 1 item", {"pools": []})


def test_money_fits_a_metric_tile_and_the_ring_names_the_plan_on_view():
    from ui.numbers import dollars
    assert (dollars(663), dollars(380_037), dollars(1_873_456)) == ("$663", "$380,037", "$1.87 M")
    df = pd.DataFrame({"plan": ["#1", "#2"], "role": ["plan", "plan"], "tokens_per_s": [1.0, 2.0],
                       "usd_per_m_tokens": [1.0, 2.0], "on_view": [True, False]})
    fig = charts.cost_vs_throughput(df)
    ring = next(t for t in fig.data if t.name == "on view")
    assert list(ring.text) == ["#1"]
    assert list(next(t for t in fig.data if t.name == "plan").text) == ["", "#2"]


def test_compare_breakdown_in_seconds_for_long_iterations():
    terms = pd.DataFrame({"plan": ["#1", "#1", "b"], "term": ["compute", "bubble", "compute"],
                          "total_s": [150.0, 10.0, 300.0], "exposed_s": [150.0, 10.0, 300.0]})
    assert charts.compare_breakdown(terms).layout.yaxis.title.text == "s per iteration"
    assert charts.compare_breakdown(terms.assign(exposed_s=[0.1, 0.01, 0.2])).layout.yaxis.title.text == \
        "ms per iteration"


def test_export_lists_what_each_engine_cannot_express():
    at = _ok(new_app(_with_plan()).run())
    at.switch_page("ui/pages/export.py")
    _ok(at.run())
    refusals = [w.value for w in at.warning if "cannot run the plan on view" in w.value]
    assert any(shown(w).startswith("**Megatron-LM cannot run the plan on view:**") for w in refusals), refusals
    assert "launch.sh" in [d.label for d in at.get("download_button")]      # torchrun: the plan itself


def test_a_new_cluster_after_planning_asks_for_a_new_run_once():
    at = _ok(new_app(SMALL).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    at.switch_page("ui/pages/compose.py")
    _ok(at.run())
    at.selectbox(key="w.preset").select("lab-mix").run()
    at.button[0].click().run()
    at.switch_page("ui/pages/summary.py")
    _ok(at.run())
    assert at.session_state["app_state"].plan is None
    assert "inputs changed" in at.warning[0].value and "plan on view" not in at.warning[0].value
    assert not at.info, [i.value for i in at.info]


def test_compose_edits_survive_a_trip_to_other_pages():
    at = _ok(new_app(SMALL).run())
    at.number_input(key="w.batch").set_value(96).run()
    at.text_input(key="w.cluster_name").input("my-lab").run()
    for page in ("stages", "cost", "compose"):
        at.switch_page(f"ui/pages/{page}.py")
        _ok(at.run())
    assert at.number_input(key="w.batch").value == 96
    assert at.text_input(key="w.cluster_name").value == "my-lab"


def _as_a_browser_without_widget_state_mounts_it(at) -> None:
    """Every Compose field set to what the browser shows when it has lost the field's state (the
    frontend drops widget state on a page navigation that a quick rerun interrupts, streamlit#7338,
    #9100): the value the server sent with the element if it sent one, else the element's default.
    The browser sends that value back with the next rerun."""
    for widget in [*at.number_input, *at.text_input, *at.selectbox]:
        if not str(widget.key).startswith("w.") or widget.proto.disabled:   # the server ignores a disabled one's
            continue
        proto = widget.proto
        shown = proto.value if proto.set_value else proto.default if proto.HasField("default") else None
        if widget.type == "selectbox":
            widget.select_index(shown)
        else:
            widget.set_value(shown if widget.type == "text_input" or shown is None else type(widget.value)(shown))


def test_compose_fields_keep_their_values_when_the_browser_loses_its_widget_state():
    """Review: "Compose" clicked on the Compose page, then the engine changed at once: global batch
    went to 1, sequence length and search limit too, the cluster name to "cluster"."""
    at = _ok(new_app(SMALL).run())
    at.number_input(key="w.time_limit").set_value(45.0).run()
    before = at.session_state["app_state"]
    at.switch_page("ui/pages/compose.py")
    _ok(at.run())
    _as_a_browser_without_widget_state_mounts_it(at)
    at.selectbox(key="w.engine").select("megatron")
    _ok(at.run())
    after = at.session_state["app_state"]
    assert after.engine == "megatron"
    assert (after.global_batch, after.seq_len, after.time_limit_s, after.cluster["name"], after.model,
            after.tokens_to_train) == (64, 2048, 45.0, "single-node-8", "gpt3-1.3b", before.tokens_to_train)
    assert after == replace(before, engine="megatron")
    assert at.number_input(key="w.batch").value == 64


def test_a_replaced_cluster_gets_fresh_name_and_preset_fields():
    """Review: after uploading a cluster the name field kept the old cluster's name, and the next rerun
    wrote it back (the browser keeps a widget's value by its key and sends it as if typed). Replacing
    the state (a preset or an upload, both `session.replace_all`) gives those fields new keys, which the
    browser holds nothing for."""
    at = _ok(new_app().run())
    before = {keyed(at.text_input, "cluster_name").key, keyed(at.selectbox, "preset").key}
    keyed(at.selectbox, "preset").select("lab-mix").run()
    at.button[0].click().run()
    _ok(at)
    field = keyed(at.text_input, "cluster_name")
    assert field.key not in before and field.value == "lab-mix"
    assert keyed(at.selectbox, "preset").key not in before
    field.input("my-lab").run()
    assert at.session_state["app_state"].cluster["name"] == "my-lab"


def test_plan_shape_names_hybrid_shard(catalog):
    from dataclasses import replace
    from catalog import plan_from_dict
    plan = plan_from_dict(example_plan(), catalog)
    assert "hybrid shard" not in frames.plan_shape(plan)
    line = frames.plan_shape(replace(plan, zero_stage=3, hybrid_shard=1))
    assert "ZeRO-3 · hybrid shard (states sharded within groups of 1 replica, replicated across)" in line
