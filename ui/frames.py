"""Planner objects as DataFrames, the input of `ui.charts` and of the tables the views show."""
from __future__ import annotations

import math

import pandas as pd

from planner.compute import gemm_half_dim
from planner.placement import place
from planner.types import GIB, Cluster, Estimate, Plan
from ui.numbers import dollars, duration, gib, layer_range, per_million_tokens, percent, signed, whole
from ui.state import JOB_KIND_LABELS


def gpu_grid(cluster: Cluster, plan: Plan | None) -> pd.DataFrame:
    """One row per GPU: pool, node, gpu index, and the stage/replica using it (None when idle)."""
    owner: dict[tuple[str, int, int], tuple[int, int]] = {}
    if plan is not None:
        for (stage, replica), slot in place(cluster, plan).slots.items():
            for g in slot.gpus:
                owner[(slot.pool, slot.node, g)] = (stage, replica)
    rows = []
    for pool in cluster.pools:
        for node in range(pool.nodes):
            for g in range(pool.gpus_per_node):
                stage, replica = owner.get((pool.name, node, g), (None, None))
                rows.append({"pool": pool.name, "gpu_type": pool.gpu.id, "node": node, "gpu": g,
                             "stage": stage, "replica": replica})
    return pd.DataFrame(rows)


def collapse_nodes(grid: pd.DataFrame, max_rows: int = 32) -> pd.DataFrame:
    """`gpu_grid` with a `row` label per GPU; above `max_rows` nodes, consecutive nodes of a pool
    whose GPUs run the same stages share one row ("h100 · nodes 0–15 (16)"), so a large cluster
    stays a readable picture. Merged rows show their first node's GPUs."""
    df = grid.copy()
    df["row"] = df["pool"] + " · node " + df["node"].astype(str)
    if df[["pool", "node"]].drop_duplicates().shape[0] <= max_rows:
        return df
    pattern = df.groupby(["pool", "node"], sort=False)["stage"].agg(lambda s: tuple(s.fillna(-1))).reset_index()
    run = (pattern["pool"] != pattern["pool"].shift()) | (pattern["stage"] != pattern["stage"].shift())
    pattern["run"] = run.cumsum()
    first = pattern.groupby("run").agg(pool=("pool", "first"), lo=("node", "min"), hi=("node", "max"))
    label = {r: (f"{x.pool} · node {x.lo}" if x.lo == x.hi else f"{x.pool} · nodes {x.lo}–{x.hi} ({x.hi - x.lo + 1})")
             for r, x in first.iterrows()}
    firsts = set(zip(first.index, first["lo"]))
    keep = df.merge(pattern[["pool", "node", "run"]], on=["pool", "node"])
    keep = keep[[(r, n) in firsts for r, n in zip(keep["run"], keep["node"])]]
    return keep.assign(row=keep["run"].map(label)).drop(columns="run").reset_index(drop=True)


def stages(plan: Plan, cluster: Cluster) -> pd.DataFrame:
    """One row per replica: stage, its layer range, pool, GPU type, tp, cp, ep (the plan's expert-parallel
    degree), its GPUs (tp x cp) and share of the batch."""
    rows = []
    for i, s in enumerate(plan.stages):
        for j, r in enumerate(s.replicas):
            rows.append({"stage": i, "layer_start": s.layer_start, "layer_end": s.layer_end,
                         "layer_range": layer_range(s.layer_start, s.layer_end), "layers": s.num_layers, "replica": j, "pool": r.pool,
                         "gpu_type": cluster.pool(r.pool).gpu.id, "tp": r.tp, "cp": plan.context_parallel,
                         "ep": plan.expert_parallel,
                         "gpus": plan.replica_gpus(r), "samples": r.samples,
                         "share": r.samples / plan.global_batch})
    return pd.DataFrame(rows)


