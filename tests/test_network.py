"""Networks as graphs (planner.network): widest paths against brute force, the short form as a
special case, the cost model, the search's bounds and completeness, sub-clusters, storage, and
the cluster file's network section with its errors."""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import networkx as nx
import pytest

from catalog import cluster_from_dict, cluster_to_dict
from catalog.formats import GBIT
from planner.cost import evaluate
from planner.replan import replan
from planner.search import search
from planner.types import InfeasibleError, InputError, Job
from tests.test_one_cost_model import GPUS, MODELS, _candidates, assert_holds_against_exhaustive

LAB = {"name": "lab-net", "pools": [
    {"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 2, "gpus_per_node": 8},
    {"name": "v100", "gpu": "v100-32gb-sxm", "nodes": 4, "gpus_per_node": 8}]}


def _lab(trunk_gbps: float = 100, storage_gbps: float | None = None) -> dict:
    network = {"switches": [{"name": "ib-leaf", "kind": "infiniband"}, {"name": "eth-tor", "kind": "ethernet"},
                            {"name": "core", "kind": "ethernet"}],
               "links": [{"from": "a100", "to": "ib-leaf", "nic": "ib-hdr"},
                         {"from": "v100", "to": "eth-tor", "gbps": 100},
                         {"from": "ib-leaf", "to": "core", "gbps": trunk_gbps},
                         {"from": "eth-tor", "to": "core", "gbps": 400}]}
    if storage_gbps is not None:
        network["storage"] = {"switch": "core", "gbps": storage_gbps}
    return {**LAB, "network": network}


def _random_network_case(rng: random.Random, catalog) -> dict:
    """Pools on 1-3 nodes joined to 1-2 of 1-5 switches; trunks of a random connected graph,
    some in parallel."""
    switches = [f"s{k}" for k in range(rng.randint(1, 5))]
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((1, 2, 3)), "gpus_per_node": rng.choice((1, 2, 4))}
             for j, gpu in enumerate(rng.sample(GPUS, rng.choice((1, 2, 3))))]
    links = []
    for p in pools:
        for s in rng.sample(switches, min(len(switches), rng.choice((1, 1, 2)))):
            links.append({"from": p["name"], "to": s, "gbps": rng.choice((10, 25, 100, 400)),
                          "latency_us": rng.choice((2, 5, 20))})
    tree = list(switches)
    rng.shuffle(tree)
    for k in range(1, len(tree)):            # a random spanning tree, then extra and parallel trunks
        links.append({"from": tree[k], "to": rng.choice(tree[:k]), "gbps": rng.choice((10, 50, 100, 800))})
    for _ in range(rng.randint(0, 3)):
        a, b = rng.sample(switches, 2) if len(switches) > 1 else (None, None)
        if a:
            links.append({"from": a, "to": b, "gbps": rng.choice((10, 50, 100, 800)), "latency_us": 1})
    return {"name": "random-net", "pools": pools,
            "network": {"switches": [{"name": s, "kind": "ethernet"} for s in switches], "links": links}}


def _brute_force_between(data: dict, a: str, b: str) -> float:
    """Widest per-node bandwidth from pool a to pool b over every simple path through switches."""
    nodes = {p["name"]: p["nodes"] for p in data["pools"]}
    g = nx.Graph()
    for link in data["network"]["links"]:
        u, v, bw = link["from"], link["to"], link["gbps"]
        g.add_edge(u, v, bw=g.edges[u, v]["bw"] + bw if g.has_edge(u, v) else bw)
    m = min(nodes[a], nodes[b])
    best = 0.0
    for path in nx.all_simple_paths(g, a, b):
        if any(x in nodes for x in path[1:-1]):
            continue                          # traffic never passes through a pool
        edges = list(zip(path, path[1:]))
        trunks = [g.edges[e]["bw"] / m for e in edges[1:-1]]
        best = max(best, min([g.edges[edges[0]]["bw"], g.edges[edges[-1]]["bw"], *trunks]))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_widest_path_matches_brute_force(catalog, seed):
    data = _random_network_case(random.Random(seed), catalog)
    cluster = cluster_from_dict(data, catalog)
    for a, b in itertools.permutations(cluster.pools, 2):
        assert cluster.bw_between_pools(a, b) / GBIT == pytest.approx(_brute_force_between(data, a.name, b.name),
                                                                      rel=1e-12)
        path = cluster.path_between_pools(a, b)
        assert path.hops[0] == a.name and path.hops[-1] == b.name


