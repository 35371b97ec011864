"""A plan executed with torch.distributed (gloo, one process per planned GPU) gives the losses and
gradients of one process running the same scaled-down model on the same data.

Tolerance: float64 runs, |loss difference| <= 1e-9 and max |gradient difference| <= 1e-9 times the
largest gradient (measured: ~2e-15 and ~1e-15; the sums run in a different order only).
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'run' extra: pip install torch")

from catalog.formats import load_cluster_file, load_plan_file, plan_from_dict  # noqa: E402
from planner.runtime.launch import compare, run_local, run_reference  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOL = 1e-9


def _check(cluster, plan, iterations=2):
    result = run_local(cluster, plan, iterations=iterations, dtype="float64", timeout_s=120)
    losses, grads = run_reference(plan, result.cfg, iterations, dtype="float64")
    cmp = compare(result, losses, grads)
    assert not cmp.missing, cmp.missing
    assert cmp.max_loss_diff <= TOL, cmp
    assert cmp.max_grad_rel_diff <= TOL, cmp
    assert len(result.per_rank) == plan.num_gpus
    return result


def test_single_node_8_example_matches_one_process(catalog):
    """Uneven layers (9/8/7), replicas of different tp in one stage (tp 2 + tp 1, 40:24 samples),
    three replicas sharing 24/20/20, a tp-2 last stage, tied embeddings across the pipeline."""
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    result = _check(cluster, plan)
    measured = {(p["meter"]["forwards"], p["meter"]["backwards"]) for p in result.per_rank}
    assert all(f == b and f > 0 for f, b in measured)


def test_interleaved_gqa_swiglu_recompute_matches_one_process(catalog):
    """Llama family (SwiGLU, RMSNorm, RoPE, grouped-query attention, untied head), interleave 2,
    full recompute, tp 2 in the last stage."""
    cluster = load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)
    plan = plan_from_dict({"model": "llama-2-70b", "global_batch": 8, "seq_len": 4096, "micro_batch": 2,
                           "precision": "bf16", "recompute": "full", "interleave": 2,
                           "stages": [{"layers": [0, 40], "replicas": [{"pool": "rtx-4090", "tp": 1}]},
                                      {"layers": [40, 80], "replicas": [{"pool": "a100", "tp": 2}]}]}, catalog)
    _check(cluster, plan)