def replica_groups(plan: Plan, cluster: Cluster) -> pd.DataFrame:
    """Identical replicas of a stage (same pool, tp and samples) as one row with a count."""
    df = stages(plan, cluster)
    keys = ["stage", "layer_start", "layer_end", "layer_range", "layers", "pool", "gpu_type", "tp", "cp", "ep", "gpus", "samples"]
    out = df.groupby(keys, sort=False).agg(replicas=("replica", "size"), share=("share", "sum")).reset_index()
    return out


def memory_groups(mem: pd.DataFrame) -> pd.DataFrame:
    """`memory` rows with identical replicas of a stage merged (the worst GPU kept), with a count."""
    keys = ["stage", "pool", "gpu_type", "tp"]
    worst = mem.loc[mem.groupby(keys, sort=False)["total"].idxmax()].reset_index(drop=True)
    counts = mem.groupby(keys, sort=False).size().rename("replicas").reset_index()
    return worst.drop(columns=["replica"]).merge(counts, on=keys)


def memory(est: Estimate) -> pd.DataFrame:
    """One row per replica, GiB per GPU by kind, with the GPU's capacity; where states are offloaded,
    also the GiB each GPU keeps in CPU memory and its share of the node's CPU memory (inf: not set)."""
    rows = []
    for r in est.replicas:
        m = r.memory
        rows.append({"stage": r.stage, "replica": r.replica, "pool": r.pool, "gpu_type": r.gpu, "tp": r.tp,
                     "weights": m.weights_bytes / GIB, "gradients": m.gradients_bytes / GIB,
                     "optimizer": m.optimizer_bytes / GIB, "activations": m.activations_bytes / GIB,
                     "overhead": m.overhead_bytes / GIB, "total": m.total_bytes / GIB,
                     "capacity": m.capacity_bytes / GIB, "cpu_offloaded": m.host_bytes / GIB,
                     "cpu_capacity": m.host_capacity_bytes / GIB if math.isfinite(m.host_capacity_bytes) else None})
    df = pd.DataFrame(rows)
    if not any(r.memory.host_bytes > 0 for r in est.replicas):
        df = df.drop(columns=["cpu_offloaded", "cpu_capacity"])
    return df


NOISE_S = 1e-9        # a term shorter than a nanosecond (or a billionth of the longest) is rounding, not time


def without_noise(seconds: float, longest_s: float = 0.0) -> float:
    """`seconds`, or 0.0 when it is floating-point noise (2.7e-14 s left by a subtraction)."""
    return 0.0 if abs(seconds) < max(NOISE_S, NOISE_S * abs(longest_s)) else seconds


def breakdown(est: Estimate) -> pd.DataFrame:
    longest_s = max((v.total_s for v in est.breakdown.values()), default=0.0)
    return pd.DataFrame([{"term": k.replace("_", " "), "total_s": without_noise(v.total_s, longest_s),
                          "exposed_s": without_noise(v.exposed_s, longest_s)}
                         for k, v in est.breakdown.items()])


def metrics_row(name: str, kind: str, plan: Plan, est: Estimate) -> dict:
    return {"plan": name, "kind": kind, "tokens_per_s": est.tokens_per_s, "mfu": est.mfu,
            "iteration_s": est.iteration_time_s, "usd_per_m_tokens": est.cost_per_million_tokens_usd,
            "usd_per_hour": est.cost_per_hour_usd, "gpus": est.num_gpus, "stages": plan.num_stages,
            "train_time_s": est.train_time_s, "train_cost_usd": est.train_cost_usd,
            "train_days": est.train_time_s / 86400 if est.train_time_s else None,
            "fits": est.fits}


