"""Cluster (YAML) and plan (JSON) file formats: round trips, defaults, and errors that name the field."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import (check_plan_against_cluster, cluster_from_dict, cluster_to_dict, cluster_to_yaml,
                     load_catalog, load_cluster_file, load_plan_file, plan_from_dict, plan_to_dict,
                     plan_to_json)
from planner.types import InputError, Precision

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CLUSTER_FILES = sorted(EXAMPLES.glob("*.yaml"))
PLAN_FILES = sorted((EXAMPLES / "plans").glob("*.json"))
PLAN_CLUSTER = {"lab-mix-llama-2-70b.json": "lab-mix.yaml", "single-node-8-small.json": "single-node-8.yaml"}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


LAB_MIX = {
    "name": "lab-mix",
    "pools": [
        {"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 2, "gpus_per_node": 8, "inter_node_gbps": 200,
         "price_per_gpu_hour": 1.8},
        {"name": "v100-32gb-sxm", "gpu": "v100-32gb-sxm", "nodes": 4, "gpus_per_node": 8, "inter_node_gbps": 100},
    ],
    "between_pools_gbps": 100,
}

PLAN = {
    "format": "hetplan.plan/1", "model": "llama-2-70b", "global_batch": 512, "seq_len": 4096,
    "micro_batch": 1, "precision": "fp16", "zero_stage": 1, "recompute": "selective",
    "sequence_parallel": True, "schedule": "1f1b", "interleave": 1,
    "stages": [
        {"layers": [0, 48], "replicas": [{"pool": "a100", "tp": 8, "samples": 256},
                                         {"pool": "a100", "tp": 8, "samples": 256}]},
        {"layers": [48, 80], "replicas": [{"pool": "v100-32gb-sxm", "tp": 8, "samples": 128} for _ in range(4)]},
    ],
}


def edited(data, path, value):
    """A deep copy of `data` with the item at `path` (a tuple of keys/indices) set, or deleted if value is DELETE."""
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()


# ----------------------------------------------------------------------------- examples

@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_every_example_cluster_loads(catalog, path):
    cluster = load_cluster_file(path, catalog)
    assert cluster_from_dict(cluster_to_dict(cluster), catalog) == cluster


def test_example_cluster_sizes(catalog):
    sizes = {p.stem: load_cluster_file(p, catalog) for p in CLUSTER_FILES}
    assert sizes["a100-v100-16"].num_gpus == 16 and len(sizes["a100-v100-16"].pools) == 2
    assert sizes["h100-a100-v100-64"].num_gpus == 64
    assert len({p.gpu.id for p in sizes["h100-a100-v100-64"].pools}) == 3
    for name, total in (("cloud-4types-1024", 1024), ("big-4types-4096", 4096)):
        assert sizes[name].num_gpus == total and len({p.gpu.id for p in sizes[name].pools}) == 4
    assert sizes["single-node-8"].num_gpus <= 8 and all(p.nodes == 1 for p in sizes["single-node-8"].pools)


@pytest.mark.parametrize("path", PLAN_FILES, ids=lambda p: p.name)
def test_every_example_plan_loads_and_fits_its_cluster(catalog, path):
    plan = load_plan_file(path, catalog)
    cluster = load_cluster_file(EXAMPLES / PLAN_CLUSTER[path.name], catalog)
    check_plan_against_cluster(plan, cluster)
    assert plan_from_dict(json.loads(plan_to_json(plan)), catalog) == plan


def test_small_example_has_uneven_shares_across_gpu_types(catalog):
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    assert plan.num_gpus <= 8 and 2 <= plan.num_stages <= 3
    assert len({s.num_layers for s in plan.stages}) > 1
    assert [r.samples for r in plan.stages[0].replicas] == [40, 24]
    assert [r.samples for r in plan.stages[1].replicas] == [24, 20, 20]   # even split in micro-batches of 4


# ----------------------------------------------------------------------------- cluster

def test_cluster_round_trip(catalog):
    cluster = cluster_from_dict(LAB_MIX, catalog)
    assert cluster_to_dict(cluster) == LAB_MIX
    assert cluster_from_dict(yaml.safe_load(cluster_to_yaml(cluster)), catalog) == cluster


def test_cluster_units_and_defaults(catalog):
    cluster = cluster_from_dict({"pools": [{"gpu": "t4", "nodes": 1, "gpus_per_node": 4}]}, catalog)
    pool = cluster.pools[0]
    assert pool.name == "t4" and pool.inter_node_bw_bytes_per_s == 100e9 / 8
    assert pool.price_per_gpu_hour_usd == catalog.gpus["t4"].price_per_hour_usd
    lab = cluster_from_dict(LAB_MIX, catalog)
    assert lab.pools[0].inter_node_bw_bytes_per_s == 25e9 and lab.pools[0].price_per_gpu_hour_usd == 1.8
    assert lab.between_pools_bw_bytes_per_s == 12.5e9


@pytest.mark.parametrize("path,value,field,match", [
    (("pools", 0, "nodes"), 0, "pools[0].nodes", "positive"),
    (("pools", 1, "gpus_per_node"), 65, "pools[1].gpus_per_node", "at most 64"),
    (("pools", 0, "nodes"), 20_000, "pools[0].nodes", "limit is 100,000"),
    (("pools", 0, "gpu"), "a100-80gb", "pools[0].gpu", "did you mean 'a100-80gb-sxm'"),
    (("pools", 0, "colour"), "red", "pools[0].colour", "unknown key"),
    (("pools", 0, "inter_node_gbps"), DELETE, "pools[0].inter_node_gbps", "required when nodes > 1"),
    (("pools", 0, "inter_node_gbps"), -1, "pools[0].inter_node_gbps", "positive"),
    (("pools", 0, "price_per_gpu_hour"), -1, "pools[0].price_per_gpu_hour", "zero or more"),
    (("pools", 0, "nodes"), "2", "pools[0].nodes", "whole number"),
    (("pools", 1, "name"), "a100", "pools", "unique"),
    (("pools",), [], "pools", "at least 1"),
    (("pools",), [LAB_MIX["pools"][1]] * 65, "pools", "at most 64"),
    (("between_pools_gbps",), 0, "between_pools_gbps", "positive"),
    (("speed",), 1, "speed", "unknown key"),
])
def test_bad_cluster_names_field(catalog, path, value, field, match):
    with pytest.raises(InputError, match=match) as e:
        cluster_from_dict(edited(LAB_MIX, path, value), catalog, source="lab.yaml")
    assert e.value.field == f"lab.yaml: {field}"


def test_cluster_file_errors(catalog, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: x\npools:\n  - gpu: t4\n    nodes: [1\n")
    with pytest.raises(InputError, match="c.yaml: invalid YAML at line"):
        load_cluster_file(bad, catalog)
    with pytest.raises(InputError, match="file not found"):
        load_cluster_file(tmp_path / "none.yaml", catalog)


def test_cluster_with_user_gpu(catalog, tmp_path):
    extra = tmp_path / "g.yaml"
    extra.write_text(yaml.safe_dump({"gpus": {"npu-1": {
        "name": "NPU", "bf16_fp16_tflops": 100, "fp32_tflops": 10, "bf16": True, "memory_gib": 32,
        "memory_bw_gb_s": 800, "link": "pcie", "link_gb_s_per_direction": 32, "pcie_gen": 4,
        "power_w": 200, "price_per_gpu_hour": 1}}}))
    extended = load_catalog([extra])
    cluster = cluster_from_dict({"pools": [{"gpu": "npu-1", "nodes": 1, "gpus_per_node": 2}]}, extended)
    assert cluster.pools[0].gpu.peak_flops == 100e12
    with pytest.raises(InputError, match="unknown GPU 'npu-1'"):
        cluster_from_dict({"pools": [{"gpu": "npu-1", "nodes": 1, "gpus_per_node": 2}]}, catalog)


gbps = st.sampled_from([10, 25, 40, 50, 100, 200, 400, 800, 1600, 3200, 12.5])
pool_dicts = st.fixed_dictionaries(
    {"gpu": st.sampled_from(sorted(load_catalog().gpus)),
     "nodes": st.integers(1, 256),
     "gpus_per_node": st.sampled_from([1, 2, 4, 8, 16]),
     "inter_node_gbps": gbps},
    optional={"price_per_gpu_hour": st.floats(0, 50, allow_nan=False).map(lambda x: round(x, 2))})


@settings(max_examples=200, deadline=None)
@given(pools=st.lists(pool_dicts, min_size=1, max_size=6),
       between=st.one_of(st.none(), gbps), name=st.text(min_size=1, max_size=20))
def test_random_clusters_round_trip(pools, between, name):
    catalog = load_catalog()
    data = {"name": name, "pools": [dict(p, name=f"p{i}") for i, p in enumerate(pools)]}
    if between is not None:
        data["between_pools_gbps"] = between
    cluster = cluster_from_dict(data, catalog)
    assert cluster.num_gpus == sum(p["nodes"] * p["gpus_per_node"] for p in pools)
    again = cluster_from_dict(cluster_to_dict(cluster), catalog)
    assert again == cluster
    assert cluster_to_dict(again) == cluster_to_dict(cluster)
    assert cluster_from_dict(yaml.safe_load(cluster_to_yaml(cluster)), catalog) == cluster


# ----------------------------------------------------------------------------- plan

def test_plan_round_trip(catalog):
    plan = plan_from_dict(PLAN, catalog)
    assert plan.model is catalog.models["llama-2-70b"] and plan.precision == Precision.FP16
    assert plan_to_dict(plan) == PLAN
    assert plan_from_dict(json.loads(plan_to_json(plan)), catalog) == plan


def test_plan_defaults(catalog):
    minimal = {"model": "gpt3-1.3b", "global_batch": 10, "seq_len": 2048, "precision": "bf16",
               "stages": [{"layers": [0, 24], "replicas": [{"pool": "a", "tp": 1}] * 3}]}
    plan = plan_from_dict(minimal, catalog)
    assert (plan.micro_batch, plan.zero_stage, plan.recompute.value, plan.sequence_parallel,
            plan.schedule.value, plan.interleave) == (1, 0, "none", False, "1f1b", 1)
    assert [r.samples for r in plan.stages[0].replicas] == [4, 3, 3]   # remainder one each to the first


def test_default_samples_share_what_others_leave(catalog):
    data = edited(PLAN, ("stages", 1, "replicas"),
                  [{"pool": "v", "tp": 8, "samples": 200}, {"pool": "v", "tp": 8}, {"pool": "v", "tp": 8}])
    plan = plan_from_dict(data, catalog)
    assert [r.samples for r in plan.stages[1].replicas] == [200, 156, 156]


def test_inline_model_round_trip(catalog):
    tiny = {"id": "tiny", "name": "Tiny", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2,
            "ffn": 256, "vocab": 1000}
    data = {"model": tiny, "global_batch": 4, "seq_len": 128, "precision": "bf16",
            "stages": [{"layers": [0, 4], "replicas": [{"pool": "a", "tp": 1}]}]}
    plan = plan_from_dict(data, catalog)
    assert plan.model.id == "tiny" and plan.model.kv_heads == 2
    written = plan_to_dict(plan)
    assert isinstance(written["model"], dict) and written["model"]["id"] == "tiny"
    assert plan_from_dict(written, catalog) == plan
    anonymous = plan_from_dict(edited(data, ("model", "id"), DELETE), catalog)
    assert anonymous.model.id == "custom"


def test_changed_catalog_model_is_written_inline(catalog):
    import dataclasses
    plan = plan_from_dict(PLAN, catalog)
    changed = dataclasses.replace(plan, model=dataclasses.replace(plan.model, vocab=32001))
    assert plan_to_dict(changed)["model"]["vocab"] == 32001


def test_metrics_name_notes_ignored_on_load(catalog):
    data = dict(PLAN, metrics={"tokens_per_s": 1e5}, name="x", notes="y")
    assert plan_from_dict(data, catalog) == plan_from_dict(PLAN, catalog)
    plan = plan_from_dict(PLAN, catalog)
    assert json.loads(plan_to_json(plan, metrics={"mfu": 0.4}))["metrics"] == {"mfu": 0.4}


def test_missing_format_is_assumed(catalog):
    assert plan_from_dict(edited(PLAN, ("format",), DELETE), catalog) == plan_from_dict(PLAN, catalog)


@pytest.mark.parametrize("path,value,field,match", [
    (("format",), "hetplan.plan/2", "format", r"supported: \['hetplan.plan/1'\]"),
    (("model",), "llama-2-7", "model", "did you mean"),
    (("model",), 7, "model", "catalog model id or an object"),
    (("model",), {"layers": 2}, "model.hidden", "required"),
    (("model",), {"name": "x", "layers": 2, "hidden": 10, "heads": 3, "kv_heads": 3, "ffn": 4, "vocab": 5},
     "model.hidden", "divisible"),
    (("global_batch",), 0, "global_batch", "positive"),
    (("precision",), "fp4", "precision", "one of"),
    (("zero_stage",), 4, "zero_stage", "one of"),
    (("schedule",), "zb", "schedule", "one of"),
    (("recompute",), "some", "recompute", "one of"),
    (("bogus",), 1, "bogus", "unknown key"),
    (("stages",), [], "stages", "at least 1"),
    (("stages", 1, "replicas", 0, "tp"), 0, "stages[1].replicas[0].tp", "positive"),
    (("stages", 1, "replicas", 0, "tp"), 2.5, "stages[1].replicas[0].tp", "whole number"),
    (("stages", 1, "replicas", 0, "samples"), 0, "stages[1].replicas[0].samples", "positive"),
    (("stages", 1, "replicas", 0, "extra"), 0, "stages[1].replicas[0].extra", "unknown key"),
    (("stages", 1, "replicas"), [], "stages[1].replicas", "at least 1"),
    (("stages", 1, "layers"), [48], "stages[1].layers", "at least 2"),
    (("stages", 1, "layers"), [50, 80], "stages[1].layers", "previous stage ends at 48"),
    (("stages", 1, "layers"), [48, 79], "stages[1].layers", "80 layers"),
    (("stages", 1, "layers"), [48, 48], "stages[1].layers", "start < end"),
    (("stages", 0, "replicas", 0, "samples"), 255, "stages[0].replicas", "add up to 511"),
    (("micro_batch",), 3, "stages[0].replicas[0].samples", "micro-batches of 3"),
    (("interleave",), 3, "stages[1].layers", "32 layers do not split into 3"),
])
def test_bad_plan_names_field(catalog, path, value, field, match):
    with pytest.raises(InputError, match=match) as e:
        plan_from_dict(edited(PLAN, path, value), catalog, source="p.json")
    assert e.value.field == f"p.json: {field}"


def test_default_samples_refuses_empty_replica(catalog):
    data = edited(PLAN, ("stages", 1, "replicas"),
                  [{"pool": "v", "tp": 8, "samples": 511}, {"pool": "v", "tp": 8}, {"pool": "v", "tp": 8}])
    with pytest.raises(InputError, match="some would get none") as e:
        plan_from_dict(data, catalog, source="p.json")
    assert e.value.field == "p.json: stages[1].replicas"


def test_plan_file_errors(catalog, tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"model": "gpt3-1.3b",\n "global_batch": }')
    with pytest.raises(InputError, match=r"p.json: invalid JSON at line 2"):
        load_plan_file(bad, catalog)


# ----------------------------------------------------------------------------- plan against cluster

@pytest.fixture(scope="module")
def lab(catalog):
    return cluster_from_dict(LAB_MIX, catalog)


def test_plan_fits_cluster(catalog, lab):
    check_plan_against_cluster(plan_from_dict(PLAN, catalog), lab)


@pytest.mark.parametrize("path,value,field,match", [
    (("stages", 1, "replicas", 2, "pool"), "h100", "stages[1].replicas[2].pool",
     r"unknown pool 'h100'; the cluster has \['a100', 'v100-32gb-sxm'\]"),
    (("stages", 0, "replicas", 0, "tp"), 16, "stages[0].replicas[0].tp", "divide the 8 GPUs per node"),
    (("stages", 0, "replicas", 0, "tp"), 3, "stages[0].replicas[0].tp", "tp 3 does not divide"),   # the model first
    (("stages", 1, "replicas", 0, "pool"), "a100", "stages",
     "plan uses 24 GPUs of pool 'a100' but it has 16"),
    (("precision",), "bf16", "stages[1].replicas[0]", "v100-32gb-sxm has no bf16; use precision fp16"),
])
def test_plan_against_cluster_errors(catalog, lab, path, value, field, match):
    with pytest.raises(InputError, match=match) as e:    # the plan's own checks, then the cluster's
        check_plan_against_cluster(plan_from_dict(edited(PLAN, path, value), catalog), lab)
    assert e.value.field.removeprefix("plan: ") == field
