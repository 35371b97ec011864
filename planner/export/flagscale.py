"""FlagScale heterogeneous training: process meshes with their own tp/dp, the uneven layer split, the launch.

Files: `flagscale_args.sh` (MEGATRON_ARGS for flagscale/train/train_gpt.py: Megatron-LM's arguments
plus the hetero ones), `launch.sh` (torchrun agents with fixed node ranks, each passing its
`--hetero-current-device-type`), `hostfile` (`host slots=N type=T`, hosts in rank order) and
`flagscale_train.yaml`, the same run in FlagScale's own runner form (`python run.py --config-path
DIR --config-name flagscale_train action=run`), written where every host holds one mesh type.

Read in flagos-ai/FlagScale at planner.engines.sources.FLAGSCALE:
- flagscale/backends/Megatron-LM/megatron/training/arguments.py.patch `_add_hetero_args`
  (patch lines 600-625): --enable-hetero, --hetero-device-types (strings), --hetero-current-device-type,
  --hetero-pipeline-layer-split (ints, one a stage), --hetero-process-meshes (ints),
  --use-partial-reduce-for-shared-embedding (patch line 500).
- flagscale/train/arguments.py FSTrainArguments.pre_validate_args (lines 81-215): meshes are
  [tp, cp, ep, dp, pp] groups of five; data_parallel_size := dp of mesh 0 and "data_parallel_size *
  micro_batch_size should be divisible by all hetero_process_meshes_dp"; mesh i then runs
  micro-batches of dp0 * micro_batch_size / dp_i sequences; cp equal in every mesh; pipeline size
  = sum of the meshes' pp = len(hetero_pipeline_layer_split), whose sum is --num-layers; no
  standalone embedding stage; no virtual pipeline; tied embeddings need tp of the first and last
  mesh equal, and with the distributed optimizer and unequal dp of those meshes, dp dividing and
  --use-partial-reduce-for-shared-embedding; one device type a mesh, the current one among them;
  sequence parallelism is switched off in a mesh of tp 1.
- flagscale/train/hetero/parallel_context.py RankMapper.build_rank_mapping (lines 129-161):
  logical ranks sort processes by the index of their device type in --hetero-device-types, then
  by global rank; ProcessMesh (lines 180-260) orders a mesh's ranks 'tp-cp-ep-dp-pp' from its
  offset. So a mesh's ranks are consecutive: offset + tp rank + tp * replica + tp * dp * stage in
  mesh. Device types here are the pool names (labels only: nothing else reads them); a pool
  whose meshes are not consecutive gets one label per run ("<pool>#k") so the sort keeps mesh order.
- flagscale/runner/utils.py parse_hostfile (lines 69-109): `host slots=N type=T` lines, all hosts
  typed or none; flagscale/runner/runner_train.py: node_rank is the hostfile order
  (SSHTrainRunner.run), `rdzv_backend` is read from the runner config (_get_runner_cmd_train,
  line 177) and the hostfile type becomes --hetero-current-device-type (_run_each, lines 435-441);
  envs.node_specific sets a host's CUDA_VISIBLE_DEVICES (utils.py update_nodes_envs).
- The FlagScale examples (examples/llama3/conf/train_hetero.yaml) export CUDA_DEVICE_MAX_CONNECTIONS=1.
- LoRA (flagscale/backends/Megatron-LM/megatron/training/arguments.py.patch `_add_peft_args`, patch
  lines 653-679): --peft-type lora, --lora-dim (int), --lora-alpha (int), --lora-target-modules from
  linear_qkv, linear_proj, linear_fc1, linear_fc2 (+ MLA projections); validate_args (patch lines
  267-275, 336-341) asserts Transformer Engine layers (--transformer-impl, default transformer_engine at
  the submodule's Megatron-LM 8479eb35, arguments.py line 1311), no MoE, no recompute and
  `--ckpt-format torch` (choices at 8479eb35 arguments.py line 2400). The adapter output is scaled by
  alpha / dim (flagscale/train/peft/utils.py line 246); PEFT is applied, the base frozen and the
  checkpoint hooks set in flagscale/train/train.py lines 1170-1183. Fine-tuning (full or LoRA) loads
  with Megatron-LM's --load and --finetune (8479eb35 arguments.py lines 2338 and 2363), as
  planner.export.megatron writes them. The runner YAML gives them under train.system.checkpoint: the
  runner sets checkpoint.load itself, to the experiment folder's checkpoints, unless it is given there
  (flagscale/runner/runner_train.py _update_config_train lines 121-146), and flatten_dict_to_args
  (flagscale/runner/utils.py lines 271-290) writes a flat `load` and then the checkpoint section's, so a
  flat `load` would be followed by a second --load, the empty folder, which argparse keeps (the last).
  launch.sh exports PYTHONPATH as the runner does: FlagScale's root, then its Megatron-LM submodule
  third_party/Megatron-LM (runner_train.py lines 253 and 272). The runner YAML's `hostfile` is opened from
  where run.py starts, so `hetplan export --out` writes its absolute path (`place`).
  The runner YAML gives --load as `${oc.env:CHECKPOINT}`: the
  runner resolves the config (OmegaConf.to_container(..., resolve=True), flagscale/runner/runner_train.py
  line 36). FlagScale has no optimizer offload of its own, and its profile none (planner.engines).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from planner.export import launch
from planner.export.common import checkpoint_preamble, from_checkpoint
from planner.export.megatron import (ShellWord, args_script, job_notes, model_arguments, model_warnings,
                                     training_arguments, vocab_arguments, vocab_note)
from planner.runtime.ranks import rank_layout
from planner.types import Cluster, JobKind, Plan

FILES = ("flagscale_args.sh", "launch.sh", "hostfile", "flagscale_train.yaml")   # every file `export` may write

MEGATRON_SUBMODULE = "third_party/Megatron-LM"   # FlagScale's Megatron-LM (.gitmodules; pinned at 8479eb35)
CHECKPOINT_KEYS = ("load", "finetune")            # written under train.system.checkpoint (runner_yaml)
# LoRA on every linear layer of a transformer layer, as planner.training counts the adapters
# (q/k/v, output projection, and the MLP's two matrices; a SwiGLU's gate and up share linear_fc1 in mcore).
LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def lora_alpha(rank: int) -> int:
    """alpha = 2 x rank: the scale alpha / rank stays 2, FlagScale's default scale (--lora-dim 8,
    --lora-alpha 16), whatever rank the plan chose; a fixed alpha of 16 would shrink the adapters'
    update as the rank grows (0.25 at rank 64)."""
    return 2 * rank


@dataclass(frozen=True)
class Mesh:
    pool: str
    tp: int
    dp: int
    first_stage: int
    stages: int
    label: str = ""            # its --hetero-device-types entry


def meshes(plan: Plan) -> list[Mesh]:
    """Runs of consecutive stages on one pool with one tp and one replica count."""
    out: list[Mesh] = []
    for i, s in enumerate(plan.stages):
        key = (s.replicas[0].pool, s.replicas[0].tp, len(s.replicas))
        if out and (out[-1].pool, out[-1].tp, out[-1].dp) == key:
            last = out[-1]
            out[-1] = Mesh(last.pool, last.tp, last.dp, last.first_stage, last.stages + 1)
        else:
            out.append(Mesh(*key, i, 1))
    labelled, runs = [], {}
    for k, m in enumerate(out):
        contiguous = k > 0 and out[k - 1].pool == m.pool
        if not contiguous:
            runs[m.pool] = runs.get(m.pool, -1) + 1
        label = m.pool if runs[m.pool] == 0 else f"{m.pool}#{runs[m.pool]}"
        labelled.append(Mesh(m.pool, m.tp, m.dp, m.first_stage, m.stages, label))
    return labelled


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    """What FlagScale's pre_validate_args refuses in a plan its profile otherwise runs."""
    ms, out = meshes(plan), []
    dp0 = ms[0].dp
    bad = [m.dp for m in ms if (dp0 * plan.micro_batch) % m.dp]
    if bad:
        out.append(f"FlagScale runs micro-batches of dp0 x micro_batch / dp sequences in each mesh; "
                   f"{dp0} x {plan.micro_batch} is not divisible by the replica counts {bad}")
    if plan.model.tied_embeddings:
        if ms[0].tp != ms[-1].tp:
            out.append(f"FlagScale needs the first and last mesh to have the same tp with tied embeddings; "
                       f"the plan has tp {ms[0].tp} and {ms[-1].tp}")
        elif plan.zero_stage == 1 and ms[0].dp != ms[-1].dp and (ms[0].dp % ms[-1].dp and ms[-1].dp % ms[0].dp):
            out.append(f"FlagScale needs the first and last mesh's replica counts to divide one another with tied "
                       f"embeddings and the distributed optimizer; the plan has {ms[0].dp} and {ms[-1].dp}")
    return out