def metrics_table(rows: list[dict]) -> pd.DataFrame:
    """Rows of `metrics_row`, formatted for people."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return pd.DataFrame({
        "plan": df["plan"], "kind": df["kind"], "GPUs": df["gpus"], "stages": df["stages"],
        "tokens/s": df["tokens_per_s"].map(whole), "MFU": df["mfu"].map(lambda v: percent(v, 1)),
        "iteration": df["iteration_s"].map(duration),
        "$ / M tokens": df["usd_per_m_tokens"].map(per_million_tokens),
        "$ / hour": df["usd_per_hour"].map(dollars),
        "time to train": df["train_time_s"].map(duration),
        "$ to train": df["train_cost_usd"].map(lambda v: "-" if v is None or pd.isna(v) else dollars(v)),
        "fits": df["fits"].map({True: "yes", False: "NO"}),
    })


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def plan_shape(plan: Plan) -> str:
    """The plan in one line: stages, data, tensor, context and expert parallelism, micro-batch, memory savers,
    schedule."""
    dp = [len(s.replicas) for s in plan.stages]
    tp = [r.tp for s in plan.stages for r in s.replicas]
    schedule = {"1f1b": "1F1B", "gpipe": "GPipe"}.get(plan.schedule.value, plan.schedule.value)
    if plan.interleave > 1:
        schedule += f" interleaved ×{plan.interleave}"
    parts = [f"{plan.num_stages} pipeline stage{'s' if plan.num_stages != 1 else ''} over {plan.model.layers} layers",
             f"data-parallel {_span(dp)} per stage", f"tensor-parallel {_span(tp)}",
             f"micro-batch {plan.micro_batch}", f"ZeRO-{plan.zero_stage}", f"recompute {plan.recompute.value}",
             f"{plan.precision.value}", f"{schedule} schedule"]
    if plan.hybrid_shard:       # FSDP HYBRID_SHARD: sharded within groups of replicas, replicated across them
        group = f"{plan.hybrid_shard} replica{'s' if plan.hybrid_shard != 1 else ''}"
        parts.insert(parts.index(f"ZeRO-{plan.zero_stage}") + 1,
                     f"hybrid shard (states sharded within groups of {group}, replicated across)")
    if plan.expert_parallel > 1:
        parts.insert(3, expert_text(plan))
    if plan.context_parallel > 1:
        parts.insert(3, context_text(plan))
    if plan.sequence_parallel:
        parts.insert(3, "sequence-parallel")
    if plan.training.kind.value != "pretrain" or plan.offload.value != "none":
        parts.append(plan_training_text(plan))
    return " · ".join(parts)


def context_text(plan: Plan) -> str:
    """"context-parallel 8 (tp 2 × cp 8 = 16 GPUs per replica)"; "" for a plan without context parallelism."""
    cp = plan.context_parallel
    if cp == 1:
        return ""
    replicas = [r for s in plan.stages for r in s.replicas]
    tp, gpus = _span([r.tp for r in replicas]), _span([plan.replica_gpus(r) for r in replicas])
    return f"context-parallel {cp} (tp {tp} × cp {cp} = {gpus} GPUs per replica)"


def expert_text(plan: Plan) -> str:
    """"expert-parallel 4 (experts sharded over 4 replicas)"; "" for a plan without expert parallelism."""
    ep = plan.expert_parallel
    return "" if ep == 1 else f"expert-parallel {ep} (experts sharded over {ep} replicas)"


def training_text(kind: str, lora_rank: int, offload: str) -> str:
    """"pretrain", "LoRA rank 16, offload optimizer", "QLoRA rank 8, offload auto"."""
    text = JOB_KIND_LABELS.get(kind, kind)
    if kind in ("lora", "qlora"):
        text += f" rank {lora_rank}"
    return text + ("" if offload == "none" else f", offload {offload}")


def plan_training_text(plan: Plan) -> str:
    """The plan's job kind and offload, as `training_text` says them."""
    return training_text(plan.training.kind.value, plan.training.lora_rank, plan.offload.value)


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "overhead")


