"""torchtitan: the job config in both forms in use, and the launch.

- `hetplan_torchtitan.py`, for torchtitan 0.3.0 (planner.engines.sources.TORCHTITAN, the pinned
  version): 0.3 reads no TOML. torchtitan/config/manager.py ConfigManager.parse_args/_load_config
  (lines 33-150 of the 0.3.0 wheel) takes `--module M --config F`, imports M (a fully qualified
  module path is allowed) and calls F() for a `Trainer.Config`, then lets tyro rebuild and check it
  (`--section.key value` flags still override, but "will not grow"; torchtitan/config/README.md).
  The function starts from torchtitan's own llama3 config (torchtitan/models/llama3/config_registry.py:
  llama3_8b, llama3_70b, llama3_405b) and sets training, parallelism (torchtitan/config/configs.py
  TrainingConfig lines 36-99, ParallelismConfig lines 112-290) and activation_checkpoint
  (torchtitan/distributed/activation_checkpoint.py: FullAC.Config, SelectiveAC.Config, or None for
  none, lines 332-337). Trainer.Config.__post_init__ (torchtitan/trainer.py lines 118-180) requires
  training.disable_cuda_graphs with pipeline parallelism and local_batch_size divisible by
  pipeline_parallel_microbatch_size. Pipeline parts end in `lm_head`
  (torchtitan/models/common/decoder.py: tok_embeddings, layers.N, norm, lm_head).
- `torchtitan.toml`, for torchtitan 0.2.2 (pytorch/torchtitan@v0.2.2 = 73a0e69,
  torchtitan/config/job_config.py): sections [job] description; [model] name, flavor;
  [training] local_batch_size, global_batch_size, seq_len, mixed_precision_param ("bfloat16" |
  "float32"); [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree,
  fsdp_reshard_after_forward ("default" | "always" | "never"), tensor_parallel_degree,
  disable_loss_parallel, enable_async_tensor_parallel, pipeline_parallel_degree,
  module_fqns_per_model_part, pipeline_parallel_schedule, pipeline_parallel_microbatch_size;
  [activation_checkpoint] mode ("selective" | "full" | "none"), selective_ac_option. Parts end in
  `output` there. Run with `--job.config_file torchtitan.toml`.
ZeRO: ZeRO-0 is data_parallel_replicate_degree; ZeRO-2 is FSDP2 with fsdp_reshard_after_forward
"never"; ZeRO-3 sets it to "always" explicitly, because "default" means no resharding when
pipelining (ParallelismConfig.fsdp_reshard_after_forward docstring, configs.py lines 136-150).
Rank order: torchtitan/distributed/parallel_dims.py (line 236): mesh ["pp", "dp_replicate",
"dp_shard", "cp", "tp"], tp fastest: rank = ((stage * dp + replica) * cp + cp rank) * tp + tp rank
(common.one_mesh_ranks; v0.2.2 parallel_dims.py lines 96-97 and 151 the same order), which launch.sh pins.
Context parallelism (plan.context_parallel = cp > 1):
- parallelism.context_parallel_degree (0.3.0 configs.py line 232; v0.2.2 job_config.py line 428) and
  context_parallel_load_balancer (0.3.0 configs.py lines 235-241; v0.2.2 job_config.py line 431):
  "ptrr" in the 0.3 config, whose llama3 flavors attend with FlexAttention (model_registry's default
  attn_backend="flex", models/llama3/__init__.py line 371; the default spmd_backend "spmd_types"
  refuses CP with SDPA or varlen, "Use FlexAttention + CP", distributed/full_dtensor.py lines 30-53),
  and "ptrr" is the balancer for FlexAttention's BlockMask ("headtail", the default, is SDPA's:
  configs.py lines 235-241; torchtitan's HF trainer refuses headtail with a flex mask,
  experiments/transformers_modeling_backend/trainer.py lines 49-65). PTRR splits seq_len / 128
  query blocks (FlexAttention's default block) over cp (torch _PTRRLoadBalancer.ptrr_scheduling:
  "num_tasks must be divisible by group_size"). v0.2.2's llama3 flavors 8B/70B/405B use SDPA
  (model/args.py line 45, attn_type "sdpa"): "headtail" there, written out.
- sequence: 0.3.0 requires seq_len divisible by (tp if sequence parallel) x 2cp (trainer.py lines
  305-315), v0.2.2 by tp x 2cp (parallel_dims.py seq_len_divisor lines 365-372, checked in
  models/llama3/infra/parallelize.py line 70): `limits` asks for tp x 2cp and, for PTRR, 128 x cp.
- FSDP always covers cp: parallel_dims.fsdp_enabled is dp_shard or cp (0.3.0 lines 692-693; v0.2.2
  lines 334-335), its shard mesh dp_shard x cp (full_dtensor.py resolve_fsdp_mesh line 95), applied
  to every plan (models/llama3/parallelize.py lines 69-90). A ZeRO-2/3 plan's dp_shard x cp is the
  dp x cp the cost model shards over; a ZeRO-0 plan would be sharded over cp all the same, so
  `limits` refuses it (ZeRO-0 cannot be written with cp > 1).
- K/V: 0.3.0's FlexAttention CP all-gathers keys and values (distributed/context_parallel/api.py
  lines 57-79, flex_cp_allgather); v0.2.2's SDPA CP exchanges them by
  context_parallel_rotate_method, default "allgather" (job_config.py line 446): neither is the
  overlapped ring the cost model times (the export notes say so). Interleaved stages: stage_ids_this_rank "loop" style (pipeline_parallel.py lines
567-568): model part k runs on pp rank k mod p, hetplan's round convention.
Batch: local_batch_size is what a data-parallel rank takes per gradient-accumulation step (local_batch_size).
Architecture: torchtitan's flavors fix RoPE and norms (0.3.0 llama3 8B/70B/405B are Llama 3.1's: theta
500000, "llama" scaling x8, models/llama3/__init__.py lines 236-275), so hetplan_torchtitan.py sets every
RoPE.Config (theta, scaling, scaling_factor / rope_factor; models/common/rope.py lines 94-106) and
RMSNorm.Config (eps; models/common/nn_modules.py lines 134-141) of the model to the catalog's
(set_architecture); torchtitan's models have no dropout and their own initialisation (architecture_notes).
The tokenizer folder (hf_assets_path, trainer.py line 79: relative by default, "./assets/hf/<model>" in the
llama3 configs) is made absolute against the folder launch.sh was started from, since launch.sh changes
into its own folder (HF_ASSETS_PATH overrides it).
Model flavors: torchtitan/models/llama3/__init__.py (_8b, _70b, _405b, lines 236-365) give the
shapes in FLAVORS; another model has no torchtitan definition and needs a custom one.
Mixture of experts and expert parallelism (plan.expert_parallel = ep):
- MoE models exist only as torchtitan's own model families: 0.3.0 models/deepseek_v3 (flavor "671B",
  __init__.py _671b lines 533-606: 61 layers, 3 dense, 256 routed + 1 shared expert of 2048, top-8,
  MLA q/kv rank 1536/512; config function deepseek_v3_671b, config_registry.py line 206), models/qwen3
  ("30B-A3B" and "235B-A22B", __init__.py lines 608-609, 128 experts top-8; config function
  qwen3_30b_a3b, config_registry.py line 295; 235B-A22B has none, so its config starts from
  qwen3_30b_a3b with model_spec = model_registry("235B-A22B")), gpt_oss, kimi_k2_7, qwen3_5; v0.2.2
  deepseek_v3 "671B" (models/deepseek_v3/__init__.py line 130) and qwen3 "30B-A3B", "235B-A22B" (lines
  145, 168), with llama4. A MoE model of another shape (Mixtral, Llama 4 in 0.3.0) has no torchtitan
  definition: the export says so, and its MoE layers must be torchtitan's MoE module for
  expert_parallel_degree to act ("No effect for non-MoE models", configs.py line 281).
- parallelism.expert_parallel_degree (0.3.0 configs.py lines 279-287; v0.2.2 job_config.py line 454):
  "dp_shard * cp * tp == efsdp * ep ... EP borrows ranks from FSDP and TP". The sparse mesh
  ["pp", "dp_replicate", "efsdp", "ep"] (parallel_dims.py lines 336-340) has ep innermost, so an ep
  group is ep consecutive ranks of a stage's dp_shard x cp x tp block: ep consecutive replicas when
  tp = cp = 1, as the plan shards them; with tp x cp > 1 0.3.0 (which has no expert tensor parallel
  degree) spreads the experts over tp and cp ranks first and does not tensor-split them, another mesh
  than the plan's, so the torchtitan profile runs ep > 1 with tp = cp = 1 only
  (Space.expert_parallel_with_tp; the search plans that, other plans are searched again).
  v0.2.2 has expert_tensor_parallel_degree, "etp = tp" or 1 (job_config.py lines 464-472): the TOML
  writes etp = tp (1 here). ep never comes from
  dp_replicate, so a ZeRO-0/1 plan (data_parallel_replicate_degree = dp) with ep > 1 is refused.
Job kind and offload:
- LoRA (0.3.0 only): torchtitan/components/lora.py LoRAConverter.Config(rank, alpha, target_modules)
  (lines 154-167; the adapters' output is scaled by alpha / rank), a model converter applied through
  model_registry(flavor, converters=[...]) (torchtitan/models/llama3/__init__.py lines 369-388; example
  llama3_debugmodel_float8_emulate_lora, config_registry.py lines 155-171, Float8 before LoRA). Target
  modules are matched by the last name of the module: the llama3 flavors build fused QKV (fuse_qkv=True,
  llama3/__init__.py line 257), so a layer's linears are wqkv, wo (attention) and w1, w2, w3 (MLP;
  models/common/config_utils.py lines 236-305); lm_head is left out, as planner.training counts adapters.
  v0.2.2 has no LoRA (no converter by that name in 73a0e69): no TOML is written for LoRA plans.
- Offload: training.enable_cpu_offload, "CPU offloading of parameters, gradients, and optimizer states
  in FSDP" (torchtitan/config/configs.py lines 61-64; v0.2.2 job_config.py line 270), FSDP2's
  CPUOffloadPolicy: the profile offloads optimizer+params with ZeRO-3 only.
- Fine-tuning (full or LoRA): checkpoint.enable, initial_load_path ("used when the output checkpoint
  folder is empty", an absolute path or remote URI: __post_init__ refuses others) and
  initial_load_model_only (torchtitan/components/checkpointer/base.py lines 223-301; v0.2.2
  job_config.py [checkpoint] lines 487-545). The 0.3 config reads the path from CHECKPOINT, which
  launch.sh requires; the TOML holds a placeholder to replace.
"""
from __future__ import annotations