def test_a_pool_link_runs_at_its_nodes_rails_added(catalog):
    data = {**LAB, "network": {"switches": [{"name": "leaf", "kind": "roce"}],
                               "links": [{"from": "a100", "to": "leaf", "nic": "roce-400g", "count": 2},
                                         {"from": "v100", "to": "leaf", "gbps": 100},
                                         {"from": "v100", "to": "leaf", "gbps": 100}]}}
    a100, v100 = cluster_from_dict(data, catalog).pools
    assert a100.inter_node_bw_bytes_per_s == 800 * GBIT and a100.inter_node_latency_s == pytest.approx(5e-6)
    assert v100.inter_node_bw_bytes_per_s == 200 * GBIT


def test_one_switch_at_the_pools_bandwidth_is_the_short_form(catalog):
    """A network of one switch, each pool linked at its inter_node_gbps with the short form's
    latency, evaluates every plan as the short form does (the short form without
    between_pools_gbps: the slower side)."""
    short = cluster_from_dict({**LAB, "pools": [{**p, "inter_node_gbps": g} for p, g in zip(LAB["pools"], (200, 100))]},
                              catalog)
    graph = cluster_from_dict({**LAB, "network": {
        "switches": [{"name": "leaf", "kind": "ethernet"}],
        "links": [{"from": "a100", "to": "leaf", "gbps": 200, "latency_us": 5},
                  {"from": "v100", "to": "leaf", "gbps": 100, "latency_us": 5}]}}, catalog)
    job = Job(catalog.model("llama-2-13b"), 64, 2048)
    plans = search(short, job, top_k=5, baselines=False).plans
    for ranked in plans:
        assert evaluate(graph, ranked.plan).iteration_time_s == pytest.approx(
            evaluate(short, ranked.plan).iteration_time_s, rel=1e-12)


def test_a_thin_trunk_slows_the_plans_that_cross_it(catalog):
    job = Job(catalog.model("llama-2-13b"), 64, 4096)
    fat, thin = cluster_from_dict(_lab(trunk_gbps=1600), catalog), cluster_from_dict(_lab(trunk_gbps=10), catalog)
    a100, v100 = fat.pools
    assert fat.bw_between_pools(a100, v100) == 100 * GBIT          # the V100s' own links
    assert thin.bw_between_pools(a100, v100) == 10 * GBIT / 2      # 10 Gb/s shared by 2 node pairs
    assert fat.latency_between_pools(a100, v100) == 20e-6          # the Ethernet hops set the latency
    crossing = search(fat, job, baselines=False).plans[0].plan
    assert {r.pool for s in crossing.stages for r in s.replicas} == {"a100", "v100"}
    assert evaluate(thin, crossing).iteration_time_s > evaluate(fat, crossing).iteration_time_s
    assert (search(thin, job, baselines=False).plans[0].estimate.tokens_per_s
            <= search(fat, job, baselines=False).plans[0].estimate.tokens_per_s)


def test_a_subset_of_the_cluster_shares_its_trunks_among_fewer_nodes(catalog):
    """The fleet plans a job on some nodes of each pool (planner.fleet.sub_cluster): fewer node
    pairs share a trunk, so each gets more of it."""
    cluster = cluster_from_dict(_lab(trunk_gbps=10), catalog)
    sub = replace(cluster, pools=(replace(cluster.pools[0], nodes=1), replace(cluster.pools[1], nodes=2)))
    assert sub.bw_between_pools(*sub.pools) == 10 * GBIT
    alone = replace(cluster, pools=(cluster.pools[1],))             # links to absent pools are ignored
    assert alone.num_gpus == 32


def _random_mixed_cluster(rng: random.Random, catalog, most_gpus: int):
    """A random network case of two pools or more and at most `most_gpus` GPUs."""
    while True:
        cluster = cluster_from_dict(_random_network_case(rng, catalog), catalog)
        if len(cluster.pools) > 1 and cluster.num_gpus <= most_gpus:
            return cluster


