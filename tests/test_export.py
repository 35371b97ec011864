"""Exported files parse, and say what the plan says (layer split, tp, pp, batch, ZeRO, recompute)."""
from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import replace
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from catalog.formats import load_cluster_file, load_plan_file, plan_from_dict
from planner.cli import main
from planner.export import export_plan, export_result
from planner.export.megatron import layout_string

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _export_result(plan, cluster, target, **kw):
    """These tests check what the files say of hand-built plans, some of which overflow the small example
    GPUs by the cost model: written with force (the refusal itself: tests/test_hostile.py)."""
    result = export_result(plan, cluster, target, force=True, **kw)
    return replace(result, warnings=tuple(w for w in result.warnings if not w.endswith("written anyway (--force)")))


def _export_plan(plan, cluster, target):
    return export_plan(plan, cluster, target, force=True)


@pytest.fixture()
def cluster(catalog):
    return load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)


def _uniform(catalog, tp=2, **extra):
    """4 stages of 5/7/9/11 layers, tp 2 (DeepSpeed: tp 1), one replica each."""
    data = {"model": "llama-2-7b", "global_batch": 16, "seq_len": 4096, "micro_batch": 1, "precision": "bf16",
            "zero_stage": 1, "recompute": "selective", "sequence_parallel": True,
            "stages": [{"layers": [a, b], "replicas": [{"pool": pool, "tp": tp}]}
                       for (a, b), pool in zip([(0, 5), (5, 12), (12, 21), (21, 32)],
                                               ["a100", "a100", "rtx-4090", "rtx-4090"])]}
    data.update(extra)
    return plan_from_dict(data, catalog)


# Option names and choices as read in NVIDIA/Megatron-LM megatron/training/arguments.py (commit d98e8a6):
# a second copy, kept here on purpose, so that a renamed flag in the exporter fails a test.
MEGATRON_VALUED = {"--num-layers": int, "--hidden-size": int, "--ffn-hidden-size": int, "--num-attention-heads": int,
                   "--seq-length": int, "--max-position-embeddings": int, "--tensor-model-parallel-size": int,
                   "--pipeline-model-parallel-size": int, "--micro-batch-size": int, "--global-batch-size": int,
                   "--pipeline-model-parallel-layout": str, "--num-query-groups": int, "--recompute-num-layers": int,
                   "--ckpt-format": str, "--load": str, "--optimizer-offload-fraction": float,
                   "--context-parallel-size": int,
                   # _add_moe_args (line 3518), TransformerConfig MoE fields (transformer_config.py lines 701-891),
                   # ModelParallelConfig lines 127-130, _add_mla_args
                   "--num-experts": int, "--moe-router-topk": int, "--moe-ffn-hidden-size": int,
                   "--moe-shared-expert-intermediate-size": int, "--moe-layer-freq": str,
                   "--moe-aux-loss-coeff": float, "--expert-model-parallel-size": int,
                   "--expert-tensor-parallel-size": int, "--q-lora-rank": int, "--kv-lora-rank": int,
                   "--qk-head-dim": int, "--qk-pos-emb-head-dim": int, "--v-head-dim": int,
                   # TransformerConfig fields (transformer_config.py lines 188-203, 400; --norm-epsilon by its
                   # argparse_meta), _add_network_size_args lines 2418-2441, _add_mla_args line 3558
                   "--norm-epsilon": float, "--hidden-dropout": float, "--attention-dropout": float,
                   "--init-method-std": float, "--rotary-base": int, "--rope-scaling-factor": float,
                   "--rotary-scaling-factor": float, "--make-vocab-size-divisible-by": int}
MEGATRON_CHOICES = {"--recompute-granularity": ["full", "selective"], "--recompute-method": ["uniform", "block"],
                    "--normalization": ["LayerNorm", "RMSNorm"],
                    "--position-embedding-type": ["learned_absolute", "rope", "mrope", "relative", "none"],
                    "--data-parallel-sharding-strategy": ["no_shard", "optim", "optim_grads", "optim_grads_params"],
                    # type=str, nargs="+", values from its help (lines 3221-3226); one value: every layer
                    "--cp-comm-type": ["p2p", "a2a", "allgather", "a2a+p2p"],
                    "--moe-token-dispatcher-type": ["allgather", "alltoall", "flex"],
                    "--rope-type": ["rope", "yarn"],
                    "--moe-router-load-balancing-type": ["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn",
                                                         "quantile_balancing", "none"]}
MEGATRON_SWITCHES = {"--group-query-attention", "--bf16", "--fp16", "--sequence-parallel", "--use-distributed-optimizer",
                     "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
                     "--overlap-grad-reduce", "--use-megatron-fsdp", "--finetune", "--optimizer-cpu-offload",
                     "--use-precision-aware-optimizer", "--multi-latent-attention", "--use-rope-scaling",
                     "--tp-comm-overlap",   # ModelParallelConfig.tp_comm_overlap (model_parallel_config.py line 265)
                     "--overlap-param-gather"}   # arguments.py line 3148
CHECKPOINT = "/ckpt/base"      # what launch.sh's CHECKPOINT holds in these tests


def _megatron_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for flag, kind in MEGATRON_VALUED.items():
        parser.add_argument(flag, type=kind)
    for flag, choices in MEGATRON_CHOICES.items():
        parser.add_argument(flag, choices=choices)
    for flag in MEGATRON_SWITCHES:
        parser.add_argument(flag, action="store_true")
    return parser


def _megatron_args(text: str) -> argparse.Namespace:
    """The MEGATRON_ARGS array: one option per line, every option a verified Megatron-LM one."""
    lines = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0].splitlines()
    rows = [shlex.split(line) for line in lines]
    for row in rows:
        assert row[0] in MEGATRON_VALUED.keys() | MEGATRON_CHOICES.keys() | MEGATRON_SWITCHES, row
        assert len(row) == (1 if row[0] in MEGATRON_SWITCHES else 2), f"one `--flag value` a line: {row}"
    tokens = [CHECKPOINT if t == "$CHECKPOINT" else t for row in rows for t in row]
    if shutil.which("bash"):   # the file is valid bash and the array holds exactly these words
        out = subprocess.run(["bash", "-c", text + '\nprintf "%s\\n" "${MEGATRON_ARGS[@]}"'],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "CHECKPOINT": CHECKPOINT}).stdout
        assert out.splitlines() == tokens
    return _megatron_parser().parse_args(tokens)


