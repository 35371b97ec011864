"""torchrun launch script, hostfile and rank map for hetplan's own runtime (every plan).

The launcher only places processes, so every plan is expressible. Hosts are named
`<pool>-<node>` (replace them with real host names); each runs as many processes as the plan
places on it. The script starts torchrun agents with a static rendezvous and fixed node ranks
(planner.export.launch, which cites torch/distributed/run.py), so RANK is the `rank` of
rank_map.json on every host: a training script may find its stage, replica and tensor-parallel
rank by RANK (or by host and LOCAL_RANK, which give the same row).
The hostfile uses DeepSpeed/MPI's `host slots=N` lines.
"""
from __future__ import annotations

import json

from planner.export import launch
from planner.runtime.ranks import rank_layout
from planner.types import Cluster, Plan


def export(plan: Plan, cluster: Cluster):
    layout = rank_layout(cluster, plan)
    agents = launch.units([(f"{i.pool}-{i.node}", i.local_gpu) for i in layout])
    local = {u.first_rank + k: k for u in agents for k in range(len(u.gpus))}
    rank_map = [{"rank": i.rank, "host": f"{i.pool}-{i.node}", "local_rank": local[i.rank], "gpu": i.local_gpu,
                 "stage": i.stage, "replica": i.replica, "tp_rank": i.tp_rank, "tp": i.tp, "gpu_type": i.gpu}
                for i in layout]
    preamble = ['TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"   # reads rank_map.json to learn its role']
    files = {"launch.sh": launch.script(agents, ['"$TRAIN_SCRIPT"', "--rank-map", "rank_map.json"],
                                        "torchrun launch written by `hetplan export --to torchrun`", {}, preamble),
             "hostfile": launch.hostfile(agents),
             "rank_map.json": json.dumps(rank_map, indent=1) + "\n"}
    return files, []


def limits(plan: Plan, cluster: Cluster) -> list[str]:
    return []
