"""Adapter jobs in the runtime (planner.runtime.lora): LoRA and QLoRA plans executed with
torch.distributed give the losses and adapter gradients of one process running the same model.

Tolerance as tests/runtime_helpers.py: float64, 1e-9 absolute on losses and relative on gradients
(measured ~2e-15: only the order of the sums differs). The plans are 4-layer variants of catalog
models, tp 2 beside tp 1 in one stage, two stages and two replicas, no recompute: kept small so
that the two distributed runs take about 30 s each on two CPU cores.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional 'run' extra: pip install torch")

from planner.runtime.launch import reference_model, run_local, train_reference  # noqa: E402
from planner.runtime.lora import NF4_BLOCK, NF4_LEVELS, Nf4Weight, is_adapter, nf4_quantize  # noqa: E402
from planner.runtime.tiny import scaled_config  # noqa: E402
from planner.training import adapter_params  # noqa: E402
from planner.types import InputError, JobKind, Offload, Plan, Replica, Stage, Training  # noqa: E402
from tests.runtime_helpers import check_against_one_process, single_node_8, small_plan  # noqa: E402

pytestmark = pytest.mark.torch
RANK = 4


def _plan(catalog, model_id: str, kind: JobKind) -> Plan:
    """Two stages of two layers on single-node-8, each a tp-2 replica beside a tp-1 one, 4:4 samples."""
    stages = (Stage(0, 2, (Replica("a100", 2, 4), Replica("rtx-4090", 1, 4))),
              Stage(2, 4, (Replica("rtx-4090", 2, 4), Replica("a100", 1, 4))))
    return small_plan(catalog, model_id, stages, training=Training(kind, RANK))


def _check(catalog, plan: Plan):
    result = check_against_one_process(single_node_8(catalog), plan)
    grads = result.grads
    assert grads and all(is_adapter(name) for name in grads), sorted(grads)
    # B starts at zero, so A's first gradient is zero; the second iteration's must not be
    assert all(abs(g).max() > 0 for name, g in grads.items()), [n for n, g in grads.items() if not abs(g).any()]
    return result


@pytest.mark.slow
def test_lora_plan_matches_one_process(catalog):
    """GPT-3 family: biases (frozen), learned positions, tied embeddings across the pipeline (frozen)."""
    _check(catalog, _plan(catalog, "gpt3-1.3b", JobKind.LORA))


@pytest.mark.slow
def test_qlora_plan_matches_one_process(catalog):
    """Llama family: SwiGLU (gate, up, down adapters), grouped-query attention, NF4 base weights sliced
    by rows (column-parallel) and by columns (row-parallel)."""
    _check(catalog, _plan(catalog, "llama-2-70b", JobKind.QLORA))


@pytest.mark.parametrize("kind", [JobKind.LORA, JobKind.QLORA])
def test_base_is_frozen_and_adapters_train(catalog, kind):
    plan = _plan(catalog, "llama-2-70b", kind)
    cfg, _ = scaled_config(plan)
    model = reference_model(plan, cfg, dtype="float64")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_reference(model, plan, cfg, iterations=3)
    after = model.state_dict()
    frozen = [k for k in before if not is_adapter(k)]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    assert all(not torch.equal(before[k], after[k]) for k in before if is_adapter(k))
    assert all(p.grad is None for name, p in model.named_parameters() if not is_adapter(name))
    if kind == JobKind.QLORA:      # the base is stored as 4-bit codes, not as weights
        assert not any(k.endswith("q.weight") or k.endswith("up.weight") for k in before)
        assert any(v.dtype == torch.uint8 for v in before.values())


@pytest.mark.parametrize("model_id", ["gpt3-1.3b", "llama-2-70b"])
def test_adapter_count_is_the_cost_models(catalog, model_id):
    """planner.training.adapter_params of a model of the scaled shape counts the runtime's adapters."""
    plan = _plan(catalog, model_id, JobKind.LORA)
    cfg, _ = scaled_config(plan)
    model = reference_model(plan, cfg)
    counted = sum(p.numel() for _, p in model.global_parameters())
    shape = replace(plan.model, hidden=cfg.hidden, heads=cfg.heads, kv_heads=cfg.kv_heads, ffn=cfg.ffn,
                    attention_head_dim=0)
    assert counted == adapter_params(shape, RANK)


def test_full_finetune_trains_every_weight_as_pretraining(catalog):
    pretrain = _plan(catalog, "gpt3-1.3b", JobKind.PRETRAIN)
    cfg, _ = scaled_config(pretrain)
    full = reference_model(replace(pretrain, training=Training(JobKind.FULL_FINETUNE)), cfg)
    names = [n for n, _ in full.global_parameters()]
    assert names == [n for n, _ in reference_model(pretrain, cfg).global_parameters()]
    assert not any(is_adapter(n) for n in names)


def test_offload_is_refused(catalog):
    plan = replace(_plan(catalog, "gpt3-1.3b", JobKind.LORA), zero_stage=1, offload=Offload.OPTIMIZER)
    with pytest.raises(InputError, match="does not offload") as err:
        run_local(single_node_8(catalog), plan, iterations=1)
    assert err.value.field == "offload"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nf4_slices_equal_the_full_tensors_slices(dtype):
    """Each tensor-parallel rank's dequantised slice is the slice of the dequantised full tensor,
    when the shard boundaries cut through the 64-element blocks (rows of 24)."""
    full = torch.randn((16, 24), generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    whole = Nf4Weight(full, None, 0, 1)()
    for dim in (0, 1):
        for size in (2, 4):
            parts = [Nf4Weight(full, dim, rank, size)() for rank in range(size)]
            assert torch.equal(torch.cat(parts, dim=dim), whole)


def test_nf4_rounds_each_block_to_its_nearest_level():
    """Values on the levels times a block's absmax come back exactly; everything else within half the
    widest gap between levels (0.304, between -1 and -0.696) of its block's absmax."""
    levels = torch.tensor(NF4_LEVELS, dtype=torch.float64)
    per_block = NF4_BLOCK // len(NF4_LEVELS)
    exact = torch.stack([levels.repeat(per_block) * 3.0, levels.repeat(per_block) * 0.5])
    assert torch.equal(Nf4Weight(exact, None, 0, 1)(), exact)
    noisy = torch.randn((8, 40), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    codes, absmax = nf4_quantize(noisy)
    assert codes.dtype == torch.uint8 and int(codes.max()) <= 15 and absmax.numel() == 5
    blocks = (torch.arange(noisy.numel()) // NF4_BLOCK).view(noisy.shape)
    error = (Nf4Weight(noisy, None, 0, 1)() - noisy).abs() / absmax[blocks]
    assert float(error.max()) <= float((levels[1:] - levels[:-1]).max()) / 2 + 1e-12
