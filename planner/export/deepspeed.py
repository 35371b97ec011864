"""DeepSpeed: ds_config JSON, PipelineModule stage boundaries on an explicit topology, and the launch.

Read in deepspeedai/DeepSpeed at planner.engines.sources.DEEPSPEED:
- docs/_pages/config-json.md: train_batch_size = train_micro_batch_size_per_gpu *
  gradient_accumulation_steps * number of data-parallel ranks; zero_optimization.stage;
  fp16.enabled and bf16.enabled (not both); activation_checkpointing.partition_activations,
  .cpu_checkpointing, .contiguous_memory_optimization.
- deepspeed/runtime/pipe/module.py PipelineModule.__init__ (lines 141-180): without `topology`,
  dp = world size / num_stages (PipeDataParallelTopology(num_pp=num_stages, num_dp=dp)); with it,
  num_stages = topology.get_dim('pipe'). The module here always passes
  PipeDataParallelTopology(num_pp, num_dp) from the plan. `_partition_layers` (line 397 on) knows
  only "uniform", "parameters" and "type:<regex>", so no public argument takes explicit boundaries;
  it sets `self.parts` and calls `self._set_bounds(start, stop)`.
- deepspeed/runtime/pipe/topology.py PipeDataParallelTopology (lines 232-241): axes ['pipe', 'data'],
  data fastest: global rank = stage * dp + replica, which launch.sh pins (planner.export.launch).
- deepspeed/runtime/pipe/engine.py: ZeRO stage < 2 under a pipeline; the batch identity above.
The deepspeed profile (planner.engines.deepspeed) has no tensor parallelism and no selective
recompute, so neither reaches this writer: plans with them are searched again for DeepSpeed.
Offload, read in the installed deepspeed 0.19.8 (site-packages/deepspeed):
- runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig (lines 55-107): "Valid with stage
  1, 2, and 3"; device none|cpu|nvme, pin_memory (default true); DeepSpeedZeroOffloadParamConfig
  (lines 21-52): "Valid only with stage 3"; runtime/zero/config.py lines 164 and 171: the keys
  zero_optimization.offload_param and .offload_optimizer. The optimizer then runs as DeepSpeedCPUAdam
  (ops/adam/cpu_adam.py line 93), JIT-compiled at first use when the ops were not prebuilt
  (ops/op_builder/builder.py lines 549-577); DS_BUILD_CPU_ADAM=1 prebuilds it at install (DS-src
  op_builder/cpu_adam.py line 10 BUILD_VAR, setup.py line 172).
- Fine-tuning has no ds_config key: the training script loads the checkpoint with
  engine.load_checkpoint(load_dir, load_module_only=True, load_optimizer_states=False,
  load_lr_scheduler_states=False) (runtime/engine.py line 4395: "load_module_only: ... load only the
  model weights from the checkpoint. Ex. warmstarting"). launch.sh requires and exports CHECKPOINT for it.
  DeepSpeed's LoRA (deepspeed/linear) is model code, not a config key; its profile runs no adapter jobs.
The DeepSpeedConfig of DeepSpeed 0.19.8 loads every ds_config.json written here
(tests/test_engine_exports.py, where DeepSpeed is installed).
"""
from __future__ import annotations

import json

from planner.engines.sources import DEEPSPEED
from planner.export import launch
from planner.export.common import CHECKPOINT_VARIABLE, checkpoint_preamble, from_checkpoint, switched, uniform_tp_dp
from planner.runtime.ranks import rank_layout
from planner.types import Cluster, Offload, Plan, Precision, Recompute

FILES = ("ds_config.json", "pipeline_parts.json", "pipeline_module.py", "launch.sh", "hostfile")   # every file `export`
# may write

CPU = {"device": "cpu", "pin_memory": True}     # pinned host memory: DeepSpeed's default, written out


