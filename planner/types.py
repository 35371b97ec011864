"""The planner's vocabulary: hardware, models, jobs, plans and estimates.

Every quantity is SI inside (bytes, seconds, FLOP/s, bytes/s, US dollars); catalog units
(GB/s, GiB, TFLOP/s, Gb/s) are converted once, when data files are loaded (see `catalog`).
All types are frozen dataclasses validated in `__post_init__`; a violation raises
`InputError` naming the field and the offending value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Literal, Mapping

import numpy as np

if TYPE_CHECKING:
    import networkx as nx

GIB = 1024**3
GB = 1e9


class InputError(ValueError):
    """Bad input a user can fix. `field` names where it is (e.g. ``pools[1].nodes``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self):           # pickled as built, subclasses too (the app's worker processes send it back)
        return _rebuilt_input_error, (type(self), self.field, self.message)


def _rebuilt_input_error(cls: type, field: str, message: str) -> InputError:
    error = cls.__new__(cls)
    InputError.__init__(error, field, message)
    return error


class TooManyPassesError(InputError):
    """A plan whose schedule would take too long to simulate (see MAX_SIMULATED_PASSES)."""


class InfeasibleError(InputError):
    """No plan fits: the message says what is short and what would help."""

    def __init__(self, message: str):
        super().__init__("", message)


def _require(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise InputError(field_name, message)


def _positive_int(value, field_name: str) -> None:
    _require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
             field_name, f"must be a positive whole number, got {value!r}")


def _positive_number(value, field_name: str) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool)
             and math.isfinite(value) and value > 0,
             field_name, f"must be a positive number, got {value!r}")


def _nonnegative_number(value, field_name: str) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool)
             and math.isfinite(value) and value >= 0,
             field_name, f"must be zero or more, got {value!r}")


def _spot_fields(spot, availability, f: str) -> None:
    _require(isinstance(spot, bool), f"{f}.spot", f"must be true or false, got {spot!r}")
    _require(isinstance(availability, (int, float)) and not isinstance(availability, bool)
             and math.isfinite(availability) and 0 < availability <= 1,
             f"{f}.availability", f"must be a fraction of time above 0 and at most 1, got {availability!r}")
    _require(spot or availability == 1, f"{f}.availability",
             f"applies to spot pools only (spot: true); an on-demand pool is always held, got {availability!r}")


# ----------------------------------------------------------------------------- limits

# The sizes of everything a link, an upload or a file can carry, in one table: each is refused past
# its limit, with the limit named, before any work (the validators here and in catalog.schema read
# these names; docs/reliability.md lists them and tests/test_limits.py holds the two in step). The
# search and the cost model are bounded by these sizes: the largest inputs they admit answer within
# a command's time limit.

# a cluster
MAX_POOLS = 64                            # pools per cluster
MAX_GPUS_PER_NODE = 64
MAX_GPUS_PER_POOL = 100_000               # nodes x GPUs per node; also nodes per pool
MAX_SWITCHES = 1024                       # network.switches
MAX_LINKS = 16_384                        # network.links (pool links and trunks)
MAX_SWITCHES_PER_POOL = 16                # distinct switches one pool links to (a node's NIC rails)
MAX_PORTS_PER_LINK = 64                   # a link's `count` of catalog NICs

# a model
MAX_LAYERS = 100_000
MAX_HIDDEN = 1_000_000
MAX_FFN = 100_000_000
MAX_VOCAB = 100_000_000
MAX_EXPERTS = 100_000

# a job and a plan
MAX_GLOBAL_BATCH = 10_000_000             # sequences per iteration; also a plan's micro-batch and a replica's samples
MAX_SEQ_LEN = 10_000_000                  # tokens
MAX_LORA_RANK = 4096                      # and at most the model's hidden size (a rank above it is no low-rank adapter)
MAX_CONTEXT_PARALLEL = 1024
MAX_EXPERT_PARALLEL = 100_000             # a plan's expert_parallel: at most a model's experts
MAX_STAGES = 100_000                      # a plan file's stages
# The schedule simulation handles every pass of every micro-batch on every stage (and virtual
# stage); at about 10 us each, this many bounds one `evaluate` to seconds.
MAX_SIMULATED_PASSES = 1_000_000          # stages x micro-batches x interleave

# a fleet
MAX_FLEET_JOBS = 100                      # jobs in a `hetplan fleet` jobs file


class Precision(str, Enum):
    FP32 = "fp32"             # TF32 matmuls where the plan's `tf32` (or its engine's default) says so
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"               # FP8 linear-layer GEMMs, the rest bf16 (planner.numerics)


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"   # attention core only (Korthikanti et al. 2022, section 4.2)
    FULL = "full"             # whole layer, keeping only its input


class Attention(str, Enum):
    """How the attention core runs (plan field `attention`)."""
    FLASH = "flash"           # a fused kernel (FlashAttention, SDPA's flash backend): no s x s scores kept
    UNFUSED = "unfused"       # Q K^T, softmax, dropout, x V as separate kernels: the a s^2 b scores kept
    #                           (Korthikanti et al. 2022, eq. 2's 5as/h term), for engines and GPUs without it


class Schedule(str, Enum):
    ONE_F_ONE_B = "1f1b"      # with interleave > 1: interleaved 1F1B (Narayanan et al. 2021)
    GPIPE = "gpipe"


class Objective(str, Enum):
    THROUGHPUT = "throughput"
    COST = "cost"
    DEADLINE = "deadline"
    ENERGY = "energy"                 # kWh per token, the GPUs at board power (planner.energy)


class JobKind(str, Enum):
    PRETRAIN = "pretrain"
    FULL_FINETUNE = "full-finetune"   # every weight trained, from a checkpoint: costs as pretraining
    LORA = "lora"                     # frozen 16-bit base, low-rank adapters trained (Hu et al. 2021)
    QLORA = "qlora"                   # frozen 4-bit NF4 base, adapters trained (Dettmers et al. 2023)


class Offload(str, Enum):
    """Model states kept in CPU memory, ZeRO-Offload style (planner.training, planner.offload)."""
    NONE = "none"
    OPTIMIZER = "optimizer"           # fp32 master weights, Adam moments and fp32 gradients on the host
    OPTIMIZER_PARAMS = "optimizer+params"   # ... and the 16-bit weights, streamed in per layer (ZeRO-3 only)


class MlpKind(str, Enum):
    GELU = "gelu"
    RELU = "relu"
    SWIGLU = "swiglu"         # gated: three matrices


class NormKind(str, Enum):
    LAYERNORM = "layernorm"   # weight and bias
    RMSNORM = "rmsnorm"       # weight only


# RoPE frequency scalings for long context: "llama3" (Llama 3.1: low/high frequency factors 1 and 4 over an
# original 8,192 positions, Meta's llama-models apply_scaling), "yarn" (Peng et al. 2023; DeepSeek-V3)
RopeScaling = Literal["llama3", "yarn", None]
ROPE_SCALINGS = (None, "llama3", "yarn")


