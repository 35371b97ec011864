"""How the default search's cost grows with GPUs, pools and layers (issue 22: "the growth of cost with
GPUs, pools and layers (a plot)").

    python benchmarks/growth_benchmark.py [--axes gpus,pools,layers] [--max-gpus 4096]
                                          [--out docs/performance.md] [--plot docs/img/search-growth.svg]

Each point is the search `hetplan plan` runs by default (the best of the real engines, with the
baselines; planner.search.search with engines=planner.engines.REAL, a LIMIT_S = 120-second limit, which
a point that reaches it says: not proven) in a fresh process, so no cache of one point serves the next: its CPU seconds
(time.process_time around the search, start-up not included), fast scores, whether it is complete
and its gap. Three axes, one varied at a time from a base job (llama-2-70b, sequence 4,096, 4
sequences per GPU of global batch):
  gpus    the same three pools (H100 : A100-80GB : V100 nodes 2 : 3 : 3, 8 GPUs a node), scaled
  pools   128 GPUs (16 nodes of 8) split over 2 to 6 pools of different GPU types
  layers  128 GPUs of the gpus axis, llama-2-70b's shape with 20 to 160 layers
Writes the table into --out (section "## Growth of the search's cost") and, when matplotlib is
installed (`pip install -r requirements-bench.txt`; not a dependency of hetplan), the plot to --plot (by default, with
--out, docs/img/search-growth.svg; without --out no plot, so that a run of some axes leaves it whole).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEQ = 4096
PER_GPU_BATCH = 4
BASE_GPUS = 128
GPU_AXIS = (16, 64, 128, 256, 512, 1024, 2048, 4096)
POOL_AXIS = (2, 3, 4, 5, 6)
LAYER_AXIS = (20, 40, 80, 120, 160)
PLOT = "docs/img/search-growth.svg"     # the plot beside the table that --out writes
LIMIT_S = 120.0     # each point's search limit in CPU seconds: a point that reaches it says so (not proven)
# the pools axis: 16 nodes of 8 GPUs dealt out over k pools in this order (two A100-80GB pools at
# different networks make the eighth)
POOL_GPUS = (("h100-sxm", 400), ("a100-80gb-sxm", 200), ("v100-32gb-sxm", 100), ("a100-40gb-sxm", 200),
             ("l40s", 100), ("h200-sxm", 400), ("rtx-4090", 25), ("a100-80gb-sxm", 25))


def three_pools(gpus: int) -> dict:
    """The gpus axis' cluster: H100, A100-80GB and V100 nodes of 8 in proportion 2 : 3 : 3 (as
    examples/h100-a100-v100-64.yaml), at least one node each."""
    nodes = max(3, gpus // 8)
    h100 = max(1, round(nodes * 2 / 8))
    a100 = max(1, round(nodes * 3 / 8))
    v100 = max(1, nodes - h100 - a100)
    return {"name": f"three-pools-{gpus}", "between_pools_gbps": 100, "pools": [
        {"name": "h100", "gpu": "h100-sxm", "nodes": h100, "gpus_per_node": 8, "inter_node_gbps": 400},
        {"name": "a100", "gpu": "a100-80gb-sxm", "nodes": a100, "gpus_per_node": 8, "inter_node_gbps": 200},
        {"name": "v100", "gpu": "v100-32gb-sxm", "nodes": v100, "gpus_per_node": 8, "inter_node_gbps": 100}]}


def pools_of(k: int) -> dict:
    """The pools axis' cluster: BASE_GPUS GPUs (nodes of 8) dealt out as evenly as can be over k pools."""
    nodes = BASE_GPUS // 8
    counts = [nodes // k + (1 if j < nodes % k else 0) for j in range(k)]
    return {"name": f"pools-{k}", "between_pools_gbps": 100, "pools": [
        {"name": f"p{j}", "gpu": gpu, "nodes": n, "gpus_per_node": 8, "inter_node_gbps": gbps}
        for j, ((gpu, gbps), n) in enumerate(zip(POOL_GPUS, counts))]}


def points(axes: set[str], max_gpus: int) -> list[tuple[str, int, dict, int]]:
    """(axis, x, cluster dict, layers) of every point measured."""
    out = [("gpus", g, three_pools(g), 0) for g in GPU_AXIS if "gpus" in axes and g <= max_gpus]
    out += [("pools", k, pools_of(k), 0) for k in POOL_AXIS if "pools" in axes]
    out += [("layers", n, three_pools(BASE_GPUS), n) for n in LAYER_AXIS if "layers" in axes]
    return out


def measure(cluster: dict, layers: int) -> dict:
    """One point, in this process: the default search's CPU seconds and what it answered."""
    from catalog import cluster_from_dict, load_catalog
    from planner.engines import REAL
    from planner.search import SearchOptions, search
    from planner.types import Job, Objective
    catalog = load_catalog()
    built = cluster_from_dict(cluster, catalog)
    model = catalog.model("llama-2-70b")
    if layers:
        model = replace(model, id=f"llama-2-70b-{layers}-layers", layers=layers)
    gpus = sum(p["nodes"] * p["gpus_per_node"] for p in cluster["pools"])
    job = Job(model=model, global_batch=PER_GPU_BATCH * gpus, seq_len=SEQ)
    start = time.process_time()
    found = search(built, job, Objective.THROUGHPUT, options=SearchOptions(time_limit_s=LIMIT_S), engines=REAL)
    cpu = time.process_time() - start
    return {"cpu_s": cpu, "gpus": gpus, "layers": model.layers, "pools": len(cluster["pools"]),
            "complete": found.complete, "gap": found.gap, "candidates": found.candidates_evaluated,
            "tokens_per_s": found.plans[0].estimate.tokens_per_s}


def run_point(cluster: dict, layers: int) -> dict:
    """measure() in a fresh Python process."""
    done = subprocess.run([sys.executable, __file__, "--point", json.dumps({"cluster": cluster, "layers": layers})],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"point {cluster['name']} ({layers or 'base'} layers) failed: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


AXIS_TITLE = {"gpus": "GPUs (3 pools)", "pools": f"pools ({BASE_GPUS} GPUs)",
              "layers": f"layers ({BASE_GPUS} GPUs, 3 pools)"}


def section(rows: list[dict], command: str, plot: str | None) -> str:
    lines = ["## Growth of the search's cost", "",
             f"Generated by `{command}` (load: {_load()}). The default search (the best of the real engines, "
             f"with the baselines, within a {LIMIT_S:g}-second limit) of llama-2-70b's shape at sequence {SEQ:,} and "
             f"{PER_GPU_BATCH} sequences per GPU of global batch, one axis varied at a time; each point in a fresh "
             f"process, CPU seconds of the search alone (start-up not included; one core). The pools axis deals "
             f"{BASE_GPUS} GPUs over 2-6 pools of different GPU types; the layers axis changes only the layer count "
             f"on {BASE_GPUS} GPUs of three pools.", ""]
    if plot:
        lines += [f"![search CPU seconds against GPUs, pools and layers]({plot})", ""]
    lines += ["| axis | x | GPUs | pools | layers | search CPU s | candidates scored | complete | gap | best tokens/s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = "-" if r["gap"] is None else f"{r['gap']:.1%}"
        lines.append(f"| {r['axis']} | {r['x']:,} | {r['gpus']:,} | {r['pools']} | {r['layers']} | {r['cpu_s']:.2f} | "
                     f"{r['candidates']:,} | {'yes' if r['complete'] else 'no'} | {gap} | {r['tokens_per_s']:,.0f} |")
    lines.append("")
    for axis in ("gpus", "pools", "layers"):
        got = [r for r in rows if r["axis"] == axis]
        if len(got) >= 2:
            first, last = got[0], got[-1]
            lines.append(f"- {AXIS_TITLE[axis]}: x{last['x'] / first['x']:.3g} from {first['x']:,} to {last['x']:,}, "
                         f"search CPU x{last['cpu_s'] / first['cpu_s']:.3g} ({first['cpu_s']:.2f} -> "
                         f"{last['cpu_s']:.2f} s).")
    return "\n".join(lines) + "\n"


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


def draw(rows: list[dict], path: Path) -> bool:
    """The three axes side by side (log-log for GPUs); False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    axes_used = [a for a in ("gpus", "pools", "layers") if any(r["axis"] == a for r in rows)]
    fig, axes = plt.subplots(1, len(axes_used), figsize=(4 * len(axes_used), 3.2), squeeze=False)
    for ax, axis in zip(axes[0], axes_used):
        got = [r for r in rows if r["axis"] == axis]
        ax.plot([r["x"] for r in got], [r["cpu_s"] for r in got], marker="o")
        for r in got:
            if not r["complete"]:
                ax.annotate("not proven", (r["x"], r["cpu_s"]), fontsize=7)
        if axis == "gpus":
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        ax.set_xlabel(AXIS_TITLE[axis])
        ax.set_ylabel("search CPU s")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg")
    plt.close(fig)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--axes", default="gpus,pools,layers", help="comma-separated: gpus, pools, layers")
    ap.add_argument("--max-gpus", type=int, default=4096, help="leave out gpus-axis points above this")
    ap.add_argument("--out", default=None, help="markdown file whose growth section is replaced")
    ap.add_argument("--plot", default=None, help=f"SVG written when matplotlib is installed (default: {PLOT} with "
                    "--out, none without: a run of some axes does not replace the whole plot)")
    ap.add_argument("--point", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.point:
        given = json.loads(args.point)
        print(json.dumps(measure(given["cluster"], given["layers"])))
        return
    axes = {a.strip() for a in args.axes.split(",") if a.strip()}
    unknown = axes - set(AXIS_TITLE)
    if unknown:
        raise SystemExit(f"--axes: unknown {', '.join(sorted(unknown))}; use gpus, pools, layers")
    rows = []
    for axis, x, cluster, layers in points(axes, args.max_gpus):
        row = {"axis": axis, "x": x, **run_point(cluster, layers)}
        rows.append(row)
        print(f"{axis} {x:,}: {row['cpu_s']:.2f} s CPU, complete {row['complete']}, {row['tokens_per_s']:,.0f} tokens/s",
              flush=True)
    plot, plot_path = None, args.plot or (PLOT if args.out else None)
    if plot_path and draw(rows, ROOT / plot_path):
        plot = str(Path(plot_path).relative_to("docs")) if plot_path.startswith("docs/") else plot_path
    command = "python benchmarks/growth_benchmark.py" + "".join(
        f" {flag} {value}" for flag, value in (("--axes", args.axes), ("--max-gpus", args.max_gpus),
                                               ("--out", args.out), ("--plot", args.plot))
        if value is not None and str(value) != str(ap.get_default(flag.strip("-").replace("-", "_"))))
    text = section(rows, command, plot)
    print(text)
    if args.out:
        from benchmarks.search_benchmark import replace_section
        replace_section(Path(args.out), "## Growth of the search's cost", text.splitlines())


if __name__ == "__main__":
    main()
