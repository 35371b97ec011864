"""Spot pools (planner.spot, issue 13): the cluster format's `spot` and `availability`, the expected
figures of a plan that uses them, the search ranking by those figures (still equal to exhaustive
search), re-planning when a spot pool is reclaimed, and the app's pool table and share links."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from catalog import cluster_from_dict, cluster_to_dict, load_catalog
from catalog.formats import check_plan_against_cluster, load_cluster_file, load_plan_file, plan_from_dict
from planner.cost import evaluate
from planner.replan import replan
from planner.search import SearchOptions, search
from planner.spot import spot_figures, wall_time_and_price
from planner.types import InputError, Job, Objective, Pool
from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.filterwarnings("ignore")

SPOT = {"name": "spot-mix", "between_pools_gbps": 100, "pools": [
    {"name": "a", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 4, "price_per_gpu_hour": 2.0},
    {"name": "b", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4, "price_per_gpu_hour": 1.0,
     "spot": True, "availability": 0.5}]}

# one stage of 24 layers on each pool, two replicas of tp 2 on each (gpt3-1.3b has 24 layers)
PLAN_BOTH = {"format": "hetplan.plan/1", "model": "gpt3-1.3b", "global_batch": 16, "seq_len": 1024,
             "precision": "bf16", "stages": [
                 {"layers": [0, 12], "replicas": [{"pool": "a", "tp": 2}, {"pool": "a", "tp": 2}]},
                 {"layers": [12, 24], "replicas": [{"pool": "b", "tp": 2}, {"pool": "b", "tp": 2}]}]}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def with_pool_b(**fields) -> dict:
    """SPOT with pool b's fields replaced (None: removed)."""
    data = copy.deepcopy(SPOT)
    for k, v in fields.items():
        if v is None:
            data["pools"][1].pop(k, None)
        else:
            data["pools"][1][k] = v
    return data


# ----------------------------------------------------------------------------- the cluster format

def test_spot_fields_round_trip(catalog):
    cluster = cluster_from_dict(SPOT, catalog)
    a, b = cluster.pools
    assert (a.spot, a.availability) == (False, 1.0) and (b.spot, b.availability) == (True, 0.5)
    written = cluster_to_dict(cluster)
    assert "spot" not in written["pools"][0] and "availability" not in written["pools"][0]
    assert written["pools"][1]["spot"] is True and written["pools"][1]["availability"] == 0.5
    assert cluster_from_dict(written, catalog) == cluster


@pytest.mark.parametrize("fields,message", [
    ({"availability": None}, "is required when spot is true"),
    ({"availability": 0}, "positive"),
    ({"availability": 1.5}, "at most 1"),
    ({"availability": -0.2}, "positive"),
    ({"spot": None}, "spot pools only"),                  # an availability without spot
    ({"spot": False}, "spot pools only"),
])
def test_bad_spot_fields_name_the_availability(catalog, fields, message):
    with pytest.raises(InputError) as err:
        cluster_from_dict(with_pool_b(**fields), catalog, "my.yaml")
    assert err.value.field == "my.yaml: pools[1].availability" and message in err.value.message


def test_spot_must_be_true_or_false(catalog):
    with pytest.raises(InputError) as err:
        cluster_from_dict(with_pool_b(spot="yes"), catalog, "my.yaml")
    assert err.value.field == "my.yaml: pools[1].spot"


def test_pool_type_checks_its_spot_fields(catalog):
    b = cluster_from_dict(SPOT, catalog).pools[1]
    fields = dict(name=b.name, gpu=b.gpu, nodes=1, gpus_per_node=4, inter_node_bw_bytes_per_s=1e10,
                  price_per_gpu_hour_usd=1.0)
    with pytest.raises(InputError, match=r"pools\[b\]\.availability: applies to spot pools only"):
        Pool(**fields, availability=0.5)
    with pytest.raises(InputError, match=r"pools\[b\]\.availability: must be a fraction"):
        Pool(**fields, spot=True, availability=float("nan"))
    assert Pool(**fields, spot=True, availability=1).availability == 1


