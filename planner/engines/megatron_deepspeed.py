"""Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed, pretrain_gpt.py), as pinned in VERSION.

Megatron's tensor (and sequence) parallelism inside a DeepSpeed PipelineModule (GPTModelPipe) over a
PipeModelDataParallelTopology: one tp, pp and dp for every stage, even batch shares. GPTModelPipe
splits the transformer layers evenly (partition_method 'type:transformer'); an uneven split runs
pretrain_gpt.py through the export's pretrain_gpt_planned.py, which sets DeepSpeed's
PipelineModule._partition_layers to the plan's boundaries (planner.export.megatron_deepspeed). The
DeepSpeed pipeline engine runs ZeRO-0/1 only; without pipelining (--no-pipeline-parallel) ZeRO-2/3
run. Gradients are reduced after the pipeline flush in the training dtype, as the deepspeed profile
says of the same engine.

fp32 runs use TF32 matmuls (`tf32_default`): the repository never sets allow_tf32 and is run in
NVIDIA's PyTorch container, whose TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 turns TF32 on (sources). The
plan's `tf32` (and `--tf32 off`) overrides it. This is the engine of the heterogeneous-cluster fp32
runs (A100/V100 and others) that the deepspeed profile, without tensor parallelism, cannot state.
`export --to megatron-deepspeed` writes pretrain_gpt.py's arguments, the DeepSpeed config and the
launch (planner.export.megatron_deepspeed), so the default planning (planner.engines.REAL) includes it.
Dense models only: Megatron-DeepSpeed's experts are DeepSpeed-MoE (--num-experts, --topk with a
capacity factor), another expert model than the one hetplan costs, and it has no latent attention.
"""
from planner.engines.base import ALL_RECOMPUTES, Engine, Execution, Space, PlanSwitch
from planner.engines.sources import MEGATRON_DEEPSPEED as VERSION, MEGATRON_DEEPSPEED_SOURCES
from planner.types import GIB, Precision

ENGINE = Engine(
    name="megatron-deepspeed", title="Megatron-DeepSpeed", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=False, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 1, 2, 3), zero_stages_pipelined=(0, 1), interleave=False, gpipe=False,
                switches=(PlanSwitch("overlap_grad_reduce", (1, 2, 3), pipelined=False,
                                 written_as="zero_optimization.overlap_comm", on_by_default=(3,)),),
                recomputes=ALL_RECOMPUTES, sequence_parallel=True, tensor_parallel=True,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
                mixture_of_experts=False, latent_attention=False),
    execution=Execution(overlap_grad_reduce=False, fp32_grad_reduce=(), zero_overlap=0.5,
                        layer_overhead_s=0.0, framework_bytes=2.0 * GIB, tf32_default=True,
                        notes=("the DeepSpeed pipeline engine reduces data-parallel gradients after the pipeline "
                               "flush, in the training dtype; fp32 matmuls on TF32 (NVIDIA's container default)",)),
    exports=("megatron-deepspeed",),
    sources=MEGATRON_DEEPSPEED_SOURCES,
    covered_by=("flagscale", "megatron"),   # its fp16 plans with ZeRO-0/1; fp32 ones of tp 1 (planner.engines.cover)
    summary="Megatron tensor and sequence parallelism in a DeepSpeed pipeline: one tp, pp and dp for all stages, "
            "uneven layer split (PipelineModule override); ZeRO-0/1 with pipelining, ZeRO-2/3 without; fp32 "
            "(TF32 on), bf16, fp16; pretraining and full fine-tuning; dense models",
)