class PositionKind(str, Enum):
    LEARNED = "learned"
    ROPE = "rope"
    ALIBI = "alibi"


class Kernels(str, Enum):
    """How an engine runs a layer's element-wise ops (planner.engines.base.Execution.kernels),
    cheapest first."""
    FUSED = "fused"                  # fused kernels: Megatron-LM's, or torch.compile's Inductor
    EAGER = "eager"                  # eager PyTorch: one kernel per op, the norm one fused kernel
    EAGER_UNFUSED_NORM = "eager-unfused-norm"   # eager, and RMSNorm as its composite ops too

    @property
    def cost_rank(self) -> int:
        return list(Kernels).index(self)


class SelectiveKind(str, Enum):
    """What an engine's selective recomputation reruns (Execution.selective_recompute)."""
    ATTENTION_CORE = "attention-core"   # Megatron-LM --recompute-granularity selective: the attention
    #                                     core only (Korthikanti et al. 2022, section 4.2)
    OP_SAC = "op-sac"                   # torchtitan selective_ac_option "op": every op but every other
    #                                     matmul, SDPA and the tp reduce-scatters is recomputed


# ----------------------------------------------------------------------------- hardware

@dataclass(frozen=True)
class Gpu:
    id: str
    name: str
    peak_flops: float                 # dense bf16/fp16 tensor-core peak, FLOP/s
    peak_fp32_flops: float            # plain fp32, no tensor cores
    supports_bf16: bool
    mem_bytes: float
    mem_bw_bytes_per_s: float
    link_kind: str                    # intra-node GPU-GPU link, e.g. "nvlink4", "pcie", "xgmi"
    link_bw_bytes_per_s: float        # per GPU, one direction
    pcie_gen: int
    power_w: float
    price_per_hour_usd: float
    price_date: str = ""
    price_source: str = ""
    efficiency: float = 0.6           # fraction of peak a transformer layer's matmuls reach
    efficiency_note: str = ""
    vendor: str = "nvidia"
    source: str = ""
    peak_tf32_flops: float = 0.0      # dense TF32 tensor-core peak; 0: none (fp32 matmuls run at peak_fp32_flops)
    peak_fp8_flops: float = 0.0       # dense FP8 tensor-core peak; 0: no FP8
    nvlink_domain_gpus: int = 0       # GPUs on one NVLink switch fabric across nodes (GB200 NVL72: 72); 0: a node
    fp8_efficiency: float = 0.0       # best measured FP8 matmul / FP8 peak; 0: not measured (planner.compute's rule)
    attention_kernels_of: str = ""    # the GPU whose measured attention kernel rates apply; "": none measured

    def __post_init__(self):
        f = f"gpus[{self.id}]"
        _require(isinstance(self.nvlink_domain_gpus, int) and self.nvlink_domain_gpus >= 0,
                 f"{f}.nvlink_domain_gpus", f"must be a whole number of GPUs, got {self.nvlink_domain_gpus!r}")
        for name in ("peak_tf32_flops", "peak_fp8_flops"):
            _nonnegative_number(getattr(self, name), f"{f}.{name}")
        for name in ("peak_flops", "peak_fp32_flops", "mem_bytes", "mem_bw_bytes_per_s",
                     "link_bw_bytes_per_s", "power_w"):
            _positive_number(getattr(self, name), f"{f}.{name}")
        _nonnegative_number(self.price_per_hour_usd, f"{f}.price_per_hour_usd")
        _require(isinstance(self.efficiency, (int, float)) and 0 < self.efficiency <= 1, f"{f}.efficiency",
                 f"must be a fraction in (0, 1], got {self.efficiency!r}")
        _require(isinstance(self.fp8_efficiency, (int, float)) and 0 <= self.fp8_efficiency <= 1,
                 f"{f}.fp8_efficiency", f"must be a fraction in [0, 1] (0: not measured), got {self.fp8_efficiency!r}")


@dataclass(frozen=True)
class Network:
    id: str
    name: str
    bw_bytes_per_s: float             # one direction, per port/link
    latency_s: float
    kind: str                         # "intra-node" or "inter-node"
    source: str = ""
    transport: str = ""               # inter-node: "infiniband", "roce" or "ethernet" (planner.network)

    def __post_init__(self):
        _positive_number(self.bw_bytes_per_s, f"networks[{self.id}].bw_bytes_per_s")
        _nonnegative_number(self.latency_s, f"networks[{self.id}].latency_s")


@dataclass(frozen=True)
class Pool:
    """`nodes` identical nodes of `gpus_per_node` GPUs of one type."""
    name: str
    gpu: Gpu
    nodes: int
    gpus_per_node: int
    inter_node_bw_bytes_per_s: float  # network bandwidth per node, one direction
    price_per_gpu_hour_usd: float     # effective price (override or catalog default)
    inter_node_latency_s: float = 5e-6
    host_mem_bytes: float = 0.0       # CPU memory per node; 0: HOST_MEMORY_PER_GPU_MEMORY x the node's GPU memory
    grid_gco2_per_kwh: float | None = None   # carbon intensity of the power the pool draws; None: unknown
    spot: bool = False                # preemptible: GPUs can be reclaimed (planner.spot); price: the spot price
    availability: float = 1.0         # spot: the share of time a plan holds all the pool's GPUs it uses

    def __post_init__(self):
        f = f"pools[{self.name}]"
        _spot_fields(self.spot, self.availability, f)
        if self.grid_gco2_per_kwh is not None:
            _nonnegative_number(self.grid_gco2_per_kwh, f"{f}.grid_gco2_per_kwh")
        _nonnegative_number(self.host_mem_bytes, f"{f}.host_memory_gib")
        _positive_int(self.nodes, f"{f}.nodes")
        _positive_int(self.gpus_per_node, f"{f}.gpus_per_node")
        _positive_number(self.inter_node_bw_bytes_per_s, f"{f}.inter_node_gbps")
        _nonnegative_number(self.price_per_gpu_hour_usd, f"{f}.price_per_gpu_hour")
        _nonnegative_number(self.inter_node_latency_s, f"{f}.inter_node_latency_s")

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def host_mem_per_gpu_bytes(self) -> float:
        """CPU memory per GPU for offloaded states: the node's, shared evenly by its GPUs."""
        node = self.host_mem_bytes or HOST_MEMORY_PER_GPU_MEMORY * self.gpu.mem_bytes * self.gpus_per_node
        return node / self.gpus_per_node


# A node's CPU memory when the cluster file does not say: twice its GPUs' memory (an assumption:
# NVIDIA DGX A100 has 1 TB for 8 x 80 GB, 1.6x; DGX H100 2 TB for 8 x 80 GB, 3.2x).
HOST_MEMORY_PER_GPU_MEMORY = 2.0


# ----------------------------------------------------------------------------- networks as graphs

