"""Launch scripts that pin every global rank to its planned GPU: torchrun with a static rendezvous.

Megatron-LM (and DeepSpeed's PipelineModule, and FlagScale's process meshes) derive a rank's
pipeline stage from its global rank, so a launch must give each GPU exactly the rank the plan
means for it. torchrun's c10d rendezvous hands out node ranks in the order agents join; the static
one takes them from `--node-rank`. Read in the installed torch 2.13.0, torch/distributed/run.py:
`--rdzv-backend` defaults to "static" (get_args_parser, lines 445-451); `--node-rank` "is only
used for static rendezvous" (lines 619-627) and becomes the rendezvous rank (config_from_args,
lines 890-891); `--master-addr`/`--master-port` form the endpoint of a static rendezvous without
`--rdzv-endpoint` (get_rdzv_endpoint, lines 790-792). torch/distributed/elastic/agent/server/api.py
`_assign_worker_ranks` (lines 585-680): global ranks are the cumulative sum of each agent's
local world size in node-rank order, so agents may run different numbers of processes and agent k
holds ranks [sum of the sizes before it, + its size). torch/distributed/elastic/rendezvous/
static_tcp_rendezvous.py `create_rdzv_handler` (lines 101-128) refuses a missing rank or endpoint.

A *unit* is one torchrun agent: a run of consecutive global ranks on one host. Usually a host is
one unit; where the rank order visits a host twice (stages of one pool placed on alternate
nodes), that host starts two agents, each with its own CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

PORT = 29500


@dataclass(frozen=True)
class Unit:
    node_rank: int
    host: str
    gpus: tuple[int, ...]        # GPU indices on the host, in local-rank order
    first_rank: int              # global rank of local rank 0


def units(ranks: list[tuple[str, int]], groups: list | None = None) -> list[Unit]:
    """Agents for `ranks`: [(host, gpu index)] listed in global rank order; a new agent starts where the
    host changes, or where `groups` (one label a rank) does."""
    out: list[Unit] = []
    start = 0
    key = [(h, groups[r] if groups else None) for r, (h, _) in enumerate(ranks)]
    for r in range(1, len(ranks) + 1):
        if r == len(ranks) or key[r] != key[start]:
            out.append(Unit(len(out), ranks[start][0], tuple(g for _, g in ranks[start:r]), start))
            start = r
    return out


def hostfile(agent_units: list[Unit], types: dict[str, str] | None = None) -> str:
    """`host slots=N` lines (DeepSpeed/MPI form; FlagScale adds `type=T`), hosts in rank order."""
    slots: dict[str, int] = {}
    for u in agent_units:
        slots[u.host] = slots.get(u.host, 0) + len(u.gpus)
    return "".join(f"{h} slots={n}" + (f" type={types[h]}" if types else "") + "\n" for h, n in slots.items())


def script(agent_units: list[Unit], command: list[str], title: str, env: dict[str, str], preamble: list[str],
           unset: tuple[str, ...] = (), unit_args=None) -> str:
    """launch.sh: run on every host; HOST (default: this machine's name) picks its agents.

    `command` is what torchrun runs (script and arguments, shell words); then `unit_args(unit)` (words for
    that agent only, e.g. FlagScale's device type) and the script's own arguments follow."""
    hosts = list(dict.fromkeys(u.host for u in agent_units))
    lines = ["#!/usr/bin/env bash",
             f"# {title}: run this script on every host below (same arguments everywhere).",
             "# Each host starts its torchrun agents with fixed node ranks (static rendezvous), so every",
             "# global rank, and with it every pipeline stage, lands on the GPU the plan gives it.",
             "# Hosts are named <pool>-<node>: rename them here and in hostfile, or set HOST=<name below>.",
             "set -euo pipefail",
             'export HETPLAN_CALLER_DIR="$PWD"   # where relative paths given to the run were meant from',
             'cd "$(dirname "$0")"',
             'HOST="${HOST:-$(hostname)}"',
             'SCRIPT_ARGS=("$@")   # passed on to every process',
             f'MASTER_ADDR="${{MASTER_ADDR:-{hosts[0]}}}"     # the host of node rank 0',
             f'MASTER_PORT="${{MASTER_PORT:-{PORT}}}"',
             *preamble,
             *[f"export {k}={shlex.quote(v)}" for k, v in env.items()],
             *[f"unset {k}" for k in unset],
             f"NNODES={len(agent_units)}",
             "start() {   # node rank, GPUs (CUDA_VISIBLE_DEVICES), processes, words for this agent only",
             '  CUDA_VISIBLE_DEVICES="$2" torchrun --nnodes "$NNODES" --node-rank "$1" --nproc-per-node "$3" \\',
             '    --rdzv-backend static --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\',
             "    " + " ".join(command) + ' "${@:4}" ${SCRIPT_ARGS[@]+"${SCRIPT_ARGS[@]}"} &',
             "}",
             'case "$HOST" in']
    for host in hosts:
        mine = [u for u in agent_units if u.host == host]
        calls = "; ".join(" ".join([f"start {u.node_rank} {','.join(map(str, u.gpus))} {len(u.gpus)}",
                                     *(unit_args(u) if unit_args else [])]) for u in mine)
        lines.append(f"  {host}) {calls} ;;")
    known = " ".join(hosts)
    lines += [f'  *) echo "launch.sh: HOST=$HOST is not a host of this plan ({known}); run on one of them, '
              f'set HOST to its name, or rename the hosts in launch.sh and hostfile" >&2; exit 2 ;;',
              "esac",
              'for pid in $(jobs -p); do wait "$pid"; done',
              ""]
    return "\n".join(lines)
