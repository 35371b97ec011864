"""Sharing a cluster among jobs (planner.fleet, `hetplan fleet`): allocations are whole nodes that never
exceed a pool, each plan fits its allocation and evaluates to the throughput reported, the policies
keep their defining properties, and the MILP agrees with brute force over the same candidates."""
from __future__ import annotations

import json
from itertools import product

import pytest

from catalog.formats import check_plan_against_cluster, fleet_jobs_from_dict, load_cluster_file
from planner.cli import main
from planner.cost import evaluate
from planner.fleet import FleetJob, FleetOptions, Policy, job_candidates, node_grid, plan_fleet, sub_cluster
from planner.types import InputError
from tests.conftest import EXAMPLES

QUICK = FleetOptions(search_time_limit_s=0.3)


@pytest.fixture(scope="module")
def lab(catalog):
    return load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog)


@pytest.fixture(scope="module")
def jobs(catalog):
    return (FleetJob("chat-7b", catalog.model("llama-2-7b"), 256, 2048, 1e10, deadline_hours=200),
            FleetJob("code-13b", catalog.model("llama-2-13b"), 128, 2048, 5e9),
            FleetJob("small-1b", catalog.model("gpt3-1.3b"), 256, 2048, 2e10))


@pytest.fixture(scope="module")
def results(lab, jobs):
    cache: dict = {}                                         # one planning of the candidates for all policies
    return {p: plan_fleet(lab, jobs, p, QUICK, cache) for p in Policy}, cache


@pytest.mark.parametrize("policy", list(Policy))
def test_every_policy_allocates_whole_nodes_within_the_pools(results, lab, jobs, policy):
    r = results[0][policy]
    assert len(r.allocations) == len(jobs) and not r.unscheduled
    held = {p.name: 0 for p in lab.pools}
    for a in r.allocations:
        for pool, nodes in a.candidate.nodes:
            held[pool] += nodes
            assert a.gpus[pool] == nodes * lab.pool(pool).gpus_per_node
    for p in lab.pools:                                      # disjoint nodes: the sum fits each pool
        assert held[p.name] + r.idle_nodes.get(p.name, 0) == p.nodes


@pytest.mark.parametrize("policy", list(Policy))
def test_each_plan_fits_its_allocation_and_evaluates_to_the_reported_throughput(results, lab, policy):
    for a in results[0][policy].allocations:
        sub = sub_cluster(lab, a.candidate.nodes)
        check_plan_against_cluster(a.candidate.plan, sub)
        check_plan_against_cluster(a.candidate.plan, lab)    # pool names kept: valid on the whole cluster
        est = evaluate(sub, a.candidate.plan, tokens_to_train=a.job.tokens)
        assert est.tokens_per_s == pytest.approx(a.estimate.tokens_per_s, rel=1e-9)
        assert est.tokens_per_s == pytest.approx(a.candidate.estimate.tokens_per_s, rel=1e-9)
        assert 0 < a.normalised_throughput <= 1


def test_max_min_raises_the_least_normalised_throughput(results):
    by = results[0]
    least = {p: min(a.normalised_throughput for a in by[p].allocations) for p in Policy}
    assert least[Policy.MAX_MIN] >= least[Policy.THROUGHPUT] - 1e-9
    total = {p: sum(a.normalised_throughput for a in by[p].allocations) for p in Policy}
    assert total[Policy.THROUGHPUT] >= total[Policy.MAX_MIN] - 1e-9


def test_min_cost_meets_deadlines_and_costs_least(results):
    by = results[0]
    for a in by[Policy.MIN_COST].allocations:
        if a.job.deadline_hours is not None:
            assert a.candidate.hours_to_finish(a.job.tokens) <= a.job.deadline_hours
    dollars = {p: sum(a.candidate.dollars_to_finish(a.job.tokens) for a in by[p].allocations) for p in Policy}
    assert all(dollars[Policy.MIN_COST] <= d + 1e-6 * d for d in dollars.values())


def test_finish_time_fairness_lowers_the_worst_slowdown(results):
    by = results[0]
    worst = {p: max(1 / a.normalised_throughput for a in by[p].allocations) for p in Policy}
    assert all(worst[Policy.FINISH_TIME] <= w + 1e-9 for w in worst.values())