import json

from planner.export import launch
from planner.export.common import (CHECKPOINT_VARIABLE, checkpoint_preamble, from_checkpoint, layer_segments,
                                   one_mesh_ranks, uniform_tp_dp)
from planner.types import Cluster, JobKind, Offload, Plan, Recompute, Schedule

FILES = ("hetplan_torchtitan.py", "torchtitan.toml", "launch.sh", "hostfile")   # every file `export` may write

DENSE = (1, 1, 0, 0, 0, 1, 0, 0)    # experts, top_k, moe_ffn, shared, dense layers, moe_every, q/kv lora rank
# model_shape -> (torchtitan model name, flavor, 0.3 config function, the flavor that function builds)
FLAVORS = {(32, 4096, 32, 8, 14336, 128256, *DENSE): ("llama3", "8B", "llama3_8b", "8B"),
           (80, 8192, 64, 8, 28672, 128256, *DENSE): ("llama3", "70B", "llama3_70b", "70B"),
           (126, 16384, 128, 8, 53248, 128256, *DENSE): ("llama3", "405B", "llama3_70b", "70B"),
           (61, 7168, 128, 128, 18432, 129280, 256, 8, 2048, 1, 3, 1, 1536, 512):
               ("deepseek_v3", "671B", "deepseek_v3_671b", "671B"),
           (48, 2048, 32, 4, 768, 151936, 128, 8, 0, 0, 0, 1, 0, 0): ("qwen3", "30B-A3B", "qwen3_30b_a3b", "30B-A3B"),
           (94, 4096, 64, 4, 1536, 151936, 128, 8, 0, 0, 0, 1, 0, 0): ("qwen3", "235B-A22B", "qwen3_30b_a3b", "30B-A3B")}
