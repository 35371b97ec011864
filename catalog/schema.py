"""The shape of catalog entries, in the human units the data files use (TFLOP/s, GiB, GB/s).

Strict pydantic models: unknown keys are refused, and "3" is not a number.
Conversion to the planner's SI types happens in `catalog.loader`.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from planner.types import (MAX_CONTEXT_PARALLEL, MAX_EXPERT_PARALLEL, MAX_FLEET_JOBS, MAX_GLOBAL_BATCH,  # noqa: F401
                            MAX_GPUS_PER_NODE, MAX_GPUS_PER_POOL, MAX_LINKS, MAX_LORA_RANK, MAX_POOLS,
                            MAX_PORTS_PER_LINK, MAX_SEQ_LEN, MAX_STAGES, MAX_SWITCHES)

Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")]
# Every whole number has a ceiling (most fields have their own, far lower, in planner.types):
# products of unbounded integers can outgrow what Python will print (4,300 digits).
MAX_WHOLE_NUMBER = 10**15
Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0, le=MAX_WHOLE_NUMBER)]
NonNegative = Annotated[float, Field(ge=0)]
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_WHOLE_NUMBER)]

# Ceilings far above any real hardware, so that a typo or a hostile file cannot push the cost
# model past float range (1e308 Gb/s becomes inf bytes/s; $1e308 an hour makes every cost inf).
MAX_TFLOPS = 1e6
MAX_MEMORY_GIB = 1e6
MAX_GB_S = 1e6                            # memory, link and network bandwidth, GB/s
# Floors far below any real hardware, so that the cost model's times stay finite (1e-300 TFLOP/s
# made a pass take 1e300 s, and sums of them overflow).
MIN_TFLOPS = 0.01                         # 10 GFLOP/s, one core of a 2010 CPU
MIN_MEMORY_GIB = 0.01
MIN_GB_S = 0.01                           # 10 MB/s
MAX_GBPS = 1e6                            # node network, Gb/s
MIN_GBPS = 0.01                           # 10 Mb/s: below this every plan is bound by the network alone
MAX_POWER_W = 1e5
MAX_PRICE_PER_GPU_HOUR = 1e4              # USD
MAX_LATENCY_US = 1e6
MIN_EFFICIENCY = 0.01

Tflops = Annotated[float, Field(ge=MIN_TFLOPS, le=MAX_TFLOPS)]
GBs = Annotated[float, Field(ge=MIN_GB_S, le=MAX_GB_S)]
Gbps = Annotated[float, Field(ge=MIN_GBPS, le=MAX_GBPS)]
Price = Annotated[float, Field(ge=0, le=MAX_PRICE_PER_GPU_HOUR)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class GpuEntry(Strict):
    name: str
    vendor: str = "nvidia"
    bf16_fp16_tflops: Tflops              # dense tensor-core peak; fp32 accumulate on consumer cards
    fp32_tflops: Tflops                   # plain fp32 (CUDA cores / vector units), no tensor cores
    tf32_tflops: Optional[Tflops] = None  # dense TF32 tensor-core peak (Ampere and later); absent: none
    fp8_tflops: Optional[Tflops] = None   # dense FP8 tensor-core peak (Hopper, Ada, Blackwell, MI300); absent: none
    bf16: bool
    memory_gib: Annotated[float, Field(ge=MIN_MEMORY_GIB, le=MAX_MEMORY_GIB)]
    memory_bw_gb_s: GBs
    link: str                             # nvlink2..nvlink5, pcie, xgmi
    link_gb_s_per_direction: GBs
    nvlink_domain_gpus: Optional[Annotated[int, Field(gt=0, le=576)]] = None   # NVLink fabric across nodes (NVL72)
    pcie_gen: Annotated[int, Field(ge=1, le=7)]
    power_w: Annotated[float, Field(gt=0, le=MAX_POWER_W)]
    price_per_gpu_hour: Price             # USD
    price_date: str = ""
    price_source: str = ""
    efficiency: Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)] = 0.6
    efficiency_note: str = ""
    fp8_efficiency: Optional[Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]] = None   # measured FP8 matmul / FP8 peak
    fp8_efficiency_note: str = ""
    # the GPU whose measured attention kernel rates (reference attention_kernels.csv) apply; absent: none measured
    attention_kernels_of: Optional[Literal["a100-80gb-sxm", "h100-sxm"]] = None
    attention_note: str = ""
    source: str = ""


class NetworkEntry(Strict):
    name: str
    kind: Literal["intra-node", "inter-node"]
    transport: Optional[Literal["infiniband", "roce", "ethernet"]] = None   # inter-node only
    bw_gb_s: GBs                          # GB/s, one direction
    latency_us: Annotated[float, Field(ge=0, le=MAX_LATENCY_US)]
    source: str = ""


class ModelEntry(Strict):
    """Exactly the fields of `planner.types.Model` but `id` (the entry's key)."""
    name: str
    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt
    ffn: PositiveInt
    vocab: PositiveInt
    tied_embeddings: bool = False
    mlp: Literal["gelu", "relu", "swiglu"] = "swiglu"
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    position: Literal["learned", "rope", "alibi"] = "rope"
    max_positions: NonNegativeInt = 0
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    embed_norm: bool = False
    final_norm: bool = True
    embed_proj_dim: NonNegativeInt = 0
    experts: PositiveInt = 1
    top_k: PositiveInt = 1
    source: str = ""
    moe_ffn: NonNegativeInt = 0
    shared_experts: NonNegativeInt = 0
    dense_layers: NonNegativeInt = 0
    moe_every: PositiveInt = 1
    attention_head_dim: NonNegativeInt = 0
    q_lora_rank: NonNegativeInt = 0
    kv_lora_rank: NonNegativeInt = 0
    qk_rope_head_dim: NonNegativeInt = 0
    v_head_dim: NonNegativeInt = 0
    rope_theta: Annotated[float, Field(ge=1, le=1e12)] = 10000.0
    rope_scaling: Optional[Literal["llama3", "yarn"]] = None
    rope_scaling_factor: Annotated[float, Field(ge=1, le=1e6)] = 1.0
    norm_eps: Annotated[float, Field(ge=1e-12, le=1)] = 1e-5
    attention_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    hidden_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    init_std: Annotated[float, Field(ge=1e-6, le=10)] = 0.02


class InlineModelEntry(ModelEntry):
    """A model written into a plan file rather than named from the catalog."""
    id: Id = "custom"
    name: Optional[str] = None


class CatalogFile(Strict):
    """A user's extra catalog file: new GPUs and/or models."""
    gpus: dict[Id, GpuEntry] = {}
    models: dict[Id, ModelEntry] = {}


class GpusFile(Strict):
    gpus: dict[Id, GpuEntry]


class ModelsFile(Strict):
    models: dict[Id, ModelEntry]


class NetworksFile(Strict):
    networks: dict[Id, NetworkEntry]


# ----------------------------------------------------------------------------- cluster file

class PoolEntry(Strict):
    name: Optional[Id] = None             # defaults to the gpu id
    gpu: str
    nodes: Annotated[int, Field(gt=0, le=MAX_GPUS_PER_POOL)]
    gpus_per_node: Annotated[int, Field(gt=0, le=MAX_GPUS_PER_NODE)]
    inter_node_gbps: Optional[Gbps] = None   # Gb/s per node, one direction
    price_per_gpu_hour: Optional[Price] = None
    host_memory_gib: Optional[Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False)]] = None   # CPU memory per node
    grid_gco2_per_kwh: Optional[Annotated[float, Field(ge=0, le=10_000, allow_inf_nan=False)]] = None  # grid carbon
    spot: bool = False                    # preemptible; price_per_gpu_hour is then the spot price
    availability: Optional[Annotated[float, Field(gt=0, le=1)]] = None   # spot: share of time its GPUs are held