# ----------------------------------------------------------------------------- expected figures

def test_expected_figures_by_hand(catalog):
    """Pool a: 4 on-demand GPUs at $2/h; pool b: 4 spot GPUs at $1/h, held half the time. At 1,000
    tokens/s and $12/h the plan runs half the time: 500 tokens/s; its wall hour costs $8 (on demand)
    + 0.5 x $4 (spot) = $10, so $10 / 1.8 M tokens = $5.556 per million; an hour of training takes 2."""
    cluster, plan = cluster_from_dict(SPOT, catalog), plan_from_dict(PLAN_BOTH, catalog)
    f = spot_figures(cluster, plan, tokens_per_s=1000.0, price_per_hour=12.0, train_time_s=3600.0)
    assert f["availability"] == 0.5 and f["expected_tokens_per_s"] == 500.0
    assert f["expected_cost_per_million_tokens_usd"] == pytest.approx(10 / 1.8)
    assert f["expected_train_time_s"] == 7200.0 and f["expected_train_cost_usd"] == pytest.approx(20.0)
    assert spot_figures(cluster, plan, 1000.0, 12.0, None)["expected_train_cost_usd"] is None
    assert wall_time_and_price(cluster, plan.gpus_by_pool(), 1.0, 12.0) == (2.0, 10.0)


def test_two_spot_pools_multiply_their_availabilities(catalog):
    data = copy.deepcopy(SPOT)
    data["pools"][0].update(spot=True, availability=0.8)
    cluster, plan = cluster_from_dict(data, catalog), plan_from_dict(PLAN_BOTH, catalog)
    f = spot_figures(cluster, plan, tokens_per_s=1000.0, price_per_hour=12.0, train_time_s=3600.0)
    assert f["availability"] == pytest.approx(0.4) and f["expected_tokens_per_s"] == pytest.approx(400.0)
    # every GPU spot, paid only while the plan runs: the same dollars per token as at full time
    assert f["expected_cost_per_million_tokens_usd"] == pytest.approx(12 / 3.6)


def test_evaluate_carries_the_expected_figures(catalog):
    cluster, plan = cluster_from_dict(SPOT, catalog), plan_from_dict(PLAN_BOTH, catalog)
    est = evaluate(cluster, plan, tokens_to_train=1e9)
    assert est.cost_per_hour_usd == pytest.approx(12.0) and est.availability == 0.5
    assert est.expected_tokens_per_s == pytest.approx(est.tokens_per_s / 2)
    assert est.expected_train_time_s == pytest.approx(est.train_time_s * 2)
    assert est.expected_train_cost_usd == pytest.approx(est.train_time_s * 2 / 3600 * 10.0)
    assert est.expected_cost_per_million_tokens_usd > est.cost_per_million_tokens_usd


def test_a_plan_without_spot_pools_has_no_expected_figures(catalog):
    cluster = cluster_from_dict(SPOT, catalog)
    plan = plan_from_dict({**PLAN_BOTH, "stages": [{"layers": [0, 24], "replicas": [{"pool": "a", "tp": 4}]}]},
                          catalog)
    est = evaluate(cluster, plan, tokens_to_train=1e9)
    assert est.availability == 1.0
    assert (est.expected_tokens_per_s, est.expected_cost_per_million_tokens_usd, est.expected_train_time_s,
            est.expected_train_cost_usd) == (None, None, None, None)


