"""FlagScale (FlagOpen/FlagScale) heterogeneous training, as pinned in VERSION.

FlagScale extends Megatron-LM with process meshes: each mesh is a run of consecutive pipeline
stages on one device type with its own tensor- and data-parallel degrees
(hetero_process_meshes, hetero_device_types), and the layers are split unevenly over all stages
(hetero_pipeline_layer_split). This is the engine that runs hetplan's mixed plans of the chain
family on real GPUs: each pool a mesh with its own tp. A stage still runs on one device type, with
even batch shares among its replicas; with tied embeddings the first and last meshes need the same
tp (the embedding's gradient is all-reduced between them), context parallelism must be 1 and there
is no interleaved schedule (facts in planner/engines/sources.py). FlagScale lets meshes differ in
data-parallel degree too, but then runs the same number of micro-batches in every mesh, each of
dp_0 x micro_batch / dp_i sequences: a schedule hetplan's cost model does not simulate, so the
profile keeps one dp for all stages (the search's chains have one anyway).
"""
from planner.engines.base import ALL_RECOMPUTES, Engine, Execution, Space
from planner.engines.sources import FLAGSCALE as VERSION, FLAGSCALE_SOURCES
from planner.types import GIB, JobKind, Precision

ENGINE = Engine(
    name="flagscale", title="FlagScale", version=VERSION,
    space=Space(uneven_layers=True, tp_per_stage=True, replicas_per_stage=False, mixed_stages=False,
                zero_stages=(0, 1), zero_stages_pipelined=(0, 1), interleave=False, gpipe=False,
                recomputes=ALL_RECOMPUTES, sequence_parallel=True, tensor_parallel=True,
                precisions=(Precision.FP32, Precision.BF16, Precision.FP16), tied_edges_same_tp=True,
                job_kinds=(JobKind.PRETRAIN, JobKind.FULL_FINETUNE, JobKind.LORA), adapters_with_recompute=False,
                adapters_with_moe=False),
    execution=Execution(overlap_grad_reduce=True, fp32_grad_reduce=(Precision.BF16,), zero_overlap=1.0,
                        layer_overhead_s=0.0, framework_bytes=2.0 * GIB),
    exports=("flagscale",),
    sources=FLAGSCALE_SOURCES,
    covered_by=("megatron",),       # its plans of tp 1 everywhere (planner.engines.cover)
    summary="Megatron-LM with one process mesh per GPU type, each with its own tp; uneven layer split "
            "over all stages; ZeRO-1 (distributed optimizer); pretraining, full fine-tuning and LoRA (dense "
            "models, no recomputation)",
)
