"""Planner search benchmark: optimality against exhaustive search, search time, gains over baselines.

    python benchmarks/search_benchmark.py [--clusters 30] [--seed 0] [--skip-large]
                                          [--parts optimality,times,anytime,cli,gains]
                                          [--repeat 3] [--max-fast-scores N] [--out docs/performance.md]

Runs on one core (the search is single-threaded pure Python). Writes the tables to --out.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.types import InfeasibleError, InputError, Job, Objective  # noqa: E402

GPUS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "l40s", "rtx-4090", "a10g"]
SMALL_MODELS = ["opt-350m", "gpt3-1.3b", "gpt3-2.7b", "llama-2-7b"]
SIZES = [  # cluster file, model, global batch, seq len
    ("a100-v100-16.yaml", "llama-2-7b", 64, 4096),
    ("h100-a100-v100-64.yaml", "llama-2-70b", 256, 4096),
    ("cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048),
    ("big-4types-4096.yaml", "llama-3.1-405b", 2048, 8192),
]
GAIN_JOBS = {  # example cluster -> (model, global batch, seq len)
    "a100-v100-16.yaml": ("llama-2-7b", 64, 4096),
    "consumer-mix.yaml": ("gpt3-1.3b", 64, 2048),
    "h100-a100-v100-64.yaml": ("llama-2-70b", 256, 4096),
    "lab-mix.yaml": ("llama-2-13b", 128, 4096),
    "single-node-8.yaml": ("gpt3-1.3b", 32, 2048),
    "cloud-4types-1024.yaml": ("gpt3-175b", 1536, 2048),
    "big-4types-4096.yaml": ("llama-3.1-405b", 2048, 8192),
}


def random_cluster(rng: random.Random, catalog, k: int):
    pools = []
    total = 0
    for j, gpu in enumerate(rng.sample(GPUS, rng.choice((2, 2, 3)))):
        gpn = rng.choice((1, 2, 4))
        nodes = rng.choice((1, 1, 2))
        if total + gpn * nodes > 16:
            nodes = 1
        if total + gpn * nodes > 16:
            break
        total += gpn * nodes
        pools.append({"name": f"p{j}", "gpu": gpu, "nodes": nodes, "gpus_per_node": gpn,
                      "inter_node_gbps": rng.choice((10, 25, 100, 200))})
    # 1-4 GPUs per node and networks from 10 Gb/s: where placement and transfers decide
    return cluster_from_dict({"name": f"random-{k}", "pools": pools,
                              "between_pools_gbps": rng.choice((10, 25, 100))}, catalog)


def optimality(catalog, count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    while len(rows) < count:
        cluster = random_cluster(rng, catalog, len(rows))
        if len(cluster.pools) < 2:
            continue
        job = Job(catalog.model(rng.choice(SMALL_MODELS)), rng.choice((8, 16, 32)), rng.choice((1024, 2048)))
        objective = rng.choice((Objective.THROUGHPUT, Objective.THROUGHPUT, Objective.COST))
        try:
            t = time.perf_counter()
            ours = search(cluster, job, objective, baselines=False).plans[0].estimate
            ours_s = time.perf_counter() - t
            t = time.perf_counter()
            best = search(cluster, job, objective, method="exhaustive", baselines=False)
            exh_s = time.perf_counter() - t
        except InfeasibleError:
            continue
        opt = best.plans[0].estimate
        if objective == Objective.THROUGHPUT:
            ratio = ours.tokens_per_s / opt.tokens_per_s
        else:
            ratio = opt.cost_per_million_tokens_usd / ours.cost_per_million_tokens_usd
        rows.append({"cluster": " + ".join(f"{p.num_gpus}x {p.gpu.id}" for p in cluster.pools), "model": job.model.id,
                     "batch": job.global_batch, "seq": job.seq_len, "objective": objective.value, "ratio": ratio,
                     "ours_s": ours_s, "exhaustive_s": exh_s, "exhaustive_candidates": best.candidates_evaluated})
        print(f"optimality {len(rows):2}: {rows[-1]['cluster']:40} {job.model.id:10} ratio {ratio:.4f} "
              f"({ours_s:.2f} s vs {exh_s:.1f} s)", flush=True)
    return rows


def search_times(catalog, max_gpus: int, repeat: int, options: SearchOptions) -> list[dict]:
    """Search time on each size: CPU seconds of the process (one core; the machine may be shared,
    so wall time is also given), the fastest of `repeat` runs, without and with the baselines
    (what `hetplan plan` and the app run)."""
    rows = []
    for file, model, batch, seq in SIZES:
        cluster = load_cluster_file(ROOT / "examples" / file, catalog)
        if cluster.num_gpus > max_gpus:
            continue
        job = Job(catalog.model(model), batch, seq)
        runs, cpu, with_base = [], [], []
        for _ in range(repeat):
            start = time.process_time()
            try:
                result = search(cluster, job, baselines=False, options=options)
            except InputError as e:
                print(f"time {file}: {e}", flush=True)
                rows.append({"cluster": file, "gpus": cluster.num_gpus, "model": model, "error": str(e),
                             "types": len({p.gpu.id for p in cluster.pools}), "time_s": time.process_time() - start})
                break
            cpu.append(time.process_time() - start)
            runs.append(result.search_time_s)
            start = time.process_time()
            search(cluster, job, options=options)
            with_base.append(time.process_time() - start)
        else:
            rows.append({"cluster": file, "gpus": cluster.num_gpus, "types": len({p.gpu.id for p in cluster.pools}),
                         "model": model, "time_s": min(cpu), "wall_s": min(runs), "with_baselines_s": min(with_base),
                         "candidates": result.candidates_evaluated, "stopped_by": result.stopped_by,
                         "complete": result.complete,
                         "gap": result.gap, "tokens_per_s": result.plans[0].estimate.tokens_per_s})
            print(f"time {file}: {min(cpu):.2f} s CPU ({min(runs):.2f} s wall, {min(with_base):.2f} s CPU with "
                  f"baselines), {result.candidates_evaluated:,} fast scores, "
                  f"{'complete' if result.complete else 'stopped by ' + str(result.stopped_by)}, "
                  f"gap {_gap_pct(result.gap)}", flush=True)
    return rows


def gains(catalog, skip_large: bool, options: SearchOptions) -> list[dict]:
    rows = []
    for file, (model, batch, seq) in GAIN_JOBS.items():
        cluster = load_cluster_file(ROOT / "examples" / file, catalog)
        if skip_large and cluster.num_gpus > 64:
            continue
        job = Job(catalog.model(model), batch, seq)
        for objective in (Objective.THROUGHPUT, Objective.COST):
            try:
                result = search(cluster, job, objective, top_k=1, options=options)
            except InfeasibleError as e:
                rows.append({"cluster": file, "model": model, "objective": objective.value, "error": str(e)[:80]})
                continue
            best = result.plans[0]
            base = {k: (v.estimate if v else None) for k, v in result.baselines.items()}
            rows.append({"cluster": file, "model": model, "objective": objective.value,
                         "tokens_per_s": best.estimate.tokens_per_s, "cost": best.estimate.cost_per_million_tokens_usd,
                         "gpus": best.estimate.num_gpus,
                         "megatron": best.gain_over.get("megatron"), "uniform": best.gain_over.get("uniform"),
                         "megatron_gpus": base["megatron"].num_gpus if base.get("megatron") else None})
            print(f"gain {file} {objective.value}: {best.gain_over}", flush=True)
    return rows


TARGETS_S = {16: 1.0, 64: 2.0, 1024: 10.0, 4096: 30.0}     # issue 3: search time on one core


ANYTIME_LIMITS_S = {1024: (2.0, 5.0), 4096: (5.0, 10.0)}


def anytime(catalog) -> list[dict]:
    """What a shorter time limit gives on the large clusters: the plan and the proven gap (or no
    plan, when the limit comes before the first one)."""
    rows = []
    for file, model, batch, seq in SIZES:
        cluster = load_cluster_file(ROOT / "examples" / file, catalog)
        job = Job(catalog.model(model), batch, seq)
        for limit in ANYTIME_LIMITS_S.get(cluster.num_gpus, ()):
            start = time.process_time()
            try:
                result = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=limit))
            except InputError as e:
                rows.append({"cluster": file, "gpus": cluster.num_gpus, "limit": limit,
                             "time_s": time.process_time() - start, "error": str(e)})
                print(f"anytime {file} limit {limit:g} s: {e}", flush=True)
                continue
            rows.append({"cluster": file, "gpus": cluster.num_gpus, "limit": limit, "time_s": time.process_time() - start,
                         "complete": result.complete, "gap": result.gap,
                         "tokens_per_s": result.plans[0].estimate.tokens_per_s})
            print(f"anytime {file} limit {limit:g} s: {rows[-1]['tokens_per_s']:,.0f} tokens/s, gap {_gap_pct(result.gap)}",
                  flush=True)
    return rows


def cli_run(catalog) -> list[dict]:
    """`hetplan plan` end to end on the 4,096-GPU example, as a user runs it (with the baselines):
    wall seconds and the child process's peak resident memory."""
    import resource
    import subprocess
    file, model, batch, seq = SIZES[-1]
    command = [sys.executable, "-m", "planner", "plan", "--cluster", f"examples/{file}", "--model", model,
               "--global-batch", str(batch), "--seq-len", str(seq), "--json"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    import json
    best = json.loads(done.stdout)["plans"][0]
    return [{"command": "hetplan " + " ".join(command[3:]), "wall_s": wall, "peak_mib": peak_mib,
             "tokens_per_s": best["metrics"]["tokens_per_s"] if "metrics" in best else None}]


# issue 22's targets for the whole `hetplan plan` command, CPU seconds on one core, answer proven
# (complete, or a stated gap of at most 1%); None: no target, a figure for comparison
COMMANDS = [  # (label, cluster file or None for the 128-GPU cluster below, model, batch, seq, extra args, target s)
    ("16 GPUs, 2 types", "a100-v100-16.yaml", "llama-2-7b", 64, 4096, (), None),
    ("64 GPUs, 3 types", "h100-a100-v100-64.yaml", "llama-2-70b", 256, 4096, (), None),
    ("64 GPUs, 3 types, --engine all", "h100-a100-v100-64.yaml", "llama-2-70b", 256, 4096, ("--engine", "all"), 3.0),
    ("128 GPUs, 3 types", None, "llama-2-70b", 512, 4096, (), 1.0),
    ("1,024 GPUs, 4 types", "cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048, (), 5.0),
    ("1,024 GPUs, 4 types, --time-limit 1", "cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048,
     ("--time-limit", "1"), None),
    ("4,096 GPUs, 4 types", "big-4types-4096.yaml", "llama-3.1-405b", 2048, 8192, (), 15.0),
]
CLUSTER_128 = """name: h100-a100-v100-128
pools:
  - {name: h100, gpu: h100-sxm, nodes: 4, gpus_per_node: 8, inter_node_gbps: 400}
  - {name: a100, gpu: a100-80gb-sxm, nodes: 6, gpus_per_node: 8, inter_node_gbps: 200}
  - {name: v100, gpu: v100-32gb-sxm, nodes: 6, gpus_per_node: 8, inter_node_gbps: 100}
between_pools_gbps: 100
"""


def command_cpu(max_gpus: int = 10**9, rounds: int = 1) -> list[dict]:
    """The whole `hetplan plan` command of each COMMANDS row as a subprocess, start-up and baselines
    included: the child's CPU seconds (user + system, getrusage) over `rounds` runs (the rows in turn,
    round after round: least and median), the answer's tokens/s, whether it is complete and its gap
    (from its text output; the worst of the rounds); rows of more than `max_gpus` GPUs are left out."""
    import json
    import resource
    import subprocess
    import tempfile
    import os
    rows = []
    # as an installed hetplan runs: pip compiles the .pyc files at install, so the children may write them
    # (PYTHONDONTWRITEBYTECODE, where set, would compile every module at every start), after one warm-up start
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "planner", "plan", "--help"], cwd=ROOT, env=env, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        cluster_128 = Path(tmp) / "h100-a100-v100-128.yaml"
        cluster_128.write_text(CLUSTER_128)
        for label, file, model, batch, seq, extra, target in [c for _ in range(rounds) for c in COMMANDS]:
            if int(label.split()[0].replace(",", "")) > max_gpus:
                continue
            cluster = str(cluster_128) if file is None else f"examples/{file}"
            shown = "h100-a100-v100-128.yaml (below)" if file is None else f"examples/{file}"
            args = ["plan", "--cluster", cluster, "--model", model, "--global-batch", str(batch), "--seq-len", str(seq),
                    *extra]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run([sys.executable, "-m", "planner", *args], cwd=ROOT, env=env, capture_output=True,
                                  text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            if done.returncode != 0:
                raise SystemExit(f"hetplan {' '.join(args)} failed: {done.stderr.strip()}")
            answers = _answers(done.stdout)
            gaps = [gap for _, gap in answers]
            row = {"label": label, "command": "hetplan " + " ".join(args).replace(cluster, shown), "cpu_s": cpu,
                   "target": target, "complete": all(gap == 0 for gap in gaps),
                   "gap": None if any(g is None for g in gaps) else max(gaps),
                   "tokens_per_s": max(tokens for tokens, _ in answers)}
            same = next((r for r in rows if r["label"] == label), None)
            if same is None:
                row["runs_s"], row["loads"] = [cpu], [os.getloadavg()[0]]
                rows.append(row)
            else:       # the rounds' worst answer (a time-limited search may answer better in one round)
                same["runs_s"].append(cpu)
                same["loads"].append(os.getloadavg()[0])
                same["cpu_s"] = statistics.median(same["runs_s"])
                same["complete"] &= row["complete"]
                same["gap"] = None if None in (same["gap"], row["gap"]) else max(same["gap"], row["gap"])
                same["tokens_per_s"] = min(same["tokens_per_s"], row["tokens_per_s"])
            print(f"command {label}: {cpu:.2f} s CPU, complete {row['complete']}, gap {_gap_pct(row['gap'])}, "
                  f"{row['tokens_per_s']:,.0f} tokens/s", flush=True)
    return rows


def _answers(text: str) -> list[tuple[float, float | None]]:
    """(tokens/s, gap) of each answer in `hetplan plan`'s text output (one, or one per engine with
    --engine all); gap 0 for a complete search, None when unknown. The text, not --json: printing a
    10 MB JSON object is not what a user's command costs."""
    import re
    out = []
    for match in re.finditer(r"^(?:#1 +([\d,]+) tokens/s|\S.*?\s([\d,]+) tokens/s .*?\((complete|gap [^,)]*))", text,
                             re.MULTILINE):
        tokens = float((match.group(1) or match.group(2)).replace(",", ""))
        proof = match.group(3) or text.splitlines()[0]
        gap = re.search(r"gap (\d+(?:\.\d+)?)%", proof)
        out.append((tokens, 0.0 if proof.endswith("complete") or proof == "complete" else
                    (float(gap.group(1)) / 100 if gap else None)))
    return out


def cpu_model() -> str:
    """The machine's processor as /proc/cpuinfo names it (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def reference_loop_s(rounds: int = 3) -> float:
    """CPU seconds of a fixed pure-Python loop (10^7 additions), the least of `rounds`: how fast this
    machine runs Python, to read the CPU seconds of the table against another machine's."""
    best = math.inf
    for _ in range(rounds):
        start, total = time.process_time(), 0
        for k in range(10**7):
            total += k
        best = min(best, time.process_time() - start)
    return best


def command_section(rows: list[dict], command: str, reference_s: float | None = None) -> list[str]:
    """The markdown of the whole-command table (issue 22's targets), each command's median CPU seconds
    against its target, and the machine they were measured on (its processor and `reference_s`,
    reference_loop_s)."""
    rounds = max((len(r["runs_s"]) for r in rows), default=1)
    loads = [load for r in rows for load in r["loads"]] or [0.0]
    lines = ["## The command line, CPU seconds", "",
             f"Generated by `{command}`. Each `hetplan plan` command as a subprocess, start-up and the two "
             "baselines included (with `--engine all`, one search per engine): the child's CPU seconds (user + "
             "system), with compiled bytecode as an installed hetplan has it (one warm-up start first), every command "
             f"once a round, {rounds} rounds (load average, 1 min, {min(loads):.1f}-{max(loads):.1f} after the runs; "
             "a busy machine inflates CPU seconds too). *Proven*: "
             "complete, or a stated gap of at most 1%. CPU seconds are this machine's: "
             f"{cpu_model()}, {os.cpu_count()} cores"
             + ("" if reference_s is None else
                f", where a pure-Python loop of 10^7 additions takes {reference_s:.2f} CPU s "
                "(`search_benchmark.reference_loop_s`; a faster machine runs the table's commands in less)")
             + ". The 128-GPU cluster:", "",
             "```yaml", *CLUSTER_128.strip().splitlines(), "```", "",
             f"| command | CPU s, median of {rounds} | least - most | complete | gap | best tokens/s | target (median) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        proven = r["complete"] or (r["gap"] is not None and r["gap"] <= 0.01)
        verdict = ("" if r["target"] is None else
                   f"<= {r['target']:g} s proven: {'met' if proven and r['cpu_s'] <= r['target'] else 'NOT met'}")
        lines.append(f"| `{r['command']}` | {r['cpu_s']:.2f} | {min(r['runs_s']):.2f} - {max(r['runs_s']):.2f} | "
                     f"{'yes' if r['complete'] else 'no'} | "
                     f"{_gap_pct(r['gap'])} | {r['tokens_per_s']:,.0f} | {verdict} |")
    by_label = {r["label"]: r for r in rows}
    full, short = by_label.get("1,024 GPUs, 4 types"), by_label.get("1,024 GPUs, 4 types, --time-limit 1")
    if full and short:      # issue 22's anytime target: within 5% of the full search's plan
        ratio = short["tokens_per_s"] / full["tokens_per_s"]
        lines += ["", f"Anytime: `--time-limit 1` at 1,024 GPUs answers {ratio:.1%} of the full search's tokens/s "
                      f"(target: within 5%, {'met' if ratio >= 0.95 else 'NOT met'})."]
    return lines + [""]


def replace_section(path: Path, heading: str, lines: list[str]) -> None:
    """Put `lines` in place of the section of `path` that starts with `heading` (up to the next
    `## ` heading), or at the end when it has none: the other sections stay as they were."""
    old = path.read_text().splitlines() if path.exists() else []
    start = next((k for k, line in enumerate(old) if line.strip() == heading), None)
    if start is None:
        new = old + [""] + lines
    else:
        end = next((k for k in range(start + 1, len(old)) if old[k].startswith("## ")), len(old))
        new = old[:start] + lines + old[end:]
    path.write_text("\n".join(new).rstrip() + "\n")


METHOD_NOTES = [
    "## How the search prunes", "",
    "Best-first over the space (planner/search/planners.py `_best_first`), every step a lower bound that holds for",
    "every layer split, sample shares and knob setting of what it covers, so what is skipped could not have been kept:",
    "",
    "1. **List** every family of layouts (a chain's pool orders, or one mixed layout) with its *capacity bound* (all",
    "   work at each GPU's best per-sample rate), and sort them.",
    "2. **Screen** them lazily, cheapest capacity bound first, 32,768 (pool, family) cells per vectorised numpy pass",
    "   (planner/search/screen.py): for every micro-batch size, interleave, recompute and ZeRO class, the busiest",
    "   stage by water-filling the layers under memory caps that count each run's stages by their 1F1B in-flight",
    "   micro-batches, the fill and drain with every other stage holding its own slowest layer, and the transfers",
    "   every order has. A sentinel entry keyed by the smallest capacity bound not yet screened stands for the rest;",
    "   families whose capacity bound cannot win are never screened.",
    "3. **Bound in Python** (planner/search/bound.py) a screened chain of several pools for all its orders at once,",
    "   then per first pool (that run's exact positions, the rest in any order), then per order, each step keeping",
    "   only the knob settings the previous one left open: exact shares, per-stage memory caps by position, head,",
    "   transfers, ZeRO traffic, the optimizer step, and a fill that places the layers cheapest-first at the",
    "   water level where that is provably a lower bound.",
    "4. **Scan** a layout that comes out: score its open knob settings with the exact split (a greedy for the",
    "   convex min-max) and shares; keep the `rescore` (24) best fast scores.",
    "5. **Stop** at the first heap entry whose bound cannot beat the 24th best; re-score those 24 with",
    "   `planner.cost.evaluate` (a simulation per plan; lanes of identical replicas are simulated once per kind,",
    "   exactly), which alone ranks the plans; a kept candidate whose bound cannot enter the top k + 1 is not re-scored.",
    "6. **Across engines and settings** (the default best engine; offload, context and expert parallelism on auto):",
    "   each search after the first prunes at the best evaluated plan so far as well, so an engine none of whose",
    "   plans can beat it ends at once, and the baselines are searched once, for the winner.", "",
    "tests/test_search_bounds.py checks the screen and every Python bound against every candidate of random small",
    "spaces (including memory-bound ones); tests/test_schedule.py checks the lane simulation against the full one.",
    "The baselines run the same loop over their own (smaller) spaces.", "",
    "## Limits of the search space (stated, not silent)", "",
    "- Two layout families: *chain* (each stage on one pool, pools in any order, the same number of replicas d in",
    "  every stage, each pool holding floor(N_k / (d t_k)) stages) and *mixed* (every stage has",
    "  r_k = floor(N_k / (p t_k)) replicas of every chosen pool with uneven sample shares). Layouts mixing the",
    "  two are not searched.",
    "- Partial use of a pool (cost and deadline objectives) on a halving grid of nodes.",
    "- Micro-batch sizes: powers of two dividing the global batch. Interleave 1 or 2; interleaved plans need each",
    "  replica's micro-batches in whole groups of p (Megatron-LM's rule). Sequence parallelism always on with tp > 1.",
    "- With FlashAttention (the default cost options), selective recomputation is left out of single-pool stages:",
    "  it stores exactly the activations that no recomputation stores (the attention scores are never kept) and",
    "  adds the attention core's recomputation to every backward pass. Mixed stages keep it (their shares follow",
    "  the pass times). Selective/full recompute are also skipped in a scan when the same knobs without",
    "  recompute fit and memory does not limit the split (recomputation then only adds time).",
    "- `complete` is a statement about `planner.cost.evaluate`: no candidate of the space beats the answer by",
    "  it. Fast scores rank the candidates and the 24 best are re-scored by `evaluate`; every other candidate has",
    "  a lower bound on its evaluated time (docs/cost-model.md, 'One cost model in the search'); those whose",
    "  bound is below the answer's are re-scored too (at most `SearchOptions.verify`, default 64), and when what",
    "  the threshold pruned could still win, a proof pass visits everything below the answer's key. Otherwise",
    "  `complete=False` with `gap`: how much better, by `evaluate`, a candidate not evaluated could at most be.",
    "- Two limits cut a search short, and `SearchResult` says which (`stopped_by`): the deterministic fast-score",
    "  budget (`SearchOptions.max_fast_scores`, default 200,000) and the time limit in CPU seconds of the",
    "  searching thread (`SearchOptions.time_limit_s`, default 20 s, `hetplan plan --time-limit S`; each",
    "  baseline gets `baseline_time_limit_s`, default 5 s): other load on the machine does not cut a search",
    "  shorter. For throughput a greedy first plan comes first (planner/search/greedy.py, at most 50% of the",
    "  limit, 0.02-0.2 CPU s up to 4,096 GPUs), then 75% of what is left goes to the best-first loop (at most 30% to listing the families, 64 pools",
    "  have 2^64 subsets) and the rest to re-scoring with the cost model; until the loop has a plan it may use",
    "  the whole limit. When nothing is found in time the search raises `InputError('time_limit', ...)`.",
    "- The exhaustive baseline scores every layout and knob setting of this space with `planner.cost.evaluate`",
    "  (no pruning, no fast model), with the exact min-max layer split.", ""]


def _pct(x):
    return "-" if x is None else f"{x:+.1%}"


def write_markdown(path: Path, command: str, opt, times, gain_rows, anytime_rows=(), cli_rows=()) -> None:
    lines = ["# Planner search performance", "",
             f"Generated by `{command}` (one core, pure Python). All numbers are planner.cost.evaluate's.", ""]
    if opt:
        worst = min(r["ratio"] for r in opt)
        lines += ["## Optimality against exhaustive search", "",
                  f"{len(opt)} random clusters of at most 16 GPUs and 2-3 GPU types (seeded). Ratio: the search's best "
                  f"over the exhaustive optimum on the objective (1.0 = equal; exhaustive search scores every layout "
                  f"and knob setting of the same space with the cost model). Worst ratio: **{worst:.4f}**; "
                  f"within 1%: {sum(r['ratio'] >= 0.99 for r in opt)}/{len(opt)}.", "",
                  "| # | cluster | model | batch | seq | objective | ratio | search s | exhaustive s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {r['cluster']} | {r['model']} | {r['batch']} | {r['seq']} | {r['objective']} | "
                  f"{r['ratio']:.4f} | {r['ours_s']:.2f} | {r['exhaustive_s']:.1f} |" for k, r in enumerate(opt, 1)]
        lines.append("")
    if times:
        lines += ["## Search time", "", "Throughput objective; the fastest of the runs. `search s`: CPU seconds of "
                  "`search(..., baselines=False)` (the search, the re-scoring with the cost model and the Pareto "
                  "front; single-threaded, so CPU time is one core's time, which a shared machine does not "
                  "inflate); `wall s`: its SearchResult.search_time_s; `with baselines s`: CPU seconds of the "
                  "whole `search()` call with the megatron and uniform baselines, as the app and `hetplan plan` "
                  "run it.", "",
                  "| cluster | GPUs | types | model | search s | wall s | with baselines s | fast scores | complete | gap | best tokens/s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in times:
            if "error" in r:
                lines.append(f"| {r['cluster']} | {r['gpus']:,} | {r['types']} | {r['model']} | {r['time_s']:.2f} | "
                             f"| | | no: {r['error']} | | |")
                continue
            lines.append(f"| {r['cluster']} | {r['gpus']:,} | {r['types']} | {r['model']} | {r['time_s']:.2f} | "
                         f"{r['wall_s']:.2f} | {r['with_baselines_s']:.2f} | {r['candidates']:,} | "
                         f"{_complete_cell(r)} | {_gap_pct(r['gap'])} | "
                         f"{r['tokens_per_s']:,.0f} |")
        lines.append("")
        lines += [f"Growth from {a['gpus']:,} to {b['gpus']:,} GPUs ({a['types']} to {b['types']} types): "
                  f"x{b['gpus'] / a['gpus']:.0f} GPUs, x{b['time_s'] / a['time_s']:.1f} search time"
                  + ("" if b.get("complete", True) else f" (the larger search {'stopped at its ' + b['stopped_by'] if b.get('stopped_by') else 'was not proven complete'}"
                     f"{'' if b.get('gap') is None else ', gap ' + format(b['gap'], '.1%')})") + "."
                  for a, b in zip(times, times[1:])]
        lines.append("")
        verdicts = []
        for r in times:
            target = TARGETS_S.get(r["gpus"])
            if target is None or "error" in r:
                continue
            met = r["time_s"] <= target and r["complete"]
            verdicts.append(f"{r['gpus']:,} GPUs: {r['time_s']:.2f} s against {target:g} s, "
                            f"{'met' if met else 'NOT met'}{'' if r['complete'] else ' (not proven complete)'}")
        if verdicts:
            lines += ["**Targets** (complete search, CPU seconds of `search s`): " + "; ".join(verdicts) + ".", ""]
    if anytime_rows:
        lines += ["## Shorter time limits", "",
                  "The search is anytime: cut short, it returns its best plan and the gap it proved. CPU seconds of "
                  "`search(..., baselines=False, options=SearchOptions(time_limit_s=LIMIT))`. Before the search "
                  "completes, a longer limit is not always better: the plans it has reached, and so the 24 it "
                  "re-scores with the cost model, depend on where the limit cuts it. When the limit cuts the "
                  "listing of the families short (30% of the loop's share), the families not listed are bounded "
                  "by every GPU of the cluster at its best rate, and the gap is large.", "",
                  "| cluster | GPUs | limit s | search s | complete | gap | best tokens/s |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['cluster']} | {r['gpus']:,} | {r['limit']:g} | {r['time_s']:.2f} | no plan yet | | |"
                  if "error" in r else
                  f"| {r['cluster']} | {r['gpus']:,} | {r['limit']:g} | {r['time_s']:.2f} | "
                  f"{'yes' if r['complete'] else 'no'} | {_gap_pct(r['gap'])} | {r['tokens_per_s']:,.0f} |" for r in anytime_rows]
        lines.append("")
    if cli_rows:
        lines += ["## The command line, end to end", "",
                  "One run of the command below (it also runs the two baselines), as a subprocess: wall seconds "
                  "and the child's peak resident memory (`getrusage`).", ""]
        lines += [f"- `{r['command']}`: {r['wall_s']:.1f} s wall, {r['peak_mib']:,.0f} MiB peak; best plan "
                  f"{r['tokens_per_s']:,.0f} tokens/s." for r in cli_rows]
        lines.append("")
    if gain_rows:
        lines += ["## Gain over the baselines", "",
                  "(a) megatron: best uniform plan on one GPU type; (b) uniform: every GPU, layers and samples split evenly.", "",
                  "| cluster | model | objective | GPUs used | tokens/s | $/M tokens | vs (a) megatron | vs (b) uniform |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in gain_rows:
            if "error" in r:
                lines.append(f"| {r['cluster']} | {r['model']} | {r['objective']} | infeasible: {r['error']} | | | | |")
            else:
                lines.append(f"| {r['cluster']} | {r['model']} | {r['objective']} | {r['gpus']} | {r['tokens_per_s']:,.0f} | "
                             f"{r['cost']:.3f} | {_pct(r['megatron'])} | {_pct(r['uniform'])} |")
        lines.append("")
    lines += METHOD_NOTES
    path.write_text("\n".join(lines) + "\n")


def _gap_pct(value) -> str:
    return "unknown" if value is None else f"{value:.1%}"


def _complete_cell(row: dict) -> str:
    if row["complete"]:
        return "yes"
    return "no: " + (row["stopped_by"] or "not proven")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-large", action="store_true", help="skip the 1,024 and 4,096 GPU clusters")
    parser.add_argument("--max-gpus", type=int, default=None, help="search times: only clusters up to this size")
    parser.add_argument("--parts", default="optimality,times,anytime,cli,gains",
                        help="comma-separated; also `commands`: issue 22's whole-command CPU table, which rewrites "
                             "only its own section of --out (run alone, the other sections stay)")
    parser.add_argument("--repeat", type=int, default=3, help="search-time runs per size (the fastest is reported); "
                        "with --parts commands, rounds of the commands (median and range)")
    parser.add_argument("--max-fast-scores", type=int, default=SearchOptions().max_fast_scores)
    parser.add_argument("--time-limit", type=float, default=SearchOptions().time_limit_s,
                        help="SearchOptions.time_limit_s (seconds, wall clock) of every search")
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = parser.parse_args()
    catalog = load_catalog()
    parts = set(args.parts.split(","))
    opt = optimality(catalog, args.clusters, args.seed) if "optimality" in parts else []
    options = SearchOptions(max_fast_scores=args.max_fast_scores, time_limit_s=args.time_limit)
    max_gpus = args.max_gpus if args.max_gpus is not None else (64 if args.skip_large else 10**9)
    times = search_times(catalog, max_gpus, args.repeat, options) if "times" in parts else []
    gain_rows = gains(catalog, args.skip_large, options) if "gains" in parts else []
    anytime_rows = anytime(catalog) if "anytime" in parts and not args.skip_large else []
    cli_rows = cli_run(catalog) if "cli" in parts and not args.skip_large else []
    command = "python " + " ".join(sys.argv)
    if parts - {"commands"}:
        write_markdown(Path(args.out), command, opt, times, gain_rows, anytime_rows, cli_rows)
    if "commands" in parts:
        reference_s = reference_loop_s()
        replace_section(Path(args.out), "## The command line, CPU seconds",
                        command_section(command_cpu(max_gpus, args.repeat), command, reference_s))


if __name__ == "__main__":
    main()
