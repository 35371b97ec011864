"""DeepSpeed ds_config JSON and PipelineModule stage boundaries.

Keys checked against DeepSpeed's config documentation (deepspeed.ai/docs/config-json:
train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel
size; zero_optimization.stage; bf16.enabled / fp16.enabled) and runtime/pipe/module.py
(PipelineModule(layers, num_stages, partition_method="parameters" | "uniform" | "type:regex",
activation_checkpoint_interval); its `_partition_layers` sets `self.parts`, the layer index where
each stage starts, plus the end). Pipeline parallelism runs with ZeRO stage 0 or 1 only
(runtime/pipe/engine.py asserts stage < 2).
"""
from __future__ import annotations

import json

from planner.export.common import Capabilities, resolve
from planner.types import Cluster, Plan, Precision, Recompute

PIPELINE_CAPS = Capabilities(interleave=False, gpipe=False, zero_stages=(0, 1))
NO_PIPELINE_CAPS = Capabilities(interleave=False, gpipe=False)


def ds_config(plan: Plan) -> dict:
    d = len(plan.stages[0].replicas)
    cfg = {"train_batch_size": plan.global_batch,
           "train_micro_batch_size_per_gpu": plan.micro_batch,
           "gradient_accumulation_steps": plan.global_batch // (plan.micro_batch * d),
           "zero_optimization": {"stage": plan.zero_stage},
           "bf16": {"enabled": plan.precision == Precision.BF16},
           "fp16": {"enabled": plan.precision == Precision.FP16}}
    if plan.recompute != Recompute.NONE:
        cfg["activation_checkpointing"] = {"partition_activations": plan.stages[0].replicas[0].tp > 1,
                                           "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False}
    return cfg


def parts(plan: Plan) -> list[int]:
    """Boundaries over the layer list [embedding, layer 0, ..., layer L-1, head]."""
    return [0] + [1 + s.layer_start for s in plan.stages[1:]] + [plan.model.layers + 2]


SNIPPET = '''# Stage boundaries from `hetplan export --to deepspeed`. DeepSpeed's partition methods
# ("parameters", "uniform", "type:regex") cannot take explicit boundaries, so this subclass sets
# `parts` (the layer index where each stage starts, then the end) over the layer list
# [embedding, transformer layer 0, ..., layer {last}, head].
import json
from deepspeed.pipe import PipelineModule

PARTS = json.load(open("pipeline_parts.json"))["parts"]


class PlannedPipelineModule(PipelineModule):
    def _partition_layers(self, method="uniform"):
        super()._partition_layers(method="uniform")   # sets up the stage bookkeeping
        self.parts = list(PARTS)
        self._set_bounds(start=self.parts[self.stage_id], stop=self.parts[self.stage_id + 1])

# model = PlannedPipelineModule(layers=[embedding, *blocks, head], num_stages={stages},
#                               activation_checkpoint_interval={interval}, loss_fn=...)
'''


def export(plan: Plan, cluster: Cluster):
    caps = PIPELINE_CAPS if plan.num_stages > 1 else NO_PIPELINE_CAPS
    target, warnings, closest, est = resolve(plan, cluster, caps, "DeepSpeed")
    files = {"ds_config.json": json.dumps(ds_config(target), indent=2) + "\n"}
    if target.num_stages > 1:
        files["pipeline_parts.json"] = json.dumps({"num_stages": target.num_stages, "parts": parts(target),
                                                   "layers": "[embedding, layers 0..L-1, head]"}, indent=2) + "\n"
        files["pipeline_module.py"] = SNIPPET.format(last=target.model.layers - 1, stages=target.num_stages,
                                                     interval=1 if target.recompute != Recompute.NONE else 0)
    if target.stages[0].replicas[0].tp > 1:
        warnings = warnings + ["DeepSpeed's tensor parallelism comes from the model code (e.g. Megatron-DeepSpeed "
                               f"--tensor-model-parallel-size {target.stages[0].replicas[0].tp}); ds_config has no tp key"]
    return files, warnings, target, closest, est
