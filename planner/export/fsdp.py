"""PyTorch FSDP through HF Accelerate: an Accelerate config file (accelerate_fsdp.yaml) and launch.sh.

Read in the installed accelerate 1.15.0 (planner.engines.sources.FSDP; site-packages/accelerate):
- commands/config/config_args.py ClusterConfig (lines 179-232): compute_environment, distributed_type
  FSDP, mixed_precision (no, fp16, bf16), num_machines, num_processes (all processes of the job),
  machine_rank, main_process_ip/port, rdzv_backend, same_network, use_cpu, fsdp_config;
  from_yaml_file refuses unknown keys.
- commands/launch.py lines 512-605: the fsdp_config keys as --fsdp_* arguments (fsdp_version,
  fsdp_sharding_strategy FULL_SHARD | SHARD_GRAD_OP | NO_SHARD, fsdp_backward_prefetch BACKWARD_PRE,
  fsdp_forward_prefetch, fsdp_offload_params, fsdp_activation_checkpointing, fsdp_auto_wrap_policy,
  fsdp_use_orig_params, fsdp_state_dict_type, fsdp_cpu_ram_efficient_loading, fsdp_sync_module_states);
  lines 1258-1270 copy fsdp_config.x to args.fsdp_x.
- utils/launch.py lines 213-218: with several machines each starts num_processes / num_machines
  processes, so every host of the plan runs the same number of GPUs (`limits`); --gpu_ids picks them.
- utils/dataclasses.py FullyShardedDataParallelPlugin: limit_all_gathers defaults to True and has no
  launch flag (lines 1750-1757); TRANSFORMER_BASED_WRAP without a class wraps the model's
  _no_split_modules (lines 2085-2090), one FSDP unit per decoder layer.
FSDP version 1 is written: it has every sharding strategy and both prefetches (Accelerate refuses
forward_prefetch under FSDP2, dataclasses.py lines 1947-1948). Plans here have one stage, no tensor
parallelism and one GPU type (planner.engines.fsdp). The FullyShardedDataParallelPlugin and the
ClusterConfig of accelerate 1.15.0 load every file written here (tests/test_engine_exports.py).
"""
from __future__ import annotations

import shlex

import yaml

from planner.export import launch
from planner.export.common import checkpoint_preamble, from_checkpoint
from planner.runtime.ranks import rank_layout
from planner.types import Cluster, Offload, Plan, Precision, Recompute

CONFIG_FILE = "accelerate_fsdp.yaml"
SHARDING = {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 0: "NO_SHARD"}      # ZeRO stage -> FSDP sharding strategy
HYBRID = {3: "HYBRID_SHARD", 2: "HYBRID_SHARD_ZERO2"}    # ... with Plan.hybrid_shard (accelerate constants.py line 38)
MIXED_PRECISION = {Precision.FP32: "no", Precision.BF16: "bf16", Precision.FP16: "fp16"}


def fsdp_config(plan: Plan) -> dict:
    """The fsdp_config section: the plan's sharding, prefetch, checkpointing and offload."""
    return {"fsdp_version": 1,
            "fsdp_sharding_strategy": (HYBRID if plan.hybrid_shard else SHARDING)[plan.zero_stage],
            "fsdp_backward_prefetch": "BACKWARD_PRE" if plan.prefetch is not False else "NO_PREFETCH",
            "fsdp_forward_prefetch": plan.prefetch is not False,      # the plan's prefetch switch (off: neither)
            "fsdp_offload_params": plan.offload == Offload.OPTIMIZER_PARAMS,
            "fsdp_activation_checkpointing": plan.recompute == Recompute.FULL,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_use_orig_params": True,          # PEFT adapters: frozen and trained parameters in one unit
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": from_checkpoint(plan),
            "fsdp_sync_module_states": True}


def accelerate_config(plan: Plan, machines: int) -> dict:
    return {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "debug": False,
            "mixed_precision": MIXED_PRECISION[plan.precision], "use_cpu": False,
            "num_machines": machines, "num_processes": plan.num_gpus, "machine_rank": 0,
            "rdzv_backend": "static", "same_network": True, "main_training_function": "main",
            "fsdp_config": fsdp_config(plan)}