NetworkKind = Literal["infiniband", "roce", "ethernet"]


class SwitchEntry(Strict):
    name: Id
    kind: NetworkKind


class LinkEntry(Strict):
    """A link between a pool and a switch (per node of the pool) or two switches (a trunk's total):
    its bandwidth as `gbps`, or as `count` ports of the catalog's `nic`."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    gbps: Optional[Gbps] = None
    nic: Optional[str] = None             # an inter-node id of `hetplan catalog networks`
    count: Annotated[int, Field(gt=0, le=MAX_PORTS_PER_LINK)] = 1
    latency_us: Optional[Annotated[float, Field(ge=0, le=MAX_LATENCY_US, allow_inf_nan=False)]] = None
    kind: Optional[NetworkKind] = None    # default: the nic's, else the switch's


class StorageEntry(Strict):
    switch: str
    gbps: Gbps                            # the storage system's total bandwidth


class NetworkSection(Strict):
    switches: Annotated[list[SwitchEntry], Field(min_length=1, max_length=MAX_SWITCHES)]
    links: Annotated[list[LinkEntry], Field(min_length=1, max_length=MAX_LINKS)]
    storage: Optional[StorageEntry] = None


class ClusterEntry(Strict):
    name: str = "cluster"
    pools: Annotated[list[PoolEntry], Field(min_length=1, max_length=MAX_POOLS)]
    between_pools_gbps: Optional[Gbps] = None
    network: Optional[NetworkSection] = None


# ----------------------------------------------------------------------------- plan file

class ReplicaEntry(Strict):
    pool: str
    tp: Annotated[int, Field(gt=0, le=MAX_GPUS_PER_NODE)]
    samples: Optional[Annotated[int, Field(gt=0, le=MAX_GLOBAL_BATCH)]] = None


class StageEntry(Strict):
    layers: Annotated[list[Annotated[int, Field(ge=-MAX_WHOLE_NUMBER, le=MAX_WHOLE_NUMBER)]],
                      Field(min_length=2, max_length=2)]   # [start, end)
    replicas: Annotated[list[ReplicaEntry], Field(min_length=1, max_length=MAX_GPUS_PER_POOL)]


def _not_a_bool(value):
    if isinstance(value, bool):                # Literal[0, 1, ...] alone takes True for 1
        raise ValueError("must be a whole number, not true or false")
    return value


ZeroStage = Annotated[Literal[0, 1, 2, 3], BeforeValidator(_not_a_bool)]


class JobEntry(Strict):
    """The plan's `job`: what kind of training it is (planner.types.Training)."""
    kind: Literal["pretrain", "full-finetune", "lora", "qlora"] = "pretrain"
    lora_rank: Annotated[int, Field(gt=0, le=MAX_LORA_RANK)] = 16