# The tokenizer folder of a flavor built from another flavor's config function (torchtitan's convention,
# ./assets/hf/<Hugging Face repository name>). llama3_405b() is not used: it converts every linear to FP8
# itself (config_registry.py lines 295-310, which needs torchao), so 405B starts from llama3_70b().
ASSETS = {"405B": "./assets/hf/Llama-3.1-405B", "235B-A22B": "./assets/hf/Qwen3-235B-A22B"}
MOE_FAMILIES = "deepseek_v3 (671B), qwen3 (30B-A3B, 235B-A22B), gpt_oss, kimi_k2_7, qwen3_5"
HEAD = {"0.2": "output", "0.3": "lm_head"}     # the output projection's module name
LORA_TARGETS = ["wqkv", "wo", "w1", "w2", "w3"]   # every linear of a llama3 layer (module docstring)
CHECKPOINT_PLACEHOLDER = "/path/to/checkpoint"
# context_parallel_load_balancer per config form: the balancer for the llama3 flavors' attention
# (0.3: FlexAttention -> "ptrr"; 0.2.2: SDPA -> "headtail"), module docstring
CP_LOAD_BALANCER = {"0.2": "headtail", "0.3": "ptrr"}
FLEX_BLOCK_TOKENS = 128        # FlexAttention's default block (torch.nn.attention.flex_attention._DEFAULT_SPARSE_BLOCK_SIZE)