def flagscale_ranks(cluster: Cluster, plan: Plan) -> tuple[list[tuple[str, int]], list[str]]:
    """(host, GPU) and mesh label of each logical rank, in rank order."""
    ms = meshes(plan)
    offset, base, mesh_of = 0, {}, {}
    for m in ms:
        for i in range(m.first_stage, m.first_stage + m.stages):
            base[i], mesh_of[i] = offset + (i - m.first_stage) * m.tp * m.dp, m
        offset += m.tp * m.dp * m.stages
    by_rank = {}
    for info in rank_layout(cluster, plan):
        m = mesh_of[info.stage]
        by_rank[base[info.stage] + info.replica * m.tp + info.tp_rank] = (f"{info.pool}-{info.node}", info.local_gpu,
                                                                          m.label)
    assert sorted(by_rank) == list(range(plan.num_gpus)), "FlagScale ranks must cover the plan's GPUs once"
    rows = [by_rank[r] for r in range(plan.num_gpus)]
    return [(h, g) for h, g, _ in rows], [label for _, _, label in rows]


def arguments(plan: Plan) -> list[tuple[str, ...]]:
    ms = meshes(plan)
    tp0 = ms[0].tp
    mesh_ints = [x for m in ms for x in (m.tp, 1, 1, m.dp, m.stages)]
    args = model_arguments(plan)[:6] + [("--tensor-model-parallel-size", tp0),
                                        ("--pipeline-model-parallel-size", plan.num_stages)]
    args += [("--enable-hetero",), ("--hetero-process-meshes", *mesh_ints),
             ("--hetero-pipeline-layer-split", *[s.num_layers for s in plan.stages]),
             ("--hetero-device-types", *[m.label for m in ms])]
    if plan.model.tied_embeddings and plan.zero_stage == 1 and ms[0].dp != ms[-1].dp:
        args += [("--use-partial-reduce-for-shared-embedding",)]
    args += (training_arguments(plan, max(m.tp for m in ms)) + lora_arguments(plan) + model_arguments(plan)[6:]
             + vocab_arguments(plan.model, tp0))
    return [tuple(x if isinstance(x, str) else str(x) for x in a) for a in args]


