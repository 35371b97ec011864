"""The engine versions the profiles describe, and where each claim was read.

Each profile (planner/engines/*.py) names its engine's source at one pinned commit or release;
a claim is "file, function or lines: what it says". Update a pin and its claims together.
The commits are those of the snapshots read (git directories of the repositories' newest
snapshots); DeepSpeed and torchtitan are also pinned to the PyPI releases the tests load
(deepspeed 0.19.8, torchtitan 0.3.0), whose installed files are cited as `site-packages/...`.
"""
MEGATRON = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"
DEEPSPEED = "deepspeed 0.19.8 (PyPI; source read at deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641)"
TORCHTITAN = ("torchtitan 0.3.0 (PyPI; TOML form: pytorch/torchtitan@v0.2.2 = "
              "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce)")
FLAGSCALE = "flagos-ai/FlagScale@16a2dd5b5c413452ec09ec7a1fe7dea4810c6889"
MEGATRON_DEEPSPEED = "microsoft/Megatron-DeepSpeed@f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (with deepspeed, as DEEPSPEED)"
FSDP = ("accelerate 1.15.0 (PyPI; source read at huggingface/accelerate@16cb6eb80dd9aa8b4df1a63ef57863e455d53b83) "
        "on torch 2.13.0 FSDP (PyPI)")