def lora_alpha(rank: int) -> float:
    """alpha = 2 x rank: the scale alpha / rank stays 2, LoRAConverter.Config's default scale (rank 8,
    alpha 16), whatever rank the plan chose; a fixed alpha of 16 would shrink the update as rank grows."""
    return 2.0 * rank


def model_shape(m) -> tuple[int, ...]:
    """What FLAVORS matches: the dense shape, the experts' and the latent attention's ranks."""
    return (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.experts, m.top_k, m.moe_ffn,
            m.shared_experts, m.dense_layers, m.moe_every, m.q_lora_rank, m.kv_lora_rank)


def flavor(plan: Plan) -> tuple[str, str, str, str] | None:
    return FLAVORS.get(model_shape(plan.model))


def module_fqns(plan: Plan, version: str = "0.3") -> list[list[str]]:
    segments = layer_segments(plan)
    parts = []
    for k, (_, _, a, b) in enumerate(segments):
        names = (["tok_embeddings"] if k == 0 else []) + [f"layers.{n}" for n in range(a, b)]
        if k == len(segments) - 1:
            names += ["norm", HEAD[version]]
        parts.append(names)
    return parts


def parallelism(plan: Plan, version: str) -> dict:
    tp, dp = uniform_tp_dp(plan)
    schedule = ("Interleaved1F1B" if plan.interleave > 1 else
                "GPipe" if plan.schedule == Schedule.GPIPE else "1F1B")
    shard = plan.zero_stage >= 2
    group = plan.hybrid_shard or dp       # HSDP: shard within groups of consecutive replicas, replicate across
    out = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": plan.num_stages,
           "pipeline_parallel_schedule": schedule, "pipeline_parallel_microbatch_size": plan.micro_batch,
           "data_parallel_shard_degree": group if shard else 1,
           "data_parallel_replicate_degree": dp // group if shard else dp,
           "context_parallel_degree": plan.context_parallel}
    if plan.expert_parallel > 1:
        out["expert_parallel_degree"] = plan.expert_parallel
        if version == "0.2":
            out["expert_tensor_parallel_degree"] = tp
    if plan.context_parallel > 1:
        out["context_parallel_load_balancer"] = CP_LOAD_BALANCER[version]
    if shard:
        out["fsdp_reshard_after_forward"] = "always" if plan.zero_stage == 3 else "never"
    if plan.num_stages > 1:
        out["module_fqns_per_model_part"] = module_fqns(plan, version)
    if version == "0.2":
        out |= {"enable_async_tensor_parallel": False, "disable_loss_parallel": False}
    else:
        out["enable_sequence_parallel"] = bool(plan.sequence_parallel and tp > 1)
    return out


def local_batch_size(plan: Plan) -> int:
    """training.local_batch_size: what one data-parallel rank takes per gradient-accumulation step. torchtitan
    0.3.0 (trainer.py lines 415-438, 568-573; v0.2.2 train.py lines 200-215 the same) accumulates
    global / (local_batch_size x dp) steps and, with pipelining, splits each step into local_batch_size /
    pipeline_parallel_microbatch_size micro-batches; without pipelining each step is one forward pass of
    local_batch_size sequences. So a pipelined plan gives a rank its whole share (global / dp, split into the
    plan's micro-batches), a single-stage plan its micro-batch (accumulated global / (micro x dp) times)."""
    _, dp = uniform_tp_dp(plan)
    return plan.global_batch // dp if plan.num_stages > 1 else plan.micro_batch


