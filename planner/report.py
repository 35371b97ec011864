"""Estimates as plain data (the `--json` contract of `hetplan evaluate` and of plans' metrics)."""
from __future__ import annotations

from planner.engines import get as engine_profile
from planner.types import GIB, Estimate, ReplicaEstimate


# A plan of more replicas than this lists its per-replica figures (`peak_memory_gib` in --json, the
# table of `evaluate`) one row per run of consecutive replicas of a stage with the same figures, each
# row with its `replica_count` (the search's plans on the largest clusters have ~100,000 replicas,
# a few distinct kinds per stage: 142 MB of --json listed one by one).
MAX_LISTED_REPLICAS = 1_024


def replica_rows(est: Estimate) -> list[tuple[ReplicaEstimate, int]]:
    """(first replica, how many) of each row of the per-replica figures: every replica alone up to
    MAX_LISTED_REPLICAS replicas; past it, runs of consecutive replicas of a stage whose figures
    (everything but the index) are equal."""
    if len(est.replicas) <= MAX_LISTED_REPLICAS:
        return [(r, 1) for r in est.replicas]
    rows: list[list] = []
    for r in est.replicas:
        last = rows[-1] if rows else None
        if last is not None and last[0].replica + last[1] == r.replica and _figures(last[0]) == _figures(r):
            last[1] += 1
        else:
            rows.append([r, 1])
    return [(r, n) for r, n in rows]


def _figures(r: ReplicaEstimate) -> tuple:
    return r.stage, r.pool, r.gpu, r.tp, r.samples, r.forward_s, r.backward_s, r.memory


def estimate_to_dict(est: Estimate) -> dict:
    """Keys are a public contract: extend, never rename. `peak_memory_gib` has one entry per replica
    (`replica_count` 1), or, past MAX_LISTED_REPLICAS replicas (`peak_memory_gib_grouped`), one per
    run of `replica_count` consecutive replicas of a stage, from `replica` on, with the same figures."""
    return {
        "iteration_time_s": est.iteration_time_s,
        "pipeline_time_s": est.pipeline_time_s,
        "tokens_per_s": est.tokens_per_s,
        "mfu": est.mfu,
        "cost_per_hour_usd": est.cost_per_hour_usd,
        "cost_per_million_tokens_usd": est.cost_per_million_tokens_usd,
        "fits": est.fits,
        "oom": est.oom or None,
        "num_gpus": est.num_gpus,
        "peak_memory_gib": [
            {"stage": r.stage, "replica": r.replica, "pool": r.pool, "gpu": r.gpu, "tp": r.tp,
             "samples": r.samples, "peak_memory_gib": r.memory.total_bytes / GIB,
             "capacity_gib": r.memory.capacity_bytes / GIB,
             "weights_gib": r.memory.weights_bytes / GIB, "gradients_gib": r.memory.gradients_bytes / GIB,
             "optimizer_gib": r.memory.optimizer_bytes / GIB, "activations_gib": r.memory.activations_bytes / GIB,
             "overhead_gib": r.memory.overhead_bytes / GIB,
             "host_memory_gib": r.memory.host_bytes / GIB,
             "forward_s": r.forward_s, "backward_s": r.backward_s, "replica_count": n}
            for r, n in replica_rows(est)],
        "peak_memory_gib_grouped": len(est.replicas) > MAX_LISTED_REPLICAS,
        "breakdown": {k: {"total_s": v.total_s, "exposed_s": v.exposed_s} for k, v in est.breakdown.items()},
        "bottleneck": est.bottleneck,
        "train_time_s": est.train_time_s,
        "train_cost_usd": est.train_cost_usd,
        "notes": list(est.notes),
        "engine": est.engine,
        "power_w": est.power_w,
        "energy_per_million_tokens_kwh": est.energy_per_million_tokens_kwh,
        "train_energy_kwh": est.train_energy_kwh,
        "train_co2_kg": est.train_co2_kg,
        "availability": est.availability,
        "expected_tokens_per_s": est.expected_tokens_per_s,
        "expected_cost_per_million_tokens_usd": est.expected_cost_per_million_tokens_usd,
        "expected_train_time_s": est.expected_train_time_s,
        "expected_train_cost_usd": est.expected_train_cost_usd,
    }


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    if abs(seconds) < 1e-9:          # floating-point noise of a sum of terms, not a duration
        return "0 s"
    return f"{seconds:.3g} s"