def test_the_program_agrees_with_brute_force(results, lab, jobs):
    """Maximum total normalised throughput over every choice of one candidate or none per job."""
    cache = results[1]
    cands = [job_candidates(lab, jb, QUICK, cache)[0] for jb in jobs]
    best_tps = [max(k.estimate.tokens_per_s for k in c) for c in cands]
    best = -1.0
    for choice in product(*[[None, *c] for c in cands]):
        used = {p.name: 0 for p in lab.pools}
        for k in choice:
            for pool, n in (k.nodes if k else ()):
                used[pool] += n
        if any(used[p.name] > p.nodes for p in lab.pools):
            continue
        runs = sum(k is not None for k in choice)
        score = sum(k.estimate.tokens_per_s / b for k, b in zip(choice, best_tps) if k)
        best = max(best, runs * 100 + score)                 # as many jobs as run at once, then throughput
    got = results[0][Policy.THROUGHPUT]
    assert len(got.allocations) * 100 + sum(a.normalised_throughput for a in got.allocations) == pytest.approx(best)


def test_node_grid_halves_down_to_one_node():
    assert node_grid(4, 3) == [4, 2, 1]
    assert node_grid(128, 3) == [128, 64, 32, 16]
    assert node_grid(1, 3) == [1]


def test_cli_json_has_the_documented_keys(tmp_path, capsys):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n"
                    "  - {name: a, model: gpt3-1.3b, global_batch: 64, seq_len: 1024, tokens: 1.0e+9}\n"
                    "  - {name: b, model: gpt3-1.3b, global_batch: 64, seq_len: 1024, tokens: 1.0e+9}\n"
                    "  - {name: c, model: gpt3-1.3b, global_batch: 64, seq_len: 1024}\n")
    code = main(["fleet", "--cluster", str(EXAMPLES / "a100-v100-16.yaml"), "--jobs", str(jobs),
                 "--policy", "max-min", "--time-limit", "0.2", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"policy", "allocations", "idle", "solve_time_s"} <= set(out) and out["policy"] == "max-min"
    assert len(out["allocations"]) == 3
    for a in out["allocations"]:
        assert {"job", "gpus", "plan", "metrics"} <= set(a) and a["metrics"]["tokens_per_s"] > 0
        assert a["plan"]["format"] == "hetplan.plan/1"


@pytest.mark.parametrize("body, field", [
    ("jobs:\n  - {name: a, model: gpt3-1.3b, global_batch: -4, seq_len: 1024}\n", "jobs[0].global_batch"),
    ("jobs:\n  - {name: a, model: no-such-model, global_batch: 4, seq_len: 1024}\n", "jobs[0].model"),
    ("jobs:\n  - {name: a, model: gpt3-1.3b, global_batch: 4}\n", "jobs[0].seq_len"),
    ("jobs:\n  - {name: a, model: gpt3-1.3b, global_batch: 4, seq_len: 64}\n"
     "  - {name: a, model: gpt3-1.3b, global_batch: 4, seq_len: 64}\n", "jobs[1].name"),
    ("jobz: []\n", "jobs"),
])
def test_a_bad_jobs_file_exits_2_with_one_line_naming_the_field(tmp_path, capsys, body, field):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(body)
    code = main(["fleet", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--jobs", str(jobs)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and field in err, err


def test_an_unknown_policy_and_min_cost_without_tokens_are_refused(capsys, catalog, lab):
    code = main(["fleet", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--jobs", "x.yaml", "--policy", "fastest"])
    assert code == 2 and "--policy" in capsys.readouterr().err
    jobs = fleet_jobs_from_dict({"jobs": [{"name": "a", "model": "gpt3-1.3b", "global_batch": 4, "seq_len": 64}]},
                                catalog)
    with pytest.raises(InputError, match=r"jobs\[0\].tokens"):
        plan_fleet(lab, jobs, Policy.MIN_COST, QUICK)
    with pytest.raises(InputError, match="--policy"):
        plan_fleet(lab, jobs, "fastest", QUICK)