@pytest.mark.parametrize("seed", [1, 6])
def test_bounds_and_floors_never_above_evaluate_on_networks(catalog, seed):
    rng = random.Random(seed)
    cluster = _random_mixed_cluster(rng, catalog, 16)
    job = Job(catalog.model(rng.choice(MODELS)), rng.choice((16, 32)), 1024)
    checked = 0
    for cand, screen, capacity, pipeline in _candidates(cluster, job):
        est = evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s
        assert max(screen, capacity, cand.floor_s, pipeline) <= est * (1 + 1e-9), (cand.layout, cand.knobs)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("seed", [3, 12])
def test_complete_answers_on_networks_hold_against_exhaustive_search(catalog, seed):
    rng = random.Random(seed)
    cluster = _random_mixed_cluster(rng, catalog, 10)
    job = Job(catalog.model(rng.choice(MODELS)), rng.choice((8, 16)), 1024)
    try:
        ours = search(cluster, job, baselines=False)
    except InfeasibleError:
        pytest.skip("nothing fits this random case")
    assert_holds_against_exhaustive(cluster, job, ours)


def test_storage_bandwidth_sets_the_switch_time(catalog):
    """replan's checkpoint moves at the paths to the storage switch when the network names one."""
    job = Job(catalog.model("llama-2-7b"), 64, 2048, tokens_to_train=1e9)
    fast = cluster_from_dict(_lab(trunk_gbps=400, storage_gbps=1600), catalog)
    slow = cluster_from_dict(_lab(trunk_gbps=400, storage_gbps=10), catalog)
    plan = search(fast, job, baselines=False).plans[0].plan
    smaller = replace(fast, pools=(replace(fast.pools[0], nodes=1), fast.pools[1]))
    smaller_slow = replace(slow, pools=(replace(slow.pools[0], nodes=1), slow.pools[1]))
    quick = replan(smaller, plan, old_cluster=fast).switch
    slow_switch = replan(smaller_slow, plan, old_cluster=slow).switch
    size = quick.checkpoint_bytes
    assert slow_switch.seconds - quick.seconds > 2 * size / (10 * GBIT) * 0.5
    assert fast.network.storage_bw({"a100": 2, "v100": 4}) == pytest.approx(min(1600, 2 * 200 + 400, 400 + 400) * GBIT)


def test_network_round_trips_through_the_file_format(catalog):
    cluster = cluster_from_dict(_lab(storage_gbps=200), catalog)
    again = cluster_from_dict(cluster_to_dict(cluster), catalog)
    assert again == cluster
    assert again.bw_between_pools(*again.pools) == cluster.bw_between_pools(*cluster.pools)


def _net(**changes) -> dict:
    data = _lab()
    net = data["network"]
    for key, value in changes.items():
        net[key] = value
    return data


@pytest.mark.parametrize("data, field, words", [
    ({**_lab(), "between_pools_gbps": 50}, "between_pools_gbps", "not both"),
    (_net(links=[{"from": "a100", "to": "nowhere", "gbps": 100}]), "network.links[0].to", "neither a pool"),
    (_net(links=[{"from": "a100", "to": "v100", "gbps": 100}]), "network.links[0]", "two pools"),
    (_net(links=[{"from": "a100", "to": "eth-tor", "nic": "ib-hdr"}]), "network.links[0].kind", "cannot join"),
    (_net(links=[{"from": "a100", "to": "ib-leaf", "nic": "ib-hdr", "gbps": 200}]), "network.links[0].gbps",
     "not both"),
    (_net(links=[{"from": "a100", "to": "ib-leaf", "nic": "nvlink3"}]), "network.links[0].nic", "not a node network"),
    (_net(links=[{"from": "a100", "to": "ib-leaf", "gbps": 200}, {"from": "v100", "to": "eth-tor", "gbps": 100}]),
     "network.links", "no path"),
    (_net(links=[{"from": "a100", "to": "ib-leaf", "gbps": 200}]), "network.links", "'v100' has no link"),
    (_net(links=[{"from": "ib-leaf", "to": "core"}, {"from": "a100", "to": "ib-leaf", "gbps": 1},
                 {"from": "v100", "to": "core", "gbps": 1}]), "network.links[0].gbps", "is required"),
    (_net(switches=[{"name": "a100", "kind": "ethernet"}]), "network.switches", "both a pool and a switch"),
    (_net(switches=[{"name": "x", "kind": "token-ring"}]), "network.switches[0].kind", "got 'token-ring'"),
    (_net(storage={"switch": "attic", "gbps": 10}), "network.storage.switch", "unknown switch"),
])
def test_bad_network_sections_name_the_field(catalog, data, field, words):
    with pytest.raises(InputError) as e:
        cluster_from_dict(data, catalog)
    assert field in e.value.field and words in e.value.message


