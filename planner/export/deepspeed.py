"""DeepSpeed ds_config JSON and PipelineModule stage boundaries.

Keys checked against deepspeedai/DeepSpeed `docs/_pages/config-json.md` (stored copy, commit
00376da): train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * number
of GPUs (data-parallel ranks under a pipeline); zero_optimization.stage; fp16.enabled and
bf16.enabled (the two modes cannot be combined); activation_checkpointing.partition_activations,
.cpu_checkpointing, .contiguous_memory_optimization.
Pipeline: `deepspeed/runtime/pipe/module.py` (commit 12e65a6): PipelineModule(layers, num_stages,
..., partition_method="parameters", activation_checkpoint_interval=0, ...); `_partition_layers`
knows only "uniform", "parameters" and "type:<regex>" ("profile" raises NotImplementedError), so no
public argument takes explicit boundaries; it sets `self.parts` (start of each stage, then the end)
and calls `self._set_bounds(start, stop)`. `deepspeed/runtime/pipe/engine.py` (commit 03f6f75)
asserts ZeRO stage < 2 under a pipeline and train_batch_size == micro batch * micro batches * dp.
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


SNIPPET = '''# Stage boundaries from `hetplan export --to deepspeed`.
# DeepSpeed's partition_method accepts "parameters", "uniform" or "type:<regex>" and none of them takes
# explicit boundaries (deepspeed/runtime/pipe/module.py), so this subclass replaces the private
# `_partition_layers`: it sets `parts` (the layer index where each stage starts, then the end) over
# the layer list [embedding, transformer layer 0, ..., layer {last}, head] and this rank's bounds.
# It relies on DeepSpeed internals (`_topo`, `global_rank`, `_layer_specs`, `_set_bounds`); recheck them
# when upgrading DeepSpeed.
import json
from deepspeed.pipe import PipelineModule

PARTS = json.load(open("pipeline_parts.json"))["parts"]


class PlannedPipelineModule(PipelineModule):
    def _partition_layers(self, method="uniform"):
        num_stages = self._topo.get_dim("pipe")
        if len(PARTS) != num_stages + 1 or PARTS[-1] != len(self._layer_specs):
            raise ValueError(f"pipeline_parts.json has {{PARTS}} for {{num_stages}} stages and "
                             f"{{len(self._layer_specs)}} layers")
        self.parts = list(PARTS)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])

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