def ds_config(plan: Plan) -> dict:
    _, dp = uniform_tp_dp(plan)
    assert plan.recompute in (Recompute.NONE, Recompute.FULL), "the deepspeed profile has no selective recompute"
    cfg = {"train_batch_size": plan.global_batch,
           "train_micro_batch_size_per_gpu": plan.micro_batch,
           "gradient_accumulation_steps": plan.global_batch // (plan.micro_batch * dp),
           "zero_optimization": {"stage": plan.zero_stage},
           "bf16": {"enabled": plan.precision == Precision.BF16},      # fp32: both off (DeepSpeed's default)
           "fp16": {"enabled": plan.precision == Precision.FP16}}
    assert plan.precision.value in ("bf16", "fp16", "fp32"), "no FP8 in the deepspeed profile"
    if "overlap_grad_reduce" in switched(plan):      # DeepSpeed's overlap_comm (zero/config.py line 138; its
        #                                              default, None, turns it on for ZeRO-3 only, lines 384-386)
        cfg["zero_optimization"]["overlap_comm"] = plan.overlap_grad_reduce
    if plan.offload != Offload.NONE:
        cfg["zero_optimization"]["offload_optimizer"] = dict(CPU)
    if plan.offload == Offload.OPTIMIZER_PARAMS:
        assert plan.zero_stage == 3, "DeepSpeed offloads parameters under ZeRO-3 only"
        cfg["zero_optimization"]["offload_param"] = dict(CPU)
    if plan.recompute == Recompute.FULL:
        cfg["activation_checkpointing"] = {"partition_activations": False,
                                           "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    return cfg


def parts(plan: Plan) -> list[int]:
    """Boundaries over the layer list [embedding, layer 0, ..., layer L-1, head]."""
    return [0] + [1 + s.layer_start for s in plan.stages[1:]] + [plan.model.layers + 2]


SNIPPET = '''# Stage boundaries and topology from `hetplan export --to deepspeed`.
# The topology is explicit: PipeDataParallelTopology(num_pp={stages}, num_dp={dp}), so DeepSpeed does not
# infer dp as world size / stages. DeepSpeed's partition_method accepts "parameters", "uniform" or
# "type:<regex>" and none of them takes explicit boundaries (deepspeed/runtime/pipe/module.py), so this
# subclass replaces the private `_partition_layers`: it sets `parts` (the layer index where each stage
# starts, then the end) over [embedding, transformer layer 0, ..., layer {last}, head] and this rank's
# bounds. It relies on DeepSpeed internals (`_topo`, `global_rank`, `_layer_specs`, `_set_bounds`);
# recheck them when upgrading DeepSpeed (written for {version}).
import json
import os

from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "pipeline_parts.json")) as f:
    PLAN = json.load(f)
PARTS = PLAN["parts"]


def planned_topology():
    return PipeDataParallelTopology(num_pp=PLAN["num_stages"], num_dp=PLAN["num_dp"])


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers=[embedding, *blocks, head], loss_fn=..., ...) on the plan's topology."""

    def __init__(self, layers, **kwargs):
        kwargs.setdefault("topology", planned_topology())
        kwargs.setdefault("activation_checkpoint_interval", {interval})
        super().__init__(layers=layers, **kwargs)

    def _partition_layers(self, method="uniform"):
        num_stages = self._topo.get_dim("pipe")
        if len(PARTS) != num_stages + 1 or PARTS[-1] != len(self._layer_specs):
            raise ValueError(f"pipeline_parts.json has {{PARTS}} for {{num_stages}} stages and "
                             f"{{len(self._layer_specs)}} layers")
        self.parts = list(PARTS)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
'''


def deepspeed_ranks(cluster: Cluster, plan: Plan) -> list[tuple[str, int]]:
    """(host, GPU) of each global rank: rank = stage * dp + replica (axes ['pipe', 'data'])."""
    _, dp = uniform_tp_dp(plan)
    by_rank = {i.stage * dp + i.replica: (f"{i.pool}-{i.node}", i.local_gpu) for i in rank_layout(cluster, plan)}
    assert sorted(by_rank) == list(range(plan.num_gpus))
    return [by_rank[r] for r in range(plan.num_gpus)]


def export(plan: Plan, cluster: Cluster):
    _, dp = uniform_tp_dp(plan)
    files = {"ds_config.json": json.dumps(ds_config(plan), indent=2) + "\n"}
    if plan.num_stages > 1:
        files["pipeline_parts.json"] = json.dumps({"num_stages": plan.num_stages, "num_dp": dp, "parts": parts(plan),
                                                   "layers": "[embedding, layers 0..L-1, head]"}, indent=2) + "\n"
        files["pipeline_module.py"] = SNIPPET.format(last=plan.model.layers - 1, stages=plan.num_stages, dp=dp,
                                                     version=DEEPSPEED,
                                                     interval=1 if plan.recompute == Recompute.FULL else 0)
    agents = launch.units(deepspeed_ranks(cluster, plan))
    preamble = ['TRAIN_SCRIPT="${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your DeepSpeed training script}"',
                *(checkpoint_preamble("the DeepSpeed checkpoint directory to fine-tune from "
                                      "(the training script passes it to engine.load_checkpoint)")
                  if from_checkpoint(plan) else [])]
    files["launch.sh"] = launch.script(agents, ['"$TRAIN_SCRIPT"', "--deepspeed_config", "ds_config.json"],
                                       "DeepSpeed launch written by `hetplan export --to deepspeed`", {}, preamble)
    files["hostfile"] = launch.hostfile(agents)
    notes = [INITIALIZE_NOTE]
    if plan.num_stages > 1:
        notes.append("the training script builds its model with PlannedPipelineModule (pipeline_module.py)")
    return files, notes + job_notes(plan)


# launch.sh passes --deepspeed_config ds_config.json to the training script; deepspeed.initialize reads it from
# args and asserts when it is also given config= (deepspeed/__init__.py lines 529-531 in 0.19.8: "Not sure how
# to proceed, we were given deepspeed configs in the deepspeed arguments and deepspeed.initialize() function call")
INITIALIZE_NOTE = ("the training script parses its arguments with deepspeed.add_config_arguments(parser) and calls "
                   "deepspeed.initialize(args=args, model=..., model_parameters=...) without config= (launch.sh "
                   "passes --deepspeed_config ds_config.json, and DeepSpeed refuses a config given twice); "
                   "ds_config.json names no optimizer (its learning rate is yours): add an \"optimizer\" block "
                   "to it (DeepSpeed then builds its own Adam, DeepSpeedCPUAdam where the optimizer is "
                   "offloaded) or pass optimizer= to initialize; with neither, DeepSpeed stops at the first "
                   "backward (\"must provide optimizer during init\"); the plan's memory counts Adam's states; "
                   "launch.sh starts it under torchrun")


def job_notes(plan: Plan) -> list[str]:
    notes = []
    if from_checkpoint(plan):
        notes.append(f"{plan.training.kind.value}: DeepSpeed loads checkpoints through its API, not ds_config: after "
                     f"deepspeed.initialize the training script calls engine.load_checkpoint(os.environ"
                     f"['{CHECKPOINT_VARIABLE}'], load_module_only=True, load_optimizer_states=False, "
                     f"load_lr_scheduler_states=False); launch.sh requires and exports {CHECKPOINT_VARIABLE}")
    if plan.offload != Offload.NONE:
        notes.append(f"offload {plan.offload.value}: DeepSpeedCPUAdam is JIT-compiled at the first run unless "
                     f"DeepSpeed was installed with DS_BUILD_CPU_ADAM=1 (needs ninja and a C++ compiler)")
    return notes


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []
