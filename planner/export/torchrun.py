"""torchrun launch script, hostfile and rank map for hetplan's own runtime (every plan).

The launcher only places processes, so every plan is expressible. Hosts are named
`<pool>-<node>` (replace them with real host names); each runs as many processes as the plan
places on it. The script starts torchrun agents with a static rendezvous and fixed node ranks
(planner.export.launch, which cites torch/distributed/run.py), so RANK is the `rank` of
rank_map.json on every host: a training script may find its stage, replica and tensor-parallel
rank by RANK (or by host and LOCAL_RANK, which give the same row).
The hostfile uses DeepSpeed/MPI's `host slots=N` lines.
The job travels with the launch: launch.sh exports HETPLAN_JOB, a JSON object with the plan file's own
`job` and `offload` keys (catalog/formats.py plan_to_dict): {"job": {"kind": "lora", "lora_rank": 16},
"offload": "none"}, so the training script knows which weights it trains, from which checkpoint
(CHECKPOINT, required by launch.sh for every job but pretraining), and what it keeps in CPU memory.
"""
from __future__ import annotations

import json

from planner.export import launch
from planner.export.common import checkpoint_preamble, from_checkpoint
from planner.runtime.ranks import rank_layout
from planner.types import Cluster, Plan

FILES = ("launch.sh", "hostfile", "rank_map.json")     # every file `export` may write


def export(plan: Plan, cluster: Cluster):
    layout = rank_layout(cluster, plan)
    agents = launch.units([(f"{i.pool}-{i.node}", i.local_gpu) for i in layout])
    local = {u.first_rank + k: k for u in agents for k in range(len(u.gpus))}
    rank_map = [{"rank": i.rank, "host": f"{i.pool}-{i.node}", "local_rank": local[i.rank], "gpu": i.local_gpu,
                 "stage": i.stage, "replica": i.replica, "tp_rank": i.tp_rank, "tp": i.tp, "cp_rank": i.cp_rank,
                 "cp": i.cp, "gpu_type": i.gpu}
                for i in layout]
    preamble = ['TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"   # reads rank_map.json to learn its role',
                *(checkpoint_preamble("the checkpoint the job starts from") if from_checkpoint(plan) else [])]
    files = {"launch.sh": launch.script(agents, ['"$TRAIN_SCRIPT"', "--rank-map", "rank_map.json"],
                                        "torchrun launch written by `hetplan export --to torchrun`",
                                        {"HETPLAN_JOB": json.dumps(job_entry(plan))}, preamble),
             "hostfile": launch.hostfile(agents),
             "rank_map.json": json.dumps(rank_map, indent=1) + "\n"}
    return files, []


def job_entry(plan: Plan) -> dict:
    """The plan file's `job` and `offload` (catalog/formats.py writes them the same way)."""
    job = {"kind": plan.training.kind.value}
    if plan.training.adapters:
        job["lora_rank"] = plan.training.lora_rank
    return {"job": job, "offload": plan.offload.value}


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []
