"""Exported files parse, and say what the plan says (layer split, tp, pp, batch, ZeRO, recompute)."""
from __future__ import annotations

import argparse
import json
import shlex
import tomllib
from pathlib import Path

import pytest

from catalog.formats import load_cluster_file, load_plan_file, plan_from_dict
from planner.cli import main
from planner.export import export_plan, export_result
from planner.export.megatron import layout_string

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture()
def cluster(catalog):
    return load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)


def _uniform(catalog, **extra):
    """4 stages of 5/7/9/3 layers, tp 2, one replica each: every engine can run it."""
    data = {"model": "llama-2-7b", "global_batch": 16, "seq_len": 4096, "micro_batch": 1, "precision": "bf16",
            "zero_stage": 1, "recompute": "selective", "sequence_parallel": True,
            "stages": [{"layers": [a, b], "replicas": [{"pool": pool, "tp": 2}]}
                       for (a, b), pool in zip([(0, 5), (5, 12), (12, 21), (21, 32)],
                                               ["a100", "a100", "rtx-4090", "rtx-4090"])]}
    data.update(extra)
    return plan_from_dict(data, catalog)


def _megatron_args(text: str) -> argparse.Namespace:
    body = text.split("MEGATRON_ARGS=(", 1)[1].split(")", 1)[0]
    tokens = shlex.split(body)
    parser = argparse.ArgumentParser()
    for opt in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
                "--global-batch-size", "--num-layers", "--pipeline-model-parallel-layout", "--recompute-granularity",
                "--num-query-groups", "--normalization", "--position-embedding-type"):
        parser.add_argument(opt)
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--swiglu",
                 "--group-query-attention", "--untie-embeddings-and-output-weights", "--disable-bias-linear"):
        parser.add_argument(flag, action="store_true")
    args, unknown = parser.parse_known_args(tokens)
    return args, unknown


def test_megatron_layout_matches_published_example(catalog):
    plan = _uniform(catalog)
    assert layout_string(plan) == "Et*5|t*7|t*9|t*11L"


def test_megatron_arguments_say_what_the_plan_says(catalog, cluster):
    result = export_result(_uniform(catalog), cluster, "megatron")
    assert result.warnings == () and result.closest_plan is None
    args, unknown = _megatron_args(result.files["megatron_args.sh"])
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == ("2", "4")
    assert (args.micro_batch_size, args.global_batch_size, args.num_layers) == ("1", "16", "32")
    assert args.pipeline_model_parallel_layout == "Et*5|t*7|t*9|t*11L"
    assert args.recompute_granularity == "selective"
    assert args.sequence_parallel and args.use_distributed_optimizer and args.bf16 and args.swiglu
    assert args.normalization == "RMSNorm" and args.position_embedding_type == "rope"
    assert args.untie_embeddings_and_output_weights and args.disable_bias_linear
    assert unknown == ["--hidden-size", "4096", "--ffn-hidden-size", "11008", "--num-attention-heads", "32",
                       "--seq-length", "4096", "--max-position-embeddings", "4096"]


def test_megatron_interleaved_layout_follows_the_round_convention(catalog):
    plan = _uniform(catalog, interleave=1, stages=[
        {"layers": [0, 12], "replicas": [{"pool": "a100", "tp": 2}]},
        {"layers": [12, 32], "replicas": [{"pool": "a100", "tp": 2}]}])
    assert layout_string(plan) == "Et*12|t*20L"
    plan = _uniform(catalog, interleave=2, stages=[
        {"layers": [0, 12], "replicas": [{"pool": "a100", "tp": 2}]},
        {"layers": [12, 32], "replicas": [{"pool": "a100", "tp": 2}]}])
    assert layout_string(plan) == "Et*6|t*10|t*6|t*10L"


def test_torchtitan_toml_parses_and_lists_each_stage_modules(catalog, cluster):
    files = export_plan(_uniform(catalog), cluster, "torchtitan")
    cfg = tomllib.loads(files["torchtitan.toml"])
    par = cfg["parallelism"]
    assert par["pipeline_parallel_degree"] == 4 and par["tensor_parallel_degree"] == 2
    parts = par["module_fqns_per_model_part"]
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == [5, 7, 9, 11]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert cfg["training"]["global_batch_size"] == 16 and cfg["activation_checkpoint"]["mode"] == "selective"


def test_deepspeed_config_and_parts(catalog, cluster):
    files = export_plan(_uniform(catalog), cluster, "deepspeed")
    ds = json.loads(files["ds_config.json"])
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 1
    assert ds["zero_optimization"]["stage"] == 1 and ds["bf16"]["enabled"] is True
    assert json.loads(files["pipeline_parts.json"])["parts"] == [0, 6, 13, 22, 34]
    compile(files["pipeline_module.py"], "pipeline_module.py", "exec")


def test_torchrun_places_every_rank_on_its_pool(catalog, cluster):
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    files = export_plan(plan, cluster, "torchrun")
    hosts = dict(line.split(" slots=") for line in files["hostfile"].splitlines())
    assert hosts == {"a100-0": "4", "rtx-4090-0": "4"}
    ranks = json.loads(files["rank_map.json"])
    assert len(ranks) == plan.num_gpus
    for r in ranks:
        assert plan.stages[r["stage"]].replicas[r["replica"]].pool == r["host"].rsplit("-", 1)[0]
    assert "--nproc-per-node 4" in files["launch.sh"]


@pytest.mark.parametrize("engine", ["megatron", "torchtitan", "deepspeed"])
def test_uneven_plan_warns_and_offers_a_runnable_closest_plan(catalog, cluster, engine):
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    result = export_result(plan, cluster, engine)
    assert any("tensor-parallel degree" in w for w in result.warnings)
    closest = result.closest_plan
    assert closest is not None and result.closest_estimate.iteration_time_s > 0
    assert len({r.tp for s in closest.stages for r in s.replicas}) == 1
    assert len({len(s.replicas) for s in closest.stages}) == 1
    assert [(s.layer_start, s.layer_end) for s in closest.stages] == [(s.layer_start, s.layer_end) for s in plan.stages]
    assert "WARNINGS.txt" in export_plan(plan, cluster, engine)


def test_cli_writes_files_and_closest_plan(tmp_path, capsys):
    out = tmp_path / "megatron"
    code = main(["export", "--cluster", str(EXAMPLES / "single-node-8.yaml"),
                 "--plan", str(EXAMPLES / "plans" / "single-node-8-small.json"), "--to", "megatron", "--out", str(out)])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["closest-plan.json", "megatron_args.sh"]
    assert "closest plan" in capsys.readouterr().err
