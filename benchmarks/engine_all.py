"""What `hetplan plan --engine all` (its text output) costs and answers, job by job.

    python benchmarks/engine_all.py [--only LABEL] [--save FILE | --compare FILE]

For each job below, in this process: the command's searches as it runs them without --json and --out
(planner.cli.plan_cmd._engines_in_turn: each engine's best plan alone, seeded by the answers before it),
with their CPU seconds, the cost model's evaluations (re-scorings without the breakdown, and full ones)
and the fast scores (Scorer.score calls). --save FILE writes each engine's answer as the text path gets
it (plan, estimate, complete, gap, stopped_by, notes, guarantee, idle pools), or why it has none;
--compare FILE says how many of them changed since, idle pools apart (their reasons say what a search
saw, and a seed changes that: docs/performance.md, "--engine all"), and lists them.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner.cost as cost_module  # noqa: E402
import planner.search.planners as planners_module  # noqa: E402
from catalog import load_catalog, load_cluster_file  # noqa: E402
from catalog.formats import plan_to_dict  # noqa: E402
from planner.cli import build_parser  # noqa: E402
import planner.cli.plan_cmd as plan_cmd  # noqa: E402
from planner.engines import ENGINES  # noqa: E402
from planner.report import estimate_to_dict  # noqa: E402
from planner.search.score import Scorer  # noqa: E402

search_module = sys.modules["planner.search.search"]

JOBS = [  # label, `hetplan plan` arguments before --engine all
    ("16 GPUs", "--cluster examples/a100-v100-16.yaml --model llama-2-7b --global-batch 64 --seq-len 4096"),
    ("16 GPUs, 32k", "--cluster examples/a100-v100-16.yaml --model llama-2-7b --global-batch 32 --seq-len 32768"),
    ("64 GPUs", "--cluster examples/h100-a100-v100-64.yaml --model llama-2-70b --global-batch 256 --seq-len 4096"),
    ("64 GPUs, cost", "--cluster examples/h100-a100-v100-64.yaml --model llama-2-70b --global-batch 256 "
                      "--seq-len 4096 --objective cost"),
    ("64 GPUs, mixtral", "--cluster examples/h100-a100-v100-64.yaml --model mixtral-8x7b --global-batch 128 "
                         "--seq-len 4096"),
    ("lab-mix", "--cluster examples/lab-mix.yaml --model llama-2-13b --global-batch 128 --seq-len 4096"),
    ("lab-mix, energy", "--cluster examples/lab-mix.yaml --model llama-2-7b --global-batch 64 --seq-len 4096 "
                        "--objective energy"),
    ("consumer-mix", "--cluster examples/consumer-mix.yaml --model llama-2-7b --global-batch 32 --seq-len 2048"),
    ("single-node-8", "--cluster examples/single-node-8.yaml --model gpt3-1.3b --global-batch 32 --seq-len 2048"),
]


@contextlib.contextmanager
def counted(counts: dict):
    """planner.cost.evaluate (where the search modules call it) and Scorer.score, counted into `counts`."""
    real_evaluate, real_score = cost_module.evaluate, Scorer.score

    def evaluate(*args, **kwargs):
        counts["full" if kwargs.get("detail", True) else "re-scored"] += 1
        return real_evaluate(*args, **kwargs)

    def score(self, *args, **kwargs):
        counts["fast scores"] += 1
        return real_score(self, *args, **kwargs)

    modules = (cost_module, planners_module, search_module)
    for module in modules:
        module.evaluate = evaluate
    Scorer.score = score
    try:
        yield
    finally:
        for module in modules:
            module.evaluate = real_evaluate
        Scorer.score = real_score


def in_turn(args, cluster, model, names) -> list:
    """The command's searches in one process; before plan_cmd._engines_in_turn (94d5882, to --compare
    against), each engine as the command searched it then."""
    if hasattr(plan_cmd, "_engines_in_turn"):
        return plan_cmd._engines_in_turn(args, cluster, model, names)
    return [plan_cmd._engine_of_all(k, None, None, 1, False, args, cluster, model, names) for k in range(len(names))]


def run_job(catalog, arguments: str) -> tuple[dict, dict, float]:
    """Each engine's answer (or why it has none), the counts, and the CPU seconds of the searches."""
    args = build_parser().parse_args(["plan", *arguments.split(), "--engine", "all"])
    cluster = load_cluster_file(ROOT / args.cluster, catalog)
    model = catalog.model(args.model)
    names = tuple(ENGINES)
    counts = {"re-scored": 0, "full": 0, "fast scores": 0}
    with counted(counts):
        start = time.process_time()
        outcomes = in_turn(args, cluster, model, names)
        cpu = time.process_time() - start
    answers = {}
    for name, r in zip(names, outcomes):
        answers[name] = {"error": r} if isinstance(r, str) else {
            "plan": plan_to_dict(r.plans[0].plan, catalog, estimate_to_dict(r.plans[0].estimate)),
            "complete": r.complete, "gap": r.gap, "stopped_by": r.stopped_by, "notes": list(r.notes),
            "guarantee": r.guarantee, "idle": r.idle}
    return answers, counts, cpu


def changed(saved: dict, now: dict) -> list[str]:
    """The (job, engine) answers that differ, idle pools apart."""
    out = []
    for label in saved.keys() & now.keys():
        for engine in saved[label].keys() | now[label].keys():
            old, new = ({k: v for k, v in d.get(engine, {}).items() if k != "idle"} for d in (saved[label], now[label]))
            if old != new:
                fields = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                out.append(f"{label}: {engine} ({', '.join(fields)})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="the job of this label alone")
    parser.add_argument("--save", help="write each engine's answer to this JSON file")
    parser.add_argument("--compare", help="compare each engine's answer with those of this JSON file")
    args = parser.parse_args()
    catalog = load_catalog()
    records = {}
    for label, arguments in JOBS:
        if args.only and label != args.only:
            continue
        records[label], counts, cpu = run_job(catalog, arguments)
        print(f"{label}: {cpu:.2f} CPU s, " + ", ".join(f"{v:,} {k}" for k, v in counts.items()), flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(records, indent=1, sort_keys=True, default=str))
    if args.compare:
        saved = json.loads(Path(args.compare).read_text())
        now = json.loads(json.dumps(records, default=str))
        diff = changed(saved, now)
        total = sum(len(saved[label]) for label in saved.keys() & now.keys())
        print(f"{len(diff)} of {total} engine answers changed (idle pools apart)")
        for line in diff:
            print("  " + line)


if __name__ == "__main__":
    main()