def test_a_pools_inter_node_gbps_must_agree_with_its_links(catalog):
    data = _lab()
    data["pools"] = [{**data["pools"][0], "inter_node_gbps": 400}, data["pools"][1]]
    with pytest.raises(InputError) as e:
        cluster_from_dict(data, catalog)
    assert e.value.field.endswith("pools[0].inter_node_gbps") and "add up to 200" in e.value.message
    data["pools"][0]["inter_node_gbps"] = 200
    assert cluster_from_dict(data, catalog).pools[0].inter_node_bw_bytes_per_s == 200 * GBIT
    # a pool's link may leave its bandwidth to the pool's inter_node_gbps
    data["network"]["links"][0] = {"from": "a100", "to": "ib-leaf"}
    assert cluster_from_dict(data, catalog).pools[0].inter_node_bw_bytes_per_s == 200 * GBIT
    assert math.isclose(cluster_from_dict(data, catalog).pools[0].inter_node_latency_s, 3e-6)


def test_the_two_islands_example_crosses_its_gateways_over_ethernet(catalog):
    from catalog import load_cluster_file
    from tests.conftest import EXAMPLES
    cluster = load_cluster_file(EXAMPLES / "network" / "two-islands.yaml", catalog)
    h100, a100, v100 = cluster.pools
    assert h100.inter_node_bw_bytes_per_s == 1600 * GBIT and h100.inter_node_latency_s == pytest.approx(3e-6)
    assert cluster.bw_between_pools(h100, a100) == pytest.approx(400 * GBIT / 4)     # the gateway trunk, 4 pairs
    assert cluster.latency_between_pools(h100, a100) == pytest.approx(20e-6)         # over Ethernet (TCP)
    assert cluster.path_between_pools(a100, v100).hops == ("a100", "hdr-leaf", "eth-core", "eth-tor", "v100")
    assert cluster.network.storage_bw({"h100": 4}) == 200 * GBIT


def test_evaluate_lists_the_paths_a_plans_traffic_takes(catalog, tmp_path, capsys):
    import json
    from catalog.formats import plan_to_dict
    from planner.cli import main
    from tests.conftest import EXAMPLES
    cluster_file = EXAMPLES / "network" / "two-islands.yaml"
    from catalog import load_cluster_file
    cluster = load_cluster_file(cluster_file, catalog)
    plan = search(cluster, Job(catalog.model("llama-2-70b"), 256, 4096), baselines=False).plans[0].plan
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan_to_dict(plan)))
    assert main(["evaluate", "--cluster", str(cluster_file), "--plan", str(path), "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)["network_paths"]
    pools = [{r.pool for r in s.replicas} for s in plan.stages]
    crossing = sum(len(a - b) > 0 or len(b - a) > 0 for a, b in zip(pools, pools[1:]))
    assert crossing > 0 and len(paths) >= crossing
    for p in paths:
        assert p["hops"][0] == p["from_pool"] and p["hops"][-1] == p["to_pool"]
        assert p["gbps_per_node"] == pytest.approx(cluster.bw_between_pools(cluster.pool(p["from_pool"]),
                                                                            cluster.pool(p["to_pool"])) / GBIT)
    assert main(["evaluate", "--cluster", str(cluster_file), "--plan", str(path)]) == 0
    assert ("traffic between pools" in capsys.readouterr().out) == bool(paths)
