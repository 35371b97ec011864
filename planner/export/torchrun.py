"""torchrun launch script, hostfile and rank map.

Every plan is expressible here: the launcher only places processes. Hosts are named
`<pool>-<node>` (replace them with real host names); each runs as many processes as the plan
places on it. Nodes may run different numbers of processes, so the script uses the c10d
rendezvous, which assigns global ranks itself: a training script should find its role by host
and LOCAL_RANK in rank_map.json rather than by RANK.
Options checked against pytorch/pytorch `torch/distributed/run.py` (stored copy, commit 010929f,
get_args_parser): --nnodes, --nproc-per-node, --rdzv-backend (default "static"), --rdzv-endpoint
(<host>:<port>), --rdzv-id. --node-rank and --master-addr/--master-port are not written: run.py
passes node_rank to the rendezvous only when the backend is "static", and uses master_addr/port
only for a static rendezvous without an endpoint.
The hostfile uses DeepSpeed/MPI's `host slots=N` lines (not checked against a stored source).
"""
from __future__ import annotations

import json

from planner.runtime.ranks import rank_layout
from planner.types import Cluster, Plan

PORT = 29500


def export(plan: Plan, cluster: Cluster):
    layout = rank_layout(cluster, plan)
    hosts: dict[str, list] = {}
    for info in layout:
        hosts.setdefault(f"{info.pool}-{info.node}", []).append(info)
    rank_map = [{"rank": i.rank, "host": f"{i.pool}-{i.node}", "local_rank": k, "gpu": i.local_gpu,
                 "stage": i.stage, "replica": i.replica, "tp_rank": i.tp_rank, "tp": i.tp, "gpu_type": i.gpu}
                for host_ranks in hosts.values() for k, i in enumerate(host_ranks)]
    first = next(iter(hosts))
    lines = ["#!/usr/bin/env bash",
             "# Written by `hetplan export --to torchrun`: run on every host with HOST set to its name below.",
             "# TRAIN_SCRIPT reads rank_map.json to learn its stage, replica and tensor-parallel rank.",
             "set -euo pipefail", f'MASTER_ADDR="${{MASTER_ADDR:-{first}}}"',
             'TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"', 'case "$HOST" in']
    for host, infos in hosts.items():
        gpus = ",".join(str(i.local_gpu) for i in infos)
        lines += [f"  {host})",
                  f"    export CUDA_VISIBLE_DEVICES={gpus}",
                  f"    exec torchrun --nnodes {len(hosts)} --nproc-per-node {len(infos)} "
                  f"--rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:{PORT}\" --rdzv-id hetplan "
                  f"\"$TRAIN_SCRIPT\" --rank-map rank_map.json ;;"]
    lines += ['  *) echo "unknown HOST $HOST" >&2; exit 2 ;;', "esac", ""]
    hostfile = "".join(f"{host} slots={len(infos)}\n" for host, infos in hosts.items())
    files = {"launch.sh": "\n".join(lines), "hostfile": hostfile,
             "rank_map.json": json.dumps(rank_map, indent=1) + "\n"}
    return files, [], plan, None, None