# A cluster's network as a graph: switches, the links that join nodes to them, and the trunks
# between switches; bandwidth between any two pools is the bottleneck of their widest path.
#
# The graph (networkx) has a vertex per pool and per switch. A link with a pool at one end stands for
# every node of the pool: each node has that link (its NICs) to the switch, so its bandwidth is per
# node; parallel links from a pool to one switch add up (rails). A link between two switches is a trunk:
# its bandwidth is shared by all the traffic that crosses it. Pools are leaves: traffic goes from a
# node to its switch, over trunks, to the other node's switch; it never passes through a pool.
#
# Per-node bandwidth between a node of pool A and a node of pool B (`Network.between`):
#
#     bw(A, B) = max over paths s ~> t of  min( nic(A, s),  nic(B, t),  min over trunks e on the path of  bw(e) / m )
#
# with `m = min(nodes of A, nodes of B)`: a trunk between the two pools is shared by as many node
# pairs as can talk across it at once, at most the smaller pool's nodes. That sharing is an assumption
# (Holmes, Yang et al. 2023, plans pipelines across NIC kinds; it does not model trunk sharing);
# traffic of other pools over the same trunk is not counted, and a pair's traffic takes one path (its
# widest) even where a pool has links to several switches. Two nodes of one pool talk through their
# switch at the sum of the pool's links (`nic`). The path's latency is the largest of its links' (the
# path's slowest transport sets the alpha term: a message that crosses an Ethernet hop between two
# InfiniBand islands goes over TCP sockets).
#
# The widest path between switches runs along a maximum spanning tree of the switch graph (a standard
# property of bottleneck paths), so every pair is read off one tree.

NETWORK_KINDS = ("infiniband", "roce", "ethernet")

# Small-message latency by link kind when a link does not say, seconds: the catalog's figures for
# InfiniBand HDR/NDR (3 us), RoCE v2 (5 us) and Ethernet with kernel TCP sockets (20 us at 25 GbE);
# catalog/networks.yaml gives their sources. Order-of-magnitude alpha terms, not datasheet values.
DEFAULT_LATENCY_S = {"infiniband": 3e-6, "roce": 5e-6, "ethernet": 20e-6}


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str                        # one of NETWORK_KINDS

    def __post_init__(self):
        if self.kind not in NETWORK_KINDS:
            raise InputError(f"network.switches[{self.name}].kind",
                             f"unknown kind {self.kind!r}; use one of {list(NETWORK_KINDS)}")


@dataclass(frozen=True)
class Link:
    """A link between `a` and `b` (pool or switch names): per node when one end is a pool, the
    trunk's total when both are switches."""
    a: str
    b: str
    bw_bytes_per_s: float
    latency_s: float
    kind: str

    def __post_init__(self):
        at = f"network.links[{self.a}-{self.b}]"
        if not (self.bw_bytes_per_s > 0 and math.isfinite(self.bw_bytes_per_s)):
            raise InputError(f"{at}.gbps", f"must be a positive bandwidth, got {self.bw_bytes_per_s!r} bytes/s")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise InputError(f"{at}.latency_us", f"must be a latency >= 0, got {self.latency_s!r} s")
        if self.kind not in NETWORK_KINDS:
            raise InputError(f"{at}.kind", f"unknown kind {self.kind!r}; use one of {list(NETWORK_KINDS)}")


@dataclass(frozen=True)
class Storage:
    """Where checkpoints are written and read: a switch, and the storage system's total bandwidth."""
    switch: str
    bw_bytes_per_s: float


@dataclass(frozen=True)
class Path:
    bw_bytes_per_s: float            # per node
    latency_s: float
    hops: tuple[str, ...]            # pool, switches..., pool