# Terms of Estimate.breakdown whose total the cost model does not compute: their `total_s` repeats the
# exposed time (planner.cost builds them from the exposed part alone), so the text prints no total for them.
EXPOSED_ONLY_TERMS = {"zero_comm": "the part of ZeRO's weight gathers and gradient scatters not hidden behind compute; "
                                   "their full time is not reported"}


def estimate_to_text(est: Estimate) -> str:
    engine = engine_profile(est.engine)
    lines = [
        f"engine             {engine.title} ({engine.version})",
        f"iteration time     {est.iteration_time_s:.3f} s",
        f"throughput         {est.tokens_per_s:,.0f} tokens/s on {est.num_gpus} GPUs",
        f"MFU                {est.mfu:.1%}",
        f"cost               ${est.cost_per_hour_usd:,.2f}/h, ${est.cost_per_million_tokens_usd:.3f} per million tokens",
    ]
    lines.append(f"energy             {est.power_w / 1e3:,.1f} kW of GPU board power, "
                 f"{est.energy_per_million_tokens_kwh:.3f} kWh per million tokens")
    if est.train_time_s is not None:
        lines.append(f"to train           {format_duration(est.train_time_s)}, ${est.train_cost_usd:,.0f}, "
                     f"{est.train_energy_kwh:,.0f} kWh"
                     + ("" if est.train_co2_kg is None else f", {est.train_co2_kg / 1000:,.1f} t CO2"))
    if spot_text(est):
        lines.append(f"spot               {spot_text(est)}")
    lines.append(f"fits in memory     {'yes' if est.fits else 'NO: ' + est.oom}")
    lines.append(f"bottleneck         {est.bottleneck}")
    lines += ["", "time per iteration       total s   exposed s"]
    for name, term in est.breakdown.items():
        total = "-" if name in EXPOSED_ONLY_TERMS else f"{term.total_s:.3f}"
        lines.append(f"  {name:22} {total:>9} {term.exposed_s:11.3f}")
    lines += [f"  ({name}: {why})" for name, why in EXPOSED_ONLY_TERMS.items() if name in est.breakdown]
    host = any(r.memory.host_bytes for r in est.replicas)      # offloaded states: a column of their own
    lines += ["", "stage replica pool            gpu             tp samples  fwd ms  bwd ms  memory GiB (of)"
              + ("  CPU GiB (of)" if host else "")]
    for r, n in replica_rows(est):
        index = f"{r.replica}" if n == 1 else f"{r.replica}-{r.replica + n - 1}"
        lines.append(f"{r.stage:5} {index:>7} {r.pool[:15]:15} {r.gpu[:15]:15} {r.tp:2} {r.samples:7} "
                     f"{r.forward_s * 1e3:7.1f} {r.backward_s * 1e3:7.1f}  {r.memory.total_bytes / GIB:6.1f} "
                     f"({r.memory.capacity_bytes / GIB:.0f})"
                     + (f"  {r.memory.host_bytes / GIB:7.1f} ({r.memory.host_capacity_bytes / GIB:.0f})" if host else ""))
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)


def spot_text(est: Estimate) -> str | None:
    """The expected figures of a plan on spot pools (planner.spot), in words; None when it uses none."""
    if est.expected_tokens_per_s is None:
        return None
    text = (f"runs {est.availability:.1%} of the time (it waits while a spot pool is reclaimed): expected "
            f"{est.expected_tokens_per_s:,.0f} tokens/s, ${est.expected_cost_per_million_tokens_usd:.3f} per million "
            f"tokens")
    if est.expected_train_time_s is not None:
        text += (f"; expected {format_duration(est.expected_train_time_s)} and "
                 f"${est.expected_train_cost_usd:,.0f} to train")
    return text