def test_megatron_layout_matches_published_example(catalog):
    plan = _uniform(catalog)
    assert layout_string(plan) == "Et*5|t*7|t*9|t*11L"


def test_megatron_arguments_say_what_the_plan_says(catalog, cluster):
    result = _export_result(_uniform(catalog), cluster, "megatron")
    assert result.warnings == () and result.closest_plan is None
    args = _megatron_args(result.files["megatron_args.sh"])
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (2, 4)
    assert (args.micro_batch_size, args.global_batch_size, args.num_layers) == (1, 16, 32)
    assert args.pipeline_model_parallel_layout == "Et*5|t*7|t*9|t*11L"
    assert args.recompute_granularity == "selective" and args.recompute_method is None
    assert args.sequence_parallel and args.use_distributed_optimizer and args.bf16 and not args.fp16
    assert args.swiglu and args.normalization == "RMSNorm" and args.position_embedding_type == "rope"
    assert args.untie_embeddings_and_output_weights and args.disable_bias_linear and not args.add_qkv_bias
    assert (args.hidden_size, args.ffn_hidden_size, args.num_attention_heads) == (4096, 11008, 32)
    assert (args.seq_length, args.max_position_embeddings) == (4096, 4096)
    assert not args.group_query_attention


def test_megatron_full_recompute_fp16_and_interleaving_parse(catalog, cluster):
    plan = _uniform(catalog, recompute="full", precision="fp16", zero_stage=0, interleave=2, stages=[
        {"layers": [0, 12], "replicas": [{"pool": "a100", "tp": 2}]},
        {"layers": [12, 32], "replicas": [{"pool": "a100", "tp": 2}]}])
    result = _export_result(plan, cluster, "megatron")
    args = _megatron_args(result.files["megatron_args.sh"])
    assert (args.recompute_granularity, args.recompute_method, args.recompute_num_layers) == ("full", "uniform", 1)
    assert args.fp16 and not args.bf16 and not args.use_distributed_optimizer
    # 4 layout parts on pp 2: Megatron infers 2 virtual stages per rank (arguments.py validate_args)
    assert args.pipeline_model_parallel_layout == "Et*6|t*10|t*6|t*10L"
    assert args.pipeline_model_parallel_layout.count("|") + 1 == 2 * args.pipeline_model_parallel_size


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
    result = _export_result(_uniform(catalog, zero_stage=2), cluster, "torchtitan")   # torchtitan: no ZeRO-1
    assert result.closest_plan is None and any("no model definition for llama-2-7b" in n for n in result.notes)
    files = result.files
    cfg = tomllib.loads(files["torchtitan.toml"])
    par = cfg["parallelism"]
    assert par["pipeline_parallel_degree"] == 4 and par["tensor_parallel_degree"] == 2
    parts = par["module_fqns_per_model_part"]
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == [5, 7, 9, 11]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert cfg["training"]["global_batch_size"] == 16 and cfg["activation_checkpoint"]["mode"] == "selective"


