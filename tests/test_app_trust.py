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
