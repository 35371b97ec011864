"""The Plan page says when a limit stopped the search, and how far from optimal it can be."""
from __future__ import annotations

from types import SimpleNamespace

from ui.views.summary import search_completeness


def test_complete_search_says_nothing():
    assert search_completeness(SimpleNamespace(complete=True, gap=0.0, stopped_by=None)) == ""


def test_stopped_search_names_the_limit_and_the_gap():
    text = search_completeness(SimpleNamespace(complete=False, gap=0.034, stopped_by="time limit"))
    assert "time limit" in text and "3.4%" in text


def test_unknown_gap_is_said_plainly():
    text = search_completeness(SimpleNamespace(complete=False, gap=None, stopped_by="time limit"))
    assert "unknown" in text


def test_unproven_search_says_so_without_a_limit():
    """A search that ran out but could not prove its answer within its verification budget."""
    text = search_completeness(SimpleNamespace(complete=False, gap=0.012, stopped_by=None))
    assert "could not prove" in text and "1.2%" in text and "None" not in text


def test_energy_text_names_the_pools_without_a_grid_intensity(catalog):
    """Review: with a grid intensity on some pools only, the CO2 figure vanished without a word."""
    from catalog import cluster_from_dict
    from catalog.formats import plan_from_dict
    from planner.cost import evaluate
    from tests.app_helpers import example_plan
    from ui import frames
    from ui.state import presets
    data = presets()["single-node-8"]
    data = {**data, "pools": [{**data["pools"][0], "grid_gco2_per_kwh": 300}, data["pools"][1]]}
    cluster = cluster_from_dict(data, catalog)
    plan = plan_from_dict(example_plan(), catalog)
    est = evaluate(cluster, plan, tokens_to_train=1e9)
    missing = frames.pools_without_grid_intensity(cluster, plan)
    assert est.train_co2_kg is None and missing == [data["pools"][1]["name"]]
    assert f"no CO2 figure: pool {missing[0]} states no grid" in frames.energy_text(est, missing)


def test_the_answers_figures_are_the_cost_models_for_the_plan_on_view():
    """The Plan page shows a plan of the answer with the figures the search gave it (ui.views.summary.on_view),
    not with an evaluation of its own: they are planner.cost.evaluate's for the plan file on the cluster, as the
    other pages compute them (ui.planning.evaluate_plan), for every plan and baseline, and under energy too."""
    import json
    from dataclasses import replace
    from tests.app_helpers import H100_2X8
    from ui import planning
    from ui.results import named_plans
    from ui.state import AppState
    state = AppState(cluster=H100_2X8, model="gpt3-1.3b", global_batch=64, seq_len=2048)
    for objective in ("throughput", "energy"):
        job = replace(state, objective=objective)
        named = named_plans(planning._search_work(job.job_key(), 5).result)
        assert any(n.role == "baseline" for n in named)
        for n in named:
            plan, est = planning._evaluate_work(json.dumps(job.cluster, sort_keys=True),
                                                json.dumps(n.plan_dict, sort_keys=True), job.tokens_to_train).result
            assert (plan, est) == (n.scored.plan, n.scored.estimate), (objective, n.name)
