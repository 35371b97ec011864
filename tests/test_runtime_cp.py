"""Context parallelism in the runtime: a plan whose replicas span tp x cp GPUs, the sequence cut into
2 cp chunks (rank k holding chunks k and 2 cp - 1 - k), keys and values all-gathered over the
context-parallel group, gives the losses and gradients of one process running the whole sequence.

Tolerance as tests/runtime_helpers.py: float64, 1e-9 absolute on losses and relative on gradients (only
the order of the sums differs). The plans are 4-layer variants of catalog models on single-node-8's
8 GPUs, kept small so that the two distributed runs take about half a minute on two CPU cores: the
8-process run without recomputation (torch.utils.checkpoint's first call imports torch._dynamo,
seconds of CPU in every process), the 4-process one with full recomputation, whose backward pass
gathers keys and values again.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'run' extra: pip install torch")

from planner.runtime.parallel import load_balanced_positions  # noqa: E402
from planner.runtime.ranks import cp_group_ranks, rank_layout, tp_group_ranks  # noqa: E402
from planner.runtime.tiny import scaled_config  # noqa: E402
from planner.types import Plan, Recompute, Replica, Stage  # noqa: E402
from tests.runtime_helpers import check_against_one_process, single_node_8, small_plan  # noqa: E402

pytestmark = pytest.mark.torch


def _two_stage_plan(catalog) -> Plan:
    """GPT-3 family (learned positions, tied embeddings across the pipeline), cp 2: stage 0 one A100
    replica of tp 2 (4 GPUs), stage 1 two RTX 4090 replicas of tp 1 (2 GPUs each), 4:4 samples."""
    stages = (Stage(0, 2, (Replica("a100", 2, 8),)),
              Stage(2, 4, (Replica("rtx-4090", 1, 4), Replica("rtx-4090", 1, 4))))
    return small_plan(catalog, "gpt3-1.3b", stages, context_parallel=2)


def _check(cluster, plan: Plan):
    result = check_against_one_process(cluster, plan)
    assert all(p["cp_comm_s"] > 0 for p in result.per_rank), "every rank gathers keys and values"
    return result


def test_load_balanced_positions_cover_the_sequence_head_and_tail():
    cp, s = 4, 16
    parts = [load_balanced_positions(s, cp, k).tolist() for k in range(cp)]
    assert parts[0] == [0, 1, 14, 15] and parts[3] == [6, 7, 8, 9]
    assert sorted(sum(parts, [])) == list(range(s))


def test_rank_layout_tp_fastest_then_cp(catalog):
    plan = _two_stage_plan(catalog)
    layout = rank_layout(single_node_8(catalog), plan)
    assert len(layout) == plan.num_gpus == 8
    a100 = sorted((i for i in layout if i.stage == 0), key=lambda i: i.local_gpu)
    assert [(i.cp_rank, i.tp_rank) for i in a100] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(i.tp == 2 and i.cp == 2 for i in a100)
    tp_groups, cp_groups = tp_group_ranks(layout), cp_group_ranks(layout)
    assert sorted(len(g) for g in tp_groups.values()) == [1, 1, 1, 1, 2, 2]
    assert sorted(len(g) for g in cp_groups.values()) == [2, 2, 2, 2]
    # every GPU in exactly one tensor-parallel and one context-parallel group
    assert sorted(r for g in tp_groups.values() for r in g) == list(range(8))
    assert sorted(r for g in cp_groups.values() for r in g) == list(range(8))


def test_scaled_sequence_splits_into_2cp_chunks(catalog):
    plan = replace(_two_stage_plan(catalog), context_parallel=4,
                   stages=(Stage(0, 4, (Replica("a100", 1, 8),)),))
    cfg, notes = scaled_config(plan, seq_len=12)
    assert cfg.seq_len == 16 and any("rounded up to 16" in n for n in notes)


@pytest.mark.slow
def test_cp2_two_stages_mixed_tp_matches_one_process(catalog):
    """cp 2 across a pipeline whose stages differ in tp (2, then 1) and in replica count (1, then 2):
    each context-parallel rank passes its own chunks to the matching rank of the next stage."""
    _check(single_node_8(catalog), _two_stage_plan(catalog))


@pytest.mark.slow
def test_cp4_one_stage_rope_gqa_full_recompute_matches_one_process(catalog):
    """cp 4 on one stage of 4 A100s, Llama family (RoPE at global positions, grouped-query attention,
    SwiGLU, untied head), full recomputation: the all-gather runs again in the backward pass."""
    plan = small_plan(catalog, "llama-2-70b", (Stage(0, 2, (Replica("a100", 1, 4),)),), layers=2, global_batch=4,
                      recompute=Recompute.FULL, context_parallel=4)
    _check(single_node_8(catalog), plan)