def hetplan(*args):
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_evaluate_json_and_text_show_the_expected_figures(tmp_path):
    (tmp_path / "c.yaml").write_text(json.dumps(SPOT))          # JSON is YAML
    (tmp_path / "p.json").write_text(json.dumps(PLAN_BOTH))
    args = ("evaluate", "--cluster", str(tmp_path / "c.yaml"), "--plan", str(tmp_path / "p.json"), "--tokens", "1e9")
    out = hetplan(*args, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["availability"] == 0.5
    assert data["expected_tokens_per_s"] == pytest.approx(data["tokens_per_s"] / 2)
    assert data["expected_train_time_s"] == pytest.approx(data["train_time_s"] * 2)
    for key in ("expected_cost_per_million_tokens_usd", "expected_train_cost_usd"):
        assert data[key] > 0, key
    text = hetplan(*args)
    assert text.returncode == 0, text.stderr
    spot_line = next(line for line in text.stdout.splitlines() if line.startswith("spot"))
    assert "runs 50.0% of the time" in spot_line and "to train" in spot_line


def test_evaluate_json_has_the_spot_keys_without_spot():
    out = hetplan("evaluate", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--plan",
                  str(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["availability"] == 1.0
    assert all(data[k] is None for k in ("expected_tokens_per_s", "expected_cost_per_million_tokens_usd",
                                         "expected_train_time_s", "expected_train_cost_usd"))


# ----------------------------------------------------------------------------- search

def small_spot_cluster(catalog, availability: float | None):
    b = {"name": "b", "gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4}
    if availability is not None:
        b.update(spot=True, availability=availability, price_per_gpu_hour=1.0)
    return cluster_from_dict({"name": "small", "between_pools_gbps": 100, "pools": [
        {"name": "a", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 4}, b]}, catalog)


@pytest.mark.parametrize("objective", [Objective.THROUGHPUT, Objective.COST])
def test_search_matches_exhaustive_with_a_spot_pool(catalog, objective):
    cluster = small_spot_cluster(catalog, 0.3)
    job = Job(catalog.model("gpt3-1.3b"), 16, 1024)
    found = search(cluster, job, objective, baselines=False)
    optimum = search(cluster, job, objective, method="exhaustive", baselines=False).plans[0].estimate
    best = found.plans[0].estimate
    if objective == Objective.THROUGHPUT:
        assert (best.expected_tokens_per_s or best.tokens_per_s) >= (
            optimum.expected_tokens_per_s or optimum.tokens_per_s) * (1 - 1e-9)
    else:
        assert (best.expected_cost_per_million_tokens_usd or best.cost_per_million_tokens_usd) <= (
            optimum.expected_cost_per_million_tokens_usd or optimum.cost_per_million_tokens_usd) * (1 + 1e-9)
    assert found.complete


def test_a_rarely_held_spot_pool_loses_the_throughput_ranking(catalog):
    """The H100s are the fastest plan when held; held 30% of the time the A100s on demand win."""
    job = Job(catalog.model("gpt3-1.3b"), 16, 1024)
    held = search(small_spot_cluster(catalog, None), job, baselines=False).plans[0]
    rare = search(small_spot_cluster(catalog, 0.3), job, baselines=False).plans[0]
    assert "b" in held.plan.gpus_by_pool()
    assert "b" not in rare.plan.gpus_by_pool() and rare.estimate.expected_tokens_per_s is None
    assert rare.estimate.tokens_per_s > held.estimate.tokens_per_s * 0.3


# ----------------------------------------------------------------------------- re-planning

def test_replan_after_the_spot_pool_is_reclaimed_uses_none_of_its_gpus(catalog):
    old = load_cluster_file(EXAMPLES / "replan" / "lab-mix-spot.yaml", catalog)
    new = load_cluster_file(EXAMPLES / "replan" / "lab-mix-spot-reclaimed.yaml", catalog)
    current = load_plan_file(EXAMPLES / "replan" / "lab-mix-spot-llama-2-13b.json", catalog)
    check_plan_against_cluster(current, old)
    assert old.pool("h100-spot").spot and "h100-spot" in current.gpus_by_pool()
    r = replan(new, current, 1e11, old, options=SearchOptions(time_limit_s=10, baseline_time_limit_s=None))
    check_plan_against_cluster(r.plan, new)
    assert "h100-spot" not in r.plan.gpus_by_pool() and r.estimate.fits
    assert r.current is None and "h100-spot" in r.why_not_current and r.worth_switching
    assert "pool h100-spot: 8 -> 0 GPUs" in r.switch.moves


# ----------------------------------------------------------------------------- the app

def test_pool_table_keeps_spot_fields(catalog):
    from ui.compose import cluster_with_pools, pools_frame
    table = pools_frame(SPOT)
    assert list(table["spot"]) == [False, True] and table.loc[1, "availability"] == 0.5
    out = cluster_with_pools(SPOT, table)
    assert out["pools"][1]["spot"] is True and out["pools"][1]["availability"] == 0.5
    assert "spot" not in out["pools"][0] and "availability" not in out["pools"][0]
    assert cluster_from_dict(out, catalog) == cluster_from_dict(SPOT, catalog)
    table.loc[1, "spot"] = False                          # unticked: on demand, its availability dropped
    table.loc[0, "spot"], table.loc[0, "availability"] = True, pd.NA
    out = cluster_with_pools(SPOT, table)
    assert "spot" not in out["pools"][1] and "availability" not in out["pools"][1]
    with pytest.raises(InputError, match=r"pools\[0\]\.availability: is required"):
        cluster_from_dict(out, catalog)


def test_pool_table_error_names_the_column():
    from ui.compose import pool_error_for_people
    text = pool_error_for_people("cluster: pools[1].availability: is required when spot is true", SPOT)
    assert "pool table row 2 (h100-sxm), availability" in text


def test_share_link_round_trips_spot_pools_and_old_links_load():
    from ui.state import AppState, decode, encode
    state = AppState(cluster=SPOT)
    reopened, warnings = decode(encode(state))
    assert reopened == state and warnings == []
    assert reopened.cluster["pools"][1]["availability"] == 0.5
    old = AppState(cluster={"name": "old", "pools": [{"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}]})
    reopened, warnings = decode(encode(old))                # a link from before spot pools
    assert reopened == old and warnings == []


def test_the_plan_page_shows_the_expected_figures(monkeypatch):
    import streamlit as st
    from tests.app_helpers import SMALL, new_app, ok, texts, use_search
    from ui.state import AppState, encode, presets
    use_search(monkeypatch)
    st.cache_data.clear()
    cluster = copy.deepcopy(presets()["single-node-8"])
    for pool in cluster["pools"]:                 # every plan runs on spot GPUs: 80% or 64% of the time
        pool.update(spot=True, availability=0.8)
    at = ok(new_app(encode(AppState(cluster=cluster, model=SMALL["model"], global_batch=64,
                                    seq_len=2048))).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    said = texts(ok(at))
    assert re.search(r"Spot: runs (80\.0|64\.0)% of the time \(it waits while a spot pool is reclaimed\)", said), said


def test_the_app_compares_plans_on_spot_pools_by_their_expected_figures(catalog):
    """Review: the gain quoted against a baseline used expected figures while the line beneath it
    ("27% slower, 47% cheaper per token") used nominal ones. Both now use what the search ranks by."""
    from dataclasses import replace as with_fields
    from ui.results import baseline_facts, cheaper_baseline
    cluster, plan = cluster_from_dict(SPOT, catalog), plan_from_dict(PLAN_BOTH, catalog)
    on_spot = evaluate(cluster, plan)
    assert on_spot.expected_cost_per_million_tokens_usd > on_spot.cost_per_million_tokens_usd
    # a baseline priced between the plan's nominal and expected cost: cheaper only by the expected figure
    between = (on_spot.cost_per_million_tokens_usd + on_spot.expected_cost_per_million_tokens_usd) / 2
    baseline = with_fields(on_spot, cost_per_million_tokens_usd=between, expected_tokens_per_s=None,
                           expected_cost_per_million_tokens_usd=None, availability=1.0)
    assert cheaper_baseline("baseline", on_spot, baseline, cluster.num_gpus) != ""
    assert f"${on_spot.expected_cost_per_million_tokens_usd:.3f} / M tokens" in baseline_facts(on_spot, 8)