def accumulation_steps(plan: Plan) -> int:
    """torchtitan's gradient_accumulation_steps for the keys written (trainer.py lines 430-432)."""
    _, dp = uniform_tp_dp(plan)
    return plan.global_batch // (local_batch_size(plan) * dp)


def training(plan: Plan, version: str) -> dict:
    out = {"local_batch_size": local_batch_size(plan), "global_batch_size": plan.global_batch,
           "seq_len": plan.seq_len,
           "mixed_precision_param": "float32" if plan.precision.value == "fp32" else "bfloat16"}
    if version == "0.3" and plan.num_stages > 1:
        out["disable_cuda_graphs"] = True
    if plan.offload == Offload.OPTIMIZER_PARAMS:
        out["enable_cpu_offload"] = True
    assert plan.offload != Offload.OPTIMIZER, "torchtitan offloads parameters with the optimizer (FSDP2), not alone"
    return out


def _fp8(plan: Plan) -> bool:
    """FP8 linear layers: v0.2.2 [model] converters = ["float8"] (job_config.py lines 730-753); 0.3.0
    model_registry(flavor, converters=[Float8LinearConverter.Config()]) (config_registry.py
    llama3_debugmodel_float8)."""
    return plan.precision.value == "fp8"


def fp8_filter(plan: Plan, version: str) -> list[str]:
    """Linears kept in bf16 under FP8: the output projection, as torchtitan's own recipes do (0.3.0
    models/llama3/config_registry.py llama3_405b line 304: filter_fqns=["lm_head"]; deepseek_v3
    config_registry.py line 259 adds "router.gate" for MoE); v0.2.2 [quantize.linear.float8] filter_fqns
    (job_config.py lines 731-745, default none) names the head `output`."""
    return [HEAD[version]] + (["router.gate"] if plan.model.is_moe else [])


def config(plan: Plan) -> dict[str, dict]:
    """The torchtitan 0.2.2 TOML as sections."""
    name, flav, _, _ = flavor(plan) or ("llama3", f"CUSTOM: {plan.model.id}", "", "")
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}[plan.recompute]
    return {"job": {"description": f"{plan.model.id}, written by hetplan export --to torchtitan (torchtitan 0.2.2)"},
            "model": {"name": name, "flavor": flav, **({"converters": ["float8"]} if _fp8(plan) else {})},
            **({"quantize.linear.float8": {"filter_fqns": fp8_filter(plan, "0.2")}} if _fp8(plan) else {}),
            "training": training(plan, "0.2"),
            "parallelism": parallelism(plan, "0.2"),
            "activation_checkpoint": {"mode": mode, **({"selective_ac_option": "op"} if mode == "selective" else {})},
            **({"checkpoint": {"enable": True, "initial_load_path": CHECKPOINT_PLACEHOLDER,
                               "initial_load_model_only": True}} if from_checkpoint(plan) else {})}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(cfg: dict[str, dict]) -> str:
    lines = []
    for section, values in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


