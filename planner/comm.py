"""Collective and point-to-point communication times, alpha-beta model.

A message of n bytes over a link of bandwidth B (bytes/s, one direction) and latency alpha
costs alpha + n / B (Hockney 1994). Ring collectives over p ranks follow Thakur, Rabenseifner
and Gropp, "Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005):

    all-reduce      2 (p - 1) alpha + 2 (p - 1) / p * n / B
    all-gather        (p - 1) alpha +   (p - 1) / p * n / B     (n: the gathered size)
    reduce-scatter    (p - 1) alpha +   (p - 1) / p * n / B     (n: the input size)

All-reduce may also run as NCCL's double binary tree (Sanders, Speck and Traeff, "Two-tree
algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009):

    all-reduce tree 2 ceil(log2 p) alpha + 2 n / B

and, as NCCL's tuner does, the faster of the two is taken: the tree wins for small messages
over many ranks, the ring for large ones. These are NCCL's "bus bandwidth" relations (NVIDIA nccl-tests, doc/PERFORMANCE.md). B is the
achievable bandwidth: the link's nominal figure times LINK_EFFICIENCY.
"""
from __future__ import annotations

import math

from planner.elementwise import maximum

# nccl-tests all-reduce bus bandwidth reaches about 80% of nominal NVLink/InfiniBand figures on
# large messages (e.g. ~230 of 300 GB/s on DGX A100 NVLink3; NVIDIA nccl-tests PERFORMANCE.md,
# DGX A100 user guide). One constant for every link kind.
LINK_EFFICIENCY = 0.8

# Per-hop latency of a collective step: ~5 us for NVLink/PCIe inside a node and for InfiniBand
# or RoCE across nodes (NCCL's base latencies are microseconds per step).
INTRA_NODE_LATENCY_S = 5e-6

# Compute that runs beside a collective is slowed by it (NCCL's kernels take SMs and memory bandwidth
# from the GEMMs): measured on A100, H100, MI250 and MI210 over GPT and Llama layers, an average
# "computational slowdown of 18.9%, with a maximum of 40.0%" of the compute overlapped with
# communication, against the same compute alone (Lee et al. 2025, "Characterizing Compute-Communication
# Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114, abstract). The average is taken.
OVERLAP_COMPUTE_SLOWDOWN = 0.189


def overlapped_s(comm_s, window_s):
    """What `comm_s` seconds of communication cost beside `window_s` seconds of compute they may hide
    behind: the part beyond the window, plus the slowdown of the compute that shares the GPU with the
    hidden part (OVERLAP_COMPUTE_SLOWDOWN of it). Never more than comm_s, never below its exposed part.
    Numbers or numpy arrays."""
    exposed = maximum(0.0, comm_s - window_s)
    return exposed + OVERLAP_COMPUTE_SLOWDOWN * (comm_s - exposed)


def activation_message_bytes(act_bytes, seq_len, micro_batch, hidden):
    """One micro-batch's s x b x h activation (or its gradient): what a stage sends the next one and
    what a tensor-parallel collective moves. `act_bytes` per element (planner.numerics; the search's
    bounds take compute.ACT_BYTES, the least of any precision, so their transfers stay below).
    Numbers or numpy arrays."""
    return act_bytes * seq_len * micro_batch * hidden


def p2p_s(num_bytes: float, bw_bytes_per_s: float, latency_s: float) -> float:
    return latency_s + num_bytes / (bw_bytes_per_s * LINK_EFFICIENCY)


def all_reduce_s(num_bytes: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    p, n, B = ranks, num_bytes, bw_bytes_per_s * LINK_EFFICIENCY
    ring = 2 * (p - 1) * latency_s + 2 * (p - 1) / p * n / B
    tree = 2 * math.ceil(math.log2(p)) * latency_s + 2 * n / B
    return min(ring, tree)


def all_gather_s(num_bytes: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    return (ranks - 1) * latency_s + num_bytes * ring_s_per_byte(ranks, bw_bytes_per_s)


def ring_s_per_byte(ranks, bw_bytes_per_s):
    """The bandwidth term of a ring all-gather or reduce-scatter, seconds per byte of n:
    (p - 1) / p / B. Without its latency term it is a lower bound on either collective, which the
    search's bounds use (numbers or numpy arrays)."""
    return (ranks - 1) / ranks / (bw_bytes_per_s * LINK_EFFICIENCY)


reduce_scatter_s = all_gather_s


def all_to_all_s(num_bytes: float, ranks: int, bw_bytes_per_s: float, latency_s: float) -> float:
    """Each of `ranks` GPUs holds `num_bytes` and keeps 1/ranks of them, sending the rest to the
    others pairwise (NCCL's all-to-all: p - 1 sends of n / p each)."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    return (ranks - 1) * latency_s + num_bytes * ring_s_per_byte(ranks, bw_bytes_per_s)
