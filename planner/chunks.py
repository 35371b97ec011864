"""Which transformer layers each pipeline stage runs, per virtual stage (model chunk).

hetplan's convention for interleaving (v = plan.interleave > 1): the model's layers are cut into
v rounds of equal length L / v; in round c, stage i runs n_i / v consecutive layers, the stages
taking their turns in stage order. With v = 1 this is the stage's own [layer_start, layer_end).
This is the order of Megatron-LM's interleaved schedule (model chunk c of rank i holds the
c-th group of its layers; Narayanan et al. 2021, section 2.2), generalised to unequal stages.
"""
from __future__ import annotations

from planner.types import Plan


def chunk_layers(plan: Plan) -> list[list[tuple[int, int]]]:
    """[stage][chunk] -> (first layer, end layer) of that model chunk."""
    v = plan.interleave
    per_round = [s.num_layers // v for s in plan.stages]
    out: list[list[tuple[int, int]]] = [[] for _ in plan.stages]
    start = 0
    for _ in range(v):
        for i, n in enumerate(per_round):
            out[i].append((start, start + n))
            start += n
    assert start == plan.model.layers, (start, plan.model.layers)
    return out


def pipeline_order(plan: Plan) -> list[tuple[int, int, int, int]]:
    """(stage, chunk, first layer, end layer) in the order activations flow through the model."""
    chunks = chunk_layers(plan)
    return [(i, c, *chunks[i][c]) for c in range(plan.interleave) for i in range(plan.num_stages)]
