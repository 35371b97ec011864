"""Issue 12: numbers on screen a user can trust (prices that follow the GPU type, plain text,
labelled baselines, an offline report, the Pareto front's cheaper plans)."""
from __future__ import annotations

import pytest

from tests.app_helpers import new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from ui.state import AppState, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")


def _retype(at, row: int, gpu: str, **more):
    """Change a row of the pool table the way the data editor reports it."""
    at.session_state["w.pools"] = {"edited_rows": {row: {"gpu": gpu, **more}}, "added_rows": [], "deleted_rows": []}
    return ok(at.run())


def _catalog_price(gpu: str) -> float:
    from catalog import load_catalog
    return load_catalog().gpus[gpu].price_per_hour_usd


def test_changing_the_gpu_type_takes_the_new_types_catalog_price():
    at = ok(new_app().run())                      # h100-a100-v100-64: row 1 is a100-80gb-sxm at the catalog price
    _retype(at, 1, "a100-40gb-sxm")
    pool = at.session_state["app_state"].cluster["pools"][1]
    assert pool["gpu"] == "a100-40gb-sxm" and "price_per_gpu_hour" not in pool
    table = at.session_state["pools_base"]        # the table is redrawn with the new price
    assert table.loc[1, "gpu"] == "a100-40gb-sxm"
    assert table.loc[1, "price_per_gpu_hour"] == _catalog_price("a100-40gb-sxm") != _catalog_price("a100-80gb-sxm")


def test_a_price_override_stays_when_the_gpu_type_changes():
    at = ok(new_app(encode(AppState(cluster=presets()["lab-mix"]))).run())
    assert at.session_state["app_state"].cluster["pools"][0]["price_per_gpu_hour"] == 1.8
    _retype(at, 0, "a100-40gb-sxm")
    pool = at.session_state["app_state"].cluster["pools"][0]
    assert (pool["gpu"], pool["price_per_gpu_hour"]) == ("a100-40gb-sxm", 1.8)


def test_a_price_typed_with_the_new_type_is_kept():
    at = ok(new_app().run())
    _retype(at, 1, "a100-40gb-sxm", price_per_gpu_hour=2.0)
    pool = at.session_state["app_state"].cluster["pools"][1]
    assert (pool["gpu"], pool["price_per_gpu_hour"]) == ("a100-40gb-sxm", 2.0)


def test_the_html_report_embeds_plotly_once_and_loads_nothing_from_the_network():
    import re

    from plotly.offline import get_plotlyjs

    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from tests.app_helpers import example_plan
    from ui import report
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    plan = plan_from_dict(example_plan(), cat)
    html = report.to_html(cluster, plan, evaluate(cluster, plan, 1e9, timeline=True))
    external = re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*['\"]?([^'\" >]*)", html, re.I)
    assert external == [], external
    bundle = get_plotlyjs()
    assert "cdn" not in html.replace(bundle, "").lower()      # (the bundle itself names a CDN for map data)
    assert html.count(bundle[:200]) == 1                       # plotly.js embedded exactly once
    assert html.count("plotly-graph-div") >= 4
    assert len(html) < len(bundle) + 1_000_000, len(html)      # the bundle and a small plan's figures


def _plan(at):
    at.sidebar.button(key="sidebar_plan").click().run()
    return ok(at)


def test_counts_are_pluralised():
    from ui.views.summary import count
    assert (count(1, "plan"), count(2, "plan"), count(1024, "candidate")) == ("1 plan", "2 plans", "1,024 candidates")


def test_a_model_far_bigger_than_the_cluster_says_so_with_its_numbers():
    at = _plan(new_app({"preset": "single-node-8", "model": "llama-3.1-405b", "batch": "64", "seq": "2048"}).run())
    errors = [e.value for e in at.error]
    assert len(errors) == 1, errors
    said = texts(at)
    assert "No plan fits. no plan fits" not in said and said.lower().count("no plan fits") == 1
    assert "too large for this cluster" in said and "× the" in said and "GiB" in said
    assert "smaller global batch" not in said and "Add GPUs" in said


def test_no_shortfall_when_the_model_state_fits():
    from catalog import cluster_from_dict, load_catalog
    from planner.types import Job
    from ui.views.summary import model_state_shortfall
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    small = Job(model=cat.model("gpt3-1.3b", "m"), global_batch=64, seq_len=2048)
    big = Job(model=cat.model("llama-3.1-405b", "m"), global_batch=64, seq_len=2048)
    assert model_state_shortfall(cluster, small) == ""
    assert "GiB" in model_state_shortfall(cluster, big)


