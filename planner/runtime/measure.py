"""The measurement file a local run writes (format hetplan.measurements/1), from its meters.

One record per process: which GPU of the plan it played (catalog GPU id, tp degree, layers,
whether it holds the head; under context parallelism its cp rank, on 1/cp of each sequence) and its
mean times per micro-batch, cp_comm_s the key / value all-gather's share (forward and backward).
`hetplan calibrate` reads the same format from any source; docs/calibration.md describes it.
"""
from __future__ import annotations

import platform

MEASUREMENTS_FORMAT = "hetplan.measurements/1"


def measurement_dict(plan, result, device: str = "cpu", backend: str = "gloo") -> dict:
    """`result`: a `launch.RunResult`; times are means over all iterations, first included."""
    records = []
    for info, res in zip(result.layout, result.per_rank):
        meter, its = res["meter"], max(1, len(res["meter"]["iteration_s"]))
        fwd_n, bwd_n = max(1, meter["forwards"]), max(1, meter["backwards"])
        stage = plan.stages[info.stage]
        records.append({
            "rank": info.rank, "stage": info.stage, "replica": info.replica, "tp_rank": info.tp_rank,
            "tp": info.tp, "cp_rank": info.cp_rank, "cp": info.cp, "pool": info.pool, "gpu": info.gpu,
            "layers": stage.num_layers,
            "has_head": info.stage == plan.num_stages - 1,
            "forward_s": meter["forward_s"] / fwd_n, "backward_s": meter["backward_s"] / bwd_n,
            "tp_comm_s": res["tp_comm_s"] / fwd_n,
            "cp_comm_s": res.get("cp_comm_s", 0.0) / fwd_n,
            "p2p_wait_s_per_iteration": meter["p2p_wait_s"] / its,
            "dp_sync_s_per_iteration": meter["dp_sync_s"] / its,
            "iteration_s": sum(meter["iteration_s"]) / its,
        })
    return {"format": MEASUREMENTS_FORMAT, "source": "hetplan run-local", "device": device, "backend": backend,
            "host": platform.node(), "model": {"id": f"{plan.model.id}-scaled", **result.cfg.to_dict()},
            "seq_len": result.cfg.seq_len, "micro_batch": plan.micro_batch, "recompute": plan.recompute.value,
            "job": plan.training.kind.value, "lora_rank": plan.training.lora_rank if plan.training.adapters else None,
            "sequence_parallel": False, "context_parallel": plan.context_parallel, "flash_attention": False,
            "iterations": len(result.losses),
            "notes": list(result.notes), "records": records}


def stage_summary(measurements: dict) -> list[dict]:
    """Per stage: mean forward / backward per micro-batch and worst waits, over its processes."""
    by_stage: dict[int, list[dict]] = {}
    for r in measurements["records"]:
        by_stage.setdefault(r["stage"], []).append(r)
    out = []
    for i in sorted(by_stage):
        rows = by_stage[i]
        out.append({"stage": i, "processes": len(rows),
                    "forward_s": sum(r["forward_s"] for r in rows) / len(rows),
                    "backward_s": sum(r["backward_s"] for r in rows) / len(rows),
                    "tp_comm_s": max(r["tp_comm_s"] for r in rows),
                    "p2p_wait_s": max(r["p2p_wait_s_per_iteration"] for r in rows),
                    "dp_sync_s": max(r["dp_sync_s_per_iteration"] for r in rows)})
    return out
