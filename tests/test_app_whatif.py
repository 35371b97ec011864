"""Issue 12: What-if shows the edited plan beside the plan on view (key metrics with their change,
bottleneck, memory per GPU, timeline) and never offers to keep a plan that runs out of memory."""
from __future__ import annotations

import pytest

from tests.app_helpers import example_plan, new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from ui.state import AppState, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")


def _what_if():
    state = AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048,
                     plan=example_plan())
    at = ok(new_app(encode(state)).run())
    at.switch_page("ui/pages/whatif.py")
    return ok(at.run())


def _select(at, label: str, value):
    next(s for s in at.selectbox if s.label == label).select(value).run()
    return ok(at)


def _side_by_side(at):
    return next(d.value for d in at.dataframe if "change" in d.value.columns)


def _keep_offered(at) -> bool:
    return any(b.label == "Keep this plan" for b in at.button)


def test_the_edited_plan_is_drawn_beside_the_plan_on_view():
    at = _select(_what_if(), "zero stage", 1)
    table = _side_by_side(at)
    assert list(table.columns) == ["metric", "plan on view", "edited", "change"]
    rows = table.set_index("metric")
    assert rows.loc["throughput (tokens/s)", "change"].endswith("%") and rows.loc["GPUs used", "change"] == "same"
    assert rows.loc["peak memory per GPU", "change"].startswith("-")        # ZeRO-1 shards optimizer states
    shown = texts(at)
    assert shown.count("Bottleneck.") == 2 and "Plan on view" in shown and "Edited" in shown
    charts = at.get("plotly_chart")
    assert len(charts) == 4                      # memory and timeline, for each plan
    assert _keep_offered(at)


def test_a_plan_that_runs_out_of_memory_is_not_offered_and_says_what_overflows():
    at = _select(_what_if(), "recompute", "none")
    assert not _keep_offered(at)
    shown = texts(at)
    assert "runs out of memory, so it cannot be kept" in shown and "rtx-4090" in shown
    over = next(d.value for d in at.dataframe if "short by GiB" in d.value.columns)
    assert (over["short by GiB"] > 0).all() and over["stage"].tolist() == [0]
    rows = _side_by_side(at).set_index("metric")
    assert rows.loc["fits in memory", "change"] == "runs out of memory"


def test_no_edit_says_so_and_offers_nothing_to_keep():
    at = _what_if()
    assert not _keep_offered(at) and "No edit yet" in texts(at)
    assert (_side_by_side(at)["change"] == "same").all()


def test_a_plan_that_no_longer_fits_says_to_edit_it_here_or_plan_again():
    """Browser walk: after a pool lost nodes on Compose, What-if said "Fix the value named above on the Compose
    page", while the page's own editors (or a new plan) are the fix."""
    from tests.app_helpers import plan_that_no_longer_fits_state
    at = ok(new_app(encode(plan_that_no_longer_fits_state())).run())
    at.switch_page("ui/pages/whatif.py")
    said = texts(ok(at.run()))
    assert "Edit the stages and replicas above" in said and "Fix the value named above" not in said, said[-1500:]