def memory_overflow(groups: pd.DataFrame) -> pd.DataFrame:
    """The rows of `memory_groups` that do not fit: what each GPU needs, holds and lacks (GiB), and
    its largest part. Empty when everything fits."""
    over = groups[groups["total"] > groups["capacity"]]
    largest = over[list(MEMORY_PARTS)].idxmax(axis=1) if len(over) else pd.Series(dtype=object)
    return pd.DataFrame({
        "stage": over["stage"], "pool": over["pool"], "GPU type": over["gpu_type"], "tp": over["tp"],
        "replicas": over["replicas"] if "replicas" in over else 1,
        "needs GiB": over["total"].round(1), "holds GiB": over["capacity"].round(1),
        "short by GiB": (over["total"] - over["capacity"]).round(1),
        "largest part": [f"{part} {gib(over.at[i, part] * GIB)}" for i, part in largest.items()],
    }).reset_index(drop=True)


def peak_memory_share(est: Estimate) -> float:
    """The fullest GPU's memory as a share of its capacity (above 1: does not fit)."""
    return max(r.memory.total_bytes / r.memory.capacity_bytes for r in est.replicas)


def _change(before: float, after: float, kind: str, fmt) -> str:
    """The change from `before` to `after`: "same"; relative ("+12.5%"); in percentage points of a
    share ("+3.1 pt"); or in the figure's own unit ("+2", "+120 ms")."""
    d = after - before
    if abs(d) <= 1e-9 * max(abs(before), abs(after), 1):
        return "same"
    sign = "+" if d > 0 else "-"
    if kind == "relative" and before:
        return signed(after / before - 1)
    if kind == "points":
        return f"{sign}{abs(d) * 100:.1f} pt"
    return sign + fmt(abs(d))


def side_by_side(before: Estimate, before_plan: Plan, after: Estimate, after_plan: Plan) -> pd.DataFrame:
    """The key metrics of two plans (the plan on view and an edit of it), with the change."""
    rows = [
        ("throughput (tokens/s)", before.tokens_per_s, after.tokens_per_s, whole, "relative"),
        ("MFU", before.mfu, after.mfu, lambda v: percent(v, 1), "points"),
        ("iteration", before.iteration_time_s, after.iteration_time_s, duration, "relative"),
        ("pipeline (of the iteration)", before.pipeline_time_s, after.pipeline_time_s, duration, "relative"),
        ("$ / M tokens", before.cost_per_million_tokens_usd, after.cost_per_million_tokens_usd, per_million_tokens,
         "relative"),
        ("$ / hour", before.cost_per_hour_usd, after.cost_per_hour_usd, dollars, "relative"),
        ("GPUs used", before.num_gpus, after.num_gpus, whole, "unit"),
        ("pipeline stages", before_plan.num_stages, after_plan.num_stages, whole, "unit"),
        ("fullest GPU's memory (of its capacity)", peak_memory_share(before), peak_memory_share(after),
         percent, "points"),
        ("peak memory per GPU", before.peak_memory_bytes, after.peak_memory_bytes, gib, "unit"),
    ]
    if before.train_time_s and after.train_time_s:
        rows.append(("time to train", before.train_time_s, after.train_time_s, duration, "relative"))
    out = [{"metric": name, "plan on view": fmt(b), "edited": fmt(a), "change": _change(b, a, kind, fmt)}
           for name, b, a, fmt, kind in rows]
    out.append({"metric": "fits in memory", "plan on view": "yes" if before.fits else "NO",
                "edited": "yes" if after.fits else "NO", "change": "same" if before.fits == after.fits else
                ("now fits" if after.fits else "runs out of memory")})
    return pd.DataFrame(out)


