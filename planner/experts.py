"""Expert parallelism: routed experts sharded over `expert_parallel` of a stage's data-parallel
replicas (Megatron-LM's --expert-model-parallel-size; no more GPUs), each MoE layer sending every
token to the ranks of its top_k experts and back (the dispatch and combine all-to-alls; Lepikhin et
al. 2020, GShard, section 2.2; Megatron-LM's alltoall token dispatcher).

Per MoE layer and micro-batch each GPU sends its s b / (cp tp) tokens, top_k copies of h elements
each, in the forward's dispatch and combine, and their gradients in the backward (a full
recomputation dispatches again). Routing is not even: the busiest rank receives more than the
mean, which its all-to-alls and its experts' GEMMs carry (MOE_LOAD_IMBALANCE).
"""
from __future__ import annotations

from planner.comm import all_to_all_s
from planner.numerics import numerics
from planner.types import Model, Precision, Recompute

# The busiest expert-parallel rank's tokens over the mean, routing with an auxiliary load-balancing loss
# (Fedus et al. 2022, Switch Transformer, section 2.2, and Megatron-LM's aux-loss router). An UNSOURCED
# ASSUMPTION, not fitted: no measurement in ../shared/reference sets it, and none of a rank's share was
# found in print; the routing papers measure experts, not ranks (Wang et al. 2024, arXiv:2408.15664,
# "MaxVio": the busiest expert's load over the mean, minus one, per batch; a rank holds experts / ep of
# them, whose sum varies less). MoE plans with expert parallelism say so in their notes. Token dropping
# with a capacity factor below it would cap it there.
MOE_LOAD_IMBALANCE = 1.1


def expert_load(expert_parallel: int) -> float:
    """How much more than the mean token load the busiest rank's experts carry."""
    return MOE_LOAD_IMBALANCE if expert_parallel > 1 else 1.0


def dispatch_bytes(model: Model, seq_len: int, micro_batch: int, tp: int, cp: int = 1,
                   precision: Precision | None = None) -> float:
    """Bytes one GPU sends in one MoE layer's dispatch (or combine) for one micro-batch."""
    tokens = seq_len * micro_batch / cp / tp
    return numerics(precision).act_bytes * tokens * model.top_k * model.hidden


def alltoall_s(model: Model, num_layers: int, seq_len: int, micro_batch: int, tp: int, cp: int,
               expert_parallel: int, bw: float, latency_s: float, recompute: Recompute,
               precision: Precision | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of a stage's expert all-to-alls for one micro-batch on one GPU,
    over the expert-parallel group's links (`bw`, `latency_s`: the stage's data-parallel ring's,
    of which the group is a part); not overlapped with compute."""
    if expert_parallel == 1 or not model.is_moe:
        return 0.0, 0.0
    moe_layers = num_layers * model.moe_layers / model.layers
    size = dispatch_bytes(model, seq_len, micro_batch, tp, cp, precision) * expert_load(expert_parallel)
    one = all_to_all_s(size, expert_parallel, bw, latency_s)
    forward = moe_layers * 2 * one
    backward = moe_layers * 2 * one + (forward if recompute == Recompute.FULL else 0.0)
    return forward, backward