def hosts(cluster: Cluster, plan: Plan) -> list[tuple[str, tuple[int, ...]]]:
    """(host, its GPU indices) in machine-rank order."""
    return [(u.host, u.gpus) for u in launch.units([(f"{i.pool}-{i.node}", i.local_gpu)
                                                    for i in rank_layout(cluster, plan)])]


def script(machines: list[tuple[str, tuple[int, ...]]], plan: Plan) -> str:
    names = [h for h, _ in machines]
    lines = ["#!/usr/bin/env bash",
             "# PyTorch FSDP launch written by `hetplan export --to fsdp`: run this script on every host below.",
             "# Each host starts `accelerate launch` with its machine rank and GPUs; accelerate_fsdp.yaml holds the",
             "# rest. Hosts are named <pool>-<node>: rename them here, or set HOST=<name below>.",
             "set -euo pipefail",
             'cd "$(dirname "$0")"',
             'HOST="${HOST:-$(hostname)}"',
             'SCRIPT_ARGS=("$@")   # passed on to the training script',
             'TRAIN_SCRIPT="${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your training script (Trainer, TRL or an '
             'Accelerate loop)}"',
             f'MAIN_PROCESS_IP="${{MAIN_PROCESS_IP:-{names[0]}}}"     # the host of machine rank 0',
             f'MAIN_PROCESS_PORT="${{MAIN_PROCESS_PORT:-{launch.PORT}}}"',
             *(checkpoint_preamble("the model (Hugging Face directory) the job starts from")
               if from_checkpoint(plan) else []),
             "start() {   # machine rank, GPU ids",
             f'  accelerate launch --config_file {CONFIG_FILE} --machine_rank "$1" --gpu_ids "$2" \\',
             '    --main_process_ip "$MAIN_PROCESS_IP" --main_process_port "$MAIN_PROCESS_PORT" \\',
             '    "$TRAIN_SCRIPT" ${SCRIPT_ARGS[@]+"${SCRIPT_ARGS[@]}"}',
             "}",
             'case "$HOST" in']
    lines += [f"  {shlex.quote(h)}) start {k} {','.join(map(str, gpus))} ;;" for k, (h, gpus) in enumerate(machines)]
    lines += [f'  *) echo "launch.sh: HOST=$HOST is not a host of this plan ({" ".join(names)}); run on one of '
              f'them or set HOST" >&2; exit 2 ;;',
              "esac", ""]
    return "\n".join(lines)


def export(plan: Plan, cluster: Cluster):
    machines = hosts(cluster, plan)
    files = {CONFIG_FILE: yaml.safe_dump(accelerate_config(plan, len(machines)), sort_keys=False),
             "launch.sh": script(machines, plan)}
    notes = ["FSDP1 with backward_prefetch BACKWARD_PRE, forward_prefetch and limit_all_gathers (Accelerate's "
             "default); each transformer layer is one FSDP unit (the model's _no_split_modules)"]
    if plan.training.adapters:
        notes.append(f"{plan.training.kind.value}: the training script wraps the model with PEFT "
                     f"(LoraConfig(r={plan.training.lora_rank})) before accelerator.prepare"
                     + ("; load the 4-bit base with BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                        "bnb_4bit_quant_storage=the training dtype) so FSDP can shard it"
                        if plan.training.kind.value == "qlora" else ""))
    return files, notes


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    """What Accelerate's launcher cannot state: hosts with different numbers of processes."""
    counts = sorted({len(gpus) for _, gpus in hosts(cluster, plan)})
    if len(counts) > 1:
        return [f"accelerate launch starts num_processes / num_machines processes on every host; the plan "
                f"places {' and '.join(map(str, counts))} on its hosts"]
    if plan.hybrid_shard and plan.hybrid_shard != counts[0]:
        # FSDP's hybrid groups are torch.cuda.device_count() consecutive ranks (torch fsdp/_init_utils.py lines
        # 160-162, 201-212): the GPUs launch.sh makes visible on each host
        return [f"FSDP's HYBRID_SHARD shards within the {counts[0]} GPUs of each host; the plan shards within "
                f"groups of {plan.hybrid_shard}"]
    return []
