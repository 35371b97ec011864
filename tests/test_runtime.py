"""A plan executed with torch.distributed (gloo, one process per planned GPU) gives the losses and
gradients of one process running the same scaled-down model on the same data (tolerance: see
tests/runtime_helpers.py).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'run' extra: pip install torch")

from catalog.formats import load_plan_file, plan_from_dict  # noqa: E402
from tests.conftest import EXAMPLES  # noqa: E402
from tests.runtime_helpers import check_against_one_process, single_node_8  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def test_single_node_8_example_matches_one_process(catalog):
    """Uneven layers (9/8/7), replicas of different tp in one stage (tp 2 + tp 1, 40:24 samples),
    three replicas sharing 24/20/20, a tp-2 last stage, tied embeddings across the pipeline."""
    cluster = single_node_8(catalog)
    plan = load_plan_file(EXAMPLES / "plans" / "single-node-8-small.json", catalog)
    result = check_against_one_process(cluster, plan)
    measured = {(p["meter"]["forwards"], p["meter"]["backwards"]) for p in result.per_rank}
    assert all(f == b and f > 0 for f, b in measured)


def test_interleaved_gqa_swiglu_recompute_matches_one_process(catalog):
    """Llama family (SwiGLU, RMSNorm, RoPE, grouped-query attention, untied head), interleave 2,
    full recompute, tp 2 in the last stage."""
    cluster = single_node_8(catalog)
    plan = plan_from_dict({"model": "llama-2-70b", "global_batch": 8, "seq_len": 4096, "micro_batch": 2,
                           "precision": "bf16", "recompute": "full", "interleave": 2,
                           "stages": [{"layers": [0, 40], "replicas": [{"pool": "rtx-4090", "tp": 1}]},
                                      {"layers": [40, 80], "replicas": [{"pool": "a100", "tp": 2}]}]}, catalog)
    check_against_one_process(cluster, plan)
