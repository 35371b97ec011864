"""Sharing a cluster among jobs (planner.fleet, `hetplan fleet`): allocations are whole nodes or parts of one
node that never exceed a pool and lie on distinct concrete GPUs, each plan fits its allocation and evaluates to
the throughput reported, the policies keep their defining properties, and the MILP agrees with brute force over
the same candidates. Searches run to completion (search_time_limit_s=None): no result depends on the machine."""
from __future__ import annotations

import json
from dataclasses import replace
from itertools import product

import pytest
from hypothesis import given, settings, strategies as st

from catalog.formats import check_plan_against_cluster, fleet_jobs_from_dict, load_cluster_file, load_jobs_file
from planner.cli import main
from planner.cost import evaluate
from planner import fleet
from planner.fleet import (FleetJob, FleetOptions, Policy, Share, allocation_grid, fleet_candidates, job_candidates,
                           node_grid, node_parts, place, plan_fleet, sub_cluster)
from planner.types import InputError
from tests.conftest import EXAMPLES, examples

COMPLETE = FleetOptions(search_time_limit_s=None)
LAB = FleetOptions(search_time_limit_s=None, max_candidates=6)     # lab-mix's complete searches take longer


@pytest.fixture(scope="module")
def lab(catalog):
    return load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog)


@pytest.fixture(scope="module")
def single(catalog):
    return load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)


@pytest.fixture(scope="module")
def jobs(catalog):
    return (FleetJob("chat-7b", catalog.model("llama-2-7b"), 256, 2048, 1e10, deadline_hours=200),
            FleetJob("code-13b", catalog.model("llama-2-13b"), 128, 2048, 5e9),
            FleetJob("small-1b", catalog.model("gpt3-1.3b"), 256, 2048, 2e10))


@pytest.fixture(scope="module")
def small_jobs(catalog):
    return load_jobs_file(EXAMPLES / "fleet" / "small-jobs.yaml", catalog)


@pytest.fixture(scope="module")
def results(lab, jobs):
    cache: dict = {}                                         # one planning of the candidates for all policies
    return {p: plan_fleet(lab, jobs, p, LAB, cache) for p in Policy}, cache


@pytest.fixture(scope="module")
def shared(single, small_jobs):
    """Four jobs on two one-node pools: only parts of nodes let more than two run."""
    cache: dict = {}
    return {p: plan_fleet(single, small_jobs, p, COMPLETE, cache) for p in Policy}, cache


def _check_placement(cluster, result):
    """Every allocated GPU is a real GPU of its pool, held by one job only, as many as the job's share."""
    held = set()
    for a in result.allocations:
        for share, s in zip(a.candidate.shares, a.placement):
            pool = cluster.pool(s.pool)
            assert s.pool == share.pool and s.nodes == share.nodes and s.gpus_per_node == share.gpus_per_node
            assert s.whole == (share.gpus_per_node == pool.gpus_per_node)
            gpus = {(s.pool, n, g) for n in s.node_ids for g in s.gpu_ids}
            assert all(0 <= n < pool.nodes and 0 <= g < pool.gpus_per_node for _, n, g in gpus)
            assert len(gpus) == share.gpus == a.gpus[s.pool] and not gpus & held
            held |= gpus
    for p in cluster.pools:
        mine = {(n, g) for pool, n, g in held if pool == p.name}
        assert len(mine) + result.idle_gpus.get(p.name, 0) == p.num_gpus
        assert len({n for n, _ in mine}) + result.idle_nodes.get(p.name, 0) == p.nodes


@pytest.mark.parametrize("policy", list(Policy))
def test_every_policy_allocates_within_the_pools_on_distinct_gpus(results, lab, jobs, policy):
    r = results[0][policy]
    assert len(r.allocations) == len(jobs) and not r.unscheduled
    _check_placement(lab, r)


@pytest.mark.parametrize("policy", list(Policy))
def test_parts_of_a_node_let_four_jobs_share_two_nodes(shared, single, small_jobs, policy):
    r = shared[0][policy]
    assert len(r.allocations) == len(small_jobs) >= 3 and not r.unscheduled
    assert any(not s.whole for a in r.allocations for s in a.placement)
    _check_placement(single, r)


@pytest.mark.parametrize("which", ["results", "shared"])
@pytest.mark.parametrize("policy", list(Policy))
def test_each_plan_fits_its_allocation_and_evaluates_to_the_reported_throughput(request, which, policy):
    cluster = request.getfixturevalue("lab" if which == "results" else "single")
    for a in request.getfixturevalue(which)[0][policy].allocations:
        sub = sub_cluster(cluster, a.candidate.shares)
        assert sub.num_gpus == sum(a.gpus.values())
        check_plan_against_cluster(a.candidate.plan, sub)
        check_plan_against_cluster(a.candidate.plan, cluster)    # pool names kept: valid on the whole cluster
        est = evaluate(sub, a.candidate.plan, tokens_to_train=a.job.tokens)
        assert est.tokens_per_s == pytest.approx(a.estimate.tokens_per_s, rel=1e-9)
        assert est.tokens_per_s == pytest.approx(a.candidate.estimate.tokens_per_s, rel=1e-9)
        assert 0 < a.normalised_throughput <= 1


