"""DeepSpeed (deepspeedai/DeepSpeed), PipelineModule + PipelineEngine, as pinned in VERSION.

A PipelineModule over a PipeDataParallelTopology: every stage has the same number of
data-parallel replicas and every replica the same share of the batch; layer boundaries are set
per stage. No tensor parallelism of its own in the pipeline engine. The pipeline engine runs
ZeRO stage 0 or 1 only; ZeRO-2/3 run without pipelining.
"""
from planner.engines.base import Engine, Execution, Space, PlanSwitch
from planner.engines.sources import DEEPSPEED as VERSION, DEEPSPEED_SOURCES
from planner.types import GIB, Offload, Precision, Recompute

ENGINE = Engine(
    name="deepspeed", title="DeepSpeed", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 1, 2, 3), zero_stages_pipelined=(0, 1), interleave=False, gpipe=False,
                switches=(PlanSwitch("overlap_grad_reduce", (1, 2, 3), pipelined=False,
                                 written_as="zero_optimization.overlap_comm", on_by_default=(3,)),),
                recomputes=(Recompute.NONE, Recompute.FULL), sequence_parallel=False, tensor_parallel=False,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
                offloads=((Offload.OPTIMIZER, (1, 2, 3)), (Offload.OPTIMIZER_PARAMS, (3,)))),
    execution=Execution(overlap_grad_reduce=False, fp32_grad_reduce=(), zero_overlap=0.5,
                        layer_overhead_s=0.0, framework_bytes=2.0 * GIB,
                        notes=("the pipeline engine reduces data-parallel gradients after the pipeline flush "
                               "(no overlap with the last backward pass), in the training dtype unless "
                               "communication_data_type says otherwise",)),
    exports=("deepspeed",),
    sources=DEEPSPEED_SOURCES,
    covered_by=("megatron",),       # its fp16 plans with ZeRO-0/1 (planner.engines.cover)
    summary="equal replicas per stage, exact layer boundaries, no tensor parallelism in the pipeline engine; "
            "ZeRO-1 with pipelining, ZeRO-2/3 without; full activation checkpointing only; pretraining and full "
            "fine-tuning; ZeRO-Offload of the optimizer (ZeRO 1-3) and of parameters (ZeRO-3); overlap_comm a plan "
            "switch without pipelining",
)
