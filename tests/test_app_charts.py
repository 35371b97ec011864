"""ui.frames and ui.charts: planner objects to DataFrames to figures, without Streamlit."""
import json

import pandas as pd
import pytest

from catalog import cluster_from_dict, plan_from_dict
from planner.cost import evaluate
from ui import charts, frames, report
from ui.state import EXAMPLES_DIR, presets


@pytest.fixture(scope="module")
def evaluated(catalog):
    cluster = cluster_from_dict(presets()["single-node-8"], catalog)
    plan = plan_from_dict(json.loads((EXAMPLES_DIR / "plans/single-node-8-small.json").read_text()), catalog)
    return cluster, plan, evaluate(cluster, plan, tokens_to_train=1e9, timeline=True)


def test_gpu_grid_covers_every_gpu_once_and_marks_used_ones(evaluated):
    cluster, plan, _ = evaluated
    grid = frames.gpu_grid(cluster, plan)
    assert len(grid) == cluster.num_gpus
    assert grid["stage"].notna().sum() == plan.num_gpus
    fig = charts.cluster_grid(grid)
    assert sum(len(t.x) for t in fig.data) == cluster.num_gpus


def test_replica_groups_keep_samples_and_replicas(evaluated):
    cluster, plan, _ = evaluated
    groups = frames.replica_groups(plan, cluster)
    assert groups.groupby("stage")["share"].sum().round(9).eq(1).all()
    assert groups["replicas"].sum() == sum(len(s.replicas) for s in plan.stages)
    assert len(charts.pipeline(groups, plan.model.layers).data) == len(groups)


def test_memory_groups_keep_the_fullest_gpu(evaluated):
    _, _, est = evaluated
    mem = frames.memory(est)
    groups = frames.memory_groups(mem)
    assert groups["total"].max() == pytest.approx(mem["total"].max())
    assert groups["replicas"].sum() == len(mem)
    fig = charts.memory(groups)
    assert [t.name for t in fig.data][:5] == list(charts.MEMORY_COLOURS)


def test_timeline_draws_each_kind(evaluated):
    _, _, est = evaluated
    fig = charts.timeline(est.timeline)
    assert {t.name for t in fig.data} >= {"forward", "backward"}
    assert sum(len(t.x) for t in fig.data) == len(est.timeline)


def test_cost_charts_join_the_front_and_ring_the_plan_on_view(evaluated):
    cluster, plan, est = evaluated
    rows = [frames.metrics_row(n, "plan", plan, est) for n in ("a", "b")]
    df = pd.DataFrame(rows).assign(role=["pareto", "baseline"], on_front=[True, True], on_view=[True, False])
    names = [t.name for t in charts.cost_vs_throughput(df).data]
    assert "Pareto front" in names and "on view" in names
    assert "on view" in [t.name for t in charts.time_vs_dollars(df).data]
    table = frames.metrics_table(rows)
    assert list(table["fits"]) == ["yes" if est.fits else "NO"] * 2


def test_reports_hold_figures_and_tables(evaluated):
    cluster, plan, est = evaluated
    html = report.to_html(cluster, plan, est)
    assert html.count("class=\"plotly-graph-div\"") == 5 and "<table" in html
    md = report.to_markdown(cluster, plan, est)
    assert "## Memory per GPU (GiB)" in md and "| throughput |" in md