def test_titles_are_not_said_twice():
    from ui.views.common import titled
    assert titled("No plan fits", "no plan fits in memory: x needs 9 GiB") == "**No plan fits in memory.** x needs 9 GiB"
    assert titled("No plan fits", "global batch too small").startswith("**No plan fits.** ")


def test_floating_point_noise_in_the_breakdown_is_zero():
    from types import SimpleNamespace

    from ui import charts, frames
    term = lambda total, exposed: SimpleNamespace(total_s=total, exposed_s=exposed)  # noqa: E731
    est = SimpleNamespace(breakdown={"compute": term(12.0, 12.0), "dp_allreduce": term(3.0, 2.71e-14),
                                     "pp_p2p": term(0.5, 0.25)})
    df = frames.breakdown(est)
    assert df.set_index("term").loc["dp allreduce", "exposed_s"] == 0.0
    labels = " ".join(charts.breakdown(df).data[0].text)
    assert "e-" not in labels and "dp allreduce" not in list(charts.breakdown(df).data[0].y)


def test_a_baseline_cheaper_per_token_is_said_so():
    from types import SimpleNamespace

    from ui.results import baseline_facts, cheaper_baseline
    on_demand = dict(expected_tokens_per_s=None, expected_cost_per_million_tokens_usd=None)   # no spot pool
    plan = SimpleNamespace(num_gpus=112, cost_per_million_tokens_usd=0.40, **on_demand)
    base = SimpleNamespace(num_gpus=16, cost_per_million_tokens_usd=0.22, **on_demand)
    assert baseline_facts(base, 112) == "16 of 112 GPUs · $0.220 / M tokens"
    sentence = cheaper_baseline("megatron baseline", plan, base, 112)
    assert "45% cheaper per token" in sentence and "16 of the 112 GPUs" in sentence
    assert cheaper_baseline("megatron baseline", base, plan, 112) == ""


def test_cheaper_plans_on_the_front_are_called_out_with_what_they_leave_idle():
    from types import SimpleNamespace

    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from tests.app_helpers import example_plan
    from ui.results import cheaper_front_plans, plan_dict
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    plan = plan_from_dict(example_plan(), cat)
    est = evaluate(cluster, plan, None)
    fast = SimpleNamespace(tokens_per_s=est.tokens_per_s / 0.96, cost_per_million_tokens_usd=est.cost_per_million_tokens_usd / 0.7,
                           num_gpus=cluster.num_gpus, expected_tokens_per_s=None,
                           expected_cost_per_million_tokens_usd=None)                   # no spot pool
    result = SimpleNamespace(plans=[SimpleNamespace(plan=plan, estimate=est)], pareto=[SimpleNamespace(plan=plan, estimate=est)],
                             baselines={})
    lines = cheaper_front_plans(result, {"x": 1}, fast, cluster)          # the front plan against a faster, dearer one
    assert len(lines) == 1
    name, text = lines[0]
    assert name == "#1" and text.startswith("4% slower, 30% cheaper per token")
    idle = cluster.num_gpus - plan.num_gpus
    assert (f"leaves {idle} " in text and "idle" in text) if idle else "uses all" in text
    assert cheaper_front_plans(result, plan_dict(plan), est, cluster) == []   # the plan on view itself is not listed


def test_the_plan_page_labels_baselines_and_both_pages_call_out_cheaper_front_plans():
    """One planning run (the search is the slow part): gains with their baselines' GPUs and price,
    and the cheaper plans of the front on the Plan and Compare pages."""
    at = _plan(new_app({"preset": "h100-a100-v100-64", "model": "gpt3-1.3b", "batch": "512", "seq": "4096"}).run())
    gains = [m for m in at.metric if m.label.startswith("vs ")]
    assert gains, [m.label for m in at.metric]
    for m in gains:
        assert " of 64 GPUs" in m.delta and "/ M tokens" in m.delta, m.delta
    said = texts(at)
    assert "Cheaper plans on the Pareto front" in said and "cheaper per token" in said and "idle" in said
    at.switch_page("ui/pages/compare.py").run()
    assert "Cheaper plans on the Pareto front" in texts(ok(at))


def test_breakdown_labels_have_no_exponents():
    import pandas as pd

    from ui import charts
    terms = pd.DataFrame({"term": ["compute", "dp comm"], "total_s": [1.578, 0.222], "exposed_s": [1.578, 0.222]})
    labels = list(charts.breakdown(terms).data[0].text)
    assert labels == ["222 ms · 12%", "1,578 ms · 88%"], labels
    assert [charts.figure(x) for x in (12.53, 0.04213, 2.7e-14)] == ["12.5", "0.0421", "0"]