@dataclass(frozen=True)
class NetworkGraph:
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    storage: Storage | None = None

    def __post_init__(self):
        names = [s.name for s in self.switches]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError("network.switches", f"switch names must be unique; repeated: {dup}")
        known = set(names)
        for link in self.links:
            if link.a not in known and link.b not in known:
                raise InputError(f"network.links[{link.a}-{link.b}]",
                                 "joins no switch: every link has a switch at one end at least "
                                 f"(switches: {sorted(known)})")
        for pool, switches in self._links_by_pool.items():
            if len(switches) > MAX_SWITCHES_PER_POOL:
                raise InputError("network.links", f"pool {pool!r} links to {len(switches)} switches; at most "
                                                  f"{MAX_SWITCHES_PER_POOL} (planner.types.MAX_SWITCHES_PER_POOL), "
                                                  f"one per NIC rail: join the rails' switches instead")
        if self.storage is not None and self.storage.switch not in known:
            raise InputError("network.storage.switch",
                             f"unknown switch {self.storage.switch!r}; the network has {sorted(known)}")

    @cached_property
    def switch_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.switches)

    @cached_property
    def _links_by_pool(self) -> dict[str, dict[str, Link]]:
        """Each pool's links by switch, parallel links to one switch added up (rails); one pass
        over the links."""
        switches = self.switch_names
        out: dict[str, dict[str, Link]] = {}
        for link in self.links:
            if link.a in switches and link.b in switches:
                continue
            pool, switch = (link.b, link.a) if link.a in switches else (link.a, link.b)
            mine = out.setdefault(pool, {})
            was = mine.get(switch)
            mine[switch] = link if was is None else Link(pool, switch, was.bw_bytes_per_s + link.bw_bytes_per_s,
                                                         max(was.latency_s, link.latency_s), was.kind)
        return out

    def pool_links(self, pool: str) -> dict[str, Link]:
        """The pool's links by switch, parallel links to one switch added up (rails)."""
        return dict(self._links_by_pool.get(pool, {}))

    def nic(self, pool: str) -> tuple[float, float]:
        """(bytes/s, latency) of one node of `pool` to the network: all its links."""
        links = self._links_by_pool.get(pool, {}).values()
        if not links:
            raise InputError("network.links", f"pool {pool!r} has no link; join it to a switch")
        return sum(l.bw_bytes_per_s for l in links), max(l.latency_s for l in links)

    def trunk_tree(self) -> nx.Graph:
        """The switches joined by a maximum spanning tree of their trunks (parallel trunks added)."""
        import networkx as nx   # lazy: a second of import time, needed only by clusters with a network section
        g = nx.Graph()
        g.add_nodes_from(self.switch_names)
        for link in self.links:
            if link.a in self.switch_names and link.b in self.switch_names:
                if g.has_edge(link.a, link.b):
                    e = g.edges[link.a, link.b]
                    e["bw"] += link.bw_bytes_per_s
                    e["latency"] = max(e["latency"], link.latency_s)
                else:
                    g.add_edge(link.a, link.b, bw=link.bw_bytes_per_s, latency=link.latency_s)
        return nx.maximum_spanning_tree(g, weight="bw")

    @cached_property
    def _switch_index(self) -> dict[str, int]:
        return {s.name: i for i, s in enumerate(self.switches)}

    @cached_property
    def _trunks(self) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
        """Between every two switches, along the maximum spanning tree: (bottleneck bytes/s, 0 where
        no trunks join them, inf from a switch to itself; largest latency; each switch's parent and
        depth in the tree rooted at its component's first switch). Built once per network (every
        subset of a cluster, e.g. each fleet candidate, shares it).

        Adding the tree's edges widest first, two switches join exactly when the narrowest edge of
        their tree path is added (Kruskal's order), so each merge of two components writes one block
        of the matrix; likewise the latencies, smallest first. O(switches^2) work and memory (1,024
        switches: two 8 MB matrices), however long the paths."""
        index = self._switch_index
        tree = self.trunk_tree()
        edges = [(index[u], index[v], e["bw"], e["latency"]) for u, v, e in tree.edges(data=True)]
        n = len(index)
        bw = _join_in_order(n, [(i, j, b) for i, j, b, _ in sorted(edges, key=lambda e: -e[2])], empty=0.0)
        np.fill_diagonal(bw, math.inf)
        latency = _join_in_order(n, [(i, j, l) for i, j, _, l in sorted(edges, key=lambda e: e[3])], empty=0.0)
        parent, depth = [-1] * n, [0] * n
        neighbours: dict[int, list[int]] = {i: [] for i in range(n)}
        for i, j, _, _ in edges:
            neighbours[i].append(j)
            neighbours[j].append(i)
        seen = [False] * n
        for root in range(n):
            if seen[root]:
                continue
            seen[root], todo = True, [root]
            while todo:
                u = todo.pop()
                for v in neighbours[u]:
                    if not seen[v]:
                        seen[v], parent[v], depth[v] = True, u, depth[u] + 1
                        todo.append(v)
        return bw, latency, parent, depth

    def _trunk_hops(self, s: str, t: str) -> tuple[str, ...]:
        """The switches on the tree path from `s` to `t` (both included): up from both to where
        they meet."""
        _, _, parent, depth = self._trunks
        i, j = self._switch_index[s], self._switch_index[t]
        up_i, up_j = [i], [j]
        while i != j:
            if depth[i] >= depth[j]:
                i = parent[i]
                up_i.append(i)
            else:
                j = parent[j]
                up_j.append(j)
        names = [sw.name for sw in self.switches]
        return tuple(names[k] for k in up_i + up_j[-2::-1])

    def paths(self, nodes: Mapping[str, int]) -> Mapping[tuple[str, str], Path]:
        """The widest path between every two of the pools `nodes` names (pool -> its node count);
        an InputError names two pools with no path between them. Links to other pools are ignored
        (a cluster's subset keeps its network).

        The widest (maximum bottleneck) path between two vertices of a graph runs along a maximum
        spanning tree (T. C. Hu 1961, "The maximum capacity route problem", Operations Research
        9(6):898-900; Cormen et al., Introduction to Algorithms, 3rd ed., problem 23-3), so each pair
        reads one entry of `_trunks` per pair of the pools' switches: work bounded by pools^2 x
        switches per pool^2, never a search over paths. A path's switches are listed when asked for."""
        bw_matrix, latency_matrix, _, _ = self._trunks
        index = self._switch_index
        ends = {}
        for p in nodes:
            links = list(self._links_by_pool.get(p, {}).items())
            ends[p] = (np.array([index[s] for s, _ in links], dtype=np.intp),
                       np.array([l.bw_bytes_per_s for _, l in links]), np.array([l.latency_s for _, l in links]),
                       [s for s, _ in links])
        best: dict[tuple[str, str], tuple[float, float, str, str]] = {}
        names = sorted(nodes)
        for i, a in enumerate(names):
            sa, bwa, lata, swa = ends[a]
            for b in names[i + 1:]:
                sb, bwb, latb, swb = ends[b]
                trunk = bw_matrix[sa[:, None], sb]
                bw = np.minimum(np.minimum(bwa[:, None], bwb[None, :]), trunk / min(nodes[a], nodes[b]))
                latency = np.maximum(np.maximum(lata[:, None], latb[None, :]), latency_matrix[sa[:, None], sb])
                joined = trunk > 0
                if not joined.any():
                    raise InputError("network.links", f"pools {a!r} and {b!r} have no path between them; "
                                                      f"join their switches with a link")
                widest = np.where(joined, bw, -1.0)
                ties = widest == widest.max()
                k = int(np.argmin(np.where(ties, latency, math.inf)))    # first of the least latency
                x, y = divmod(k, len(sb))
                best[(a, b)] = (float(bw[x, y]), float(latency[x, y]), swa[x], swb[y])
        return _PathTable(self, best)

    def storage_bw(self, pools: Mapping[str, int]) -> float | None:
        """Bytes/s that `pools` (pool -> nodes writing) move to or from storage together: each pool's
        nodes at their links, over the trunks to the storage switch, capped by the storage's own
        bandwidth; None without a storage entry."""
        if self.storage is None:
            return None
        to_storage = self._trunks[0][self._switch_index[self.storage.switch]]
        total = 0.0
        for pool, n in pools.items():
            best = 0.0
            for s, link in self._links_by_pool.get(pool, {}).items():
                trunk_bw = to_storage[self._switch_index[s]]
                if trunk_bw > 0:
                    best = max(best, min(n * link.bw_bytes_per_s, trunk_bw))
            if best == 0.0:
                raise InputError("network.storage", f"pool {pool!r} has no path to the storage switch "
                                                    f"{self.storage.switch!r}")
            total += best
        return min(total, self.storage.bw_bytes_per_s)


def _join_in_order(n: int, edges: list[tuple[int, int, float]], empty: float) -> np.ndarray:
    """An n x n matrix: for each two vertices, the value of the edge whose addition (in the order
    given) first joins them; `empty` where none does. Components merge smaller into larger."""
    out = np.full((n, n), empty)
    component = list(range(n))
    members = [[i] for i in range(n)]
    for i, j, value in edges:
        ci, cj = component[i], component[j]
        if ci == cj:
            continue
        if len(members[ci]) < len(members[cj]):
            ci, cj = cj, ci
        out[np.ix_(members[ci], members[cj])] = value
        out[np.ix_(members[cj], members[ci])] = value
        for k in members[cj]:
            component[k] = ci
        members[ci] += members[cj]
        members[cj] = []
    return out


class _PathTable(Mapping):
    """`NetworkGraph.paths`' answer: each ordered pair of pools -> its Path, the switches on the way
    listed on first use (2,016 pairs of pools over a chain of 1,024 switches would be 700,000 names)."""

    def __init__(self, network: NetworkGraph, best: dict[tuple[str, str], tuple[float, float, str, str]]):
        self._network, self._best, self._made = network, best, {}

    def __getitem__(self, pair: tuple[str, str]) -> Path:
        if pair not in self._made:
            a, b = pair
            if (a, b) in self._best:
                bw, latency, s, t = self._best[(a, b)]
                self._made[pair] = Path(bw, latency, (a, *self._network._trunk_hops(s, t), b))
            else:
                bw, latency, s, t = self._best[(b, a)]
                self._made[pair] = Path(bw, latency, (a, *self._network._trunk_hops(t, s), b))
        return self._made[pair]

    def __iter__(self):
        for a, b in self._best:
            yield a, b
            yield b, a

    def __len__(self) -> int:
        return 2 * len(self._best)


