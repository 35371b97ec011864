"""Figures the CLI prints: durations without floating-point noise (issue 12)."""
from __future__ import annotations

from pathlib import Path

from catalog import load_catalog, load_cluster_file, load_plan_file
from planner.cost import evaluate
from planner.report import EXPOSED_ONLY_TERMS, estimate_to_text, format_duration


def test_durations_read_as_durations():
    assert format_duration(2.71e-14) == "0 s"          # a sum of terms that cancel, not a duration
    assert format_duration(-3e-15) == "0 s"
    assert format_duration(0.0123) == "0.0123 s"
    assert format_duration(90) == "1.5 min"
    assert format_duration(None) == "-"



def test_the_text_prints_no_total_for_a_term_whose_total_is_not_computed():
    """evaluate's table: zero_comm's total_s repeats its exposed time (issue 21), so its total cell says
    "-" and a line says why, rather than printing the exposed time under "total s"."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    catalog = load_catalog()
    cluster = load_cluster_file(examples / "single-node-8.yaml", catalog)
    est = evaluate(cluster, load_plan_file(examples / "plans" / "single-node-8-small.json", catalog))
    rows = {line.split()[0]: line.split()[1:] for line in estimate_to_text(est).splitlines() if line.startswith("  ")}
    assert rows["zero_comm"] == ["-", f"{est.breakdown['zero_comm'].exposed_s:.3f}"]
    assert rows["data_parallel_comm"] == [f"{est.breakdown['data_parallel_comm'].total_s:.3f}",
                                          f"{est.breakdown['data_parallel_comm'].exposed_s:.3f}"]
    assert f"(zero_comm: {EXPOSED_ONLY_TERMS['zero_comm']})" in estimate_to_text(est)


def test_a_plan_description_counts_its_stages_in_words():
    """'1 stage', '2 stages' (it printed '2 stage(s)' beside the app's plural-aware counts)."""
    from dataclasses import replace
    from planner.search.explain import describe_plan
    examples = Path(__file__).resolve().parent.parent / "examples"
    plan = load_plan_file(examples / "plans" / "single-node-8-small.json", load_catalog())
    one = replace(plan, stages=(replace(plan.stages[0], layer_end=plan.model.layers),))
    assert describe_plan(one).startswith("1 stage [")
    two = describe_plan(plan) if plan.num_stages > 1 else None
    assert two is None or two.startswith(f"{plan.num_stages} stages [")
    assert "stage(s)" not in describe_plan(one)


def test_past_the_listing_limit_replicas_are_grouped_and_expand_to_the_full_list(monkeypatch):
    """Issue 24: the --json of a ~100,000-replica plan listed every replica's figures (142 MB). Past
    MAX_LISTED_REPLICAS, `peak_memory_gib` lists runs of consecutive replicas of a stage with equal
    figures; expanded by `replica_count`, the rows are the one-by-one list."""
    from dataclasses import replace
    import planner.report as report
    examples = Path(__file__).resolve().parent.parent / "examples"
    catalog = load_catalog()
    cluster = load_cluster_file(examples / "single-node-8.yaml", catalog)
    est = evaluate(cluster, load_plan_file(examples / "plans" / "single-node-8-small.json", catalog))
    first = est.replicas[0]
    many = tuple(replace(first, stage=s, replica=k, samples=first.samples + (k in (5, 700)))   # two odd ones out
                 for s in range(2) for k in range(report.MAX_LISTED_REPLICAS))
    big = replace(est, replicas=many)
    grouped = report.estimate_to_dict(big)
    assert grouped["peak_memory_gib_grouped"] is True
    assert len(grouped["peak_memory_gib"]) == 2 * 5          # per stage: 0-4, 5, 6-699, 700, 701-1023
    monkeypatch.setattr(report, "MAX_LISTED_REPLICAS", len(many))
    each = report.estimate_to_dict(big)
    assert each["peak_memory_gib_grouped"] is False and len(each["peak_memory_gib"]) == len(many)
    expanded = [row | {"replica": row["replica"] + k, "replica_count": 1}
                for row in grouped["peak_memory_gib"] for k in range(row["replica_count"])]
    assert expanded == each["peak_memory_gib"]
    monkeypatch.setattr(report, "MAX_LISTED_REPLICAS", 1024)
    lines = [line for line in estimate_to_text(big).splitlines() if line.startswith("    0 ")]
    assert [line.split()[1] for line in lines] == ["0-4", "5", "6-699", "700", "701-1023"]
