"""Megatron-LM (NVIDIA/Megatron-LM, pretrain_gpt.py), as pinned in VERSION.

One device mesh: every pipeline stage has the same tensor-parallel degree and the same number of
data-parallel replicas, each replica the same share of the batch. Stages may hold different layer
counts (--pipeline-model-parallel-layout). The pipeline stage of a rank follows from its global
rank, pipeline outermost in the default rank order, so a launch must pin ranks to GPU types.
"""
from planner.engines.base import ALL_RECOMPUTES, Engine, Execution, Space, PlanSwitch
from planner.engines.sources import MEGATRON as VERSION, MEGATRON_SOURCES
from planner.types import GIB, Offload, Precision

ENGINE = Engine(
    name="megatron", title="Megatron-LM", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 1, 2, 3), zero_stages_pipelined=(0, 1), interleave=True, gpipe=False,
                recomputes=ALL_RECOMPUTES, sequence_parallel=True, tensor_parallel=True,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16, Precision.FP8),
                offloads=((Offload.OPTIMIZER, (1,)),), context_parallel=True,
                expert_parallel=True, tp_comm_overlap=True, expert_tensor_parallel=True,
                switches=(PlanSwitch("overlap_grad_reduce", (0, 1, 2, 3), written_as="--overlap-grad-reduce"),
                          PlanSwitch("overlap_param_gather", (1,), needs=("overlap_grad_reduce",),
                                 written_as="--overlap-param-gather"))),
    execution=Execution(overlap_grad_reduce=True, fp32_grad_reduce=(Precision.BF16,), zero_overlap=1.0,
                        layer_overhead_s=0.0, framework_bytes=2.0 * GIB, offload_grad_bytes=4.0,
                        tf32_default=True,    # the NGC PyTorch container's override (sources: tf32 default)
                        notes=("--overlap-grad-reduce is exported (unless the plan turns it off), so gradients are "
                               "reduced in buckets during the last backward pass",)),
    exports=("megatron",),
    sources=MEGATRON_SOURCES,
    summary="one tp and one dp for all stages, even batch shares, uneven layer split; ZeRO-1 (distributed "
            "optimizer) with pipelining, ZeRO-2/3 through Megatron-FSDP without it; pretraining and full "
            "fine-tuning (no LoRA in Megatron-LM itself); optimizer offload with the distributed optimizer; plan "
            "switches --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather (ZeRO-1)",
)