@dataclass(frozen=True)
class Cluster:
    name: str
    pools: tuple[Pool, ...]
    between_pools_bw_bytes_per_s: float | None = None  # per node; None: the smaller side
    network: NetworkGraph | None = None   # the network as a graph (above); None: the pools' short form
    _paths: dict = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self):
        _require(len(self.pools) > 0, "pools", "a cluster needs at least one pool")
        names = [p.name for p in self.pools]
        dup = sorted({n for n in names if names.count(n) > 1})
        _require(not dup, "pools", f"pool names must be unique; repeated: {dup} (set `name:` on each)")
        if self.between_pools_bw_bytes_per_s is not None:
            _positive_number(self.between_pools_bw_bytes_per_s, "between_pools_gbps")
            _require(self.network is None, "between_pools_gbps",
                     "give between_pools_gbps or a network section, not both: the network's trunks "
                     "bound the traffic between pools")
        paths = None if self.network is None else self.network.paths({p.name: p.nodes for p in self.pools})
        object.__setattr__(self, "_paths", paths)

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise InputError("pool", f"unknown pool {name!r}; the cluster has {[p.name for p in self.pools]}")

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    def bw_between_pools(self, a: Pool, b: Pool) -> float:
        """Per-node bandwidth (bytes/s) between a node of pool `a` and one of pool `b`."""
        if a.name == b.name:
            return a.inter_node_bw_bytes_per_s
        if self._paths is not None:
            return self._paths[(a.name, b.name)].bw_bytes_per_s
        slower_side = min(a.inter_node_bw_bytes_per_s, b.inter_node_bw_bytes_per_s)
        if self.between_pools_bw_bytes_per_s is None:
            return slower_side
        return min(slower_side, self.between_pools_bw_bytes_per_s)

    def latency_between_pools(self, a: Pool, b: Pool) -> float:
        """Small-message latency (s) between a node of pool `a` and one of pool `b`."""
        if a.name != b.name and self._paths is not None:
            return self._paths[(a.name, b.name)].latency_s
        return max(a.inter_node_latency_s, b.inter_node_latency_s)

    def path_between_pools(self, a: Pool, b: Pool) -> Path | None:
        """The network path between two pools, None without a network section or within a pool."""
        if a.name == b.name or self._paths is None:
            return None
        return self._paths[(a.name, b.name)]


# ----------------------------------------------------------------------------- models

