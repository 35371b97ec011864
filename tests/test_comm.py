"""Alpha-beta collectives (Thakur et al. 2005; NCCL tree: Sanders et al. 2009)."""
from __future__ import annotations

import pytest

from planner.comm import (LINK_EFFICIENCY, OVERLAP_COMPUTE_SLOWDOWN, all_gather_s, all_reduce_s, overlapped_s, p2p_s,
                          reduce_scatter_s)


def test_single_rank_costs_nothing():
    assert all_reduce_s(1e9, 1, 1e9, 1e-5) == all_gather_s(1e9, 1, 1e9, 1e-5) == 0.0


def test_large_all_reduce_is_bandwidth_bound_ring():
    n, p, bw = 1e9, 8, 100e9
    assert all_reduce_s(n, p, bw, 0.0) == pytest.approx(2 * (p - 1) / p * n / (bw * LINK_EFFICIENCY))


def test_small_all_reduce_over_many_ranks_takes_the_tree():
    n, p, bw, a = 1e3, 1024, 100e9, 5e-6
    ring = 2 * (p - 1) * a + 2 * (p - 1) / p * n / (bw * LINK_EFFICIENCY)
    assert all_reduce_s(n, p, bw, a) < ring / 50


def test_all_reduce_equals_reduce_scatter_plus_all_gather_for_rings():
    n, p, bw = 4e8, 16, 50e9
    assert all_reduce_s(n, p, bw, 0.0) == pytest.approx(reduce_scatter_s(n, p, bw, 0.0) + all_gather_s(n, p, bw, 0.0))


def test_p2p():
    assert p2p_s(1e6, 1e9, 1e-5) == pytest.approx(1e-5 + 1e6 / (1e9 * LINK_EFFICIENCY))


def test_hidden_communication_slows_the_compute_beside_it():
    # Lee et al. 2025 (arXiv 2507.03114): compute overlapped with communication 18.9% slower on average
    assert OVERLAP_COMPUTE_SLOWDOWN == 0.189
    assert overlapped_s(1.0, 0.0) == 1.0                                   # nothing to hide behind
    assert overlapped_s(1.0, 4.0) == pytest.approx(0.189)                  # all hidden, the compute slowed
    assert overlapped_s(1.0, 0.5) == pytest.approx(0.5 + 0.189 * 0.5)      # half hidden
    assert overlapped_s(0.0, 4.0) == 0.0
    # never above the collective alone, never below its exposed part
    for comm in (0.1, 1.0, 3.0):
        for window in (0.0, 0.5, 2.0):
            assert max(0.0, comm - window) <= overlapped_s(comm, window) <= comm


def test_zero_collectives_hide_behind_all_but_the_first_and_last_layer():
    # one layer prefetched (FSDP2's _backward_prefetch, one module ahead): a pass's first all-gather and
    # last reduce-scatter have no compute beside them; the rest is hidden, slowing the compute beside it
    from planner.dataparallel import exposed_grad_sync_s, zero_exposed_s, zero_window_s
    assert zero_window_s(8.0, 8, 1.0) == pytest.approx(7.0)
    assert zero_window_s(8.0, None, 0.5) == pytest.approx(4.0)
    assert zero_window_s(8.0, 1, 1.0) == 0.0                      # one layer: nothing beside its gather
    assert zero_exposed_s(1.0, 8.0, 1.0, 8) == pytest.approx(OVERLAP_COMPUTE_SLOWDOWN)   # all hidden
    assert zero_exposed_s(8.0, 8.0, 1.0, 8) == pytest.approx(1.0 + OVERLAP_COMPUTE_SLOWDOWN * 7.0)
    assert exposed_grad_sync_s(2.0, 0.0) == 2.0                   # not overlapped: all of it
    assert exposed_grad_sync_s(2.0, 1.0) == pytest.approx(1.0 + OVERLAP_COMPUTE_SLOWDOWN)