@pytest.mark.parametrize("which", ["results", "shared"])
def test_max_min_raises_the_least_normalised_throughput(request, which):
    by = request.getfixturevalue(which)[0]
    least = {p: min(a.normalised_throughput for a in by[p].allocations) for p in Policy}
    assert least[Policy.MAX_MIN] >= least[Policy.THROUGHPUT] - 1e-9
    total = {p: sum(a.normalised_throughput * a.job.weight for a in by[p].allocations) for p in Policy}
    assert total[Policy.THROUGHPUT] >= total[Policy.MAX_MIN] - 1e-9


@pytest.mark.parametrize("which", ["results", "shared"])
def test_min_cost_meets_deadlines_and_costs_least(request, which):
    by = request.getfixturevalue(which)[0]
    for a in by[Policy.MIN_COST].allocations:
        if a.job.deadline_hours is not None:
            assert a.candidate.hours_to_finish(a.job.tokens) <= a.job.deadline_hours
    dollars = {p: sum(a.candidate.dollars_to_finish(a.job.tokens) for a in by[p].allocations) for p in Policy}
    assert all(dollars[Policy.MIN_COST] <= d + 1e-6 * d for d in dollars.values())


@pytest.mark.parametrize("which", ["results", "shared"])
def test_finish_time_fairness_lowers_the_worst_slowdown(request, which):
    by = request.getfixturevalue(which)[0]
    worst = {p: max(1 / a.normalised_throughput for a in by[p].allocations) for p in Policy}
    assert all(worst[Policy.FINISH_TIME] <= w + 1e-9 for w in worst.values())


@pytest.mark.parametrize("which, options", [("results", LAB), ("shared", COMPLETE)])
def test_the_program_agrees_with_brute_force(request, which, options):
    """Most jobs running, then maximum total weighted normalised throughput, over every choice of one
    candidate or none per job whose GPUs fit each pool; each such choice also packs onto nodes."""
    cluster = request.getfixturevalue("lab" if which == "results" else "single")
    jobs = request.getfixturevalue("jobs" if which == "results" else "small_jobs")
    cands = [job_candidates(cluster, jb, options, request.getfixturevalue(which)[1])[0] for jb in jobs]
    best_tps = [max(k.estimate.tokens_per_s for k in c) for c in cands]
    best = -1.0
    for choice in product(*[[None, *c] for c in cands]):
        used = {p.name: 0 for p in cluster.pools}
        for k in choice:
            for pool, n in (k.gpus_by_pool.items() if k else ()):
                used[pool] += n
        if any(used[p.name] > p.num_gpus for p in cluster.pools):
            continue
        place(cluster, [k.shares for k in choice if k])      # asserts that the shares pack
        runs = sum(k is not None for k in choice)
        score = sum(jb.weight * k.estimate.tokens_per_s / b for k, b, jb in zip(choice, best_tps, jobs) if k)
        best = max(best, runs * 100 + score)                 # as many jobs as run at once, then throughput
    got = request.getfixturevalue(which)[0][Policy.THROUGHPUT]
    assert len(got.allocations) * 100 + sum(a.job.weight * a.normalised_throughput for a in got.allocations) \
        == pytest.approx(best)


@settings(max_examples=examples(200))
@given(nodes=st.integers(1, 4), g=st.sampled_from([1, 2, 4, 6, 8, 12]),
       wanted=st.lists(st.integers(0, 40), max_size=12))
def test_any_shares_whose_gpus_fit_the_pool_pack_onto_distinct_gpus(single, nodes, g, wanted):
    """solve's (c2) counts GPUs only; place must then find every share room, on distinct GPUs."""
    cluster = replace(single, pools=(replace(single.pools[0], nodes=nodes, gpus_per_node=g),))
    sizes = [Share("a100", n, g) for n in node_grid(nodes, 3)] + [Share("a100", 1, k) for k in node_parts(g, 3)]
    shares, total = [], 0
    for w in wanted:                                         # greedily keep those that still fit the pool's GPUs
        s = sizes[w % len(sizes)]
        if total + s.gpus <= nodes * g:
            shares.append((s,))
            total += s.gpus
    taken = set()
    for (s,), (sl,) in zip(shares, place(cluster, shares)):
        gpus = {(n, k) for n in sl.node_ids for k in sl.gpu_ids}
        assert len(gpus) == s.gpus and not gpus & taken
        assert all(n < nodes and k < g for n, k in gpus)
        assert sl.first_gpu % s.gpus_per_node == 0           # buddy-aligned
        taken |= gpus


