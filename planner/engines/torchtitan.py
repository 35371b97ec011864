"""torchtitan (pytorch/torchtitan) with FSDP2, TP and PP, as pinned in VERSION.

One device mesh (dp_shard x tp x pp): every stage the same tp and the same number of FSDP
replicas, even batch shares; stages may hold different layer counts (module_fqns_per_model_part).
Data parallelism is FSDP2 (fully_shard): ZeRO-3 by default, ZeRO-2 with
fsdp_reshard_after_forward = "never"; pure replication (ZeRO-0) with data_parallel_replicate_degree.
bf16 (or fp32) only: FSDP2's mixed precision has no loss scaler for fp16.

Execution: FSDP2's MixedPrecisionPolicy reduces gradients in fp32 by default (reduce_dtype
float32, torchtitan's mixed_precision_reduce), so bf16 gradients cross the wire in 4 bytes.
FSDP2 prefetches the next layer's all-gather while the current layer computes and reduce-scatters
a layer's gradients while the previous one runs its backward (zero_overlap=1.0): the first all-gather
of a pass and the last reduce-scatter are exposed (planner.dataparallel.zero_window_s), and the
compute beside the others runs slower for sharing the SMs with NCCL (planner.comm.overlapped_s, a
measured average). The 0.8 that stood for both before was not measured.

Element-wise kernels: eager (`kernels=EAGER`). The v0.2.2 default is [compile] enable = false
(torchtitan/config/job_config.py, Compile; models/llama3/train_configs/llama3_8b.toml line 54) and
hetplan's torchtitan export does not turn it on, so every element-wise op of the Llama block
(rotary's casts and complex multiply, repeat_kv, SiLU and the gate product, the residual adds)
runs as its own kernel; nn.RMSNorm (model.py line 382) is one fused kernel in the PyTorch this
version runs (pytorch/pytorch#153666). planner.compute.elementwise_elements_per_token counts the
bytes each moves. Runs with torch.compile fuse them (Inductor): Kernels.FUSED, as
benchmarks/public_runs.py scores the compiled public runs.

Selective recomputation is op-level SAC (`selective_recompute=OP_SAC`): the export writes
selective_ac_option = "op", whose policy (torchtitan/distributed/activation_checkpoint.py
`_custom_policy`, `op_sac_save_list`) saves every other mm's output, SDPA's and the tp
reduce-scatters' and recomputes everything else, so it reruns more than Megatron-LM's selective
(wk, wo, w3 and every element-wise op) and keeps less (planner.memory.op_sac_saved_elements_per_token).
"""
from planner.engines.base import Engine, Execution, Space
from planner.engines.sources import TORCHTITAN as VERSION, TORCHTITAN_SOURCES
from planner.types import GIB, JobKind, Kernels, Offload, Precision, Recompute, SelectiveKind

ENGINE = Engine(
    name="torchtitan", title="torchtitan", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 2, 3), zero_stages_pipelined=(0, 2, 3), interleave=True, gpipe=True,
                recomputes=(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), sequence_parallel=True,
                tensor_parallel=True, precisions=(Precision.FP32, Precision.BF16, Precision.FP8),
                job_kinds=(JobKind.PRETRAIN, JobKind.FULL_FINETUNE, JobKind.LORA),
                offloads=((Offload.OPTIMIZER_PARAMS, (3,)),), context_parallel=True,
                context_parallel_zero_stages=(2, 3),
                expert_parallel=True, expert_parallel_with_tp=False, hybrid_shard=True),
    execution=Execution(overlap_grad_reduce=True, fp32_grad_reduce=(Precision.BF16,), zero_overlap=1.0,
                        layer_overhead_s=0.0, framework_bytes=2.5 * GIB, kernels=Kernels.EAGER,
                        selective_recompute=SelectiveKind.OP_SAC,
                        notes=("element-wise ops run eager (one kernel each; torch.compile is off in the export)",),
                        selective_note=("selective recomputation is torchtitan's op-level SAC: it reruns every other "
                                        "matmul and every element-wise op and keeps fewer activations than "
                                        "Megatron-LM's selective"),
                        zero_note=("FSDP2 prefetches the next layer's all-gather during the current layer's compute; "
                                   "the first all-gather of each pass and the last reduce-scatter are exposed")),
    exports=("torchtitan",),
    sources=TORCHTITAN_SOURCES,
    summary="FSDP2 (ZeRO-2/3) with TP and PP on one mesh, uneven layer split; bf16, fp32 or fp8 (no fp16); "
            "pretraining, full fine-tuning and LoRA (no QLoRA); FSDP's CPU offload of parameters and optimizer; "
            "expert parallelism with tp 1 (its expert mesh has no expert tp); HSDP (hybrid_shard)",
)
