"""Shared set-up for the runtime tests (PyTorch needed: import after pytest.importorskip("torch")):
the 8-GPU example cluster, small variants of catalog models, and the check against one process.

Tolerance: float64 runs, |loss difference| <= 1e-9 and max |gradient difference| <= 1e-9 times the
largest gradient (measured: ~2e-15 and ~1e-15; the sums run in a different order only).
"""
from __future__ import annotations

from dataclasses import replace

from catalog.formats import load_cluster_file
from planner.runtime.launch import RunResult, compare, run_local, run_reference
from planner.types import Cluster, Plan, Precision, Stage
from tests.conftest import EXAMPLES

TOL = 1e-9


def single_node_8(catalog) -> Cluster:
    """4 A100s and 4 RTX 4090s (examples/single-node-8.yaml)."""
    return load_cluster_file(EXAMPLES / "single-node-8.yaml", catalog)


def small_plan(catalog, model_id: str, stages: tuple[Stage, ...], layers: int = 4, **fields) -> Plan:
    """A `layers`-layer variant of a catalog model on `stages`: global batch 8 in micro-batches of 2,
    sequence 4096 (the runtime scales it down), bf16 unless `fields` say otherwise."""
    model = replace(catalog.model(model_id), layers=layers)
    plan = dict(global_batch=8, seq_len=4096, micro_batch=2, precision=Precision.BF16) | fields
    return Plan(model=model, stages=stages, **plan)


def check_against_one_process(cluster: Cluster, plan: Plan, iterations: int = 2) -> RunResult:
    """Run `plan` distributed and in one process; the losses and gradients agree to TOL."""
    result = run_local(cluster, plan, iterations=iterations, dtype="float64", timeout_s=120)
    losses, grads = run_reference(plan, result.cfg, iterations, dtype="float64")
    cmp = compare(result, losses, grads)
    assert not cmp.missing, cmp.missing
    assert cmp.max_loss_diff <= TOL, cmp
    assert cmp.max_grad_rel_diff <= TOL, cmp
    assert len(result.per_rank) == plan.num_gpus
    return result
