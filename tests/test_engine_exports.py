"""Exports checked against the engines: plans searched for an engine export exactly, alternatives fit,
launch scripts pin every rank to its planned GPU, and the engines' own config classes load the files
where they install (DeepSpeed's DeepSpeedConfig, torchtitan's ConfigManager; skipped with the reason
where they do not). Megatron-LM and FlagScale cannot install here: benchmarks/check_exports.py runs
their argument validation from the fetched sources (docs/exports.md).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.formats import load_cluster_file
from planner.cost import evaluate
from planner.engines import ENGINES, get
from planner.engines.matrix import markdown
from planner.export import export_result
from planner.export.common import engine_for
from planner.search import SearchOptions, search
from planner.types import Job

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CLUSTERS = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
BIG = {"big-4types-4096", "cloud-4types-1024"}
TARGETS = ("megatron", "deepspeed", "torchtitan", "flagscale", "fsdp", "megatron-deepspeed")


def _job(catalog, cluster_name: str, engine: str) -> Job:
    model = catalog.models["llama-3-70b" if cluster_name in BIG else "llama-3-8b"]
    return Job(model, 256, 4096, engine=engine)


def _limit(cluster_name: str) -> float:
    return 4.0 if cluster_name in BIG else 2.0


def _params(cluster_names):
    return [pytest.param(c, marks=pytest.mark.slow) if c in BIG else c for c in cluster_names]


@pytest.mark.parametrize("cluster_name", _params(CLUSTERS))
def test_each_engine_plan_is_one_it_runs_and_exports_exactly(catalog, cluster_name):
    cluster = load_cluster_file(EXAMPLES / f"{cluster_name}.yaml", catalog)
    for target in TARGETS:
        engine = engine_for(target)
        result = search(cluster, _job(catalog, cluster_name, engine.name), baselines=False,
                        options=SearchOptions(time_limit_s=_limit(cluster_name)))
        for scored in result.plans:
            assert scored.plan.engine == engine.name and not engine.violations(scored.plan), (target, scored.plan)
        exported = export_result(result.plans[0].plan, cluster, target)
        assert exported.closest_plan is None and exported.reasons == (), (cluster_name, target, exported.reasons)
        assert exported.exported_plan == result.plans[0].plan


@pytest.mark.parametrize("cluster_name", _params(CLUSTERS))
def test_every_alternative_an_export_offers_fits_by_evaluate(catalog, cluster_name):
    """A fully heterogeneous plan (hetplan's runtime) exported to each engine: the plan itself or a plan that fits."""
    cluster = load_cluster_file(EXAMPLES / f"{cluster_name}.yaml", catalog)
    hetplan = search(cluster, _job(catalog, cluster_name, "hetplan"), baselines=False,
                     options=SearchOptions(time_limit_s=_limit(cluster_name))).plans[0].plan
    for target in TARGETS:
        try:
            result = export_result(hetplan, cluster, target, time_limit_s=_limit(cluster_name))
        except ValueError as e:          # a refusal names what blocks the plan
            assert "cannot run this plan" in str(e)
            continue
        if result.closest_plan is not None:
            est = evaluate(cluster, result.closest_plan)
            assert est.fits, (cluster_name, target, est.oom)
            assert not get(result.profile).violations(result.closest_plan)


def test_capability_matrix_in_the_docs_is_the_generated_one():
    doc = (ROOT / "docs" / "exports.md").read_text()
    assert markdown() in doc, "regenerate with `python -m planner.engines.matrix` and paste it into docs/exports.md"
    assert set(ENGINES) == {"hetplan", "megatron", "deepspeed", "torchtitan", "flagscale", "fsdp", "megatron-deepspeed"}


# --- launch.sh: every rank on its planned GPU ---------------------------------------------------------------

STUB = """#!/usr/bin/env bash
echo "CVD=$CUDA_VISIBLE_DEVICES ARGS=$*" >> "$STUB_LOG"
"""


def _launched(tmp_path, files: dict[str, str]) -> list[tuple[int, str, list[int], list[str]]]:
    """Run launch.sh on every host with a stub torchrun: (node rank, host, GPUs, the agent's words)."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(STUB)
    (bin_dir / "torchrun").chmod(0o755)
    hosts = [line.split()[0] for line in files["hostfile"].splitlines()]
    agents = []
    for host in hosts:
        log = tmp_path / f"{host}.log"
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOST": host, "STUB_LOG": str(log),
               "MEGATRON_DIR": "/m", "FLAGSCALE_DIR": "/f", "MEGATRON_DEEPSPEED_DIR": "/md", "TRAIN_SCRIPT": "train.py", "MASTER_ADDR": "10.0.0.1"}
        subprocess.run(["bash", str(folder / "launch.sh"), "--data-path", "d"], env=env, check=True)
        for line in log.read_text().splitlines():
            cvd, args = line.split(" ARGS=")
            words = args.split()
            agents.append((int(words[words.index("--node-rank") + 1]), host,
                           [int(g) for g in cvd[4:].split(",")], words))
    return sorted(agents)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
@pytest.mark.parametrize("target", ["megatron", "deepspeed", "torchtitan", "flagscale", "torchrun", "megatron-deepspeed"])
def test_launch_pins_each_stage_to_its_planned_gpus(catalog, tmp_path, target):
    cluster = load_cluster_file(EXAMPLES / "a100-v100-16.yaml", catalog)
    engine = engine_for(target)
    plan = search(cluster, _job(catalog, "a100-v100-16", engine.name), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    files = export_result(plan, cluster, target).files
    agents = _launched(tmp_path, files)
    assert [a[0] for a in agents] == list(range(len(agents)))            # one agent per node rank
    ranks = [(host, gpu) for _, host, gpus, _ in agents for gpu in gpus]  # static rendezvous: cumulative order
    assert len(ranks) == plan.num_gpus
    for _, _, gpus, words in agents:
        assert words[words.index("--rdzv-backend") + 1] == "static" and words[-2:] == ["--data-path", "d"]
        assert int(words[words.index("--nnodes") + 1]) == len(agents)
    if target == "torchrun":      # hetplan's runtime reads its role from rank_map.json, row RANK
        rows = json.loads(files["rank_map.json"])
        assert [(r["host"], r["gpu"]) for r in rows] == ranks
        return
    expected = _stage_of_rank(plan)
    for rank, (host, _) in enumerate(ranks):
        pool = host.rsplit("-", 1)[0]
        assert pool == plan.stages[expected[rank]].replicas[0].pool, (target, rank, host)


def _stage_of_rank(plan) -> list[int]:
    """The stage Megatron-LM, DeepSpeed, torchtitan and FlagScale derive from a global rank: pipeline
    outermost, so stage i holds the next tp x dp ranks (rank orders cited in planner/export/*)."""
    out = []
    for i, s in enumerate(plan.stages):
        out += [i] * sum(r.tp for r in s.replicas)
    return out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
def test_launch_on_an_unknown_host_says_so_and_exits_2(catalog, tmp_path):
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    plan = search(cluster, _job(catalog, "single-node-8", "megatron"), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    files = export_result(plan, cluster, "megatron").files
    (tmp_path / "launch.sh").write_text(files["launch.sh"])
    (tmp_path / "megatron_args.sh").write_text(files["megatron_args.sh"])
    run = subprocess.run(["bash", str(tmp_path / "launch.sh")], capture_output=True, text=True,
                         env={**os.environ, "HOST": "elsewhere", "MEGATRON_DIR": "/m"})
    assert run.returncode == 2 and "HOST=elsewhere is not a host of this plan" in run.stderr
    assert run.stderr.count("\n") == 1


def test_megatron_launch_env_follows_megatron(catalog):
    from planner.export.megatron import launch_env
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    plan = search(cluster, _job(catalog, "single-node-8", "megatron"), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    tp = plan.stages[0].replicas[0].tp
    env, unset = launch_env(plan)
    if plan.zero_stage >= 2:
        assert unset == ("CUDA_DEVICE_MAX_CONNECTIONS",)      # Megatron-FSDP asserts it is not 1
    else:
        assert env == ({"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 else {})


# --- the engines' own validators ----------------------------------------------------------------------------

def _engine_plans(catalog, engine: str):
    for name in ("single-node-8", "a100-v100-16", "lab-mix"):
        cluster = load_cluster_file(EXAMPLES / f"{name}.yaml", catalog)
        yield cluster, search(cluster, _job(catalog, name, engine), baselines=False,
                              options=SearchOptions(time_limit_s=2)).plans[0].plan


def test_deepspeed_config_loads_with_deepspeeds_own_class(catalog, monkeypatch):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (requirements-dev.txt installs it)")
    from deepspeed.runtime.config import DeepSpeedConfig
    import deepspeed.runtime.config as ds_config_module

    class Mpu:        # what DeepSpeedConfig asks an mpu for: the data-parallel size
        def __init__(self, dp):
            self.dp = dp

        def get_data_parallel_world_size(self):
            return self.dp

    for cluster, plan in _engine_plans(catalog, "deepspeed"):
        result = export_result(plan, cluster, "deepspeed")
        assert result.closest_plan is None
        dp = len(plan.stages[0].replicas)
        # DeepSpeedConfig reads the dp size from the mpu only once torch.distributed is up
        # (deepspeed/runtime/config.py lines 697-715); on one CPU process that is stubbed here.
        monkeypatch.setattr(ds_config_module.dist, "get_rank", lambda: 0, raising=False)
        cfg = DeepSpeedConfig(json.loads(result.files["ds_config.json"]), mpu=Mpu(dp))
        assert cfg.world_size == dp and cfg.train_batch_size == plan.global_batch
        assert cfg.zero_optimization_stage == plan.zero_stage
        if plan.num_stages > 1:
            parts = json.loads(result.files["pipeline_parts.json"])
            assert (parts["num_stages"], parts["num_dp"]) == (plan.num_stages, dp)


def _torchtitan_03():
    tt = pytest.importorskip("torchtitan", reason="torchtitan is not installed (requirements-dev.txt installs it)")
    version = getattr(tt, "__version__", "") or _dist_version("torchtitan")
    if not version.startswith("0.3"):
        pytest.skip(f"torchtitan {version} installed; hetplan_torchtitan.py is for 0.3")
    try:
        import torchtitan.models.llama3.config_registry  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torchtitan's llama3 config does not import here: {e}")


def _dist_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


def test_torchtitan_config_loads_with_torchtitans_config_manager(catalog, tmp_path, monkeypatch):
    _torchtitan_03()
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    monkeypatch.syspath_prepend(str(tmp_path))
    for k, (cluster, plan) in enumerate(_engine_plans(catalog, "torchtitan")):
        result = export_result(plan, cluster, "torchtitan")
        assert result.closest_plan is None
        module = f"hetplan_torchtitan_{k}"
        (tmp_path / f"{module}.py").write_text(result.files["hetplan_torchtitan.py"])
        cfg = ConfigManager().parse_args(["--module", module, "--config", "hetplan_plan"])
        tp, dp = plan.stages[0].replicas[0].tp, len(plan.stages[0].replicas)
        par = cfg.parallelism
        assert (par.tensor_parallel_degree, par.pipeline_parallel_degree) == (tp, plan.num_stages)
        assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == dp
        assert cfg.training.global_batch_size == plan.global_batch
        ParallelDims.from_config(par, plan.num_gpus)     # asserts the degrees multiply to the world size


# --- job kinds and offload, loaded by the engines' own config classes ----------------------------------------

def _searched(catalog, engine: str, training=None, offload=None, cluster_name: str = "single-node-8"):
    """The search's best plan for `engine` with the job kind and offload fixed (an offload the engine runs)."""
    from planner.types import PRETRAIN, Offload
    cluster = load_cluster_file(EXAMPLES / f"{cluster_name}.yaml", catalog)
    job = Job(catalog.models["llama-3-8b"], 256, 4096, engine=engine, training=training or PRETRAIN,
              offload=offload or Offload.NONE)
    plan = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=2), offload="fixed").plans[0].plan
    assert (plan.training, plan.offload) == (job.training, job.offload)
    return cluster, plan


def test_deepspeed_loads_the_offload_configs(catalog, monkeypatch):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (requirements-dev.txt installs it)")
    from deepspeed.runtime.config import DeepSpeedConfig
    import deepspeed.runtime.config as ds_config_module
    from planner.types import Offload

    class Mpu:
        def __init__(self, dp):
            self.dp = dp

        def get_data_parallel_world_size(self):
            return self.dp

    monkeypatch.setattr(ds_config_module.dist, "get_rank", lambda: 0, raising=False)
    for offload in (Offload.OPTIMIZER, Offload.OPTIMIZER_PARAMS):
        cluster, plan = _searched(catalog, "deepspeed", offload=offload)
        result = export_result(plan, cluster, "deepspeed")
        assert result.closest_plan is None
        cfg = DeepSpeedConfig(json.loads(result.files["ds_config.json"]), mpu=Mpu(len(plan.stages[0].replicas)))
        zero = cfg.zero_config
        assert zero.offload_optimizer is not None and zero.offload_optimizer.device == "cpu"
        assert zero.offload_optimizer.pin_memory
        if offload == Offload.OPTIMIZER_PARAMS:
            assert cfg.zero_optimization_stage == 3 and zero.offload_param.device == "cpu"
        else:
            assert zero.offload_param is None


def _load_torchtitan(tmp_path, monkeypatch, source: str, module: str):
    from torchtitan.config.manager import ConfigManager
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"{module}.py").write_text(source)
    return ConfigManager().parse_args(["--module", module, "--config", "hetplan_plan"])


def test_torchtitan_loads_lora_offload_and_finetune_configs(catalog, tmp_path, monkeypatch):
    _torchtitan_03()
    from torchtitan.models.common.linear import Linear
    from torchtitan.protocols.module import Module
    from planner.types import JobKind, Offload, Training
    monkeypatch.setenv("CHECKPOINT", "/ckpt/llama-3-8b")

    cluster, plan = _searched(catalog, "torchtitan", training=Training(JobKind.LORA, 16))
    result = export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None and "torchtitan.toml" not in result.files
    cfg = _load_torchtitan(tmp_path, monkeypatch, result.files["hetplan_torchtitan.py"], "hetplan_tt_lora")
    linears = {fqn: c for fqn, c, _, _ in cfg.model_spec.model.traverse(Module.Config, recurse=True)
               if isinstance(c, Linear.Config)}
    adapted = {fqn.rsplit(".", 1)[-1] for fqn, c in linears.items() if hasattr(c, "rank")}
    assert adapted == {"wqkv", "wo", "w1", "w2", "w3"}           # every target matched; lm_head stays frozen
    assert all((c.rank, c.alpha) == (16, 32.0) for c in linears.values() if hasattr(c, "rank"))
    assert cfg.checkpoint.enable and cfg.checkpoint.initial_load_path == "/ckpt/llama-3-8b"
    assert cfg.checkpoint.initial_load_model_only

    cluster, plan = _searched(catalog, "torchtitan", training=Training(JobKind.FULL_FINETUNE),
                              offload=Offload.OPTIMIZER_PARAMS)
    result = export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None
    cfg = _load_torchtitan(tmp_path, monkeypatch, result.files["hetplan_torchtitan.py"], "hetplan_tt_offload")
    assert cfg.training.enable_cpu_offload and cfg.checkpoint.initial_load_path == "/ckpt/llama-3-8b"
    assert not any(hasattr(c, "rank") for _, c, _, _ in cfg.model_spec.model.traverse(Module.Config, recurse=True))


@pytest.mark.parametrize("target", ["megatron", "flagscale", "deepspeed", "torchtitan", "fsdp"])
def test_searched_job_plans_export_exactly(catalog, target):
    """A plan the search finds for the engine with each job kind and offload it runs is exported as it is."""
    from planner.types import JobKind, Training
    engine = engine_for(target)
    for kind in engine.space.job_kinds:
        for offload, _ in ((None, ()), *engine.space.offloads):
            if offload is not None and kind in (JobKind.LORA, JobKind.QLORA):
                continue          # the search does not offload adapter jobs
            cluster, plan = _searched(catalog, engine.name, training=Training(kind, 16), offload=offload)
            result = export_result(plan, cluster, target)
            assert result.closest_plan is None and result.reasons == (), (target, kind, offload, result.reasons)


# --- context parallelism: searched plans, the launch, torchtitan's own config classes ------------------------

def _cp_searched(catalog, engine: str, cp: int):
    """The search's best plan for `engine` with context_parallel `cp` fixed: Llama 3 8B, 131,072 tokens, 2 x 8 H100s."""
    from catalog import cluster_from_dict
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                         "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    job = Job(catalog.models["llama-3-8b"], 8, 131072, engine=engine, context_parallel=cp)
    plan = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=2),
                  context_parallel="fixed").plans[0].plan
    assert plan.context_parallel == cp
    return cluster, plan


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
@pytest.mark.parametrize("cp", [2, 8])
def test_searched_context_parallel_plans_export_exactly_and_launch_on_their_gpus(catalog, tmp_path, target, cp):
    """Each rank, decomposed tp fastest, then cp, dp, pp (both engines' orders), starts on a GPU of its replica's
    slot; a replica of 16 GPUs spans both nodes."""
    from planner.placement import place
    cluster, plan = _cp_searched(catalog, engine_for(target).name, cp)
    result = export_result(plan, cluster, target)
    assert result.closest_plan is None and result.reasons == (), result.reasons
    if shutil.which("bash") is None:
        pytest.skip("needs bash to run launch.sh")
    agents = _launched(tmp_path, result.files)
    assert [a[0] for a in agents] == list(range(len(agents)))
    ranks = [(host, gpu) for _, host, gpus, _ in agents for gpu in gpus]
    assert len(ranks) == len(set(ranks)) == plan.num_gpus
    tp, dp = plan.stages[0].replicas[0].tp, len(plan.stages[0].replicas)
    width, slots = tp * cp, place(cluster, plan).slots
    for rank, (host, gpu) in enumerate(ranks):
        slot = slots[(rank // (width * dp), rank // width % dp)]
        k = slot.first_gpu + rank % width
        assert (host, gpu) == (f"{slot.pool}-{slot.node + k // 8}", k % 8), (rank, host, gpu, slot)


@pytest.mark.parametrize("cp", [2, 8])
def test_torchtitan_loads_the_context_parallel_config(catalog, tmp_path, monkeypatch, cp):
    _torchtitan_03()
    from torchtitan.distributed.parallel_dims import ParallelDims
    cluster, plan = _cp_searched(catalog, "torchtitan", cp)
    result = export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None
    cfg = _load_torchtitan(tmp_path, monkeypatch, result.files["hetplan_torchtitan.py"], f"hetplan_tt_cp{cp}")
    par = cfg.parallelism
    assert (par.context_parallel_degree, par.context_parallel_load_balancer) == (cp, "ptrr")
    dims = ParallelDims.from_config(par, plan.num_gpus)   # asserts dp x cp x tp x pp = world size
    assert (dims.cp, dims.tp, dims.pp) == (cp, plan.stages[0].replicas[0].tp, plan.num_stages)
    assert dims.fsdp_enabled                                # FSDP covers cp (torchtitan/export docstring)
    # trainer.py lines 305-315: the sequence split over (tp with sequence parallelism) x 2 cp
    divisor = (dims.tp if par.enable_sequence_parallel else 1) * 2 * cp
    assert cfg.training.seq_len == plan.seq_len and cfg.training.seq_len % divisor == 0
    attention = cfg.model_spec.model.layers[0].attention.inner_attention
    assert type(attention).__qualname__.startswith("FlexAttention")   # CP under spmd_types needs FlexAttention


MESH_GROUPS = """
import json, sys
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import torchtitan.distributed.parallel_dims as parallel_dims
from torchtitan.config import ParallelismConfig
parallel_dims.device_type = "cpu"          # the mesh's rank layout does not depend on the device
degrees, world = json.loads(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
dims = parallel_dims.ParallelDims.from_config(ParallelismConfig(**degrees), world)
dims.build_mesh()
print(json.dumps({name: dims.get_mesh(name).mesh.tolist() for name in ("pp", "batch", "cp", "tp")}))
"""


def test_torchtitans_own_mesh_puts_rank_0s_groups_where_the_export_does(catalog):
    """torchtitan 0.3.0 builds its mesh (fake process group, one process, rank 0): rank 0's tp and cp groups
    are the GPUs of replica 0 of stage 0 in the export's rank map, its batch group one GPU of each replica of
    stage 0, its pp group one of each stage."""
    _torchtitan_03()
    from planner.export.common import replica_gpus
    from planner.export.torchtitan import parallelism, torchtitan_ranks
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    from catalog import cluster_from_dict
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 4,
                                                         "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    model = catalog.models["llama-3-8b"]
    plan = Plan(model, 2, 131072, 1, Precision.BF16,
                tuple(Stage(a, b, (Replica("h100", 2, 1), Replica("h100", 2, 1))) for a, b in ((0, 16), (16, 32))),
                zero_stage=2, recompute=Recompute.FULL, sequence_parallel=True, context_parallel=4,
                engine="torchtitan")
    keys = ("tensor_parallel_degree", "pipeline_parallel_degree", "data_parallel_shard_degree",
            "data_parallel_replicate_degree", "context_parallel_degree")
    degrees = {k: v for k, v in parallelism(plan, "0.3").items() if k in keys}
    run = subprocess.run([sys.executable, "-c", MESH_GROUPS, json.dumps(degrees), str(plan.num_gpus)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    groups = json.loads(run.stdout.strip().splitlines()[-1])
    ranks, gpus = torchtitan_ranks(cluster, plan), replica_gpus(cluster, plan)
    assert {ranks[r] for r in groups["tp"] + groups["cp"]} <= set(gpus[(0, 0)])
    assert len(groups["tp"]) == 2 and len(groups["cp"]) == 4
    assert [next(key for key, v in gpus.items() if ranks[r] in v) for r in groups["batch"]] == [(0, 0), (0, 1)]
    assert [next(key for key, v in gpus.items() if ranks[r] in v)[0] for r in groups["pp"]] == [0, 1]


# --- expert parallelism ------------------------------------------------------------------------------------------

def test_torchtitan_loads_the_expert_parallel_config_of_a_registry_moe_model(catalog, tmp_path, monkeypatch):
    """Qwen3 30B-A3B with ep 2 (a torchtitan qwen3 flavor): ConfigManager loads it, ParallelDims accepts ep 2
    (dp_shard x cp x tp = efsdp x ep, configs.py lines 279-287), and the model is torchtitan's MoE qwen3."""
    _torchtitan_03()
    from catalog import cluster_from_dict
    from torchtitan.distributed.parallel_dims import ParallelDims
    cluster = cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                         "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    job = Job(catalog.model("qwen3-30b-a3b"), 32, 4096, engine="torchtitan", expert_parallel=2)
    plan = search(cluster, job, baselines=False, expert_parallel="fixed",
                  options=SearchOptions(time_limit_s=5)).plans[0].plan
    result = export_result(plan, cluster, "torchtitan")
    assert result.closest_plan is None and plan.expert_parallel == 2
    cfg = _load_torchtitan(tmp_path, monkeypatch, result.files["hetplan_torchtitan.py"], "hetplan_tt_ep")
    assert cfg.parallelism.expert_parallel_degree == 2
    dims = ParallelDims.from_config(cfg.parallelism, plan.num_gpus)
    assert dims.ep == 2 and (dims.dp_shard * dims.cp * dims.tp) % dims.ep == 0
    assert (cfg.model_spec.name, cfg.model_spec.flavor) == ("qwen3", "30B-A3B")


def test_torchtitan_deepseek_v3_maps_to_its_registry_flavor(catalog, tmp_path, monkeypatch):
    _torchtitan_03()
    from dataclasses import replace
    from planner.export import torchtitan
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    model = catalog.model("deepseek-v3")
    plan = Plan(model, 16, 4096, 1, Precision.BF16,
                (Stage(0, 30, (Replica("h100", 8, 16),)), Stage(30, 61, (Replica("h100", 8, 16),))),
                zero_stage=3, recompute=Recompute.FULL, sequence_parallel=True, engine="torchtitan")
    assert torchtitan.flavor(plan)[:2] == ("deepseek_v3", "671B")
    assert torchtitan.flavor(replace(plan, model=replace(model, dense_layers=0))) is None
    cfg = _load_torchtitan(tmp_path, monkeypatch, torchtitan.python_config(plan), "hetplan_tt_dsv3")
    assert (cfg.model_spec.name, cfg.model_spec.flavor) == ("deepseek_v3", "671B")


# --- PyTorch FSDP through Accelerate: its own launcher's parsing and FSDP plugin --------------------------------

def _accelerate_plugin(path: str, gpu_ids: str, monkeypatch):
    """What `accelerate launch --config_file path` hands the training processes: the launcher's own argument
    merge (_validate_launch_command) and environment (prepare_multi_gpu_env), then the
    FullyShardedDataParallelPlugin built from that environment, as Accelerator() builds it."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env
    import accelerate.utils.dataclasses as acc_dataclasses
    import torch
    args = launch_command_parser().parse_args(["--config_file", path, "--machine_rank", "0", "--gpu_ids", gpu_ids,
                                               "--main_process_ip", "host-0", "train.py"])
    args, _, _ = _validate_launch_command(args)
    for key, value in prepare_multi_gpu_env(args).items():
        monkeypatch.setenv(key, value)
    # sync_module_states asks for the current CUDA device (dataclasses.py lines 1998-2018); none on this CPU
    monkeypatch.setattr(acc_dataclasses, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return args, FullyShardedDataParallelPlugin()


def test_fsdp_config_loads_with_accelerates_own_classes(catalog, tmp_path, monkeypatch):
    pytest.importorskip("accelerate", reason="accelerate is not installed (requirements-dev.txt installs it)")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    from planner.types import Offload, Recompute
    known = {a.dest for a in launch_command_parser()._actions}
    plans = [*_engine_plans(catalog, "fsdp"), _searched(catalog, "fsdp", offload=Offload.OPTIMIZER_PARAMS)]
    strategies = {0: "NO_SHARD", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
    hybrid = {2: "_HYBRID_SHARD_ZERO2", 3: "HYBRID_SHARD"}      # searched plans may shard within a node
    for k, (cluster, plan) in enumerate(plans):
        result = export_result(plan, cluster, "fsdp")
        assert result.reasons == () and result.exported_plan == plan
        path = tmp_path / f"fsdp{k}.yaml"
        path.write_text(result.files["accelerate_fsdp.yaml"])
        cfg = ClusterConfig.from_yaml_file(str(path))           # refuses unknown keys
        assert cfg.distributed_type.value == "FSDP" and cfg.num_processes == plan.num_gpus
        assert set(cfg.fsdp_config) <= known                    # each key is a --fsdp_* launch argument
        gpus = ",".join(str(g) for g in range(plan.num_gpus // cfg.num_machines))
        args, plugin = _accelerate_plugin(str(path), gpus, monkeypatch)
        assert int(args.num_processes) == plan.num_gpus
        assert plugin.sharding_strategy.name == (hybrid if plan.hybrid_shard else strategies)[plan.zero_stage]
        assert plugin.backward_prefetch.name == "BACKWARD_PRE" and plugin.forward_prefetch and plugin.limit_all_gathers
        assert plugin.activation_checkpointing == (plan.recompute == Recompute.FULL)
        assert plugin.cpu_offload.offload_params == (plan.offload == Offload.OPTIMIZER_PARAMS)
    assert any(p.offload == Offload.OPTIMIZER_PARAMS for _, p in plans)


def test_fsdp_hybrid_shard_and_prefetch_off_load_with_accelerates_own_classes(catalog, tmp_path, monkeypatch):
    """The plan's hybrid_shard and prefetch switches as Accelerate hands them to FSDP: HYBRID_SHARD (and
    _HYBRID_SHARD_ZERO2 for ZeRO-2), backward_prefetch None and forward_prefetch off for prefetch false."""
    pytest.importorskip("accelerate", reason="accelerate is not installed (requirements-dev.txt installs it)")
    from dataclasses import replace
    from planner.types import Recompute
    from tests.test_overlaps import _one_stage
    cluster, plan = _one_stage(catalog, "fsdp", 3)
    cases = ((replace(plan, recompute=Recompute.FULL, hybrid_shard=8, prefetch=False), "HYBRID_SHARD"),
             (replace(plan, recompute=Recompute.FULL, hybrid_shard=8, zero_stage=2), "_HYBRID_SHARD_ZERO2"))
    for k, (case, strategy) in enumerate(cases):
        path = tmp_path / f"hybrid{k}.yaml"
        path.write_text(export_result(case, cluster, "fsdp", force=True).files["accelerate_fsdp.yaml"])
        _, plugin = _accelerate_plugin(str(path), ",".join(str(g) for g in range(8)), monkeypatch)
        assert plugin.sharding_strategy.name == strategy
        if case.prefetch is False:
            assert plugin.backward_prefetch is None and not plugin.forward_prefetch
        else:
            assert plugin.backward_prefetch.name == "BACKWARD_PRE" and plugin.forward_prefetch


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
def test_fsdp_launch_starts_each_host_with_its_machine_rank(catalog, tmp_path):
    cluster = load_cluster_file(EXAMPLES / "a100-v100-16.yaml", catalog)
    plan = search(cluster, _job(catalog, "a100-v100-16", "fsdp"), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    files = export_result(plan, cluster, "fsdp").files
    folder, bin_dir = tmp_path / "run", tmp_path / "bin"
    folder.mkdir()
    bin_dir.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    (bin_dir / "accelerate").write_text(STUB)
    (bin_dir / "accelerate").chmod(0o755)
    hosts = sorted({f"{r.pool}-{n}" for st in plan.stages for r in st.replicas
                    for n in range(cluster.pool(r.pool).nodes)})
    seen = []
    for host in hosts:
        log = tmp_path / f"{host}.log"
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOST": host, "STUB_LOG": str(log),
               "TRAIN_SCRIPT": "train.py"}
        subprocess.run(["bash", str(folder / "launch.sh"), "--lr", "1"], env=env, check=True)
        if log.exists():
            words = log.read_text().split(" ARGS=")[1].split()
            seen.append((int(words[words.index("--machine_rank") + 1]), words[words.index("--gpu_ids") + 1]))
            assert words[-3:] == ["train.py", "--lr", "1"]
    assert sorted(r for r, _ in seen) == list(range(len(seen)))
    assert sum(len(g.split(",")) for _, g in seen) == plan.num_gpus


# --- the default plan (the best of the real engines): a real engine's plan, exported exactly, fitting -------

@pytest.mark.parametrize("cluster_name", ["single-node-8", "a100-v100-16", "lab-mix", "consumer-mix"])
def test_the_default_plan_is_a_real_engines_and_exports_exactly(catalog, cluster_name):
    from planner.engines import REAL
    cluster = load_cluster_file(EXAMPLES / f"{cluster_name}.yaml", catalog)
    result = search(cluster, _job(catalog, cluster_name, "hetplan"), options=SearchOptions(time_limit_s=5),
                    engines=REAL)
    best = result.plans[0]
    assert best.plan.engine in REAL and set(result.by_engine) == set(REAL)
    assert all(b is None or b.plan.engine == best.plan.engine for b in result.baselines.values())
    target = get(best.plan.engine).exports[0]
    exported = export_result(best.plan, cluster, target)
    assert exported.reasons == () and exported.exported_plan == best.plan, exported.reasons
    assert evaluate(cluster, best.plan).fits


# --- torchtitan: the model's architecture, the batch and the paths, as torchtitan 0.3.0 loads them -------------

def _tt_plan(catalog, model_id: str, stages: int = 1, micro_batch: int = 2, precision: str = "bf16"):
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    model = catalog.model(model_id)
    cut = [round(k * model.layers / stages) for k in range(stages + 1)]
    return Plan(model, 64, 4096, micro_batch, Precision(precision),
                tuple(Stage(a, b, (Replica("h100", 8, 32), Replica("h100", 8, 32))) for a, b in zip(cut, cut[1:])),
                zero_stage=3, recompute=Recompute.FULL, sequence_parallel=True, engine="torchtitan")


@pytest.mark.parametrize("model_id", ["llama-3-8b", "llama-3.1-405b", "qwen3-30b-a3b", "deepseek-v3"])
def test_torchtitan_model_has_the_catalog_models_rope_and_norms(catalog, tmp_path, monkeypatch, model_id):
    """Every RoPE and RMSNorm config of the model torchtitan builds has the catalog's base, scaling and epsilon:
    torchtitan's llama3 8B flavor is Llama 3.1's (RoPE scaling "llama" x8), which Llama 3 8B does not have."""
    _torchtitan_03()
    from planner.export.torchtitan import python_config
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.common.rope import RoPE
    plan = _tt_plan(catalog, model_id)
    model = plan.model
    cfg = _load_torchtitan(tmp_path, monkeypatch, python_config(plan), f"hetplan_tt_arch_{model_id.replace('.', '_')}")
    ropes = [c for _, c, _, _ in cfg.model_spec.model.traverse(RoPE.Config, recurse=True)]
    norms = [c for _, c, _, _ in cfg.model_spec.model.traverse(RMSNorm.Config, recurse=True)]
    assert ropes and norms
    scaling = {None: "none", "llama3": "llama", "yarn": "yarn"}[model.rope_scaling]
    for rope in ropes:
        assert (rope.theta, rope.scaling) == (model.rope_theta, scaling), (model_id, rope)
        if scaling == "llama":
            assert rope.scaling_factor == model.rope_scaling_factor
        if scaling == "yarn":
            assert rope.rope_factor == model.rope_scaling_factor
    assert {n.eps for n in norms} == {model.norm_eps}
    assert decoder_vocab(cfg) == model.vocab


def decoder_vocab(cfg) -> int:
    return cfg.model_spec.model.vocab_size


@pytest.mark.parametrize("stages", [1, 2])
def test_torchtitan_runs_the_plans_micro_batch_and_accumulation(catalog, tmp_path, monkeypatch, stages):
    """torchtitan 0.3.0 (trainer.py lines 415-438, 568-573): without pipelining a rank's forward pass is
    local_batch_size sequences, accumulated global / (local x dp) times; with it local_batch_size is split into
    micro-batches of pipeline_parallel_microbatch_size. Either way a forward pass holds the plan's micro-batch
    and a step the plan's global batch."""
    _torchtitan_03()
    from planner.export.torchtitan import python_config
    plan = _tt_plan(catalog, "llama-3-8b", stages=stages)
    cfg = _load_torchtitan(tmp_path, monkeypatch, python_config(plan), f"hetplan_tt_batch_{stages}")
    dp = len(plan.stages[0].replicas)
    local, global_batch = cfg.training.local_batch_size, cfg.training.global_batch_size
    assert global_batch == plan.global_batch and global_batch % (local * dp) == 0
    accumulation = global_batch // (local * dp)
    forward = cfg.parallelism.pipeline_parallel_microbatch_size if stages > 1 else local
    microbatches = local // forward if stages > 1 else 1
    assert forward == plan.micro_batch
    assert accumulation * microbatches * forward * dp == plan.global_batch


def test_torchtitan_fp8_keeps_the_output_projection_in_bf16(catalog, tmp_path, monkeypatch):
    """torchtitan's own FP8 recipes filter lm_head (llama3_405b) and router.gate (deepseek_v3); 0.2.2's TOML
    names the head `output`. torchtitan builds the 0.3 converter only with torchao installed."""
    import tomllib
    from planner.export.torchtitan import config, python_config
    cases = (("llama-3-8b", ["lm_head"]), ("qwen3-30b-a3b", ["lm_head", "router.gate"]))
    for model_id, expected in cases:
        toml = tomllib.loads(to_toml_text(config(_tt_plan(catalog, model_id, precision="fp8"))))
        assert toml["quantize"]["linear"]["float8"]["filter_fqns"] == ["output"] + expected[1:]
    _torchtitan_03()
    pytest.importorskip("torchao", reason="torchtitan's Float8LinearConverter needs torchao")
    from torchtitan.components.quantization import Float8LinearConverter
    for model_id, expected in cases:
        cfg = _load_torchtitan(tmp_path, monkeypatch, python_config(_tt_plan(catalog, model_id, precision="fp8")),
                               f"hetplan_tt_fp8_{model_id[:4]}")
        float8 = [c for c in cfg.model_spec.converters if isinstance(c, Float8LinearConverter.Config)]
        assert len(float8) == 1 and float8[0].filter_fqns == expected


def to_toml_text(sections) -> str:
    from planner.export.torchtitan import to_toml
    return to_toml(sections)


def test_torchtitan_tokenizer_path_is_absolute_from_where_launch_sh_started(catalog, tmp_path, monkeypatch):
    _torchtitan_03()
    from planner.export.torchtitan import python_config
    monkeypatch.setenv("HETPLAN_CALLER_DIR", "/home/me/torchtitan")
    monkeypatch.delenv("HF_ASSETS_PATH", raising=False)
    cfg = _load_torchtitan(tmp_path, monkeypatch, python_config(_tt_plan(catalog, "llama-3-8b")), "hetplan_tt_assets")
    assert cfg.hf_assets_path == "/home/me/torchtitan/assets/hf/Llama-3.1-8B"
    monkeypatch.setenv("HF_ASSETS_PATH", "/data/tokenizer")
    cfg = _load_torchtitan(tmp_path, monkeypatch, python_config(_tt_plan(catalog, "llama-3-8b")), "hetplan_tt_assets2")
    assert cfg.hf_assets_path == "/data/tokenizer"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
def test_master_addr_under_the_host_route_is_node_rank_0s_machine_or_asked_for(catalog, tmp_path):
    """HOST=<placeholder> on each machine (the documented route): MASTER_ADDR was the placeholder name on every
    agent. Now node rank 0's machine uses its own name, the others ask for MASTER_ADDR (exit 2, one line), a
    resolvable first host in hostfile (renamed hosts) is used as it is, and a given MASTER_ADDR wins."""
    from planner.export.common import host_name
    cluster = load_cluster_file(EXAMPLES / "a100-v100-16.yaml", catalog)
    plan = search(cluster, _job(catalog, "a100-v100-16", "megatron"), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    files = export_result(plan, cluster, "megatron").files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/usr/bin/env bash\necho "$*" >> "$STUB_LOG"\n')
    (bin_dir / "torchrun").chmod(0o755)
    hosts = [line.split()[0] for line in files["hostfile"].splitlines()]

    def run(host, **env):
        log = tmp_path / "log"
        log.write_text("")
        done = subprocess.run(["bash", str(tmp_path / "launch.sh")], capture_output=True, text=True,
                              env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOST": host,
                                   "STUB_LOG": str(log), "MEGATRON_DIR": "/m", **env})
        words = log.read_text().split()
        return done, (words[words.index("--master-addr") + 1] if "--master-addr" in words else None)
    import socket
    done, addr = run(hosts[0])
    assert done.returncode == 0 and addr == socket.gethostname()
    done, addr = run(hosts[-1])
    assert done.returncode == 2 and addr is None and done.stderr.count("\n") == 1
    assert f"MASTER_ADDR" in done.stderr and f"HOST={hosts[0]}" in done.stderr
    done, addr = run(hosts[-1], MASTER_ADDR="10.1.2.3")
    assert done.returncode == 0 and addr == "10.1.2.3"
    (tmp_path / "hostfile").write_text(files["hostfile"].replace(hosts[0], "localhost", 1))
    done, addr = run(hosts[-1])
    assert done.returncode == 0 and addr == "localhost"
    assert host_name("a100", 0) == "a100-0"


def test_deepspeed_launch_and_note_give_the_config_once(catalog):
    """launch.sh passes --deepspeed_config; the note must not also ask for initialize(config=...), which
    DeepSpeed 0.19.8 refuses (deepspeed/__init__.py lines 529-531)."""
    deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is not installed")
    import argparse
    import shlex
    for cluster, plan in _engine_plans(catalog, "deepspeed"):
        result = export_result(plan, cluster, "deepspeed")
        line = next(x for x in result.files["launch.sh"].splitlines() if x.strip().startswith('"$TRAIN_SCRIPT" '))
        words = shlex.split(line.split('"$TRAIN_SCRIPT"', 1)[1].split('"${@:4}"')[0])
        args = deepspeed.add_config_arguments(argparse.ArgumentParser()).parse_known_args(words)[0]
        assert args.deepspeed_config == "ds_config.json"
        notes = " ".join(result.notes)
        assert "initialize(args=args" in notes and "config='ds_config.json'" not in notes


RANK_STUB = """import json, os, sys
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "HOST")
with open(os.path.join(os.environ["STUB_OUT"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump({**{k: os.environ.get(k) for k in keys}, "argv": sys.argv[1:]}, f)
"""


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
def test_megatron_launch_with_real_torchrun_gives_each_gpu_its_planned_rank(catalog, tmp_path):
    """launch.sh run on both hosts at once with PyTorch's own torchrun (static rendezvous over 127.0.0.1, CPU):
    a stub in place of pretrain_gpt.py (it needs GPUs) records what each process gets. Every global rank
    appears once, on the host and GPU (CUDA_VISIBLE_DEVICES[LOCAL_RANK]) the Megatron rank order gives it."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    plan = search(cluster, _job(catalog, "single-node-8", "megatron"), baselines=False,
                  options=SearchOptions(time_limit_s=2)).plans[0].plan
    from planner.export.megatron import megatron_ranks
    files = export_result(plan, cluster, "megatron").files
    folder, megatron, out = tmp_path / "run", tmp_path / "megatron", tmp_path / "out"
    for d in (folder, megatron, out):
        d.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    (megatron / "pretrain_gpt.py").write_text(RANK_STUB)
    import socket
    with socket.socket() as s:                       # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = [line.split()[0] for line in files["hostfile"].splitlines()]
    env = {**os.environ, "PATH": f"{torchrun.parent}:{os.environ['PATH']}", "MEGATRON_DIR": str(megatron),
           "STUB_OUT": str(out), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(["bash", str(folder / "launch.sh"), "--mock-data"], env={**env, "HOST": h},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for h in hosts]
    for p in procs:
        output, _ = p.communicate(timeout=150)
        assert p.returncode == 0, output[-2000:]
    rows = {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(rows) == list(range(plan.num_gpus))
    expected = megatron_ranks(cluster, plan)
    for rank, row in rows.items():
        gpu = int(row["CUDA_VISIBLE_DEVICES"].split(",")[int(row["LOCAL_RANK"])])
        assert (row["HOST"], gpu) == expected[rank], rank
        assert int(row["WORLD_SIZE"]) == plan.num_gpus and row["argv"][-1] == "--mock-data"
        assert row["argv"][row["argv"].index("--tensor-model-parallel-size") + 1] == str(plan.stages[0].replicas[0].tp)


DEEPSPEED_TOY = """import argparse, json, os, sys
import torch
import deepspeed
sys.path.insert(0, os.getcwd())
from pipeline_module import PlannedPipelineModule
parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
deepspeed.init_distributed(dist_backend="gloo")
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.nn.Linear(16, 16)
    def forward(self, x):
        return x + torch.tanh(self.f(x))
layers = [torch.nn.Linear(8, 16)] + [Block() for _ in range(int(os.environ["TOY_LAYERS"]))] + [torch.nn.Linear(16, 1)]
model = PlannedPipelineModule(layers=layers, loss_fn=torch.nn.MSELoss())
engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-3),
                                       model_parameters=[p for p in model.parameters() if p.requires_grad])
def batches():
    g = torch.Generator().manual_seed(0)
    while True:
        x = torch.randn(engine.train_micro_batch_size_per_gpu(), 8, generator=g)
        yield x, x.sum(dim=1, keepdim=True)
data = batches()
losses = [float(engine.train_batch(data_iter=data)) for _ in range(2)]
with open(os.path.join(os.environ["STUB_OUT"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"stage": engine.stage_id, "parts": model.parts, "bounds": [model._local_start, model._local_stop],
               "micro_batches": engine.micro_batches, "dp": engine.dp_world_size, "losses": losses}, f)
"""


@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run launch.sh")
def test_deepspeed_pipeline_engine_trains_the_exported_module_on_cpu(catalog, tmp_path):
    """Issue 20: DeepSpeed's own PipelineEngine, on CPU (gloo), started by the exported launch.sh under PyTorch's
    torchrun: a toy model of the plan's 24 layers built with the exported PlannedPipelineModule and ds_config.json,
    two training steps. Each rank holds the layers of its planned stage (embedding + layers 0-9, then layers
    10-23 + head: an uneven split), in the plan's dp, with the plan's micro-batches per step."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    from catalog import cluster_from_dict, plan_from_dict
    cluster = cluster_from_dict({"name": "four", "pools": [{"name": "a", "gpu": "a100-80gb-sxm", "nodes": 1,
                                                            "gpus_per_node": 4}]}, catalog)
    plan = plan_from_dict({"model": "gpt3-1.3b", "global_batch": 16, "seq_len": 2048, "micro_batch": 2,
                           "precision": "fp32", "zero_stage": 1, "recompute": "none", "engine": "deepspeed",
                           "stages": [{"layers": [0, 10], "replicas": [{"pool": "a", "tp": 1}] * 2},
                                      {"layers": [10, 24], "replicas": [{"pool": "a", "tp": 1}] * 2}]}, catalog)
    result = export_result(plan, cluster, "deepspeed")
    assert result.exported_plan == plan and not result.reasons, "the plan is exported as it is"
    folder, out = tmp_path / "run", tmp_path / "out"
    folder.mkdir(), out.mkdir()
    for name, text in result.files.items():
        (folder / name).write_text(text)
    (folder / "train.py").write_text(DEEPSPEED_TOY)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = result.files["hostfile"].split()[0]
    env = {**os.environ, "PATH": f"{torchrun.parent}:{os.environ['PATH']}", "DS_ACCELERATOR": "cpu",
           "STUB_OUT": str(out), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
           "HOST": host, "TRAIN_SCRIPT": "train.py", "TOY_LAYERS": str(plan.model.layers)}
    done = subprocess.run(["bash", str(folder / "launch.sh")], env=env, cwd=folder, capture_output=True, text=True,
                          timeout=200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"), key=lambda p: int(p.stem))]
    assert len(rows) == plan.num_gpus == 4
    config = json.loads(result.files["ds_config.json"])
    for row in rows:
        assert row["parts"] == [0, 11, 26] and row["dp"] == 2
        assert row["bounds"] == ([0, 11] if row["stage"] == 0 else [11, 26])
        assert row["micro_batches"] == config["gradient_accumulation_steps"] == 16 // (2 * 2)
        assert all(loss == loss and loss < 1e6 for loss in row["losses"])
    assert sorted(r["stage"] for r in rows) == [0, 0, 1, 1]