def lora_arguments(plan: Plan) -> list[tuple]:
    if plan.training.kind != JobKind.LORA:
        return []
    rank = plan.training.lora_rank
    return [("--peft-type", "lora"), ("--lora-dim", rank), ("--lora-alpha", lora_alpha(rank)),
            ("--lora-target-modules", *LORA_TARGETS), ("--ckpt-format", "torch")]


LIST_ARGS = {"hetero_process_meshes": int, "hetero_pipeline_layer_split": int, "hetero_device_types": str,
             "lora_target_modules": str}


def _yaml_value(key: str, values: tuple[str, ...]) -> str:
    """A flag's value as FlagScale's flatten_dict_to_args turns it back into words (true: a switch)."""
    if key in LIST_ARGS:
        return json.dumps([LIST_ARGS[key](v) for v in values])
    if not values:
        return "true"
    if isinstance(values[0], ShellWord):       # "$CHECKPOINT" -> OmegaConf's environment resolver
        return "${oc.env:" + values[0].strip('"$') + "}"
    return json.dumps(values[0]) if not values[0].lstrip("-").isdigit() else values[0]


def runner_yaml(plan: Plan, agents: list[launch.Unit], labels_of_host: dict[str, str]) -> str:
    """FlagScale's runner config (hydra): experiment + train sections, train args as MEGATRON_ARGS gives them."""
    lines = ["# FlagScale runner config written by `hetplan export --to flagscale`:",
             "#   python run.py --config-path <this folder> --config-name flagscale_train action=run",
             "# Set train.data (data_path, tokenizer) before running; node ranks follow the hostfile order.",
             "defaults:", "  - _self_",
             "experiment:", f"  exp_name: hetplan_{plan.model.id}", "  exp_dir: ./outputs_hetplan",
             "  task:", "    type: train", "    backend: megatron", "    entrypoint: flagscale/train/train_gpt.py",
             "  runner:", "    backend: torchrun", f"    hostfile: {HOSTFILE_LINE}", "    rdzv_backend: static",
             "  envs:", "    CUDA_DEVICE_MAX_CONNECTIONS: 1", "    node_specific:"]
    for host in labels_of_host:
        gpus = ",".join(str(g) for u in agents if u.host == host for g in u.gpus)
        lines += [f"      {host}:", f'        CUDA_VISIBLE_DEVICES: "{gpus}"']
    lines += ["action: run", "train:", "  system:"]
    checkpoint = []
    for arg in arguments(plan):
        key = arg[0][2:].replace("-", "_")
        (checkpoint if key in CHECKPOINT_KEYS else lines).append(f"    {key}: {_yaml_value(key, arg[1:])}")
    if checkpoint:      # the runner sets checkpoint.load itself (the experiment's folder) unless given there
        lines += ["    checkpoint:", *["  " + line for line in checkpoint]]
    lines += ["  model: {}", "  data: {}", ""]
    return "\n".join(lines)


