"""PyTorch FSDP as run through HF Accelerate (`accelerate launch`, also under Trainer and TRL), as pinned in VERSION.

Every rank holds the whole model sharded over all ranks (FullyShardedDataParallel around the whole
layer stack, one FSDP unit per transformer layer): no pipeline stages and no tensor parallelism, as
Accelerate's FSDP plugin runs it (its TP and context parallelism are a separate parallelism_config
this profile does not write). Every rank takes the same share of each batch. Sharding strategies map
to ZeRO stages: FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0 (no optimizer-only sharding, so no
ZeRO-1); HYBRID_SHARD / HYBRID_SHARD_ZERO2 (FULL_SHARD / SHARD_GRAD_OP within a node, replicated across
nodes) with Plan.hybrid_shard = the GPUs of a host: states sharded over them, ZeRO's collectives on the
node's links, and each shard's gradients all-reduced across the nodes (planner.cost).

Execution: Accelerate sets FSDP's MixedPrecision with reduce_dtype = the training dtype, so bf16
gradients are reduce-scattered in 2 bytes, during the backward pass, one FSDP unit at a time. The
export writes backward_prefetch BACKWARD_PRE and forward_prefetch on (limit_all_gathers stays at its
default, on): the next layer's all-gather is issued while the current layer computes, the first of
each pass and the last reduce-scatter are exposed (planner.dataparallel.zero_window_s), and the compute
beside the others runs slower for sharing the SMs with NCCL (planner.comm.overlapped_s, a measured
average): zero_overlap=1.0, as torchtitan's FSDP2 for the same one-layer-ahead prefetch.
Hugging Face models run their element-wise ops eager (`kernels=EAGER`). Framework memory 2.5 GiB as
torchtitan's FSDP (an assumption: flat-parameter buffers and NCCL; no measurement in
../shared/reference sets it).
"""
from planner.engines.base import Engine, Execution, Space, PlanSwitch
from planner.engines.sources import FSDP as VERSION, FSDP_SOURCES
from planner.types import GIB, JobKind, Kernels, Offload, Precision, Recompute

ENGINE = Engine(
    name="fsdp", title="PyTorch FSDP (Accelerate)", version=VERSION,
    space=Space(uneven_layers=False, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 2, 3), zero_stages_pipelined=(), interleave=False, gpipe=False,
                recomputes=(Recompute.NONE, Recompute.FULL), sequence_parallel=False, tensor_parallel=False,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
                job_kinds=tuple(JobKind), offloads=((Offload.OPTIMIZER_PARAMS, (3,)),),
                pipeline_parallel=False, hybrid_shard=True,
                switches=(PlanSwitch("prefetch", (3,), written_as="fsdp_backward_prefetch BACKWARD_PRE, "
                                                              "fsdp_forward_prefetch true"),)),
    execution=Execution(overlap_grad_reduce=True, fp32_grad_reduce=(), zero_overlap=1.0,
                        layer_overhead_s=0.0, framework_bytes=2.5 * GIB, kernels=Kernels.EAGER,
                        notes=("FSDP reduce-scatters gradients in the training dtype during the backward pass "
                               "(Accelerate's mixed precision sets reduce_dtype to it); element-wise ops run eager",),
                        zero_note=("backward and forward prefetch issue the next layer's all-gather during the "
                                   "current layer's compute; the first all-gather of each pass and the last "
                                   "reduce-scatter are exposed")),
    exports=("fsdp",),
    sources=FSDP_SOURCES,
    summary="FSDP1 through Accelerate: FULL_SHARD / SHARD_GRAD_OP / NO_SHARD (ZeRO-3/2/0) over every GPU, no "
            "pipeline and no tensor parallelism, one GPU type; full activation checkpointing; fp32, bf16, fp16; "
            "pretraining, full fine-tuning, LoRA and QLoRA (PEFT); CPU offload of parameters with FULL_SHARD; "
            "HYBRID_SHARD (hybrid_shard) and prefetch as plan settings",
)