@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. Parameter counts follow the released checkpoints."""
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied_embeddings: bool = False
    mlp: MlpKind = MlpKind.SWIGLU
    norm: NormKind = NormKind.RMSNORM
    position: PositionKind = PositionKind.ROPE
    max_positions: int = 0            # learned position table rows (0 when none)
    qkv_bias: bool = False            # bias on the q, k, v projections (GPT-3, OPT, BLOOM, Qwen2)
    out_bias: bool = False            # bias on the attention output projection (GPT-3, OPT, BLOOM, GPT-Neo)
    mlp_bias: bool = False
    embed_norm: bool = False          # layer norm after the embedding (BLOOM)
    final_norm: bool = True
    embed_proj_dim: int = 0           # OPT-350m: word embeddings of this width, projected in/out
    experts: int = 1
    top_k: int = 1
    source: str = ""
    # mixture-of-experts shapes beyond `experts` x `ffn` (DeepSeek-V3, Qwen3 MoE, Llama 4):
    moe_ffn: int = 0                  # each expert's MLP width; 0: `ffn` (then every layer is MoE)
    shared_experts: int = 0           # always-active experts of width moe_ffn beside the routed ones
    dense_layers: int = 0             # the first layers are dense MLPs of width `ffn`
    moe_every: int = 1                # after those, every moe_every-th layer is MoE, the others dense
    attention_head_dim: int = 0       # per-head width when not hidden / heads (Qwen3, Gemma); 0: hidden / heads
    # multi-head latent attention (DeepSeek-V2/V3): low-rank q and joint kv projections; 0: none
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # what the weights mean beyond their shapes (each checkpoint's config.json; defaults: Hugging Face's
    # LlamaConfig, i.e. RoFormer's base 10000, eps 1e-5, std 0.02, no dropout)
    rope_theta: float = 10000.0       # RoPE base (Llama 3: 500000, Mixtral and Qwen: 1e6); unused without RoPE
    rope_scaling: RopeScaling = None  # long-context frequency scaling (Llama 3.1: "llama3" x8, DeepSeek-V3: "yarn" x40)
    rope_scaling_factor: float = 1.0
    norm_eps: float = 1e-5            # epsilon of every LayerNorm / RMSNorm
    attention_dropout: float = 0.0    # on the attention probabilities
    hidden_dropout: float = 0.0       # on each block's output before the residual add
    init_std: float = 0.02            # standard deviation of the weights' normal initialisation

    def __post_init__(self):
        f = f"models[{self.id}]"
        self._check_numerics(f)
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts", "top_k", "moe_every"):
            _positive_int(getattr(self, name), f"{f}.{name}")
        for name in ("moe_ffn", "shared_experts", "dense_layers", "attention_head_dim", "q_lora_rank",
                     "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10_000_000,
                     f"{f}.{name}", f"must be a whole number from 0 to 10,000,000, got {value!r}")
        _require(self.dense_layers < self.layers or self.experts == 1, f"{f}.dense_layers",
                 f"{self.dense_layers} dense layers leave no MoE layer of {self.layers}")
        _require(self.attention_head_dim > 0 or self.hidden % self.heads == 0, f"{f}.hidden",
                 f"hidden ({self.hidden}) must be divisible by heads ({self.heads}), or set attention_head_dim")
        _require(self.heads % self.kv_heads == 0, f"{f}.kv_heads",
                 f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        _require(self.top_k <= self.experts, f"{f}.top_k",
                 f"top_k ({self.top_k}) must not exceed experts ({self.experts})")
        for name in ("max_positions", "embed_proj_dim"):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                     f"{f}.{name}", f"must be a whole number, zero or more, got {value!r}")
        for name, limit in (("layers", MAX_LAYERS), ("hidden", MAX_HIDDEN), ("ffn", MAX_FFN),
                            ("vocab", MAX_VOCAB), ("experts", MAX_EXPERTS), ("max_positions", 100_000_000),
                            ("embed_proj_dim", 1_000_000)):
            _require(getattr(self, name) <= limit, f"{f}.{name}",
                     f"is implausibly large ({getattr(self, name)!r}); the limit is {limit:,}")

    def _check_numerics(self, f: str) -> None:
        for name, low, high in (("rope_theta", 1.0, 1e12), ("rope_scaling_factor", 1.0, 1e6), ("norm_eps", 1e-12, 1.0),
                                ("init_std", 1e-6, 10.0)):
            value = getattr(self, name)
            _require(isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high,
                     f"{f}.{name}", f"must be a number from {low:g} to {high:g}, got {value!r}")
        for name in ("attention_dropout", "hidden_dropout"):
            value = getattr(self, name)
            _require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1,
                     f"{f}.{name}", f"must be a probability from 0 up to (not including) 1, got {value!r}")
        _require(self.rope_scaling in ROPE_SCALINGS, f"{f}.rope_scaling",
                 f"must be one of {[s for s in ROPE_SCALINGS if s]} or absent, got {self.rope_scaling!r}")
        _require((self.rope_scaling is None) == (self.rope_scaling_factor == 1.0), f"{f}.rope_scaling_factor",
                 f"must be above 1 with rope_scaling and 1 without it, got {self.rope_scaling_factor!r} with "
                 f"rope_scaling {self.rope_scaling!r}")

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden // self.heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """How many layers hold experts (all of them for a plain MoE model, none for a dense one)."""
        if not self.is_moe:
            return 0
        return (self.layers - self.dense_layers) // self.moe_every

    @property
    def is_moe(self) -> bool:
        return self.experts > 1


# ----------------------------------------------------------------------------- jobs and plans

@dataclass(frozen=True)
class Training:
    """What kind of training a job is (the plan's `job`): which weights are trained and how the
    frozen ones are stored (planner.training)."""
    kind: JobKind = JobKind.PRETRAIN
    lora_rank: int = 16               # adapter rank, for lora and qlora

    def __post_init__(self):
        _require(isinstance(self.kind, JobKind), "job.kind",
                 f"must be one of {', '.join(k.value for k in JobKind)}, got {self.kind!r}")
        _positive_int(self.lora_rank, "job.lora_rank")
        _require(self.lora_rank <= MAX_LORA_RANK, "job.lora_rank",
                 f"must be at most {MAX_LORA_RANK:,}, got {self.lora_rank:,}")

    @property
    def adapters(self) -> bool:
        return self.kind in (JobKind.LORA, JobKind.QLORA)


PRETRAIN = Training()


@dataclass(frozen=True)
class Job:
    model: Model
    global_batch: int                 # sequences per iteration
    seq_len: int
    precision: Precision | None = None  # None: bf16 where every GPU used supports it, else fp16
    tokens_to_train: float | None = None
    engine: str = "hetplan"           # the engine that will run it (planner.engines): its space and execution
    tf32: bool | None = None          # fp32 only: TF32 matmuls on or off; None: the engine's default
    training: Training = PRETRAIN     # pretraining, full fine-tuning, LoRA or QLoRA
    offload: Offload = Offload.NONE   # settings one search holds fixed (planner.search.search tries each)
    context_parallel: int = 1
    expert_parallel: int = 1

    def __post_init__(self):
        check_engine(self.engine)
        _check_context_parallel(self.context_parallel, self.seq_len)
        _check_expert_parallel(self.expert_parallel, self.model)
        _positive_int(self.global_batch, "global_batch")
        _positive_int(self.seq_len, "seq_len")
        _check_sizes(self.global_batch, self.seq_len)
        _check_lora_rank(self.training, self.model)
        if self.tokens_to_train is not None:
            _positive_number(self.tokens_to_train, "tokens")

    @property
    def tokens_per_iteration(self) -> int:
        return self.global_batch * self.seq_len


@dataclass(frozen=True)
class FleetJob:
    """One job of a fleet (planner.fleet, a jobs file): a Job to size, with its deadline and weight."""
    name: str
    model: Model
    global_batch: int
    seq_len: int
    tokens: float | None = None           # tokens to train; needed for time and dollars to finish
    deadline_hours: float | None = None   # min-cost: finish within this
    weight: float = 1.0

    def __post_init__(self):
        self.job()                        # Job validates batch, sequence length and tokens
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight > 0):
            raise InputError("weight", f"must be a positive number, got {self.weight!r}")
        if self.deadline_hours is not None and not (math.isfinite(self.deadline_hours) and self.deadline_hours > 0):
            raise InputError("deadline_hours", f"must be a positive number of hours, got {self.deadline_hours!r}")

    def job(self) -> Job:
        return Job(self.model, self.global_batch, self.seq_len, tokens_to_train=self.tokens)


# The engines a plan can name, in the order they are listed: each has its profile in planner.engines
# (one module per engine; planner.engines checks at import that its registry holds these names).
ENGINE_NAMES = ("hetplan", "megatron", "deepspeed", "torchtitan", "flagscale", "fsdp", "megatron-deepspeed")


def check_engine(name, field: str = "engine") -> None:
    """InputError naming `field` and the known engines unless `name` is one of ENGINE_NAMES."""
    if not isinstance(name, str) or name not in ENGINE_NAMES:
        raise InputError(field, f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")


def _check_context_parallel(context_parallel: int, seq_len: int) -> None:
    _positive_int(context_parallel, "context_parallel")
    _require(context_parallel <= MAX_CONTEXT_PARALLEL, "context_parallel",
             f"must be at most {MAX_CONTEXT_PARALLEL:,}, got {context_parallel:,}")
    # causal load balancing cuts the sequence into 2 cp chunks, two per rank (Megatron-LM, torchtitan)
    _require(context_parallel == 1 or seq_len % (2 * context_parallel) == 0, "context_parallel",
             f"the sequence length ({seq_len:,}) must split into 2 x {context_parallel} equal chunks; use a "
             f"context-parallel degree whose double divides it")


def _check_expert_parallel(expert_parallel: int, model: Model) -> None:
    _positive_int(expert_parallel, "expert_parallel")
    _require(expert_parallel == 1 or model.is_moe, "expert_parallel",
             f"{model.id} has no experts to shard; set expert_parallel to 1")
    _require(model.experts % expert_parallel == 0, "expert_parallel",
             f"{model.experts} experts do not split evenly over {expert_parallel} GPUs; use a divisor of "
             f"{model.experts}")


def _check_lora_rank(training: Training, model: Model) -> None:
    _require(not training.adapters or training.lora_rank <= model.hidden, "job.lora_rank",
             f"must be at most the model's hidden size ({model.hidden:,}), got "
             f"{training.lora_rank:,}: an adapter of rank r on a hidden x hidden weight is low-rank only "
             f"below the hidden size; use a smaller rank")


def _check_sizes(global_batch: int, seq_len: int) -> None:
    _require(global_batch <= MAX_GLOBAL_BATCH, "global_batch",
             f"must be at most {MAX_GLOBAL_BATCH:,} sequences, got {global_batch:,}")
    _require(seq_len <= MAX_SEQ_LEN, "seq_len", f"must be at most {MAX_SEQ_LEN:,} tokens, got {seq_len:,}")


@dataclass(frozen=True)
class Replica:
    """One data-parallel copy of a stage on `tp` GPUs of one pool, processing `samples` sequences."""
    pool: str
    tp: int
    samples: int

    def __post_init__(self):
        _positive_int(self.tp, "tp")
        _positive_int(self.samples, "samples")


@dataclass(frozen=True)
class Stage:
    """Transformer layers [layer_start, layer_end); embedding with the first stage, head with the last."""
    layer_start: int
    layer_end: int
    replicas: tuple[Replica, ...]

    def __post_init__(self):
        _require(isinstance(self.layer_start, int) and isinstance(self.layer_end, int)
                 and 0 <= self.layer_start < self.layer_end,
                 "layers", f"must be [start, end) with 0 <= start < end, got [{self.layer_start}, {self.layer_end}]")
        _require(len(self.replicas) > 0, "replicas", "a stage needs at least one replica")

    @property
    def num_layers(self) -> int:
        return self.layer_end - self.layer_start

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.replicas)

    @property
    def num_gpus(self) -> int:
        return sum(r.tp for r in self.replicas)


PLAN_FORMAT = "hetplan.plan/1"


@dataclass(frozen=True)
class Plan:
    model: Model
    global_batch: int
    seq_len: int
    micro_batch: int
    precision: Precision
    stages: tuple[Stage, ...]
    zero_stage: int = 0
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    schedule: Schedule = Schedule.ONE_F_ONE_B
    interleave: int = 1
    engine: str = "hetplan"           # the engine it is planned for (planner.engines); "hetplan": hetplan's runtime
    tf32: bool | None = None          # fp32 only: TF32 matmuls on or off; None: the engine's default
    training: Training = PRETRAIN     # the plan file's `job`
    offload: Offload = Offload.NONE   # model states in CPU memory (planner.training)
    context_parallel: int = 1         # each replica spans tp x context_parallel GPUs, the sequence split over cp
    expert_parallel: int = 1          # routed experts sharded over this many of a stage's replicas (no more GPUs)
    tp_comm_overlap: bool = False     # tp collectives pipelined with the GEMMs beside them, where the engine offers it
    attention: Attention = Attention.FLASH   # the attention core's kernels (planner.compute, planner.memory)
    # overlaps the engine lets a plan switch (planner.engines.base.SWITCHES); None: the engine's default
    overlap_grad_reduce: bool | None = None   # dp gradients reduced in buckets during the last backward pass
    overlap_param_gather: bool | None = None  # ZeRO-1/2's weight all-gather behind the next first forward
    prefetch: bool | None = None              # ZeRO-3/FSDP: the next layer's all-gather issued during this one's backward
    expert_tensor_parallel: int = 0   # each routed expert split over this many GPUs (Megatron's expert tp); 0: tp.
    #                                   Below tp, an expert group of etp x ep GPUs takes tp ranks first, so ep
    #                                   need only divide tp x replicas / etp, not the replicas
    hybrid_shard: int = 0             # FSDP HYBRID_SHARD: states sharded within groups of this many replicas (a
    #                                   node), replicated across the groups; 0: sharded over all the replicas

    def __post_init__(self):
        check_engine(self.engine)
        _require(isinstance(self.tp_comm_overlap, bool), "tp_comm_overlap",
                 f"must be true or false, got {self.tp_comm_overlap!r}")
        for name in ("overlap_grad_reduce", "overlap_param_gather", "prefetch"):
            _require(getattr(self, name) is None or isinstance(getattr(self, name), bool), name,
                     f"must be true, false or absent (the engine's default), got {getattr(self, name)!r}")
        _check_context_parallel(self.context_parallel, self.seq_len)
        _check_expert_parallel(self.expert_parallel, self.model)
        _check_lora_rank(self.training, self.model)
        _require(not isinstance(self.hybrid_shard, bool) and isinstance(self.hybrid_shard, int)
                 and self.hybrid_shard >= 0, "hybrid_shard", f"must be 0 or a whole number of replicas, got "
                                                             f"{self.hybrid_shard!r}")
        _require(not self.hybrid_shard or (self.zero_stage >= 2 and all(
            len(st.replicas) % self.hybrid_shard == 0 for st in self.stages)), "hybrid_shard",
            f"shards ZeRO-2/3 states within groups of {self.hybrid_shard} replicas: it needs zero_stage 2 or 3 and "
            f"every stage's replicas a multiple of it (the plan: ZeRO {self.zero_stage}, "
            f"{[len(st.replicas) for st in self.stages]} replicas); set it to the GPUs of a node or remove it")
        self._check_expert_groups()
        _require(self.offload == Offload.NONE or self.zero_stage >= 1, "offload",
                 "offloading the optimizer needs ZeRO stage 1 or more (its shards are what the host updates, "
                 "as in DeepSpeed and Megatron-LM's distributed optimizer); set zero_stage to 1, 2 or 3")
        _require(self.offload != Offload.OPTIMIZER_PARAMS or self.zero_stage == 3, "offload",
                 "offloading parameters needs ZeRO stage 3 (as DeepSpeed's offload_param does); "
                 "set zero_stage 3 or offload 'optimizer'")
        _require(isinstance(self.attention, Attention), "attention",
                 f"must be 'flash' or 'unfused', got {self.attention!r}")
        _require(self.tf32 is None or self.precision == Precision.FP32, "tf32",
                 f"applies to fp32 plans only; this plan is {self.precision.value}: remove `tf32`")
        _positive_int(self.global_batch, "global_batch")
        _positive_int(self.seq_len, "seq_len")
        _positive_int(self.micro_batch, "micro_batch")
        _positive_int(self.interleave, "interleave")
        _check_sizes(self.global_batch, self.seq_len)
        _require(not isinstance(self.zero_stage, bool) and self.zero_stage in (0, 1, 2, 3), "zero_stage",
                 f"must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        _require(len(self.stages) > 0, "stages", "a plan needs at least one stage")
        self._check_layers()
        self._check_samples()
        self._check_tensor_parallel()
        passes = len(self.stages) * self.num_micro_batches * self.interleave
        if passes > MAX_SIMULATED_PASSES:
            raise TooManyPassesError(
                "micro_batch", f"{len(self.stages)} stages x {self.num_micro_batches:,} micro-batches x interleave "
                               f"{self.interleave} = {passes:,} passes to simulate, over the limit of "
                               f"{MAX_SIMULATED_PASSES:,}; use a larger micro_batch or fewer stages")
        if self.interleave > 1:
            _require(self.schedule == Schedule.ONE_F_ONE_B, "interleave",
                     "interleaving needs schedule '1f1b'; set interleave to 1 for gpipe")
            _require(len(self.stages) > 1, "interleave", "interleaving needs at least two stages")
            for i, s in enumerate(self.stages):
                _require(s.num_layers % self.interleave == 0, f"stages[{i}].layers",
                         f"{s.num_layers} layers do not split into {self.interleave} virtual stages; "
                         f"make each stage's layer count a multiple of interleave")
            p = len(self.stages)
            for j, r in enumerate(self.stages[0].replicas):
                _require((r.samples // self.micro_batch) % p == 0, f"stages[0].replicas[{j}].samples",
                         f"interleaving runs micro-batches in groups of the {p} stages (as Megatron-LM "
                         f"does); {r.samples // self.micro_batch} micro-batches is not a multiple of {p}")
            shares = [[r.samples for r in s.replicas] for s in self.stages]
            _require(all(sh == shares[0] for sh in shares), "interleave",
                     "interleaving needs every stage to have the same number of replicas with the same "
                     "sample shares; set interleave to 1 for uneven replicas")

    def _check_expert_groups(self) -> None:
        """ep groups of whole replicas (etp = tp), or of etp x ep GPUs taken tp ranks first (etp < tp)."""
        etp = self.expert_tensor_parallel
        _require(not isinstance(etp, bool) and isinstance(etp, int) and etp >= 0, "expert_tensor_parallel",
                 f"must be 0 (tp) or a whole number of GPUs, got {etp!r}")
        for i, st in enumerate(self.stages):
            tp = st.replicas[0].tp
            if etp in (0, tp):
                _require(len(st.replicas) % self.expert_parallel == 0, f"stages[{i}].replicas",
                         f"{len(st.replicas)} data-parallel replicas do not form groups of expert_parallel "
                         f"{self.expert_parallel}; give every stage a multiple of {self.expert_parallel} replicas or "
                         f"use a smaller expert-parallel degree")
                continue
            _require(self.context_parallel == 1 and all(r.tp == tp for r in st.replicas) and tp % etp == 0
                     and (tp * len(st.replicas)) % (etp * self.expert_parallel) == 0, "expert_tensor_parallel",
                     f"{etp} with expert_parallel {self.expert_parallel} needs one tp per stage that it divides, no "
                     f"context parallelism, and etp x ep dividing tp x replicas (stage {i}: tp {tp}, "
                     f"{len(st.replicas)} replicas, cp {self.context_parallel})")

    def _check_layers(self) -> None:
        expected = 0
        for i, s in enumerate(self.stages):
            _require(s.layer_start == expected, f"stages[{i}].layers",
                     f"starts at layer {s.layer_start} but the previous stage ends at {expected}: "
                     f"layers must be covered once, in order, with no gap or overlap")
            expected = s.layer_end
        _require(expected == self.model.layers, f"stages[{len(self.stages) - 1}].layers",
                 f"the last stage ends at layer {expected} but {self.model.id} has {self.model.layers} layers")

    def _check_tensor_parallel(self) -> None:
        """tp splits attention heads, key/value heads (or replicates them when tp is a multiple) and the MLP
        evenly, as every engine's tensor parallelism does (Megatron-LM asserts it at start-up); the search's
        candidates (planner.search.space) obey the same rule."""
        m = self.model

        def splits(t: int) -> list[str]:
            bad = [f"{name} ({n})" for name, n in (("heads", m.heads), ("ffn", m.ffn)) if n % t]
            return bad + ([f"kv_heads ({m.kv_heads}; nor is tp a multiple of it)"]
                          if m.kv_heads % t and t % m.kv_heads else [])
        for i, s in enumerate(self.stages):
            for j, r in enumerate(s.replicas):
                bad = splits(r.tp)
                if bad:
                    fine = [str(t) for t in range(1, min(m.heads, 64) + 1) if not splits(t)]
                    _require(False, f"stages[{i}].replicas[{j}].tp",
                             f"tp {r.tp} does not divide {m.id}'s {', '.join(bad)}; use a tp that does "
                             f"({', '.join(fine)})")

    def _check_samples(self) -> None:
        for i, s in enumerate(self.stages):
            _require(s.samples == self.global_batch, f"stages[{i}].replicas",
                     f"samples add up to {s.samples} but the global batch is {self.global_batch}")
            for j, r in enumerate(s.replicas):
                _require(r.samples % self.micro_batch == 0, f"stages[{i}].replicas[{j}].samples",
                         f"{r.samples} samples are not a whole number of micro-batches of {self.micro_batch}")

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch // self.micro_batch

    def replica_gpus(self, replica: Replica) -> int:
        """GPUs of one replica: its tensor-parallel group times the context-parallel degree."""
        return replica.tp * self.context_parallel

    @property
    def num_gpus(self) -> int:
        return sum(s.num_gpus for s in self.stages) * self.context_parallel

    def gpus_by_pool(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for s in self.stages:
            for r in s.replicas:
                used[r.pool] = used.get(r.pool, 0) + self.replica_gpus(r)
        return used


# ----------------------------------------------------------------------------- estimates

@dataclass(frozen=True)
class TimeTerm:
    """One part of the iteration time: its total and the part not hidden by overlap."""
    total_s: float
    exposed_s: float


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    overhead_bytes: float
    capacity_bytes: float
    host_bytes: float = 0.0           # offloaded model states of this GPU in CPU memory
    host_capacity_bytes: float = math.inf   # this GPU's share of its node's CPU memory

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.overhead_bytes)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes and self.host_bytes <= self.host_capacity_bytes


@dataclass(frozen=True)
class ReplicaEstimate:
    stage: int
    replica: int
    pool: str
    gpu: str
    tp: int
    samples: int
    forward_s: float                  # one micro-batch, compute + exposed tp comm
    backward_s: float                 # one micro-batch, incl. recompute
    memory: MemoryBreakdown


@dataclass(frozen=True)
class Estimate:
    iteration_time_s: float
    pipeline_time_s: float
    tokens_per_s: float
    mfu: float
    cost_per_hour_usd: float
    cost_per_million_tokens_usd: float
    fits: bool
    breakdown: dict[str, TimeTerm]
    replicas: tuple[ReplicaEstimate, ...]
    num_gpus: int
    bottleneck: str
    oom: str = ""                     # which stage/GPU overflows, when fits is False
    train_time_s: float | None = None
    train_cost_usd: float | None = None
    notes: tuple[str, ...] = field(default=())
    engine: str = "hetplan"           # the engine whose execution the estimate predicts (planner.engines)
    power_w: float = 0.0              # board power of the GPUs used (planner.energy)
    energy_per_million_tokens_kwh: float = 0.0
    train_energy_kwh: float | None = None
    train_co2_kg: float | None = None  # None: tokens to train, or a used pool's grid intensity, not given
    # spot pools (planner.spot): the share of time the plan runs, and its figures counting the waits;
    # 1.0 and None when the plan uses no spot pool (the train figures also None without tokens to train)
    availability: float = 1.0
    expected_tokens_per_s: float | None = None
    expected_cost_per_million_tokens_usd: float | None = None
    expected_train_time_s: float | None = None
    expected_train_cost_usd: float | None = None
    timeline: object = field(default=None, compare=False, repr=False)  # pandas DataFrame when asked for

    @property
    def peak_memory_bytes(self) -> float:
        return max(r.memory.total_bytes for r in self.replicas)