PY_CONFIG = '''"""torchtitan 0.3.0 config written by `hetplan export --to torchtitan` for {model}.

Run (from this folder, so that it is importable; launch.sh does this):
    PYTHONPATH=. torchrun ... -m torchtitan.train --module hetplan_torchtitan --config hetplan_plan
{toml_line}
"""
{imports}

TRAINING = {training}
PARALLELISM = {parallelism}
# {model}'s RoPE and norms as hetplan's catalog states them (the checkpoint's config.json); torchtitan's
# flavor may differ (its llama3 8B/70B are Llama 3.1's, with "llama" RoPE scaling)
ARCHITECTURE = {architecture}


def set_architecture(model_config):
    """Every RoPE and RMSNorm of the model as ARCHITECTURE says."""
    for _, rope, _, _ in model_config.traverse(RoPE.Config, recurse=True):
        rope.theta = ARCHITECTURE["rope_theta"]
        rope.scaling = ARCHITECTURE["rope_scaling"]
        if rope.scaling == "llama":
            rope.scaling_factor = ARCHITECTURE["rope_scaling_factor"]
        elif rope.scaling == "yarn":
            rope.rope_factor = ARCHITECTURE["rope_scaling_factor"]
    for _, norm, _, _ in model_config.traverse(RMSNorm.Config, recurse=True):
        norm.eps = ARCHITECTURE["norm_eps"]


def absolute_assets_path(path):
    """The tokenizer folder (hf_assets_path): HF_ASSETS_PATH if set, a relative one taken from the folder
    launch.sh was started in (HETPLAN_CALLER_DIR), not this folder, where launch.sh runs."""
    path = os.environ.get("HF_ASSETS_PATH") or path
    return os.path.normpath(os.path.join(os.environ.get("HETPLAN_CALLER_DIR", os.getcwd()), path))


def hetplan_plan():
    config = {base}()
{converters}    set_architecture(config.model_spec.model)
    config.hf_assets_path = absolute_assets_path(config.hf_assets_path)
    for key, value in TRAINING.items():
        setattr(config.training, key, value)
    config.parallelism = ParallelismConfig(**PARALLELISM)
    config.activation_checkpoint = {ac}
{checkpoint}    return config
'''

CHECKPOINT_SOURCE = '''
    # {kind}: start from the checkpoint in ${var} (an absolute path or remote URI; launch.sh requires it),
    # model weights only; set initial_load_in_hf=True for a Hugging Face safetensors checkpoint.
    path = os.environ.get("{var}", "")
    if not path:
        raise SystemExit("set {var} to the checkpoint folder to fine-tune from")
    config.checkpoint = dataclasses.replace(config.checkpoint, enable=True, initial_load_path=path,
                                            initial_load_model_only=True)
'''


def python_config(plan: Plan) -> str:
    found = flavor(plan)
    base = found[2] if found else "CUSTOM_MODEL_CONFIG"
    ac = {Recompute.NONE: "None", Recompute.SELECTIVE: "SelectiveAC.Config()", Recompute.FULL: "FullAC.Config()"}
    imports = ["import os", "",
               "from torchtitan.config import ParallelismConfig",
               "from torchtitan.models.common.nn_modules import RMSNorm",
               "from torchtitan.models.common.rope import RoPE",
               "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401",
               f"from torchtitan.models.{found[0]}.config_registry import {base}" if found else
               f"# {plan.model.id} has no torchtitan model: define CUSTOM_MODEL_CONFIG() -> Trainer.Config for it\n"
               f"from my_models import CUSTOM_MODEL_CONFIG"]
    converters = []
    if _fp8(plan):
        imports += ["from torchtitan.components.quantization import Float8LinearConverter"]
        converters.append(f"Float8LinearConverter.Config(filter_fqns={fp8_filter(plan, '0.3')})")
    if plan.training.kind == JobKind.LORA:
        rank = plan.training.lora_rank
        imports += ["from torchtitan.components.lora import LoRAConverter"]
        converters.append(f"LoRAConverter.Config(rank={rank}, alpha={lora_alpha(rank)}, "
                          f"target_modules={LORA_TARGETS})")
    spec = ""
    if found:     # the plan's converters and no others
        imports += [f"from torchtitan.models.{found[0]} import model_registry"]
        spec = f'    config.model_spec = model_registry("{found[1]}", converters=[{", ".join(converters)}])\n'
        if found[1] in ASSETS:
            spec += f'    config.hf_assets_path = "{ASSETS[found[1]]}"\n'
    elif converters:
        spec = f'    # {plan.model.id}: build its model_spec with converters=[{", ".join(converters)}]\n'
    checkpoint = ""
    if from_checkpoint(plan):
        imports = ["import dataclasses"] + imports
        checkpoint = CHECKPOINT_SOURCE.format(kind=plan.training.kind.value, var=CHECKPOINT_VARIABLE).lstrip("\n")
    toml_line = ("torchtitan 0.2.x has no LoRA: this job has no 0.2 config." if plan.training.kind == JobKind.LORA
                 else "For torchtitan 0.2.x use torchtitan.toml instead (--job.config_file torchtitan.toml).")
    return PY_CONFIG.format(model=plan.model.id, imports="\n".join(imports), base=base, ac=ac[plan.recompute],
                            converters=spec, checkpoint=checkpoint, toml_line=toml_line,
                            training=_python(training(plan, "0.3")), parallelism=_python(parallelism(plan, "0.3")),
                            architecture=_python(architecture(plan.model)))