# Sections and keys as read in pytorch/torchtitan torchtitan/config/job_config.py (v0.2.2, commit 73a0e69).
TORCHTITAN_KEYS = {
    "job": {"description"},
    "model": {"name", "flavor", "converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "enable_cpu_offload"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "module_fqns_per_model_part", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "context_parallel_degree", "context_parallel_load_balancer"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "checkpoint": {"enable", "initial_load_path", "initial_load_model_only"},
}


def test_torchtitan_keys_are_known_and_values_follow_the_plan(catalog, cluster):
    cfg = tomllib.loads(_export_plan(_uniform(catalog, zero_stage=3), cluster, "torchtitan")["torchtitan.toml"])
    for section, values in cfg.items():
        assert section in TORCHTITAN_KEYS and set(values) <= TORCHTITAN_KEYS[section], (section, set(values))
    par = cfg["parallelism"]
    assert par["pipeline_parallel_schedule"] in ("1F1B", "GPipe", "Interleaved1F1B")
    assert par["data_parallel_shard_degree"] == 1 and par["data_parallel_replicate_degree"] == 1
    assert par["fsdp_reshard_after_forward"] == "always"      # ZeRO-3 under pipelining reshards, said explicitly
    assert cfg["training"]["mixed_precision_param"] in ("bfloat16", "float32")
    assert cfg["training"]["local_batch_size"] == 16 and cfg["training"]["seq_len"] == 4096


def test_torchtitan_has_no_fp16_and_says_so(catalog, cluster):
    result = _export_result(_uniform(catalog, precision="fp16", zero_stage=2), cluster, "torchtitan")
    assert any("fp16" in w for w in result.warnings) and any("fp16" in r for r in result.reasons)
    assert result.closest_plan is not None and result.closest_plan.precision.value == "bf16"
    assert result.closest_plan.engine == "torchtitan"
    assert tomllib.loads(result.files["torchtitan.toml"])["training"]["mixed_precision_param"] == "bfloat16"


# Keys as read in deepspeedai/DeepSpeed docs/_pages/config-json.md (commit 00376da).
DEEPSPEED_KEYS = {"train_batch_size": None, "train_micro_batch_size_per_gpu": None, "gradient_accumulation_steps": None,
                  "zero_optimization": {"stage", "offload_optimizer", "offload_param"}, "bf16": {"enabled"},
                  "fp16": {"enabled"},
                  "activation_checkpointing": {"partition_activations", "cpu_checkpointing",
                                               "contiguous_memory_optimization"}}


def test_deepspeed_keys_are_known(catalog, cluster):
    ds = json.loads(_export_plan(_uniform(catalog, tp=1, recompute="full"), cluster, "deepspeed")["ds_config.json"])
    for key, value in ds.items():
        assert key in DEEPSPEED_KEYS, key
        if isinstance(value, dict):
            assert set(value) <= DEEPSPEED_KEYS[key], (key, set(value))
    assert not (ds["bf16"]["enabled"] and ds["fp16"]["enabled"])


def test_deepspeed_module_sets_parts_and_bounds_like_pipeline_module(catalog, cluster):
    """Run the snippet's _partition_layers against a stand-in with the attributes module.py gives it."""
    files = _export_plan(_uniform(catalog, tp=1, recompute="full"), cluster, "deepspeed")
    parts = json.loads(files["pipeline_parts.json"])["parts"]
    source = files["pipeline_module.py"].replace("from deepspeed.pipe import PipelineModule\n", "")
    source = source.replace("from deepspeed.runtime.pipe.topology import PipeDataParallelTopology\n", "")
    source = source.replace('with open(os.path.join(_HERE, "pipeline_parts.json")) as f:\n    PLAN = json.load(f)',
                            "PLAN = " + files["pipeline_parts.json"].replace("\n", " "))

    class PipelineModule:
        def _set_bounds(self, start=None, stop=None):
            self._local_start, self._local_stop = start, stop

    class Topo:
        def get_dim(self, name):
            return 4

        def get_coord(self, rank):
            return argparse.Namespace(pipe=rank)

    namespace = {"PipelineModule": PipelineModule, "__file__": "pipeline_module.py"}
    exec(compile(source, "pipeline_module.py", "exec"), namespace)
    for stage in range(4):
        module = object.__new__(namespace["PlannedPipelineModule"])
        module._topo, module.global_rank, module._layer_specs = Topo(), stage, [None] * 34
        module._partition_layers()
        assert (module._local_start, module._local_stop) == (parts[stage], parts[stage + 1])


def test_deepspeed_config_and_parts(catalog, cluster):
    files = _export_plan(_uniform(catalog, tp=1, recompute="full"), cluster, "deepspeed")
    ds = json.loads(files["ds_config.json"])
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 1
    assert ds["zero_optimization"]["stage"] == 1 and ds["bf16"]["enabled"] is True
    assert json.loads(files["pipeline_parts.json"])["parts"] == [0, 6, 13, 22, 34]
    assert json.loads(files["pipeline_parts.json"])["num_dp"] == 1
    compile(files["pipeline_module.py"], "pipeline_module.py", "exec")


def test_torchrun_places_every_rank_on_its_pool(catalog, cluster):
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    files = _export_plan(plan, cluster, "torchrun")
    hosts = dict(line.split(" slots=") for line in files["hostfile"].splitlines())
    assert hosts == {"a100-0": "4", "rtx-4090-0": "4"}
    ranks = json.loads(files["rank_map.json"])
    assert len(ranks) == plan.num_gpus
    for r in ranks:
        assert plan.stages[r["stage"]].replicas[r["replica"]].pool == r["host"].rsplit("-", 1)[0]
    assert [r["rank"] for r in ranks] == list(range(plan.num_gpus))
    # options as read in torch 2.13.0 torch/distributed/run.py get_args_parser: a static rendezvous with node ranks
    known = {"--nnodes", "--node-rank", "--nproc-per-node", "--rdzv-backend", "--master-addr", "--master-port"}
    torchrun = files["launch.sh"].split("CUDA_VISIBLE_DEVICES=\"$2\" torchrun", 1)[1].split("&\n", 1)[0]
    words = shlex.split(torchrun.replace("\\\n", " "))
    assert {w for w in words if w.startswith("--") and w != "--rank-map"} == known
    assert words[words.index("--rdzv-backend") + 1] == "static"
    assert 'HOST="${HOST:-$(hostname)}"' in files["launch.sh"]


@pytest.mark.parametrize("engine", ["megatron", "torchtitan", "deepspeed", "flagscale"])
def test_a_plan_the_engine_cannot_run_gets_its_best_plan_from_the_search(catalog, cluster, engine):
    from planner.cost import evaluate
    from planner.engines import get
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    result = _export_result(plan, cluster, engine)
    assert result.reasons and all(r in " ".join(result.warnings) for r in result.reasons)
    best = result.closest_plan
    assert best is not None and best.engine == get(result.profile).name and not get(result.profile).violations(best)
    assert result.exported_plan == best
    est = evaluate(cluster, best)
    assert est.fits and est.iteration_time_s == pytest.approx(result.closest_estimate.iteration_time_s)
    assert "WARNINGS.txt" in _export_plan(plan, cluster, engine)


def test_cli_writes_files_and_closest_plan(tmp_path, capsys):
    out = tmp_path / "megatron"
    code = main(["export", "--cluster", str(EXAMPLES / "single-node-8.yaml"),
                 "--plan", str(EXAMPLES / "plans" / "single-node-8-small.json"), "--to", "megatron", "--out", str(out),
                 "--time-limit", "5"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["closest-plan.json", "hostfile", "launch.sh", "megatron_args.sh"]
    err = capsys.readouterr().err
    assert "Megatron-LM's best plan from the search" in err and "closest-plan.json" in err


# --- job kind and offload ---------------------------------------------------------------------------------

FINETUNE, LORA = {"kind": "full-finetune"}, {"kind": "lora", "lora_rank": 16}


def test_megatron_full_finetune_with_optimizer_offload(catalog, cluster):
    plan = _uniform(catalog, job=FINETUNE, offload="optimizer", engine="megatron")
    result = _export_result(plan, cluster, "megatron")
    assert result.closest_plan is None and result.reasons == ()
    args = _megatron_args(result.files["megatron_args.sh"])
    assert args.load == CHECKPOINT and args.finetune                       # weights only, iteration 0
    assert args.optimizer_cpu_offload and args.optimizer_offload_fraction == 1.0
    assert args.use_precision_aware_optimizer and args.use_distributed_optimizer   # the chain validate_args asks
    launch_sh = result.files["launch.sh"]
    assert launch_sh.index('CHECKPOINT="${CHECKPOINT:?') < launch_sh.index("source ./megatron_args.sh")
    pretrain = _megatron_args(_export_plan(_uniform(catalog), cluster, "megatron")["megatron_args.sh"])
    assert pretrain.load is None and not pretrain.finetune and not pretrain.optimizer_cpu_offload


def test_megatron_refuses_qlora_and_never_replans_it_as_pretraining(catalog, cluster):
    from planner.types import InputError
    plan = _uniform(catalog, job={"kind": "qlora", "lora_rank": 16})
    with pytest.raises(InputError, match="does not run qlora"):
        _export_result(plan, cluster, "megatron", time_limit_s=2)


def test_deepspeed_offload_and_finetune(catalog, cluster):
    plan = _uniform(catalog, tp=1, recompute="full", offload="optimizer", job=FINETUNE, engine="deepspeed")
    result = _export_result(plan, cluster, "deepspeed")
    assert result.closest_plan is None
    zero = json.loads(result.files["ds_config.json"])["zero_optimization"]
    assert zero == {"stage": 1, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert 'export CHECKPOINT="${CHECKPOINT:?' in result.files["launch.sh"]
    assert any("engine.load_checkpoint" in n and "load_module_only=True" in n for n in result.notes)
    one_stage = _uniform(catalog, tp=1, recompute="full", zero_stage=3, offload="optimizer+params", engine="deepspeed",
                         stages=[{"layers": [0, 32], "replicas": [{"pool": "a100", "tp": 1}]}])
    zero = json.loads(_export_plan(one_stage, cluster, "deepspeed")["ds_config.json"])["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"] == zero["offload_optimizer"] == {"device": "cpu",
                                                                                         "pin_memory": True}


def test_torchtitan_toml_states_offload_and_the_checkpoint(catalog, cluster):
    plan = _uniform(catalog, zero_stage=3, offload="optimizer+params", job=FINETUNE, engine="torchtitan")
    result = _export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None
    cfg = tomllib.loads(result.files["torchtitan.toml"])
    for section, values in cfg.items():
        assert section in TORCHTITAN_KEYS and set(values) <= TORCHTITAN_KEYS[section], (section, set(values))
    assert cfg["training"]["enable_cpu_offload"] is True
    assert cfg["checkpoint"] == {"enable": True, "initial_load_path": "/path/to/checkpoint",
                                 "initial_load_model_only": True}
    assert "initial_load_path=path" in result.files["hetplan_torchtitan.py"]
    assert 'export CHECKPOINT="${CHECKPOINT:?' in result.files["launch.sh"]
    compile(result.files["hetplan_torchtitan.py"], "hetplan_torchtitan.py", "exec")


def test_torchtitan_lora_has_no_toml_and_says_so(catalog, cluster):
    plan = _uniform(catalog, zero_stage=2, recompute="none", job=LORA, model="llama-3-8b", engine="torchtitan")
    result = _export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None and "torchtitan.toml" not in result.files
    assert any("0.2.2 has no LoRA" in n for n in result.notes)
    source = result.files["hetplan_torchtitan.py"]
    assert ("LoRAConverter.Config(rank=16, alpha=32.0, target_modules=['wqkv', 'wo', 'w1', 'w2', 'w3'])"
            in source)
    compile(source, "hetplan_torchtitan.py", "exec")


def _flagscale_rows(text: str) -> dict[str, list[str]]:
    lines = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0].splitlines()
    return {row[0]: row[1:] for row in map(shlex.split, lines)}


def test_flagscale_lora_flags(catalog, cluster):
    plan = _uniform(catalog, recompute="none", job=LORA, engine="flagscale")
    result = _export_result(plan, cluster, "flagscale")
    assert result.closest_plan is None
    rows = _flagscale_rows(result.files["flagscale_args.sh"])
    # choices as read in FlagScale's arguments.py.patch _add_peft_args (commit 16a2dd5, patch lines 653-679)
    assert rows["--peft-type"] == ["lora"] and rows["--lora-dim"] == ["16"] and rows["--lora-alpha"] == ["32"]
    assert rows["--lora-target-modules"] == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert rows["--ckpt-format"] == ["torch"] and rows["--load"] == ["$CHECKPOINT"] and rows["--finetune"] == []
    assert not {"--recompute-granularity", "--recompute-method"} & set(rows)    # FlagScale's PEFT refuses recompute
    yaml = result.files["flagscale_train.yaml"]
    assert "    load: ${oc.env:CHECKPOINT}\n" in yaml and "    peft_type: \"lora\"\n" in yaml
    full = _flagscale_rows(_export_plan(_uniform(catalog, job=FINETUNE, engine="flagscale"), cluster,
                                       "flagscale")["flagscale_args.sh"])
    assert full["--load"] == ["$CHECKPOINT"] and "--finetune" in full and "--peft-type" not in full


def test_torchrun_launch_carries_the_job(catalog, cluster):
    import dataclasses
    from planner.types import JobKind, Training
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    for training, checkpoint in ((Training(JobKind.LORA, 8), True), (Training(), False)):
        files = _export_plan(dataclasses.replace(plan, training=training), cluster, "torchrun")
        line = next(x for x in files["launch.sh"].splitlines() if x.startswith("export HETPLAN_JOB="))
        job = json.loads(shlex.split(line.split("=", 1)[1])[0])
        expected = {"kind": "lora", "lora_rank": 8} if training.adapters else {"kind": "pretrain"}
        assert job == {"job": expected, "offload": "none"}
        assert ('CHECKPOINT="${CHECKPOINT:?' in files["launch.sh"]) == checkpoint


def test_a_lora_plan_an_engine_runs_otherwise_keeps_its_job_in_the_closest_plan(catalog, cluster):
    from planner.types import JobKind
    import dataclasses
    from planner.types import Training
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    lora = dataclasses.replace(plan, training=Training(JobKind.LORA, 16))
    result = _export_result(lora, cluster, "torchtitan", time_limit_s=2)
    assert result.closest_plan is not None and result.closest_plan.training == Training(JobKind.LORA, 16)
    assert "LoRAConverter.Config(rank=16" in result.files["hetplan_torchtitan.py"]


# --- context parallelism ----------------------------------------------------------------------------------

H100_NODES = {"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8,
                                      "inter_node_gbps": 400}]}


def _h100(catalog, nodes=2):
    from catalog import cluster_from_dict
    return cluster_from_dict({**H100_NODES, "pools": [{**H100_NODES["pools"][0], "nodes": nodes}]}, catalog)


def _cp_plan(catalog, cp, tp=2, replicas=1, zero_stage=1, engine="megatron", stages=1):
    """Llama 3 8B at 131,072 tokens, `stages` even stages of `replicas` replicas of tp x cp H100s."""
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    model = catalog.model("llama-3-8b")
    per = model.layers // stages
    return Plan(model, replicas, 131072, 1, Precision.BF16,
                tuple(Stage(i * per, (i + 1) * per, tuple(Replica("h100", tp, 1) for _ in range(replicas)))
                      for i in range(stages)),
                zero_stage=zero_stage, recompute=Recompute.FULL, sequence_parallel=tp > 1, context_parallel=cp,
                engine=engine)


def _check_cp_ranks(cluster, plan, ranks: list[tuple[str, int]]):
    """Every rank on its own GPU, inside the slot of the replica its rank names when decomposed tp fastest,
    then cp, then dp, then pp (Megatron-LM 'tp-cp-ep-dp-pp'; torchtitan mesh pp, dp, cp, tp); each tp group
    on one host, on consecutive GPUs."""
    from planner.placement import place
    tp, cp, dp = plan.stages[0].replicas[0].tp, plan.context_parallel, len(plan.stages[0].replicas)
    assert len(ranks) == plan.num_gpus == len(set(ranks))
    slots = place(cluster, plan).slots
    per_node = cluster.pools[0].gpus_per_node
    for rank, (host, gpu) in enumerate(ranks):
        tp_rank, cp_rank, replica, stage = rank % tp, rank // tp % cp, rank // (tp * cp) % dp, rank // (tp * cp * dp)
        slot = slots[(stage, replica)]
        k = cp_rank * tp + tp_rank                      # the replica's k-th GPU
        node = slot.node + (slot.first_gpu + k) // per_node
        assert (host, gpu) == (f"{slot.pool}-{node}", (slot.first_gpu + k) % per_node), (rank, host, gpu, slot)
    for first in range(0, len(ranks), tp):
        group = ranks[first:first + tp]
        assert len({h for h, _ in group}) == 1 and [g for _, g in group] == list(range(group[0][1], group[0][1] + tp))


@pytest.mark.parametrize("cp, tp, replicas, stages", [(2, 2, 1, 1), (8, 2, 1, 1), (2, 8, 1, 1), (2, 2, 2, 2),
                                                      (8, 1, 2, 2), (1, 2, 2, 2)])
def test_megatron_context_parallel_flags_and_ranks(catalog, cp, tp, replicas, stages):
    from planner.export.megatron import launch_env, megatron_ranks
    nodes = max(2, -(-tp * cp * replicas * stages // 8))
    cluster = _h100(catalog, nodes)
    plan = _cp_plan(catalog, cp, tp, replicas, stages=stages)
    result = _export_result(plan, cluster, "megatron")
    assert result.closest_plan is None and result.reasons == ()
    args = _megatron_args(result.files["megatron_args.sh"])
    assert args.context_parallel_size == (cp if cp > 1 else None)
    assert args.cp_comm_type == ("p2p" if cp > 1 else None)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (tp, stages)
    # Megatron's dp = world / (tp x pp x cp) (arguments.py lines 424-448): the launch starts the plan's GPUs
    hosts = dict(line.split(" slots=") for line in result.files["hostfile"].splitlines())
    assert sum(map(int, hosts.values())) == plan.num_gpus == tp * cp * stages * replicas
    assert plan.num_gpus // (tp * stages * cp) == replicas
    _check_cp_ranks(cluster, plan, megatron_ranks(cluster, plan))
    # CUDA_DEVICE_MAX_CONNECTIONS=1 for tp > 1 or cp > 1 (arguments.py lines 1453-1479)
    assert launch_env(plan)[0] == ({"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 or cp > 1 else {})


def test_a_replica_wider_than_a_node_takes_consecutive_whole_nodes(catalog):
    """cp 4: two 4-GPU replicas (tp 1) in stage 0, two 16-GPU ones (tp 4) in stage 1, on 5 nodes. Placement
    puts the wide ones first (by width): nodes 0-1 and 2-3; the narrow ones share node 4."""
    from planner.export.common import replica_gpus
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    model = catalog.model("llama-3-8b")
    cluster = _h100(catalog, 5)
    plan = Plan(model, 2, 131072, 1, Precision.BF16,
                (Stage(0, 16, (Replica("h100", 1, 1), Replica("h100", 1, 1))),
                 Stage(16, 32, (Replica("h100", 4, 1), Replica("h100", 4, 1)))),
                zero_stage=1, recompute=Recompute.FULL, sequence_parallel=True, context_parallel=4, engine="hetplan")
    gpus = replica_gpus(cluster, plan)
    assert gpus[(1, 0)] == [(f"h100-{n}", g) for n in (0, 1) for g in range(8)]
    assert gpus[(1, 1)] == [(f"h100-{n}", g) for n in (2, 3) for g in range(8)]
    assert gpus[(0, 0)] == [("h100-4", g) for g in range(4)] and gpus[(0, 1)] == [("h100-4", g) for g in range(4, 8)]
    every = [g for v in gpus.values() for g in v]
    assert len(every) == len(set(every)) == plan.num_gpus == 40


@pytest.mark.parametrize("cp", [2, 8])
def test_torchtitan_context_parallel_keys_and_ranks(catalog, cp):
    from planner.export.torchtitan import torchtitan_ranks
    cluster = _h100(catalog)
    plan = _cp_plan(catalog, cp, zero_stage=2, engine="torchtitan")
    result = _export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None and result.reasons == ()
    cfg = tomllib.loads(result.files["torchtitan.toml"])
    for section, values in cfg.items():
        assert section in TORCHTITAN_KEYS and set(values) <= TORCHTITAN_KEYS[section], (section, set(values))
    par = cfg["parallelism"]
    assert (par["context_parallel_degree"], par["context_parallel_load_balancer"]) == (cp, "headtail")   # 0.2.2: SDPA
    assert par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"] == 1
    assert cfg["training"]["local_batch_size"] == 1          # the cp ranks of a replica share its samples
    source = result.files["hetplan_torchtitan.py"]
    assert f'"context_parallel_degree": {cp},' in source and '"context_parallel_load_balancer": "ptrr"' in source
    assert any("keys and values" in n for n in result.notes)
    _check_cp_ranks(cluster, plan, torchtitan_ranks(cluster, plan))


def test_torchtitan_has_no_zero_0_with_context_parallelism_and_says_why(catalog):
    """torchtitan shards over cp whenever cp > 1 (FSDP on dp_shard x cp): a ZeRO-0 CP plan is searched again."""
    plan = _cp_plan(catalog, 2, tp=4, zero_stage=0, engine="torchtitan")
    result = _export_result(plan, _h100(catalog), "torchtitan", time_limit_s=2)
    assert any("FSDP on dp_shard x cp" in r for r in result.reasons)
    assert result.closest_plan is not None and result.closest_plan.zero_stage in (2, 3)
    assert result.closest_plan.context_parallel == 2                 # the degree kept where torchtitan has it


@pytest.mark.parametrize("cp", [2, 8])
def test_torchrun_writes_each_ranks_context_parallel_rank(catalog, cp):
    """hetplan's runtime runs context parallelism: the rank map gives every rank its cp rank, tp fastest."""
    plan = replace(_cp_plan(catalog, cp), engine="hetplan")
    result = _export_result(plan, _h100(catalog), "torchrun")
    assert result.closest_plan is None and result.exported_plan == plan
    ranks = json.loads(result.files["rank_map.json"])
    assert len(ranks) == plan.num_gpus and {r["cp"] for r in ranks} == {cp}
    assert sorted((r["cp_rank"], r["tp_rank"]) for r in ranks) == sorted(
        (c, t) for c in range(cp) for t in range(plan.stages[0].replicas[0].tp))


@pytest.mark.parametrize("target", ["flagscale", "deepspeed"])
@pytest.mark.parametrize("cp", [2, 8])
def test_a_context_parallel_plan_to_an_engine_without_it_is_replanned_with_cp_1_or_refused(catalog, target, cp):
    """Refused or replaced by the engine's own plan with context_parallel 1, saying so either way. DeepSpeed
    (no tp here) finds no Llama 3 8B plan for 131,072 tokens on 16 H100s and refuses."""
    from planner.types import InputError
    try:
        result = _export_result(_cp_plan(catalog, cp), _h100(catalog), target, time_limit_s=2)
    except InputError as e:
        assert target == "deepspeed"
        assert re.search(rf"has no context parallelism; the plan splits the sequence over {cp} GPUs.*"
                         r"searched with context_parallel 1", str(e)), str(e)
        return
    assert any("no context parallelism" in r for r in result.reasons)
    assert result.closest_plan is not None and result.closest_plan.context_parallel == 1
    assert any("searched with context_parallel 1" in w for w in result.warnings)


# --- mixture of experts and expert parallelism --------------------------------------------------------------

MOE_FLAGS = ("--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq",
             "--expert-model-parallel-size", "--moe-token-dispatcher-type", "--multi-latent-attention")


def _ep_plan(catalog, model_id="mixtral-8x7b", engine="megatron", ep=2):
    """The search's best plan with expert_parallel fixed at `ep` on two 8-GPU H100 nodes."""
    from planner.search import SearchOptions, search
    from planner.types import Job
    cluster = _h100(catalog)
    job = Job(catalog.model(model_id), 32, 4096, engine=engine, expert_parallel=ep)
    plan = search(cluster, job, baselines=False, expert_parallel="fixed", options=SearchOptions(time_limit_s=5)).plans[0].plan
    assert plan.expert_parallel == ep
    return cluster, plan


def _pattern(expression: str, layers: int) -> list[int]:
    """--moe-layer-freq as Megatron reads it: arguments.py moe_freq_type and _eval_pattern (lines 245-350),
    gpt_layer_specs.py lines 647-657 (an int N: layers i with i % N == 0)."""
    if "[" not in expression:
        return [int(i % int(expression) == 0) for i in range(layers)]
    assert not re.search(r"[^,\d\[\]\(\)\+\*]", expression), expression
    return eval(expression)   # noqa: S307 - Megatron's own parser evaluates it the same way


def test_megatron_mixtral_with_expert_parallelism_has_the_moe_and_ep_flags(catalog):
    cluster, plan = _ep_plan(catalog)
    result = _export_result(plan, cluster, "megatron")
    assert result.closest_plan is None and not result.reasons
    args = _megatron_args(result.files["megatron_args.sh"])
    tp = plan.stages[0].replicas[0].tp
    assert (args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size) == (8, 2, 14336)
    assert _pattern(args.moe_layer_freq, 32) == [1] * 32
    assert args.moe_shared_expert_intermediate_size is None and not args.multi_latent_attention
    assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == (2, tp)
    assert args.moe_token_dispatcher_type == "alltoall"
    assert args.num_experts % args.expert_model_parallel_size == 0           # validate_args lines 1655-1658
    dp = len(plan.stages[0].replicas)
    # parallel_state.py lines 872-905: per stage etp x ep divides tp x cp x dp
    assert (tp * plan.context_parallel * dp) % (args.expert_tensor_parallel_size * args.expert_model_parallel_size) == 0
    assert any("expert parallelism 2" in n for n in result.notes)


def test_megatron_dense_plan_has_no_moe_flags(catalog, cluster):
    text = _export_plan(_uniform(catalog), cluster, "megatron")["megatron_args.sh"]
    assert not [f for f in MOE_FLAGS if f in text]


def test_megatron_moe_without_expert_parallelism_has_no_ep_flags(catalog):
    cluster, plan = _ep_plan(catalog, ep=1)
    text = _export_plan(plan, cluster, "megatron")["megatron_args.sh"]
    args = _megatron_args(text)
    assert args.num_experts == 8 and args.expert_model_parallel_size is None
    assert args.moe_token_dispatcher_type is None          # Megatron's default allgather


def _deepseek_plan(catalog, **changes):
    """DeepSeek-V3 (or a variant) in two 8-way tensor-parallel stages on 16 H100s (not checked for memory:
    the export's flags only)."""
    from dataclasses import replace
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    model = replace(catalog.model("deepseek-v3"), **changes)
    half = model.layers // 2
    return Plan(model, 16, 4096, 1, Precision.BF16,
                (Stage(0, half, (Replica("h100", 8, 16),)), Stage(half, model.layers, (Replica("h100", 8, 16),))),
                zero_stage=1, recompute=Recompute.FULL, sequence_parallel=True, engine="megatron")


def test_megatron_deepseek_v3_dense_layers_become_the_layer_pattern(catalog):
    plan = _deepseek_plan(catalog)
    args = _megatron_args(_export_plan(plan, _h100(catalog), "megatron")["megatron_args.sh"])
    assert args.moe_layer_freq == "([0]*3+[1]*58)"
    assert _pattern(args.moe_layer_freq, 61) == [0] * 3 + [1] * 58
    assert (args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size, args.ffn_hidden_size) == (256, 8, 2048, 18432)
    assert args.moe_shared_expert_intermediate_size == 2048
    assert args.multi_latent_attention and (args.q_lora_rank, args.kv_lora_rank) == (1536, 512)
    assert (args.qk_head_dim, args.qk_pos_emb_head_dim, args.v_head_dim) == (128, 64, 128)
    assert not args.group_query_attention      # exclusive with MLA (validate_args lines 1973-1974)


@pytest.mark.parametrize("dense, every", [(0, 2), (3, 2), (1, 3), (0, 1), (5, 1)])
def test_megatron_layer_pattern_has_the_models_moe_layers(catalog, dense, every):
    from planner.export.megatron import moe_layer_freq, moe_layer_pattern
    model = _deepseek_plan(catalog, dense_layers=dense, moe_every=every).model
    pattern = _pattern(moe_layer_freq(model), model.layers)
    assert pattern == moe_layer_pattern(model) and sum(pattern) == model.moe_layers
    assert pattern[:dense] == [0] * dense


@pytest.mark.parametrize("target", ["deepspeed", "flagscale", "torchrun"])
def test_an_expert_parallel_plan_to_an_engine_without_it_is_replanned_with_ep_1_or_refused(catalog, target):
    from planner.types import InputError
    cluster, plan = _ep_plan(catalog)
    try:
        result = _export_result(plan, cluster, target, time_limit_s=2)
    except InputError as e:
        assert re.search(r"has no expert parallelism; the plan shards the experts over 2 replicas", str(e)), str(e)
        return
    assert any("has no expert parallelism" in r for r in result.reasons)
    assert result.closest_plan is not None and result.closest_plan.expert_parallel == 1
    assert any("searched with expert_parallel 1" in w for w in result.warnings)
    if target == "flagscale":     # the replacement still describes a mixture-of-experts model
        assert any("--num-experts 8" in text for text in result.files.values())


def test_torchtitan_writes_expert_parallel_degree_in_both_forms(catalog):
    cluster, plan = _ep_plan(catalog, "qwen3-30b-a3b", "torchtitan")
    result = _export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None
    toml = tomllib.loads(result.files["torchtitan.toml"])
    tp = plan.stages[0].replicas[0].tp
    assert (toml["model"]["name"], toml["model"]["flavor"]) == ("qwen3", "30B-A3B")
    assert toml["parallelism"]["expert_parallel_degree"] == 2
    assert toml["parallelism"]["expert_tensor_parallel_degree"] == tp
    py = result.files["hetplan_torchtitan.py"]
    assert '"expert_parallel_degree": 2' in py and "from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b" in py


def test_torchtitan_mixtral_has_no_model_and_says_why(catalog):
    cluster, plan = _ep_plan(catalog, "mixtral-8x7b", "torchtitan")
    result = _export_result(plan, cluster, "torchtitan")
    assert any("MoE models only in its own families" in n and "mixtral-8x7b" in n for n in result.notes)
    assert "CUSTOM_MODEL_CONFIG" in result.files["hetplan_torchtitan.py"]


def test_torchtitan_refuses_expert_parallelism_without_fsdp(catalog):
    from dataclasses import replace
    from planner.export.torchtitan import limits
    from planner.types import Offload
    cluster, plan = _ep_plan(catalog, "qwen3-30b-a3b", "torchtitan")
    assert plan.zero_stage >= 2 and limits(plan, cluster) == []
    replicated = replace(plan, zero_stage=0, offload=Offload.NONE)
    assert any("never from dp_replicate" in r for r in limits(replicated, cluster))


# --- the model's architecture beyond its shapes reaches every engine's config ----------------------------------

def _one_stage_plan(model, tp: int = 1, engine: str = "megatron"):
    from planner.types import Plan, Precision, Replica, Stage
    return Plan(model, 8, 4096, 1, Precision.BF16, (Stage(0, model.layers, (Replica("a100", tp, 8),)),),
                engine=engine)


def _megatron_padded_vocab(vocab: int, args) -> int:
    """megatron/training/vocab_utils.py line 58 (d98e8a6): padded to divisible-by x tp."""
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return -(-vocab // multiple) * multiple


@pytest.mark.parametrize("tool", ["megatron", "flagscale"])
def test_megatron_and_flagscale_state_every_architectural_field_of_every_catalog_model(catalog, tool):
    """RoPE base and scaling, norm epsilon, dropout, init std, tied embeddings and the vocabulary (as Megatron
    pads it) read back through Megatron's argument definitions equal the catalog's, for every catalog model:
    Megatron's defaults (RoPE base 10000, dropout 0.1) are not Llama 3's (500000, 0)."""
    from planner.export import flagscale, megatron
    writer = megatron if tool == "megatron" else flagscale
    for model in catalog.models.values():
        for tp in (1, 2, 8):
            if model.heads % tp or model.kv_heads % tp and model.kv_heads > tp:
                continue
            words = [w for a in writer.arguments(_one_stage_plan(model, tp)) for w in a]
            args = _megatron_parser().parse_known_args(words)[0]     # FlagScale adds its --hetero-* flags
            assert (args.norm_epsilon, args.hidden_dropout, args.attention_dropout, args.init_method_std) == \
                (model.norm_eps, model.hidden_dropout, model.attention_dropout, model.init_std), model.id
            assert args.untie_embeddings_and_output_weights == (not model.tied_embeddings)
            if model.position.value == "rope":
                assert args.rotary_base == model.rope_theta, model.id
            assert args.use_rope_scaling == (model.rope_scaling == "llama3")
            if model.rope_scaling == "llama3":
                assert args.rope_scaling_factor == model.rope_scaling_factor
            if model.rope_scaling == "yarn":
                assert (args.rope_type, args.rotary_scaling_factor) == ("yarn", model.rope_scaling_factor)
            if model.vocab % tp == 0:
                assert _megatron_padded_vocab(model.vocab, args) == model.vocab, (model.id, tp)
            else:
                assert _megatron_padded_vocab(model.vocab, args) - model.vocab < tp, (model.id, tp)
    llama3 = catalog.models["llama-3-8b"]
    assert (llama3.rope_theta, llama3.hidden_dropout, llama3.attention_dropout) == (500000, 0, 0)
    assert catalog.models["mixtral-8x7b"].rope_theta == 1e6 and catalog.models["llama-2-7b"].rope_theta == 10000


# --- FlagScale: what its runner makes of the runner YAML, and what launch.sh exports -----------------------------

def _flagscale_runner_args(yaml_text: str, env: dict[str, str], exp_dir: str) -> list[str]:
    """The train_gpt.py words FlagScale's runner builds from the YAML, step by step as its code does (a second
    reading, kept here on purpose; flagos-ai/FlagScale@16a2dd5 flagscale/runner/runner_train.py):
    resolve `${oc.env:X}` (OmegaConf.to_container(resolve=True), line 36); _update_config_train (lines 97-146)
    sets train.system.checkpoint.load to the experiment's checkpoints folder unless given there, and .save
    likewise; _get_args_megatron (lines 30-48) merges system, model and data and flattens them with
    flatten_dict_to_args (utils.py lines 271-290): `_` -> `-`, a dict's keys in place, a list after its flag,
    true as a bare flag, ignoring log_dir, details_dir, scripts_dir and pids_dir."""
    import re
    import yaml
    config = yaml.safe_load(re.sub(r"\$\{oc\.env:(\w+)\}", lambda m: env[m.group(1)], yaml_text))
    system = config["train"]["system"]
    checkpoint = system.setdefault("checkpoint", {})
    checkpoint["save"] = os.path.abspath(checkpoint.get("save") or os.path.join(exp_dir, "checkpoints"))
    checkpoint["load"] = os.path.abspath(checkpoint.get("load") or os.path.join(exp_dir, "checkpoints"))
    merged = {**system, **(config["train"]["model"] or {}), **(config["train"]["data"] or {})}

    def flatten(d):
        out = []
        for key, value in d.items():
            if key in ("log_dir", "details_dir", "scripts_dir", "pids_dir"):
                continue
            key = key.replace("_", "-")
            if isinstance(value, dict):
                out += flatten(value)
            elif isinstance(value, list):
                out += [f"--{key}", *map(str, value)]
            elif isinstance(value, bool):
                out += [f"--{key}"] if value else []
            else:
                out += [f"--{key}", str(value)]
        return out
    return flatten(merged)


def test_flagscale_runner_fine_tunes_from_the_checkpoint_not_an_empty_folder(catalog, cluster):
    """Fine-tuning through FlagScale's runner: exactly one --load, the checkpoint (a flat `load` was followed
    by the runner's own checkpoint.load, the empty experiment folder, which argparse kept: random weights)."""
    for job in (FINETUNE, LORA):
        plan = _uniform(catalog, recompute="none", job=job, engine="flagscale")
        yaml_text = _export_result(plan, cluster, "flagscale").files["flagscale_train.yaml"]
        words = _flagscale_runner_args(yaml_text, {"CHECKPOINT": "/ckpt/base"}, "/exp")
        assert words.count("--load") == 1 and words[words.index("--load") + 1] == "/ckpt/base", job
        assert "--finetune" in words
        parsed = _megatron_parser().parse_known_args(words)[0]
        assert parsed.load == "/ckpt/base" and parsed.finetune
    pretrain = _export_result(_uniform(catalog, engine="flagscale"), cluster, "flagscale").files["flagscale_train.yaml"]
    words = _flagscale_runner_args(pretrain, {}, "/exp")
    assert words[words.index("--load") + 1] == "/exp/checkpoints" and "--finetune" not in words


def test_flagscale_launch_sets_pythonpath_as_its_runner_does(catalog, cluster, tmp_path):
    """FlagScale's runner exports its root and its Megatron-LM submodule (runner_train.py lines 253, 272)."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash to run launch.sh")
    files = _export_result(_uniform(catalog, engine="flagscale"), cluster, "flagscale").files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "torchrun").write_text('#!/usr/bin/env bash\necho "PYTHONPATH=$PYTHONPATH" >> "$STUB_LOG"\n')
    (stub / "torchrun").chmod(0o755)
    host = files["hostfile"].split()[0]
    log = tmp_path / "log"
    subprocess.run(["bash", str(tmp_path / "launch.sh")], check=True,
                   env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "HOST": host, "STUB_LOG": str(log),
                        "FLAGSCALE_DIR": "/opt/FlagScale", "PYTHONPATH": "/mine"})
    paths = {line.split("=", 1)[1] for line in log.read_text().splitlines()}
    assert paths == {"/opt/FlagScale:/opt/FlagScale/third_party/Megatron-LM:/mine"}


def test_flagscale_runner_yaml_names_the_hostfile_in_the_export_folder(tmp_path, capsys):
    """FlagScale's runner opens `hostfile` from where run.py starts (runner_train.py line 407): the file
    export --out writes names it by its absolute path."""
    out = tmp_path / "rel" / "fs"
    plan = str(EXAMPLES / "plans" / "single-node-8-small.json")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["export", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--plan", plan, "--to",
                     "flagscale", "--out", "rel/fs"]) == 0
    finally:
        os.chdir(cwd)
    import yaml
    config = yaml.safe_load((out / "flagscale_train.yaml").read_text())
    assert config["experiment"]["runner"]["hostfile"] == str(out / "hostfile") and (out / "hostfile").is_file()


def test_every_file_a_writer_writes_is_in_its_files(catalog, cluster):
    """export --out checks each writer's FILES before the search: they must cover what it writes."""
    from planner.export import ENGINES, possible_files
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    for target in ENGINES:
        if not possible_files(target):
            continue
        for p in (plan, _uniform(catalog, engine="flagscale"), _uniform(catalog, tp=1)):
            try:
                files = _export_result(p, cluster, target, time_limit_s=2).files
            except ValueError:
                continue
            assert set(files) <= set(possible_files(target)), (target, set(files) - set(possible_files(target)))
