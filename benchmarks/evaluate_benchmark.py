"""Evaluate benchmark: CPU milliseconds per planner.cost.evaluate (the cost model) on the plans a search answers.

    python benchmarks/evaluate_benchmark.py [--sizes 128,1024,4096] [--repeat 3] [--rounds 1]
                                            [--save FILE.json] [--before FILE.json] [--by-caller]

For each job it runs the search (best engine, as `hetplan plan` does, in this process), timing the search and the
evaluate calls it makes (every planner module's `evaluate` wrapped while it runs), then times evaluate on its answers
(the ranked plans and the baselines' plans): as the search reports them (detail), as it ranks incumbents
(detail=False), and the top plan with its timeline (as the app and `--json` ask). CPU time
(time.process_time), the best of --repeat runs; with --rounds, the whole measure (search included) that many
times, each figure the least of them. `--save` writes the figures as JSON; `--before` reads
such a file (written by an earlier version of the code) and prints it beside these figures with the ratio.
The jobs' answers must be the same plans for the comparison to hold; the script says when they are not.
"""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from catalog import cluster_from_dict, load_catalog, load_cluster_file  # noqa: E402
from planner.cost import evaluate  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import search  # noqa: E402
from planner.types import Job, Objective  # noqa: E402

JOBS = {  # GPUs -> (cluster file, model, global batch, sequence length)
    128: (None, "llama-2-70b", 512, 4096),             # search_benchmark's 128-GPU cluster of 3 types
    1024: ("examples/cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048),
    4096: ("examples/big-4types-4096.yaml", "llama-3.1-405b", 2048, 8192),
}


def cpu_s(call, repeat: int) -> float:
    """The least CPU seconds of `repeat` runs of call()."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


@contextmanager
def evaluate_timed(spent: list[float], callers: dict | None = None):
    """Every planner module's planner.cost.evaluate, timed while the block runs: each call's CPU seconds
    appended to `spent`; with `callers`, also summed there by (engine, calling function, detail)."""
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return evaluate(*args, **kwargs)
        finally:
            spent.append(time.process_time() - start)
            if callers is not None:
                caller = sys._getframe(1).f_code.co_name
                if caller in ("_evaluate_plan", "_full"):          # the search's two wrappers: who asked them
                    caller = f"{sys._getframe(2).f_code.co_name} ({caller})"
                key = (args[1].engine, caller, kwargs.get("detail", True))
                calls, cpu = callers.get(key, (0, 0.0))
                callers[key] = (calls + 1, cpu + spent[-1])
    users = [module for name, module in sys.modules.items()
             if name.startswith("planner") and getattr(module, "evaluate", None) is evaluate]
    for module in users:
        module.evaluate = timed
    try:
        yield
    finally:
        for module in users:
            module.evaluate = evaluate


def measure(gpus: int, repeat: int, by_caller: bool = False) -> dict:
    path, model, batch, seq = JOBS[gpus]
    catalog = load_catalog()
    if path is None:
        cluster, path = cluster_from_dict(yaml.safe_load(CLUSTER_128), catalog), "h100-a100-v100-128"
    else:
        cluster = load_cluster_file(ROOT / path, catalog)
    job = Job(catalog.model(model), batch, seq)
    spent: list[float] = []
    callers: dict | None = {} if by_caller else None
    start = time.process_time()
    with evaluate_timed(spent, callers):
        result = search(cluster, job, Objective.THROUGHPUT, engines=REAL)
    search_s = time.process_time() - start
    for (engine, caller, detail), (calls, cpu) in sorted((callers or {}).items(), key=lambda kv: -kv[1][1]):
        print(f"{gpus:,} GPUs: {engine} {caller}{'' if detail else ' detail=False'}: {calls} calls, "
              f"{cpu:.3f} CPU s", file=sys.stderr)
    plans = [sp.plan for sp in result.plans] + [sp.plan for sp in result.baselines.values() if sp is not None]
    tokens = job.tokens_to_train
    detail = cpu_s(lambda: [evaluate(cluster, plan, tokens) for plan in plans], repeat) / len(plans)
    ranking = cpu_s(lambda: [evaluate(cluster, plan, tokens, detail=False) for plan in plans], repeat) / len(plans)
    evaluate(cluster, plans[0], tokens, timeline=True)        # pandas imported once, outside the timing
    timeline = cpu_s(lambda: evaluate(cluster, plans[0], tokens, timeline=True), repeat)
    top = plans[0]
    return {"gpus": gpus, "job": f"{Path(path).name} {model} {batch} {seq}", "plans": len(plans),
            "top_plan": f"{top.num_stages} stages x {len(top.stages[0].replicas)} replicas, {top.schedule.value}"
                        f" v={top.interleave}, {top.engine}",
            "tokens_per_s": [evaluate(cluster, plan, tokens).tokens_per_s for plan in plans],
            "detail_ms": 1e3 * detail, "ranking_ms": 1e3 * ranking, "timeline_ms": 1e3 * timeline,
            "search_s": search_s, "search_evaluate_s": sum(spent), "search_evaluate_calls": len(spent)}


def least(rounds: list[dict]) -> dict:
    """The first round's row with each CPU figure the least of the rounds'."""
    row = dict(rounds[0])
    for key in ("detail_ms", "ranking_ms", "timeline_ms", "search_s", "search_evaluate_s"):
        row[key] = min(r[key] for r in rounds)
    return row


def table(rows: list[dict], before: dict[int, dict]) -> str:
    def cell(row, key, digits=1):
        old = before.get(row["gpus"])
        if old is None or key not in old:
            return f"{row[key]:.{digits}f}"
        return f"{old[key]:.{digits}f} → {row[key]:.{digits}f} ({old[key] / row[key]:.1f}x)"
    lines = ["| GPUs | job | plans | top plan | evaluate, ms CPU per plan | detail=False (incumbents) | "
             "top plan with timeline | the search, CPU s | in its evaluate calls, CPU s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['gpus']:,} | {row['job']} | {row['plans']} | {row['top_plan']} | "
                     f"{cell(row, 'detail_ms')} | {cell(row, 'ranking_ms')} | {cell(row, 'timeline_ms')} | "
                     f"{cell(row, 'search_s', 2)} | {cell(row, 'search_evaluate_s', 2)} "
                     f"({row['search_evaluate_calls']} calls) |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,1024,4096", help="which jobs, by GPUs (of 128, 1024, 4096)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="measure each job this many times, keep the least")
    parser.add_argument("--save", help="write the figures to this JSON file")
    parser.add_argument("--before", help="a JSON file of --save from an earlier version, shown beside these")
    parser.add_argument("--by-caller", action="store_true",
                        help="also list (on stderr) the search's evaluate calls and CPU by engine and caller")
    args = parser.parse_args()
    rows = [least([measure(int(n), args.repeat, args.by_caller) for _ in range(args.rounds)])
            for n in args.sizes.split(",")]
    before = {}
    if args.before:
        before = {row["gpus"]: row for row in json.loads(Path(args.before).read_text())}
        for row in rows:
            old = before.get(row["gpus"])
            if old is not None and old["tokens_per_s"] != row["tokens_per_s"]:
                print(f"note: the {row['gpus']}-GPU answers differ from --before's (tokens/s "
                      f"{old['tokens_per_s']} then, {row['tokens_per_s']} now)", file=sys.stderr)
    if args.save:
        Path(args.save).write_text(json.dumps(rows, indent=1))
    print(table(rows, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
