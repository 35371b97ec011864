"""Issue 13: the Re-plan page: after the cluster changes, the plan on view beside the best plan on the
cluster as composed now, the moves, the switch and whether it is worth it; adopting the new plan."""
from __future__ import annotations

import copy
import re
from dataclasses import replace

import pytest

from tests.app_helpers import new_app, ok, press_plan, real_search_and_fresh_cache, texts  # noqa: F401
from ui.state import AppState, encode

pytestmark = pytest.mark.filterwarnings("ignore")
PAGE = "ui/pages/replan.py"
RUN = "Re-plan on the cluster as composed now"


def _button(at, label: str):
    return next(b for b in at.button if b.label == label)


def _planned_then_node_lost():
    """Plan Llama 2 7B on the default preset, then take one node off the pool the plan uses most."""
    at = ok(new_app(encode(AppState(model="llama-2-7b", global_batch=64, seq_len=2048, time_limit_s=10))).run())
    press_plan(at)
    state = at.session_state["app_state"]
    assert state.plan is not None
    used: dict[str, int] = {}
    for stage in state.plan["stages"]:
        for r in stage["replicas"]:
            used[r["pool"]] = used.get(r["pool"], 0) + r["tp"] * state.plan.get("context_parallel", 1)
    busiest = max(used, key=used.get)
    cluster = copy.deepcopy(state.cluster)
    pool = next(p for p in cluster["pools"] if p["name"] == busiest)
    pool["nodes"] -= 1
    at.session_state["app_state"] = replace(state, cluster=cluster)
    at.switch_page(PAGE)
    return ok(at.run()), state.plan, cluster


def test_replan_shows_both_plans_the_moves_and_whether_to_switch_and_adopts_the_new_plan():
    at, old_plan, cluster = _planned_then_node_lost()
    assert any(c.label.startswith("write the checkpoint from the cluster the plan was planned on") for c in at.checkbox)
    _button(at, RUN).click()
    ok(at.run())
    assert [h.value for h in at.subheader] == ["Current plan", "New plan", "The switch"]
    shown = texts(at)
    assert "What moves" in shown and "Worth switching: yes" in shown
    assert "cannot run on the cluster as composed now" in shown     # a node of the pool it used is gone
    assert "pool " in shown and " GPUs" in shown                    # the moves name the pools
    assert "× " in shown and not re.search(r"\b\dx [a-z]", shown)  # "2× a100 tp2", as the app writes counts
    new = at.session_state["app_state"].plan
    assert new == old_plan                                          # nothing adopted yet
    _button(at, "Put the new plan on view").click()
    ok(at.run())
    adopted = at.session_state["app_state"].plan
    assert adopted != old_plan and "The new plan is on view" in texts(at)
    capacity = {p["name"]: p["nodes"] * p["gpus_per_node"] for p in cluster["pools"]}
    for pool in {r["pool"] for s in adopted["stages"] for r in s["replicas"]}:
        gpus = sum(r["tp"] * adopted.get("context_parallel", 1)
                   for s in adopted["stages"] for r in s["replicas"] if r["pool"] == pool)
        assert gpus <= capacity[pool]


def test_no_plan_on_view_points_to_the_plan_page():
    at = ok(new_app(encode(AppState(model="llama-2-7b", global_batch=64, seq_len=2048))).run())
    at.switch_page(PAGE)
    ok(at.run())
    assert "No plan on view to re-plan" in texts(at)
    assert not any(b.label == RUN for b in at.button)


def test_a_bad_cluster_is_a_message_not_a_traceback():
    state = AppState(model="llama-2-7b", global_batch=64, seq_len=2048,
                     plan={"format": "hetplan.plan/1", "model": "llama-2-7b"})
    bad = copy.deepcopy(state.cluster)
    bad["pools"][0]["gpu"] = "[no-such](http://x)"
    at = ok(new_app(encode(replace(state, cluster=bad))).run())
    at.switch_page(PAGE)
    ok(at.run())
    assert at.error and "no-such" in texts(at)


def test_a_plan_on_view_that_no_longer_fits_points_to_plan_and_replan():
    """Browser walk: after a pool lost nodes on Compose, the Plan page said the plan does not fit and "Fix
    the value named above on the Compose page", while the fix is a new plan (Plan) or Re-plan."""
    from tests.app_helpers import plan_that_no_longer_fits_state
    at = ok(new_app(encode(plan_that_no_longer_fits_state())).run())
    at.switch_page("ui/pages/summary.py")
    said = texts(ok(at.run()))
    assert "does not fit this cluster" in said and "Re-plan" in said, said[-1500:]
    assert "Fix the value named above" not in said
