"""torchtitan (pytorch/torchtitan) with FSDP2, TP and PP, as pinned in VERSION.

One device mesh (dp_shard x tp x pp): every stage the same tp and the same number of FSDP
replicas, even batch shares; stages may hold different layer counts (module_fqns_per_model_part).
Data parallelism is FSDP2 (fully_shard): ZeRO-3 by default, ZeRO-2 with
fsdp_reshard_after_forward = "never"; pure replication (ZeRO-0) with data_parallel_replicate_degree.
bf16 (or fp32) only: FSDP2's mixed precision has no loss scaler for fp16.

Execution: FSDP2's MixedPrecisionPolicy reduces gradients in fp32 by default (reduce_dtype
float32, torchtitan's mixed_precision_reduce), so bf16 gradients cross the wire in 4 bytes.
FSDP2 prefetches the next layer's all-gather while the current layer computes and reduce-scatters
a layer's gradients while the previous one runs its backward; the first all-gather of a pass and
the last reduce-scatter are exposed, and NCCL's kernels share the SMs, hence 0.8 of a pass's
compute to hide behind rather than all of it. Against 17 public torchtitan runs
(docs/validation.md) these runs are over-predicted by a median 35%, and the gap is compute (eager
element-wise kernels, selective op AC recomputing every other matmul): setting zero_overlap to 0
(nothing hidden) would not close it on the compute-bound 8-GPU rows and would make the
network-bound 405B row 20% too slow, so the value stays what the mechanics give.
"""
from planner.engines.base import Engine, Execution, Space
from planner.engines.sources import TORCHTITAN as VERSION, TORCHTITAN_SOURCES
from planner.types import GIB, Precision, Recompute

ENGINE = Engine(
    name="torchtitan", title="torchtitan", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 2, 3), zero_stages_pipelined=(0, 2, 3), interleave=True, gpipe=True,
                recomputes=(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), sequence_parallel=True,
                tensor_parallel=True, precisions=(Precision.FP32, Precision.BF16, Precision.FP8)),
    execution=Execution(overlap_grad_reduce=True, fp32_grad_reduce=(Precision.BF16,), zero_overlap=0.8,
                        layer_overhead_s=0.0, framework_bytes=2.5 * GIB,
                        notes=("FSDP2 prefetches the next layer's all-gather during the current layer's compute; "
                               "the first all-gather of each pass and the last reduce-scatter are exposed",)),
    exports=("torchtitan",),
    sources=TORCHTITAN_SOURCES,
    summary="FSDP2 (ZeRO-2/3) with TP and PP on one mesh, uneven layer split; bf16 only",
)
