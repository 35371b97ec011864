"""Work bounded by the input (issue 24): the largest inputs the limits admit are answered in
bounded CPU time and memory, and sizes past a limit are refused with the limit named.

Timed tests measure CPU time of this process (time.process_time), so that other work on the
machine does not count, and bound it at several times what it takes here."""
from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from catalog import builtin_catalog, cluster_from_dict
from planner import types as limits
from planner.cli import main
from planner.types import InputError, Job, JobKind, Training
from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.timeout(300)


def switch_chain(switches: int = 1024, pools: int = 64, switches_per_pool: int = 16) -> dict:
    """The worst network the limits admit for widest paths: every switch in one chain (paths of up
    to 1,023 trunks), every pool linked to as many switches as it may have."""
    links = [{"from": f"s{i}", "to": f"s{i + 1}", "gbps": 100 + i % 7} for i in range(switches - 1)]
    pool_entries = []
    for j in range(pools):
        pool_entries.append({"name": f"p{j}", "gpu": "a100-80gb-sxm", "nodes": 2, "gpus_per_node": 8})
        for k in range(switches_per_pool):
            links.append({"from": f"p{j}", "to": f"s{(j * (switches - 1) // max(1, pools - 1) + k * 61) % switches}", "gbps": 25})
    return {"name": "chain", "pools": pool_entries,
            "network": {"switches": [{"name": f"s{i}", "kind": "ethernet"} for i in range(switches)],
                        "links": links}}


def test_widest_paths_over_1024_switches_in_a_chain_take_well_under_a_second():
    """Issue 24: one `evaluate` on a chain of 1,024 switches took 83 CPU-s and 3.1 GB (every switch
    pair's path listed); here it is one spanning tree, read per pair of the pools' switches."""
    catalog = builtin_catalog()
    data = switch_chain()
    tracemalloc.start()
    start = time.process_time()
    cluster = cluster_from_dict(data, catalog)
    spent = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert spent < 3.0, f"{spent:.2f} CPU-s to read the network"          # 0.4 s here
    assert peak < 300e6, f"{peak / 1e6:.0f} MB at peak"                   # ~40 MB here
    first, last = cluster.pool("p0"), cluster.pool("p63")
    path = cluster.path_between_pools(first, last)
    # every link of a pool is 25 Gb/s per node, below any trunk shared by 2 nodes: the first pair of
    # their switches wins, s0 (p0's first) and s1023 (p63's first), the whole chain apart
    assert path.hops == ("p0", *(f"s{i}" for i in range(1024)), "p63")
    assert path.bw_bytes_per_s == 25e9 / 8
    assert cluster.path_between_pools(last, first).hops == tuple(reversed(path.hops))


def test_evaluate_on_1024_switches_in_a_chain(tmp_path, capsys):
    """The command of issue 24, two pools at the ends of the chain."""
    cluster = tmp_path / "chain.yaml"
    cluster.write_text(json.dumps(switch_chain(pools=2, switches_per_pool=1)))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({
        "format": "hetplan.plan/1", "model": "gpt3-1.3b", "global_batch": 64, "seq_len": 2048, "micro_batch": 4,
        "precision": "bf16", "stages": [{"layers": [0, 12], "replicas": [{"pool": "p0", "tp": 8}]},
                                        {"layers": [12, 24], "replicas": [{"pool": "p1", "tp": 8}]}]}))
    start = time.process_time()
    rc = main(["evaluate", "--cluster", str(cluster), "--plan", str(plan), "--json"])
    spent = time.process_time() - start
    assert rc == 0, capsys.readouterr().err
    crossing = json.loads(capsys.readouterr().out)["network_paths"][0]
    assert crossing["hops"] == ["p0", *(f"s{i}" for i in range(1024)), "p1"]
    assert spent < 5.0, f"{spent:.2f} CPU-s"


# ----------------------------------------------------------------------------- limits refused, named

def _one_line_error(argv, capsys) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err[:500]
    return err


def _cluster_file(tmp_path, data) -> str:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("change, field, limit", [
    (lambda d: d["network"]["switches"].append({"name": "one-more", "kind": "ethernet"}), "network.switches",
     limits.MAX_SWITCHES),
    (lambda d: d["network"]["links"].extend([{"from": "s0", "to": "s1", "gbps": 1}] * (limits.MAX_LINKS)),
     "network.links", limits.MAX_LINKS),
    (lambda d: d["pools"].append({"name": "one-more", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 8}),
     "pools", limits.MAX_POOLS),
    (lambda d: d["network"]["links"].append({"from": "p0", "to": "s999", "gbps": 25}), "network.links",
     limits.MAX_SWITCHES_PER_POOL),
    (lambda d: d["pools"][0].update(nodes=limits.MAX_GPUS_PER_POOL // 8 + 1), "pools[0]",
     limits.MAX_GPUS_PER_POOL),
])
def test_a_cluster_one_past_a_limit_is_refused_with_the_limit_named(change, field, limit, tmp_path, capsys):
    data = switch_chain()
    change(data)
    err = _one_line_error(["evaluate", "--cluster", _cluster_file(tmp_path, data),
                           "--plan", str(EXAMPLES / "plans" / "single-node-8-small.json")], capsys)
    assert field in err and (f" {limit} " in err or f" {limit:,} " in err), err


def test_a_lora_rank_above_the_hidden_size_is_refused(catalog, capsys):
    model = catalog.model("gpt3-1.3b")
    with pytest.raises(InputError, match=r"job.lora_rank.*hidden size \(2,048"):
        Job(model, 8, 512, training=Training(JobKind.LORA, model.hidden + 1))
    Job(model, 8, 512, training=Training(JobKind.LORA, model.hidden))
    Job(model, 8, 512, training=Training(JobKind.PRETRAIN, model.hidden + 1))    # no adapters: no rank
    err = _one_line_error(["plan", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--model", "gpt3-1.3b",
                           "--global-batch", "8", "--seq-len", "512", "--job-kind", "lora", "--lora-rank", "4096"],
                          capsys)
    assert "lora_rank" in err and "2,048" in err


def test_every_limit_is_in_the_documented_table():
    """docs/reliability.md's table names every limit of planner.types (its limits section) with its value."""
    doc = (ROOT / "docs" / "reliability.md").read_text()
    table = "\n".join(line for line in doc.splitlines() if line.startswith("|"))
    for name, value in vars(limits).items():
        if name.startswith("MAX_"):
            assert f"`planner.types.{name}`" in table, name
            row = next(line for line in table.splitlines() if f"`planner.types.{name}`" in line)
            assert f"{value:,}" in row or f"{value}" in row, (name, value, row)
