"""hetplan's own runtime (`hetplan run-local`, planner/runtime): every plan feature but CPU offload.

It runs what the plan format states, on torch.distributed: stages of any layer count, replicas of
several pools and tensor-parallel degrees in one stage with uneven sample shares, ZeRO 0-3 over Adam
(each rank keeps its 1 / (tp dp cp) shard of the stage's states; ZeRO-3 gathers a stage's weights once
an iteration rather than layer by layer: see planner/runtime/worker.py),
interleaved 1F1B and GPipe, every recompute kind (planner/runtime/parallel.py and worker.py), LoRA and
QLoRA adapters with an NF4 base (planner/runtime/lora.py), context parallelism with a load-balanced
sequence split and keys and values gathered over the cp group (planner/runtime/parallel.py); it refuses
offload (planner/runtime/launch.py).
Its execution is the cost model's floor: gradients reduced in 16 bits in buckets behind the last
backward pass, ZeRO collectives hidden behind compute where compute is longer, no fixed per-layer
cost, 1.5 GiB of framework memory. Every other engine costs at least as much
(planner.engines.base.Execution.dominates), which keeps the search's bounds valid for all.
"""
from planner.engines.base import ALL_RECOMPUTES, Engine, Execution, Space
from planner.types import JobKind, Precision

ENGINE = Engine(
    name="hetplan", title="hetplan runtime", version="this repository (planner/runtime)",
    space=Space(uneven_layers=True, tp_per_stage=True, replicas_per_stage=True, mixed_stages=True,
                zero_stages=(0, 1, 2, 3), zero_stages_pipelined=(0, 1, 2, 3), interleave=True, gpipe=True,
                recomputes=ALL_RECOMPUTES, sequence_parallel=True, tensor_parallel=True,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
                job_kinds=tuple(JobKind), context_parallel=True),
    execution=Execution(),
    exports=("torchrun",),
    sources={"space": "planner/runtime/parallel.py, planner/runtime/worker.py (run-local executes every field of "
                      "hetplan.plan/1)",
             "execution": "the cost model's own assumptions: docs/cost-model.md"},
    summary="every plan feature but CPU offload, on CPUs with `hetplan run-local`; the reference the cost model "
            "describes",
)
