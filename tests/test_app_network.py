"""The app with a cluster file's network section: Compose shows the paths between pools, the
section survives share links, and can be dropped for a bandwidth between pools."""
from __future__ import annotations

from tests.app_helpers import keyed, new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from tests.test_network import _lab
from ui.state import AppState, decode, encode


def _at():
    return ok(new_app(encode(AppState(cluster=_lab(trunk_gbps=10)))).run())


def test_compose_shows_the_widest_path_between_pools():
    at = _at()
    table = next(df.value for df in at.dataframe if "path" in df.value.columns)
    row = table.iloc[0]
    assert row["between"] == "a100 ↔ v100"
    assert row["Gb/s per node"] == 5.0                  # the 10 Gb/s trunk shared by 2 node pairs
    assert row["path"] == "a100 → ib-leaf → core → eth-tor → v100"
    assert "from the cluster file: 3 switches, 4 links" in texts(at)


def test_a_share_link_keeps_the_network_section():
    state = AppState(cluster=_lab())
    assert decode(encode(state)) == (state, [])
    at = _at()
    reopened, warnings = decode({k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()})
    assert reopened.cluster["network"] == _lab(trunk_gbps=10)["network"] and warnings == []


def test_dropping_the_network_section_brings_back_the_bandwidth_between_pools():
    at = _at()
    next(b for b in at.button if b.label.startswith("Drop the network")).click().run()
    ok(at)
    cluster = at.session_state["app_state"].cluster
    assert "network" not in cluster
    assert [p["inter_node_gbps"] for p in cluster["pools"]] == [200, 100]     # each pool's links
    assert cluster["between_pools_gbps"] == 5                                # the 10 Gb/s trunk, 2 node pairs
    assert keyed(at.number_input, "between").value == 5
    assert not at.error and "GPUs" in at.success[0].value                   # a cluster that builds


def test_a_cluster_with_a_network_plans_in_the_app():
    at = ok(new_app(encode(AppState(cluster=_lab(), model="gpt3-1.3b", global_batch=64, seq_len=2048))).run())
    at.button(key="compose_plan").click().run()
    ok(at)
    assert at.title[0].value == "Plan" and at.session_state["app_state"].plan is not None