def test_node_grid_halves_down_to_one_node_and_parts_halve_a_node():
    assert node_grid(4, 3) == [4, 2, 1]
    assert node_grid(128, 3) == [128, 64, 32, 16]
    assert node_grid(1, 3) == [1]
    assert node_parts(8, 3) == [4, 2, 1]
    assert node_parts(6, 3) == [3]                           # whole GPUs only
    assert node_parts(1, 3) == []


def test_the_grid_spans_sizes_from_the_largest_down_to_part_of_a_node(catalog):
    big = load_cluster_file(EXAMPLES / "big-4types-4096.yaml", catalog)
    first = list(allocation_grid(big, FleetOptions()))[:16]
    sizes = [sum(s.gpus for s in a) for a in first]
    assert sizes[0] == 2048 and min(sizes) == 1 and len(set(first)) == len(first)
    assert all(len(a) <= 2 for a in first)


def test_jobs_alike_share_their_searches(single, small_jobs):
    twin = replace(small_jobs[1], name="twin", tokens=7e9, weight=3.0)
    cache: dict = {}
    alone = fleet_candidates(single, small_jobs[1:2], COMPLETE, cache)
    both = fleet_candidates(single, (small_jobs[1], twin), COMPLETE, {})
    assert both[2] == alone[2] > 0
    assert [k.plan for k in both[0][1]] == [k.plan for k in alone[0][0]]
    for k in both[0][1]:                                     # each job's estimate with its own tokens
        assert k.estimate == evaluate(sub_cluster(single, k.shares), k.plan, tokens_to_train=7e9)


def test_worker_processes_give_the_same_allocation(monkeypatch, single, small_jobs, shared):
    monkeypatch.setattr(fleet, "PARALLEL_AFTER_S", 0.0)     # in worker processes from the first search
    r = plan_fleet(single, small_jobs, Policy.MAX_MIN, replace(COMPLETE, workers=2))
    want = shared[0][Policy.MAX_MIN]
    assert [(a.job.name, a.candidate.shares, a.candidate.plan) for a in r.allocations] == \
        [(a.job.name, a.candidate.shares, a.candidate.plan) for a in want.allocations]


@pytest.mark.parametrize("field, value", [("workers", 0), ("max_candidates", 0), ("max_halvings", -1),
                                          ("search_time_limit_s", 0.0), ("max_pools_per_job", 1.5)])
def test_bad_options_name_the_field(field, value):
    with pytest.raises(InputError, match=field):
        FleetOptions(**{field: value})


def test_cli_json_has_the_documented_keys(capsys):
    code = main(["fleet", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--jobs",
                 str(EXAMPLES / "fleet" / "small-jobs.yaml"), "--policy", "max-min", "--time-limit", "0.2",
                 "--workers", "1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"policy", "allocations", "idle", "solve_time_s", "plan_time_s"} <= set(out) and out["policy"] == "max-min"
    assert len(out["allocations"]) == 4
    for a in out["allocations"]:
        assert {"job", "gpus", "nodes", "placement", "plan", "metrics"} <= set(a) and a["metrics"]["tokens_per_s"] > 0
        assert a["plan"]["format"] == "hetplan.plan/1"
        assert sum(len(p["nodes"]) * len(p["gpus"]) for p in a["placement"]) == sum(a["gpus"].values())


def test_cli_text_says_which_gpus_of_a_shared_node(capsys):
    code = main(["fleet", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--jobs",
                 str(EXAMPLES / "fleet" / "small-jobs.yaml"), "--time-limit", "0.2", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "4 jobs run" in out and ", GPU" in out and "node 0" in out


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


def test_bad_flags_exit_2_naming_the_flag(capsys):
    for flag, value in (("--workers", "0"), ("--time-limit", "0")):
        code = main(["fleet", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--jobs", "x.yaml", flag, value])
        assert code == 2 and flag in capsys.readouterr().err


def test_an_unknown_policy_and_min_cost_without_tokens_are_refused(capsys, catalog, lab):
    code = main(["fleet", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--jobs", "x.yaml", "--policy", "fastest"])
    assert code == 2 and "--policy" in capsys.readouterr().err
    jobs = fleet_jobs_from_dict({"jobs": [{"name": "a", "model": "gpt3-1.3b", "global_batch": 4, "seq_len": 64}]},
                                catalog)
    with pytest.raises(InputError, match=r"jobs\[0\].tokens"):
        plan_fleet(lab, jobs, Policy.MIN_COST, LAB)
    with pytest.raises(InputError, match="--policy"):
        plan_fleet(lab, jobs, "fastest", LAB)