ROPE_SCALING = {None: "none", "llama3": "llama", "yarn": "yarn"}   # catalog -> torchtitan RoPE.Config.scaling


def architecture(m) -> dict:
    """What set_architecture writes into every RoPE.Config and RMSNorm.Config of the model (0.3.0
    models/common/rope.py RoPE.Config: theta, scaling none|llama|yarn, scaling_factor (llama),
    rope_factor (yarn); models/common/nn_modules.py RMSNorm.Config.eps)."""
    return {"rope_theta": float(m.rope_theta), "rope_scaling": ROPE_SCALING[m.rope_scaling],
            "rope_scaling_factor": float(m.rope_scaling_factor), "norm_eps": float(m.norm_eps)}


def _python(values: dict) -> str:
    """A dict of numbers, strings, booleans and lists as Python source (JSON with Python's booleans)."""
    return json.dumps(values, indent=4).replace(": true", ": True").replace(": false", ": False")


def torchtitan_ranks(cluster: Cluster, plan: Plan) -> list[tuple[str, int]]:
    """(host, GPU) of each global rank, in rank order (mesh pp, dp_replicate, dp_shard, cp, tp)."""
    return one_mesh_ranks(cluster, plan)


def context_notes(plan: Plan) -> list[str]:
    """What context parallelism does in torchtitan beyond its keys (module docstring)."""
    cp = plan.context_parallel
    if cp == 1:
        return []
    notes = [f"context parallelism {cp}: torchtitan gathers each layer's keys and values over the {cp} ranks "
             f"(0.3.0 FlexAttention all-gather; 0.2.2 SDPA with context_parallel_rotate_method \"allgather\"), "
             f"not the overlapped ring hetplan's cost model times; FSDP shards over dp_shard x cp"]
    if flavor(plan) is None:
        notes.append("context parallelism on a custom model: torchtitan 0.3.0 runs it with FlexAttention only "
                     "(SDPA and varlen are refused under the default spmd_backend) and context_parallel_load_balancer "
                     "\"ptrr\"; 0.2.2 with SDPA or FlexAttention (for FlexAttention set the balancer to \"ptrr\")")
    return notes


def expert_notes(plan: Plan) -> list[str]:
    """What torchtitan does with the plan's experts beyond expert_parallel_degree (module docstring)."""
    m, ep = plan.model, plan.expert_parallel
    if not m.is_moe:
        return []
    notes = []
    if flavor(plan) is None:
        notes.append(f"mixture of experts: torchtitan has MoE models only in its own families ({MOE_FAMILIES} in "
                     f"0.3.0); {m.id} is none of them, so it needs a custom model built on torchtitan's MoE module "
                     f"(models/common/moe.py), else expert_parallel_degree has no effect")
    return notes


def architecture_notes(plan: Plan) -> list[str]:
    """What torchtitan's configs cannot state of the catalog model (module docstring, "Architecture")."""
    m, notes = plan.model, []
    if m.attention_dropout or m.hidden_dropout:
        notes.append(f"{m.id} trains with dropout {m.hidden_dropout:g} (attention {m.attention_dropout:g}); torchtitan's "
                     f"models have no dropout")
    if m.init_std != 0.02:
        notes.append(f"torchtitan initialises weights its own way (truncated normal, std 0.02, depth-scaled output "
                     f"projections), not with {m.id}'s init std {m.init_std:g}; this matters only from scratch")
    found = flavor(plan)
    if found and found[0] == "llama3" and plan.training.kind != JobKind.LORA and m.rope_scaling != "llama3":
        notes.append(f"torchtitan.toml (0.2.2) cannot set RoPE: its llama3 {found[1]} flavor is Llama 3.1's, with "
                     f"\"llama\" RoPE scaling x8, which {m.id} does not have; hetplan_torchtitan.py (0.3.0) sets it")
    return notes