def energy_text(est, without_grid: list[str] | None = None) -> str:
    """Board power, energy per million tokens and, where known, energy and carbon to train;
    `without_grid`: the used pools that state no grid intensity, named when the carbon is unknown."""
    text = f"{est.power_w / 1e3:,.1f} kW of GPU board power, {est.energy_per_million_tokens_kwh:.3f} kWh per million tokens"
    if est.train_energy_kwh is not None:
        text += f"; {est.train_energy_kwh:,.0f} kWh to train"
        if est.train_co2_kg is not None:
            text += f", {est.train_co2_kg / 1000:,.1f} t CO2"
        elif without_grid:
            text += (f"; no CO2 figure: pool{'s' if len(without_grid) > 1 else ''} {', '.join(without_grid)} "
                     f"state{'' if len(without_grid) > 1 else 's'} no grid gCO2/kWh (a column of the pool table)")
    return text


def pools_without_grid_intensity(cluster: Cluster, plan: Plan) -> list[str]:
    """The pools a plan uses whose grid carbon intensity is not given."""
    used = plan.gpus_by_pool()
    return [p.name for p in cluster.pools if p.name in used and p.grid_gco2_per_kwh is None]


def network_paths(cluster: Cluster) -> pd.DataFrame:
    """Between every two pools: per-node bandwidth, latency and the path through the switches
    (the cluster file's network section, planner.network); empty without one."""
    rows = []
    for i, a in enumerate(cluster.pools):
        for b in cluster.pools[i + 1:]:
            path = cluster.path_between_pools(a, b)
            if path is not None:
                rows.append({"between": f"{a.name} ↔ {b.name}", "Gb/s per node": path.bw_bytes_per_s * 8 / 1e9,
                             "latency µs": path.latency_s * 1e6, "path": " → ".join(path.hops)})
    return pd.DataFrame(rows, columns=["between", "Gb/s per node", "latency µs", "path"])


def mfu_peaks(plan: Plan, cluster: Cluster) -> tuple[float, float]:
    """The 16-bit peak FLOP/s of the GPUs a plan uses (MFU's denominator, planner.cost), and their peak at
    the plan's precision: FP8 where the plan trains in fp8 and the GPU has it, the 16-bit peak elsewhere."""
    fp8 = plan.precision.value == "fp8"
    peak16 = peak_own = 0.0
    for name, n in plan.gpus_by_pool().items():
        gpu = cluster.pool(name).gpu
        peak16 += n * gpu.peak_flops
        peak_own += n * (gpu.peak_fp8_flops if fp8 and gpu.peak_fp8_flops > 0 else gpu.peak_flops)
    return peak16, peak_own


def mfu_caveat(plan: Plan, cluster: Cluster, est: Estimate) -> str:
    """For an fp8 plan, MFU against the FP8 peak beside the figure against the 16-bit peak; "" otherwise."""
    peak16, peak_own = mfu_peaks(plan, cluster)
    if peak_own == peak16:
        return ""
    return (f"MFU {percent(est.mfu, 1)} is against the GPUs' 16-bit peak, as MFU is usually quoted; against their FP8 "
            f"peak, at which this fp8 plan runs its linear layers, it is {percent(est.mfu * peak16 / peak_own, 1)}.")


def batch_too_small(plan: Plan, cluster: Cluster, est: Estimate) -> str:
    """One sentence where the batch is far too small for the GPUs: fewer tokens per GPU per iteration than the
    matmul size at which a GPU reaches half its best rate (planner.compute.gemm_half_dim, its ops:byte ratio),
    so no plan on this many GPUs can keep them busy; "" otherwise."""
    tokens_per_gpu = plan.global_batch * plan.seq_len / est.num_gpus
    half = max(gemm_half_dim(cluster.pool(name).gpu) for name in plan.gpus_by_pool())
    if tokens_per_gpu >= half:
        return ""
    return (f"The batch is far too small for {est.num_gpus:,} GPUs: {plan.global_batch:,} sequences of "
            f"{plan.seq_len:,} tokens give each GPU {tokens_per_gpu:,.1f} tokens an iteration, fewer than the "
            f"{half:,.0f} at which its matmuls reach half their best rate, hence the MFU of {percent(est.mfu, 1)}. "
            "Raise the global batch, or plan for fewer GPUs.")