HOSTFILE_LINE = "hostfile    # relative to where run.py starts: `hetplan export --out` writes this folder's path"


def place(files: dict[str, str], folder) -> dict[str, str]:
    """The files as written into `folder` (an absolute path): the runner YAML names the hostfile beside it,
    since FlagScale's runner opens it from where run.py starts (runner_train.py line 407, utils.py
    parse_hostfile: a missing file runs on this machine alone, with a warning)."""
    if "flagscale_train.yaml" not in files:
        return files
    hostfile = json.dumps(str(folder / "hostfile"))
    return {**files, "flagscale_train.yaml": files["flagscale_train.yaml"].replace(HOSTFILE_LINE, hostfile)}


def export(plan: Plan, cluster: Cluster):
    ranks, labels = flagscale_ranks(cluster, plan)
    agents = launch.units(ranks, labels)
    label_of = {u.node_rank: labels[u.first_rank] for u in agents}
    notes = model_warnings(plan) + vocab_note(plan.model, meshes(plan)[0].tp) + job_notes(plan)
    if plan.training.kind == JobKind.LORA:
        notes.append(f"LoRA: rank {plan.training.lora_rank}, alpha {lora_alpha(plan.training.lora_rank)} (scale 2, "
                     f"FlagScale's default alpha / dim), on {', '.join(LORA_TARGETS)}; FlagScale's PEFT needs "
                     f"Transformer Engine layers and the torch checkpoint format (--ckpt-format torch)")
    ms = meshes(plan)
    if len({m.dp for m in ms}) > 1:
        notes.append(f"FlagScale runs {plan.global_batch // (ms[0].dp * plan.micro_batch)} micro-batches in every "
                     f"mesh, of {', '.join(str(ms[0].dp * plan.micro_batch // m.dp) for m in ms)} sequences per "
                     f"replica (mesh by mesh): the same samples per replica as the plan, in other micro-batch sizes")
    preamble = ['FLAGSCALE_DIR="${FLAGSCALE_DIR:?set FLAGSCALE_DIR to your FlagScale checkout}"',
                # what FlagScale's runner exports before it starts train_gpt.py (runner_train.py lines 253, 272):
                # its root and the patched Megatron-LM of its submodule
                f'export PYTHONPATH="$FLAGSCALE_DIR:$FLAGSCALE_DIR/{MEGATRON_SUBMODULE}${{PYTHONPATH:+:$PYTHONPATH}}"',
                *(checkpoint_preamble("the checkpoint directory to fine-tune from (--load, torch format)")
                  if from_checkpoint(plan) else []),
                "source ./flagscale_args.sh"]
    command = ['"$FLAGSCALE_DIR/flagscale/train/train_gpt.py"', '"${MEGATRON_ARGS[@]}"']
    files = {"flagscale_args.sh": args_script(arguments(plan), notes, "flagscale"),
             "launch.sh": launch.script(agents, command, "FlagScale launch written by `hetplan export --to flagscale`",
                                        {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, preamble,
                                        unit_args=lambda u: ["--hetero-current-device-type", label_of[u.node_rank]])}
    host_labels: dict[str, set] = {}
    for u in agents:
        host_labels.setdefault(u.host, set()).add(label_of[u.node_rank])
    one_type = all(len(v) == 1 for v in host_labels.values()) and len(host_labels) == len(agents)
    labels_of_host = {h: next(iter(v)) for h, v in host_labels.items()}
    files["hostfile"] = launch.hostfile(agents, labels_of_host if one_type else None)
    if one_type:
        files["flagscale_train.yaml"] = runner_yaml(plan, agents, labels_of_host)
    else:
        notes.append("a host holds GPUs of two meshes (or the rank order visits it twice), which FlagScale's runner "
                     "cannot state (one hostfile line and type a host): use launch.sh")
    return files, notes
