"""The capability matrix (engine x plan feature), built from the profiles so it cannot drift from them.

    python -m planner.engines.matrix      # prints the Markdown table that docs/exports.md holds
"""
from __future__ import annotations

from planner.engines import ENGINES
from planner.engines.base import Engine

YES, NO = "yes", "no"


def _flag(value: bool) -> str:
    return YES if value else NO


def _zero(stages: tuple[int, ...]) -> str:
    return ", ".join(str(z) for z in stages) or NO


FEATURES = (
    ("pipeline stages", lambda e: _flag(e.space.pipeline_parallel)),
    ("uneven layer split", lambda e: _flag(e.space.uneven_layers and e.space.pipeline_parallel)),
    ("tensor parallelism", lambda e: _flag(e.space.tensor_parallel)),
    ("tp per stage", lambda e: _flag(e.space.tp_per_stage or e.space.mixed_stages)),
    ("replicas per stage", lambda e: _flag(e.space.replicas_per_stage or e.space.mixed_stages)),
    ("mixed pools in a stage, uneven shares", lambda e: _flag(e.space.mixed_stages)),
    ("ZeRO stages, one stage", lambda e: _zero(e.space.zero_stages)),
    ("ZeRO stages with pipelining", lambda e: _zero(e.space.zero_stages_pipelined)),
    ("interleaved 1F1B", lambda e: _flag(e.space.interleave)),
    ("GPipe", lambda e: _flag(e.space.gpipe)),
    ("recompute", lambda e: ", ".join(r.value for r in e.space.recomputes)),
    ("sequence parallel", lambda e: _flag(e.space.sequence_parallel and e.space.tensor_parallel)),
    ("precisions", lambda e: ", ".join(p.value for p in e.space.precisions)),
    ("context parallelism", lambda e: _flag(e.space.context_parallel)),
    ("expert parallelism", lambda e: _flag(e.space.expert_parallel)),
    ("MoE / latent-attention models", lambda e: f"{_flag(e.space.mixture_of_experts)} / {_flag(e.space.latent_attention)}"),
    ("expert parallelism with tp > 1", lambda e: _flag(e.space.expert_parallel and e.space.expert_parallel_with_tp)),
    ("overlap switches (plan keys)", lambda e: "; ".join(
        f"`{sw.name}` ({sw.written_as}; ZeRO {_zero(sw.zero_stages)}{'' if sw.pipelined else ', one stage'})"
        for sw in e.space.switches) or NO),
    ("tp-communication overlap", lambda e: _flag(e.space.tp_comm_overlap)),
    ("hybrid sharding (`hybrid_shard`)", lambda e: _flag(e.space.hybrid_shard)),
    ("job kinds", lambda e: ", ".join(k.value for k in e.space.job_kinds)),
    ("LoRA limits", lambda e: ", ".join(x for x, ok in (("no recompute", e.space.adapters_with_recompute),
                                                         ("dense models", e.space.adapters_with_moe)) if not ok) or "-"),
    ("CPU offload (ZeRO stages)", lambda e: "; ".join(f"{o.value} ({_zero(z)})" for o, z in e.space.offloads) or NO),
    ("export targets", lambda e: ", ".join(f"`{t}`" for t in e.exports) or NO),
    ("version", lambda e: e.version.replace("|", "/")),
)


def rows(engines: list[Engine] | None = None) -> list[list[str]]:
    engines = list(ENGINES.values()) if engines is None else engines
    return [[name, *[get(e) for e in engines]] for name, get in FEATURES]


def markdown() -> str:
    engines = list(ENGINES.values())
    lines = ["| feature | " + " | ".join(e.title for e in engines) + " |",
             "| --- |" + " --- |" * len(engines)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(engines)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
