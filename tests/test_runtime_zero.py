"""ZeRO in the runtime (planner.runtime.worker): a plan run with ZeRO stage 1, 2 or 3 gives the losses
and gradients of its ZeRO-0 run and of one process, and each rank keeps only its share of the model
states: Adam's moments and a master copy of its shard of the stage (1 / (tp x dp x cp) of it), from
ZeRO-2 no other gradient, from ZeRO-3 no other weights between iterations.

Tolerance as tests/runtime_helpers.py (float64, 1e-9). The plan mixes what the shards must cope with:
context parallelism 2, a tp-2 A100 replica beside a tp-1 RTX 4090 replica in stage 0 with 6:2 samples,
one replica in stage 1, tied embeddings across the pipeline (GPT-3 family); 3 iterations, so the
second step reads the moments the first wrote. 8 processes, about 30 s a run on two CPU cores.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'run' extra: pip install torch")

from planner.runtime.optim import AdamState  # noqa: E402
from planner.runtime.ranks import rank_layout, zero_shard_bounds  # noqa: E402
from planner.types import Replica, Stage  # noqa: E402
from tests.runtime_helpers import TOL, check_against_one_process, single_node_8, small_plan  # noqa: E402

pytestmark = pytest.mark.torch
ITERATIONS = 3


def _plan(catalog, zero_stage: int = 0):
    stages = (Stage(0, 2, (Replica("a100", 2, 6), Replica("rtx-4090", 1, 2))),
              Stage(2, 4, (Replica("rtx-4090", 1, 8),)))
    return small_plan(catalog, "gpt3-1.3b", stages, context_parallel=2, zero_stage=zero_stage)


def test_shards_tile_each_stage_in_shares_of_one_over_tp_dp_cp(catalog):
    plan = _plan(catalog, 1)
    layout = rank_layout(single_node_8(catalog), plan)
    for stage, numel in ((0, 1_000_003), (1, 999)):
        bounds = zero_shard_bounds(layout, stage, numel)
        members = [x for x in layout if x.stage == stage]
        assert sorted(bounds) == sorted(x.rank for x in members)
        spans = sorted(bounds.values())
        assert spans[0][0] == 0 and spans[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))          # contiguous, no overlap
        d = len(plan.stages[stage].replicas) * plan.context_parallel
        for x in members:
            lo, hi = bounds[x.rank]
            assert abs((hi - lo) - numel / (x.tp * d)) < 1


def test_adam_steps_as_torch_adam():
    """The runtime's elementwise Adam against torch.optim.Adam (defaults but lr) over three steps."""
    g = torch.Generator().manual_seed(3)
    mine = torch.randn(64, dtype=torch.float64, generator=g)
    theirs = mine.clone().requires_grad_()
    state, adam = AdamState(mine), torch.optim.Adam([theirs], lr=1e-3)
    for _ in range(3):
        grad = torch.randn(64, dtype=torch.float64, generator=g)
        state.step(mine, grad, 1e-3)
        theirs.grad = grad.clone()
        adam.step()
    assert torch.allclose(mine, theirs.detach(), rtol=0, atol=1e-15)


@pytest.fixture(scope="module")
def zero0(catalog):
    return check_against_one_process(single_node_8(catalog), _plan(catalog, 0), ITERATIONS)


def _check_held(result, zero: int) -> None:
    """What each rank keeps at the end of the run (after the last gradient sync), against its shard."""
    for stage in (0, 1):
        ranks = [(x, r["held"]) for x, r in zip(result.layout, result.per_rank) if x.stage == stage]
        numel = ranks[0][1]["stage_params"]
        bounds = zero_shard_bounds(list(result.layout), stage, numel)
        for x, held in ranks:
            shard = bounds[x.rank][1] - bounds[x.rank][0]
            if zero == 0:
                assert held["adam_moments"] == 2 * held["params"] == 2 * held["grads"] > 0, held
                assert held["master_params"] == 0, held
                continue
            assert held["master_params"] == shard and held["adam_moments"] == 2 * shard, (x, held)
            assert 0 < shard <= numel / 2, (x, held)       # every stage has dp x cp >= 2 ranks: a part, not a copy
            if zero == 1:
                assert held["grads"] == held["params"] + shard, held
            if zero >= 2:
                assert held["grads"] == shard, held
            if zero == 3:
                assert held["params"] == 0, held
        assert sum(h["master_params"] for _, h in ranks) == (numel if zero else 0)


@pytest.mark.slow
def test_zero0_keeps_whole_states_on_every_rank(zero0):
    _check_held(zero0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_matches_zero0_and_one_process(catalog, zero0, zero):
    result = check_against_one_process(single_node_8(catalog), _plan(catalog, zero), ITERATIONS)
    assert max(abs(a - b) for a, b in zip(result.losses, zero0.losses)) <= TOL
    largest = max(float(abs(g).max()) for g in zero0.grads.values())
    assert sorted(result.grads) == sorted(zero0.grads)
    assert max(float(abs(result.grads[k] - g).max()) for k, g in zero0.grads.items()) <= TOL * largest
    _check_held(result, zero)