MEGATRON_SOURCES: dict[str, str] = {
    "tf32 default (fp32 plans)": "docs/get-started/install.md lines 100-112: run in the NGC PyTorch container, "
                                 "whose image sets ENV TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (fp32 matmuls on TF32 "
                                 "tensor cores; MONAI docs precision_accelerating.md quote the layer)",
    "one tp, pp and dp for every stage": "megatron/training/arguments.py validate_args lines 424-448: "
                                         "dp = world / (tp * pp * cp), world divisible by tp * pp * cp",
    "rank order (pp outermost)": "megatron/training/initialize.py line 395: order 'tp-cp-ep-dp-pp'; "
                                 "megatron/core/parallel_state.py RankGenerator (line 465): the first axis varies fastest",
    "uneven layer split": "--pipeline-model-parallel-layout, arguments.py lines 3103-3110 and 941-952; "
                          "megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout lines 86-149",
    "interleaving": "a layout of pp x v parts gives v virtual stages (arguments.py lines 941-952); "
                    "num_microbatches a multiple of pp (megatron/core/pipeline_parallel/schedules.py lines 1160-1180)",
    "ZeRO-1": "--use-distributed-optimizer, arguments.py line 3156",
    "ZeRO-2/3 (Megatron-FSDP)": "--use-megatron-fsdp, --data-parallel-sharding-strategy {no_shard, optim, optim_grads, "
                                "optim_grads_params} arguments.py lines 3190-3192; validate_args lines 1118-1187 "
                                "(needs --ckpt-format fsdp_dtensor and CUDA_DEVICE_MAX_CONNECTIONS unset or > 1)",
    "CUDA_DEVICE_MAX_CONNECTIONS=1": "asserted in validate_args lines 1453-1479 when tp > 1 (or cp > 1) without FSDP "
                                     "on GPUs before Blackwell; megatron/core/tensor_parallel/layers.py lines 909-924 warns",
    "eval batch": "validate_args lines 707-720: eval_global_batch_size (default: the global batch) divisible by "
                  "eval micro batch x dp",
    "recompute": "--recompute-granularity {full, selective}, --recompute-method {uniform, block}; selective takes no "
                 "method (arguments.py lines 1425-1428)",
    "no GPipe": "pretrain_gpt.py runs megatron/core/pipeline_parallel/schedules.py 1F1B (line 2147) or interleaved "
                "1F1B (line 1019) only",
    "tp communication overlap": "--tp-comm-overlap (megatron/core/model_parallel_config.py line 265, "
                                "tp_comm_overlap; Transformer Engine userbuffers); needs --sequence-parallel "
                                "(megatron/training/arguments.py lines 1441-1442); a plan switches it "
                                "(Plan.tp_comm_overlap), the export writes it",
    "overlapped gradient reduce": "--overlap-grad-reduce arguments.py line 3121; buckets during backward "
                                  "(megatron/core/distributed/distributed_data_parallel.py lines 133-137); a plan "
                                  "switch (Plan.overlap_grad_reduce), written unless the plan turns it off",
    "overlapped parameter gather": "--overlap-param-gather arguments.py line 3148; validate_args lines 1024-1029: "
                                   "'only supported with distributed optimizer, megatron fsdp, or dist_muon' and "
                                   "'Must use --overlap-param-gather with --overlap-grad-reduce'; a plan switch "
                                   "(Plan.overlap_param_gather) with ZeRO-1, the search turns it on",
    "optimizer offload": "--optimizer-cpu-offload, --optimizer-offload-fraction (arguments.py lines 2918-2927); needs "
                         "--use-precision-aware-optimizer (lines 1884-1892), which needs the distributed optimizer "
                         "(megatron/core/optimizer/__init__.py lines 1057-1060); HybridDeviceOptimizer "
                         "(megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py lines 94-142, 250-300): fp32 "
                         "copies and Adam on the host, the GPU keeps its fp32 main-grad buffer",
    "context parallelism": "--context-parallel-size, --cp-comm-type {p2p (default), a2a, allgather, a2a+p2p} "
                           "(arguments.py); sequence length a multiple of 2 x cp, causal load balancing in 2 x cp "
                           "chunks; gradients reduced and the distributed optimizer sharded over dp x cp "
                           "(parallel_state data-parallel group with context parallel); CP needs Transformer "
                           "Engine attention",
    "expert parallelism": "--num-experts (a multiple of ep), --expert-model-parallel-size, "
                          "--expert-tensor-parallel-size (default tp), --moe-router-topk, --moe-token-dispatcher-type "
                          "{allgather (default), alltoall, flex}; expert gradients reduced and sharded over the "
                          "expert-data-parallel group (megatron/core/distributed/distributed_data_parallel.py lines "
                          "284-287)",
    "fine-tuning": "--load, --finetune (megatron/training/config/training_config.py lines 430, 464-466), "
                   "--no-load-optim, --no-load-rng (arguments.py lines 3015-3018)",
    "no LoRA": "no lora/peft module in megatron/ at the pin (git ls-tree); tensor_parallel/layers.py line 977 names "
               "NeMo's LoRA adapter, which lives outside this repository",
}
DEEPSPEED_SOURCES: dict[str, str] = {
    "tf32 default (fp32 plans)": "docker/Dockerfile line 1: FROM nvidia/cuda (not the NGC PyTorch image), and "
                                 "deepspeed/ sets no allow_tf32: PyTorch's default, TF32 matmuls off",
    "one dp for every stage": "deepspeed/runtime/pipe/module.py PipelineModule.__init__ lines 141-181: "
                              "PipeDataParallelTopology(num_pp, num_dp), dp = world / num_stages without a topology",
    "rank order": "deepspeed/runtime/pipe/topology.py lines 232-248: axes ['pipe', 'data'], the last fastest",
    "uneven layer split": "module.py _partition_layers lines 396-445 (no explicit boundaries: the export overrides it)",
    "ZeRO < 2 with a pipeline": "deepspeed/runtime/pipe/engine.py lines 76-77",
    "batch identity": "engine.py lines 98-111; deepspeed/runtime/config.py _batch_assertion lines 912-927 "
                      "(train_batch = micro x accumulation x dp)",
    "no selective recompute": "deepspeed/runtime/activation_checkpointing/config.py lines 27-53 (whole-layer "
                              "checkpointing only; PipelineModule activation_checkpoint_interval)",
    "gradients reduced after the flush": "deepspeed/runtime/pipe/schedule.py TrainSchedule.steps lines 237-241; "
                                         "engine.py line 79-80 enable_backward_allreduce=False",
    "reduce dtype": "engine.py lines 1364-1376: communication_data_type defaults to the training dtype",
    "overlap_comm": "site-packages/deepspeed/runtime/zero/config.py line 138 overlap_comm (Optional[bool]), "
                    "lines 384-386: None becomes True for ZeRO-3 only; ZeRO-1/2 reduce buckets on a side stream "
                    "when on (runtime/zero/stage_1_and_2.py); a plan switch (Plan.overlap_grad_reduce) without the "
                    "pipeline engine, which reduces after the flush whatever it says",
    "no tensor parallelism of its own": "tp lives in the model code (PipeModelDataParallelTopology only labels it)",
    "optimizer offload": "zero_optimization.offload_optimizer {device: cpu, pin_memory}, ZeRO 1-3 "
                         "(deepspeed/runtime/zero/offload_config.py lines 55-107; zero/config.py line 171); the "
                         "pipeline engine asserts ZeRO < 2 (runtime/pipe/engine.py lines 76-77), so ZeRO-1 there",
    "parameter offload": "zero_optimization.offload_param, 'Valid only with stage 3' (offload_config.py lines 21-52; "
                         "zero/config.py line 164)",
    "CPU Adam": "DeepSpeedCPUAdam (deepspeed/ops/adam/cpu_adam.py line 93), JIT-built at first use when the ops "
                "were not prebuilt (ops/op_builder/builder.py lines 549-577): needs ninja and a C++ compiler",
    "no LoRA in the config": "deepspeed/linear (OptimizedLinear, LoRAConfig) is a model-code API swapped in at model "
                             "construction (linear/optimized_linear.py lines 18-73, linear/context_manager.py), not a "
                             "ds_config key, and its quantised base is FP8-style, not NF4",
}
TORCHTITAN_SOURCES: dict[str, str] = {
    "tf32 default (fp32 plans)": "torchtitan sets allow_tf32 only to turn it off (torchtitan/distributed/utils.py "
                                 "line 379 @b5bcd76, batch-invariant mode): PyTorch's default, TF32 matmuls off",
    "config form (0.3)": "site-packages/torchtitan/config/manager.py ConfigManager.parse_args/_load_config: "
                         "--module M --config F, F() returns Trainer.Config (torchtitan/trainer.py lines 70-116)",
    "config form (0.2.2)": "torchtitan/config/job_config.py (v0.2.2) JobConfig, read from --job.config_file TOML "
                           "(torchtitan/config/manager.py lines 64-84)",
    "context parallelism": "parallelism.context_parallel_degree, context_parallel_load_balancer (headtail); the "
                           "sequence divisible by 2 x cp (x tp with SP); cp folded into FSDP's shard mesh "
                           "(distributed/parallel_dims.py: fsdp = dp_shard x cp; parameters always sharded over "
                           "dp_shard x cp when cp > 1, lines 692-693, so ZeRO-2/3 only); needs FlexAttention under "
                           "the default attention backend",
    "expert parallelism": "parallelism.expert_parallel_degree, dividing dp_shard x cp x tp (distributed/"
                          "parallel_dims.py); MoE models deepseek_v3, qwen3, gpt_oss; no expert tensor parallel "
                          "degree in 0.3.0",
    "expert mesh with tp": "site-packages/torchtitan/distributed/parallel_dims.py: dp_shard x cp x tp = efsdp x ep, "
                           "line 279 efsdp = fsdp x tp / ep, sparse mesh [pp, dp_replicate, efsdp, ep] with ep innermost (lines 336-340), so "
                           "with tp or cp > 1 an ep group takes the tp and cp ranks first and each GPU holds whole "
                           "experts; the plan's experts split over tp with ep over replicas is another mesh: the "
                           "profile runs ep > 1 with tp = cp = 1 only (Space.expert_parallel_with_tp)",
    "LoRA": "site-packages/torchtitan/components/lora.py LoRAConverter.Config(rank, alpha, target_modules) lines "
            "141-172: Linear -> LoRALinear, base frozen (lines 115-235); applied as a model converter "
            "(models/llama3/__init__.py lines 369-381); no NF4/QLoRA in 0.3.0",
    "fine-tuning": "checkpoint.initial_load_path, initial_load_model_only (site-packages/torchtitan/components/"
                   "checkpoint.py config)",
    "CPU offload": "training.enable_cpu_offload: 'CPU offloading of parameters, gradients, and optimizer states in "
                   "FSDP' (config; 0.2.2 job_config.py lines 270-273) -> FSDP2 CPUOffloadPolicy "
                   "(torchtitan/distributed/fsdp.py lines 173-174)",
    "one mesh": "site-packages/torchtitan/distributed/parallel_dims.py lines 153-190 and 235-238: "
                "pp x dp_replicate x dp_shard x cp x tp = world, pp outermost",
    "uneven layer split": "ParallelismConfig.module_fqns_per_model_part (site-packages/torchtitan/config/configs.py "
                          "line 181; v0.2.2 job_config.py line 367)",
    "interleaving / GPipe": "pipeline_parallel_schedule resolved by torch get_schedule_class "
                            "(torch/distributed/pipelining/schedules.py): 1F1B, Interleaved1F1B, GPipe",
    "hybrid sharding (HSDP)": "Plan.hybrid_shard: data_parallel_shard_degree = the group, "
                              "data_parallel_replicate_degree = dp / group (parallel_dims.py mesh pp, dp_replicate, "
                              "dp_shard, cp, tp: a shard group is consecutive replicas; FSDP2 fully_shard over "
                              "dp_shard x cp, replicated over dp_replicate)",
    "ZeRO 0/2/3": "data_parallel_replicate_degree (ZeRO-0), FSDP2 data_parallel_shard_degree with "
                  "fsdp_reshard_after_forward never (ZeRO-2) / always (ZeRO-3); 'default' does not reshard under "
                  "pipelining (configs.py lines 136-150)",
    "bf16 only": "TrainingConfig.mixed_precision_param Literal['bfloat16', 'float32'] (configs.py line 85)",
    "recompute": "site-packages/torchtitan/distributed/activation_checkpoint.py lines 332-337: selective, full, "
                 "memory-budget, none",
    "pipelining needs disable_cuda_graphs": "site-packages/torchtitan/trainer.py Trainer.Config._validate_cuda_graphs",
    "model flavors": "site-packages/torchtitan/models/llama3/__init__.py lines 236-365: 8B, 70B, 405B",
}
FLAGSCALE_SOURCES: dict[str, str] = {
    "tf32 default (fp32 plans)": "docker/Dockerfile.cuda line 2: FROM nvcr.io/nvidia/cuda (not the NGC PyTorch "
                                 "image), no allow_tf32 in flagscale/: PyTorch's default, TF32 matmuls off",
    "process meshes": "flagscale/train/arguments.py FSTrainArguments.pre_validate_args lines 81-215: "
                      "[tp, cp, ep, dp, pp] per mesh, tp and dp per mesh, pp summing to the pipeline size",
    "uneven layer split": "pre_validate_args lines 158-172: hetero_pipeline_layer_split, one count a stage",
    "micro-batches per mesh": "pre_validate_args lines 104-109 and 200-202: dp0 x micro batch divisible by every "
                              "mesh's dp; mesh i runs micro-batches of dp0 x micro batch / dp_i",
    "tied embeddings": "pre_validate_args lines 129-150: first and last mesh share tp; unequal dp must divide "
                       "(with --use-partial-reduce-for-shared-embedding)",
    "no interleaving, no context parallelism": "pre_validate_args lines 152-155; "
                                               "flagscale/train/hetero/parallel_context.py lines 549-552",
    "rank order": "parallel_context.py RankMapper.build_rank_mapping lines 129-161 (device-type order, then rank); "
                  "ProcessMesh lines 180-260 ('tp-cp-ep-dp-pp' from the mesh's offset)",
    "flags": "flagscale/backends/Megatron-LM/megatron/training/arguments.py.patch _add_hetero_args lines 612-630",
    "LoRA": "arguments.py.patch lines 653-679: --peft-type lora, --lora-target-modules, --lora-dim, --lora-alpha; "
            "flagscale/train/peft/lora.py line 51 freezes the base; patch lines 267-275 and 336-341: Transformer "
            "Engine layers only, no MoE, no recompute, --ckpt-format torch; no QLoRA",
    "launch": "flagscale/runner/utils.py parse_hostfile lines 69-109 (host slots=N type=T); "
              "flagscale/runner/runner_train.py lines 177 (rdzv_backend) and 435-441 (type -> current device type)",
}
FSDP_SOURCES: dict[str, str] = {
    "sharding strategies": "site-packages/torch/distributed/fsdp/api.py ShardingStrategy lines 32-69: FULL_SHARD "
                           "(parameters, gradients and optimizer states sharded: ZeRO-3), SHARD_GRAD_OP (gradients "
                           "and optimizer states: ZeRO-2), NO_SHARD (replicated: ZeRO-0), HYBRID_SHARD (FULL_SHARD "
                           "in a node, replicated across nodes) and _HYBRID_SHARD_ZERO2 (lines 55-60, 68-69): "
                           "Plan.hybrid_shard, the node's GPUs (FSDP's intra-node group is device_count() "
                           "consecutive ranks, fsdp/_init_utils.py lines 160-162, 201-212); accelerate/utils/"
                           "constants.py line 38 FSDP_SHARDING_STRATEGY names them; no optimizer-only sharding "
                           "(ZeRO-1)",
    "no pipeline, no tensor parallelism": "accelerate/accelerator.py prepare_model wraps the whole model in "
                                          "FullyShardedDataParallel (lines 1940-1975): every rank holds the "
                                          "whole layer stack, sharded over all ranks; Accelerate's TP and "
                                          "context parallelism are a separate parallelism_config not written "
                                          "here",
    "even batch shares": "accelerate/data_loader.py: each process gets its own equal slice of every batch "
                         "(BatchSamplerShard), so every rank takes micro_batch sequences a step",
    "prefetch": "site-packages/torch/distributed/fsdp/api.py BackwardPrefetch lines 72-108 (BACKWARD_PRE: the "
                "next all-gather issued before the current gradient computation, most overlap); "
                "fully_sharded_data_parallel.py lines 345-356: forward_prefetch, limit_all_gathers (default "
                "True, line 411); accelerate --fsdp_backward_prefetch, --fsdp_forward_prefetch "
                "(commands/launch.py lines 559-577)",
    "prefetch switch": "Plan.prefetch with FULL_SHARD: on writes fsdp_backward_prefetch BACKWARD_PRE and "
                       "fsdp_forward_prefetch true, off NO_PREFETCH and false (accelerate/utils/constants.py line 40: "
                       "FSDP_BACKWARD_PREFETCH = BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH)",
    "limit_all_gathers": "FullyShardedDataParallelPlugin.limit_all_gathers default True (accelerate/utils/"
                         "dataclasses.py lines 1750-1757), passed to FSDP (accelerator.py line 1957); no launch "
                         "flag",
    "reduce dtype": "FullyShardedDataParallelPlugin.set_mixed_precision (accelerate/utils/dataclasses.py lines "
                    "2092-2126): param_dtype and reduce_dtype both the training dtype, so bf16 gradients are "
                    "reduce-scattered in 2 bytes",
    "activation checkpointing": "--fsdp_activation_checkpointing (launch.py lines 600-605): whole wrapped "
                                "transformer layers checkpointed (accelerator.py apply_activation_checkpointing); "
                                "no selective kind",
    "CPU offload": "--fsdp_offload_params 'offload parameters and gradients to CPU' (launch.py lines 521-526): "
                   "torch CPUOffload(offload_params=True) (api.py line 230), the optimizer then steps on the CPU; "
                   "with FULL_SHARD here",
    "precisions": "mixed_precision no (fp32), fp16 (with ShardedGradScaler), bf16 (set_mixed_precision mapping, "
                  "dataclasses.py lines 2094-2099); fp8 maps to bf16 autocast with a separate fp8 backend: not "
                  "in this profile",
    "LoRA / QLoRA": "PEFT adapters under FSDP need use_orig_params (launch.py lines 578-584: 'support for "
                    "interspersed frozen and trainable parameters', default true); QLoRA needs "
                    "bnb_4bit_quant_storage equal to the training dtype so FSDP can shard the 4-bit base "
                    "(HF PEFT docs, 'Use PEFT QLoRA and FSDP')",
    "auto wrap": "TRANSFORMER_BASED_WRAP wraps the model's _no_split_modules (its decoder layer) when no class "
                 "is named (accelerate/utils/dataclasses.py lines 2085-2090): one FSDP unit a transformer layer",
    "config file": "accelerate/commands/config/config_args.py ClusterConfig lines 179-232 (from_yaml_file "
                   "refuses unknown keys, lines 143-154); fsdp_config keys become --fsdp_* launch arguments "
                   "(launch.py lines 1258-1270)",
}
MEGATRON_DEEPSPEED_SOURCES: dict[str, str] = {
    "TP + DeepSpeed pipeline": "pretrain_gpt.py lines 51-52: GPTModelPipe unless --no-pipeline-parallel; "
                               "megatron/model/gpt_model.py GPTModelPipe (line 322), a DeepSpeed PipelineModule over "
                               "PipeModelDataParallelTopology(num_pp, num_mp, num_dp) (lines 455-463): one tp, pp and dp "
                               "for every stage, even batch shares",
    "layer split": "gpt_model.py line 463: partition_method='type:transformer' (DeepSpeed's PipelineModule "
                   "splits the transformer layers evenly); uneven boundaries by overriding PipelineModule."
                   "_partition_layers, as planner/export/megatron_deepspeed.py's pretrain_gpt_planned.py does",
    "arguments": "megatron/arguments.py _add_network_size_args lines 599-688 (--num-key-value-heads, "
                 "--use-rotary-position-embeddings, --rotary-position-embeddings-theta int, --normalization "
                 "{layernorm, rmsnorm}, --layernorm-epsilon, --swiglu, --untie-embeddings-and-output-weights), "
                 "--disable-bias-linear line 937, --use-flash-attn-v2 line 930, --zero-stage line 1487, "
                 "--deepspeed-activation-checkpointing line 1524; parse_args adds deepspeed.add_config_arguments "
                 "(line 54); examples_deepspeed/pretrain_llama2_distributed.sh lines 101-147 pass the same set",
    "rank order": "PipeModelDataParallelTopology axes ['pipe', 'data', 'model'] (model fastest; gpt_model.py "
                  "lines 455-458): rank = (stage x dp + replica) x tp + tp rank",
    "dense models only": "its experts are DeepSpeed-MoE (--num-experts, --topk, --moe-train-capacity-factor, "
                         "megatron/arguments.py lines 608-616 and 913-919: top-k gating with a capacity factor, "
                         "experts in every --expert-interval-th layer), not the routed-expert model hetplan costs; no "
                         "multi-head latent attention in megatron/model",
    "no pipeline": "--no-pipeline-parallel (megatron/arguments.py lines 954-955): GPTModel under the DeepSpeed "
                   "engine, where ZeRO-2/3 run",
    "ZeRO < 2 with a pipeline": "DeepSpeed's pipeline engine (deepspeed/runtime/pipe/engine.py lines 76-77, as the "
                                "deepspeed profile cites)",
    "recompute": "--recompute-granularity {full, selective} (megatron/arguments.py lines 830-836; selective: 'core "
                 "attention part of the transformer layer is recomputed')",
    "sequence parallel": "--sequence-parallel (megatron/arguments.py lines 972-973)",
    "gradients reduced after the flush": "DeepSpeed's pipeline engine (deepspeed/runtime/pipe/schedule.py "
                                         "TrainSchedule, as the deepspeed profile cites), in the training dtype",
    "TF32 on": "no allow_tf32 anywhere in the repository (git grep at the pin); its README (lines 78-83) runs it in "
               "NVIDIA's PyTorch container nvcr.io/nvidia/pytorch, whose environment sets "
               "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (NVIDIA PyTorch container release notes; not in a snapshot "
               "here), which torch reads to run fp32 matmuls on TF32 tensor cores (the variable is in torch "
               "2.13.0's libtorch_cpu.so, ATen Context::allowTF32CuBLAS); fp32 runs measured above an A100's "
               "19.5 TFLOP/s fp32 peak per layer (issue 19) agree",
}