def job_notes(plan: Plan) -> list[str]:
    notes = []
    kind = plan.training.kind
    if kind == JobKind.LORA:
        rank = plan.training.lora_rank
        notes.append(f"LoRA: rank {rank}, alpha {lora_alpha(rank):g} (scale 2, LoRAConverter's default alpha / rank) "
                     f"on {', '.join(LORA_TARGETS)}; torchtitan 0.2.2 has no LoRA, so no torchtitan.toml is written")
        notes.append("LoRA from a checkpoint: torchtitan 0.3.0 loads it with torch.distributed.checkpoint's default "
                     "planner, which refuses model keys the checkpoint lacks (the adapters' lora_a, lora_b): a "
                     "checkpoint of the base model alone may need them added (not tried here)")
        if flavor(plan) is None:
            notes.append("LoRA on a custom model: hetplan_torchtitan.py names the LoRAConverter.Config to add to "
                         "its model_spec's converters")
    if from_checkpoint(plan):
        notes.append(f"{kind.value}: hetplan_torchtitan.py reads the checkpoint folder from {CHECKPOINT_VARIABLE} "
                     f"(launch.sh requires it)" + ("" if kind == JobKind.LORA else
                                                   f"; in torchtitan.toml replace {CHECKPOINT_PLACEHOLDER}"))
    return notes


def export(plan: Plan, cluster: Cluster):
    notes = []
    if flavor(plan) is None:
        notes.append(f"torchtitan has no model definition for {plan.model.id} (its llama3 flavors 8B, 70B, 405B "
                     f"do not match its shape); it needs a custom model with the same module names")
    notes += architecture_notes(plan) + job_notes(plan) + context_notes(plan) + expert_notes(plan)
    agents = launch.units(torchtitan_ranks(cluster, plan))
    preamble = ['export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"',
                *(checkpoint_preamble("the checkpoint folder to fine-tune from (an absolute path)")
                  if from_checkpoint(plan) else [])]
    files = {"hetplan_torchtitan.py": python_config(plan)}
    if plan.training.kind != JobKind.LORA:        # v0.2.2 has no LoRA
        text = "# torchtitan 0.2.2 job config written by `hetplan export --to torchtitan` (0.3.0: hetplan_torchtitan.py)\n"
        files["torchtitan.toml"] = text + "".join(f"# note: {w}\n" for w in notes) + to_toml(config(plan))
    files |= {"launch.sh": launch.script(agents, ["-m", "torchtitan.train", "--module", "hetplan_torchtitan",
                                                  "--config", "hetplan_plan"],
                                         "torchtitan 0.3.0 launch written by `hetplan export --to torchtitan`",
                                         {}, preamble),
              "hostfile": launch.hostfile(agents)}
    return files, notes


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    """What torchtitan refuses, or runs otherwise, beyond its profile: expert parallelism outside FSDP,
    context parallelism's sequence splits and FSDP over cp (module docstring)."""
    out = []
    if plan.hybrid_shard and plan.expert_parallel > 1:
        out.append("hybrid sharding (data_parallel_replicate_degree > 1) with expert parallelism is not written: "
                   "torchtitan's expert FSDP mesh (efsdp) would span the replicate groups differently")
    if plan.expert_parallel > 1 and plan.zero_stage < 2:
        out.append(f"torchtitan takes expert parallelism from the sharded data-parallel ranks (dp_shard x cp x tp "
                   f"= efsdp x ep), never from dp_replicate, so a ZeRO-{plan.zero_stage} plan (replicated, "
                   f"data_parallel_shard_degree 1) cannot shard experts over {plan.expert_parallel} replicas; "
                   f"ZeRO-2 or 3 can")
    cp = plan.context_parallel
    if cp == 1:
        return out
    tp, _ = uniform_tp_dp(plan)
    if plan.zero_stage == 0:
        out.append(f"torchtitan shards parameters, gradients and optimizer states over the context-parallel group "
                   f"(FSDP on dp_shard x cp) whenever cp > 1, so a ZeRO-0 plan with context_parallel {cp} cannot be "
                   f"written as it is; ZeRO-2 or 3 can")
    if plan.seq_len % (tp * 2 * cp):
        out.append(f"torchtitan needs the sequence length ({plan.seq_len:,}) divisible by tp x 2 x cp = {tp * 2 * cp}")
    if plan.seq_len % (FLEX_BLOCK_TOKENS * cp):
        out.append(f"torchtitan 0.3.0's PTRR load balancer splits FlexAttention's {FLEX_BLOCK_TOKENS}-token blocks "
                   f"over cp: the sequence length ({plan.seq_len:,}) must be divisible by {FLEX_BLOCK_TOKENS * cp}")
    return out