class PlanEntry(Strict):
    format: str
    name: Optional[str] = None
    notes: Optional[str] = None
    model: Any                            # a catalog id or an inline object (checked in formats)
    global_batch: Annotated[int, Field(gt=0, le=MAX_GLOBAL_BATCH)]
    seq_len: Annotated[int, Field(gt=0, le=MAX_SEQ_LEN)]
    micro_batch: Annotated[int, Field(gt=0, le=MAX_GLOBAL_BATCH)] = 1
    precision: Literal["fp32", "bf16", "fp16", "fp8"]
    tf32: Optional[bool] = None           # fp32 only: TF32 matmuls on/off; absent: the engine's default
    zero_stage: ZeroStage = 0
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False         # tp collectives pipelined with the GEMMs (engines that offer it)
    overlap_grad_reduce: Optional[bool] = None    # absent: the engine's default (planner.engines.base.SWITCHES)
    overlap_param_gather: Optional[bool] = None
    prefetch: Optional[bool] = None
    expert_tensor_parallel: NonNegativeInt = 0   # each expert split over this many GPUs; 0: tp
    hybrid_shard: NonNegativeInt = 0      # FSDP HYBRID_SHARD group (replicas a node holds); 0: none
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    interleave: PositiveInt = 1
    engine: Optional[str] = None          # planner.engines; absent: hetplan's runtime (the format's first meaning)
    job: Optional[JobEntry] = None        # absent: pretraining
    offload: Literal["none", "optimizer", "optimizer+params"] = "none"
    context_parallel: Annotated[int, Field(gt=0, le=MAX_CONTEXT_PARALLEL)] = 1
    expert_parallel: Annotated[int, Field(gt=0, le=MAX_EXPERT_PARALLEL)] = 1
    attention: Literal["flash", "unfused"] = "flash"   # unfused: no FlashAttention (s^2 scores computed and kept)
    stages: Annotated[list[StageEntry], Field(min_length=1, max_length=MAX_STAGES)]


# ----------------------------------------------------------------------------- jobs file (hetplan fleet)

MAX_DEADLINE_HOURS = 1e6                  # over a century: longer is a typo


class FleetJobEntry(Strict):
    """One job of a fleet: what to train, how much, by when, and its share (weight)."""
    name: Id
    model: Any                            # a catalog id or an inline object (checked in formats)
    global_batch: Annotated[int, Field(gt=0, le=MAX_GLOBAL_BATCH)]
    seq_len: Annotated[int, Field(gt=0, le=MAX_SEQ_LEN)]
    tokens: Optional[Annotated[float, Field(gt=0, le=1e18)]] = None
    deadline_hours: Optional[Annotated[float, Field(gt=0, le=MAX_DEADLINE_HOURS)]] = None
    weight: Annotated[float, Field(gt=0, le=1e6)] = 1.0


class JobsFile(Strict):
    jobs: Annotated[list[FleetJobEntry], Field(min_length=1, max_length=MAX_FLEET_JOBS)]
