"""Issue 12: a timeline that reads at any number of micro-batches (ui.phases, the phase chart and
the Timeline page). Phases are checked against 1F1B's own counts (Narayanan et al. 2021, section
2.2.1: stage i of p warms up with p - i - 1 forwards and cools down with as many backwards); the
charts' size against the number of micro-batches (not the clock)."""
from __future__ import annotations

import pytest

from tests.app_helpers import new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from ui import charts, phases
from ui.state import AppState, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")


def _pipeline_plan(stages: int, micro_batches: int, schedule: str = "1f1b", replicas: int = 1) -> dict:
    """gpt3-1.3b (24 layers) on single-node-8's RTX 4090s: `stages` one-GPU stages, micro-batch 1."""
    per = 24 // stages
    return {"format": "hetplan.plan/1", "model": "gpt3-1.3b", "global_batch": micro_batches, "seq_len": 2048,
            "micro_batch": 1, "precision": "bf16", "zero_stage": 0, "recompute": "full", "sequence_parallel": False,
            "schedule": schedule, "interleave": 1,
            "stages": [{"layers": [i * per, 24 if i == stages - 1 else (i + 1) * per],
                        "replicas": [{"pool": "rtx-4090" if i % 2 else "a100", "tp": 1}] * replicas}
                       for i in range(stages)]}


def _events(plan: dict):
    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    return evaluate(cluster, plan_from_dict(plan, cat), timeline=True)


@pytest.mark.parametrize("stages,micro_batches", [(4, 64), (4, 3), (2, 1), (1, 16)])
def test_one_f_one_b_phases_have_the_schedules_counts(stages, micro_batches):
    est = _events(_pipeline_plan(stages, micro_batches))
    table = phases.phases(est.timeline, gpipe=False)
    for i in range(stages):
        rows = table[table["stage"] == i].set_index("phase")
        warm = min(stages - i - 1, micro_batches - 1)
        assert rows["forwards"].get(phases.WARM_UP, 0) == warm
        assert rows["backwards"].get(phases.COOL_DOWN, 0) == warm
        assert rows["forwards"].sum() == rows["backwards"].sum() == micro_batches
        assert rows.loc[phases.STEADY, "forwards"] == micro_batches - warm
    passes = est.timeline["kind"].isin(phases.PASSES).sum()
    assert table["passes"].sum() == passes                       # every pass in exactly one phase
    received = (est.timeline["kind"] == "p2p").sum()
    assert table["transfers"].sum() == received


def test_gpipe_phases_are_all_forwards_then_all_backwards():
    est = _events(_pipeline_plan(2, 8, schedule="gpipe"))
    table = phases.phases(est.timeline, gpipe=True)
    assert set(table["phase"]) == {phases.FORWARDS, phases.BACKWARDS}
    fwd = table[table["phase"] == phases.FORWARDS]
    assert (fwd["backwards"] == 0).all() and (fwd["forwards"] == 8).all()


def test_the_phase_chart_does_not_grow_with_the_micro_batches():
    small, large = (phases.phases(_events(_pipeline_plan(4, m)).timeline, False) for m in (16, 1024))
    bars = [sum(len(t.x) for t in charts.timeline_phases(t, 1.0).data) for t in (small, large)]
    assert bars[0] == bars[1] <= 3 * 4
    labels = [str(x) for t in charts.timeline_phases(large, 1.0).data for x in t.text]
    assert any("1,021 F + 1,021 B" in x and "warm-up 3 F" in x and "cool-down 3 B" in x for x in labels), labels


def test_a_window_follows_its_micro_batches_and_is_cut_at_the_most_passes():
    events = _events(_pipeline_plan(4, 256)).timeline
    win = phases.window(events, 100, 107)
    mine = win.events[win.events["in_window"]]
    assert set(mine["micro_batch"]) == set(range(100, 108))
    assert not win.cut and win.events["start"].lt(win.end_s).all() and win.events["end"].gt(win.start_s).all()
    cut = phases.window(events, 0, 255, max_passes=100)
    assert cut.cut and cut.events["kind"].isin(phases.PASSES).sum() <= 100 and cut.passes_in_span > 100
    fig = charts.timeline(win.events, (win.start_s, win.end_s))
    assert any("other micro-batches" in t.name for t in fig.data)


def test_suggested_windows_lie_in_the_iteration():
    events = _events(_pipeline_plan(4, 64)).timeline
    table, total = phases.phases(events, False), phases.micro_batch_count(events)
    for first, last, _ in phases.suggested_windows(table, total, False).values():
        assert 0 <= first <= last <= total - 1


def _timeline_page(plan: dict):
    state = AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=plan["global_batch"],
                     seq_len=2048, precision="bf16", plan=plan)
    at = ok(new_app(encode(state)).run())
    at.switch_page("ui/pages/timeline.py")
    return ok(at.run())


def test_many_micro_batches_open_in_phases_and_zoom_into_a_window():
    at = _timeline_page(_pipeline_plan(4, 1024))
    view = at.radio[0]
    assert view.value == "whole iteration in phases" and "whole iteration, every pass" not in view.options
    assert "1,024 micro-batches" in texts(at)
    view.set_value("a window of micro-batches")
    ok(at.run())
    steady = next(b for b in at.button if b.label.startswith(phases.STEADY))
    steady.click()
    ok(at.run())
    first, last = at.slider[0].value
    assert 0 < first <= last < 1023
    assert len(at.get("plotly_chart")) == 1


def test_few_micro_batches_draw_every_pass_and_one_offers_no_window():
    at = _timeline_page(_pipeline_plan(2, 8))
    assert at.radio[0].value == "whole iteration, every pass"
    at = _timeline_page(_pipeline_plan(2, 1))
    assert "a window of micro-batches" not in at.radio[0].options and not at.slider
