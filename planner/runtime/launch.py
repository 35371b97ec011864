"""Start one process per planned GPU on this machine, and the single-process reference run."""
from __future__ import annotations

import queue as queue_module
import socket
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.multiprocessing as mp

from planner.runtime.lora import LoraConfig
from planner.runtime.model import Chunk, Init, lm_loss
from planner.runtime.optim import ADAM_LR, AdamState
from planner.runtime.parallel import TpGroup
from planner.runtime.ranks import RankInfo, rank_layout, worker_op_orders
from planner.runtime.tiny import TinyConfig, scaled_config
from planner.runtime.worker import RunSpec, make_batch, worker_main
from planner.types import Cluster, InputError, Offload, Plan

MAX_LOCAL_PROCESSES = 16


@dataclass(frozen=True)
class RunResult:
    cfg: TinyConfig
    notes: tuple[str, ...]
    layout: tuple[RankInfo, ...]
    losses: list[float]                 # per iteration, full-batch mean
    grads: dict[str, np.ndarray]        # last iteration, full tensors by global name
    per_rank: list[dict]                # meters, by rank
    wall_s: float


class WorkerFailed(RuntimeError):
    """A worker process raised or died; the message is one line, the traceback its cause."""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_runnable(plan: Plan) -> None:
    """Refuse what the runtime does not execute, rather than run something else under its name."""
    if plan.offload != Offload.NONE:
        raise InputError("offload", f"is '{plan.offload.value}'; hetplan's runtime (run-local) does not offload "
                                    "model states to CPU memory: set offload to 'none' to run this plan's structure")


def adapter_notes(plan: Plan, cfg: TinyConfig) -> list[str]:
    if not plan.training.adapters:
        return []
    r = plan.training.lora_rank
    notes = [f"{plan.training.kind.value}: adapters of rank {r} on every projection, everything else frozen"]
    if r >= cfg.hidden:
        notes.append(f"the adapter rank {r} is not below the scaled model's width {cfg.hidden}; it runs as planned")
    return notes


def context_notes(plan: Plan, cfg: TinyConfig) -> list[str]:
    cp = plan.context_parallel
    if cp == 1:
        return []
    return [f"context parallelism {cp}: each replica's {cp} context-parallel ranks hold 2 of the {2 * cp} chunks of "
            f"{cfg.seq_len // (2 * cp)} tokens of each sequence; keys and values are all-gathered over the ranks "
            "(Megatron-LM's cp_comm_type 'allgather'), not passed round a ring as the cost model assumes"]


def run_local(cluster: Cluster, plan: Plan, iterations: int = 3, seed: int = 0, dtype: str = "float32",
              hidden: int | None = None, seq_len: int = 16, vocab: int = 96, lr: float = ADAM_LR,
              timeout_s: float = 300.0) -> RunResult:
    check_runnable(plan)
    layout = tuple(rank_layout(cluster, plan))
    if len(layout) > MAX_LOCAL_PROCESSES:
        raise InputError("plan", f"uses {len(layout)} GPUs; run-local starts one process per GPU on this machine "
                                 f"and allows at most {MAX_LOCAL_PROCESSES}")
    cfg, notes = scaled_config(plan, hidden=hidden, seq_len=seq_len, vocab=vocab)
    notes += adapter_notes(plan, cfg) + context_notes(plan, cfg)
    spec = RunSpec(plan=plan, cfg=cfg, layout=layout, orders=worker_op_orders(cluster, plan), iterations=iterations,
                   seed=seed, dtype=dtype, lr=lr, port=_free_port(), timeout_s=timeout_s)
    ctx = mp.get_context("spawn")
    results_queue = ctx.Queue()
    t0 = time.perf_counter()
    procs = mp.spawn(worker_main, args=(spec, results_queue), nprocs=len(layout), join=False)
    results = []
    try:
        while len(results) < len(layout):
            try:
                results.append(results_queue.get(timeout=0.2))
            except queue_module.Empty:
                if procs.join(timeout=0) and results_queue.empty():
                    break
        while not procs.join(timeout=1):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        # a worker raised or died: its last line for the one-line error, the traceback as the cause
        raise WorkerFailed(f"process {e.error_index} of {len(layout)} failed: {_last_line(str(e))}") from e
    wall = time.perf_counter() - t0
    if len(results) < len(layout):
        raise RuntimeError(f"only {len(results)} of {len(layout)} processes reported")
    results.sort(key=lambda x: x["rank"])
    grads = {}
    for res in results:
        grads.update(res["grads"])
    return RunResult(cfg, tuple(notes), layout, results[0]["losses"], grads, results, wall)


def reference_model(plan: Plan, cfg: TinyConfig, seed: int = 0, dtype: str = "float32") -> Chunk:
    """The whole scaled model in one process, as the distributed run initialises it."""
    check_runnable(plan)
    return Chunk(cfg, 0, cfg.layers, Init(seed, getattr(torch, dtype)), TpGroup(), plan.recompute.value,
                 LoraConfig.of(plan.training))


def run_reference(plan: Plan, cfg: TinyConfig, iterations: int = 3, seed: int = 0, dtype: str = "float32",
                  lr: float = ADAM_LR) -> tuple[list[float], dict[str, np.ndarray]]:
    """The same model, data and Adam steps in one process, full batch at once."""
    return train_reference(reference_model(plan, cfg, seed, dtype), plan, cfg, iterations, seed, lr)


def train_reference(model: Chunk, plan: Plan, cfg: TinyConfig, iterations: int, seed: int = 0,
                    lr: float = ADAM_LR) -> tuple[list[float], dict[str, np.ndarray]]:
    """Train `model` in place: full-batch Adam on its trained parameters, no step after the last
    iteration (whose gradients are returned), as the workers do."""
    torch.set_num_threads(1)
    params = model.global_parameters()
    states = [AdamState(p) for _, p in params]
    losses = []
    for it in range(iterations):
        inputs, targets = make_batch(seed, it, plan.global_batch, cfg.seq_len, cfg.vocab)
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        losses.append(loss.item())
        if it < iterations - 1:
            for (_, p), state in zip(params, states):
                state.step(p, p.grad, lr)
                p.grad = None
    return losses, {name: p.grad.detach().numpy().copy() for name, p in params}


@dataclass(frozen=True)
class Comparison:
    max_loss_diff: float
    max_grad_abs_diff: float
    max_grad_rel_diff: float            # max |a - b| over max |b|, both over every tensor
    worst_tensor: str                   # where the largest absolute difference is
    missing: tuple[str, ...]


def compare(run: RunResult, ref_losses: list[float], ref_grads: dict[str, np.ndarray]) -> Comparison:
    missing = tuple(sorted(set(ref_grads) ^ set(run.grads)))
    loss_diff = max(abs(a - b) for a, b in zip(run.losses, ref_losses))
    worst_abs, worst_name, largest = 0.0, "", 1e-30
    for name, ref in ref_grads.items():
        largest = max(largest, float(np.max(np.abs(ref))))
        if name not in run.grads:
            continue
        diff = float(np.max(np.abs(run.grads[name] - ref)))
        if diff >= worst_abs:
            worst_abs, worst_name = diff, name
    return Comparison(loss_diff, worst_abs, worst_abs / largest, worst_name, missing)
